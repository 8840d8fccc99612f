//! One OS thread per running task. The runner owns the task's trainer (tch
//! tensors are `Send`, not `Sync`), drives `step(n)` in slices, and between
//! slices checks for stop requests, publishes progress and metrics (to
//! [`LiveProgress`] after every slice; to the store about once a second, batched, and
//! always before a checkpoint and at the end), measures memory after the first
//! slice and again at most every second (the rules are [`super::memory_watch`]'s),
//! and checkpoints on schedule. It records its own
//! state transitions in the store and tells the scheduler when it is done.
//!
//! Resuming: at start the runner verifies the task's checkpoints newest
//! first, skips (and forgets) corrupt or half-written ones, and loads the
//! newest good one into a fresh trainer.

use super::checkpoint;
use super::checkpoint::failures::{AfterFailure, FailedWrites};
use super::core_sharing::{self, lower_own_priority};
use super::job::CheckpointPolicy;
use super::memory_watch::{device_peak, restart_peak, MemoryCap, MemoryWatch};
use super::selection::{BestRule, Selection, Tracker};
use super::state::TaskState;
use super::store::{BestMark, SliceMetrics, TaskRow};
use super::sweep::Verdict;
use super::task_record::{RecordError, TaskRecord};
use super::TaskId;
use crate::registry::{LoadedPlugin, PluginRegistry, TrainerHandle};
use crate::services::TaskServices;
use abi_stable::std_types::RArc;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tli_plugin_api::{Dataset, ErrorCode, PluginError, TaskInputs, TaskSpec};

/// What the scheduler asks of a running task (stored in an `AtomicU8`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StopRequest {
    None = 0,
    /// Finish the slice, checkpoint, become `cancelled`.
    Graceful = 1,
    /// Return as soon as the plugin notices; no checkpoint; `cancelled`.
    Forced = 2,
    /// The host is shutting down: checkpoint, become `interrupted` (resumed at next start).
    Shutdown = 3,
    /// Slurm is ending the worker's job (`scancel`, the time limit near):
    /// checkpoint, become `interrupted` (the host re-queues it).
    Preempted = 4,
}

impl StopRequest {
    pub fn load(flag: &AtomicU8) -> Self {
        match flag.load(Ordering::Acquire) {
            1 => Self::Graceful,
            2 => Self::Forced,
            3 => Self::Shutdown,
            4 => Self::Preempted,
            _ => Self::None,
        }
    }
}

/// Why a checkpoint is written; its transition reason says so.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CheckpointReason {
    /// The policy's interval passed (a routine checkpoint: the task goes on).
    Scheduled,
    /// A graceful stop: the task becomes `cancelled` after it.
    StopRequested,
    /// The host is shutting down: the task becomes `interrupted` after it.
    HostShutdown,
    /// Slurm is ending the worker's job: the task becomes `interrupted` after it.
    Preempted,
    /// The last step is done: the task becomes `completed` after it.
    Final,
    /// A sweep trial waits at a rung for the trials before it: the task
    /// goes back to the queue after it.
    Parked,
}

impl CheckpointReason {
    /// Whether the task goes on running after this checkpoint.
    pub fn is_routine(self) -> bool {
        self == CheckpointReason::Scheduled
    }
}

impl std::fmt::Display for CheckpointReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CheckpointReason::Scheduled => "scheduled",
            CheckpointReason::StopRequested => "stop requested",
            CheckpointReason::HostShutdown => "host shutting down",
            CheckpointReason::Preempted => "pre-emption (Slurm is ending the job)",
            CheckpointReason::Final => "final",
            CheckpointReason::Parked => "rung",
        })
    }
}

/// How a runner ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Completed,
    Failed(String),
    Cancelled,
    Interrupted,
    /// Re-queued after running out of memory (first time) — the scheduler
    /// starts it again when memory allows.
    Requeued(String),
    /// A sweep trial parked at a rung (checkpointed and re-queued): the
    /// scheduler starts it again once the trials before it got there.
    Parked(String),
}

#[derive(Debug)]
pub enum RunnerEvent {
    /// Measured bytes: after the first slice (replaces the estimate), then
    /// whenever they grew by more than a tenth ([`super::memory_watch`]).
    Measured {
        task: TaskId,
        bytes: u64,
    },
    Finished {
        task: TaskId,
        outcome: Outcome,
    },
}

/// Which runners are on the device: the caching allocator's counters are
/// per process, so a task's allocation can be read from them only while it
/// is the only one running (no other started or ended meanwhile).
#[derive(Debug, Default)]
pub struct DeviceOccupancy {
    running: AtomicUsize,
    /// Runners entered so far (detects a start and end during a measurement).
    entered: AtomicU64,
}

/// A runner's place on the device; leaves it when dropped.
struct Occupant<'a>(&'a DeviceOccupancy);

