//! The live, in-memory side of running tasks: their latest step count and
//! metrics (updated by runners after every slice, read by status and watch
//! calls without touching the store), and the plugins' log lines fanned out
//! to whoever watches.
//!
//! The store stays the durable record: runners flush progress to it about
//! once a second and at every checkpoint, stop and finish (see
//! [`super::runner`]), so a reader of the store alone (another process,
//! `tli host status`) sees progress at most that much behind. A task's entry
//! lives here from its first slice until its runner finishes.

use super::{now_ms, JobId, TaskId};
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::broadcast;

/// Log lines buffered for slow watchers before the oldest are dropped.
const LOG_CHANNEL_CAPACITY: usize = 4096;

/// A running task's latest progress.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveTask {
    pub steps_done: u64,
    /// The latest value of every metric reported since the runner started, by name.
    pub metrics: Vec<(String, f64)>,
}

/// One log line from a plugin, tagged with its job and task.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskLog {
    pub job: JobId,
    pub task: TaskId,
    pub plugin: String,
    /// `error`, `warn` or `info`.
    pub level: &'static str,
    pub message: String,
    pub at_ms: i64,
}

pub struct LiveProgress {
    tasks: Mutex<HashMap<TaskId, LiveTask>>,
    /// What a task not yet running waits for, where its state alone does not
    /// say ("waiting for Slurm: …", "Slurm job 12 pending: Resources").
    notes: Mutex<HashMap<TaskId, String>>,
    logs: broadcast::Sender<TaskLog>,
}

impl Default for LiveProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveProgress {
    pub fn new() -> Self {
        Self {
            tasks: Mutex::new(HashMap::new()),
            notes: Mutex::new(HashMap::new()),
            logs: broadcast::channel(LOG_CHANNEL_CAPACITY).0,
        }
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, LiveTask>> {
        // The map holds plain values: a panic elsewhere cannot leave it half-updated.
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a slice: the new step count and the metrics measured at it.
    pub fn update(&self, task: TaskId, steps_done: u64, metrics: &[(String, f64)]) {
        let mut tasks = self.tasks();
        let entry = tasks.entry(task).or_default();
        entry.steps_done = steps_done;
        for (name, value) in metrics {
            match entry.metrics.iter_mut().find(|(n, _)| n == name) {
                Some(slot) => slot.1 = *value,
                None => entry.metrics.push((name.clone(), *value)),
            }
        }
    }

    /// The task's latest progress, while its runner runs.
    pub fn get(&self, task: TaskId) -> Option<LiveTask> {
        self.tasks().get(&task).cloned()
    }

    /// Drops a task's entry once its runner has flushed everything to the store.
    pub fn forget(&self, task: TaskId) {
        self.tasks().remove(&task);
        self.set_note(task, None);
    }

    /// Sets (or with `None` clears) what the task waits for.
    pub fn set_note(&self, task: TaskId, note: Option<String>) {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        match note {
            Some(text) => notes.insert(task, text),
            None => notes.remove(&task),
        };
    }

    /// What the task waits for, if anything was said.
    pub fn note(&self, task: TaskId) -> Option<String> {
        let notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        notes.get(&task).cloned()
    }

    /// Passes a plugin's log line to every log subscriber (none: dropped).
    pub fn log(&self, job: JobId, task: TaskId, plugin: &str, level: &'static str, message: &str) {
        if self.logs.receiver_count() == 0 {
            return;
        }
        let _ = self.logs.send(TaskLog {
            job,
            task,
            plugin: plugin.to_string(),
            level,
            message: message.to_string(),
            at_ms: now_ms(),
        });
    }

    /// Every plugin log line from now on (lines of all jobs; filter by `job`).
    pub fn subscribe_logs(&self) -> broadcast::Receiver<TaskLog> {
        self.logs.subscribe()
    }
}

/// A task's log lines into [`LiveProgress`]'s broadcast (the runner gives
/// one to the plugin's host services).
pub struct TaskLogTap {
    pub live: std::sync::Arc<LiveProgress>,
    pub job: JobId,
    pub task: TaskId,
}

impl crate::services::TaskLogSink for TaskLogTap {
    fn log_line(&self, plugin: &str, level: &'static str, message: &str) {
        self.live.log(self.job, self.task, plugin, level, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_keep_the_latest_value_of_each_metric() {
        let live = LiveProgress::new();
        live.update(1, 10, &[("loss".into(), 2.0), ("lr".into(), 0.1)]);
        live.update(1, 20, &[("loss".into(), 1.5)]);
        let task = live.get(1).unwrap();
        assert_eq!(task.steps_done, 20);
        assert_eq!(
            task.metrics,
            vec![("loss".to_string(), 1.5), ("lr".to_string(), 0.1)]
        );
        live.forget(1);
        assert_eq!(live.get(1), None);
    }

    #[test]
    fn log_lines_reach_subscribers_only() {
        let live = LiveProgress::new();
        live.log(1, 2, "p", "info", "before anyone listens");
        let mut rx = live.subscribe_logs();
        live.log(1, 2, "p", "warn", "hello");
        let line = rx.try_recv().unwrap();
        assert_eq!((line.job, line.task, line.level), (1, 2, "warn"));
        assert_eq!(line.message, "hello");
        assert!(rx.try_recv().is_err());
    }
}
