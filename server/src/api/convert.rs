//! Between the wire (`tli.v1` messages) and the orchestrator's own types:
//! stored progress becomes `Job` / `JobProgress`, and orchestrator and store
//! errors become `Status` codes. The conversions a client shares (states,
//! ids, job specs, history) are in `tli-wire`.

pub use tli_wire::convert::{
    id_to_proto, invalid, job_id_from_proto, measured_memory, state_changed, state_from_proto,
    state_to_proto, task_id_from_proto,
};

use tli_proto::v1 as pb;
use tli_runtime::orchestrator::data_root::DataRootError;
use tli_runtime::orchestrator::engine::{OrchestratorError, SubmitError};
use tli_runtime::orchestrator::listing::JobView;
use tli_runtime::orchestrator::progress::{JobProgress, TaskProgress};
use tli_runtime::orchestrator::store::{JobRow, StorageFault, StoreError};
use tonic::Status;

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
            jobs: s.jobs,
            cpu_seconds: s.cpu_seconds,
            gpu_seconds: s.gpu_seconds,
        }),
        detail: t.detail.clone().unwrap_or_default(),
        plugin_version: t.plugin_version.clone().unwrap_or_default(),
        plugin_checksum: t.plugin_checksum.clone().unwrap_or_default(),
        stopped_early: t.stopped_early.clone().unwrap_or_default(),
        best: t.best.as_ref().map(|(step, b)| pb::BestModel {
            step: *step,
            metric: b.metric.clone(),
            value: b.value,
        }),
        headline_metrics: t.headline_metrics.clone(),
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

/// A full or read-only disk under the store is the operator's to fix
/// (RESOURCE_EXHAUSTED, FAILED_PRECONDITION; the transaction was rolled
/// back, so nothing changed); anything else is the host's own failure.
pub fn store_error(e: StoreError) -> Status {
    match e.storage_fault() {
        Some(StorageFault::Full) => Status::resource_exhausted(format!(
            "job store: {e}: the disk of the state directory is full; nothing was changed: free \
             space there and try again"
        )),
        Some(StorageFault::ReadOnly) => Status::failed_precondition(format!(
            "job store: {e}: the state directory cannot be written; nothing was changed: make it \
             writable and try again"
        )),
        None => Status::internal(format!("job store: {e}")),
    }
}

/// Unknown jobs and tasks are NOT_FOUND, a stop of a finished task
/// FAILED_PRECONDITION; failures of the host itself INTERNAL.
pub fn orchestrator_error(e: OrchestratorError) -> Status {
    match e {
        e @ (OrchestratorError::NoSuchJob(_)
        | OrchestratorError::NoSuchTask { .. }
        | OrchestratorError::UnknownTask(_)) => Status::not_found(e.to_string()),
        e @ (OrchestratorError::TaskNotStoppable { .. }
        | OrchestratorError::NothingToStop { .. }
        | OrchestratorError::Inputs { .. }) => Status::failed_precondition(e.to_string()),
        OrchestratorError::List(e) => invalid(format!("page_token: {e}")),
        OrchestratorError::Store(e) => store_error(e),
        e => Status::internal(e.to_string()),
    }
}

/// Bad specs, models (unknown plugin, refused config) and assets are the
/// caller's to fix; a task bigger than the whole budget is RESOURCE_EXHAUSTED.
pub fn submit_error(e: SubmitError) -> Status {
    match e {
        SubmitError::Spec(e) => invalid(e.to_string()),
        e @ (SubmitError::NoSlurmExecutor
        | SubmitError::Config { .. }
        | SubmitError::Model { .. }
        | SubmitError::Sweep(_)
        | SubmitError::RungsMissValidation { .. }
        | SubmitError::Asset { .. }) => invalid(e.to_string()),
        e @ SubmitError::Encode(_) => Status::internal(e.to_string()),
        e @ SubmitError::TooBig { .. } => Status::resource_exhausted(e.to_string()),
        e @ SubmitError::WrongDevice { .. } => Status::failed_precondition(e.to_string()),
        e @ SubmitError::DataRoot {
            error: DataRootError::Outside { .. },
            ..
        } => Status::permission_denied(e.to_string()),
        e @ SubmitError::DataRoot { .. } => invalid(e.to_string()),
        e @ SubmitError::CovariateRoot {
            error: DataRootError::Outside { .. },
            ..
        } => Status::permission_denied(e.to_string()),
        e @ SubmitError::CovariateRoot { .. } => invalid(e.to_string()),
        SubmitError::Store(e) => store_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_failure(code: i32) -> StoreError {
        StoreError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    }

    /// The two storage faults' messages read as one sentence each: no run of
    /// spaces left by a string continued over two source lines.
    #[test]
    fn storage_fault_messages_have_no_gaps() {
        for (code, expect) in [
            (rusqlite::ffi::SQLITE_FULL, "free space there"),
            (rusqlite::ffi::SQLITE_READONLY, "make it writable"),
        ] {
            let status = store_error(sqlite_failure(code));
            let message = status.message();
            assert!(message.contains(expect), "{message}");
            assert!(!message.contains("  "), "a gap in: {message:?}");
        }
    }
}