impl DeviceOccupancy {
    fn enter(&self) -> Occupant<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.entered.fetch_add(1, Ordering::SeqCst);
        Occupant(self)
    }

    /// `Some(marker)` when exactly one runner is on the device; the same
    /// marker later means nobody came or went in between.
    fn alone(&self) -> Option<u64> {
        (self.running.load(Ordering::SeqCst) == 1).then(|| self.entered.load(Ordering::SeqCst))
    }
}

impl Drop for Occupant<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        self.0.entered.fetch_add(1, Ordering::SeqCst);
    }
}

/// Everything a runner thread needs.
pub struct RunnerContext {
    pub task: TaskRow,
    /// The plugin library that runs the task (see [`resolve_plugin`]).
    pub plugin: Arc<LoadedPlugin>,
    /// Set when that is not the version the task was submitted with: that
    /// version, which is no longer loaded.
    pub replaces_version: Option<String>,
    pub dataset: RArc<Dataset>,
    /// Every dataset of the task and the plugin API 1.1 side table.
    pub inputs: TaskInputs,
    /// Where the task's states, progress and checkpoints are recorded.
    pub record: Arc<dyn TaskRecord>,
    pub checkpoint_root: PathBuf,
    pub policy: CheckpointPolicy,
    /// The model's `keep_best` and `early_stopping` ([`super::selection`]).
    pub selection: Selection,
    /// A sweep trial's decision rungs, in steps (empty for other tasks):
    /// slices end on them and the trial asks its record for a verdict there.
    pub rungs: Vec<u64>,
    pub slice_steps: u64,
    pub stop: Arc<AtomicU8>,
    /// Shared with the plugin's `is_cancelled()`.
    pub plugin_cancel: Arc<AtomicBool>,
    /// libtorch intra-op threads for this task's thread.
    pub threads: i32,
    /// Runners on this task's device.
    pub occupancy: Arc<DeviceOccupancy>,
    /// A task measuring more fails (`None`: no cap, e.g. a Slurm worker).
    pub memory_cap: Option<MemoryCap>,
    /// Added to the reason of its `running` transition when it starts (why
    /// it started where it did, e.g. beside full slots); empty for none.
    pub start_note: String,
}

/// How often a runner writes its progress and metrics to the store at most.
/// Every store write is an fsync'd transaction on the store's one writer
/// connection; per-slice writes of many tasks made status and watch calls
/// slow while reads shared that connection (docs/benchmarks.md, gRPC API
/// under load), and still cost an fsync each.
pub const PROGRESS_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// Starts the runner thread; it reports its outcome on `events` when done.
pub fn spawn(
    ctx: RunnerContext,
    events: Sender<RunnerEvent>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("task-{}", ctx.task.id))
        .spawn(move || {
            let task = ctx.task.id;
            let outcome = run(&ctx);
            let _ = events.send(RunnerEvent::Finished { task, outcome });
        })
}

/// A model whose parameters take less than this gets one libtorch intra-op
/// thread, however many cores its runner was offered: parallel regions on
/// matrices this small cost more than they save. Measured on CartPole agents
/// (a few 10k parameters): one thread gave 9.0–10.1k (PPO) and 3.0–3.3k (DQN)
/// env steps/s where two gave 7.3k and 2.8k (docs/benchmarks.md, "Many agents
/// per box"); and one thread per task keeps concurrent tasks from spinning
/// OpenMP teams against each other.
pub const SMALL_MODEL_PARAMETER_BYTES: u64 = 1 << 20;

/// The intra-op threads of a task offered `offered` (its share of the cores),
/// given what its trainer holds.
pub fn intra_op_threads(offered: i32, memory: Option<tli_plugin_api::MemoryBreakdown>) -> i32 {
    match memory {
        Some(m) if m.parameters < SMALL_MODEL_PARAMETER_BYTES => 1,
        _ => offered.max(1),
    }
}

/// Out-of-memory failures a task may have before it fails for good.
const OOM_REQUEUES: u32 = 1;

/// Runs the task on the calling thread until it completes, fails or stops;
/// its final state is recorded before this returns.
pub fn run(ctx: &RunnerContext) -> Outcome {
    super::crash_blame::enter_task(ctx.task.id);
    let _on_device = ctx.occupancy.enter();
    // Malloc reuses freed blocks while this is the only task, maps large ones while others run.
    let _malloc = crate::allocator::TaskGuard::enter();
    lower_own_priority();
    tch::set_num_threads(ctx.threads.max(1));
    let mut runner = match Runner::start(ctx) {
        Ok(r) => r,
        Err(e) => return finish(ctx, Err(e), None),
    };
    let threads = intra_op_threads(ctx.threads, runner.trainer.memory().ok());
    if threads != ctx.threads.max(1) {
        tch::set_num_threads(threads);
    }
    let result = runner.train(ctx);
    let outcome = finish(ctx, result, Some(&mut runner));
    ctx.record.forget_live();
    outcome
}

