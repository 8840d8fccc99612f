//! When a trainer validates during training.
//!
//! The contract every plugin follows: a metric named `valid_*` in a
//! `StepReport` measures the model as it is at the end of that `step(n)`
//! call, and only the call that measured it reports it (it is never repeated
//! by later calls). A call validates after its training steps when it
//! crossed a multiple of the plugin's cadence ([`validation_due`] over the
//! trainer's step counter, the one `total_steps()` reports, before and after
//! the call) and was not cancelled early. Validation draws from no training
//! RNG stream and moves no data cursor, so training with and without it is
//! bit-identical.

/// Whether a `step` call that moved the trainer's step counter from `before`
/// to `after` crossed a multiple of `every` (`every = 0`: never).
///
/// The host ends its slices at multiples of the cadence, so validation lands
/// exactly on them; a slice that crosses several multiples validates once.
pub fn validation_due(before: u64, after: u64, every: u64) -> bool {
    every > 0 && after / every > before / every
}

#[cfg(test)]
mod tests {
    use super::validation_due;

    #[test]
    fn due_exactly_when_a_multiple_is_crossed() {
        // Never with a zero cadence.
        assert!(!validation_due(0, 1_000, 0));
        // Ending on a multiple counts; starting on one does not.
        assert!(validation_due(0, 10, 10));
        assert!(!validation_due(10, 19, 10));
        assert!(validation_due(10, 20, 10));
        // Crossing without landing on it, and crossing several at once.
        assert!(validation_due(7, 13, 10));
        assert!(validation_due(5, 45, 10));
        // No steps, or steps short of the next multiple.
        assert!(!validation_due(10, 10, 10));
        assert!(!validation_due(0, 9, 10));
        assert!(!validation_due(11, 19, 10));
        // Slices of the cadence validate every time.
        let calls: Vec<bool> = (0..5u64)
            .map(|i| validation_due(i * 100, (i + 1) * 100, 100))
            .collect();
        assert_eq!(calls, [true; 5]);
        // Large counters do not overflow.
        assert!(validation_due(u64::MAX - 1, u64::MAX, u64::MAX));
    }
}
