//! Job specs on the wire: a `StartTrainingRequest` becomes a checked
//! [`JobSpec`] (the server), and a job-spec file becomes a request (the
//! client's `train start --spec`), both here so the two directions share
//! their rules.
//!
//! Zero values follow the proto's comments and the job-spec defaults
//! (`orchestrator::job`): seed 0 → 1, device "" → `cpu`, slice_steps 0 →
//! 10, checkpoint `every_steps`/`every_seconds` 0 → never (as in a file),
//! `keep` 0 → 3 (an absent checkpoint message gives the job-spec defaults),
//! synthetic seed 0 → 1, `features_json` "" → the default features.
//!
//! Before anything is built from a request, [`check_bounds`] refuses what
//! would cost the host without bound (found by the malformed-request corpus,
//! tests/python/hostile_requests.py): more tasks or assets than a job may
//! have (checked by counting, as 100 000 models × 100 000 assets would be
//! 10^10 planned tasks), synthetic data beyond [`MAX_SYNTHETIC_ROWS_PER_JOB`]
//! (built in the host's memory at submission), and names, plugin names,
//! paths and devices that are too long or hold control characters (they are
//! stored, shown in terminals and quoted in errors).

use crate::convert::invalid;
use crate::typed_configs;
use std::path::PathBuf;
use tli_core::executor::{ExecutorKind, SlurmJobOptions};
use tli_core::job::{
    self, AssetSpec, CheckpointPolicy, JobSpec, SyntheticAsset, DEFAULT_CHECKPOINT_KEEP,
    DEFAULT_SEED, DEFAULT_SLICE_STEPS, MAX_TASKS, SYNTHETIC_ROWS,
};
use tli_core::selection::{EarlyStopping, KeepBest, Mode, SelectionError};
use tli_data::features::FeatureConfig;
use tli_data::BarSource;
use tli_plugin_api::Device;
use tli_proto::v1 as pb;
use tonic::Status;

/// The longest job name, plugin name, asset path and device a request may
/// carry, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
pub const MAX_PLUGIN_NAME_BYTES: usize = 128;
pub const MAX_PATH_BYTES: usize = 4096;
pub const MAX_DEVICE_BYTES: usize = 32;
/// The longest time-zone name an asset may give (the longest IANA name has 32).
pub const MAX_TZ_BYTES: usize = 64;
/// Rows of a job's synthetic assets together (each row costs about 55 bytes
/// of host memory from submission on): as many as one asset may have.
pub const MAX_SYNTHETIC_ROWS_PER_JOB: u64 = *SYNTHETIC_ROWS.end() as u64;

/// Refuses a request whose size alone is a problem (see the module doc),
/// before any of it is converted.
pub fn check_bounds(req: &pb::StartTrainingRequest) -> Result<(), Status> {
    check_text("name", &req.name, MAX_NAME_BYTES)?;
    check_text("device", &req.device, MAX_DEVICE_BYTES)?;
    if req.assets.len() > MAX_TASKS {
        return Err(invalid(format!(
            "assets: {} assets; at most {MAX_TASKS} per job (split them into several jobs)",
            req.assets.len()
        )));
    }
    let per_model = req.assets.len().max(1) as u64;
    let tasks: u64 = req
        .model
        .iter()
        .chain(&req.models)
        .map(|m| if m.pooled { 1 } else { per_model })
        .sum();
    if tasks > MAX_TASKS as u64 {
        return Err(invalid(format!(
            "{tasks} tasks (models × assets); at most {MAX_TASKS} per job"
        )));
    }
    for (i, m) in req.model.iter().chain(&req.models).enumerate() {
        if let Some(pb::model_spec::Config::Plugin(p)) = &m.config {
            check_text(
                &format!("models[{i}].plugin.plugin"),
                &p.plugin,
                MAX_PLUGIN_NAME_BYTES,
            )?;
        }
    }
    let mut rows: u64 = 0;
    for (i, a) in req.assets.iter().enumerate() {
        check_text(
            &format!("assets[{i}].symbol"),
            &a.symbol,
            tli_data::bar_source::MAX_SYMBOL_BYTES,
        )?;
        check_text(&format!("assets[{i}].tz"), &a.tz, MAX_TZ_BYTES)?;
        match &a.source {
            Some(pb::asset_spec::Source::DataPath(path)) => {
                check_text(&format!("assets[{i}].data_path"), path, MAX_PATH_BYTES)?;
            }
            // One asset beyond the limit is named by the spec check.
            Some(pb::asset_spec::Source::Synthetic(s)) if s.rows <= MAX_SYNTHETIC_ROWS_PER_JOB => {
                rows += s.rows
            }
            Some(pb::asset_spec::Source::Synthetic(_)) => {}
            None => {}
        }
    }
    if rows > MAX_SYNTHETIC_ROWS_PER_JOB {
        return Err(invalid(format!(
            "assets: the synthetic assets have {rows} rows in all; at most \
             {MAX_SYNTHETIC_ROWS_PER_JOB} per job (they are built in the host's memory); \
             use fewer or shorter ones"
        )));
    }
    Ok(())
}

