//! The order queued tasks are offered to the arbiter in: the engine's side of
//! [`crate::orchestrator::pace`]. Each round it records every local runner's
//! progress as its model's pace, then ranks the queue (jobs in submission
//! order; within a job the longest expected tasks first). With one task at a
//! time (`sequential`, `parallel:1`, `auto` on a one-core CPU host) the queue
//! keeps plain submission order: with one slot, order cannot change how well
//! slots drain.
//!
//! When every slot is taken, it names the queued tasks short enough to start
//! beside them ([`pace::short_tasks`]), from the paces and the remaining
//! steps of the tasks holding the slots; the arbiter decides whether one
//! starts. A run's final steps join its model's pace when it ends, so a task
//! that ended between two rounds counts too.

use super::{lock, Orchestrator};
use crate::orchestrator::pace::{self, PaceKey};
use crate::orchestrator::store::TaskRow;
use crate::orchestrator::TaskId;
use std::collections::HashMap;

impl Orchestrator {
    /// Start ranks of `queued` when at most `max_running` tasks run at once
    /// (lower first among equal priorities); empty when submission order
    /// applies.
    pub(super) fn start_ranks(
        &self,
        queued: &[TaskRow],
        max_running: Option<usize>,
    ) -> HashMap<TaskId, u64> {
        if max_running == Some(1) || queued.len() < 2 {
            return HashMap::new();
        }
        self.record_paces();
        let refs: Vec<&TaskRow> = queued.iter().collect();
        pace::start_ranks(&refs, &lock(&self.pace))
    }

    /// The tasks of `waiting` short enough to start beside `holders` (the
    /// tasks holding every slot), with their expected seconds.
    pub(super) fn short_tasks(
        &self,
        waiting: &[&TaskRow],
        holders: &[TaskId],
    ) -> HashMap<TaskId, f64> {
        if waiting.is_empty() {
            return HashMap::new();
        }
        self.record_paces();
        // Each holder's model and steps left (its latest progress, else where it started).
        let left: Vec<(PaceKey, u64)> = {
            let running = lock(&self.running);
            holders
                .iter()
                .filter_map(|id| {
                    let local = running.get(id)?.local()?;
                    let (key, at_start) = &local.pace;
                    let done = self.live.get(*id).map_or(*at_start, |l| l.steps_done);
                    Some((key.clone(), local.total_steps.saturating_sub(done)))
                })
                .collect()
        };
        let book = lock(&self.pace);
        let remaining: Vec<Option<f64>> = left
            .iter()
            .map(|(key, steps)| book.expected_seconds(key, *steps))
            .collect();
        pace::short_tasks(waiting, &remaining, &book)
    }

    /// A local run of `task` ended, having made `steps` steps in `seconds`:
    /// they join its model's pace.
    pub(super) fn record_final_pace(&self, task: TaskId, key: &PaceKey, steps: u64, seconds: f64) {
        let mut book = lock(&self.pace);
        book.observe(task, key, steps, seconds);
        book.finish(task);
    }

    /// Every local runner's steps and seconds so far in this run.
    fn record_paces(&self) {
        let running = lock(&self.running);
        let mut book = lock(&self.pace);
        for (&task, active) in running.iter() {
            let Some((key, steps_at_start)) = active.local().map(|l| &l.pace) else {
                continue;
            };
            let Some(live) = self.live.get(task) else {
                continue; // no slice yet
            };
            let steps = live.steps_done.saturating_sub(*steps_at_start);
            book.observe(task, key, steps, active.started.elapsed().as_secs_f64());
        }
    }
}
