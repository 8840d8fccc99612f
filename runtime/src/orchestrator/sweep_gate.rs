//! Sweep trials at their rungs, from what the store recorded. The decisions
//! themselves are [`tli_core::sweep`]'s pure functions; this module only
//! gathers their inputs: each trial's steps, whether it has ended, and its
//! history of the sweep's metric.
//!
//! A trial is one task; the trials that compete are the tasks of the same
//! job on the same assets (one group per asset, or the pooled tasks), in
//! trial order. Because a verdict depends only on the recorded values of
//! the trial and the trials before it, asking again (after a restart, on
//! another executor) gives the same answer, or `Wait` while an earlier
//! trial has yet to get there.
//!
//! Invariants:
//! * A decision is asked only at a decision rung, after the trial's
//!   progress up to that step is in the store.
//! * A trial that completed, failed or was cancelled before a rung does not
//!   count there (`AtRung::StoppedBefore`); one still queued or running
//!   below it holds the later trials (`AtRung::Pending`).

use super::job::{JobSpec, TaskAssets};
use super::state::TaskState;
use super::store::{BestMark, Store, StoreError, TaskRow};
use super::{JobId, TaskId};
use tli_core::sweep::{SweepSpec, TrialRecord, TrialResult, Verdict};

/// Why a sweep's records could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("job store: {0}")]
    Store(#[from] StoreError),
    #[error("job {0}: its stored spec does not parse: {1}")]
    Spec(JobId, String),
    #[error("job {0} not found")]
    NoSuchJob(JobId),
}

/// A job's spec as stored.
pub fn job_spec(store: &Store, job: JobId) -> Result<JobSpec, GateError> {
    let row = store.job(job)?.ok_or(GateError::NoSuchJob(job))?;
    serde_json::from_str(&row.spec_json).map_err(|e| GateError::Spec(job, e.to_string()))
}

/// One group of trials: the tasks of a sweep job on the same assets.
pub struct Group {
    pub assets: TaskAssets,
    /// `tasks[i]` runs trial `i` (`None` if the store lacks it).
    pub tasks: Vec<Option<TaskRow>>,
}

/// The groups of a sweep job, each with its trials in order.
pub fn groups(spec: &JobSpec, tasks: &[TaskRow]) -> Vec<Group> {
    let plan = spec.task_plan();
    let mut groups: Vec<Group> = Vec::new();
    for (ordinal, planned) in plan.iter().enumerate() {
        let row = tasks
            .iter()
            .find(|t| t.ordinal as usize == ordinal)
            .cloned();
        let at = match groups.iter().position(|g| g.assets == planned.assets) {
            Some(i) => i,
            None => {
                groups.push(Group {
                    assets: planned.assets,
                    tasks: vec![None; spec.models.len()],
                });
                groups.len() - 1
            }
        };
        if let Some(slot) = groups[at].tasks.get_mut(planned.model) {
            *slot = row;
        }
    }
    groups
}

/// What the store says of a trial (the first `upto` of a group, or all).
pub fn records(
    store: &Store,
    sweep: &SweepSpec,
    group: &Group,
    upto: usize,
) -> Result<Vec<TrialRecord>, StoreError> {
    let mut out = Vec::with_capacity(upto);
    for task in group.tasks.iter().take(upto) {
        out.push(match task {
            Some(t) => TrialRecord {
                steps_done: t.steps_done,
                ended: matches!(
                    t.state,
                    TaskState::Completed | TaskState::Failed | TaskState::Cancelled
                ),
                history: store.metric_history(t.id, &sweep.metric)?,
            },
            // Never stored: it can hold nobody up.
            None => TrialRecord {
                ended: true,
                ..TrialRecord::default()
            },
        });
    }
    Ok(out)
}

/// The scheduler's verdict on `task` at `step`; `None` when the task is not
/// a sweep trial or `step` is not one of its decision rungs.
pub fn verdict(store: &Store, task: &TaskRow, step: u64) -> Result<Option<Verdict>, GateError> {
    // The asking trial is at `step` whatever the store's row said when read.
    let at = TaskRow {
        steps_done: step,
        ..task.clone()
    };
    Ok(verdicts_at_rest(store, task.job_id, &[&at])?
        .into_iter()
        .find(|(id, _)| *id == task.id)
        .map(|(_, v)| v))
}

