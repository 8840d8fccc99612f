//! The seam between the engine and whatever else wants to know how a task
//! runs (TensorBoard's event files, Prometheus's checkpoint timings, and any
//! consumer a server or a test adds). The engine never names those
//! consumers: it tells each [`TaskObserver`] wired into it, in the order they
//! were added, after the store has recorded the same event.
//!
//! Rules for an observer:
//!
//! * It is called on the thread that recorded the event (a runner thread,
//!   or the worker service's handler for a task on Slurm), so it must be
//!   quick and must not block; it must never call back into the engine.
//! * It cannot fail the task: a method returns nothing, and an observer that
//!   cannot write logs its own failure.
//! * Every run of a task that started ends with [`TaskObserver::run_ended`]
//!   (its end, a re-queue, or a forced stop), so per-run state can be freed.

use super::store::{MeasuredMemory, SliceMetrics};
use super::{JobId, TaskId};
use std::sync::{Arc, RwLock};

/// What happens to a running task, as it is recorded. Every method has an
/// empty default: an observer implements what it uses.
pub trait TaskObserver: Send + Sync {
    /// A run of the task starts (or resumes) at `steps`.
    fn run_started(&self, _job: JobId, _task: TaskId, _steps: u64) {}
    /// Progress at `steps`, with the metrics of each slice since the last call.
    fn progress(&self, _job: JobId, _task: TaskId, _steps: u64, _batch: &[SliceMetrics]) {}
    /// What the task measured after its first slice.
    fn measured(&self, _job: JobId, _task: TaskId, _memory: &MeasuredMemory) {}
    /// A checkpoint of the task was written and recorded in `write_seconds`.
    fn checkpoint_written(&self, _job: JobId, _task: TaskId, _plugin: &str, _write_seconds: f64) {}
    /// The task's run ended (finished, failed, stopped, interrupted or re-queued).
    fn run_ended(&self, _task: TaskId) {}
}

/// The observers wired into one engine. Shared by every task record, so an
/// observer added after the engine opened sees every later event.
#[derive(Default)]
pub struct Observers {
    list: RwLock<Vec<Arc<dyn TaskObserver>>>,
}

impl Observers {
    /// Adds `observer` after those already wired in.
    pub fn add(&self, observer: Arc<dyn TaskObserver>) {
        self.list
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(observer);
    }

    /// Whether any observer is wired in.
    pub fn is_empty(&self) -> bool {
        self.snapshot().is_empty()
    }

    /// Calls `tell` on every observer, in the order they were added.
    pub fn each(&self, tell: impl Fn(&dyn TaskObserver)) {
        for observer in self.snapshot() {
            tell(observer.as_ref());
        }
    }

    fn snapshot(&self) -> Vec<Arc<dyn TaskObserver>> {
        // Cloned out so no observer runs under the lock (one may be slow).
        self.list
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Tally(Mutex<Vec<String>>);

    impl TaskObserver for Tally {
        fn run_started(&self, job: JobId, task: TaskId, steps: u64) {
            self.0
                .lock()
                .unwrap()
                .push(format!("start {job}/{task}@{steps}"));
        }
        fn run_ended(&self, task: TaskId) {
            self.0.lock().unwrap().push(format!("end {task}"));
        }
    }

    #[test]
    fn every_observer_hears_every_event_in_the_order_added() {
        let observers = Observers::default();
        assert!(observers.is_empty());
        let (a, b) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
        observers.add(a.clone());
        observers.each(|o| o.run_started(1, 2, 0));
        observers.add(b.clone());
        observers.each(|o| o.run_started(1, 2, 10));
        observers.each(|o| o.run_ended(2));
        assert_eq!(
            *a.0.lock().unwrap(),
            ["start 1/2@0", "start 1/2@10", "end 2"]
        );
        assert_eq!(*b.0.lock().unwrap(), ["start 1/2@10", "end 2"]);
    }
}