/// Records the final transition for `result`.
fn finish(
    ctx: &RunnerContext,
    result: Result<Outcome, PluginError>,
    runner: Option<&mut Runner>,
) -> Outcome {
    let task = ctx.task.id;
    let outcome = match result {
        Ok(o) => o,
        Err(e) if e.code == ErrorCode::OUT_OF_MEMORY => {
            if ctx.task.oom_requeues < OOM_REQUEUES {
                Outcome::Requeued(format!("out of memory: {}; re-queued", e.message))
            } else {
                Outcome::Failed(format!("out of memory again: {}", e.message))
            }
        }
        Err(e) => Outcome::Failed(e.to_string()),
    };
    let (steps, stopped_early) = match runner {
        Some(runner) => {
            if let Err(e) = runner.flush_progress(ctx) {
                tracing::warn!(task, "progress before the end not recorded: {e}");
            }
            (runner.steps, runner.stopped_early.take())
        }
        None => (0, None),
    };
    let (state, reason) = match &outcome {
        Outcome::Completed => match stopped_early {
            Some(why) => (TaskState::Completed, why),
            None => (TaskState::Completed, format!("completed {steps} steps")),
        },
        Outcome::Failed(why) => (TaskState::Failed, why.clone()),
        Outcome::Cancelled => (TaskState::Cancelled, format!("stopped at step {steps}")),
        Outcome::Interrupted if StopRequest::load(&ctx.stop) == StopRequest::Preempted => (
            TaskState::Interrupted,
            format!("Slurm is ending its job (scancel or time limit) at step {steps}"),
        ),
        Outcome::Interrupted => (
            TaskState::Interrupted,
            format!("host shut down at step {steps}"),
        ),
        Outcome::Parked(why) => {
            if let Err(e) = ctx.record.park(why) {
                tracing::warn!(task, "parking at a rung not recorded: {e}");
            }
            return outcome;
        }
        Outcome::Requeued(why) => {
            if let Err(e) = ctx.record.requeue_after_oom(why) {
                tracing::warn!(
                    task,
                    "re-queue after running out of memory not recorded: {e}"
                );
            }
            return outcome;
        }
    };
    transition(ctx, state, &reason);
    outcome
}

fn transition(ctx: &RunnerContext, to: TaskState, reason: &str) {
    if let Err(e) = ctx.record.transition(to, reason) {
        // E.g. a forced stop already marked it cancelled after its deadline.
        tracing::warn!(task = ctx.task.id, "state change to {to} not recorded: {e}");
    }
}

struct Runner {
    trainer: TrainerHandle,
    steps: u64,
    /// The step of the newest checkpoint on disk (0: none).
    last_checkpoint_step: u64,
    /// The step and time of the last checkpoint attempt, written or failed:
    /// the schedule counts from it.
    last_attempt_step: u64,
    last_checkpoint_at: Instant,
    /// Checkpoint writes that failed in a row ([`checkpoint::failures`]).
    failed_writes: FailedWrites,
    /// Metrics per slice (step, metrics) not yet in the store.
    unflushed: Vec<SliceMetrics>,
    /// Whether `steps` is ahead of the store.
    steps_unflushed: bool,
    last_flush: Instant,
    /// Early stopping's state (saved with every checkpoint).
    tracker: Tracker,
    /// Why the task stopped early, once it has.
    stopped_early: Option<String>,
}

impl Runner {
    /// Creates the trainer and restores the newest good checkpoint.
    fn start(ctx: &RunnerContext) -> Result<Runner, PluginError> {
        let task = &ctx.task;
        let plugin = &ctx.plugin;
        let label = format!("{}-{}", task.job_id, task.id);
        let services =
            TaskServices::with_cancel_flag(&task.plugin, &label, ctx.plugin_cancel.clone())
                .with_log_sink(ctx.record.log_sink());
        let spec = TaskSpec {
            task_id: label.as_str().into(),
            config_json: task.config_json.as_str().into(),
            device: task.device.to_string().into(),
            seed: task.seed,
            max_steps: task.total_steps,
            dataset: ctx.dataset.clone(),
        };
        let mut trainer = plugin
            .create_trainer_with_inputs(spec, ctx.inputs.clone(), services)
            .map_err(|e| on_other_version(ctx, "cannot create a trainer for it", e))?;
        let (steps, tracker, mut note) = restore(ctx, &mut trainer)?;
        if let Some(old) = &ctx.replaces_version {
            note.push_str(&format!(
                " on {} (submitted with {}@{old}, which is no longer installed)",
                plugin.label(),
                plugin.manifest.name
            ));
        }
        note.push_str(&ctx.start_note);
        let reason = match steps {
            0 => format!("started{note}"),
            n => format!("resumed from checkpoint step {n}{note}"),
        };
        ctx.record.set_steps_done(steps).map_err(record_err)?;
        transition(ctx, TaskState::Running, &reason);
        Ok(Runner {
            trainer,
            steps,
            last_checkpoint_step: steps,
            last_attempt_step: steps,
            last_checkpoint_at: Instant::now(),
            failed_writes: FailedWrites::default(),
            unflushed: Vec::new(),
            steps_unflushed: false,
            last_flush: Instant::now(),
            tracker,
            stopped_early: None,
        })
    }

