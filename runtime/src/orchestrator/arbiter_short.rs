//! Short tasks beside full slots: the arbiter's side (its rules are in the
//! arbiter's module documentation, "Short tasks beside full slots"; which
//! tasks are short is the pace's rule, `pace.rs`).
//!
//! Pure bookkeeping like the rest of the arbiter: the caller names the short
//! candidates, the arbiter decides whether one may start now.

use super::{admission_order, Arbiter, Candidate, Strategy};
use crate::orchestrator::TaskId;
use std::collections::HashSet;

/// The most tasks that run beside full slots at once: a queue of thousands
/// of short tasks oversubscribes the cores by this many tasks at most.
pub const MAX_SHORT_BESIDE: usize = 1;

impl Arbiter {
    /// Running tasks that hold one of the strategy's places: neither
    /// abandoned nor started beside full slots.
    pub fn slot_holders(&self) -> Vec<TaskId> {
        self.running
            .iter()
            .map(|&(t, _)| t)
            .filter(|t| !self.abandoned.contains(t) && !self.beside.contains(t))
            .collect()
    }

    /// Running tasks started beside full slots (and not abandoned since).
    pub fn running_beside(&self) -> Vec<TaskId> {
        self.beside
            .iter()
            .copied()
            .filter(|t| !self.abandoned.contains(t))
            .collect()
    }

    /// Whether [`select_short`](Self::select_short) may start a task now:
    /// `Auto` with a count limit, every place taken, fewer than
    /// [`MAX_SHORT_BESIDE`] tasks beside them, and the device within budget.
    pub fn short_lane_open(&self) -> bool {
        let Some(limit) = self.auto_limit else {
            return false;
        };
        self.strategy == Strategy::Auto
            && self.reserved <= self.budget.total_bytes as u128
            && self.slot_holders().len() >= limit
            && self.running_beside().len() < MAX_SHORT_BESIDE
    }

