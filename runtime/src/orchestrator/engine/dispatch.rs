//! The engine's side of a remote executor (Slurm, behind the
//! [`RemoteExecutor`] seam). A queued task of such a job is *dispatched*: a
//! dispatch row is opened (its id is the lease the worker acts under), the
//! executor submits a batch job starting `tli worker` with a request sized
//! from the task's estimate, and the task waits in the running map as
//! [`Runner::Remote`] until its worker attaches over the worker service. The worker
//! then records everything through [`Orchestrator::worker_lease`] (the same
//! [`StoreRecord`] a local runner uses) and learns of stop requests from its
//! heartbeats.
//!
//! Failures: the executor is polled every [`RemoteExecutor::poll_interval`];
//! a job that ended without its worker reporting leaves the task interrupted
//! and re-queued (a new job resumes it from its last checkpoint). A job whose
//! worker had attached counts as ended only once the executor says so (a
//! Slurm job COMPLETING is still alive: its worker may be saving) and
//! [`RemoteExecutor::report_grace`] has passed since, so a worker's last
//! report is never refused and no new job takes the lease while the old
//! worker may still write. A task the lost worker had already recorded as
//! interrupted is re-queued all the same. A task
//! interrupted by the executor's signal (time limit, `scancel`) is re-queued
//! too. A refused submission fails the task with the executor's message;
//! one the executor could not take now (its controller restarting: a
//! transient refusal) leaves the task queued and holds every submission
//! back for [`FIRST_BACKOFF`], doubling up to [`MAX_BACKOFF`] while it lasts. At
//! start-up an open dispatch whose job still lives is re-adopted: its task
//! keeps its state and its worker, which retries its calls, carries on.

use super::{lock, Orchestrator, OrchestratorError, Runner, RunningTask};
use crate::orchestrator::executor::ExecutorKind;
use crate::orchestrator::job::{CheckpointPolicy, JobSpec};
use crate::orchestrator::remote_executor::{
    DispatchRequest, EndedJob, ExecutorError, LiveJob, RemoteExecutor,
};
use crate::orchestrator::runner::{Outcome, RunnerEvent, StopRequest};
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::{StoreError, TaskRow};
use crate::orchestrator::task_record::StoreRecord;
use crate::orchestrator::{JobId, TaskId};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tli_core::selection::Selection;
use tli_plugin_api::TaskInputs;

/// Jobs that may start and end before their worker reaches the host (a
/// wrong binary path, an unreachable host) before the task fails; a job
/// cancelled or preempted (by a person, or by Slurm for another job) does
/// not count, nor does one that never started.
pub const EARLY_LOSSES_BEFORE_FAILING: u32 = 3;
/// How long one scheduling round may spend submitting tasks; the rest wait
/// for the next round.
pub const SUBMIT_BUDGET: Duration = Duration::from_millis(500);

/// How long after a dispatch ends its usage is still asked of the executor's
/// accounting (jobs it never records are given up on after this).
pub const USAGE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// How often the accounting is asked about ended jobs.
const USAGE_POLL: Duration = Duration::from_secs(10);

/// Attempts (dispatches) of one task before a lost or signalled one is no
/// longer re-queued.
pub const MAX_DISPATCHES: usize = 50;

/// The remote side of a task in the running map.
#[derive(Clone, Debug)]
pub(super) struct RemoteTask {
    /// The dispatch row id: the worker's lease.
    pub dispatch: i64,
    /// The executor's id of its job (a Slurm job id).
    pub external_id: String,
    /// Whether its worker has attached.
    pub attached: bool,
    /// The task's job and plugin (a worker's calls need no store read).
    pub job: JobId,
    pub plugin: String,
}

