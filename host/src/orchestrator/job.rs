//! Job specifications: what a user submits. One job = models × assets; each
//! (model, asset) pair becomes one task with its own config, seed and step
//! budget.
//!
//! ```json
//! {
//!   "name": "es-nq-sweep",
//!   "models": [
//!     {"plugin": "template", "steps": 2000, "config": {"hidden_sizes": [64, 64]}},
//!     {"plugin": "template", "steps": 2000, "config": {"hidden_sizes": [256]}, "priority": 1}
//!   ],
//!   "assets": [
//!     {"data": "data/samples/es_proxy_sp500_1d.dbn.zst"},
//!     {"data": "data/samples/nq_proxy_nasdaq_1d.dbn.zst"},
//!     {"synthetic": {"rows": 20000}}
//!   ],
//!   "seed": 7,
//!   "device": "cpu",
//!   "features": {"return_horizons": [1, 5, 20]},
//!   "checkpoint": {"every_steps": 500, "every_seconds": 300, "keep": 3},
//!   "slice_steps": 10
//! }
//! ```
//! Task seeds are `seed + task ordinal`, so every task differs and a job is
//! reproducible.

use crate::data::features::FeatureConfig;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub const MAX_STEPS: u64 = 1_000_000_000;
pub const MAX_TASKS: usize = 1024;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub name: String,
    pub models: Vec<ModelSpec>,
    pub assets: Vec<AssetSpec>,
    #[serde(default = "default_seed")]
    pub seed: u64,
    #[serde(default = "default_device")]
    pub device: String,
    #[serde(default)]
    pub features: FeatureConfig,
    #[serde(default)]
    pub checkpoint: CheckpointPolicy,
    /// Steps per call into the plugin; progress, cancellation and checkpoints
    /// happen between calls.
    #[serde(default = "default_slice")]
    pub slice_steps: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub plugin: String,
    pub steps: u64,
    /// Plugin config (a JSON object); defaults to the plugin's default config.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// Higher runs first when memory is short.
    #[serde(default)]
    pub priority: i32,
}

/// Where an asset's bars come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssetSpec {
    /// A bar file (DBN, Parquet, CSV).
    #[serde(default)]
    pub data: Option<PathBuf>,
    /// The synthetic AR(1) dataset (for tests and demos).
    #[serde(default)]
    pub synthetic: Option<SyntheticAsset>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticAsset {
    pub rows: usize,
    #[serde(default = "default_seed")]
    pub seed: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointPolicy {
    /// Checkpoint whenever this many steps have passed since the last one.
    pub every_steps: Option<u64>,
    /// … or this many seconds.
    pub every_seconds: Option<f64>,
    /// Checkpoints kept per task (the newest ones).
    pub keep: usize,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        Self {
            every_steps: Some(1000),
            every_seconds: Some(300.0),
            keep: 3,
        }
    }
}

fn default_seed() -> u64 {
    1
}
fn default_device() -> String {
    "cpu".into()
}
fn default_slice() -> u64 {
    10
}

impl AssetSpec {
    /// A short label for tables and the store.
    pub fn label(&self) -> String {
        match (&self.data, &self.synthetic) {
            (Some(path), _) => path.display().to_string(),
            (None, Some(s)) => format!("synthetic-ar1:{}:{}", s.rows, s.seed),
            (None, None) => "?".into(),
        }
    }
}

impl JobSpec {
    pub fn from_json(text: &str) -> Result<Self, String> {
        let spec: Self = serde_json::from_str(text).map_err(|e| format!("job spec: {e}"))?;
        spec.check()?;
        Ok(spec)
    }

    /// Shape checks that need no plugin or data (those come at submission).
    pub fn check(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("name: must not be empty".into());
        }
        if self.models.is_empty() {
            return Err("models: at least one model is needed".into());
        }
        if self.assets.is_empty() {
            return Err("assets: at least one asset is needed".into());
        }
        let tasks = self.models.len() * self.assets.len();
        if tasks > MAX_TASKS {
            return Err(format!(
                "{tasks} tasks (models × assets); at most {MAX_TASKS} per job"
            ));
        }
        for (i, m) in self.models.iter().enumerate() {
            if m.steps == 0 || m.steps > MAX_STEPS {
                return Err(format!(
                    "models[{i}].steps: {} is outside 1..={MAX_STEPS}",
                    m.steps
                ));
            }
            if m.config.as_ref().is_some_and(|c| !c.is_object()) {
                return Err(format!("models[{i}].config: must be a JSON object"));
            }
        }
        for (i, a) in self.assets.iter().enumerate() {
            match (&a.data, &a.synthetic) {
                (Some(_), None) => {}
                (None, Some(s)) if (64..=10_000_000).contains(&s.rows) => {}
                (None, Some(s)) => {
                    return Err(format!(
                        "assets[{i}].synthetic.rows: {} is outside 64..=10000000",
                        s.rows
                    ))
                }
                _ => {
                    return Err(format!(
                        "assets[{i}]: give exactly one of \"data\" or \"synthetic\""
                    ))
                }
            }
        }
        if self.slice_steps == 0 || self.slice_steps > 1_000_000 {
            return Err(format!(
                "slice_steps: {} is outside 1..=1000000",
                self.slice_steps
            ));
        }
        let c = &self.checkpoint;
        if c.keep == 0 {
            return Err("checkpoint.keep: must keep at least 1".into());
        }
        if c.every_steps == Some(0) || c.every_seconds.is_some_and(|s| s.is_nan() || s <= 0.0) {
            return Err("checkpoint: every_steps and every_seconds must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("job.rs");
        let start = doc.find("//! {").unwrap();
        let end = doc[start..].find("//! ```").unwrap() + start;
        let json: String = doc[start..end]
            .lines()
            .map(|l| l.trim_start_matches("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let spec = JobSpec::from_json(&json).unwrap();
        assert_eq!(spec.models.len() * spec.assets.len(), 6);
        assert_eq!(spec.checkpoint.keep, 3);
    }

    #[test]
    fn bad_specs_name_the_field() {
        let base = r#"{"name":"x","models":[{"plugin":"template","steps":10}],"assets":[{"synthetic":{"rows":100}}]}"#;
        assert!(JobSpec::from_json(base).is_ok());
        let cases = [
            (
                base.replace("\"steps\":10", "\"steps\":0"),
                "models[0].steps",
            ),
            (
                base.replace("{\"synthetic\":{\"rows\":100}}", "{}"),
                "assets[0]",
            ),
            (base.replace("\"name\":\"x\"", "\"name\":\" \""), "name"),
            (
                base.replace("}]}", "}],\"checkpoint\":{\"keep\":0}}"),
                "checkpoint.keep",
            ),
            (
                base.replace("\"steps\":10", "\"steps\":10,\"colour\":1"),
                "unknown field",
            ),
        ];
        for (json, field) in cases {
            let e = JobSpec::from_json(&json).unwrap_err();
            assert!(e.contains(field), "{json}: {e}");
        }
    }
}
