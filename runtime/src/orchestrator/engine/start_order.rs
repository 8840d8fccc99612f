//! The order queued tasks are offered to the arbiter in: the engine's side of
//! [`crate::orchestrator::pace`]. Each round it records every local runner's
//! progress as its model's pace, then ranks the queue (jobs in submission
//! order; within a job the longest expected tasks first). With one task at a
//! time (`sequential`, `parallel:1`, `auto` on a one-core CPU host) the queue
//! keeps plain submission order: with one slot, order cannot change how well
//! slots drain.

use super::{lock, Orchestrator};
use crate::orchestrator::pace;
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
