//! The orchestrator's side of the Slurm executor. A queued task of a Slurm
//! job is *dispatched*: a dispatch row is opened (its id is the lease the
//! worker acts under), a batch script starting `tli worker` is submitted with
//! a request sized from the task's estimate, and the task waits in the
//! running map until its worker attaches over the worker service. The worker
//! then records everything through [`Orchestrator::worker_lease`] (the same
//! [`StoreRecord`] a local runner uses) and learns of stop requests from its
//! heartbeats.
//!
//! Failures: `squeue` is polled every [`SLURM_POLL_INTERVAL`]; a Slurm job
//! that ended without its worker reporting leaves the task interrupted and
//! re-queued (a new Slurm job resumes it from its last checkpoint). A task
//! interrupted by Slurm's signal (time limit, `scancel`) is re-queued too.
//! A refused submission fails the task with Slurm's message. At start-up an
//! open dispatch whose Slurm job still lives is re-adopted: its task keeps
//! its state and its worker, which retries its calls, carries on.

use super::{lock, Orchestrator, OrchestratorError, RunningTask};
use crate::orchestrator::executor::ExecutorKind;
use crate::orchestrator::job::{CheckpointPolicy, JobSpec};
use crate::orchestrator::runner::{Outcome, RunnerEvent, StopRequest};
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::{StoreError, TaskRow};
use crate::orchestrator::task_record::StoreRecord;
use crate::orchestrator::{JobId, TaskId};
use crate::slurm::request::{batch_script, sbatch_args, TaskRequest};
use crate::slurm::{Slurm, SlurmConfig, SlurmError};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tli_plugin_api::TaskInputs;

/// How often the host asks Slurm which of its jobs still live.
pub const SLURM_POLL_INTERVAL: Duration = Duration::from_secs(2);
/// Slurm jobs that may end before their worker reaches the host (a wrong
/// binary path, an unreachable host) before the task fails.
pub const EARLY_LOSSES_BEFORE_FAILING: u32 = 3;
/// Attempts (dispatches) of one task before a lost or signalled one is no
/// longer re-queued.
pub const MAX_DISPATCHES: usize = 50;

/// The Slurm side of a task in the running map.
#[derive(Clone, Debug)]
pub(super) struct RemoteTask {
    /// The dispatch row id: the worker's lease.
    pub dispatch: i64,
    pub slurm_job: String,
    /// Whether its worker has attached.
    pub attached: bool,
    /// The task's job and plugin (a worker's calls need no store read).
    pub job: JobId,
    pub plugin: String,
}

/// The host's Slurm executor.
pub(super) struct SlurmExecutor {
    pub config: SlurmConfig,
    pub commands: Slurm,
    last_poll: Mutex<Option<Instant>>,
    /// Slurm jobs per task that ended before their worker attached.
    early_losses: Mutex<HashMap<TaskId, u32>>,
}

impl SlurmExecutor {
    pub fn new(config: SlurmConfig) -> Self {
        let commands = Slurm {
            bin_dir: config.commands_dir.clone(),
        };
        Self {
            config,
            commands,
            last_poll: Mutex::new(None),
            early_losses: Mutex::new(HashMap::new()),
        }
    }
}

/// What a worker receives when it attaches.
pub struct WorkerAssignment {
    pub task: TaskRow,
    /// The plugin version this host loaded (the worker must load the same).
    pub plugin_version: String,
    pub slice_steps: u64,
    pub policy: CheckpointPolicy,
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
    #[error("{0}")]
    Other(String),
}

impl Orchestrator {
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

    /// Tasks with a Slurm job (pending or running).
    pub(super) fn remote_count(&self) -> usize {
        lock(&self.running)
            .values()
            .filter(|r| r.remote.is_some())
            .count()
    }

