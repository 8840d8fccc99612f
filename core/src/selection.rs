//! Which of a task's models to keep and when to stop it: `keep_best` and
//! `early_stopping`, decided on the validation metrics its plugin reports
//! while it trains.
//!
//! The decisions are pure: a [`Tracker`] is fed each validation measurement
//! (step, value) in step order and answers whether it is a new best and
//! whether the task should stop. Its state is saved with every checkpoint
//! and restored with it, so a task resumed after a crash makes the same
//! decisions as one that never stopped.
//!
//! Invariants:
//! * A value improves on the best only by more than `min_delta` in the
//!   metric's direction; the first finite value always does. A non-finite
//!   value never improves and counts as a measurement without improvement.
//! * A task stops after `patience` measurements in a row without improvement
//!   (Keras' and Lightning's rule); it never stops before its first
//!   measurement.
//! * `keep_best.k` bounds the best checkpoints kept: a value enters when
//!   fewer than `k` are kept or it beats the worst kept one (ties keep the
//!   earlier checkpoint).

use serde::{Deserialize, Serialize};

/// Which way a metric gets better.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Lower is better (losses, errors, drawdowns).
    Min,
    /// Higher is better (returns, Sharpe ratios, hit rates).
    Max,
}

impl Mode {
    /// The direction of a metric by its name: losses, errors, risks,
    /// drawdowns, costs and turnover are better lower; everything else
    /// higher. A per-asset suffix (`@ES`) is ignored.
    pub fn for_metric(metric: &str) -> Mode {
        if lower_is_better(metric) {
            Mode::Min
        } else {
            Mode::Max
        }
    }

    /// Whether `a` is better than `b` by more than `delta`.
    pub fn improves(self, a: f64, b: f64, delta: f64) -> bool {
        match self {
            Mode::Min => a < b - delta,
            Mode::Max => a > b + delta,
        }
    }

    /// `a` before `b` when `a` is better (total order; NaN last for `Min`).
    pub fn order(self, a: f64, b: f64) -> std::cmp::Ordering {
        match self {
            Mode::Min => a.total_cmp(&b),
            Mode::Max => b.total_cmp(&a),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Min => "min",
            Mode::Max => "max",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = SelectionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "min" => Ok(Mode::Min),
            "max" => Ok(Mode::Max),
            other => Err(SelectionError::Mode(other.chars().take(40).collect())),
        }
    }
}

/// Whether a lower value of `metric` is better (see [`Mode::for_metric`]).
pub fn lower_is_better(metric: &str) -> bool {
    let name = metric.split('@').next().unwrap_or(metric);
    [
        "loss", "mse", "mae", "qrisk", "pinball", "drawdown", "costs", "turnover",
    ]
    .iter()
    .any(|word| name.contains(word))
}

/// Keep the `k` best checkpoints by `metric`, apart from the newest ones
/// that retention keeps; the task's model is the best of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeepBest {
    pub metric: String,
    /// Default: by the metric's name ([`Mode::for_metric`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Default 1.
    #[serde(default = "one")]
    pub k: u32,
}

/// Stop a task when `metric` has not improved by more than `min_delta` in
/// `patience` validation measurements in a row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyStopping {
    pub metric: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    pub patience: u32,
    #[serde(default)]
    pub min_delta: f64,
}

fn one() -> u32 {
    1
}

/// Most best checkpoints a task may keep.
pub const MAX_KEEP_BEST: u32 = 100;
/// Longest patience (measurements).
pub const MAX_PATIENCE: u32 = 1_000_000;

/// Why a selection was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectionError {
    #[error("{field}: give the name of a validation metric the plugin reports (e.g. valid_loss)")]
    NoMetric { field: &'static str },
    #[error(
        "{field}: {metric:?} is not a validation metric; keep and stop by a valid_* metric \
         (test metrics must not choose the model)"
    )]
    NotValidation { field: &'static str, metric: String },
    #[error("keep_best.k: {0} is outside 1..={MAX_KEEP_BEST}")]
    K(u32),
    #[error("early_stopping.patience: {0} is outside 1..={MAX_PATIENCE}")]
    Patience(u32),
    #[error("early_stopping.min_delta: {0} must be a finite number ≥ 0")]
    MinDelta(f64),
    #[error("mode {0:?}: use \"min\" (lower is better) or \"max\"")]
    Mode(String),
}

/// A model's `keep_best` and `early_stopping` (either, both or neither).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_best: Option<KeepBest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stopping: Option<EarlyStopping>,
}