    fn train(&mut self, ctx: &RunnerContext) -> Result<Outcome, PluginError> {
        let total = ctx.task.total_steps;
        let valid_every = validation_cadence(&ctx.task.config_json);
        let mut memory = MemoryWatch::default();
        let _sharing = core_sharing::share_this_thread();
        // Resumed at a rung (parked there, or restarted): decide first.
        if self.steps > 0 && ctx.rungs.contains(&self.steps) && self.steps < total {
            if let Some(parked) = self.at_rung(ctx)? {
                return Ok(parked);
            }
        }
        while self.steps < total && self.stopped_early.is_none() {
            match StopRequest::load(&ctx.stop) {
                StopRequest::None => {}
                StopRequest::Forced => return Ok(Outcome::Cancelled),
                StopRequest::Graceful => {
                    // A stopped task keeps an evaluation of what it became.
                    if let Err(e) = self.evaluate(ctx) {
                        warn_task(ctx, &format!("not evaluated before stopping: {e}"));
                    }
                    self.checkpoint_before_stopping(ctx, CheckpointReason::StopRequested);
                    return Ok(Outcome::Cancelled);
                }
                StopRequest::Shutdown => {
                    self.checkpoint_before_stopping(ctx, CheckpointReason::HostShutdown);
                    return Ok(Outcome::Interrupted);
                }
                StopRequest::Preempted => {
                    self.checkpoint_before_stopping(ctx, CheckpointReason::Preempted);
                    return Ok(Outcome::Interrupted);
                }
            }
            let n = slice_length(ctx.slice_steps, total, self.steps, valid_every);
            let n = until_rung(n, self.steps, &ctx.rungs);
            // Measure the first slice on the allocator when alone on the device.
            let alone = memory
                .first()
                .then(|| ctx.occupancy.alone())
                .flatten()
                .filter(|_| restart_peak(ctx.task.device));
            let report = self.trainer.step(n)?;
            // What the slice freed goes back to the kernel (see `allocator`).
            crate::allocator::release_free_memory();
            // A scheduling point for the API's threads (see `core_sharing`;
            // the plugin's cancellation polls are others, inside the slice).
            core_sharing::offer_if_due();
            self.steps += report.steps_done;
            let metrics = metric_pairs(&report.metrics);
            if report.steps_done == n {
                self.select(ctx, &metrics)?;
            }
            ctx.record.live(self.steps, &metrics);
            self.unflushed.push(SliceMetrics::now(self.steps, metrics));
            self.steps_unflushed = true;
            if self.last_flush.elapsed() >= PROGRESS_FLUSH_INTERVAL {
                self.flush_progress(ctx)?;
            }
            if memory.due() {
                let peak = alone
                    .filter(|marker| ctx.occupancy.alone() == Some(*marker))
                    .and_then(|_| device_peak(ctx.task.device));
                let (record, estimate) = (ctx.record.as_ref(), ctx.task.estimate_bytes);
                let cap = ctx.memory_cap;
                if let Some(why) =
                    memory.measure(&self.trainer, peak, record, cap, estimate, self.steps)?
                {
                    return Ok(Outcome::Failed(why));
                }
            }
            if report.steps_done == 0 && StopRequest::load(&ctx.stop) == StopRequest::None {
                return Err(PluginError::other(format!(
                    "the trainer made no progress when asked for {n} steps"
                )));
            }
            if self.stopped_early.is_some() {
                break;
            }
            if report.steps_done == n && ctx.rungs.contains(&self.steps) && self.steps < total {
                if let Some(parked) = self.at_rung(ctx)? {
                    return Ok(parked);
                }
                if self.stopped_early.is_some() {
                    break;
                }
            }
            // At the last step the final checkpoint follows at once.
            if self.steps < total && self.checkpoint_due(&ctx.policy) {
                self.checkpoint(ctx, CheckpointReason::Scheduled)?;
            }
        }
        self.evaluate(ctx)?;
        self.checkpoint(ctx, CheckpointReason::Final)?;
        Ok(Outcome::Completed)
    }

