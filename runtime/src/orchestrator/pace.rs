//! Step pace and start order: how long one step of a model takes on this
//! host, measured from its runs, and the order queued tasks start in.
//!
//! When tasks run side by side (`parallel:N`, `auto`), the order they start
//! in decides how well the slots drain together: started in submission order,
//! a job that mixes short and long tasks can end with one long task running
//! alone while the other slots idle. Within one job and priority the engine
//! therefore starts the tasks expected to run **longest first**
//! (longest-processing-time-first, Graham 1969), expected time being the
//! task's remaining steps × its model's measured seconds per step:
//!
//! * A model is a plugin name, version and config ([`PaceKey`]); its pace is
//!   the steps all its runs on this host made over the seconds they ran
//!   (start-up included), running tasks counted with their latest progress.
//! * Tasks whose model has no pace yet start first, in submission order: they
//!   may be the long ones, and once one has run a slice its pace is known.
//! * Jobs keep their order (older first) and priorities still come first (the
//!   arbiter's rule); `sequential` keeps plain submission order.
//!
//! # Short tasks beside full slots
//!
//! Longest first drains the slots together, but it makes a quick task wait
//! for a slot behind long ones (a 0.1 s agent behind two tasks of minutes).
//! [`short_tasks`] names the queued tasks that may instead start *beside*
//! the tasks holding every slot (the arbiter's `select_short`, at most one
//! at a time). A task is **short** when its expected run time `E` is known
//! and
//!
//! * `E ≤` [`SHORT_TASK_MAX_SECONDS`] (5 s): what it costs the others is
//!   bounded in absolute terms, and a wrong pace cannot make a long task
//!   "short"; and
//! * `E ≤` [`SHORT_TASK_FRACTION`] (a tenth) of the least expected remaining
//!   time of the tasks holding the slots: the soonest a slot would free for
//!   it, if paces hold. Started now, it ends long before it would otherwise
//!   have started, and the tasks holding the slots, which share the cores
//!   with it while it runs, lose at most about a tenth of their remaining
//!   time (its own CPU time, `E`, is all there is to share). A holder whose
//!   pace is unknown does not bound it (it may be the longest of all).
//!
//! A task without a pace is never short: nothing says it is.
//!
//! Pure bookkeeping and decisions: no I/O, no clock; the engine feeds it.

use super::store::TaskRow;
use super::TaskId;
use std::collections::HashMap;

/// The longest a task may be expected to run to start beside full slots.
pub const SHORT_TASK_MAX_SECONDS: f64 = 5.0;

/// A task starts beside full slots only when it is expected to run at most
/// this fraction of the least remaining time of the tasks holding them.
pub const SHORT_TASK_FRACTION: f64 = 0.1;

/// Distinct models whose finished runs are remembered; beyond this the
/// oldest memory is dropped (a long-lived host sees new configs forever).
const MAX_REMEMBERED_MODELS: usize = 1024;

/// What makes two tasks' steps cost the same: plugin, version and config.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PaceKey {
    pub plugin: String,
    pub version: Option<String>,
    pub config_json: String,
}

