//! Sweep trials in the queue: a trial parked at a rung starts again only
//! once the trials before it got there, and one the scheduler stops there
//! ends without starting (it was evaluated and checkpointed when it
//! parked). The verdicts are [`crate::orchestrator::sweep_gate`]'s.

use super::Orchestrator;
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::TaskRow;
use crate::orchestrator::sweep::Verdict;
use crate::orchestrator::sweep_gate;
use crate::orchestrator::{JobId, TaskId};
use std::collections::{HashMap, HashSet};

impl Orchestrator {
    /// The queued tasks that may start now: all but the sweep trials parked
    /// at a rung that must still wait; trials stopped there are completed.
    /// Each job's spec, tasks and metric histories are read once per round.
    pub(super) fn admissible(&self, queued: Vec<TaskRow>) -> Vec<TaskRow> {
        let mut by_job: HashMap<JobId, Vec<&TaskRow>> = HashMap::new();
        for task in queued.iter().filter(|t| t.steps_done > 0) {
            by_job.entry(task.job_id).or_default().push(task);
        }
        let mut held: HashSet<TaskId> = HashSet::new();
        for (job, parked) in by_job {
            let verdicts = match sweep_gate::verdicts_at_rest(&self.store, job, &parked) {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(job, "sweep verdicts: {e}; starting its tasks");
                    continue;
                }
            };
            for (task, verdict) in verdicts {
                match verdict {
                    Verdict::Continue => {}
                    Verdict::Wait => {
                        held.insert(task);
                    }
                    Verdict::Stop => {
                        held.insert(task);
                        let steps = parked
                            .iter()
                            .find(|t| t.id == task)
                            .map_or(0, |t| t.steps_done);
                        let why = sweep_gate::stop_reason(steps);
                        // Queued cannot become completed directly: through running.
                        for (to, reason) in [
                            (TaskState::Running, "decided at its rung"),
                            (TaskState::Completed, why.as_str()),
                        ] {
                            if let Err(e) = self.store.transition(task, to, reason) {
                                tracing::warn!(task, "ending a stopped trial: {e}");
                                break;
                            }
                        }
                    }
                }
            }
        }
        queued
            .into_iter()
            .filter(|t| !held.contains(&t.id))
            .collect()
    }
}
