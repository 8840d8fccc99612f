//! The memory arbiter: one per device, it decides which queued tasks may start
//! now so that the memory reserved for running tasks never exceeds the
//! device's budget.
//!
//! # Reservations
//!
//! Every task reserves `bytes` while it runs. Before its first slice the
//! reservation is the caller's estimate plus a safety margin
//! ([`Arbiter::with_margin`]: `ceil(estimate × (1 + margin))`, the margin kept
//! to a millionth). After the first slice the caller reports the measured
//! usage ([`Arbiter::update_measured`]); measured usage plus the same margin
//! then *replaces* the reservation, which may shrink (letting more tasks in)
//! or grow. A grown reservation is kept even when it takes the device over
//! its budget (the task is already running; killing it is the caller's
//! call), the overshoot is reported ([`Remeasure::OverBudget`]), and
//! [`Arbiter::select`] starts nothing until enough has been released to be
//! back within the budget.
//!
//! # Admission rules
//!
//! * **Never over budget by admission**: a task is started only if
//!   `reserved + bytes ≤ budget`. Only re-measurement can take the device
//!   over its budget, never `select`.
//! * **Too big alone**: a task whose reservation alone exceeds the budget is
//!   refused at submission ([`Arbiter::check_fits_alone`],
//!   [`Arbiter::check_estimate`] → [`TooBig`]). Should one reach `select`
//!   anyway it is ignored there (never started, never blocking others).
//! * **Ordering**: candidates are considered by priority (higher first), then
//!   submission order (older first), then task id.
//! * **[`Strategy::Sequential`]**: at most one task running. The head of the
//!   ordering starts when nothing runs (and it fits); nothing else does.
//! * **[`Strategy::Parallel(n)`](Strategy::Parallel)**: at most `n` running,
//!   and within the budget. Candidates are taken strictly in order and the
//!   walk stops at the first one that does not fit: no backfill, so a big task
//!   waits only for running tasks to drain, never for later ones.
//!   `Parallel(0)` is treated as `Parallel(1)` (parsing refuses it).
//! * **[`Strategy::Auto`]**: pack as many as fit, in order,
//!   *backfilling*: a candidate that does not fit is passed over and a later,
//!   smaller one that fits is started. To keep big tasks from starving, each
//!   candidate carries a **skip count**: every `select` call in which it is
//!   passed over *and* some candidate behind it in the ordering is started
//!   adds one. Once a candidate's skip count has reached `max_skips`
//!   (default [`DEFAULT_MAX_SKIPS`] = 3) and it still does not fit, it becomes
//!   the **blocking head**: nothing behind it in the ordering may start until
//!   it has started; running tasks drain until it fits. Hence no task is ever
//!   passed over more than `max_skips` times by tasks ranked behind it.
//!   Tasks ranked *ahead* of it (a higher priority submitted later) still go
//!   first: priority is respected, not overridden. `max_skips = 0` turns
//!   backfill off (strict order, like `Parallel(∞)`).
//!   No count limit, except an **auto limit** the caller may set
//!   ([`Arbiter::with_auto_limit`]): the engine sets the host's cores for the
//!   CPU device, where a task beyond one per core only time-slices with the
//!   others (measured: 8 CartPole agents all at once on 2 cores took 20.5 s,
//!   two at a time 17–19 s; `docs/benchmarks.md`, "Many agents per box").
//! * **Short tasks beside full slots** ([`Arbiter::select_short`]; `Auto`
//!   with a count limit only, `Sequential` and `Parallel(n)` are taken at
//!   their word): when every place is taken, at most [`MAX_SHORT_BESIDE`]
//!   (1) more task may run, one the caller names as short (the pace's rule,
//!   `pace.rs`). It is the first short candidate in the ordering of the
//!   **highest priority waiting**, and it must fit beside the candidate next
//!   in line: `reserved + head + it ≤ budget`. Such a task delays no task
//!   waiting ahead of it: it takes no place in the count (when a place frees,
//!   the next in line takes it as if the short task were not there) and no
//!   byte the next in line needs; and it starts only when no task of a
//!   higher priority waits. It runs to its end however long it turns out to
//!   be, and while it does no other task starts beside the slots.
//! * **Abandoned tasks** ([`Arbiter::abandon`]: a forced stop gave up on a
//!   plugin that never returned) keep their bytes until released, but not
//!   their place in `Sequential`'s or `Parallel(n)`'s count.
//!
//! # Holds
//!
//! Memory that is not a task's (a model kept resident to answer prediction
//! requests, or a prediction stream's own predictor) is **held** under a
//! [`HoldId`] ([`Arbiter::hold`]). A hold is admitted at once or refused,
//! never queued: only when `reserved + bytes ≤ budget` (so admission never
//! takes the device over its budget, as for tasks) and not while the device
//! is over budget. Held bytes count in [`Arbiter::reserved`] and so against
//! every task's admission; holds take no place in a strategy's number of
//! tasks at once, and a re-measurement of a hold
//! ([`Arbiter::update_hold`]) follows the rule of tasks: it replaces the
//! bytes, and growth past the budget is kept and reported.
//!
//! The arbiter is pure bookkeeping: no I/O, no threads, no clock. The caller
//! serialises calls (one arbiter per device behind the orchestrator's lock),
//! calls [`Arbiter::select`] whenever the queue or the reservations change,
//! starts the tasks it returns, and calls [`Arbiter::release`] when a task
//! ends (or when a queued task is cancelled, to drop its skip count).
//!
//! [`cpu_budget_from_meminfo`] (re-exported from `cpu_budget.rs`, the only
//! I/O) sizes the budget of the `cpu` device from `/proc/meminfo`.