fn check_metric(field: &'static str, metric: &str) -> Result<(), SelectionError> {
    if metric.trim().is_empty() {
        return Err(SelectionError::NoMetric { field });
    }
    if !metric.starts_with("valid_") {
        return Err(SelectionError::NotValidation {
            field,
            metric: metric.chars().take(80).collect(),
        });
    }
    Ok(())
}

impl Selection {
    pub fn is_empty(&self) -> bool {
        self.keep_best.is_none() && self.early_stopping.is_none()
    }

    pub fn check(&self) -> Result<(), SelectionError> {
        if let Some(k) = &self.keep_best {
            check_metric("keep_best.metric", &k.metric)?;
            if k.k == 0 || k.k > MAX_KEEP_BEST {
                return Err(SelectionError::K(k.k));
            }
        }
        if let Some(e) = &self.early_stopping {
            check_metric("early_stopping.metric", &e.metric)?;
            if e.patience == 0 || e.patience > MAX_PATIENCE {
                return Err(SelectionError::Patience(e.patience));
            }
            if !e.min_delta.is_finite() || e.min_delta < 0.0 {
                return Err(SelectionError::MinDelta(e.min_delta));
            }
        }
        Ok(())
    }

    /// The best checkpoints to keep: `keep_best`, else (early stopping
    /// alone) the one best by the stopping metric, so a stopped task's
    /// model is its best.
    pub fn best(&self) -> Option<BestRule> {
        if let Some(k) = &self.keep_best {
            return Some(BestRule {
                metric: k.metric.clone(),
                mode: k.mode.unwrap_or_else(|| Mode::for_metric(&k.metric)),
                k: k.k.max(1),
            });
        }
        self.early_stopping.as_ref().map(|e| BestRule {
            metric: e.metric.clone(),
            mode: e.mode.unwrap_or_else(|| Mode::for_metric(&e.metric)),
            k: 1,
        })
    }
}

/// The resolved `keep_best` rule.
#[derive(Clone, Debug, PartialEq)]
pub struct BestRule {
    pub metric: String,
    pub mode: Mode,
    pub k: u32,
}

impl BestRule {
    /// Whether `value` enters the kept set `kept` (values of the checkpoints
    /// kept now).
    pub fn admits(&self, kept: &[f64], value: f64) -> bool {
        if !value.is_finite() {
            return false;
        }
        if kept.len() < self.k as usize {
            return true;
        }
        kept.iter()
            .copied()
            .reduce(|a, b| if self.mode.improves(a, b, 0.0) { b } else { a })
            .is_none_or(|worst| self.mode.improves(value, worst, 0.0))
    }

    /// `kept` (id, value) ordered best first; ties keep the earlier id first.
    pub fn rank<T: Copy + Ord>(&self, kept: &mut [(T, f64)]) {
        kept.sort_by(|a, b| self.mode.order(a.1, b.1).then(a.0.cmp(&b.0)));
    }
}

/// What a measurement decided.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Decision {
    /// Early stopping: the task should stop now.
    pub stop: bool,
}

/// The early-stopping state: the best value so far, its step, and the
/// measurements since. Saved with each checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tracker {
    pub best: Option<f64>,
    pub best_step: u64,
    /// Measurements in a row without improvement.
    pub since_best: u32,
    /// Measurements seen.
    pub measurements: u64,
}

impl Tracker {
    /// Feeds the early-stopping metric's value at `step`.
    pub fn observe(&mut self, rule: &EarlyStopping, step: u64, value: f64) -> Decision {
        let mode = rule.mode.unwrap_or_else(|| Mode::for_metric(&rule.metric));
        self.measurements += 1;
        let improved = value.is_finite()
            && self
                .best
                .is_none_or(|best| mode.improves(value, best, rule.min_delta));
        if improved {
            self.best = Some(value);
            self.best_step = step;
            self.since_best = 0;
        } else {
            self.since_best = self.since_best.saturating_add(1);
        }
        Decision {
            stop: self.since_best >= rule.patience,
        }
    }