/// The engine's remote executor and its bookkeeping.
pub(super) struct Remote {
    pub executor: Arc<dyn RemoteExecutor>,
    last_poll: Mutex<Option<Instant>>,
    /// Jobs per task that ended before their worker attached.
    early_losses: Mutex<HashMap<TaskId, u32>>,
    /// When each ended job with an attached worker was first seen ended
    /// (by external id): it is lost once the report grace has passed.
    ended_seen: Mutex<HashMap<String, Instant>>,
    /// After a transient refusal: no submission before this instant, and
    /// the wait after the next refusal.
    backoff: Mutex<(Option<Instant>, Duration)>,
    /// The latest transient refusal, while submissions are held back.
    pub waiting: Mutex<Option<String>>,
    /// When each job whose worker has not attached was first seen running.
    running_seen: Mutex<HashMap<String, Instant>>,
    last_usage_poll: Mutex<Option<Instant>>,
}

/// The first wait after the executor could not be reached; it doubles with
/// every refusal in a row, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(2);
/// The longest wait between submissions while the executor is unreachable.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why a task could not be submitted.
pub(super) enum DispatchFailure {
    /// For good: the task fails with this message.
    Refused(String),
    /// The executor could not be reached now: the task stays queued.
    Transient(String),
}

impl From<String> for DispatchFailure {
    fn from(message: String) -> Self {
        Self::Refused(message)
    }
}

impl Remote {
    pub fn new(executor: Arc<dyn RemoteExecutor>) -> Self {
        Self {
            executor,
            last_poll: Mutex::new(None),
            early_losses: Mutex::new(HashMap::new()),
            ended_seen: Mutex::new(HashMap::new()),
            backoff: Mutex::new((None, FIRST_BACKOFF)),
            waiting: Mutex::new(None),
            running_seen: Mutex::new(HashMap::new()),
            last_usage_poll: Mutex::new(None),
        }
    }

    /// Whether a submission may be tried now (none while backing off).
    pub(super) fn may_submit(&self) -> bool {
        lock(&self.backoff).0.is_none_or(|t| Instant::now() >= t)
    }

    /// A submission got through: no more waiting.
    fn reached(&self) {
        *lock(&self.backoff) = (None, FIRST_BACKOFF);
        *lock(&self.waiting) = None;
    }

    /// A transient refusal: wait, longer each time; returns the wait.
    fn back_off(&self, why: &ExecutorError) -> Duration {
        let mut backoff = lock(&self.backoff);
        let wait = backoff.1;
        *backoff = (Some(Instant::now() + wait), (wait * 2).min(MAX_BACKOFF));
        *lock(&self.waiting) = Some(format!(
            "{why} (since {}; submissions are tried again every {} s at most)",
            clock_time(),
            MAX_BACKOFF.as_secs()
        ));
        wait
    }

    /// Cancels a job, logging (not returning) a failure: the task's record
    /// is already what it must be.
    fn cancel(&self, task: TaskId, external_id: &str) {
        if let Err(e) = self.executor.cancel(external_id) {
            tracing::warn!(task, "cancelling job {external_id}: {e}");
        }
    }
}

/// The time of day now, UTC ("04:31:07 UTC"), for notes people read.
fn clock_time() -> String {
    let secs = crate::orchestrator::now_ms()
        .div_euclid(1000)
        .rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// What a worker receives when it attaches.
pub struct WorkerAssignment {
    pub task: TaskRow,
    /// The plugin version this host loaded (the worker must load the same).
    pub plugin_version: String,
    pub slice_steps: u64,
    pub policy: CheckpointPolicy,
    /// The model's `keep_best` and `early_stopping`.
    pub selection: Selection,
    /// A sweep trial's decision rungs (empty otherwise).
    pub rungs: Vec<u64>,
    pub checkpoint_dir: PathBuf,
    pub threads: u32,
    pub inputs: TaskInputs,
}

/// A worker's standing: where its records go and the task's stop request.
pub struct WorkerLease {
    pub record: StoreRecord,
    pub stop: Arc<AtomicU8>,
    /// The task's plugin (log lines are tagged with it).
    pub plugin: String,
}

/// Why a worker's call is refused.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "task {task} is not dispatched under lease {dispatch} any more (stopped, re-queued or \
         given to another Slurm job); this worker must stop"
    )]
    Stale { task: TaskId, dispatch: i64 },
    #[error("job store: {0}")]
    Store(#[from] StoreError),
    #[error("task {0} is not in the store")]
    NotInStore(TaskId),
    #[error("plugin {0} is not loaded in the host")]
    PluginNotLoaded(String),
    /// The task's inputs could not be rebuilt for its worker.
    #[error("task {task}: {message}")]
    Inputs { task: TaskId, message: String },
    #[error("this host has no remote executor")]
    NoRemoteExecutor,
}