use super::TaskId;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use tli_core::byte_size::format_bytes;
use tli_plugin_api::Device;

pub use super::cpu_budget::{
    cpu_budget_from_meminfo, parse_meminfo_total, MeminfoError, DEFAULT_CPU_BUDGET_FRACTION,
};
pub use short::MAX_SHORT_BESIDE;

#[path = "arbiter_short.rs"]
mod short;

/// How many times a candidate may be passed over by later ones (under
/// [`Strategy::Auto`]) before it blocks everything behind it.
pub const DEFAULT_MAX_SKIPS: u32 = 3;

/// The margin is kept in millionths so that [`Arbiter::with_margin`] is exact
/// integer arithmetic (`0.1` is exactly 100 000 ppm; no `110.00000000000001`).
const PPM: u128 = 1_000_000;

// The strategy is vocabulary the command line parses too: it lives in tli-core.
pub use tli_core::strategy::{Strategy, StrategyParseError, MAX_MARGIN};

/// A device and how many bytes tasks may reserve on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The device (shown to users as `cuda:0`, `cpu`).
    pub device: Device,
    /// The bytes all running tasks together may reserve.
    pub total_bytes: u64,
}

/// A queued task as the arbiter sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The task.
    pub task: TaskId,
    /// Higher first.
    pub priority: i32,
    /// Submission order, lower = older (first among equal priorities).
    pub order: u64,
    /// What it needs reserved: estimate + margin ([`Arbiter::with_margin`]).
    pub bytes: u64,
}

/// A task whose reservation alone exceeds the device's budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "needs {} ({} bytes{}) but the {} budget is {} ({} bytes)",
    format_bytes(*.needed),
    .needed,
    estimate_note(*.estimate, *.margin_ppm),
    .device,
    format_bytes(*.budget),
    .budget
)]
pub struct TooBig {
    /// The reservation asked for (estimate + margin).
    pub needed: u64,
    /// The estimate before the margin, when known.
    pub estimate: Option<u64>,
    /// The margin, in millionths of the estimate.
    pub margin_ppm: u64,
    /// The device.
    pub device: String,
    /// The device's whole budget.
    pub budget: u64,
}