/// At most `max` bytes and no control character (NUL, escape sequences, …).
fn check_text(field: &str, text: &str, max: usize) -> Result<(), Status> {
    if text.len() > max {
        return Err(invalid(format!(
            "{field}: {} bytes; at most {max}",
            text.len()
        )));
    }
    if let Some((at, c)) = text.char_indices().find(|(_, c)| c.is_control()) {
        return Err(invalid(format!(
            "{field}: control character U+{:04X} at byte {at}; use printable text",
            c as u32
        )));
    }
    Ok(())
}

/// Turns a request into a job spec and runs [`JobSpec::check`] on it; every
/// problem is `INVALID_ARGUMENT` naming the field (`models[1].steps: …`).
pub fn job_spec(req: &pb::StartTrainingRequest) -> Result<JobSpec, Status> {
    check_bounds(req)?;
    let sweep = req
        .sweep
        .as_ref()
        .map(crate::sweep::sweep_spec)
        .transpose()?;
    let models: Vec<&pb::ModelSpec> = match (&req.model, req.models.is_empty()) {
        (None, true) if sweep.is_some() => Vec::new(),
        (_, _) if sweep.is_some() => {
            return Err(invalid(
                "sweep: its trials are the models; give neither model nor models",
            ))
        }
        (Some(m), true) => vec![m],
        (None, false) => req.models.iter().collect(),
        (Some(_), false) => {
            return Err(invalid(
                "model and models: give exactly one (both were given)",
            ))
        }
        (None, true) => {
            return Err(invalid(
                "model and models: give exactly one (neither was given), or a sweep",
            ))
        }
    };
    let models = match &sweep {
        Some(s) => {
            s.check_shape()
                .map_err(|e| invalid(format!("sweep: {e}")))?;
            s.models()
        }
        None => models
            .iter()
            .enumerate()
            .map(|(i, m)| model_spec(i, m))
            .collect::<Result<Vec<_>, _>>()?,
    };
    if req.assets.is_empty() {
        return Err(invalid("assets: at least one asset is needed"));
    }
    let assets = req
        .assets
        .iter()
        .enumerate()
        .map(|(i, a)| asset_spec(i, a))
        .collect::<Result<Vec<_>, _>>()?;
    let device = if req.device.is_empty() {
        Device::default()
    } else {
        req.device
            .parse()
            .map_err(|e| invalid(format!("device: {e}")))?
    };
    let features = if req.features_json.trim().is_empty() {
        FeatureConfig::default()
    } else {
        serde_json::from_str(&req.features_json)
            .map_err(|e| invalid(format!("features_json: {e}")))?
    };
    let spec = JobSpec {
        name: req.name.clone(),
        models,
        assets,
        seed: if req.seed == 0 {
            DEFAULT_SEED
        } else {
            req.seed
        },
        device,
        features,
        checkpoint: checkpoint_policy(req.checkpoint.as_ref()),
        slice_steps: if req.slice_steps == 0 {
            DEFAULT_SLICE_STEPS
        } else {
            req.slice_steps
        },
        executor: executor_kind(req.executor)?,
        slurm: slurm_options(req.slurm.as_ref()),
        walk_forward: req.walk_forward.as_ref().map(|w| job::WalkForward {
            folds: w.folds as usize,
            test_starts: w
                .test_starts_unix_ns
                .iter()
                .map(|&t| tli_data::timefmt::UtcTime(t))
                .collect(),
            test_bars: (w.test_bars > 0).then_some(w.test_bars as usize),
            train_bars: (w.train_bars > 0).then_some(w.train_bars as usize),
            plan: Vec::new(),
        }),
        sweep,
        inputs: Vec::new(),
    };
    spec.check().map_err(|e| invalid(e.to_string()))?;
    Ok(spec)
}