impl PaceKey {
    pub fn of(task: &TaskRow) -> Self {
        Self {
            plugin: task.plugin.clone(),
            version: task.plugin_version.clone(),
            config_json: task.config_json.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sample {
    steps: u64,
    seconds: f64,
}

impl Sample {
    fn add(&mut self, other: Sample) {
        self.steps += other.steps;
        self.seconds += other.seconds;
    }
}

/// Measured seconds per step by model.
#[derive(Debug, Default)]
pub struct PaceBook {
    /// Finished runs, summed per model, and when each model was last added.
    finished: HashMap<PaceKey, (Sample, u64)>,
    /// Running tasks' latest progress in this run.
    running: HashMap<TaskId, (PaceKey, Sample)>,
    /// Counts additions to `finished` (the age of a memory).
    additions: u64,
}

impl PaceBook {
    pub fn new() -> Self {
        Self::default()
    }

    /// A running task has made `steps` steps in `seconds` since it started.
    pub fn observe(&mut self, task: TaskId, key: &PaceKey, steps: u64, seconds: f64) {
        if !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        let sample = Sample { steps, seconds };
        match self.running.get_mut(&task) {
            Some(entry) => entry.1 = sample,
            None => {
                self.running.insert(task, (key.clone(), sample));
            }
        }
    }

    /// A task's run ended: its latest progress joins its model's record.
    pub fn finish(&mut self, task: TaskId) {
        let Some((key, sample)) = self.running.remove(&task) else {
            return;
        };
        if sample.steps == 0 {
            return;
        }
        self.additions += 1;
        let stamp = self.additions;
        if !self.finished.contains_key(&key) && self.finished.len() >= MAX_REMEMBERED_MODELS {
            let oldest = self
                .finished
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.finished.remove(&oldest);
            }
        }
        let entry = self.finished.entry(key).or_default();
        entry.0.add(sample);
        entry.1 = stamp;
    }

    /// Seconds per step of `key`'s model, when any of its runs made a step.
    pub fn seconds_per_step(&self, key: &PaceKey) -> Option<f64> {
        let mut total = self.finished.get(key).map(|e| e.0).unwrap_or_default();
        for (k, sample) in self.running.values() {
            if k == key {
                total.add(*sample);
            }
        }
        (total.steps > 0).then(|| total.seconds / total.steps as f64)
    }

    /// Expected seconds for `steps` more steps of `key`'s model (`None`
    /// when it has no pace yet).
    pub fn expected_seconds(&self, key: &PaceKey, steps: u64) -> Option<f64> {
        self.seconds_per_step(key).map(|s| s * steps as f64)
    }
}

/// Whether a task expected to run `expected` seconds is short beside tasks
/// holding the slots that are expected to run `holders` seconds more each
/// (`None`: not known); see the module documentation.
pub fn is_short(expected: Option<f64>, holders: &[Option<f64>]) -> bool {
    let Some(expected) = expected.filter(|e| e.is_finite() && *e >= 0.0) else {
        return false;
    };
    expected <= SHORT_TASK_MAX_SECONDS
        && holders
            .iter()
            .flatten()
            .all(|&remaining| expected <= SHORT_TASK_FRACTION * remaining)
}

/// The queued tasks short enough to start beside tasks holding every slot
/// (`holders`: their expected remaining seconds, `None` where not known),
/// with their expected seconds.
pub fn short_tasks(
    queued: &[&TaskRow],
    holders: &[Option<f64>],
    pace: &PaceBook,
) -> HashMap<TaskId, f64> {
    let mut expected = ExpectedSeconds::new(pace);
    queued
        .iter()
        .filter_map(|t| {
            let expected = expected.of(t);
            is_short(expected, holders).then(|| (t.id, expected.unwrap_or_default()))
        })
        .collect()
}

/// Queued tasks' expected remaining seconds (remaining steps × their model's
/// pace), with one pace look-up per model, not per task: a queue holds many
/// tasks of few models.
struct ExpectedSeconds<'a> {
    pace: &'a PaceBook,
    paces: HashMap<(&'a str, Option<&'a str>, &'a str), Option<f64>>,
}

impl<'a> ExpectedSeconds<'a> {
    fn new(pace: &'a PaceBook) -> Self {
        Self {
            pace,
            paces: HashMap::new(),
        }
    }

    /// `None` when its model has no pace yet.
    fn of(&mut self, t: &'a TaskRow) -> Option<f64> {
        let model = (
            t.plugin.as_str(),
            t.plugin_version.as_deref(),
            t.config_json.as_str(),
        );
        let pace = self.pace;
        let seconds_per_step = *self
            .paces
            .entry(model)
            .or_insert_with(|| pace.seconds_per_step(&PaceKey::of(t)));
        let remaining = t.total_steps.saturating_sub(t.steps_done) as f64;
        seconds_per_step.map(|s| s * remaining)
    }
}

/// Each queued task's start rank (lower starts first among equal
/// priorities): jobs in submission order; within a job, tasks without a
/// known pace first (in submission order), then the longest expected
/// remaining time first (ties in submission order).
pub fn start_ranks(queued: &[&TaskRow], pace: &PaceBook) -> HashMap<TaskId, u64> {
    let mut expected = ExpectedSeconds::new(pace);
    let mut keyed: Vec<(&TaskRow, Option<f64>)> =
        queued.iter().map(|t| (*t, expected.of(t))).collect();
    keyed.sort_by(|(a, a_secs), (b, b_secs)| {
        a.job_id
            .cmp(&b.job_id)
            .then_with(|| match (a_secs, b_secs) {
                (None, None) => std::cmp::Ordering::Equal,
                (None, Some(_)) => std::cmp::Ordering::Less,
                (Some(_), None) => std::cmp::Ordering::Greater,
                (Some(x), Some(y)) => y.total_cmp(x),
            })
            .then(a.id.cmp(&b.id))
    });
    keyed
        .iter()
        .enumerate()
        .map(|(rank, (t, _))| (t.id, rank as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrator::state::TaskState;
    use tli_plugin_api::Device;

    fn task(id: TaskId, job: i64, plugin: &str, steps: u64, done: u64) -> TaskRow {
        TaskRow {
            id,
            job_id: job,
            ordinal: 0,
            plugin: plugin.into(),
            asset: "a".into(),
            config_json: "{}".into(),
            seed: 0,
            total_steps: steps,
            priority: 0,
            device: Device::Cpu,
            estimate_bytes: 1,
            measured_bytes: None,
            cost_weight: 1.0,
            state: TaskState::Queued,
            steps_done: done,
            error: None,
            created_ms: 0,
            updated_ms: 0,
            oom_requeues: 0,
            measured_memory: None,
            plugin_version: Some("1.0.0".into()),
            plugin_checksum: None,
        }
    }

    fn order(queued: &[TaskRow], pace: &PaceBook) -> Vec<TaskId> {
        let refs: Vec<&TaskRow> = queued.iter().collect();
        let ranks = start_ranks(&refs, pace);
        let mut ids: Vec<TaskId> = queued.iter().map(|t| t.id).collect();
        ids.sort_by_key(|id| ranks[id]);
        ids
    }

    #[test]
    fn without_a_pace_tasks_start_in_submission_order() {
        let queued = [
            task(3, 1, "b", 10, 0),
            task(1, 1, "a", 5, 0),
            task(2, 1, "b", 99, 0),
        ];
        assert_eq!(order(&queued, &PaceBook::new()), vec![1, 2, 3]);
    }

    #[test]
    fn within_a_job_the_longest_expected_start_first_and_unknown_ones_before_them() {
        let mut pace = PaceBook::new();
        let slow = PaceKey::of(&task(0, 1, "slow", 0, 0));
        let fast = PaceKey::of(&task(0, 1, "fast", 0, 0));
        pace.observe(90, &slow, 1_000, 4.0); // 4 ms a step
        pace.observe(91, &fast, 1_000, 1.0); // 1 ms a step
        let queued = [
            task(1, 1, "fast", 3_000, 0),    // 3 s
            task(2, 1, "slow", 2_000, 0),    // 8 s
            task(3, 1, "fast", 30_000, 0),   // 30 s
            task(4, 1, "slow", 2_000, 1500), // 2 s left
            task(5, 1, "new", 10, 0),        // unknown
            task(6, 1, "slow", 2_000, 0),    // 8 s, after task 2
        ];
        assert_eq!(order(&queued, &pace), vec![5, 3, 2, 6, 1, 4]);
    }

    #[test]
    fn jobs_keep_their_order() {
        let mut pace = PaceBook::new();
        let key = PaceKey::of(&task(0, 1, "m", 0, 0));
        pace.observe(90, &key, 100, 1.0);
        let queued = [task(7, 2, "m", 1_000_000, 0), task(1, 1, "m", 10, 0)];
        assert_eq!(order(&queued, &pace), vec![1, 7]);
    }

    #[test]
    fn a_finished_run_keeps_counting_and_a_running_one_counts_its_latest_progress() {
        let mut pace = PaceBook::new();
        let key = PaceKey::of(&task(0, 1, "m", 0, 0));
        pace.observe(1, &key, 100, 1.0);
        pace.observe(1, &key, 400, 2.0); // replaces, does not add
        assert_eq!(pace.seconds_per_step(&key), Some(2.0 / 400.0));
        pace.finish(1);
        pace.observe(2, &key, 100, 3.0);
        assert_eq!(pace.seconds_per_step(&key), Some(5.0 / 500.0));
        pace.finish(2);
        pace.finish(2); // twice: no-op
        assert_eq!(pace.seconds_per_step(&key), Some(5.0 / 500.0));
        let other = PaceKey {
            version: Some("2.0.0".into()),
            ..key.clone()
        };
        assert_eq!(pace.seconds_per_step(&other), None);
    }

    #[test]
    fn a_short_task_is_known_short_in_absolute_terms_and_beside_the_holders() {
        // Holders with 60 s and 10 s left: at most 1 s (a tenth of the least).
        let holders = [Some(60.0), Some(10.0)];
        assert!(is_short(Some(0.1), &holders));
        assert!(is_short(Some(1.0), &holders));
        assert!(!is_short(Some(1.5), &holders), "more than a tenth of 10 s");
        // Holders of hours: still at most SHORT_TASK_MAX_SECONDS.
        let long = [Some(36_000.0)];
        assert!(is_short(Some(SHORT_TASK_MAX_SECONDS), &long));
        assert!(!is_short(Some(SHORT_TASK_MAX_SECONDS + 0.5), &long));
        // A holder of unknown pace does not bound it; the absolute bound holds.
        assert!(is_short(Some(2.0), &[None]));
        assert!(!is_short(Some(9.0), &[None, None]));
        // A holder about to end: nothing is short beside it (its slot frees).
        assert!(!is_short(Some(0.1), &[Some(60.0), Some(0.5)]));
        // No pace: never short; nonsense never either.
        assert!(!is_short(None, &holders));
        assert!(!is_short(Some(f64::NAN), &holders));
        assert!(!is_short(Some(-1.0), &holders));
    }

    #[test]
    fn short_tasks_are_those_with_a_known_short_expected_time() {
        let mut pace = PaceBook::new();
        let quick = PaceKey::of(&task(0, 1, "quick", 0, 0));
        let slow = PaceKey::of(&task(0, 1, "slow", 0, 0));
        pace.observe(90, &quick, 1_000, 1.0); // 1 ms a step
        pace.observe(91, &slow, 100, 10.0); // 100 ms a step
        let holders = [pace.expected_seconds(&slow, 400)]; // 40 s left
        assert_eq!(holders, [Some(40.0)]);
        let queued = [
            task(1, 1, "quick", 100, 0),        // 0.1 s: short
            task(2, 1, "slow", 400, 0),         // 40 s
            task(3, 1, "quick", 10_000, 0),     // 10 s: above 5 s
            task(4, 1, "quick", 10_000, 9_000), // 1 s left: short
            task(5, 1, "new", 1, 0),            // no pace
        ];
        let refs: Vec<&TaskRow> = queued.iter().collect();
        let short = short_tasks(&refs, &holders, &pace);
        let mut ids: Vec<TaskId> = short.keys().copied().collect();
        ids.sort();
        assert_eq!(ids, vec![1, 4]);
        assert!((short[&1] - 0.1).abs() < 1e-9);
        assert!((short[&4] - 1.0).abs() < 1e-9);
        // Beside holders with 5 s left, only the 0.1 s one.
        let near_end = [pace.expected_seconds(&slow, 50)];
        let ids: Vec<TaskId> = short_tasks(&refs, &near_end, &pace).into_keys().collect();
        assert_eq!(ids, vec![1]);
    }

    #[test]
    fn memory_of_finished_models_is_bounded() {
        let mut pace = PaceBook::new();
        for i in 0..(MAX_REMEMBERED_MODELS as i64 + 10) {
            let key = PaceKey {
                plugin: format!("m{i}"),
                version: None,
                config_json: "{}".into(),
            };
            pace.observe(i, &key, 10, 1.0);
            pace.finish(i);
        }
        assert_eq!(pace.finished.len(), MAX_REMEMBERED_MODELS);
        let first = PaceKey {
            plugin: "m0".into(),
            version: None,
            config_json: "{}".into(),
        };
        assert_eq!(pace.seconds_per_step(&first), None);
    }
}