fn estimate_note(estimate: Option<u64>, margin_ppm: u64) -> String {
    let pct = format_percent(margin_ppm);
    match estimate {
        Some(e) => format!(": estimate {} + {pct} margin", format_bytes(e)),
        None => format!(", including the {pct} margin"),
    }
}

fn format_percent(ppm: u64) -> String {
    if ppm.is_multiple_of(10_000) {
        format!("{}%", ppm / 10_000)
    } else {
        format!("{:.1}%", ppm as f64 / 10_000.0)
    }
}

/// What [`Arbiter::update_measured`] did.
#[must_use = "an over-budget device should be logged or acted on"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remeasure {
    /// The task is not running on this arbiter; nothing changed.
    NotRunning,
    /// The reservation changed and the device is within its budget.
    WithinBudget {
        /// The task's reservation before.
        previous: u64,
        /// The task's reservation now (measured + margin).
        now: u64,
    },
    /// The reservation grew past the budget; it is kept (the task runs), and
    /// nothing new starts until the device is back within its budget.
    OverBudget {
        /// The task's reservation before.
        previous: u64,
        /// The task's reservation now (measured + margin).
        now: u64,
        /// How far all reservations together exceed the budget.
        over_by: u64,
    },
}

impl fmt::Display for Remeasure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Remeasure::NotRunning => f.write_str("task is not running"),
            Remeasure::WithinBudget { previous, now } => write!(
                f,
                "reservation {} → {} ({previous} → {now} bytes), within budget",
                format_bytes(previous),
                format_bytes(now)
            ),
            Remeasure::OverBudget {
                previous,
                now,
                over_by,
            } => write!(
                f,
                "reservation {} → {} ({previous} → {now} bytes) takes the device over budget by {} ({over_by} bytes); no new task starts until it is back within",
                format_bytes(previous),
                format_bytes(now),
                format_bytes(over_by)
            ),
        }
    }
}

/// The admission bookkeeping of one device (see the module documentation).
#[derive(Debug, Clone)]
pub struct Arbiter {
    strategy: Strategy,
    budget: Budget,
    margin_ppm: u64,
    max_skips: u32,
    /// Running tasks and their reservations, in start order.
    running: Vec<(TaskId, u64)>,
    /// Sum of `running` reservations (u128: re-measurement may overshoot).
    reserved: u128,
    /// Skip counts of queued tasks passed over at least once.
    skips: HashMap<TaskId, u32>,
    /// Running tasks given up on (a forced stop's deadline passed): their
    /// bytes stay reserved, but they no longer count against a strategy's
    /// number of tasks at once.
    abandoned: Vec<TaskId>,
    /// Running tasks started beside full slots ([`Arbiter::select_short`]):
    /// they take no place in the count either.
    beside: Vec<TaskId>,
    /// The most tasks `Auto` runs at once (`None`: as many as fit).
    auto_limit: Option<usize>,
    /// Memory held for what is not a task (see the module docs), in order.
    holds: Vec<(HoldId, u64)>,
}

/// A hold's key (see the module docs): the caller numbers its holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HoldId(pub u64);

/// A hold that does not fit now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "needs {} on {} but only {} of its {} budget is free now ({} reserved by training tasks \
     and resident models); unload a model or wait for tasks to finish",
    format_bytes(*.needed),
    .device,
    format_bytes(*.free),
    format_bytes(*.budget),
    format_bytes(*.reserved)
)]
pub struct NoRoom {
    pub needed: u64,
    pub free: u64,
    pub reserved: u64,
    pub budget: u64,
    pub device: String,
}

