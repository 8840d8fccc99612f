//! How `tli models list|show` print a model, whether it came from the host
//! (`ModelService`) or from a state directory read offline: one JSON shape
//! and one table for both.
//!
//! `-o json` of `list`: `{"models": [model, …]}`; of `show`: the model with
//! its `card` (model.json as an object). A model:
//! ```json
//! {"id": "12", "source": "task", "task_id": 12, "job_id": 3,
//!  "plugin": "tft", "plugin_version": "0.3.0", "assets": ["ES"], "pooled": false,
//!  "steps": 400, "task_state": "completed", "size_bytes": 1048576,
//!  "metrics": {"test_qrisk_p50": 0.41}, "config": {…},
//!  "data": [{"name": "es.csv", "sha256": "…"}],
//!  "resident": null | {"device": "cpu", "reserved_bytes": 3145728, "measured_bytes": 2883584,
//!                      "loaded_unix_ms": 1700000000000, "predictions": 20, "streams": 1,
//!                      "open_streams": 0, "served_by": "tft@0.3.0"}}
//! ```

use crate::args::OutputFormat;
use crate::{new_table, print_json};
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;
use tli_core::byte_size::format_bytes;
use tli_proto::v1 as pb;

#[derive(Debug, Serialize)]
pub struct ModelJson {
    pub id: String,
    pub source: String,
    pub task_id: Option<u64>,
    pub job_id: Option<u64>,
    pub plugin: String,
    pub plugin_version: String,
    pub assets: Vec<String>,
    pub pooled: bool,
    pub steps: u64,
    pub task_state: Option<String>,
    pub size_bytes: u64,
    pub metrics: BTreeMap<String, f64>,
    pub config: serde_json::Value,
    pub data: Vec<DataJson>,
    pub resident: Option<ResidentJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card: Option<serde_json::Value>,
}

#[derive(Debug, Serialize)]
pub struct DataJson {
    pub name: String,
    pub sha256: String,
}

#[derive(Debug, Serialize)]
pub struct ResidentJson {
    pub device: String,
    pub reserved_bytes: u64,
    pub measured_bytes: u64,
    pub loaded_unix_ms: i64,
    pub predictions: u64,
    pub streams: u64,
    pub open_streams: u32,
    pub served_by: String,
}

impl From<&pb::ModelInfo> for ModelJson {
    fn from(m: &pb::ModelInfo) -> Self {
        let task = m.source == "task";
        Self {
            id: m.id.clone(),
            source: m.source.clone(),
            task_id: task.then_some(m.task_id),
            job_id: task.then_some(m.job_id),
            plugin: m.plugin.clone(),
            plugin_version: m.plugin_version.clone(),
            assets: m.assets.clone(),
            pooled: m.pooled,
            steps: m.steps,
            task_state: task.then(|| m.task_state.clone()),
            size_bytes: m.size_bytes,
            metrics: m.metrics.clone().into_iter().collect(),
            config: serde_json::from_str(&m.config_json).unwrap_or(serde_json::Value::Null),
            data: m
                .data
                .iter()
                .map(|d| DataJson {
                    name: d.name.clone(),
                    sha256: d.sha256.clone(),
                })
                .collect(),
            resident: m.resident.as_ref().map(|r| ResidentJson {
                device: r.device.clone(),
                reserved_bytes: r.reserved_bytes,
                measured_bytes: r.measured_bytes,
                loaded_unix_ms: r.loaded_unix_ms,
                predictions: r.predictions,
                streams: r.streams,
                open_streams: r.open_streams,
                served_by: r.served_by.clone(),
            }),
            card: (!m.card_json.is_empty())
                .then(|| serde_json::from_str(&m.card_json).ok())
                .flatten(),
        }
    }
}

/// The metric a listing shows: the first of these a model has.
const HEADLINE_METRICS: [&str; 5] = [
    "test_qrisk_p50",
    "test_mse",
    "test_sharpe",
    "valid_mse",
    "valid_skill",
];

fn headline(metrics: &BTreeMap<String, f64>) -> String {
    HEADLINE_METRICS
        .iter()
        .find_map(|k| metrics.get(*k).map(|v| format!("{k} {v:.4}")))
        .unwrap_or_else(|| "-".into())
}

/// `tli models list`.
pub fn print_models(models: &[pb::ModelInfo], output: OutputFormat, whence: &str) -> Result<()> {
    let models: Vec<ModelJson> = models.iter().map(ModelJson::from).collect();
    if output == OutputFormat::Json {
        return print_json(&serde_json::json!({ "models": models }));
    }
    let mut table = new_table(vec![
        "MODEL", "PLUGIN", "ASSETS", "FROM", "STEPS", "SIZE", "METRIC", "LOADED",
    ]);
    for m in &models {
        let from = match (m.task_id, m.job_id, &m.task_state) {
            (Some(task), Some(job), Some(state)) => format!("job {job} task {task} ({state})"),
            _ => "imported".into(),
        };
        table.add_row(vec![
            m.id.clone(),
            format!("{}@{}", m.plugin, m.plugin_version),
            m.assets.join(", ") + if m.pooled { " (pooled)" } else { "" },
            from,
            m.steps.to_string(),
            format_bytes(m.size_bytes),
            headline(&m.metrics),
            m.resident
                .as_ref()
                .map(|r| format!("{} {}", r.device, format_bytes(r.reserved_bytes)))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    crate::outln!("{table}");
    if models.is_empty() {
        eprintln!(
            "no models in {whence}: a model is a task trained on bar files with a checkpoint, or a \
             bundle imported with `tli models import`"
        );
    }
    Ok(())
}

/// `tli models show`.
pub fn print_model(model: &pb::ModelInfo, output: OutputFormat) -> Result<()> {
    let json = ModelJson::from(model);
    if output == OutputFormat::Json {
        return print_json(&json);
    }
    let mut table = new_table(vec!["FIELD", "VALUE"]);
    let mut row = |k: &str, v: String| {
        table.add_row(vec![k.to_string(), v]);
    };
    row("model", json.id.clone());
    row("plugin", format!("{}@{}", json.plugin, json.plugin_version));
    row(
        "source",
        match (json.task_id, json.job_id) {
            (Some(task), Some(job)) => format!(
                "job {job} task {task} ({})",
                json.task_state.clone().unwrap_or_default()
            ),
            _ => "imported".into(),
        },
    );
    row(
        "assets",
        json.assets.join(", ") + if json.pooled { " (pooled)" } else { "" },
    );
    row("steps", json.steps.to_string());
    row("size", format_bytes(json.size_bytes));
    row("config", json.config.to_string());
    for d in &json.data {
        row("data", format!("{} (sha256 {})", d.name, d.sha256));
    }
    for (k, v) in &json.metrics {
        row(k, format!("{v:.6}"));
    }
    if let Some(card) = &json.card {
        if let Some(features) = card.get("features") {
            row("features", features.to_string());
        }
    }
    match &json.resident {
        Some(r) => {
            row("loaded on", r.device.clone());
            row(
                "reserved",
                format!(
                    "{} (measured {})",
                    format_bytes(r.reserved_bytes),
                    format_bytes(r.measured_bytes)
                ),
            );
            row("served by", r.served_by.clone());
            row(
                "requests",
                format!(
                    "{} predictions, {} streams ({} open)",
                    r.predictions, r.streams, r.open_streams
                ),
            );
        }
        None => row("loaded", "no".into()),
    }
    crate::outln!("{table}");
    Ok(())
}
