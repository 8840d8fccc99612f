//! `WorkerService`: what `tli worker` processes call back on (proto
//! tli/v1/worker.proto). Every call names its lease; the orchestrator
//! refuses a stale one (FAILED_PRECONDITION: the worker must stop). A
//! record call is applied to the same [`StoreRecord`] a runner thread in
//! the host writes through, so the host stays the only writer of its store;
//! a record that ends the task (a final state, an out-of-memory re-queue)
//! reaps it like a runner thread's end.
//!
//! The service is authenticated with the worker token (never the control
//! API's token) and keeps serving while the host shuts down, so workers can
//! record their last checkpoints.
//!
//! [`StoreRecord`]: tli_runtime::orchestrator::task_record::StoreRecord

use super::{blocking, convert};
use std::sync::Arc;
use tli_proto::v1 as pb;
use tli_proto::v1::record_task_request::Record;
use tli_proto::v1::worker_service_server::WorkerService;
use tli_runtime::orchestrator::engine::{LeaseError, Orchestrator, WorkerLease};
use tli_runtime::orchestrator::runner::{Outcome, StopRequest};
use tli_runtime::orchestrator::state::TaskState;
use tli_runtime::orchestrator::store::{MeasuredMemory, MemorySource, SliceMetrics};
use tli_runtime::orchestrator::sweep::Verdict;
use tli_runtime::orchestrator::task_record::{RecordError, TaskRecord};
use tli_wire::worker_inputs as wire;
use tonic::{Request, Response, Status};

pub struct WorkerApi {
    orchestrator: Arc<Orchestrator>,
}

impl WorkerApi {
    pub fn new(orchestrator: Arc<Orchestrator>) -> Self {
        Self { orchestrator }
    }
}

fn lease_of(lease: Option<pb::WorkerLease>) -> Result<(i64, i64), Status> {
    lease
        .map(|l| (l.task_id, l.dispatch_id))
        .ok_or_else(|| Status::invalid_argument("lease: required"))
}

fn lease_status(e: LeaseError) -> Status {
    match e {
        LeaseError::Stale { .. } => Status::failed_precondition(e.to_string()),
        LeaseError::Store(e) => convert::store_error(e),
        e @ (LeaseError::NotInStore(_)
        | LeaseError::PluginNotLoaded(_)
        | LeaseError::Inputs { .. }
        | LeaseError::NoRemoteExecutor) => Status::internal(e.to_string()),
    }
}

fn record_status(e: RecordError) -> Status {
    match e {
        RecordError::Store(e) => convert::store_error(e),
        RecordError::Host(m) => Status::internal(m),
        RecordError::Sweep(e) => Status::internal(e.to_string()),
    }
}

fn stop_to_wire(stop: StopRequest) -> pb::WorkerStop {
    match stop {
        StopRequest::None | StopRequest::Preempted => pb::WorkerStop::Unspecified,
        StopRequest::Graceful => pb::WorkerStop::Graceful,
        StopRequest::Forced => pb::WorkerStop::Forced,
        StopRequest::Shutdown => pb::WorkerStop::Shutdown,
    }
}

fn level(text: &str) -> &'static str {
    match text {
        "error" => "error",
        "warn" => "warn",
        _ => "info",
    }
}

fn metric_pairs(metrics: Vec<pb::Metric>) -> Vec<(String, f64)> {
    metrics.into_iter().map(|m| (m.name, m.value)).collect()
}

/// How a recorded state ends the task's run, if it does.
fn outcome_of(state: TaskState, reason: &str) -> Option<Outcome> {
    match state {
        TaskState::Completed => Some(Outcome::Completed),
        TaskState::Failed => Some(Outcome::Failed(reason.to_string())),
        TaskState::Cancelled => Some(Outcome::Cancelled),
        TaskState::Interrupted => Some(Outcome::Interrupted),
        TaskState::Queued | TaskState::Running | TaskState::Checkpointing => None,
    }
}