impl Arbiter {
    /// An arbiter with nothing running. `margin_fraction` is the safety margin
    /// added to estimates and measurements (`0.1` = 10 %); negative or
    /// non-finite values count as 0, it is kept to a millionth and capped at
    /// [`MAX_MARGIN`] (1,000 %, the range `--margin` accepts). `max_skips` starts at [`DEFAULT_MAX_SKIPS`].
    pub fn new(strategy: Strategy, budget: Budget, margin_fraction: f64) -> Self {
        let margin = if margin_fraction.is_finite() {
            margin_fraction.clamp(0.0, MAX_MARGIN)
        } else {
            0.0
        };
        Arbiter {
            strategy,
            budget,
            margin_ppm: (margin * PPM as f64).round() as u64,
            max_skips: DEFAULT_MAX_SKIPS,
            running: Vec::new(),
            reserved: 0,
            skips: HashMap::new(),
            abandoned: Vec::new(),
            beside: Vec::new(),
            auto_limit: None,
            holds: Vec::new(),
        }
    }

    /// The same arbiter with `Auto` running at most `limit` tasks at once
    /// (at least 1); other strategies keep their own count.
    pub fn with_auto_limit(mut self, limit: usize) -> Self {
        self.auto_limit = Some(limit.max(1));
        self
    }

    /// The most tasks this arbiter runs at once (`None`: as many as fit).
    pub fn max_running(&self) -> Option<usize> {
        match self.strategy {
            Strategy::Auto => self.auto_limit,
            other => other.max_running(),
        }
    }

    /// The same arbiter with another `max_skips` (see the module docs).
    pub fn with_max_skips(mut self, max_skips: u32) -> Self {
        self.max_skips = max_skips;
        self
    }