fn model_spec(i: usize, m: &pb::ModelSpec) -> Result<job::ModelSpec, Status> {
    let (plugin, config) = match &m.config {
        None => {
            return Err(invalid(format!(
                "models[{i}].config: set template, dqn, ppo, mamba2, tft or plugin"
            )))
        }
        Some(pb::model_spec::Config::Template(t)) => {
            ("template".to_string(), Some(typed_configs::template(i, t)?))
        }
        Some(pb::model_spec::Config::Dqn(d)) => {
            ("dqn".to_string(), Some(typed_configs::dqn(i, d)?))
        }
        Some(pb::model_spec::Config::Ppo(p)) => {
            ("ppo".to_string(), Some(typed_configs::ppo(i, p)?))
        }
        Some(pb::model_spec::Config::Mamba2(m)) => {
            ("mamba2".to_string(), Some(typed_configs::mamba2(i, m)?))
        }
        Some(pb::model_spec::Config::Tft(t)) => {
            ("tft".to_string(), Some(typed_configs::tft(i, t)?))
        }
        Some(pb::model_spec::Config::Plugin(p)) => {
            if p.plugin.trim().is_empty() {
                return Err(invalid(format!(
                    "models[{i}].plugin.plugin: the plugin name must not be empty"
                )));
            }
            let config = if p.config_json.trim().is_empty() {
                None
            } else {
                let value: serde_json::Value = serde_json::from_str(&p.config_json)
                    .map_err(|e| invalid(format!("models[{i}].plugin.config_json: {e}")))?;
                if !value.is_object() {
                    return Err(invalid(format!(
                        "models[{i}].plugin.config_json: must be a JSON object"
                    )));
                }
                Some(value)
            };
            (p.plugin.clone(), config)
        }
    };
    let mode = |field: &str, mode: &str| -> Result<Option<Mode>, Status> {
        if mode.is_empty() {
            return Ok(None);
        }
        mode.parse()
            .map(Some)
            .map_err(|e: SelectionError| invalid(format!("models[{i}].{field}.mode: {e}")))
    };
    let keep_best = match &m.keep_best {
        None => None,
        Some(k) => Some(KeepBest {
            metric: k.metric.clone(),
            mode: mode("keep_best", &k.mode)?,
            k: k.k.max(1),
        }),
    };
    let early_stopping = match &m.early_stopping {
        None => None,
        Some(e) => Some(EarlyStopping {
            metric: e.metric.clone(),
            mode: mode("early_stopping", &e.mode)?,
            patience: e.patience,
            min_delta: e.min_delta,
        }),
    };
    Ok(job::ModelSpec {
        plugin,
        steps: m.steps,
        config,
        priority: m.priority,
        pooled: m.pooled,
        keep_best,
        early_stopping,
    })
}

/// A model's `keep_best` and `early_stopping` as the API sends them.
pub fn selection_to_proto(m: &job::ModelSpec) -> (Option<pb::KeepBest>, Option<pb::EarlyStopping>) {
    let mode = |m: Option<Mode>| m.map(|m| m.as_str().to_string()).unwrap_or_default();
    (
        m.keep_best.as_ref().map(|k| pb::KeepBest {
            metric: k.metric.clone(),
            mode: mode(k.mode),
            k: k.k,
        }),
        m.early_stopping.as_ref().map(|e| pb::EarlyStopping {
            metric: e.metric.clone(),
            mode: mode(e.mode),
            patience: e.patience,
            min_delta: e.min_delta,
        }),
    )
}