    /// Why the task stopped, for its record.
    pub fn stop_reason(&self, rule: &EarlyStopping, step: u64) -> String {
        let best = self
            .best
            .map(|b| format!("best {b:.6} at step {}", self.best_step))
            .unwrap_or_else(|| "no finite value".into());
        format!(
            "stopped early at step {step}: {} did not improve by more than {} in {} \
             validation(s) ({best})",
            rule.metric, rule.min_delta, rule.patience
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stopping(patience: u32, min_delta: f64) -> EarlyStopping {
        EarlyStopping {
            metric: "valid_loss".into(),
            mode: None,
            patience,
            min_delta,
        }
    }

    #[test]
    fn a_task_stops_after_patience_measurements_without_improvement() {
        let rule = stopping(2, 0.0);
        let mut t = Tracker::default();
        let curve = [1.0, 0.8, 0.9, 0.7, 0.75, 0.71, 0.6];
        let stops: Vec<bool> = curve
            .iter()
            .enumerate()
            .map(|(i, &v)| t.observe(&rule, (i as u64 + 1) * 10, v).stop)
            .collect();
        // 0.75 and 0.71 do not beat 0.7: the second of them stops it.
        assert_eq!(stops, [false, false, false, false, false, true, false]);
        assert_eq!(t.best, Some(0.6));
        assert_eq!((t.best_step, t.since_best), (70, 0));
    }

    #[test]
    fn min_delta_and_non_finite_values_do_not_improve() {
        let rule = stopping(3, 0.05);
        let mut t = Tracker::default();
        assert!(!t.observe(&rule, 1, f64::NAN).stop);
        assert_eq!(t.best, None);
        t.observe(&rule, 2, 1.0);
        t.observe(&rule, 3, 0.96); // by less than min_delta
        t.observe(&rule, 4, f64::INFINITY);
        assert_eq!((t.best, t.since_best), (Some(1.0), 2));
        assert!(t.observe(&rule, 5, 0.99).stop);
    }

    #[test]
    fn a_max_metric_improves_upwards() {
        let rule = EarlyStopping {
            metric: "valid_return_mean".into(),
            mode: None,
            patience: 1,
            min_delta: 0.0,
        };
        let mut t = Tracker::default();
        t.observe(&rule, 1, 100.0);
        assert!(!t.observe(&rule, 2, 200.0).stop);
        assert!(t.observe(&rule, 3, 150.0).stop);
        assert_eq!(t.best_step, 2);
    }

    #[test]
    fn keep_best_admits_values_that_beat_the_worst_kept() {
        let rule = BestRule {
            metric: "valid_loss".into(),
            mode: Mode::Min,
            k: 2,
        };
        assert!(rule.admits(&[], 5.0));
        assert!(rule.admits(&[1.0], 5.0));
        assert!(rule.admits(&[1.0, 3.0], 2.0));
        assert!(!rule.admits(&[1.0, 3.0], 3.0), "a tie keeps the earlier");
        assert!(!rule.admits(&[], f64::NAN));
        let mut kept = vec![(1, 3.0), (2, 1.0), (3, 1.0), (4, 2.0)];
        rule.rank(&mut kept);
        assert_eq!(kept, [(2, 1.0), (3, 1.0), (4, 2.0), (1, 3.0)]);
        let max = BestRule {
            mode: Mode::Max,
            ..rule
        };
        assert!(max.admits(&[1.0, 3.0], 2.0));
        assert!(!max.admits(&[2.0, 3.0], 1.0));
    }

    #[test]
    fn selections_are_checked_and_early_stopping_alone_keeps_one_best() {
        let mut s = Selection {
            keep_best: None,
            early_stopping: Some(stopping(5, 0.0)),
        };
        s.check().unwrap();
        let best = s.best().unwrap();
        assert_eq!(
            (best.metric.as_str(), best.mode, best.k),
            ("valid_loss", Mode::Min, 1)
        );
        s.early_stopping.as_mut().unwrap().patience = 0;
        assert_eq!(s.check(), Err(SelectionError::Patience(0)));
        s.early_stopping = Some(EarlyStopping {
            metric: "test_loss".into(),
            ..stopping(3, 0.0)
        });
        assert!(s.check().unwrap_err().to_string().contains("test_loss"));
        s.early_stopping = Some(stopping(3, -1.0));
        assert_eq!(s.check(), Err(SelectionError::MinDelta(-1.0)));
        s.early_stopping = None;
        s.keep_best = Some(KeepBest {
            metric: "valid_sharpe".into(),
            mode: None,
            k: 0,
        });
        assert_eq!(s.check(), Err(SelectionError::K(0)));
        assert_eq!(Mode::for_metric("valid_sharpe@ES"), Mode::Max);
        assert_eq!(Mode::for_metric("valid_qrisk_p50"), Mode::Min);
    }
}