fn apply(
    orchestrator: &Orchestrator,
    lease: &WorkerLease,
    record: Record,
) -> Result<pb::RecordTaskResponse, Status> {
    let r = &lease.record;
    let mut response = pb::RecordTaskResponse::default();
    match record {
        Record::Transition(t) => {
            let to = convert::state_from_proto(t.to)
                .ok_or_else(|| Status::invalid_argument("transition.to: not a task state"))?;
            r.transition(to, &t.reason).map_err(record_status)?;
            if let Some(outcome) = outcome_of(to, &t.reason) {
                orchestrator.worker_ended(r.task, outcome);
            }
        }
        Record::StepsDone(steps) => r.set_steps_done(steps).map_err(record_status)?,
        Record::Progress(p) => {
            let now = tli_runtime::orchestrator::now_ms();
            let batch: Vec<SliceMetrics> = p
                .slices
                .into_iter()
                .map(|s| SliceMetrics {
                    step: s.step,
                    // A worker of an older build sends no time: when it arrives.
                    at_ms: if s.at_unix_ms > 0 { s.at_unix_ms } else { now },
                    metrics: metric_pairs(s.metrics),
                })
                .collect();
            r.record_progress(p.steps_done, &batch)
                .map_err(record_status)?;
        }
        Record::Measured(m) => {
            let source = match pb::MemorySource::try_from(m.source) {
                Ok(pb::MemorySource::CudaAllocator) => MemorySource::CudaAllocator,
                _ => MemorySource::PluginCount,
            };
            r.measured(&MeasuredMemory {
                parameters: m.parameters,
                gradients: m.gradients,
                optimizer_state: m.optimizer_state,
                activations: m.activations,
                source,
            })
            .map_err(record_status)?;
        }
        Record::ListCheckpoints(_) => {
            response.checkpoints = r
                .checkpoints()
                .map_err(record_status)?
                .into_iter()
                .map(|c| pb::CheckpointRecord {
                    id: c.id,
                    step: c.step,
                    path: c.path,
                    checksum: c.checksum,
                    write_seconds: 0.0,
                    best: c.best.map(|b| tli_wire::worker_inputs::best_to_proto(&b)),
                })
                .collect();
        }
        Record::AddCheckpoint(c) => {
            let best = c
                .best
                .map(|b| tli_wire::worker_inputs::best_from_proto(&b))
                .transpose()?;
            response.checkpoint_id = r
                .add_checkpoint(c.step, &c.path, &c.checksum, c.write_seconds, best.as_ref())
                .map_err(record_status)?;
        }
        Record::RemoveCheckpoint(id) => r.remove_checkpoint(id).map_err(record_status)?,
        Record::RequeueAfterOom(why) => {
            r.requeue_after_oom(&why).map_err(record_status)?;
            orchestrator.worker_ended(r.task, Outcome::Requeued(why));
        }
        Record::RungVerdict(step) => {
            response.verdict = match r.rung_verdict(step).map_err(record_status)? {
                Verdict::Continue => pb::RungVerdict::Continue,
                Verdict::Stop => pb::RungVerdict::Stop,
                Verdict::Wait => pb::RungVerdict::Wait,
            } as i32;
        }
        Record::Park(why) => {
            r.park(&why).map_err(record_status)?;
            orchestrator.worker_ended(r.task, Outcome::Parked(why));
        }
    }
    Ok(response)
}

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    async fn attach_worker(
        &self,
        request: Request<pb::AttachWorkerRequest>,
    ) -> Result<Response<pb::AttachWorkerResponse>, Status> {
        let req = request.into_inner();
        let (task, dispatch) = lease_of(req.lease)?;
        let orchestrator = self.orchestrator.clone();
        blocking(move || {
            let a = orchestrator
                .worker_attach(task, dispatch, &req.node)
                .map_err(lease_status)?;
            tracing::info!(
                task,
                dispatch,
                "worker attached from {} (Slurm job {})",
                req.node,
                req.slurm_job_id
            );
            let p = &a.policy;
            Ok(Response::new(pb::AttachWorkerResponse {
                task: Some(pb::WorkerTask {
                    task_id: a.task.id,
                    job_id: a.task.job_id,
                    plugin: a.task.plugin.clone(),
                    plugin_version: a.plugin_version.clone(),
                    config_json: a.task.config_json.clone(),
                    device: a.task.device.to_string(),
                    seed: a.task.seed,
                    total_steps: a.task.total_steps,
                    oom_requeues: a.task.oom_requeues,
                    slice_steps: a.slice_steps,
                    checkpoint: Some(pb::CheckpointPolicy {
                        every_steps: p.every_steps.unwrap_or(0),
                        every_seconds: p.every_seconds.unwrap_or(0.0),
                        keep: u32::try_from(p.keep).unwrap_or(u32::MAX),
                    }),
                    checkpoint_dir: a.checkpoint_dir.display().to_string(),
                    threads: a.threads,
                    selection_json: if a.selection.is_empty() {
                        String::new()
                    } else {
                        serde_json::to_string(&a.selection).unwrap_or_default()
                    },
                    rungs: a.rungs.clone(),
                }),
                inputs: Some(wire::inputs_to_wire(&a.inputs)),
            }))
        })
        .await
    }

    async fn worker_heartbeat(
        &self,
        request: Request<pb::WorkerHeartbeatRequest>,
    ) -> Result<Response<pb::WorkerHeartbeatResponse>, Status> {
        let req = request.into_inner();
        let (task, dispatch) = lease_of(req.lease)?;
        let orchestrator = self.orchestrator.clone();
        blocking(move || {
            let lease = orchestrator
                .worker_lease(task, dispatch)
                .map_err(lease_status)?;
            let logs: Vec<(&'static str, String)> = req
                .logs
                .into_iter()
                .map(|l| (level(&l.level), l.message))
                .collect();
            let stop = orchestrator.worker_heartbeat(
                &lease,
                req.steps_done,
                &metric_pairs(req.metrics),
                &logs,
            );
            Ok(Response::new(pb::WorkerHeartbeatResponse {
                stop: stop_to_wire(stop) as i32,
            }))
        })
        .await
    }

    async fn record_task(
        &self,
        request: Request<pb::RecordTaskRequest>,
    ) -> Result<Response<pb::RecordTaskResponse>, Status> {
        let req = request.into_inner();
        let (task, dispatch) = lease_of(req.lease)?;
        let record = req
            .record
            .ok_or_else(|| Status::invalid_argument("record: required"))?;
        let orchestrator = self.orchestrator.clone();
        blocking(move || {
            let lease = orchestrator
                .worker_lease(task, dispatch)
                .map_err(lease_status)?;
            apply(&orchestrator, &lease, record).map(Response::new)
        })
        .await
    }
}