    /// A sweep trial at a decision rung: its progress goes to the store,
    /// then the scheduler's verdict. `Continue` trains on; `Stop` ends it
    /// like early stopping (evaluated, final checkpoint, completed); `Wait`
    /// evaluates it (so a stop decided while it waits keeps an evaluation),
    /// checkpoints and parks it.
    fn at_rung(&mut self, ctx: &RunnerContext) -> Result<Option<Outcome>, PluginError> {
        self.flush_progress(ctx)?;
        match ctx.record.rung_verdict(self.steps).map_err(record_err)? {
            Verdict::Continue => Ok(None),
            Verdict::Stop => {
                self.stopped_early = Some(super::sweep_gate::stop_reason(self.steps));
                Ok(None)
            }
            Verdict::Wait => {
                self.evaluate(ctx)?;
                self.checkpoint(ctx, CheckpointReason::Parked)?;
                Ok(Some(Outcome::Parked(format!(
                    "waiting at rung {} for the trials before it",
                    self.steps
                ))))
            }
        }
    }

    /// The trainer's evaluation, recorded at the current step.
    fn evaluate(&mut self, ctx: &RunnerContext) -> Result<(), PluginError> {
        let eval = self.trainer.evaluate()?;
        let metrics = metric_pairs(&eval.metrics);
        ctx.record.live(self.steps, &metrics);
        self.unflushed.push(SliceMetrics::now(self.steps, metrics));
        self.steps_unflushed = true;
        Ok(())
    }

    /// `keep_best` and `early_stopping` on a slice's validation metrics
    /// (measured on the model as it is now): a best checkpoint when the
    /// value ranks among the kept ones; the stop decision.
    fn select(
        &mut self,
        ctx: &RunnerContext,
        metrics: &[(String, f64)],
    ) -> Result<(), PluginError> {
        let value = |name: &str| metrics.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        if let Some(rule) = &ctx.selection.early_stopping {
            if let Some(v) = value(&rule.metric) {
                let stop = self.tracker.observe(rule, self.steps, v).stop;
                if stop && self.steps < ctx.task.total_steps {
                    self.stopped_early = Some(self.tracker.stop_reason(rule, self.steps));
                }
            }
        }
        if let Some(rule) = ctx.selection.best() {
            if let Some(v) = value(&rule.metric) {
                let kept: Vec<f64> = ctx
                    .record
                    .checkpoints()
                    .map_err(record_err)?
                    .iter()
                    .filter_map(|r| r.best.as_ref().map(|b| b.value))
                    .collect();
                if rule.admits(&kept, v) {
                    self.best_checkpoint(ctx, &rule, v)?;
                }
            }
        }
        Ok(())
    }

    /// Writes a best checkpoint under `best/` (apart from retention of the
    /// newest), records it, and forgets the ones that no longer rank among
    /// the `k` best. A failed write warns and training goes on.
    fn best_checkpoint(
        &mut self,
        ctx: &RunnerContext,
        rule: &BestRule,
        value: f64,
    ) -> Result<(), PluginError> {
        let root = best_root(&ctx.checkpoint_root);
        let (trainer, tracker, selection) = (&mut self.trainer, &self.tracker, &ctx.selection);
        let saved = match write_retrying(&root, self.steps, |dir: &Path| {
            trainer.save_checkpoint(dir)?;
            save_tracker(dir, selection, tracker)
        }) {
            Ok(saved) => saved,
            Err(e) => {
                warn_task(
                    ctx,
                    &format!(
                        "best checkpoint at step {} ({} {value}) not written: {e}; training goes on",
                        self.steps, rule.metric
                    ),
                );
                return Ok(());
            }
        };
        let mark = BestMark {
            metric: rule.metric.clone(),
            value,
            mode: rule.mode,
        };
        let new_row = ctx
            .record
            .add_checkpoint(
                self.steps,
                &saved.dir.display().to_string(),
                &saved.checksum,
                0.0,
                Some(&mark),
            )
            .map_err(record_err)?;
        let mut kept: Vec<(i64, f64, u64, String)> = Vec::new();
        for row in ctx.record.checkpoints().map_err(record_err)? {
            let Some(best) = &row.best else { continue };
            if row.step == self.steps && row.id != new_row {
                // Its directory was just replaced by the new one.
                ctx.record.remove_checkpoint(row.id).map_err(record_err)?;
                continue;
            }
            kept.push((row.id, best.value, row.step, row.path.clone()));
        }
        let mut ranked: Vec<(i64, f64)> = kept.iter().map(|k| (k.0, k.1)).collect();
        rule.rank(&mut ranked);
        for (id, _) in ranked.into_iter().skip(rule.k as usize) {
            if let Some((_, _, step, path)) = kept.iter().find(|k| k.0 == id) {
                ctx.record.remove_checkpoint(id).map_err(record_err)?;
                if *step != self.steps {
                    remove_best_dir(&root, Path::new(path));
                }
            }
        }
        Ok(())
    }

