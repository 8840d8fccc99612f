//! Between the wire (`tli.v1` messages) and the orchestrator's own types:
//! stored progress becomes `Job` / `JobProgress`, task states map both ways,
//! and orchestrator and store errors become `Status` codes. Job specs and
//! `StartTrainingRequest`s convert in [`super::job_request`].

use crate::orchestrator::data_root::DataRootError;
use crate::orchestrator::engine::{OrchestratorError, SubmitError};
use crate::orchestrator::listing::JobView;
use crate::orchestrator::progress::{JobProgress, TaskProgress};
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::{
    JobRow, MeasuredMemory, MemorySource, StorageFault, StoreError, TransitionRow,
};
use crate::orchestrator::{JobId, TaskId};
use tli_proto::v1 as pb;
use tonic::Status;

// ----- states ---------------------------------------------------------------

/// A task state on the wire (`None` → UNSPECIFIED).
pub fn state_to_proto(state: Option<TaskState>) -> pb::TaskState {
    match state {
        None => pb::TaskState::Unspecified,
        Some(TaskState::Queued) => pb::TaskState::Queued,
        Some(TaskState::Running) => pb::TaskState::Running,
        Some(TaskState::Checkpointing) => pb::TaskState::Checkpointing,
        Some(TaskState::Completed) => pb::TaskState::Completed,
        Some(TaskState::Failed) => pb::TaskState::Failed,
        Some(TaskState::Cancelled) => pb::TaskState::Cancelled,
        Some(TaskState::Interrupted) => pb::TaskState::Interrupted,
    }
}

/// A task state from the wire: `None` for UNSPECIFIED and unknown numbers.
pub fn state_from_proto(value: i32) -> Option<TaskState> {
    match pb::TaskState::try_from(value).ok()? {
        pb::TaskState::Unspecified => None,
        pb::TaskState::Queued => Some(TaskState::Queued),
        pb::TaskState::Running => Some(TaskState::Running),
        pb::TaskState::Checkpointing => Some(TaskState::Checkpointing),
        pb::TaskState::Completed => Some(TaskState::Completed),
        pb::TaskState::Failed => Some(TaskState::Failed),
        pb::TaskState::Cancelled => Some(TaskState::Cancelled),
        pb::TaskState::Interrupted => Some(TaskState::Interrupted),
    }
}

// ----- progress -------------------------------------------------------------

/// Store ids are positive; anything else shows as 0.
pub fn id_to_proto(id: i64) -> u64 {
    u64::try_from(id).unwrap_or(0)
}

/// A job id from a request: 0 is "not given" (INVALID_ARGUMENT); ids beyond
/// the store's range cannot exist (NOT_FOUND).
pub fn job_id_from_proto(field: &str, id: u64) -> Result<JobId, Status> {
    if id == 0 {
        return Err(invalid(format!("{field}: a job id is required (got 0)")));
    }
    i64::try_from(id).map_err(|_| Status::not_found(format!("job {id} not found")))
}

/// A task id from a request (see [`job_id_from_proto`]); 0 is the caller's to interpret.
pub fn task_id_from_proto(job: JobId, id: u64) -> Result<TaskId, Status> {
    i64::try_from(id).map_err(|_| Status::not_found(format!("task {id} not found in job {job}")))
}

pub fn task_progress(t: &TaskProgress) -> pb::TaskProgress {
    pb::TaskProgress {
        task_id: id_to_proto(t.task),
        plugin: t.plugin.clone(),
        asset: t.asset.clone(),
        state: state_to_proto(Some(t.state)) as i32,
        steps_done: t.steps_done,
        total_steps: t.total_steps,
        steps_per_second: t.steps_per_second,
        eta_seconds: t.eta_seconds,
        metrics: t
            .metrics
            .iter()
            .map(|(name, value)| pb::Metric {
                name: name.clone(),
                value: *value,
            })
            .collect(),
        error: t.error.clone().unwrap_or_default(),
        estimate_bytes: t.estimate_bytes,
        measured_bytes: t.measured_bytes,
        measured_memory: t.measured_memory.as_ref().map(measured_memory),
        slurm: t.slurm.as_ref().map(|s| pb::SlurmPlacement {
            job_id: s.job_id.clone(),
            node: s.node.clone().unwrap_or_default(),
        }),
        plugin_version: t.plugin_version.clone().unwrap_or_default(),
        plugin_checksum: t.plugin_checksum.clone().unwrap_or_default(),
    }
}

