//! The JSON the status page polls: the gRPC API's own answers
//! (`ListTrainingJobs`, `GetResources`, called in-process, so the page shows
//! exactly what `tli train status` and any client see), turned into plain
//! JSON; and one metric of a task over steps, for sparklines.

use crate::api::convert::{self, store_error};
use crate::api::resources::ResourceApi;
use crate::api::training::TrainingApi;
use crate::api::ShutdownSignal;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use tli_proto::v1 as pb;
use tli_proto::v1::resource_service_server::ResourceService;
use tli_proto::v1::training_service_server::TrainingService;
use tli_runtime::orchestrator::engine::Orchestrator;
use tonic::{Request, Status};

/// Jobs the page shows, newest first.
const PAGE_JOBS: u32 = 25;
/// Points of a sparkline when the request does not say.
const DEFAULT_POINTS: usize = 120;
const MAX_POINTS: usize = 2000;

/// The API services the page reads through.
#[derive(Clone)]
pub struct ApiHandle {
    training: Arc<TrainingApi>,
    resources: Arc<ResourceApi>,
}

impl ApiHandle {
    pub fn new(orchestrator: Arc<Orchestrator>, shutdown: ShutdownSignal) -> Self {
        Self {
            training: Arc::new(TrainingApi::new(orchestrator.clone(), shutdown)),
            resources: Arc::new(ResourceApi::new(orchestrator)),
        }
    }

    /// `{ now_ms, devices: [...], jobs: [...] }` (docs/observability.md).
    pub async fn status(&self) -> Result<Value, Status> {
        let jobs = self
            .training
            .list_training_jobs(Request::new(pb::ListTrainingJobsRequest {
                page_size: PAGE_JOBS,
                ..Default::default()
            }))
            .await?
            .into_inner();
        let resources = self
            .resources
            .get_resources(Request::new(pb::GetResourcesRequest {}))
            .await?
            .into_inner();
        Ok(json!({
            "now_ms": tli_runtime::orchestrator::now_ms(),
            "version": env!("CARGO_PKG_VERSION"),
            "devices": resources.devices.iter().map(device).collect::<Vec<_>>(),
            "jobs": jobs.jobs.iter().map(job).collect::<Vec<_>>(),
            "more_jobs": !jobs.next_page_token.is_empty(),
        }))
    }
}

fn device(d: &pb::Device) -> Value {
    let measured: u64 = d.reservations.iter().filter_map(|r| r.measured_bytes).sum();
    json!({
        "name": d.name,
        "strategy": d.strategy,
        "budget_bytes": d.budget_bytes,
        "reserved_bytes": d.reserved_bytes,
        "measured_bytes": measured,
        "total_bytes": d.total_bytes,
        "free_bytes": d.free_bytes,
        "reservations": d.reservations.iter().map(|r| json!({
            "task_id": r.task_id,
            "reserved_bytes": r.reserved_bytes,
            "measured_bytes": r.measured_bytes,
        })).collect::<Vec<_>>(),
    })
}

fn job(j: &pb::Job) -> Value {
    let progress = j.progress.clone().unwrap_or_default();
    json!({
        "job_id": j.job_id,
        "name": j.name,
        "created_unix_ms": j.created_unix_ms,
        "weighted_fraction": progress.weighted_fraction,
        "tasks": progress.tasks.iter().map(task).collect::<Vec<_>>(),
    })
}

fn task(t: &pb::TaskProgress) -> Value {
    let state = convert::state_from_proto(t.state).map_or("unknown", |s| s.as_str());
    let metrics: serde_json::Map<String, Value> = t
        .metrics
        .iter()
        .map(|m| (m.name.clone(), finite(m.value)))
        .collect();
    json!({
        "task_id": t.task_id,
        "plugin": t.plugin,
        "asset": t.asset,
        "state": state,
        "steps_done": t.steps_done,
        "total_steps": t.total_steps,
        "steps_per_second": finite(t.steps_per_second),
        "eta_seconds": t.eta_seconds.map(finite),
        "metrics": metrics,
        "loss_metric": sparkline_metric(t.metrics.iter().map(|m| m.name.as_str())),
        "error": t.error,
        "estimate_bytes": t.estimate_bytes,
        "measured_bytes": t.measured_bytes,
        "slurm": t.slurm.as_ref().map(|s| json!({"job_id": s.job_id, "node": s.node})),
    })
}

/// JSON has no NaN or infinity: those become null.
fn finite(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// The name of the metric a sparkline shows: the task's loss
/// ([`crate::telemetry::loss_name`]), else its first metric.
fn sparkline_metric<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Option<String> {
    crate::telemetry::loss_name(names.clone())
        .or_else(|| names.clone().next())
        .map(str::to_string)
}

/// `/api/series` parameters.
#[derive(Debug, Deserialize)]
pub struct SeriesQuery {
    pub task: u64,
    /// Default: the task's loss (see [`sparkline_metric`]).
    pub metric: Option<String>,
    /// At most this many points, evenly thinned (default 120, at most 2000).
    pub points: Option<usize>,
}

/// `{ task_id, metric, steps: [...], values: [...] }`; a task that reported
/// nothing yet gives empty arrays and a null metric.
pub fn series(orchestrator: &Orchestrator, query: &SeriesQuery) -> Result<Value, Status> {
    let task = i64::try_from(query.task)
        .ok()
        .filter(|t| *t > 0)
        .ok_or_else(|| Status::not_found(format!("task {} not found", query.task)))?;
    if !orchestrator.task_exists(task).map_err(store_error)? {
        return Err(Status::not_found(format!("task {task} not found")));
    }
    let points = query.points.unwrap_or(DEFAULT_POINTS).clamp(2, MAX_POINTS);
    let metric = match &query.metric {
        Some(name) => Some(name.clone()),
        None => {
            let names = orchestrator.metric_names(task).map_err(store_error)?;
            sparkline_metric(names.iter().map(String::as_str))
        }
    };
    let (steps, values) = match &metric {
        Some(name) => {
            let series = orchestrator
                .metric_series(task, name, points)
                .map_err(store_error)?;
            let values: Vec<Value> = series.values.iter().map(|v| finite(*v)).collect();
            (series.steps, values)
        }
        None => (Vec::new(), Vec::new()),
    };
    Ok(json!({
        "task_id": query.task,
        "metric": metric,
        "steps": steps,
        "values": values,
    }))
}
