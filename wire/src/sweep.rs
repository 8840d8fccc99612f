//! Sweeps on the wire: `Sweep` ↔ [`SweepSpec`] (both directions, so a spec
//! file's sweep and a request's agree), and a result table to
//! `GetSweepResponse` rows.
//!
//! Zero values follow the proto's comments: `samples` 0 → 1,
//! `reduction_factor` 0 → 3, `config_json` "" → the plugin's defaults,
//! `mode` "" → by the metric's name, `keep_last` false → each trial keeps
//! its best checkpoint.

use crate::convert::invalid;
use std::collections::BTreeMap;
use tli_core::selection::Mode;
use tli_core::sweep::{Asha, Param, Scheduler, SweepSpec};
use tli_proto::v1 as pb;
use tonic::Status;

/// Most dimensions a request's space may have, and values per choice or grid.
pub const MAX_DIMENSIONS: usize = 64;
pub const MAX_VALUES: usize = 1024;
/// The longest key and JSON value text, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// A request's sweep as a spec (checked in shape by `SweepSpec::check_shape`
/// when the job spec is).
pub fn sweep_spec(s: &pb::Sweep) -> Result<SweepSpec, Status> {
    if s.space.len() > MAX_DIMENSIONS {
        return Err(invalid(format!(
            "sweep.space: {} keys; at most {MAX_DIMENSIONS}",
            s.space.len()
        )));
    }
    let mut space = BTreeMap::new();
    for (key, dim) in &s.space {
        if key.len() > MAX_KEY_BYTES || key.chars().any(char::is_control) || key.is_empty() {
            return Err(invalid(format!(
                "sweep.space: a key of {} bytes (or with control characters); keys are config \
                 paths such as \"learning_rate\" of at most {MAX_KEY_BYTES} bytes",
                key.len()
            )));
        }
        space.insert(key.clone(), param(key, dim)?);
    }
    let config = if s.config_json.trim().is_empty() {
        None
    } else {
        let value: serde_json::Value = serde_json::from_str(&s.config_json)
            .map_err(|e| invalid(format!("sweep.config_json: {e}")))?;
        Some(value)
    };
    let mode = match s.mode.as_str() {
        "" => None,
        m => Some(
            m.parse::<Mode>()
                .map_err(|e| invalid(format!("sweep.mode: {e}")))?,
        ),
    };
    let scheduler = match &s.scheduler {
        Some(pb::sweep::Scheduler::Asha(a)) => Scheduler::Asha(Asha {
            grace_period: a.grace_period,
            reduction_factor: if a.reduction_factor == 0 {
                3
            } else {
                a.reduction_factor
            },
            max_steps: a.max_steps,
        }),
        Some(pb::sweep::Scheduler::RunAll(r)) => Scheduler::RunAll {
            max_steps: r.max_steps,
        },
        None => return Err(invalid("sweep.scheduler: set asha or run_all")),
    };
    Ok(SweepSpec {
        plugin: s.plugin.clone(),
        config,
        space,
        samples: s.samples.max(1),
        seed: s.seed,
        metric: s.metric.clone(),
        mode,
        scheduler,
        pooled: s.pooled,
        keep_best: !s.keep_last,
    })
}

fn param(key: &str, dim: &pb::SearchDimension) -> Result<Param, Status> {
    use pb::search_dimension::Kind;
    let values = |v: &pb::JsonValues, what: &str| -> Result<Vec<serde_json::Value>, Status> {
        if v.json.len() > MAX_VALUES {
            return Err(invalid(format!(
                "sweep.space.{key}.{what}: {} values; at most {MAX_VALUES}",
                v.json.len()
            )));
        }
        v.json
            .iter()
            .enumerate()
            .map(|(i, text)| {
                if text.len() > MAX_VALUE_BYTES {
                    return Err(invalid(format!(
                        "sweep.space.{key}.{what}[{i}]: {} bytes; at most {MAX_VALUE_BYTES}",
                        text.len()
                    )));
                }
                serde_json::from_str(text).map_err(|e| {
                    invalid(format!(
                        "sweep.space.{key}.{what}[{i}]: not JSON ({e}); strings are quoted"
                    ))
                })
            })
            .collect()
    };
    Ok(match &dim.kind {
        Some(Kind::Choice(v)) => Param::Choice(values(v, "choice")?),
        Some(Kind::Grid(v)) => Param::Grid(values(v, "grid")?),
        Some(Kind::Uniform(r)) => Param::Uniform([r.low, r.high]),
        Some(Kind::LogUniform(r)) => Param::LogUniform([r.low, r.high]),
        Some(Kind::Int(r)) => Param::Int([r.low, r.high]),
        None => {
            return Err(invalid(format!(
                "sweep.space.{key}: set choice, grid, uniform, log_uniform or int"
            )))
        }
    })
}

