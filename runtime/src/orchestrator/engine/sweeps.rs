//! Sweep trials in the queue: a trial parked at a rung starts again only
//! once the trials before it got there, and one the scheduler stops there
//! ends without starting (it was evaluated and checkpointed when it
//! parked). The verdicts are [`crate::orchestrator::sweep_gate`]'s.

use super::Orchestrator;
use crate::orchestrator::job::JobSpec;
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::TaskRow;
use crate::orchestrator::sweep::Verdict;
use crate::orchestrator::sweep_gate;
use crate::orchestrator::JobId;
use std::collections::HashMap;

impl Orchestrator {
    /// The queued tasks that may start now: all but the sweep trials parked
    /// at a rung that must still wait; trials stopped there are completed.
    pub(super) fn admissible(&self, queued: Vec<TaskRow>) -> Vec<TaskRow> {
        let mut specs: HashMap<JobId, Option<JobSpec>> = HashMap::new();
        queued
            .into_iter()
            .filter(|task| {
                if task.steps_done == 0 {
                    return true;
                }
                let spec = specs
                    .entry(task.job_id)
                    .or_insert_with(|| sweep_gate::job_spec(&self.store, task.job_id).ok());
                let at_rung = spec
                    .as_ref()
                    .is_some_and(|s| s.decision_rungs().contains(&task.steps_done));
                if !at_rung {
                    return true;
                }
                match sweep_gate::verdict(&self.store, task, task.steps_done) {
                    Ok(Some(Verdict::Wait)) => false,
                    Ok(Some(Verdict::Stop)) => {
                        let why = sweep_gate::stop_reason(task.steps_done);
                        // Queued cannot become completed directly: through running.
                        for (to, reason) in [
                            (TaskState::Running, "decided at its rung"),
                            (TaskState::Completed, why.as_str()),
                        ] {
                            if let Err(e) = self.store.transition(task.id, to, reason) {
                                tracing::warn!(task = task.id, "ending a stopped trial: {e}");
                                break;
                            }
                        }
                        false
                    }
                    Ok(_) => true,
                    Err(e) => {
                        tracing::warn!(task = task.id, "sweep verdict: {e}; starting it");
                        true
                    }
                }
            })
            .collect()
    }
}
