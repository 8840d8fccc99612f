//! The learning-rate schedules the forecasting plugins share: an optional
//! linear warm-up from 0, then a constant rate or a cosine decay to 10% of
//! the base rate over the rest of the task's step budget.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    Constant,
    /// Decays to 10% of the base rate over the task's step budget.
    Cosine,
}

/// The learning rate of step `step` (0-based) of `max_steps`.
pub fn learning_rate_at(
    base: f64,
    schedule: LrSchedule,
    warmup_steps: u64,
    step: u64,
    max_steps: u64,
) -> f64 {
    if step < warmup_steps {
        return base * (step + 1) as f64 / warmup_steps as f64;
    }
    match schedule {
        LrSchedule::Constant => base,
        LrSchedule::Cosine => {
            let span = max_steps.saturating_sub(warmup_steps).max(1) as f64;
            let progress = ((step - warmup_steps) as f64 / span).min(1.0);
            let floor = 0.1 * base;
            floor + (base - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_up_then_cosine_to_a_tenth() {
        let lr = |step| learning_rate_at(1.0, LrSchedule::Cosine, 10, step, 110);
        assert_eq!(lr(0), 0.1);
        assert_eq!(lr(9), 1.0);
        assert_eq!(lr(10), 1.0);
        assert!((lr(60) - 0.55).abs() < 1e-12);
        assert!((lr(110) - 0.1).abs() < 1e-12);
        assert!((lr(500) - 0.1).abs() < 1e-12);
        assert_eq!(learning_rate_at(0.5, LrSchedule::Constant, 0, 7, 10), 0.5);
        // A zero budget does not divide by zero.
        assert_eq!(learning_rate_at(1.0, LrSchedule::Cosine, 0, 0, 0), 1.0);
    }
}