impl Orchestrator {
    /// The remote executor's name for messages ("Slurm").
    fn remote_name(&self) -> &'static str {
        self.remote.as_ref().map_or("Slurm", |r| r.executor.name())
    }

    /// Where a job's tasks run: the spec's executor, else the host's default.
    pub(super) fn executor_of(&self, job: JobId) -> ExecutorKind {
        if let Some(kind) = lock(&self.job_executors).get(&job) {
            return *kind;
        }
        let kind = self
            .store
            .job(job)
            .ok()
            .flatten()
            .and_then(|row| serde_json::from_str::<JobSpec>(&row.spec_json).ok())
            .and_then(|spec| spec.executor)
            .unwrap_or(self.config.default_executor);
        lock(&self.job_executors).insert(job, kind);
        kind
    }

    /// Tasks with a remote job (pending or running).
    pub(super) fn remote_count(&self) -> usize {
        lock(&self.running)
            .values()
            .filter(|r| r.remote().is_some())
            .count()
    }

    /// Submits `task` to the remote executor. A refusal fails the task with
    /// the executor's message.
    pub(super) fn dispatch_remote(&self, task: &TaskRow) -> Result<(), DispatchFailure> {
        let Some(remote) = &self.remote else {
            return Err(DispatchFailure::Refused(
                "this host has no Slurm executor (start it with --executor slurm)".into(),
            ));
        };
        let (spec, _dataset, inputs) = self.task_inputs(task)?;
        let dispatch = self
            .store
            .open_dispatch(task.id, remote.executor.kind().as_str())
            .map_err(|e| e.to_string())?;
        let request = DispatchRequest {
            task: task.id,
            dispatch,
            device: task.device,
            reserved_bytes: lock(&self.arbiter)
                .with_margin(task.measured_bytes.unwrap_or(task.estimate_bytes)),
            inputs: &inputs,
            spec: &spec,
        };
        match remote.executor.dispatch(&request) {
            Ok(submitted) => {
                remote.reached();
                let job = submitted.external_id;
                self.store
                    .set_dispatch_submitted(dispatch, &job, &submitted.request)
                    .map_err(|e| e.to_string())?;
                tracing::info!(
                    task = task.id,
                    dispatch,
                    "submitted as {} job {job}: {}",
                    remote.executor.name(),
                    submitted.request
                );
                self.live.set_note(
                    task.id,
                    Some(format!("{} job {job} submitted", remote.executor.name())),
                );
                lock(&self.running).insert(
                    task.id,
                    RunningTask::dispatched(RemoteTask {
                        dispatch,
                        external_id: job,
                        attached: false,
                        job: task.job_id,
                        plugin: task.plugin.clone(),
                    }),
                );
                // A stop that came while sbatch ran found no job to cancel: do it here.
                let still_queued = self
                    .store
                    .task(task.id)
                    .ok()
                    .flatten()
                    .is_some_and(|t| t.state == TaskState::Queued);
                if !still_queued {
                    self.withdraw_pending(task.id, "stopped while it was being submitted");
                }
                Ok(())
            }
            Err(e @ ExecutorError::Transient { .. }) => {
                let wait = remote.back_off(&e);
                let why = format!(
                    "{e}; the task stays queued and is submitted again in {} s",
                    wait.as_secs()
                );
                let _ = self.store.end_dispatch(dispatch, &why);
                Err(DispatchFailure::Transient(why))
            }
            Err(e) => {
                let why = e.to_string();
                let _ = self.store.end_dispatch(dispatch, &why);
                Err(DispatchFailure::Refused(why))
            }
        }
    }

    /// Asks the executor which jobs ended (at most every
    /// [`RemoteExecutor::poll_interval`]) and handles those that ended
    /// without their worker reporting, and those running too long without
    /// their worker attaching; notes what the others wait for, and asks the
    /// accounting what ended jobs used.
    pub(super) fn poll_remote(&self) {
        let Some(executor) = &self.remote else {
            return;
        };
        {
            let mut last = lock(&executor.last_poll);
            if last.is_some_and(|t| t.elapsed() < executor.executor.poll_interval()) {
                return;
            }
            *last = Some(Instant::now());
        }
        self.collect_usage(executor);
        let watched: Vec<(TaskId, RemoteTask)> = lock(&self.running)
            .iter()
            .filter_map(|(id, r)| r.remote().cloned().map(|remote| (*id, remote)))
            .collect();
        if watched.is_empty() {
            lock(&executor.running_seen).clear();
            return;
        }
        let jobs: Vec<String> = watched.iter().map(|(_, r)| r.external_id.clone()).collect();
        let report = match executor.executor.poll(&jobs) {
            Ok(report) => report,
            Err(e) => {
                tracing::warn!(
                    "cannot ask {} about its jobs: {e}",
                    executor.executor.name()
                );
                return;
            }
        };
        self.note_live_jobs(executor, &watched, &report.live);
        let grace = executor.executor.report_grace();
        let lost: Vec<_> = {
            let mut seen = lock(&executor.ended_seen);
            seen.retain(|job, _| report.ended.iter().any(|e| &e.external_id == job));
            report
                .ended
                .into_iter()
                .filter(|end| {
                    let attached = watched
                        .iter()
                        .any(|(_, r)| r.external_id == end.external_id && r.attached);
                    let first = *seen
                        .entry(end.external_id.clone())
                        .or_insert_with(Instant::now);
                    !attached || first.elapsed() >= grace
                })
                .collect()
        };
        for end in lost {
            lock(&executor.ended_seen).remove(&end.external_id);
            for (task, remote) in watched
                .iter()
                .filter(|(_, r)| r.external_id == end.external_id)
            {
                self.remote_job_lost(*task, remote, &end);
            }
        }
    }

    /// For tasks whose worker has not attached: notes what their live job
    /// waits for, and gives up on one running past the attach timeout.
    fn note_live_jobs(
        &self,
        executor: &Remote,
        watched: &[(TaskId, RemoteTask)],
        live: &[LiveJob],
    ) {
        let kind = executor.executor.name();
        let timeout = executor.executor.attach_timeout();
        let mut overdue = Vec::new();
        {
            let mut seen = lock(&executor.running_seen);
            seen.retain(|job, _| {
                live.iter().any(|j| &j.external_id == job && j.running)
                    && watched
                        .iter()
                        .any(|(_, r)| &r.external_id == job && !r.attached)
            });
            for job in live {
                for (task, remote) in watched
                    .iter()
                    .filter(|(_, r)| r.external_id == job.external_id && !r.attached)
                {
                    let id = &job.external_id;
                    let note = if job.running {
                        let since = *seen.entry(id.clone()).or_insert_with(Instant::now);
                        let waited = since.elapsed();
                        if waited >= timeout {
                            overdue.push((*task, remote.clone()));
                            continue;
                        }
                        format!(
                            "{kind} job {id} running for {} s; its worker has not reached the \
                             host yet (given up after {} s)",
                            waited.as_secs(),
                            timeout.as_secs()
                        )
                    } else if job.reason.is_empty() || job.reason == "None" {
                        format!("{kind} job {id} {}", job.state.to_lowercase())
                    } else {
                        format!(
                            "{kind} job {id} {}: {}",
                            job.state.to_lowercase(),
                            job.reason
                        )
                    };
                    self.live.set_note(*task, Some(note));
                }
            }
        }
        for (task, remote) in overdue {
            lock(&executor.running_seen).remove(&remote.external_id);
            self.attach_overdue(task, &remote, timeout);
        }
    }

    /// A job ran for the attach timeout and its worker never reached the
    /// host: cancel it and count it lost before its worker started.
    fn attach_overdue(&self, task: TaskId, remote: &RemoteTask, timeout: Duration) {
        {
            let mut running = lock(&self.running);
            match running.get(&task).and_then(|r| r.remote()) {
                Some(r) if r.dispatch == remote.dispatch && !r.attached => {
                    running.remove(&task);
                }
                _ => return, // attached or reaped meanwhile
            }
        }
        let kind = self.remote_name();
        let why = format!(
            "{kind} job {} ran for {} s and its worker did not reach the host (is the worker \
             URL reachable from the nodes, and tli installed there?); the job was cancelled",
            remote.external_id,
            timeout.as_secs()
        );
        tracing::warn!(task, "{why}");
        let _ = self.store.end_dispatch(remote.dispatch, &why);
        self.forget_live(task);
        if let Some(executor) = &self.remote {
            executor.cancel(task, &remote.external_id);
        }
        self.early_loss(task, remote, &why);
    }

    /// A job of a queued task ended (or was given up) after it started but
    /// before its worker reached the host: the task fails after
    /// [`EARLY_LOSSES_BEFORE_FAILING`] of them, else waits for the next.
    fn early_loss(&self, task: TaskId, remote: &RemoteTask, why: &str) {
        let Some(executor) = &self.remote else {
            return;
        };
        let losses = {
            let mut early = lock(&executor.early_losses);
            let n = early.entry(task).or_insert(0);
            *n += 1;
            *n
        };
        let kind = self.remote_name();
        if losses >= EARLY_LOSSES_BEFORE_FAILING {
            let output = executor.executor.lost_job_output(task, remote.dispatch);
            let _ = self.store.transition(
                task,
                TaskState::Failed,
                &format!(
                    "{losses} {kind} jobs ended before their worker reached the host; the \
                     last: {why}{output}"
                ),
            );
        } else {
            self.live.set_note(
                task,
                Some(format!(
                    "{losses} of {EARLY_LOSSES_BEFORE_FAILING} {kind} jobs lost before their \
                     worker reached the host (the last: {why}); submitting again"
                )),
            );
        }
    }

    /// Asks the executor's accounting (at most every [`USAGE_POLL`]) what
    /// the recently ended dispatches' jobs used, and records it.
    fn collect_usage(&self, executor: &Remote) {
        {
            let mut last = lock(&executor.last_usage_poll);
            if last.is_some_and(|t| t.elapsed() < USAGE_POLL) {
                return;
            }
            *last = Some(Instant::now());
        }
        let since = crate::orchestrator::now_ms() - USAGE_WINDOW.as_millis() as i64;
        let Ok(ended) = self.store.dispatches_awaiting_usage(since) else {
            return;
        };
        let jobs: Vec<(String, String)> = ended
            .iter()
            .filter_map(|d| {
                Some((
                    d.external_id.clone()?,
                    d.request.clone().unwrap_or_default(),
                ))
            })
            .collect();
        if jobs.is_empty() {
            return;
        }
        match executor.executor.usage(&jobs) {
            Ok(found) => {
                for (id, usage) in found {
                    for d in ended
                        .iter()
                        .filter(|d| d.external_id.as_deref() == Some(&id))
                    {
                        if let Err(e) = self.store.set_dispatch_usage(d.id, &usage) {
                            tracing::warn!(task = d.task_id, "usage of job {id} not recorded: {e}");
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(
                "cannot ask {}'s accounting about ended jobs: {e}",
                executor.executor.name()
            ),
        }
    }

    /// A task's remote job ended without its worker reporting an end.
    fn remote_job_lost(&self, task: TaskId, remote: &RemoteTask, end: &EndedJob) {
        let job_state = end.state.as_str();
        {
            let mut running = lock(&self.running);
            match running.get(&task).and_then(|r| r.remote()) {
                Some(r) if r.dispatch == remote.dispatch => {
                    running.remove(&task);
                }
                _ => return, // already reaped
            }
        }
        let kind = self.remote_name();
        let why = format!("{kind} job {} ended: {job_state}", remote.external_id);
        let _ = self.store.end_dispatch(remote.dispatch, &why);
        self.forget_live(task);
        let row = match self.store.task(task) {
            Ok(Some(row)) => row,
            _ => return,
        };
        tracing::warn!(task, "{why} (task {})", row.state);
        if row.state.is_active() {
            let _ = self.store.transition(
                task,
                TaskState::Interrupted,
                &format!("{why}, without its worker reporting"),
            );
            self.requeue_interrupted(task, &why);
        } else if row.state == TaskState::Interrupted {
            // Its worker recorded the interruption, then its end never came.
            self.requeue_interrupted(task, &why);
        } else if end.started == Some(false) || end.cancelled {
            // Cancelled or preempted (while it waited for resources, or while its worker
            // was starting): says nothing about the worker; the task stays queued and is
            // submitted again.
            let when = if end.started == Some(false) {
                "before it started"
            } else {
                "before its worker reached the host"
            };
            tracing::info!(task, "{why} {when}; submitting the task again");
            self.live
                .set_note(task, Some(format!("{why} {when}; submitting again")));
        } else if row.state == TaskState::Queued && !remote.attached {
            self.early_loss(task, remote, &why);
        }
    }

    /// Re-queues an interrupted remote task to resume in a new job,
    /// unless the host is shutting down (then it resumes at the next start)
    /// or the task has had [`MAX_DISPATCHES`] attempts.
    fn requeue_interrupted(&self, task: TaskId, why: &str) {
        if self.shutdown.load(Ordering::Acquire) {
            return;
        }
        let attempts = self.store.dispatches_of(task).map(|d| d.len()).unwrap_or(0);
        if attempts >= MAX_DISPATCHES {
            tracing::warn!(task, "{attempts} Slurm attempts; left interrupted");
            return;
        }
        if let Err(e) = self.store.transition(
            task,
            TaskState::Queued,
            &format!(
                "re-queued ({why}); will {} in a new Slurm job",
                self.resume_point(task)
            ),
        ) {
            tracing::warn!(task, "re-queue after its Slurm job ended not recorded: {e}");
        }
    }

    /// After a worker's final report: close the dispatch; a cancelled task's
    /// Slurm job is cancelled; an interrupted one is re-queued.
    pub(super) fn reap_remote(&self, task: TaskId, remote: &RemoteTask, outcome: &Outcome) {
        let _ = self
            .store
            .end_dispatch(remote.dispatch, &format!("worker ended: {outcome:?}"));
        self.forget_live(task);
        if let Some(executor) = &self.remote {
            lock(&executor.early_losses).remove(&task);
            if *outcome == Outcome::Cancelled {
                executor.cancel(task, &remote.external_id);
            }
        }
        let kind = self.remote_name();
        if *outcome == Outcome::Interrupted {
            self.requeue_interrupted(
                task,
                &format!("{kind} job {} was signalled", remote.external_id),
            );
        }
        tracing::info!(
            task,
            "{kind} job {} finished: {outcome:?}",
            remote.external_id
        );
    }

    /// Cancels a task's remote job whose worker never attached (a stop of a
    /// queued task, or a host shutdown); returns whether there was one.
    pub(super) fn withdraw_pending(&self, task: TaskId, why: &str) -> bool {
        let remote = {
            let mut running = lock(&self.running);
            match running.get(&task).and_then(|r| r.remote().cloned()) {
                Some(r) if !r.attached => {
                    running.remove(&task);
                    r
                }
                _ => return false,
            }
        };
        let _ = self.store.end_dispatch(remote.dispatch, why);
        if let Some(executor) = &self.remote {
            executor.cancel(task, &remote.external_id);
        }
        true
    }

    /// A forced stop whose deadline passed: give up on the worker.
    pub(super) fn abandon_remote(&self, task: TaskId) {
        // Only a remote task leaves the map here; a runner thread is reaped when it ends.
        let remote = {
            let mut running = lock(&self.running);
            match running.get(&task).map(|r| r.remote().is_some()) {
                Some(true) => running.remove(&task).and_then(|r| match r.runner {
                    Runner::Remote(remote) => Some(remote),
                    Runner::Local(_) => None,
                }),
                _ => None,
            }
        };
        if let Some(remote) = remote {
            let _ = self.store.end_dispatch(
                remote.dispatch,
                "forced stop: the worker did not return in time",
            );
            if let Some(executor) = &self.remote {
                executor.cancel(task, &remote.external_id);
            }
        }
    }

    /// At start-up: re-adopts open dispatches whose remote job still lives;
    /// closes the others. Returns the adopted tasks.
    pub(super) fn adopt_remote_jobs(&self) -> Result<Vec<TaskId>, OrchestratorError> {
        let open = self.store.open_dispatches()?;
        if open.is_empty() {
            return Ok(Vec::new());
        }
        let Some(executor) = &self.remote else {
            for d in &open {
                self.store.end_dispatch(
                    d.id,
                    "the host restarted without a Slurm executor; the task resumes here",
                )?;
            }
            return Ok(Vec::new());
        };
        let jobs: Vec<String> = open.iter().filter_map(|d| d.external_id.clone()).collect();
        let live =
            executor
                .executor
                .adopt(&jobs)
                .map_err(|source| OrchestratorError::Executor {
                    executor: executor.executor.kind(),
                    open: open.len(),
                    source,
                })?;
        let mut adopted = Vec::new();
        for d in open {
            let alive = d.external_id.as_ref().is_some_and(|id| live.contains(id));
            let Some(job) = d.external_id.filter(|_| alive) else {
                self.store
                    .end_dispatch(d.id, "its Slurm job ended while the host was down")?;
                continue;
            };
            let Some(row) = self.store.task(d.task_id)? else {
                self.store
                    .end_dispatch(d.id, "its task is not in the store")?;
                continue;
            };
            tracing::info!(
                task = d.task_id,
                "re-adopted {} job {job} (dispatch {})",
                executor.executor.name(),
                d.id
            );
            lock(&self.running).insert(
                d.task_id,
                RunningTask::dispatched(RemoteTask {
                    dispatch: d.id,
                    external_id: job,
                    attached: row.state.is_active(),
                    job: row.job_id,
                    plugin: row.plugin,
                }),
            );
            adopted.push(d.task_id);
        }
        Ok(adopted)
    }

    /// The task's stop flag, job and plugin, if `dispatch` is its current lease.
    fn check_lease(
        &self,
        task: TaskId,
        dispatch: i64,
    ) -> Result<(Arc<AtomicU8>, JobId, String), LeaseError> {
        let running = lock(&self.running);
        let entry = running.get(&task);
        match entry.and_then(|r| r.remote().map(|x| (r, x))) {
            Some((r, remote)) if remote.dispatch == dispatch => {
                Ok((r.stop.clone(), remote.job, remote.plugin.clone()))
            }
            _ => Err(LeaseError::Stale { task, dispatch }),
        }
    }

    /// A worker claims its task: everything it needs to run it.
    pub fn worker_attach(
        &self,
        task: TaskId,
        dispatch: i64,
        node: &str,
    ) -> Result<WorkerAssignment, LeaseError> {
        self.check_lease(task, dispatch)?;
        let row = self.store.task(task)?.ok_or(LeaseError::NotInStore(task))?;
        if row.state.is_finished() {
            return Err(LeaseError::Stale { task, dispatch });
        }
        let (spec, _dataset, inputs) = self
            .task_inputs(&row)
            .map_err(|message| LeaseError::Inputs { task, message })?;
        // The version recorded at submission; for rows of older hosts, the newest loaded.
        let plugin_version = match &row.plugin_version {
            Some(version) => version.clone(),
            None => self
                .registry
                .snapshot()
                .get(&row.plugin)
                .map(|p| p.manifest.version.to_string())
                .ok_or_else(|| LeaseError::PluginNotLoaded(row.plugin.clone()))?,
        };
        if !node.is_empty() {
            self.store.set_dispatch_node(dispatch, node)?;
        }
        if let Some(RunningTask {
            runner: Runner::Remote(r),
            ..
        }) = lock(&self.running).get_mut(&task)
        {
            r.attached = true;
        }
        self.live.set_note(task, None);
        let executor = self.remote.as_ref().ok_or(LeaseError::NoRemoteExecutor)?;
        let setup = executor.executor.worker_setup(task);
        Ok(WorkerAssignment {
            selection: spec.selection_of(row.ordinal as usize),
            rungs: spec.decision_rungs(),
            checkpoint_dir: setup.checkpoint_dir,
            threads: setup.threads,
            task: row,
            plugin_version,
            slice_steps: spec.slice_steps,
            policy: spec.checkpoint,
            inputs,
        })
    }

    /// The record a worker writes through, if its lease is current.
    pub fn worker_lease(&self, task: TaskId, dispatch: i64) -> Result<WorkerLease, LeaseError> {
        let (stop, job, plugin) = self.check_lease(task, dispatch)?;
        Ok(WorkerLease {
            plugin,
            record: self.store_record(task, job),
            stop,
        })
    }

    /// A worker's heartbeat: its latest progress and log lines; answers
    /// with the task's stop request.
    pub fn worker_heartbeat(
        &self,
        lease: &WorkerLease,
        steps: u64,
        metrics: &[(String, f64)],
        logs: &[(&'static str, String)],
    ) -> StopRequest {
        let record = &lease.record;
        if steps > 0 || !metrics.is_empty() {
            self.live.update(record.task, steps, metrics);
        }
        // As a runner thread's plugin lines: in the host's log and to watchers.
        let (plugin, task) = (&lease.plugin, format!("{}-{}", record.job, record.task));
        for (level, message) in logs {
            match *level {
                "error" => {
                    tracing::error!(target: "plugin", plugin = %plugin, task = %task, "{message}")
                }
                "warn" => {
                    tracing::warn!(target: "plugin", plugin = %plugin, task = %task, "{message}")
                }
                _ => tracing::info!(target: "plugin", plugin = %plugin, task = %task, "{message}"),
            }
            self.live
                .log(record.job, record.task, plugin, level, message);
        }
        StopRequest::load(&lease.stop)
    }

    /// A worker recorded its task's end: reap it as a runner's end.
    pub fn worker_ended(&self, task: TaskId, outcome: Outcome) {
        let _ = self.events_tx.send(RunnerEvent::Finished { task, outcome });
    }
}

impl RunningTask {
    /// A task handed to a remote executor: no thread, no reservation on this host.
    pub(super) fn dispatched(remote: RemoteTask) -> Self {
        RunningTask {
            stop: Arc::new(AtomicU8::new(StopRequest::None as u8)),
            started: Instant::now(),
            runner: Runner::Remote(remote),
        }
    }
}