    fn checkpoint_due(&self, policy: &CheckpointPolicy) -> bool {
        let by_steps = policy
            .every_steps
            .is_some_and(|n| self.steps - self.last_attempt_step >= n);
        let by_time = policy
            .every_seconds
            .is_some_and(|s| self.last_checkpoint_at.elapsed().as_secs_f64() >= s);
        by_steps || by_time
    }

    /// Writes the progress and metrics not yet in the store, in one transaction.
    fn flush_progress(&mut self, ctx: &RunnerContext) -> Result<(), PluginError> {
        if self.steps_unflushed {
            ctx.record
                .record_progress(self.steps, &self.unflushed)
                .map_err(record_err)?;
            self.unflushed.clear();
            self.steps_unflushed = false;
        }
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Writes a checkpoint atomically, records it, prunes old ones. The
    /// store gets the progress first, so it never lags a checkpoint.
    fn checkpoint(
        &mut self,
        ctx: &RunnerContext,
        why: CheckpointReason,
    ) -> Result<(), PluginError> {
        self.flush_progress(ctx)?;
        if self.steps == self.last_checkpoint_step
            && self.steps > 0
            && why != CheckpointReason::Final
        {
            return Ok(()); // nothing new since the last one
        }
        transition(
            ctx,
            TaskState::Checkpointing,
            &format!("{why} checkpoint at step {}", self.steps),
        );
        let (trainer, tracker) = (&mut self.trainer, &self.tracker);
        let writing = Instant::now();
        self.last_attempt_step = self.steps;
        self.last_checkpoint_at = writing;
        let saved = match write_retrying(&ctx.checkpoint_root, self.steps, |dir: &Path| {
            trainer.save_checkpoint(dir)?;
            save_tracker(dir, &ctx.selection, tracker)
        }) {
            Ok(saved) => saved,
            Err(e) => {
                let what = format!("{why} checkpoint at step {} failed: {e}", self.steps);
                return match self.failed_writes.failed(
                    why.is_routine(),
                    &what,
                    self.last_checkpoint_step,
                    ctx.task.job_id,
                ) {
                    AfterFailure::Continue(warning) => {
                        warn_task(ctx, &warning);
                        transition(
                            ctx,
                            TaskState::Running,
                            "checkpoint failed; training goes on",
                        );
                        Ok(())
                    }
                    AfterFailure::Fail(error) => Err(PluginError::io(error)),
                };
            }
        };
        self.failed_writes.succeeded();
        let new_row = ctx
            .record
            .add_checkpoint(
                self.steps,
                &saved.dir.display().to_string(),
                &saved.checksum,
                writing.elapsed().as_secs_f64(),
                None,
            )
            .map_err(record_err)?;
        // Forget an earlier row of this step (its directory was just
        // replaced), then all but the newest `keep`; directories go with
        // them. Best checkpoints are kept apart (`best_checkpoint`).
        let mut kept = 0;
        let rows = ctx.record.checkpoints().map_err(record_err)?;
        for row in rows.into_iter().filter(|r| r.best.is_none()) {
            let replaced = row.step == self.steps && row.id != new_row;
            if !replaced {
                kept += 1;
            }
            if replaced || kept > ctx.policy.keep {
                ctx.record.remove_checkpoint(row.id).map_err(record_err)?;
            }
        }
        checkpoint::prune(&ctx.checkpoint_root, ctx.policy.keep)
            .map_err(|e| PluginError::io(format!("pruning old checkpoints: {e}")))?;
        self.last_checkpoint_step = self.steps;
        if why.is_routine() {
            transition(ctx, TaskState::Running, "checkpoint written");
        }
        Ok(())
    }
}

impl Runner {
    /// The checkpoint before a stop, a shutdown or a preemption: when it
    /// fails the task still stops as asked, with a warning, and resumes from
    /// its last good checkpoint ([`checkpoint::failures`]).
    fn checkpoint_before_stopping(&mut self, ctx: &RunnerContext, why: CheckpointReason) {
        if let Err(e) = self.checkpoint(ctx, why) {
            let warning = format!(
                "{}; the task stops as asked and resumes from its last good checkpoint",
                e.message
            );
            warn_task(ctx, &warning);
        }
    }
}

/// Loads the newest checkpoint that verifies; returns its step (0 if
/// none), the early-stopping state saved with it, and a note about refused
/// ones for the transition reason. Best checkpoints of later steps are
/// forgotten: the task measures those steps again.
fn restore(
    ctx: &RunnerContext,
    trainer: &mut TrainerHandle,
) -> Result<(u64, Tracker, String), PluginError> {
    let mut note = String::new();
    let rows = ctx.record.checkpoints().map_err(record_err)?;
    let (best, newest): (Vec<_>, Vec<_>) = rows.into_iter().partition(|r| r.best.is_some());
    let mut restored = (0, Tracker::default());
    // Newest first; a row whose directory does not verify is forgotten.
    for row in newest {
        let dir = Path::new(&row.path);
        match checkpoint::verify(dir) {
            Ok(_) => {
                trainer.load_checkpoint(dir).map_err(|e| {
                    on_other_version(ctx, "refuses the checkpoint written by that version", e)
                })?;
                let mut tracker = load_tracker(dir);
                // Extended past an early stop: patience counts afresh.
                if let Some(rule) = &ctx.selection.early_stopping {
                    if tracker.since_best >= rule.patience {
                        tracker.since_best = 0;
                    }
                }
                restored = (trainer.total_steps()?, tracker);
                break;
            }
            Err(why) => {
                tracing::warn!(task = ctx.task.id, "checkpoint {} refused: {why}", row.path);
                note.push_str(&format!("; checkpoint {} refused: {why}", row.path));
                ctx.record.remove_checkpoint(row.id).map_err(record_err)?;
            }
        }
    }
    let root = best_root(&ctx.checkpoint_root);
    for row in best.into_iter().filter(|r| r.step > restored.0) {
        ctx.record.remove_checkpoint(row.id).map_err(record_err)?;
        remove_best_dir(&root, Path::new(&row.path));
    }
    Ok((restored.0, restored.1, note))
}

/// Where a task's best checkpoints live: apart from the newest ones, which
/// retention prunes.
pub fn best_root(checkpoint_root: &Path) -> PathBuf {
    checkpoint_root.join("best")
}

/// Removes a best checkpoint's directory, if it is one under `root`.
fn remove_best_dir(root: &Path, dir: &Path) {
    if dir.parent() == Some(root) {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("removing best checkpoint {}: {e}", dir.display());
            }
        }
    }
}

