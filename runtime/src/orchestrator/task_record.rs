//! Where a runner records what happens to its task. The runner's code is the
//! same wherever it runs; only its record differs:
//!
//! * [`StoreRecord`]: the host's own runner threads (the local executor)
//!   write to the store and [`LiveProgress`] directly, and tell the
//!   scheduler through its event channel.
//! * A `tli worker` started by Slurm records through the host's worker
//!   service (tli-slurm's `worker::record::RemoteRecord`), whose handlers apply each call
//!   to the very same [`StoreRecord`]: the host stays the only writer of the
//!   store.
//!
//! [`StoreRecord`] also tells the engine's [`Observers`] (TensorBoard,
//! Prometheus, ...) what it recorded: progress, measurements, checkpoints
//! and run boundaries reach them from the host, whichever executor ran the
//! task.

use super::live::{LiveProgress, TaskLogTap};
use super::observer::Observers;
use super::runner::RunnerEvent;
use super::state::TaskState;
use super::store::{BestMark, CheckpointRow, MeasuredMemory, SliceMetrics, Store, StoreError};
use super::{JobId, TaskId};
use crate::services::TaskLogSink;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use tli_core::sweep::Verdict;

/// Why a record could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("job store: {0}")]
    Store(#[from] StoreError),
    /// The host's worker service refused or could not be reached.
    #[error("host: {0}")]
    Host(String),
    #[error("sweep: {0}")]
    Sweep(#[from] super::sweep_gate::GateError),
}

/// A running task's record, as its runner sees it. Every method is about
/// the one task the record was made for.
pub trait TaskRecord: Send + Sync {
    /// A state change with its reason.
    fn transition(&self, to: TaskState, reason: &str) -> Result<(), RecordError>;
    /// The step count the task (re)starts from.
    fn set_steps_done(&self, steps: u64) -> Result<(), RecordError>;
    /// Latest progress after a slice, for readers that want fresh numbers
    /// (not durable; [`record_progress`](Self::record_progress) is).
    fn live(&self, steps: u64, metrics: &[(String, f64)]);
    /// Progress and per-slice metrics, durably, in one write.
    fn record_progress(&self, steps: u64, batch: &[SliceMetrics]) -> Result<(), RecordError>;
    /// What the task measured after its first slice.
    fn measured(&self, memory: &MeasuredMemory) -> Result<(), RecordError>;
    /// The task's recorded checkpoints, newest first.
    fn checkpoints(&self) -> Result<Vec<CheckpointRow>, RecordError>;
    /// Records a checkpoint written at `path` in `write_seconds` (`best`:
    /// one of the task's best, kept apart from the newest); returns its id.
    fn add_checkpoint(
        &self,
        step: u64,
        path: &str,
        checksum: &str,
        write_seconds: f64,
        best: Option<&BestMark>,
    ) -> Result<i64, RecordError>;
    /// Forgets a recorded checkpoint.
    fn remove_checkpoint(&self, id: i64) -> Result<(), RecordError>;
    /// Re-queues the task after it ran out of memory (the first time).
    fn requeue_after_oom(&self, why: &str) -> Result<(), RecordError>;
    /// A sweep trial at a decision rung, its progress recorded: what the
    /// sweep's scheduler says ([`super::sweep_gate`]); `Continue` for a
    /// task that is not a trial.
    fn rung_verdict(&self, step: u64) -> Result<Verdict, RecordError>;
    /// A trial parks at a rung (checkpointed) until the trials before it get
    /// there: it goes back to the queue.
    fn park(&self, why: &str) -> Result<(), RecordError>;
    /// Where the plugin's log lines go besides the process log.
    fn log_sink(&self) -> Arc<dyn TaskLogSink>;
    /// The runner is done with the task: drop its live entry.
    fn forget_live(&self);
}

/// The record of a task whose runner runs in the host: the store, the live
/// progress, and the scheduler's event channel.
#[derive(Clone)]
pub struct StoreRecord {
    pub task: TaskId,
    pub job: JobId,
    pub store: Arc<Store>,
    pub live: Arc<LiveProgress>,
    /// Where a measurement goes (the arbiter replaces the estimate with it).
    pub events: Sender<RunnerEvent>,
    /// Who else hears of what is recorded (the engine's observers).
    pub observers: Arc<Observers>,
}

impl StoreRecord {
    /// The task's run ended (or was re-queued).
    fn run_ended(&self) {
        self.observers.each(|o| o.run_ended(self.task));
    }
}

impl TaskRecord for StoreRecord {
    fn transition(&self, to: TaskState, reason: &str) -> Result<(), RecordError> {
        self.store.transition(self.task, to, reason)?;
        if !matches!(to, TaskState::Running | TaskState::Checkpointing) {
            self.run_ended();
        }
        Ok(())
    }

    fn set_steps_done(&self, steps: u64) -> Result<(), RecordError> {
        self.store.set_steps_done(self.task, steps)?;
        self.observers
            .each(|o| o.run_started(self.job, self.task, steps));
        Ok(())
    }

    fn live(&self, steps: u64, metrics: &[(String, f64)]) {
        self.live.update(self.task, steps, metrics);
    }

    fn record_progress(&self, steps: u64, batch: &[SliceMetrics]) -> Result<(), RecordError> {
        self.store.record_progress_batch(self.task, steps, batch)?;
        self.observers
            .each(|o| o.progress(self.job, self.task, steps, batch));
        Ok(())
    }

    fn measured(&self, memory: &MeasuredMemory) -> Result<(), RecordError> {
        self.store.set_measured_memory(self.task, memory)?;
        self.observers
            .each(|o| o.measured(self.job, self.task, memory));
        let _ = self.events.send(RunnerEvent::Measured {
            task: self.task,
            bytes: memory.total(),
        });
        Ok(())
    }

    fn checkpoints(&self) -> Result<Vec<CheckpointRow>, RecordError> {
        Ok(self.store.checkpoints(self.task)?)
    }

    fn add_checkpoint(
        &self,
        step: u64,
        path: &str,
        checksum: &str,
        write_seconds: f64,
        best: Option<&BestMark>,
    ) -> Result<i64, RecordError> {
        let id = self
            .store
            .add_checkpoint(self.task, step, path, checksum, best)?;
        if !self.observers.is_empty() {
            if let Some(task) = self.store.task(self.task)? {
                self.observers.each(|o| {
                    o.checkpoint_written(self.job, self.task, &task.plugin, write_seconds)
                });
            }
        }
        Ok(id)
    }

    fn remove_checkpoint(&self, id: i64) -> Result<(), RecordError> {
        // Only this task's checkpoints may be forgotten through its record.
        if self
            .store
            .checkpoints(self.task)?
            .iter()
            .any(|c| c.id == id)
        {
            self.store.remove_checkpoint(id)?;
        }
        Ok(())
    }

    fn requeue_after_oom(&self, why: &str) -> Result<(), RecordError> {
        self.store.requeue_after_oom(self.task, why)?;
        self.run_ended();
        Ok(())
    }

    fn rung_verdict(&self, step: u64) -> Result<Verdict, RecordError> {
        let Some(task) = self.store.task(self.task)? else {
            return Err(StoreError::NoSuchTask(self.task).into());
        };
        Ok(super::sweep_gate::verdict(&self.store, &task, step)?.unwrap_or(Verdict::Continue))
    }

    fn park(&self, why: &str) -> Result<(), RecordError> {
        self.store.transition(self.task, TaskState::Queued, why)?;
        self.run_ended();
        Ok(())
    }

    fn log_sink(&self) -> Arc<dyn TaskLogSink> {
        Arc::new(TaskLogTap {
            live: self.live.clone(),
            job: self.job,
            task: self.task,
        })
    }

    fn forget_live(&self) {
        self.live.forget(self.task);
        self.run_ended();
    }
}
