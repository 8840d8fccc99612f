//! Progress of tasks and jobs, computed from the store: per task steps done
//! of its total, the latest metrics, its rate and ETA; per job the fraction
//! done weighted by each task's estimated cost (steps × bytes it touches), so
//! a slow, big model counts for what it costs.
//!
//! Running tasks' step counts and metrics may be read from [`LiveProgress`] instead
//! (fresher than the store, which runners update about once a second).

use super::live::LiveProgress;
use super::state::TaskState;
use super::store::{BestMark, DispatchRow, MeasuredMemory, Store, StoreError, TaskRow};
use super::JobId;
use serde::Serialize;

/// Steps per second of a task's current attempt: the steps done since its
/// runner started ("started", or "resumed from checkpoint step N") over the
/// time since, at `now_ms`. Later returns to `running` (after a routine
/// checkpoint, a sweep's rung) do not restart the count: taking the steps of
/// the whole task over the seconds since the last checkpoint gave rates of
/// millions of steps per second. `None` before a step of this attempt.
pub fn attempt_rate(
    transitions: &[super::store::TransitionRow],
    steps_done: u64,
    now_ms: i64,
) -> Option<f64> {
    let start = transitions.iter().rev().find(|x| {
        x.to == TaskState::Running
            && (x.reason.starts_with("started") || x.reason.starts_with(RESUMED_FROM))
    })?;
    let start_steps = start
        .reason
        .strip_prefix(RESUMED_FROM)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let seconds = (now_ms - start.at_ms) as f64 / 1e3;
    (seconds > 0.0 && steps_done > start_steps).then(|| (steps_done - start_steps) as f64 / seconds)
}

/// How a runner's first transition to `running` reads when it resumed.
const RESUMED_FROM: &str = "resumed from checkpoint step ";

#[derive(Clone, Debug, Serialize)]
pub struct TaskProgress {
    pub task: i64,
    pub plugin: String,
    pub asset: String,
    pub state: TaskState,
    pub steps_done: u64,
    pub total_steps: u64,
    pub fraction: f64,
    /// Steps per second since the task (last) started running; 0 if unknown.
    pub steps_per_second: f64,
    /// Seconds to go at that rate; `None` when unknown or finished.
    pub eta_seconds: Option<f64>,
    pub metrics: Vec<(String, f64)>,
    pub error: Option<String>,
    pub estimate_bytes: u64,
    pub measured_bytes: Option<u64>,
    /// `measured_bytes` by component, once measured.
    pub measured_memory: Option<MeasuredMemory>,
    /// When it first started running, and when it last finished (ms since the epoch).
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    /// Its latest Slurm job, for a task of the Slurm executor.
    pub slurm: Option<SlurmPlacement>,
    /// What it waits for, where its state alone does not say ("waiting for
    /// Slurm: …", "Slurm job 12 running for 40 s, worker not attached").
    pub detail: Option<String>,
    /// The plugin version that runs it and its library's SHA-256 (`None`
    /// for tasks of older hosts).
    pub plugin_version: Option<String>,
    pub plugin_checksum: Option<String>,
    /// Why early stopping ended it before its total steps.
    pub stopped_early: Option<String>,
    /// Its best checkpoint (its model), when it keeps best ones.
    pub best: Option<(u64, BestMark)>,
    /// The metrics its plugin says to show first (empty: none declared, or
    /// filled only by the engine, which knows the plugins).
    pub headline_metrics: Vec<String>,
}

/// Where a task's latest attempt went on Slurm.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlurmPlacement {
    pub job_id: String,
    /// The node its worker reported (once attached).
    pub node: Option<String>,
    /// Slurm jobs submitted for it so far.
    pub jobs: u32,
    /// CPU- and GPU-seconds of its ended jobs, from Slurm's accounting.
    pub cpu_seconds: f64,
    pub gpu_seconds: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct JobProgress {
    pub job: JobId,
    pub name: String,
    /// Σ cost_i · fraction_i / Σ cost_i.
    pub weighted_fraction: f64,
    pub tasks: Vec<TaskProgress>,
}

impl JobProgress {
    pub fn is_finished(&self) -> bool {
        self.tasks.iter().all(|t| t.state.is_finished())
    }
}

/// A job's progress as the store records it.
pub fn job_progress(store: &Store, job: JobId) -> Result<Option<JobProgress>, StoreError> {
    job_progress_with(store, None, job)
}

/// A job's progress, with running tasks' steps and metrics from `live`
/// where it has them.
pub fn job_progress_with(
    store: &Store,
    live: Option<&LiveProgress>,
    job: JobId,
) -> Result<Option<JobProgress>, StoreError> {
    let Some(row) = store.job(job)? else {
        return Ok(None);
    };
    let tasks = store.tasks_of(job)?;
    let mut weighted = 0.0;
    let mut weights = 0.0;
    let mut out = Vec::with_capacity(tasks.len());
    for t in &tasks {
        let p = task_progress(store, live, t)?;
        weighted += t.cost_weight * p.fraction;
        weights += t.cost_weight;
        out.push(p);
    }
    Ok(Some(JobProgress {
        job,
        name: row.name,
        weighted_fraction: if weights > 0.0 {
            weighted / weights
        } else {
            0.0
        },
        tasks: out,
    }))
}

