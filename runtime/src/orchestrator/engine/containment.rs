//! What the orchestrator does about plugins that misbehave (the rules are in
//! docs/orchestrator.md, "Misbehaving plugins"; measured in
//! docs/reliability.md §5):
//!
//! * a task that can never fit the device's budget (it measured more than
//!   the budget when it last ran, or the host restarted with a smaller
//!   budget) fails at admission with the figures, instead of waiting in the
//!   queue forever;
//! * a runner thread a forced stop gave up on (its plugin never returned) is
//!   *abandoned*: its memory stays reserved until the thread ends, but it no
//!   longer takes a strategy's place, and shutdown does not wait for it;
//! * a shutdown whose timeout passes marks the tasks still running
//!   `interrupted` (they resume from their last checkpoint at the next
//!   start) before the process exits;
//! * at start, a task whose runner thread killed the previous host with a
//!   fatal signal ([`crash_blame`]) fails instead of being resumed, so one
//!   aborting plugin cannot crash-loop the host; every other task resumes.

use super::{lock, Orchestrator, OrchestratorError, Runner, RunningTask};
use crate::orchestrator::arbiter::Arbiter;
use crate::orchestrator::crash_blame;
use crate::orchestrator::memory_watch::MemoryCap;
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::TaskRow;
use crate::orchestrator::TaskId;
use std::time::Duration;
use tli_core::byte_size::format_bytes;

impl Orchestrator {
    /// At start, before tasks found running become `interrupted`: fails
    /// those a crash record names (they killed the previous host).
    pub(super) fn fail_crashed_tasks(&self) -> Result<(), OrchestratorError> {
        let blames = crash_blame::take(&self.config.state_dir).map_err(|source| {
            OrchestratorError::CrashRecord {
                path: crash_blame::path(&self.config.state_dir),
                source,
            }
        })?;
        for blame in blames {
            let Some(task) = self.store.task(blame.task)? else {
                continue;
            };
            if !task.state.is_active() {
                continue;
            }
            let reason = format!(
                "the host process died of {} raised on this task's runner thread near step \
                 {} (a plugin abort or crash kills the whole host: plugins run inside it); \
                 not resumed, as it would likely kill the host again — `tli train resume` \
                 tries again",
                blame.signal_name(),
                task.steps_done
            );
            tracing::error!(task = task.id, "{reason}");
            self.store.transition(task.id, TaskState::Failed, &reason)?;
        }
        Ok(())
    }

    /// Fails the queued local tasks whose reservation alone exceeds the
    /// budget (they would never start); returns the others.
    pub(super) fn fail_never_fitting(
        &self,
        queued: Vec<TaskRow>,
        arbiter: &Arbiter,
    ) -> Vec<TaskRow> {
        let (fit, never): (Vec<TaskRow>, Vec<TaskRow>) = queued.into_iter().partition(|t| {
            arbiter
                .check_fits_alone(arbiter.with_margin(admission_bytes(t)))
                .is_ok()
        });
        for task in never {
            let bytes = arbiter.with_margin(admission_bytes(&task));
            let Err(too_big) = arbiter.check_fits_alone(bytes) else {
                continue;
            };
            let basis = match task.measured_bytes {
                Some(m) => format!("what it measured when it last ran, {}", format_bytes(m)),
                None => format!("its estimate, {}", format_bytes(task.estimate_bytes)),
            };
            let reason = format!(
                "can never start on this host: it {too_big} (on {basis}); restart the host \
                 with a larger --memory-budget, then resume it"
            );
            tracing::error!(task = task.id, "{reason}");
            if let Err(e) = self.store.transition(task.id, TaskState::Failed, &reason) {
                tracing::error!(task = task.id, "failing a task too big to start: {e}");
            }
        }
        fit
    }

    /// A forced stop's deadline passed and `task`'s runner thread has not
    /// returned: it is abandoned (reserved until it ends, placeless, not
    /// waited for at shutdown).
    pub(super) fn abandon_thread(&self, task: TaskId) {
        // Never the arbiter's lock inside the runners' map's: a scheduling
        // round takes them the other way round (the arbiter ignores a task
        // that has ended in between).
        let abandoned = match lock(&self.running).get_mut(&task) {
            Some(RunningTask {
                runner: Runner::Local(local),
                ..
            }) => {
                local.abandoned = true;
                true
            }
            _ => false,
        };
        if abandoned {
            lock(&self.arbiter).abandon(task);
        }
    }

    /// Tasks with a runner that has not been abandoned: what shutdown
    /// waits for.
    pub fn waiting_count(&self) -> usize {
        lock(&self.running)
            .values()
            .filter(|r| !r.is_abandoned())
            .count()
    }

    /// Shutdown waited `waited` and these tasks' runners still have not
    /// checkpointed (a plugin stuck in `step`): each is marked
    /// `interrupted` now, to resume from its last checkpoint at the next
    /// start, and the host may exit. Returns how many.
    pub fn give_up_on_running(&self, waited: Duration) -> usize {
        let stuck: Vec<TaskId> = lock(&self.running)
            .iter()
            .filter(|(_, r)| r.local().is_some_and(|l| !l.abandoned))
            .map(|(id, _)| *id)
            .collect();
        let reason = format!(
            "host shut down: the task did not checkpoint within {}s (its plugin did not return \
             from step); it resumes from its last checkpoint at the next start",
            waited.as_secs_f64()
        );
        let mut marked = 0;
        for task in stuck {
            match self.store.transition(task, TaskState::Interrupted, &reason) {
                Ok(_) => marked += 1,
                // It ended meanwhile, with its own state.
                Err(e) => tracing::debug!(task, "not marked interrupted at shutdown: {e}"),
            }
        }
        marked
    }
}

/// What a queued task is admitted on: its measurement when it ran before.
pub(super) fn admission_bytes(task: &TaskRow) -> u64 {
    task.measured_bytes.unwrap_or(task.estimate_bytes)
}

/// A running task measuring more than this under `arbiter` fails.
pub(super) fn memory_cap(arbiter: &Arbiter) -> MemoryCap {
    MemoryCap {
        max_measured: arbiter.memory_cap(),
        budget: arbiter.budget().total_bytes,
        device: arbiter.budget().device,
    }
}