    /// How often a candidate may be passed over before it blocks.
    pub fn max_skips(&self) -> u32 {
        self.max_skips
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The device and its budget.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The margin as a fraction (`0.1` = 10 %), after clamping.
    pub fn margin_fraction(&self) -> f64 {
        self.margin_ppm as f64 / PPM as f64
    }

    /// `estimate × (1 + margin)`, rounded up (saturating at `u64::MAX`).
    pub fn with_margin(&self, estimate: u64) -> u64 {
        let extra = (estimate as u128 * self.margin_ppm as u128).div_ceil(PPM);
        u64::try_from(estimate as u128 + extra).unwrap_or(u64::MAX)
    }

    /// Refuses a reservation (estimate + margin) that exceeds the whole budget
    /// even with nothing else running.
    pub fn check_fits_alone(&self, bytes: u64) -> Result<(), TooBig> {
        if bytes <= self.budget.total_bytes {
            Ok(())
        } else {
            Err(self.too_big(bytes, None))
        }
    }

    /// [`check_fits_alone`](Self::check_fits_alone) from the bare estimate:
    /// returns the reservation (`with_margin(estimate)`) when it fits, and an
    /// error naming the estimate and the margin when it does not.
    pub fn check_estimate(&self, estimate: u64) -> Result<u64, TooBig> {
        let bytes = self.with_margin(estimate);
        if bytes <= self.budget.total_bytes {
            Ok(bytes)
        } else {
            Err(self.too_big(bytes, Some(estimate)))
        }
    }

    fn too_big(&self, needed: u64, estimate: Option<u64>) -> TooBig {
        TooBig {
            needed,
            estimate,
            margin_ppm: self.margin_ppm,
            device: self.budget.device.to_string(),
            budget: self.budget.total_bytes,
        }
    }

    /// Bytes reserved by running tasks (may exceed the budget only after
    /// [`update_measured`](Self::update_measured) reported
    /// [`Remeasure::OverBudget`]).
    pub fn reserved(&self) -> u64 {
        u64::try_from(self.reserved).unwrap_or(u64::MAX)
    }

    /// Budget minus reservations (0 when over budget).
    pub fn free(&self) -> u64 {
        u64::try_from((self.budget.total_bytes as u128).saturating_sub(self.reserved)).unwrap_or(0)
    }

    /// How far reservations exceed the budget (0 when within it).
    pub fn over_budget_by(&self) -> u64 {
        u64::try_from(
            self.reserved
                .saturating_sub(self.budget.total_bytes as u128),
        )
        .unwrap_or(u64::MAX)
    }

    /// Running tasks and their reservations, in start order.
    pub fn running(&self) -> Vec<(TaskId, u64)> {
        self.running.clone()
    }

    /// How many tasks are running.
    pub fn running_count(&self) -> usize {
        self.running.len()
    }

    /// Whether `task` is running (holds a reservation).
    pub fn is_running(&self, task: TaskId) -> bool {
        self.running.iter().any(|&(t, _)| t == task)
    }

    /// How many times the queued `task` has been passed over so far.
    pub fn skip_count(&self, task: TaskId) -> u32 {
        self.skips.get(&task).copied().unwrap_or(0)
    }

    /// Decides which of `queue` start now, reserves their bytes and returns
    /// them in start order; the caller must then start exactly these. Tasks
    /// already running or whose bytes exceed the whole budget are ignored.
    /// Starts nothing while the device is over budget.
    pub fn select(&mut self, queue: &[Candidate]) -> Vec<TaskId> {
        let total = self.budget.total_bytes as u128;
        if self.reserved > total || queue.is_empty() {
            return Vec::new();
        }
        let limit = self.max_running().map(|n| n + self.uncounted());
        if limit.is_some_and(|n| self.running.len() >= n) {
            return Vec::new();
        }

        let mut ordered: Vec<&Candidate> = queue.iter().collect();
        ordered.sort_unstable_by(|a, b| admission_order(a, b));

        // Sorted ids of running tasks: a queue of thousands meets tens running.
        let mut running_ids: Vec<TaskId> = self.running.iter().map(|&(t, _)| t).collect();
        running_ids.sort_unstable();
        let backfill = self.strategy == Strategy::Auto;
        let mut started = Vec::new();
        // Candidates passed over so far in this call (Auto only).
        let mut passed: Vec<TaskId> = Vec::new();
        let mut last_started_at: Option<usize> = None;
        for &c in &ordered {
            if limit.is_some_and(|n| self.running.len() >= n) {
                break;
            }
            if c.bytes as u128 > total {
                continue;
            }
            let Err(slot) = running_ids.binary_search(&c.task) else {
                continue; // already running (or listed twice)
            };
            if self.reserved + c.bytes as u128 <= total {
                running_ids.insert(slot, c.task);
                self.running.push((c.task, c.bytes));
                self.reserved += c.bytes as u128;
                self.skips.remove(&c.task);
                started.push(c.task);
                last_started_at = Some(passed.len());
                continue;
            }
            // It does not fit.
            if !backfill || self.skip_count(c.task) >= self.max_skips {
                break; // strict order, or it is the blocking head
            }
            passed.push(c.task);
        }
        // Passed over while a later candidate started: one more skip each
        // (once, even if the caller listed a task twice).
        if let Some(n) = last_started_at {
            passed.truncate(n);
            passed.sort_unstable();
            passed.dedup();
            for task in passed {
                *self.skips.entry(task).or_insert(0) += 1;
            }
        }
        started
    }

    /// Frees `task`'s reservation (it ended) and forgets its skip count (so
    /// call it for a cancelled queued task too). Unknown tasks: no-op.
    pub fn release(&mut self, task: TaskId) {
        if let Some(i) = self.running.iter().position(|&(t, _)| t == task) {
            let (_, bytes) = self.running.remove(i);
            self.reserved -= bytes as u128;
        }
        self.skips.remove(&task);
        self.abandoned.retain(|&t| t != task);
        self.beside.retain(|&t| t != task);
    }

    /// Running tasks that take no place in the strategy's count: abandoned,
    /// or started beside full slots.
    fn uncounted(&self) -> usize {
        self.running
            .iter()
            .filter(|(t, _)| self.abandoned.contains(t) || self.beside.contains(t))
            .count()
    }

    /// A running task was given up on (its thread may never end): it keeps
    /// its bytes (its memory is still held) until [`release`](Self::release),
    /// but no longer takes one of the strategy's places, so a stuck task
    /// cannot stop `sequential` or `parallel:N` forever.
    pub fn abandon(&mut self, task: TaskId) {
        if self.is_running(task) && !self.abandoned.contains(&task) {
            self.abandoned.push(task);
        }
    }

    /// The most a task may measure: above it, its measurement plus the
    /// margin exceeds the whole budget, so it could not run even alone.
    pub fn memory_cap(&self) -> u64 {
        // `with_margin` is monotone: the largest `m` with with_margin(m) ≤ budget.
        let (mut low, mut high) = (0u64, self.budget.total_bytes);
        while low < high {
            let mid = low + (high - low).div_ceil(2);
            if self.with_margin(mid) <= self.budget.total_bytes {
                low = mid;
            } else {
                high = mid - 1;
            }
        }
        low
    }

    /// Holds `bytes` (already with the margin) under `id` if they fit now
    /// (see the module docs); holding an id again replaces nothing and
    /// refuses.
    pub fn hold(&mut self, id: HoldId, bytes: u64) -> Result<(), NoRoom> {
        let total = self.budget.total_bytes as u128;
        let exists = self.holds.iter().any(|&(h, _)| h == id);
        if exists || self.reserved + bytes as u128 > total {
            return Err(NoRoom {
                needed: bytes,
                free: self.free(),
                reserved: self.reserved(),
                budget: self.budget.total_bytes,
                device: self.budget.device.to_string(),
            });
        }
        self.holds.push((id, bytes));
        self.reserved += bytes as u128;
        Ok(())
    }

    /// Replaces a hold's bytes by `measured_bytes` plus the margin (as
    /// [`update_measured`](Self::update_measured) does for a task).
    pub fn update_hold(&mut self, id: HoldId, measured_bytes: u64) -> Remeasure {
        let now = self.with_margin(measured_bytes);
        match self.holds.iter().position(|(h, _)| *h == id) {
            Some(i) => {
                let previous = std::mem::replace(&mut self.holds[i].1, now);
                self.replaced(previous, now)
            }
            None => Remeasure::NotRunning,
        }
    }

    /// Frees a hold; unknown ids: no-op.
    pub fn release_hold(&mut self, id: HoldId) {
        if let Some(i) = self.holds.iter().position(|&(h, _)| h == id) {
            let (_, bytes) = self.holds.remove(i);
            self.reserved -= bytes as u128;
        }
    }

    /// The holds and their bytes, in the order they were taken.
    pub fn holds(&self) -> Vec<(HoldId, u64)> {
        self.holds.clone()
    }

    /// Replaces a running task's reservation by `measured_bytes` plus the
    /// margin. A growth past the budget is kept and reported; `select` then
    /// starts nothing until releases bring the device back within budget.
    pub fn update_measured(&mut self, task: TaskId, measured_bytes: u64) -> Remeasure {
        let now = self.with_margin(measured_bytes);
        match self.running.iter().position(|(t, _)| *t == task) {
            Some(i) => {
                let previous = std::mem::replace(&mut self.running[i].1, now);
                self.replaced(previous, now)
            }
            None => Remeasure::NotRunning,
        }
    }

    /// Books a reservation's change from `previous` to `now` bytes and says
    /// whether the device is still within its budget.
    fn replaced(&mut self, previous: u64, now: u64) -> Remeasure {
        self.reserved = self.reserved - previous as u128 + now as u128;
        match self.over_budget_by() {
            0 => Remeasure::WithinBudget { previous, now },
            over_by => Remeasure::OverBudget {
                previous,
                now,
                over_by,
            },
        }
    }
}

/// The order candidates are considered in: priority (higher first), then
/// submission order (older first), then task id.
fn admission_order(a: &Candidate, b: &Candidate) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(a.order.cmp(&b.order))
        .then(a.task.cmp(&b.task))
}

#[cfg(test)]
#[path = "arbiter_tests.rs"]
mod tests;