pub(crate) fn task_progress(
    store: &Store,
    live: Option<&LiveProgress>,
    row: &TaskRow,
) -> Result<TaskProgress, StoreError> {
    let mut metrics = store.latest_metrics(row.id)?;
    let mut t = row.clone();
    if let Some(now) = live
        .filter(|_| row.state.is_active())
        .and_then(|l| l.get(row.id))
    {
        t.steps_done = now.steps_done;
        for (name, value) in now.metrics {
            match metrics.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => metrics.push((name, value)),
            }
        }
        metrics.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let t = &t;
    let fraction = if t.state == TaskState::Completed {
        1.0
    } else {
        (t.steps_done as f64 / t.total_steps.max(1) as f64).min(1.0)
    };
    let transitions = store.transitions(t.id)?;
    let (mut rate, mut eta) = (0.0, None);
    if t.state.is_active() {
        if let Some(r) = attempt_rate(&transitions, t.steps_done, super::now_ms()) {
            rate = r;
            eta = Some(t.total_steps.saturating_sub(t.steps_done) as f64 / r);
        }
    }
    Ok(TaskProgress {
        task: t.id,
        plugin: t.plugin.clone(),
        asset: t.asset.clone(),
        state: t.state,
        steps_done: t.steps_done,
        total_steps: t.total_steps,
        fraction,
        steps_per_second: rate,
        eta_seconds: eta,
        metrics,
        error: t.error.clone(),
        estimate_bytes: t.estimate_bytes,
        measured_bytes: t.measured_bytes,
        measured_memory: t.measured_memory,
        plugin_version: t.plugin_version.clone(),
        plugin_checksum: t.plugin_checksum.clone(),
        stopped_early: transitions
            .iter()
            .rev()
            .find(|x| x.to == TaskState::Completed)
            .filter(|_| t.state == TaskState::Completed)
            .map(|x| x.reason.clone())
            .filter(|r| r.starts_with("stopped early")),
        best: store
            .best_checkpoint(t.id)?
            .and_then(|r| Some((r.step, r.best?))),
        slurm: slurm_placement(store.dispatches_of(t.id)?),
        detail: live
            .filter(|_| !t.state.is_finished())
            .and_then(|l| l.note(t.id)),
        started_ms: transitions
            .iter()
            .find(|x| x.to == TaskState::Running)
            .map(|x| x.at_ms),
        finished_ms: transitions
            .iter()
            .rev()
            .find(|x| x.to.is_finished())
            .map(|x| x.at_ms),
        headline_metrics: Vec::new(),
    })
}

/// A task's latest submitted Slurm job, with the count and accounted usage of all of them.
fn slurm_placement(dispatches: Vec<DispatchRow>) -> Option<SlurmPlacement> {
    let submitted: Vec<&DispatchRow> = dispatches
        .iter()
        .filter(|d| d.external_id.is_some())
        .collect();
    let last = submitted.last()?;
    Some(SlurmPlacement {
        job_id: last.external_id.clone().unwrap_or_default(),
        node: last.node.clone(),
        jobs: submitted.len() as u32,
        cpu_seconds: submitted
            .iter()
            .filter_map(|d| d.usage.map(|u| u.cpu_seconds()))
            .sum(),
        gpu_seconds: submitted
            .iter()
            .filter_map(|d| d.usage.map(|u| u.gpu_seconds()))
            .sum(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrator::store::TransitionRow;

    fn row(to: TaskState, reason: &str, at_ms: i64) -> TransitionRow {
        TransitionRow {
            id: 0,
            task_id: 1,
            from: None,
            to,
            reason: reason.into(),
            at_ms,
        }
    }

    #[test]
    fn the_rate_counts_this_attempts_steps_over_its_time() {
        // Resumed at step 1000 at t = 0 s; a routine checkpoint at 9 s; now
        // 10 s in, at step 1100: 10 steps/s (it used to be 1100 steps over
        // the 1 s since the checkpoint).
        let history = [
            row(TaskState::Queued, "submitted", -60_000),
            row(TaskState::Running, "started", -50_000),
            row(TaskState::Interrupted, "the host stopped", -40_000),
            row(TaskState::Queued, "re-queued at host start", -1_000),
            row(
                TaskState::Running,
                "resumed from checkpoint step 1000 on node1",
                0,
            ),
            row(
                TaskState::Checkpointing,
                "routine checkpoint at step 1090",
                9_000,
            ),
            row(TaskState::Running, "checkpoint written", 9_000),
        ];
        let rate = attempt_rate(&history, 1100, 10_000).unwrap();
        assert!((rate - 10.0).abs() < 1e-9, "{rate}");
        // A first attempt counts from step 0.
        let rate = attempt_rate(&history[..2], 500, -40_000).unwrap();
        assert!((rate - 50.0).abs() < 1e-9, "{rate}");
        // No step of this attempt yet: no rate.
        assert_eq!(attempt_rate(&history, 1000, 10_000), None);
    }
}