/// The file in a checkpoint that holds the early-stopping state.
const TRACKER_FILE: &str = "tli-selection.json";

/// Tries after the first that a checkpoint write gets when the process or
/// the system is out of file descriptors for a moment.
const DESCRIPTOR_RETRIES: u32 = 10;

/// [`checkpoint::write_atomic`], tried again after a descriptor shortage
/// (EMFILE, ENFILE) up to [`DESCRIPTOR_RETRIES`] times, pausing 0.1 s and
/// doubling up to 2 s (about 13 s in all): a burst of connections must not
/// cost a task its checkpoint. Any other failure is returned at once.
fn write_retrying<E: std::fmt::Display>(
    root: &Path,
    step: u64,
    mut write: impl FnMut(&Path) -> Result<(), E>,
) -> Result<checkpoint::SavedCheckpoint, checkpoint::CheckpointError> {
    let mut pause = Duration::from_millis(100);
    for _ in 0..DESCRIPTOR_RETRIES {
        match checkpoint::write_atomic(root, step, &mut write) {
            Err(e) if e.is_descriptor_shortage() => {
                tracing::warn!("checkpoint at step {step}: {e}; trying again in {pause:?}");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            done => return done,
        }
    }
    checkpoint::write_atomic(root, step, write)
}

fn save_tracker(dir: &Path, selection: &Selection, tracker: &Tracker) -> Result<(), PluginError> {
    if selection.early_stopping.is_none() {
        return Ok(());
    }
    let json = serde_json::to_vec(tracker)
        .map_err(|e| PluginError::io(format!("early-stopping state: {e}")))?;
    std::fs::write(dir.join(TRACKER_FILE), json)
        .map_err(|e| PluginError::io(format!("writing the early-stopping state: {e}")))
}

/// The early-stopping state saved in a checkpoint (fresh when it has none).
fn load_tracker(dir: &Path) -> Tracker {
    std::fs::read(dir.join(TRACKER_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// The validation cadence a task's config declares (`valid_every`, or the
/// RL plugins' `valid_metrics_interval`): the runner ends slices on its
/// multiples, so validation metrics measure the model at a checkpointable step.
pub fn validation_cadence(config_json: &str) -> Option<u64> {
    let config: serde_json::Value = serde_json::from_str(config_json).ok()?;
    ["valid_every", "valid_metrics_interval"]
        .iter()
        .find_map(|key| config.get(key)?.as_u64())
        .filter(|&n| n > 0)
}

/// Steps of the next slice: `slice_steps`, no further than the total, and
/// ending on the next multiple of the validation cadence.
pub fn slice_length(slice_steps: u64, total: u64, done: u64, valid_every: Option<u64>) -> u64 {
    let mut n = slice_steps.min(total - done);
    if let Some(every) = valid_every {
        n = n.min((done / every + 1) * every - done);
    }
    n
}

/// A slice of `n` steps from `done`, cut to end on the next rung.
pub fn until_rung(n: u64, done: u64, rungs: &[u64]) -> u64 {
    match rungs.iter().find(|&&r| r > done) {
        Some(&r) => n.min(r - done),
        None => n,
    }
}

/// The plugin a task runs on: the version recorded for it when that is
/// loaded; else (a host restarted after an upgrade) the newest loaded
/// version, which must then accept the task's config and checkpoint (the
/// second value names the version it replaces). `None` when no version of
/// the plugin is loaded.
pub fn resolve_plugin(
    registry: &PluginRegistry,
    task: &TaskRow,
) -> Result<(Arc<LoadedPlugin>, Option<String>), String> {
    if let Some(version) = &task.plugin_version {
        if let Some(plugin) = registry.get_version(&task.plugin, version) {
            return Ok((plugin.clone(), None));
        }
    }
    let Some(newest) = registry.get(&task.plugin) else {
        return Err(format!(
            "plugin {:?} is not loaded in this host (loaded: {}); install it and resume the job",
            task.plugin,
            registry.names().join(", ")
        ));
    };
    let replaces = task
        .plugin_version
        .clone()
        .filter(|v| *v != newest.manifest.version);
    if let Some(old) = &replaces {
        newest.validate_config(&task.config_json).map_err(|e| {
            format!(
                "{}@{old}, which this task was submitted with, is no longer installed, and the \
                 installed {} refuses its config: {e}",
                task.plugin,
                newest.label()
            )
        })?;
    }
    Ok((newest.clone(), replaces))
}

/// An error of a plugin running a task in place of the version the task was
/// submitted with names both versions.
fn on_other_version(ctx: &RunnerContext, what: &str, error: PluginError) -> PluginError {
    match &ctx.replaces_version {
        None => error,
        Some(old) => PluginError::other(format!(
            "{}@{old}, which this task was submitted with, is no longer installed, and the \
             installed {} {what}: {error}",
            ctx.plugin.manifest.name,
            ctx.plugin.label()
        )),
    }
}

/// A warning in the host's log and in the task's own (what `tli train watch` shows).
fn warn_task(ctx: &RunnerContext, warning: &str) {
    tracing::warn!(task = ctx.task.id, "{warning}");
    ctx.record
        .log_sink()
        .log_line(&ctx.task.plugin, "warn", warning);
}

fn record_err(e: RecordError) -> PluginError {
    PluginError::io(e.to_string())
}

fn metric_pairs(metrics: &[tli_plugin_api::Metric]) -> Vec<(String, f64)> {
    metrics
        .iter()
        .map(|m| (m.name.to_string(), m.value))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::DeviceOccupancy;

    #[test]
    fn a_checkpoint_write_out_of_descriptors_is_tried_again_and_others_are_not() {
        let root = tempfile::tempdir().unwrap();
        let mut tries = 0;
        let saved = super::write_retrying(root.path(), 7, |dir: &std::path::Path| {
            tries += 1;
            if tries <= 2 {
                return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
            }
            std::fs::write(dir.join("weights"), b"w")
        })
        .unwrap();
        assert_eq!(tries, 3);
        assert!(saved.dir.join("weights").is_file());
        let mut tries = 0;
        let err = super::write_retrying(root.path(), 8, |_: &std::path::Path| {
            tries += 1;
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        })
        .unwrap_err();
        assert_eq!(tries, 1, "{err}");
    }

    #[test]
    fn small_models_get_one_intra_op_thread_and_others_their_share() {
        use super::{intra_op_threads, SMALL_MODEL_PARAMETER_BYTES};
        use tli_plugin_api::MemoryBreakdown;
        let holding = |parameters| {
            Some(MemoryBreakdown {
                parameters,
                ..MemoryBreakdown::default()
            })
        };
        assert_eq!(intra_op_threads(2, holding(70_000)), 1);
        assert_eq!(intra_op_threads(2, holding(SMALL_MODEL_PARAMETER_BYTES)), 2);
        assert_eq!(intra_op_threads(4, holding(1 << 30)), 4);
        // Unknown (memory() failed): the share; never below one.
        assert_eq!(intra_op_threads(2, None), 2);
        assert_eq!(intra_op_threads(0, holding(1 << 30)), 1);
    }

    #[test]
    fn a_runner_is_alone_only_while_nobody_else_comes_or_goes() {
        let device = DeviceOccupancy::default();
        assert_eq!(device.alone(), None, "nobody on the device");
        let first = device.enter();
        let marker = device.alone().expect("one runner");
        assert_eq!(device.alone(), Some(marker), "nothing changed");
        // Another runner comes and goes during the measurement: not alone throughout.
        drop(device.enter());
        assert_ne!(device.alone(), Some(marker));
        let second = device.enter();
        assert_eq!(device.alone(), None, "two runners");
        drop(second);
        drop(first);
        assert_eq!(device.alone(), None);
    }
}
