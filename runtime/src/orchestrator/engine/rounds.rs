//! What runners report and the loops that drive scheduling rounds: a
//! runner's measurement goes to the arbiter, its end is reaped (thread
//! joined, reservation released; a remote task's dispatch closed), and
//! [`Orchestrator::run_until_idle`] / [`Orchestrator::run_until_shutdown`]
//! call [`Orchestrator::tick`] until there is nothing left or the host stops.

use super::{lock, Orchestrator, OrchestratorError, Runner};
use crate::orchestrator::runner::{Outcome, RunnerEvent, StopRequest};
use crate::orchestrator::state::TaskState;
use crate::orchestrator::TaskId;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Orchestrator {
    pub(super) fn drain_events(&self) {
        let events: Vec<RunnerEvent> = lock(&self.events_rx).try_iter().collect();
        for event in events {
            self.handle_event(event);
        }
    }

    /// Waits up to `timeout` for a runner to report, so a freed slot is
    /// refilled at once rather than at the next poll.
    fn wait_for_event(&self, timeout: Duration) {
        let event = lock(&self.events_rx).recv_timeout(timeout);
        if let Ok(event) = event {
            self.handle_event(event);
        }
    }

    fn handle_event(&self, event: RunnerEvent) {
        match event {
            RunnerEvent::Measured { task, bytes } => {
                // The arbiter adds the margin to the measurement itself.
                let report = lock(&self.arbiter).update_measured(task, bytes);
                tracing::debug!(task, bytes, "measured memory: {report}");
            }
            RunnerEvent::Finished { task, outcome } => self.reap(task, &outcome),
        }
    }

    fn reap(&self, task: TaskId, outcome: &Outcome) {
        let Some(mut active) = lock(&self.running).remove(&task) else {
            return;
        };
        let local = match &mut active.runner {
            Runner::Remote(remote) => {
                lock(&self.pace).finish(task);
                self.reap_remote(task, remote, outcome);
                return;
            }
            Runner::Local(local) => local,
        };
        if let Some(handle) = local.handle.take() {
            let _ = handle.join();
        }
        // Its final steps (flushed before its last transition) join its
        // model's pace, even when no round saw it running.
        let (key, at_start) = &local.pace;
        match self.store.task(task) {
            Ok(Some(row)) if !local.abandoned => self.record_final_pace(
                task,
                key,
                row.steps_done.saturating_sub(*at_start),
                active.started.elapsed().as_secs_f64(),
            ),
            _ => lock(&self.pace).finish(task),
        }
        lock(&self.arbiter).release(task);
        if let Err(e) = self.store.release(local.reservation) {
            tracing::error!(task, "releasing reservation: {e}");
        }
        tracing::info!(
            task,
            "finished after {:.1}s: {outcome:?}",
            active.started.elapsed().as_secs_f64()
        );
    }

    /// Number of tasks with a runner thread.
    pub fn active_count(&self) -> usize {
        lock(&self.running).len()
    }

    /// Runs rounds until nothing is queued or running. When the shutdown flag
    /// is raised, every running task checkpoints and becomes `interrupted`,
    /// and runner threads a forced stop gave up on are no longer waited for.
    pub fn run_until_idle(
        &self,
        poll: Duration,
        mut on_round: impl FnMut(&Self),
    ) -> Result<(), OrchestratorError> {
        let mut shutting_down = false;
        loop {
            if self.shutdown.load(Ordering::Acquire) && !shutting_down {
                shutting_down = true;
                tracing::info!(
                    "shutting down: checkpointing {} running task(s)",
                    self.active_count()
                );
                let pending: Vec<TaskId> = lock(&self.running)
                    .iter()
                    .filter(|(_, a)| a.remote().is_some_and(|r| !r.attached))
                    .map(|(id, _)| *id)
                    .collect();
                for task in pending {
                    self.withdraw_pending(task, "the host shut down before its worker started");
                }
                for a in lock(&self.running).values() {
                    a.stop.store(StopRequest::Shutdown as u8, Ordering::Release);
                }
            }
            self.tick()?;
            on_round(self);
            let queued = if shutting_down {
                0
            } else {
                self.store.tasks_in(&[TaskState::Queued])?.len()
            };
            // At shutdown, runner threads a forced stop gave up on are not
            // waited for (they may never end); otherwise their end is.
            let left = if shutting_down {
                self.waiting_count()
            } else {
                self.active_count()
            };
            if queued == 0 && left == 0 {
                return Ok(());
            }
            self.wait_for_event(poll);
        }
    }

    /// Runs scheduling rounds until the shutdown flag is raised (a server:
    /// jobs arrive at any time, so an empty queue does not end it), then
    /// checkpoints every running task (they become `interrupted`) and returns
    /// once none is left. A failed round is logged and the loop goes on.
    pub fn run_until_shutdown(
        &self,
        poll: Duration,
        mut on_round: impl FnMut(&Self),
    ) -> Result<(), OrchestratorError> {
        while !self.shutdown.load(Ordering::Acquire) {
            if let Err(e) = self.tick() {
                tracing::error!("scheduling round failed: {e}");
                std::thread::sleep(poll);
            }
            on_round(self);
            self.wait_for_event(poll);
        }
        self.run_until_idle(poll, on_round)
    }
}
