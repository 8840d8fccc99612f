//! The rule for checkpoint writes that fail — a full disk, a file-size limit
//! (`ulimit -f`), a state directory that became read-only. A failed write
//! never touches the checkpoints already written ([`write_atomic`](super::write_atomic)
//! removes its temporary directory), so the last good one stays loadable.
//!
//! - A **scheduled** checkpoint that fails costs a warning in the task's log;
//!   training goes on and the next scheduled checkpoint tries again. After
//!   [`SCHEDULED_FAILURES_ALLOWED`] failures in a row the task fails.
//! - The **final** checkpoint failing fails the task (it cannot complete
//!   without its weights on disk).
//! - A checkpoint for a **stop**, a **host shutdown** or a **preemption** that
//!   fails leaves the task cancelled or interrupted as asked, with a warning:
//!   it resumes from the last good checkpoint.
//!
//! Every message says which checkpoint failed and why, which one is kept,
//! and what to do (free space, then `tli train resume` with the task's job).

/// Scheduled checkpoint writes that may fail in a row before the task fails.
pub const SCHEDULED_FAILURES_ALLOWED: u32 = 3;

/// Consecutive failed writes of one task.
#[derive(Debug, Default)]
pub struct FailedWrites {
    in_a_row: u32,
}

/// What a runner does after a failed checkpoint write.
#[derive(Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Log this warning and carry on.
    Continue(String),
    /// Stop the task with this error.
    Fail(String),
}

impl FailedWrites {
    pub fn succeeded(&mut self) {
        self.in_a_row = 0;
    }

    /// Failures in a row so far.
    pub fn in_a_row(&self) -> u32 {
        self.in_a_row
    }

    /// Counts a failure. `what` says which write failed and why (e.g.
    /// "scheduled checkpoint at step 300 failed: … No space left on device");
    /// `last_good` is the step of the newest checkpoint on disk (0: none);
    /// `job` is named in the advice (`tli train resume JOB`).
    pub fn failed(
        &mut self,
        scheduled: bool,
        what: &str,
        last_good: u64,
        job: impl std::fmt::Display,
    ) -> AfterFailure {
        self.in_a_row += 1;
        let kept = kept(last_good);
        if scheduled && self.in_a_row < SCHEDULED_FAILURES_ALLOWED {
            return AfterFailure::Continue(format!(
                "{what}; {kept}; training goes on and the next scheduled checkpoint tries again \
                 ({} of {SCHEDULED_FAILURES_ALLOWED} failures in a row allowed)",
                self.in_a_row
            ));
        }
        let in_a_row = if scheduled {
            format!("; {} checkpoint writes in a row failed", self.in_a_row)
        } else {
            String::new()
        };
        AfterFailure::Fail(format!(
            "{what}{in_a_row}; {kept}: free space where the checkpoints are written (or make the \
             state directory writable), then `tli train resume {job}` continues from it"
        ))
    }
}

/// Which checkpoint a restart or resume would load.
pub fn kept(last_good: u64) -> String {
    if last_good > 0 {
        format!("the last good checkpoint (step {last_good}) is kept")
    } else {
        "there is no earlier checkpoint, so a resume starts from step 0".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduled_writes_may_fail_a_few_times_in_a_row() {
        let mut writes = FailedWrites::default();
        for n in 1..SCHEDULED_FAILURES_ALLOWED {
            match writes.failed(
                true,
                "scheduled checkpoint at step 9 failed: disk full",
                5,
                7,
            ) {
                AfterFailure::Continue(warning) => {
                    assert!(warning.contains("(step 5) is kept"), "{warning}");
                    assert!(warning.contains(&format!("{n} of 3")), "{warning}");
                }
                other => panic!("failure {n}: {other:?}"),
            }
        }
        let AfterFailure::Fail(error) = writes.failed(true, "x failed: disk full", 5, 7) else {
            panic!("the third failure in a row must fail the task");
        };
        assert!(
            error.contains("3 checkpoint writes in a row failed"),
            "{error}"
        );
        assert!(error.contains("`tli train resume 7`"), "{error}");
    }

    #[test]
    fn a_success_resets_the_count_and_a_final_write_may_not_fail() {
        let mut writes = FailedWrites::default();
        assert!(matches!(
            writes.failed(true, "a", 0, 7),
            AfterFailure::Continue(_)
        ));
        assert!(matches!(
            writes.failed(true, "b", 0, 7),
            AfterFailure::Continue(_)
        ));
        writes.succeeded();
        assert_eq!(writes.in_a_row(), 0);
        assert!(matches!(
            writes.failed(true, "c", 0, 7),
            AfterFailure::Continue(_)
        ));
        let AfterFailure::Fail(error) = writes.failed(false, "final checkpoint failed", 0, 7)
        else {
            panic!("a final checkpoint that fails fails the task");
        };
        assert!(error.contains("resume starts from step 0"), "{error}");
    }
}