/// The verdicts on several of one job's tasks, each at its `steps_done`
/// (the trials parked at a rung): the job's spec, tasks and each group's
/// records are read once. Tasks that are not trials at a decision rung are
/// left out.
pub fn verdicts_at_rest(
    store: &Store,
    job: JobId,
    parked: &[&TaskRow],
) -> Result<Vec<(TaskId, Verdict)>, GateError> {
    let spec = job_spec(store, job)?;
    let Some(sweep) = &spec.sweep else {
        return Ok(Vec::new());
    };
    let rungs = sweep.decision_rungs();
    let plan = spec.task_plan();
    let tasks = store.tasks_of(job)?;
    let mut out = Vec::new();
    for group in groups(&spec, &tasks) {
        let asking: Vec<(&TaskRow, usize)> = parked
            .iter()
            .filter(|t| rungs.contains(&t.steps_done))
            .filter_map(|t| {
                let p = plan.get(t.ordinal as usize)?;
                (p.assets == group.assets).then_some((*t, p.model))
            })
            .collect();
        let Some(upto) = asking.iter().map(|(_, trial)| trial + 1).max() else {
            continue;
        };
        let records = records(store, sweep, &group, upto)?;
        for (task, trial) in asking {
            if let Some(v) = sweep.verdict(trial, task.steps_done, &records) {
                out.push((task.id, v));
            }
        }
    }
    Ok(out)
}

/// Why ASHA stopped a trial at a rung (a completed task's reason; it starts
/// with "stopped early", as early stopping's do).
pub fn stop_reason(step: u64) -> String {
    format!(
        "stopped early by ASHA at rung {step}: its validation metric is not in the top of the \
         trials before it there"
    )
}

/// One row of a sweep's result table.
#[derive(Clone, Debug)]
pub struct TrialRow {
    /// Its index in trial order.
    pub trial: usize,
    pub task: TaskRow,
    /// The searched keys' values.
    pub params: serde_json::Value,
    pub result: TrialResult,
    /// "queued", "running", "waiting at rung 300", "stopped at rung 100",
    /// "completed", "failed", ...
    pub status: String,
    /// The best trial of its group.
    pub best: bool,
    /// Its best checkpoint (its model): step and mark.
    pub best_checkpoint: Option<(u64, BestMark)>,
}

/// A sweep's result table: every group's trials, in task order.
#[derive(Clone, Debug)]
pub struct SweepTable {
    pub sweep: SweepSpec,
    pub rungs: Vec<u64>,
    pub trials: Vec<TrialRow>,
    /// Steps every trial trained, together.
    pub steps_trained: u64,
    /// Steps training every trial to `max_steps` takes.
    pub steps_if_run_all: u64,
}

/// A sweep job's result table (`None`: the job is not a sweep).
pub fn table(store: &Store, job: JobId) -> Result<Option<SweepTable>, GateError> {
    let spec = job_spec(store, job)?;
    let Some(sweep) = spec.sweep.clone() else {
        return Ok(None);
    };
    let tasks = store.tasks_of(job)?;
    let rungs = sweep.decision_rungs();
    let mut rows = Vec::new();
    for group in groups(&spec, &tasks) {
        let records = records(store, &sweep, &group, group.tasks.len())?;
        let results = sweep.results(&records);
        for (trial, (task, result)) in group.tasks.iter().zip(results.trials).enumerate() {
            let Some(task) = task else { continue };
            let status = match task.state {
                TaskState::Queued if rungs.contains(&task.steps_done) => {
                    format!("waiting at rung {}", task.steps_done)
                }
                TaskState::Completed if task.steps_done < task.total_steps => {
                    format!("stopped at rung {}", task.steps_done)
                }
                s => s.to_string(),
            };
            let params = spec
                .models
                .get(trial)
                .and_then(|m| m.config.as_ref())
                .map(|c| sweep.searched(c))
                .unwrap_or(serde_json::Value::Null);
            let best_checkpoint = store
                .best_checkpoint(task.id)?
                .and_then(|r| Some((r.step, r.best?)));
            rows.push(TrialRow {
                trial,
                task: task.clone(),
                params,
                result,
                status,
                best: results.best == Some(trial),
                best_checkpoint,
            });
        }
    }
    rows.sort_by_key(|r| r.task.ordinal);
    let steps_trained = rows.iter().map(|r| r.task.steps_done).sum();
    let steps_if_run_all = rows.len() as u64 * sweep.scheduler.max_steps();
    Ok(Some(SweepTable {
        rungs: sweep.table_rungs(),
        sweep,
        trials: rows,
        steps_trained,
        steps_if_run_all,
    }))
}