/// A measurement by component as a message.
pub fn measured_memory(m: &MeasuredMemory) -> pb::MeasuredMemory {
    pb::MeasuredMemory {
        parameters: m.parameters,
        gradients: m.gradients,
        optimizer_state: m.optimizer_state,
        activations: m.activations,
        source: match m.source {
            MemorySource::PluginCount => pb::MemorySource::PluginCount,
            MemorySource::CudaAllocator => pb::MemorySource::CudaAllocator,
        } as i32,
    }
}

pub fn job_progress(p: &JobProgress) -> pb::JobProgress {
    pb::JobProgress {
        job_id: id_to_proto(p.job),
        weighted_fraction: p.weighted_fraction,
        tasks: p.tasks.iter().map(task_progress).collect(),
    }
}

/// A job with its progress as a message.
pub fn job_view(view: &JobView) -> pb::Job {
    job(&view.row, &view.progress)
}

pub fn job(row: &JobRow, progress: &JobProgress) -> pb::Job {
    pb::Job {
        job_id: id_to_proto(row.id),
        name: row.name.clone(),
        created_unix_ms: row.created_ms,
        progress: Some(job_progress(progress)),
    }
}

pub fn state_changed(job: JobId, t: &TransitionRow) -> pb::TaskStateChanged {
    pb::TaskStateChanged {
        job_id: id_to_proto(job),
        task_id: id_to_proto(t.task_id),
        from: state_to_proto(t.from) as i32,
        to: state_to_proto(Some(t.to)) as i32,
        reason: t.reason.clone(),
        at_unix_ms: t.at_ms,
    }
}

// ----- errors ---------------------------------------------------------------

pub fn invalid(message: impl Into<String>) -> Status {
    Status::invalid_argument(message)
}

/// A full or read-only disk under the store is the operator's to fix
/// (RESOURCE_EXHAUSTED, FAILED_PRECONDITION; the transaction was rolled
/// back, so nothing changed); anything else is the host's own failure.
pub fn store_error(e: StoreError) -> Status {
    match e.storage_fault() {
        Some(StorageFault::Full) => Status::resource_exhausted(format!(
            "job store: {e}: the disk of the state directory is full; nothing was changed: free              space there and try again"
        )),
        Some(StorageFault::ReadOnly) => Status::failed_precondition(format!(
            "job store: {e}: the state directory cannot be written; nothing was changed: make it              writable and try again"
        )),
        None => Status::internal(format!("job store: {e}")),
    }
}

/// Unknown jobs and tasks are NOT_FOUND, a stop of a finished task
/// FAILED_PRECONDITION; failures of the host itself INTERNAL.
pub fn orchestrator_error(e: OrchestratorError) -> Status {
    match e {
        e @ (OrchestratorError::NoSuchJob(_) | OrchestratorError::NoSuchTask { .. }) => {
            Status::not_found(e.to_string())
        }
        OrchestratorError::NotStoppable(message) => Status::failed_precondition(message),
        OrchestratorError::List(e) => invalid(format!("page_token: {e}")),
        OrchestratorError::Store(e) => store_error(e),
        e => Status::internal(e.to_string()),
    }
}

/// Bad specs, models (unknown plugin, refused config) and assets are the
/// caller's to fix; a task bigger than the whole budget is RESOURCE_EXHAUSTED.
pub fn submit_error(e: SubmitError) -> Status {
    match e {
        SubmitError::Spec(message) => invalid(message),
        e @ (SubmitError::Model { .. } | SubmitError::Asset { .. }) => invalid(e.to_string()),
        e @ SubmitError::TooBig { .. } => Status::resource_exhausted(e.to_string()),
        e @ SubmitError::WrongDevice { .. } => Status::failed_precondition(e.to_string()),
        e @ SubmitError::DataRoot {
            error: DataRootError::Outside { .. },
            ..
        } => Status::permission_denied(e.to_string()),
        e @ SubmitError::DataRoot { .. } => invalid(e.to_string()),
        SubmitError::Store(e) => store_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_both_ways() {
        for s in TaskState::ALL {
            assert_eq!(state_from_proto(state_to_proto(Some(s)) as i32), Some(s));
        }
        assert_eq!(state_to_proto(None), pb::TaskState::Unspecified);
        assert_eq!(state_from_proto(0), None);
        assert_eq!(state_from_proto(99), None);
    }
}
