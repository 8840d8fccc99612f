//! [`RemoteRecord`]: a worker's [`TaskRecord`]. Each durable record is one
//! `RecordTask` call to the host (retried while the host is unreachable);
//! live progress and plugin log lines are buffered here and sent with the
//! next heartbeat.

use super::client::HostConnection;
use super::WorkerError;
use std::sync::{Arc, Mutex, MutexGuard};
use tli_proto::v1 as pb;
use tli_proto::v1::record_task_request::Record;
use tli_runtime::orchestrator::state::TaskState;
use tli_runtime::orchestrator::store::{
    BestMark, CheckpointRow, MeasuredMemory, MemorySource, SliceMetrics,
};
use tli_runtime::orchestrator::sweep::Verdict;
use tli_runtime::orchestrator::task_record::{RecordError, TaskRecord};
use tli_runtime::orchestrator::TaskId;
use tli_runtime::services::TaskLogSink;

/// Log lines kept for the next heartbeat at most (older ones are dropped).
const MAX_BUFFERED_LOGS: usize = 10_000;

/// What the next heartbeat carries.
#[derive(Default)]
pub struct Outbox {
    pub steps: u64,
    pub metrics: Vec<(String, f64)>,
    pub logs: Vec<pb::WorkerLogLine>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct RemoteRecord {
    pub host: Arc<HostConnection>,
    pub lease: pb::WorkerLease,
    pub outbox: Arc<Mutex<Outbox>>,
}

impl RemoteRecord {
    pub fn new(host: Arc<HostConnection>, task: TaskId, dispatch: i64) -> Self {
        Self {
            host,
            lease: pb::WorkerLease {
                task_id: task,
                dispatch_id: dispatch,
            },
            outbox: Arc::new(Mutex::new(Outbox::default())),
        }
    }

    fn record(&self, what: &str, record: Record) -> Result<pb::RecordTaskResponse, RecordError> {
        let request = pb::RecordTaskRequest {
            lease: Some(self.lease),
            record: Some(record),
        };
        self.host
            .call(what, |mut client| {
                let request = request.clone();
                async move { client.record_task(request).await }
            })
            .map_err(|e: WorkerError| RecordError::Host(e.to_string()))
    }

    /// Takes what the next heartbeat sends.
    pub fn take_outbox(&self) -> Outbox {
        let mut outbox = lock(&self.outbox);
        Outbox {
            steps: outbox.steps,
            metrics: std::mem::take(&mut outbox.metrics),
            logs: std::mem::take(&mut outbox.logs),
        }
    }
}

pub fn metrics_to_wire(metrics: &[(String, f64)]) -> Vec<pb::Metric> {
    metrics
        .iter()
        .map(|(name, value)| pb::Metric {
            name: name.clone(),
            value: *value,
        })
        .collect()
}

impl RemoteRecord {
    /// One heartbeat carrying what the outbox holds; the host's answer.
    pub fn send_heartbeat(&self) -> Result<pb::WorkerHeartbeatResponse, tonic::Status> {
        let outbox = self.take_outbox();
        let request = pb::WorkerHeartbeatRequest {
            lease: Some(self.lease),
            steps_done: outbox.steps,
            metrics: metrics_to_wire(&outbox.metrics),
            logs: outbox.logs,
        };
        self.host
            .call_once(|mut client| async move { client.worker_heartbeat(request).await })
    }

    /// Sends the buffered log lines and live progress now (before a state
    /// change: after a final one the host no longer takes this worker's
    /// heartbeats, and a short task may end between two of them). A failure
    /// loses only those lines; the worker's own log has them too.
    fn flush_outbox(&self) {
        let pending = {
            let outbox = lock(&self.outbox);
            !outbox.logs.is_empty() || !outbox.metrics.is_empty()
        };
        if !pending {
            return;
        }
        if let Err(status) = self.send_heartbeat() {
            tracing::warn!(
                "log lines not sent: {}: {}",
                status.code(),
                status.message()
            );
        }
    }
}

impl TaskRecord for RemoteRecord {
    fn transition(&self, to: TaskState, reason: &str) -> Result<(), RecordError> {
        self.flush_outbox();
        self.record(
            "recording a state change",
            Record::Transition(pb::TaskTransition {
                to: tli_wire::convert::state_to_proto(Some(to)) as i32,
                reason: reason.to_string(),
            }),
        )
        .map(|_| ())
    }

    fn set_steps_done(&self, steps: u64) -> Result<(), RecordError> {
        self.record("recording the start step", Record::StepsDone(steps))
            .map(|_| ())
    }