/// A spec's sweep as the request's.
pub fn sweep_to_proto(s: &SweepSpec) -> pb::Sweep {
    use pb::search_dimension::Kind;
    let json = |v: &[serde_json::Value]| pb::JsonValues {
        json: v.iter().map(|x| x.to_string()).collect(),
    };
    let space = s
        .space
        .iter()
        .map(|(k, p)| {
            let kind = match p {
                Param::Choice(v) => Kind::Choice(json(v)),
                Param::Grid(v) => Kind::Grid(json(v)),
                Param::Uniform([low, high]) => Kind::Uniform(pb::RealRange {
                    low: *low,
                    high: *high,
                }),
                Param::LogUniform([low, high]) => Kind::LogUniform(pb::RealRange {
                    low: *low,
                    high: *high,
                }),
                Param::Int([low, high]) => Kind::Int(pb::IntRange {
                    low: *low,
                    high: *high,
                }),
            };
            (k.clone(), pb::SearchDimension { kind: Some(kind) })
        })
        .collect();
    pb::Sweep {
        plugin: s.plugin.clone(),
        config_json: s.config.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        space,
        samples: s.samples,
        seed: s.seed,
        metric: s.metric.clone(),
        mode: s.mode.map(|m| m.as_str().to_string()).unwrap_or_default(),
        scheduler: Some(match &s.scheduler {
            Scheduler::Asha(a) => pb::sweep::Scheduler::Asha(pb::AshaScheduler {
                grace_period: a.grace_period,
                reduction_factor: a.reduction_factor,
                max_steps: a.max_steps,
            }),
            Scheduler::RunAll { max_steps } => pb::sweep::Scheduler::RunAll(pb::RunAllScheduler {
                max_steps: *max_steps,
            }),
        }),
        pooled: s.pooled,
        keep_last: !s.keep_best,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sweep_goes_to_the_wire_and_back_unchanged() {
        let spec: SweepSpec = serde_json::from_value(json!({
            "plugin": "tft", "config": {"hidden_size": 16},
            "space": {"learning_rate": {"log_uniform": [1e-4, 1e-2]},
                      "dropout": {"grid": [0.0, 0.1]},
                      "trading.window": {"choice": [10, "x", [1, 2]]},
                      "layers": {"int": [1, 3]}},
            "samples": 3, "seed": 9, "metric": "valid_loss", "mode": "min",
            "scheduler": {"asha": {"grace_period": 50, "reduction_factor": 2, "max_steps": 400}},
            "keep_best": false
        }))
        .unwrap();
        assert_eq!(sweep_spec(&sweep_to_proto(&spec)).unwrap(), spec);
    }

    #[test]
    fn bad_sweeps_name_the_field() {
        let mut s = sweep_to_proto(
            &serde_json::from_value(json!({
                "plugin": "tft", "space": {"x": {"choice": [1]}}, "metric": "valid_loss",
                "scheduler": {"run_all": {"max_steps": 10}}
            }))
            .unwrap(),
        );
        s.space.insert(
            "y".into(),
            pb::SearchDimension {
                kind: Some(pb::search_dimension::Kind::Choice(pb::JsonValues {
                    json: vec!["adamw".into()],
                })),
            },
        );
        let e = sweep_spec(&s).unwrap_err();
        assert!(e.message().contains("sweep.space.y.choice[0]"), "{e}");
        s.space.remove("y");
        s.scheduler = None;
        assert!(sweep_spec(&s)
            .unwrap_err()
            .message()
            .contains("sweep.scheduler"));
    }
}