/// "" = not given (symbol, tz).
fn given(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

fn asset_spec(i: usize, a: &pb::AssetSpec) -> Result<AssetSpec, Status> {
    match &a.source {
        None => Err(invalid(format!("assets[{i}]: set data_path or synthetic"))),
        Some(pb::asset_spec::Source::DataPath(path)) => {
            if path.trim().is_empty() {
                return Err(invalid(format!("assets[{i}].data_path: must not be empty")));
            }
            // The symbol and zone are checked with the spec (JobSpec::check).
            Ok(AssetSpec::Data(BarSource {
                path: PathBuf::from(path),
                symbol: given(&a.symbol),
                tz: given(&a.tz),
                start: a.start_unix_ns,
                end: a.end_unix_ns,
            }))
        }
        Some(pb::asset_spec::Source::Synthetic(_))
            if !a.symbol.is_empty()
                || !a.tz.is_empty()
                || a.start_unix_ns.is_some()
                || a.end_unix_ns.is_some() =>
        {
            Err(invalid(format!(
                "assets[{i}]: symbol, tz, start and end go with data_path, not synthetic"
            )))
        }
        Some(pb::asset_spec::Source::Synthetic(s)) => {
            let rows = usize::try_from(s.rows).map_err(|_| {
                invalid(format!(
                    "assets[{i}].synthetic.rows: {} is outside 64..=10000000",
                    s.rows
                ))
            })?;
            Ok(AssetSpec::Synthetic(SyntheticAsset {
                rows,
                seed: if s.seed == 0 { DEFAULT_SEED } else { s.seed },
                // 0 = the default; negative or NaN is kept so the spec check names it.
                sigma: (s.sigma != 0.0).then_some(s.sigma),
                seasonal: (s.seasonal_assets > 0).then_some(job::SeasonalPick {
                    asset: s.seasonal_asset as usize,
                    assets: s.seasonal_assets as usize,
                }),
            }))
        }
    }
}

fn executor_kind(value: i32) -> Result<Option<ExecutorKind>, Status> {
    match pb::Executor::try_from(value) {
        Ok(pb::Executor::Unspecified) => Ok(None),
        Ok(pb::Executor::Local) => Ok(Some(ExecutorKind::Local)),
        Ok(pb::Executor::Slurm) => Ok(Some(ExecutorKind::Slurm)),
        Err(_) => Err(invalid(format!(
            "executor: unknown value {value} (EXECUTOR_LOCAL or EXECUTOR_SLURM)"
        ))),
    }
}

/// 0 means "not set" on the wire.
fn slurm_options(o: Option<&pb::SlurmOptions>) -> SlurmJobOptions {
    let Some(o) = o else {
        return SlurmJobOptions::default();
    };
    SlurmJobOptions {
        gpus_per_task: (o.gpus_per_task != 0).then_some(o.gpus_per_task),
        time_limit_minutes: (o.time_limit_minutes != 0).then_some(o.time_limit_minutes),
    }
}

fn checkpoint_policy(c: Option<&pb::CheckpointPolicy>) -> CheckpointPolicy {
    let Some(c) = c else {
        return CheckpointPolicy::default();
    };
    // Negative or NaN seconds are kept so that `JobSpec::check` names them.
    CheckpointPolicy::with_intervals(
        Some(c.every_steps),
        Some(c.every_seconds),
        if c.keep == 0 {
            DEFAULT_CHECKPOINT_KEEP
        } else {
            c.keep as usize
        },
    )
}

/// A job spec as the request that [`job_spec`] turns back into it (the
/// client's `train start --spec FILE`). `features_json` is the spec file's
/// `features` as written ("" = the host's defaults).
pub fn request_from_spec(
    spec: &JobSpec,
    features_json: String,
) -> Result<pb::StartTrainingRequest, String> {
    let models: Vec<pb::ModelSpec> = spec
        .models
        .iter()
        .map(|m| {
            let config_json = m.config.as_ref().map(|c| c.to_string()).unwrap_or_default();
            let (keep_best, early_stopping) = selection_to_proto(m);
            pb::ModelSpec {
                pooled: m.pooled,
                keep_best,
                early_stopping,
                ..plugin_model(&m.plugin, m.steps, m.priority, config_json)
            }
        })
        .collect();
    let assets = spec
        .assets
        .iter()
        .map(|a| match a {
            AssetSpec::Data(source) => pb::AssetSpec {
                source: Some(pb::asset_spec::Source::DataPath(
                    source.path.to_string_lossy().into(),
                )),
                symbol: source.symbol.clone().unwrap_or_default(),
                tz: source.tz.clone().unwrap_or_default(),
                start_unix_ns: source.start,
                end_unix_ns: source.end,
            },
            AssetSpec::Synthetic(s) => pb::AssetSpec {
                source: Some(pb::asset_spec::Source::Synthetic(pb::SyntheticAsset {
                    rows: s.rows as u64,
                    seed: s.seed,
                    sigma: s.sigma.unwrap_or(0.0),
                    seasonal_assets: s.seasonal.map_or(0, |p| p.assets as u32),
                    seasonal_asset: s.seasonal.map_or(0, |p| p.asset as u32),
                })),
                ..Default::default()
            },
        })
        .collect();
    let keep = u32::try_from(spec.checkpoint.keep)
        .map_err(|_| format!("checkpoint.keep: {} is too large", spec.checkpoint.keep))?;
    let mut request = pb::StartTrainingRequest {
        name: spec.name.clone(),
        assets,
        seed: spec.seed,
        device: spec.device.to_string(),
        checkpoint: Some(pb::CheckpointPolicy {
            // 0 means never on the wire, as in the file.
            every_steps: spec.checkpoint.every_steps.unwrap_or(0),
            every_seconds: spec.checkpoint.every_seconds.unwrap_or(0.0),
            keep,
        }),
        slice_steps: spec.slice_steps,
        features_json,
        executor: match spec.executor {
            None => pb::Executor::Unspecified,
            Some(ExecutorKind::Local) => pb::Executor::Local,
            Some(ExecutorKind::Slurm) => pb::Executor::Slurm,
        } as i32,
        slurm: (!spec.slurm.is_default()).then(|| pb::SlurmOptions {
            gpus_per_task: spec.slurm.gpus_per_task.unwrap_or(0),
            time_limit_minutes: spec.slurm.time_limit_minutes.unwrap_or(0),
        }),
        walk_forward: spec.walk_forward.as_ref().map(|w| pb::WalkForward {
            folds: w.folds as u32,
            test_starts_unix_ns: w.test_starts.iter().map(|t| t.0).collect(),
            test_bars: w.test_bars.unwrap_or(0) as u64,
            train_bars: w.train_bars.unwrap_or(0) as u64,
        }),
        sweep: spec.sweep.as_ref().map(crate::sweep::sweep_to_proto),
        ..Default::default()
    };
    if spec.sweep.is_none() {
        set_models(&mut request, models);
    }
    Ok(request)
}

/// One model uses the single-model field (older servers know only that),
/// several the repeated one.
pub fn set_models(request: &mut pb::StartTrainingRequest, mut models: Vec<pb::ModelSpec>) {
    if models.len() == 1 {
        request.model = models.pop();
    } else {
        request.models = models;
    }
}

/// A model given by plugin name and JSON config ("" = the plugin's defaults).
pub fn plugin_model(plugin: &str, steps: u64, priority: i32, config_json: String) -> pb::ModelSpec {
    pb::ModelSpec {
        keep_best: None,
        early_stopping: None,
        steps,
        priority,
        pooled: false,
        config: Some(pb::model_spec::Config::Plugin(pb::PluginConfig {
            plugin: plugin.to_string(),
            config_json,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> pb::StartTrainingRequest {
        pb::StartTrainingRequest {
            name: "t".into(),
            model: Some(pb::ModelSpec {
                keep_best: None,
                early_stopping: None,
                steps: 10,
                priority: 0,
                pooled: false,
                config: Some(pb::model_spec::Config::Template(pb::TemplateConfig {
                    hidden_sizes: vec![8],
                    learning_rate: Some(0.01),
                    lr_schedule: pb::LrSchedule::Cosine as i32,
                    ..Default::default()
                })),
            }),
            assets: vec![pb::AssetSpec {
                source: Some(pb::asset_spec::Source::Synthetic(pb::SyntheticAsset {
                    rows: 200,
                    seed: 0,
                    sigma: 0.0,
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn message(req: &pb::StartTrainingRequest) -> String {
        let status = job_spec(req).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        status.message().to_string()
    }

    #[test]
    fn zero_values_take_the_documented_defaults() {
        let spec = job_spec(&request()).unwrap();
        assert_eq!(spec.seed, 1);
        assert_eq!(spec.device, Device::Cpu);
        assert_eq!(spec.slice_steps, DEFAULT_SLICE_STEPS);
        assert_eq!(spec.checkpoint, CheckpointPolicy::default());
        assert_eq!(spec.models[0].plugin, "template");
        assert_eq!(
            spec.models[0].config,
            Some(
                serde_json::json!({"hidden_sizes": [8], "learning_rate": 0.01, "lr_schedule": "cosine"})
            )
        );
        assert_eq!(
            spec.assets[0],
            AssetSpec::Synthetic(SyntheticAsset {
                rows: 200,
                seed: 1,
                sigma: None,
                seasonal: None,
            })
        );

        let mut req = request();
        req.checkpoint = Some(pb::CheckpointPolicy::default());
        let spec = job_spec(&req).unwrap();
        assert_eq!(spec.checkpoint.every_steps, None);
        assert_eq!(spec.checkpoint.every_seconds, None);
        assert_eq!(spec.checkpoint.keep, DEFAULT_CHECKPOINT_KEEP);
    }

    #[test]
    fn bad_requests_name_the_field() {
        let mut req = request();
        req.models = vec![pb::ModelSpec::default()];
        assert!(message(&req).starts_with("model and models: give exactly one"));

        let mut req = request();
        req.model = None;
        assert!(message(&req).starts_with("model and models: give exactly one"));

        let mut req = request();
        if let Some(m) = req.model.as_mut() {
            m.steps = 0;
        }
        assert_eq!(
            message(&req),
            "models[0].steps: 0 is outside 1..=1000000000"
        );

        let mut req = request();
        if let Some(m) = req.model.as_mut() {
            m.config = None;
        }
        assert_eq!(
            message(&req),
            "models[0].config: set template, dqn, ppo, mamba2, tft or plugin"
        );

        let mut req = request();
        if let Some(m) = req.model.as_mut() {
            m.config = Some(pb::model_spec::Config::Plugin(pb::PluginConfig {
                plugin: "behaviour".into(),
                config_json: "[1]".into(),
            }));
        }
        assert_eq!(
            message(&req),
            "models[0].plugin.config_json: must be a JSON object"
        );

        let mut req = request();
        req.assets.push(pb::AssetSpec::default());
        assert_eq!(message(&req), "assets[1]: set data_path or synthetic");

        let mut req = request();
        req.features_json = "{\"colour\": 1}".into();
        assert!(message(&req).starts_with("features_json: unknown field"));

        let mut req = request();
        req.device = "gpu".into();
        assert!(message(&req).starts_with("device: "));
    }

    /// Defects found by the malformed-request corpus: sizes are
    /// refused by counting, before anything is built from the request.
    #[test]
    fn abusive_sizes_are_refused_before_anything_is_built() {
        let model = request().model.unwrap();
        let asset = request().assets[0].clone();
        let mut req = request();
        req.model = None;
        req.models = vec![model.clone(); 100_000];
        req.assets = vec![asset.clone(); 1000];
        assert_eq!(
            message(&req),
            "100000000 tasks (models × assets); at most 1024 per job"
        );
        let mut req = request();
        req.assets = vec![asset.clone(); 1025];
        assert!(message(&req).starts_with("assets: 1025 assets; at most 1024 per job"));
        let mut req = request();
        req.assets = vec![asset; 2];
        for a in &mut req.assets {
            if let Some(pb::asset_spec::Source::Synthetic(s)) = a.source.as_mut() {
                s.rows = 6_000_000;
            }
        }
        assert!(message(&req).starts_with("assets: the synthetic assets have 12000000 rows"));

        let mut req = request();
        req.name = "n".repeat(MAX_NAME_BYTES + 1);
        assert_eq!(message(&req), "name: 257 bytes; at most 256");
        req.name = "\u{1b}[2Jx".into();
        assert_eq!(
            message(&req),
            "name: control character U+001B at byte 0; use printable text"
        );
        req.name = "日本語 ✓".into();
        assert!(job_spec(&req).is_ok());

        let mut req = request();
        req.assets[0].source = Some(pb::asset_spec::Source::DataPath("/d".repeat(4096)));
        assert!(message(&req).starts_with("assets[0].data_path: 8192 bytes"));
        let mut req = request();
        req.model = Some(plugin_model(&"p".repeat(129), 5, 0, String::new()));
        assert!(message(&req).starts_with("models[0].plugin.plugin: 129 bytes"));
    }

    /// Defect found in use: a file's and the API's checkpoint intervals follow
    /// one rule, so a spec sent over the wire arrives as it was written.
    #[test]
    fn a_spec_survives_the_wire_with_its_checkpoint_policy() {
        for checkpoint in [
            r#"{"every_steps": 0, "every_seconds": 0, "keep": 2}"#,
            r#"{"every_steps": 500}"#,
            r#"{"every_seconds": 60.5}"#,
        ] {
            let text = format!(
                r#"{{"name":"w","models":[{{"plugin":"dqn","steps":9}}],"assets":[{{"synthetic":{{"rows":100}}}}],"checkpoint":{checkpoint}}}"#
            );
            let spec = JobSpec::from_json(&text).unwrap();
            let back = job_spec(&request_from_spec(&spec, String::new()).unwrap()).unwrap();
            assert_eq!(back.checkpoint, spec.checkpoint, "{checkpoint}");
        }
    }

    #[test]
    fn the_executor_and_slurm_options_survive_the_wire() {
        let text = r#"{"name":"w","models":[{"plugin":"dqn","steps":9}],"assets":[{"synthetic":{"rows":100}}],
            "executor":"slurm","slurm":{"gpus_per_task":2,"time_limit_minutes":90}}"#;
        let spec = JobSpec::from_json(text).unwrap();
        assert_eq!(spec.executor, Some(ExecutorKind::Slurm));
        let back = job_spec(&request_from_spec(&spec, String::new()).unwrap()).unwrap();
        assert_eq!((back.executor, &back.slurm), (spec.executor, &spec.slurm));
        let plain = job_spec(&request()).unwrap();
        assert_eq!(
            (plain.executor, plain.slurm),
            (None, SlurmJobOptions::default())
        );
        let mut bad = request();
        bad.executor = 9;
        assert!(message(&bad).contains("executor"));
    }

    /// Bars users bring: a file asset's symbol and time zone survive the wire and are
    /// checked like a spec file's.
    #[test]
    fn a_file_assets_symbol_and_time_zone_survive_the_wire() {
        let text = r#"{"name":"w","models":[{"plugin":"dqn","steps":9}],
            "assets":[{"data":"p.csv","symbol":"ES","tz":"America/New_York","start":"2010-01-04"},
                {"data":"q.csv","end":1514505600000000000}]}"#;
        let spec = JobSpec::from_json(text).unwrap();
        let back = job_spec(&request_from_spec(&spec, String::new()).unwrap()).unwrap();
        assert_eq!(back.assets, spec.assets);
        let file = |symbol: &str, tz: &str| pb::AssetSpec {
            source: Some(pb::asset_spec::Source::DataPath("p.csv".into())),
            symbol: symbol.into(),
            tz: tz.into(),
            ..pb::AssetSpec::default()
        };
        for (asset, wanted) in [
            (file("E S", ""), "assets[0].symbol: symbol \"E S\""),
            (file("ES", "Not/AZone"), "assets[0].tz: unknown time zone"),
            (file(&"X".repeat(33), ""), "assets[0].symbol: 33 bytes"),
            (file("ES", "\u{1b}[2J"), "assets[0].tz: control character"),
        ] {
            let mut req = request();
            req.assets = vec![asset];
            assert!(message(&req).contains(wanted), "{}", message(&req));
        }
        let mut req = request();
        req.assets[0].symbol = "ES".into();
        assert!(message(&req).contains("symbol, tz, start and end go with data_path"));
        let mut req = request();
        req.assets[0].start_unix_ns = Some(0);
        assert!(message(&req).contains("symbol, tz, start and end go with data_path"));
        let mut req = request();
        req.assets = vec![pb::AssetSpec {
            start_unix_ns: Some(2),
            end_unix_ns: Some(1),
            ..file("ES", "")
        }];
        assert!(
            message(&req).contains("assets[0].start"),
            "{}",
            message(&req)
        );
    }
}
