//! The small conversions both ends of `tli.v1` share: task states both
//! ways, ids, a measurement by component, a state change, and the
//! INVALID_ARGUMENT status every request check returns.

use tli_core::state::TaskState;
use tli_core::{JobId, TaskId};
use tli_proto::v1 as pb;
use tli_store::{MeasuredMemory, MemorySource, TransitionRow};
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

pub fn invalid(message: impl Into<String>) -> Status {
    Status::invalid_argument(message)
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