    /// Submits `task` as a Slurm job. A refusal fails the task with Slurm's message.
    pub(super) fn dispatch_to_slurm(&self, task: &TaskRow) -> Result<(), String> {
        let Some(slurm) = &self.slurm else {
            return Err("this host has no Slurm executor (start it with --executor slurm)".into());
        };
        let (spec, _dataset, inputs) = self.task_inputs(task)?;
        let dispatch = self
            .store
            .open_dispatch(task.id, ExecutorKind::Slurm.as_str())
            .map_err(|e| e.to_string())?;
        let request = TaskRequest {
            task: task.id,
            dispatch,
            device: task.device,
            estimate_bytes: lock(&self.arbiter)
                .with_margin(task.measured_bytes.unwrap_or(task.estimate_bytes)),
            data_bytes: crate::worker::wire::data_bytes(&inputs),
            gpus: spec.slurm.gpus(),
            time_limit_minutes: spec.slurm.time_limit_minutes,
        };
        if let Err(e) = std::fs::create_dir_all(slurm.config.output_dir()) {
            let why = format!(
                "cannot create {} for the Slurm job's output: {e}",
                slurm.config.output_dir().display()
            );
            let _ = self.store.end_dispatch(dispatch, &why);
            return Err(why);
        }
        let args = sbatch_args(&slurm.config, &request);
        match slurm
            .commands
            .submit(&args, &batch_script(&slurm.config, &request))
        {
            Ok(job) => {
                self.store
                    .set_dispatch_submitted(dispatch, &job, &args.join(" "))
                    .map_err(|e| e.to_string())?;
                tracing::info!(
                    task = task.id,
                    dispatch,
                    "submitted as Slurm job {job}: {args:?}"
                );
                lock(&self.running).insert(
                    task.id,
                    RunningTask::remote(RemoteTask {
                        dispatch,
                        slurm_job: job,
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
            Err(e) => {
                let why = match &e {
                    SlurmError::Refused { message, .. } => {
                        format!("Slurm refused the job: {message}")
                    }
                    other => other.to_string(),
                };
                let _ = self.store.end_dispatch(dispatch, &why);
                Err(why)
            }
        }
    }

    /// Asks Slurm which jobs live (at most every [`SLURM_POLL_INTERVAL`]) and
    /// handles those that ended without their worker reporting.
    pub(super) fn poll_slurm(&self) {
        let Some(slurm) = &self.slurm else {
            return;
        };
        {
            let mut last = lock(&slurm.last_poll);
            if last.is_some_and(|t| t.elapsed() < SLURM_POLL_INTERVAL) {
                return;
            }
            *last = Some(Instant::now());
        }
        let watched: Vec<(TaskId, RemoteTask)> = lock(&self.running)
            .iter()
            .filter_map(|(id, r)| r.remote.clone().map(|remote| (*id, remote)))
            .collect();
        if watched.is_empty() {
            return;
        }
        let live = match slurm.commands.live_jobs() {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!("cannot ask Slurm about its jobs: {e}");
                return;
            }
        };
        for (task, remote) in watched {
            if live.get(&remote.slurm_job).is_some_and(|s| s.is_alive()) {
                continue;
            }
            let state = slurm
                .commands
                .final_state(&remote.slurm_job)
                .unwrap_or_else(|| "state unknown".into());
            self.slurm_job_lost(task, &remote, &state);
        }
    }

    /// A task's Slurm job ended without its worker reporting an end.
    fn slurm_job_lost(&self, task: TaskId, remote: &RemoteTask, slurm_state: &str) {
        {
            let mut running = lock(&self.running);
            match running.get(&task).and_then(|r| r.remote.as_ref()) {
                Some(r) if r.dispatch == remote.dispatch => {
                    running.remove(&task);
                }
                _ => return, // already reaped
            }
        }
        let why = format!("Slurm job {} ended: {slurm_state}", remote.slurm_job);
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
        } else if let (TaskState::Queued, false, Some(slurm)) =
            (row.state, remote.attached, &self.slurm)
        {
            let losses = {
                let mut early = lock(&slurm.early_losses);
                let n = early.entry(task).or_insert(0);
                *n += 1;
                *n
            };
            if losses >= EARLY_LOSSES_BEFORE_FAILING {
                let output = self.slurm_output_tail(task, remote.dispatch);
                let _ = self.store.transition(
                    task,
                    TaskState::Failed,
                    &format!(
                        "{losses} Slurm jobs ended before their worker reached the host; the \
                         last: {why}{output}"
                    ),
                );
            }
        }
    }

    /// The last lines of a dispatch's Slurm output file, for messages.
    fn slurm_output_tail(&self, task: TaskId, dispatch: i64) -> String {
        let Some(slurm) = &self.slurm else {
            return String::new();
        };
        let path = slurm
            .config
            .output_dir()
            .join(format!("task-{task}-dispatch-{dispatch}.out"));
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().rev().take(5).collect();
                let tail: Vec<&str> = lines.into_iter().rev().collect();
                format!("; {} ends: {}", path.display(), tail.join(" | "))
            }
            Err(_) => format!("; no output at {}", path.display()),
        }
    }

