//! What the client shows, as data: the stable JSON shapes (our own serde
//! structs, not the generated proto types) built from the wire's messages,
//! and task states as this client knows them. [`crate::render`] draws them.

use serde::Serialize;
use std::collections::BTreeMap;
use tli_core::state::TaskState;
use tli_proto::v1 as pb;
use tli_store::MemorySource;
use tli_wire::convert::state_from_proto;

/// A job (`train start|status|stop|resume`, the items of `train list`, the
/// `finished` event of `train watch`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobJson {
    pub job_id: u64,
    pub name: String,
    pub created_unix_ms: i64,
    pub progress: ProgressJson,
}

/// A job's progress (in a job, and the `progress` event of `train watch`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProgressJson {
    pub job_id: u64,
    pub weighted_fraction: f64,
    pub tasks: Vec<TaskJson>,
}

/// A task state from the wire: one this client knows, the zero value (a
/// task's creation has no previous state), or one from a newer server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireState {
    Known(TaskState),
    Unspecified,
    Unknown,
}

impl WireState {
    pub fn from_proto(value: i32) -> Self {
        match state_from_proto(value) {
            Some(state) => WireState::Known(state),
            None if value == 0 => WireState::Unspecified,
            None => WireState::Unknown,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WireState::Known(state) => state.as_str(),
            WireState::Unspecified => "unspecified",
            WireState::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for WireState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for WireState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskJson {
    pub task_id: u64,
    pub plugin: String,
    pub asset: String,
    pub state: WireState,
    pub steps_done: u64,
    pub total_steps: u64,
    pub steps_per_second: f64,
    pub eta_seconds: Option<f64>,
    pub metrics: BTreeMap<String, f64>,
    pub error: Option<String>,
    pub estimate_bytes: u64,
    pub measured_bytes: Option<u64>,
    /// `measured_bytes` by component, once measured.
    pub measured_memory: Option<MemoryJson>,
    /// The latest Slurm job (Slurm tasks only; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmJson>,
    /// The plugin version that runs it and its library's SHA-256 (`null`
    /// for tasks recorded by older hosts).
    pub plugin_version: Option<String>,
    pub plugin_checksum: Option<String>,
    /// Why early stopping ended it before its total steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// Its best checkpoint (its model), when it keeps best ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best: Option<BestJson>,
    /// What it waits for, where its state alone does not say ("waiting for
    /// Slurm: …", "Slurm job 12 pending: Resources").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The metrics its plugin says to compare tasks by, most telling first
    /// (tables show these first; empty when the plugin names none).
    pub headline_metrics: Vec<String>,
}

/// A task's best checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BestJson {
    pub step: u64,
    pub metric: String,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlurmJson {
    pub job_id: String,
    /// `None` until its worker attached.
    pub node: Option<String>,
    /// Slurm jobs submitted for the task so far.
    pub jobs: u32,
    /// CPU- and GPU-seconds of its ended jobs, from Slurm's accounting.
    pub cpu_seconds: f64,
    pub gpu_seconds: f64,
}

/// A job in `tli host run|status -o json`: flat (name, weighted fraction and
/// tasks side by side), with tasks of the same shape as everywhere else.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostJobJson {
    pub job_id: u64,
    pub name: String,
    pub created_unix_ms: i64,
    pub weighted_fraction: f64,
    pub tasks: Vec<TaskJson>,
}

impl From<&JobJson> for HostJobJson {
    fn from(j: &JobJson) -> Self {
        Self {
            job_id: j.job_id,
            name: j.name.clone(),
            created_unix_ms: j.created_unix_ms,
            weighted_fraction: j.progress.weighted_fraction,
            tasks: j.progress.tasks.clone(),
        }
    }
}

/// One line of `train watch -o json` (and of `train start --watch -o json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventJson {
    Started {
        job: JobJson,
    },
    Progress(ProgressJson),
    StateChanged {
        job_id: u64,
        task_id: u64,
        from: WireState,
        to: WireState,
        reason: String,
        at_unix_ms: i64,
    },
    Log {
        level: String,
        message: String,
        at_unix_ms: i64,
        /// 0 for a note from the host about the stream itself.
        task_id: u64,
        plugin: String,
    },
    Finished {
        job: JobJson,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListJson {
    pub jobs: Vec<JobJson>,
    pub next_page_token: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResourcesJson {
    pub devices: Vec<DeviceJson>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceJson {
    pub name: String,
    pub budget_bytes: u64,
    pub reserved_bytes: u64,
    pub strategy: String,
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub reservations: Vec<ReservationJson>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReservationJson {
    /// 0 for a resident model's reservation.
    pub task_id: u64,
    /// The resident model (or prediction stream) holding it; absent for a task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub reserved_bytes: u64,
    pub measured_bytes: Option<u64>,
    pub measured_memory: Option<MemoryJson>,
}

/// A measurement by component; `source` says where the activations come
/// from: `plugin_count` (the plugin's own count of its tensors) or
/// `cuda_allocator` (libtorch's allocator peak while the task was alone).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryJson {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub activations: u64,
    pub source: &'static str,
}

impl From<&pb::MeasuredMemory> for MemoryJson {
    fn from(m: &pb::MeasuredMemory) -> Self {
        Self {
            parameters: m.parameters,
            gradients: m.gradients,
            optimizer_state: m.optimizer_state,
            activations: m.activations,
            source: match pb::MemorySource::try_from(m.source) {
                Ok(pb::MemorySource::PluginCount) => MemorySource::PluginCount.as_str(),
                Ok(pb::MemorySource::CudaAllocator) => MemorySource::CudaAllocator.as_str(),
                Ok(pb::MemorySource::Unspecified) => "unspecified",
                Err(_) => "unknown",
            },
        }
    }
}

impl From<&pb::TaskProgress> for TaskJson {
    fn from(t: &pb::TaskProgress) -> Self {
        Self {
            task_id: t.task_id,
            plugin: t.plugin.clone(),
            asset: t.asset.clone(),
            state: WireState::from_proto(t.state),
            steps_done: t.steps_done,
            total_steps: t.total_steps,
            steps_per_second: t.steps_per_second,
            eta_seconds: t.eta_seconds,
            metrics: t
                .metrics
                .iter()
                .map(|m| (m.name.clone(), m.value))
                .collect(),
            error: (!t.error.is_empty()).then(|| t.error.clone()),
            estimate_bytes: t.estimate_bytes,
            measured_bytes: t.measured_bytes,
            measured_memory: t.measured_memory.as_ref().map(MemoryJson::from),
            slurm: t.slurm.as_ref().map(|s| SlurmJson {
                job_id: s.job_id.clone(),
                node: (!s.node.is_empty()).then(|| s.node.clone()),
                jobs: s.jobs,
                cpu_seconds: s.cpu_seconds,
                gpu_seconds: s.gpu_seconds,
            }),
            detail: (!t.detail.is_empty()).then(|| t.detail.clone()),
            plugin_version: (!t.plugin_version.is_empty()).then(|| t.plugin_version.clone()),
            plugin_checksum: (!t.plugin_checksum.is_empty()).then(|| t.plugin_checksum.clone()),
            stopped_early: (!t.stopped_early.is_empty()).then(|| t.stopped_early.clone()),
            best: t.best.as_ref().map(|b| BestJson {
                step: b.step,
                metric: b.metric.clone(),
                value: b.value,
            }),
            headline_metrics: t.headline_metrics.clone(),
        }
    }
}

impl From<&pb::JobProgress> for ProgressJson {
    fn from(p: &pb::JobProgress) -> Self {
        Self {
            job_id: p.job_id,
            weighted_fraction: p.weighted_fraction,
            tasks: p.tasks.iter().map(TaskJson::from).collect(),
        }
    }
}

impl From<&pb::Job> for JobJson {
    fn from(j: &pb::Job) -> Self {
        let progress = j.progress.clone().unwrap_or_default();
        Self {
            job_id: j.job_id,
            name: j.name.clone(),
            created_unix_ms: j.created_unix_ms,
            progress: ProgressJson {
                // The job's own id even when the host left this one unset.
                job_id: j.job_id,
                ..ProgressJson::from(&progress)
            },
        }
    }
}

impl From<&pb::watch_training_response::Event> for EventJson {
    fn from(e: &pb::watch_training_response::Event) -> Self {
        use pb::watch_training_response::Event;
        match e {
            Event::Progress(p) => Self::Progress(p.into()),
            Event::StateChanged(c) => Self::StateChanged {
                job_id: c.job_id,
                task_id: c.task_id,
                from: WireState::from_proto(c.from),
                to: WireState::from_proto(c.to),
                reason: c.reason.clone(),
                at_unix_ms: c.at_unix_ms,
            },
            Event::Log(l) => Self::Log {
                level: l.level.clone(),
                message: l.message.clone(),
                at_unix_ms: l.at_unix_ms,
                task_id: l.task_id,
                plugin: l.plugin.clone(),
            },
            Event::Finished(j) => Self::Finished { job: j.into() },
        }
    }
}

impl From<&pb::GetResourcesResponse> for ResourcesJson {
    fn from(r: &pb::GetResourcesResponse) -> Self {
        Self {
            devices: r
                .devices
                .iter()
                .map(|d| DeviceJson {
                    name: d.name.clone(),
                    budget_bytes: d.budget_bytes,
                    reserved_bytes: d.reserved_bytes,
                    strategy: d.strategy.clone(),
                    total_bytes: d.total_bytes,
                    free_bytes: d.free_bytes,
                    reservations: d
                        .reservations
                        .iter()
                        .map(|r| ReservationJson {
                            task_id: r.task_id,
                            model: (!r.model.is_empty()).then(|| r.model.clone()),
                            reserved_bytes: r.reserved_bytes,
                            measured_bytes: r.measured_bytes,
                            measured_memory: r.measured_memory.as_ref().map(MemoryJson::from),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Prints one value as a single JSON line (NDJSON) on stdout.
pub fn print_json_line<T: Serialize>(value: &T) -> anyhow::Result<()> {
    crate::outln!("{}", serde_json::to_string(value)?);
    Ok(())
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A task on the wire, for the view and render tests.
    pub(crate) fn task(id: u64, state: pb::TaskState) -> pb::TaskProgress {
        pb::TaskProgress {
            task_id: id,
            plugin: "template".into(),
            asset: "synthetic-ar1:100:1".into(),
            state: state as i32,
            steps_done: 5,
            total_steps: 10,
            steps_per_second: 2.5,
            eta_seconds: Some(2.0),
            metrics: vec![pb::Metric {
                name: "train_loss".into(),
                value: 0.5,
            }],
            error: String::new(),
            estimate_bytes: 1024,
            measured_bytes: None,
            measured_memory: None,
            slurm: None,
            plugin_version: "0.1.0".into(),
            plugin_checksum: String::new(),
            stopped_early: String::new(),
            best: None,
            detail: String::new(),
            headline_metrics: Vec::new(),
        }
    }

    #[test]
    fn json_shapes_are_snake_case_with_state_names() {
        let job = pb::Job {
            job_id: 7,
            name: "n".into(),
            created_unix_ms: 1_700_000_000_000,
            progress: Some(pb::JobProgress {
                job_id: 7,
                weighted_fraction: 0.25,
                tasks: vec![task(1, pb::TaskState::Running)],
            }),
        };
        let v = serde_json::to_value(JobJson::from(&job)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "job_id": 7, "name": "n", "created_unix_ms": 1_700_000_000_000i64,
                "progress": {"job_id": 7, "weighted_fraction": 0.25, "tasks": [{
                    "task_id": 1, "plugin": "template", "asset": "synthetic-ar1:100:1",
                    "state": "running", "steps_done": 5, "total_steps": 10,
                    "steps_per_second": 2.5, "eta_seconds": 2.0,
                    "metrics": {"train_loss": 0.5}, "error": null,
                    "estimate_bytes": 1024, "measured_bytes": null,
                    "measured_memory": null, "plugin_version": "0.1.0", "plugin_checksum": null,
                    "headline_metrics": []
                }]}
            })
        );
        let changed = pb::watch_training_response::Event::StateChanged(pb::TaskStateChanged {
            job_id: 7,
            task_id: 3,
            from: pb::TaskState::Running as i32,
            to: pb::TaskState::Completed as i32,
            reason: "completed 400 steps".into(),
            at_unix_ms: 5,
        });
        let line = serde_json::to_string(&EventJson::from(&changed)).unwrap();
        assert_eq!(
            line,
            r#"{"event":"state_changed","job_id":7,"task_id":3,"from":"running","to":"completed","reason":"completed 400 steps","at_unix_ms":5}"#
        );
        let progress = pb::watch_training_response::Event::Progress(pb::JobProgress {
            job_id: 7,
            weighted_fraction: 0.5,
            tasks: vec![],
        });
        let line = serde_json::to_string(&EventJson::from(&progress)).unwrap();
        assert_eq!(
            line,
            r#"{"event":"progress","job_id":7,"weighted_fraction":0.5,"tasks":[]}"#
        );
        let finished = pb::watch_training_response::Event::Finished(job);
        let v = serde_json::to_value(EventJson::from(&finished)).unwrap();
        assert_eq!(v["event"], "finished");
        assert_eq!(v["job"]["job_id"], 7);
    }
}
