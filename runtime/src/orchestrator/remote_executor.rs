//! The seam between the engine and an executor beyond this host (Slurm
//! today; anything that runs a batch job which starts `tli worker`).
//!
//! The engine keeps every decision and every record: which queued task to
//! hand over and when, the dispatch row whose id is the worker's lease, the
//! re-queue after a lost job, the limit on attempts. A [`RemoteExecutor`]
//! only does what needs the outside system: [`dispatch`](RemoteExecutor::dispatch)
//! a task, [`poll`](RemoteExecutor::poll) which jobs ended,
//! [`cancel`](RemoteExecutor::cancel) one, and at start-up
//! [`adopt`](RemoteExecutor::adopt) those that still live. It never touches
//! the store or the engine's maps, and may block (its commands have their own
//! timeouts); the engine calls it from scheduling rounds and stops, never
//! under the arbiter's lock.

use super::executor::ExecutorKind;
use super::job::JobSpec;
use super::store::DispatchUsage;
use super::TaskId;
use std::path::PathBuf;
use std::time::Duration;
use tli_plugin_api::{Device, TaskInputs};

/// What the engine asks an executor to run.
pub struct DispatchRequest<'a> {
    pub task: TaskId,
    /// The dispatch row's id: the lease the worker acts under.
    pub dispatch: i64,
    pub device: Device,
    /// What the task's run needs on its device (estimate or measurement,
    /// with the host's margin).
    pub reserved_bytes: u64,
    /// The task's inputs (the worker receives them from the host).
    pub inputs: &'a TaskInputs,
    /// The task's job (its executor options: GPUs, time limit, ...).
    pub spec: &'a JobSpec,
}

/// A task the executor accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatched {
    /// The executor's id of the job (a Slurm job id).
    pub external_id: String,
    /// The request as submitted, for the dispatch's record.
    pub request: String,
}

/// A job that is no longer alive, with how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedJob {
    pub external_id: String,
    /// The executor's word for its end ("COMPLETED", "TIMEOUT", "state unknown", ...).
    pub state: String,
    /// Whether it ever started (was given resources): `Some(false)` for a
    /// job cancelled or preempted while it waited, `None` when unknown.
    pub started: Option<bool>,
    /// Whether something outside it ended it (a cancel by a person or the
    /// host, a preemption) rather than its own process exiting or failing.
    pub cancelled: bool,
}

/// A job that is still alive, as the executor sees it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveJob {
    pub external_id: String,
    /// The executor's word for its state ("PENDING", "RUNNING", "COMPLETING", ...).
    pub state: String,
    /// Why it waits, when it does ("Resources", "Priority"); empty otherwise.
    pub reason: String,
    /// Whether it has been given resources: its worker is starting or runs.
    pub running: bool,
}

/// What a poll found: the jobs that ended and the state of those that live.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PollReport {
    pub ended: Vec<EndedJob>,
    pub live: Vec<LiveJob>,
}

/// Where a worker of a task keeps what it writes, and how many threads it
/// gives libtorch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSetup {
    pub checkpoint_dir: PathBuf,
    pub threads: u32,
}

/// Why an executor could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The executor said no, in its own words.
    #[error("{executor} refused the job: {message}")]
    Refused {
        executor: &'static str,
        message: String,
    },
    /// It could not be reached now (its controller restarting, a timeout):
    /// the engine keeps the task queued and tries again later.
    #[error("{executor} is not reachable now ({message})")]
    Transient {
        executor: &'static str,
        message: String,
    },
    /// It could not be asked (not installed, timed out, unreadable answer, ...).
    #[error(transparent)]
    Unavailable(Box<dyn std::error::Error + Send + Sync>),
}

/// An executor that runs tasks outside this host as batch jobs.
pub trait RemoteExecutor: Send + Sync {
    /// Which executor of job specs this is (`"executor": "slurm"`).
    fn kind(&self) -> ExecutorKind;
    /// Its name in messages to people ("Slurm").
    fn name(&self) -> &'static str;
    /// The most of this host's jobs it may hold at once (pending or running).
    fn capacity(&self) -> usize;
    /// How often [`poll`](Self::poll) is worth calling.
    fn poll_interval(&self) -> Duration {
        Duration::from_secs(2)
    }
    /// How long after a job with an attached worker is seen ended the engine
    /// still waits for that worker's own report before it counts the job as
    /// lost (a report may be in flight as the job ends).
    fn report_grace(&self) -> Duration {
        Duration::from_secs(10)
    }
    /// Submits a job that runs `tli worker` for the task under the lease.
    fn dispatch(&self, request: &DispatchRequest<'_>) -> Result<Dispatched, ExecutorError>;
    /// How long a job may run without its worker attaching before the
    /// engine gives it up as lost (a wrong worker URL, a firewall, a node
    /// without the binary): counted from when the job is first seen running.
    fn attach_timeout(&self) -> Duration {
        Duration::from_secs(120)
    }
    /// Which of `jobs` are no longer alive (and how each ended), and the
    /// state of the others.
    fn poll(&self, jobs: &[String]) -> Result<PollReport, ExecutorError>;
    /// What each of the ended `jobs` used (`(external id, request as
    /// submitted)` pairs), for those the executor's accounting knows yet.
    fn usage(
        &self,
        _jobs: &[(String, String)],
    ) -> Result<Vec<(String, DispatchUsage)>, ExecutorError> {
        Ok(Vec::new())
    }
    /// Cancels a job (its worker is given up on).
    fn cancel(&self, external_id: &str) -> Result<(), ExecutorError>;
    /// At start-up: which of `jobs` (from dispatches a previous host left
    /// open) still live, so the engine can re-adopt them.
    fn adopt(&self, jobs: &[String]) -> Result<Vec<String>, ExecutorError>;
    /// Where the worker of `task` keeps its checkpoints, and its threads.
    fn worker_setup(&self, task: TaskId) -> WorkerSetup;
    /// What a job that ended before its worker reached the host left to
    /// read (the end of its output), as a clause for a task's error.
    fn lost_job_output(&self, _task: TaskId, _dispatch: i64) -> String {
        String::new()
    }
}