    /// Starts one of `short` beside the full slots when the rules allow it
    /// (the module documentation): the first short candidate of the highest
    /// priority waiting, in order, whose bytes fit beside the candidate next
    /// in line. Reserves its bytes and returns it; the caller must start it.
    pub fn select_short(&mut self, queue: &[Candidate], short: &HashSet<TaskId>) -> Option<TaskId> {
        if short.is_empty() || !self.short_lane_open() {
            return None;
        }
        let total = self.budget.total_bytes as u128;
        let mut waiting: Vec<&Candidate> = queue
            .iter()
            .filter(|c| c.bytes as u128 <= total && !self.is_running(c.task))
            .collect();
        waiting.sort_unstable_by(|a, b| admission_order(a, b));
        let head = *waiting.first()?;
        let chosen = waiting
            .iter()
            .take_while(|c| c.priority == head.priority)
            .find(|c| {
                // The next in line keeps the bytes it needs.
                let ahead = if c.task == head.task {
                    0
                } else {
                    head.bytes as u128
                };
                short.contains(&c.task) && self.reserved + ahead + c.bytes as u128 <= total
            })?;
        let (task, bytes) = (chosen.task, chosen.bytes);
        self.running.push((task, bytes));
        self.reserved += bytes as u128;
        self.skips.remove(&task);
        self.beside.push(task);
        Some(task)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Budget;
    use super::*;
    use tli_plugin_api::Device;

    fn arbiter(slots: usize, budget: u64) -> Arbiter {
        let budget = Budget {
            device: Device::Cpu,
            total_bytes: budget,
        };
        Arbiter::new(Strategy::Auto, budget, 0.0).with_auto_limit(slots)
    }

    fn c(task: TaskId, priority: i32, bytes: u64) -> Candidate {
        Candidate {
            task,
            priority,
            order: task as u64,
            bytes,
        }
    }

    fn set(tasks: &[TaskId]) -> HashSet<TaskId> {
        tasks.iter().copied().collect()
    }

    #[test]
    fn a_short_task_starts_beside_full_slots_and_takes_no_place() {
        let mut a = arbiter(2, 1_000);
        let queue = [c(1, 0, 10), c(2, 0, 10), c(3, 0, 10), c(4, 0, 10)];
        assert_eq!(a.select(&queue), vec![1, 2]);
        assert!(a.select(&queue).is_empty(), "every place taken");
        assert!(a.short_lane_open());
        assert_eq!(a.select_short(&queue, &set(&[4])), Some(4));
        assert_eq!(a.running_beside(), vec![4]);
        assert_eq!(a.slot_holders(), vec![1, 2]);
        assert_eq!(a.reserved(), 30, "its bytes are reserved");
        // A place frees: the next in line takes it, as if 4 were not there.
        a.release(1);
        assert_eq!(a.select(&queue[2..3]), vec![3]);
        assert_eq!(a.running_count(), 3);
        a.release(4);
        assert!(a.running_beside().is_empty());
        assert!(
            a.select(&[c(5, 0, 10)]).is_empty(),
            "two places, both taken"
        );
    }

    #[test]
    fn a_task_not_named_short_does_not_start_beside() {
        let mut a = arbiter(2, 1_000);
        let queue = [c(1, 0, 10), c(2, 0, 10), c(3, 0, 10)];
        assert_eq!(a.select(&queue), vec![1, 2]);
        assert_eq!(a.select_short(&queue, &set(&[])), None);
        assert_eq!(a.select_short(&queue, &set(&[99])), None, "not queued");
        assert_eq!(a.running_count(), 2);
    }

    #[test]
    fn at_most_one_runs_beside_the_slots() {
        let mut a = arbiter(2, 1_000);
        let queue: Vec<Candidate> = (1..=100).map(|t| c(t, 0, 1)).collect();
        let all_short: HashSet<TaskId> = (3..=100).collect();
        assert_eq!(a.select(&queue), vec![1, 2]);
        assert_eq!(a.select_short(&queue, &all_short), Some(3));
        assert!(!a.short_lane_open());
        for _ in 0..10 {
            assert_eq!(a.select_short(&queue, &all_short), None);
        }
        assert_eq!(a.running_count(), 2 + MAX_SHORT_BESIDE);
        // The short one ends: another may start beside.
        a.release(3);
        assert_eq!(a.select_short(&queue[3..], &all_short), Some(4));
    }

    #[test]
    fn only_when_every_place_is_taken() {
        let mut a = arbiter(2, 1_000);
        let queue = [c(1, 0, 10), c(2, 0, 10)];
        assert_eq!(a.select(&queue[..1]), vec![1]);
        assert!(!a.short_lane_open(), "a place is free: select starts it");
        assert_eq!(a.select_short(&queue, &set(&[2])), None);
        // No count limit (the GPU): everything that fits starts anyway.
        let budget = Budget {
            device: Device::Cpu,
            total_bytes: 1_000,
        };
        let mut unlimited = Arbiter::new(Strategy::Auto, budget.clone(), 0.0);
        assert!(!unlimited.short_lane_open());
        // Other strategies are taken at their word.
        for strategy in [Strategy::Sequential, Strategy::Parallel(1)] {
            let mut strict = Arbiter::new(strategy, budget.clone(), 0.0).with_auto_limit(1);
            assert_eq!(strict.select(&queue), vec![1]);
            assert_eq!(
                strict.select_short(&queue, &set(&[2])),
                None,
                "{strategy:?}"
            );
        }
        assert_eq!(unlimited.select(&queue), vec![1, 2]);
    }

    #[test]
    fn memory_is_never_overcommitted_nor_taken_from_the_next_in_line() {
        // Two places, budget 100: 1 and 2 hold 40 each; 20 free.
        let mut a = arbiter(2, 100);
        let queue = [
            c(1, 0, 40),
            c(2, 0, 40),
            c(3, 0, 15),
            c(4, 0, 25),
            c(5, 0, 6),
        ];
        assert_eq!(a.select(&queue), vec![1, 2]);
        // 4 does not fit at all; 5 fits, but not beside 3 (the next in line).
        assert_eq!(a.select_short(&queue, &set(&[4])), None);
        assert_eq!(a.select_short(&queue, &set(&[5])), None);
        // The next in line itself, when short, needs only its own bytes.
        assert_eq!(a.select_short(&queue, &set(&[3, 5])), Some(3));
        assert_eq!(a.reserved(), 95);
        assert!(a.reserved() <= 100);
        // Over budget after a re-measurement: nothing starts beside either.
        let mut b = arbiter(1, 100);
        assert_eq!(b.select(&[c(1, 0, 50)]), vec![1]);
        let _ = b.update_measured(1, 150);
        assert!(!b.short_lane_open());
        assert_eq!(b.select_short(&[c(2, 0, 1)], &set(&[2])), None);
    }

    #[test]
    fn a_higher_priority_waiting_task_is_never_passed() {
        let mut a = arbiter(1, 1_000);
        assert_eq!(a.select(&[c(1, 0, 10)]), vec![1]);
        // 2 waits at priority 5; the short 3 (priority 0) does not start.
        let queue = [c(2, 5, 10), c(3, 0, 10)];
        assert_eq!(a.select_short(&queue, &set(&[3])), None);
        // A short task of the highest priority waiting does, past an older
        // task of its own priority (whose place it does not take).
        let queue = [c(2, 5, 10), c(4, 5, 10)];
        assert_eq!(a.select_short(&queue, &set(&[4])), Some(4));
        a.release(1);
        assert_eq!(
            a.select(&queue),
            vec![2],
            "the next in line takes the place"
        );
    }

    #[test]
    fn an_abandoned_task_beside_frees_the_lane_and_release_forgets_it() {
        let mut a = arbiter(1, 1_000);
        let queue = [c(1, 0, 10), c(2, 0, 10), c(3, 0, 10)];
        assert_eq!(a.select(&queue), vec![1]);
        assert_eq!(a.select_short(&queue, &set(&[2, 3])), Some(2));
        a.abandon(2);
        assert_eq!(a.select_short(&queue, &set(&[3])), Some(3));
        assert_eq!(a.reserved(), 30, "the abandoned one keeps its bytes");
        a.release(2);
        a.release(3);
        assert_eq!(a.running_count(), 1);
        assert!(a.running_beside().is_empty());
    }
}