    /// Re-queues an interrupted Slurm task to resume in a new Slurm job,
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
            &format!("re-queued ({why}); resumes from its last checkpoint in a new Slurm job"),
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
        if let Some(slurm) = &self.slurm {
            lock(&slurm.early_losses).remove(&task);
            if *outcome == Outcome::Cancelled {
                if let Err(e) = slurm.commands.cancel(&remote.slurm_job) {
                    tracing::warn!(task, "scancel {}: {e}", remote.slurm_job);
                }
            }
        }
        if *outcome == Outcome::Interrupted {
            self.requeue_interrupted(
                task,
                &format!("Slurm job {} was signalled", remote.slurm_job),
            );
        }
        tracing::info!(task, "Slurm job {} finished: {outcome:?}", remote.slurm_job);
    }

    /// Cancels a task's Slurm job whose worker never attached (a stop of a
    /// queued task, or a host shutdown); returns whether there was one.
    pub(super) fn withdraw_pending(&self, task: TaskId, why: &str) -> bool {
        let remote = {
            let mut running = lock(&self.running);
            match running.get(&task).and_then(|r| r.remote.clone()) {
                Some(r) if !r.attached => {
                    running.remove(&task);
                    r
                }
                _ => return false,
            }
        };
        let _ = self.store.end_dispatch(remote.dispatch, why);
        if let Some(slurm) = &self.slurm {
            if let Err(e) = slurm.commands.cancel(&remote.slurm_job) {
                tracing::warn!(task, "scancel {}: {e}", remote.slurm_job);
            }
        }
        true
    }

    /// A forced stop whose deadline passed: give up on the worker.
    pub(super) fn abandon_remote(&self, task: TaskId) {
        // Only a Slurm task leaves the map here; a runner thread is reaped when it ends.
        let remote = {
            let mut running = lock(&self.running);
            match running.get(&task).map(|r| r.remote.is_some()) {
                Some(true) => running.remove(&task).and_then(|r| r.remote),
                _ => None,
            }
        };
        if let Some(remote) = remote {
            let _ = self.store.end_dispatch(
                remote.dispatch,
                "forced stop: the worker did not return in time",
            );
            if let Some(slurm) = &self.slurm {
                let _ = slurm.commands.cancel(&remote.slurm_job);
            }
        }
    }

    /// At start-up: re-adopts open dispatches whose Slurm job still lives;
    /// closes the others. Returns the adopted tasks.
    pub(super) fn adopt_slurm_jobs(&self) -> Result<Vec<TaskId>, OrchestratorError> {
        let open = self.store.open_dispatches()?;
        if open.is_empty() {
            return Ok(Vec::new());
        }
        let Some(slurm) = &self.slurm else {
            for d in &open {
                self.store.end_dispatch(
                    d.id,
                    "the host restarted without a Slurm executor; the task resumes here",
                )?;
            }
            return Ok(Vec::new());
        };
        let live = slurm.commands.live_jobs().map_err(|e| {
            OrchestratorError::Other(format!(
                "cannot ask Slurm whether this host's {} job(s) still run: {e}",
                open.len()
            ))
        })?;
        let mut adopted = Vec::new();
        for d in open {
            let alive = d
                .external_id
                .as_ref()
                .is_some_and(|id| live.get(id).is_some_and(|s| s.is_alive()));
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
                "re-adopted Slurm job {job} (dispatch {})",
                d.id
            );
            lock(&self.running).insert(
                d.task_id,
                RunningTask::remote(RemoteTask {
                    dispatch: d.id,
                    slurm_job: job,
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
        match entry.and_then(|r| r.remote.as_ref().map(|x| (r, x))) {
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
        let row = self
            .store
            .task(task)?
            .ok_or_else(|| LeaseError::Other(format!("task {task} is not in the store")))?;
        if row.state.is_finished() {
            return Err(LeaseError::Stale { task, dispatch });
        }
        let (spec, _dataset, inputs) = self.task_inputs(&row).map_err(LeaseError::Other)?;
        // The version recorded at submission; for rows of older hosts, the newest loaded.
        let plugin_version = match &row.plugin_version {
            Some(version) => version.clone(),
            None => self
                .registry
                .snapshot()
                .get(&row.plugin)
                .map(|p| p.manifest.version.to_string())
                .ok_or_else(|| {
                    LeaseError::Other(format!("plugin {} is not loaded in the host", row.plugin))
                })?,
        };
        if !node.is_empty() {
            self.store.set_dispatch_node(dispatch, node)?;
        }
        if let Some(r) = lock(&self.running)
            .get_mut(&task)
            .and_then(|r| r.remote.as_mut())
        {
            r.attached = true;
        }
        let slurm = self
            .slurm
            .as_ref()
            .ok_or_else(|| LeaseError::Other("this host has no Slurm executor".into()))?;
        Ok(WorkerAssignment {
            checkpoint_dir: slurm
                .config
                .shared_dir
                .join("checkpoints")
                .join(format!("task-{task}")),
            threads: slurm.config.cpus_per_task.max(1),
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
    /// A task handed to Slurm: no thread, no reservation on this host.
    pub(super) fn remote(remote: RemoteTask) -> Self {
        RunningTask {
            stop: Arc::new(AtomicU8::new(StopRequest::None as u8)),
            plugin_cancel: Arc::new(AtomicBool::new(false)),
            handle: None,
            reservation: None,
            started: Instant::now(),
            pace: None,
            remote: Some(remote),
            abandoned: false,
        }
    }
}