    fn live(&self, steps: u64, metrics: &[(String, f64)]) {
        let mut outbox = lock(&self.outbox);
        outbox.steps = steps;
        for (name, value) in metrics {
            match outbox.metrics.iter_mut().find(|(n, _)| n == name) {
                Some(slot) => slot.1 = *value,
                None => outbox.metrics.push((name.clone(), *value)),
            }
        }
    }

    fn record_progress(&self, steps: u64, batch: &[SliceMetrics]) -> Result<(), RecordError> {
        let slices = batch
            .iter()
            .map(|slice| pb::SliceMetrics {
                step: slice.step,
                metrics: metrics_to_wire(&slice.metrics),
                at_unix_ms: slice.at_ms,
            })
            .collect();
        self.record(
            "recording progress",
            Record::Progress(pb::ProgressBatch {
                steps_done: steps,
                slices,
            }),
        )
        .map(|_| ())
    }

    fn measured(&self, memory: &MeasuredMemory) -> Result<(), RecordError> {
        let source = match memory.source {
            MemorySource::PluginCount => pb::MemorySource::PluginCount,
            MemorySource::CudaAllocator => pb::MemorySource::CudaAllocator,
        };
        self.record(
            "recording measured memory",
            Record::Measured(pb::MeasuredMemory {
                parameters: memory.parameters,
                gradients: memory.gradients,
                optimizer_state: memory.optimizer_state,
                activations: memory.activations,
                source: source as i32,
            }),
        )
        .map(|_| ())
    }

    fn checkpoints(&self) -> Result<Vec<CheckpointRow>, RecordError> {
        let response = self.record(
            "listing checkpoints",
            Record::ListCheckpoints(pb::ListCheckpoints {}),
        )?;
        Ok(response
            .checkpoints
            .into_iter()
            .map(|c| CheckpointRow {
                id: c.id,
                task_id: self.lease.task_id,
                step: c.step,
                path: c.path,
                checksum: c.checksum,
                created_ms: 0,
                best: c
                    .best
                    .and_then(|b| tli_wire::worker_inputs::best_from_proto(&b).ok()),
            })
            .collect())
    }

    fn add_checkpoint(
        &self,
        step: u64,
        path: &str,
        checksum: &str,
        write_seconds: f64,
        best: Option<&BestMark>,
    ) -> Result<i64, RecordError> {
        let response = self.record(
            "recording a checkpoint",
            Record::AddCheckpoint(pb::CheckpointRecord {
                id: 0,
                step,
                path: path.to_string(),
                checksum: checksum.to_string(),
                write_seconds,
                best: best.map(tli_wire::worker_inputs::best_to_proto),
            }),
        )?;
        Ok(response.checkpoint_id)
    }

    fn remove_checkpoint(&self, id: i64) -> Result<(), RecordError> {
        self.record("forgetting a checkpoint", Record::RemoveCheckpoint(id))
            .map(|_| ())
    }

    fn requeue_after_oom(&self, why: &str) -> Result<(), RecordError> {
        self.record(
            "re-queueing after out of memory",
            Record::RequeueAfterOom(why.to_string()),
        )
        .map(|_| ())
    }

    fn rung_verdict(&self, step: u64) -> Result<Verdict, RecordError> {
        let response = self.record("asking for a rung verdict", Record::RungVerdict(step))?;
        Ok(match pb::RungVerdict::try_from(response.verdict) {
            Ok(pb::RungVerdict::Stop) => Verdict::Stop,
            Ok(pb::RungVerdict::Continue) => Verdict::Continue,
            // An older host, or one that cannot tell: park and let it decide.
            _ => Verdict::Wait,
        })
    }

    fn park(&self, why: &str) -> Result<(), RecordError> {
        self.record("parking at a rung", Record::Park(why.to_string()))
            .map(|_| ())
    }

    fn log_sink(&self) -> Arc<dyn TaskLogSink> {
        Arc::new(OutboxLogs(self.outbox.clone()))
    }

    fn forget_live(&self) {}
}

/// Plugin log lines into the outbox (and the worker's own log, by the services).
struct OutboxLogs(Arc<Mutex<Outbox>>);

impl TaskLogSink for OutboxLogs {
    fn log_line(&self, _plugin: &str, level: &'static str, message: &str) {
        let mut outbox = lock(&self.0);
        if outbox.logs.len() >= MAX_BUFFERED_LOGS {
            outbox.logs.remove(0);
        }
        outbox.logs.push(pb::WorkerLogLine {
            level: level.to_string(),
            message: message.to_string(),
        });
    }
}
