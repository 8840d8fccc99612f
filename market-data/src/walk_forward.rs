//! Walk-forward (rolling-origin) evaluation: a bar file's usable rows cut
//! into folds, each a training window followed by an out-of-sample window,
//! the out-of-sample windows consecutive and never overlapping, so that
//! their predictions concatenate into one out-of-sample span (sklearn's
//! `TimeSeriesSplit`, Darts' `historical_forecasts`).
//!
//! A fold is given as dates ([`FoldDates`]): a cut of the file (its last
//! bar is the last out-of-sample row's target bar; a sliding window also
//! cuts the start) and the split dates of the feature pipeline, so that
//! each fold's dataset is built exactly as any dated split is (the
//! normalization fitted on the fold's own training rows, the embargo
//! before each split). Fold `k` of `F` with `T` out-of-sample rows,
//! `m` usable rows and embargo `E`:
//!
//! ```text
//! test        = rows [m − (F − k)·T, m − (F − k − 1)·T)   (or from dates)
//! validation  = the last valid_fraction of the rows before test − E
//! train       = from the first row (expanding) or the last train_bars rows
//!               (sliding) before validation − E
//! ```

use crate::features::FeatureConfig;
use crate::table::BarTable;
use crate::timefmt::{self, UtcTime};
use serde::{Deserialize, Serialize};

/// Most folds a walk-forward may have.
pub const MAX_FOLDS: usize = 50;

/// How to cut the folds (a job spec's `"walk_forward"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalkForward {
    /// Out-of-sample windows, oldest first (2 to [`MAX_FOLDS`]); with
    /// `test_starts`, their count (or 0).
    #[serde(default)]
    pub folds: usize,
    /// The out-of-sample windows by date instead of by count: fold `k`'s
    /// starts at the first usable bar at or after `test_starts[k]` and ends
    /// before the next one's (the last at the last usable bar).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_starts: Vec<UtcTime>,
    /// Usable rows per out-of-sample window; default: the last half of the
    /// rows shared equally by the folds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_bars: Option<usize>,
    /// A sliding training window of this many rows; default: expanding (every
    /// row before the fold's validation split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_bars: Option<usize>,
    /// Each asset's folds, filled when the job is submitted (a stored job
    /// plans the same tasks after a restart); empty in a spec a user writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<Vec<FoldDates>>,
}

/// One fold of one asset, as dates (UTC ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoldDates {
    /// First bar of the cut (a sliding window), else `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<UtcTime>,
    /// Last bar of the cut.
    pub end: UtcTime,
    pub valid_start: UtcTime,
    pub test_start: UtcTime,
}

impl WalkForward {
    /// The number of folds: `folds`, or the number of `test_starts`.
    pub fn fold_count(&self) -> usize {
        match self.test_starts.len() {
            0 => self.folds,
            n => n,
        }
    }

    /// The settings are in range (the plan is checked when it is made).
    pub fn check(&self) -> Result<(), String> {
        let f = self.fold_count();
        if !(2..=MAX_FOLDS).contains(&f) {
            return Err(format!("folds {f} must be 2 to {MAX_FOLDS}"));
        }
        if !self.test_starts.is_empty() {
            if self.folds != 0 && self.folds != self.test_starts.len() {
                return Err(format!(
                    "folds {} but {} test_starts; give one of them",
                    self.folds,
                    self.test_starts.len()
                ));
            }
            if self.test_bars.is_some() {
                return Err("test_starts and test_bars both size the windows; give one".into());
            }
            if self.test_starts.windows(2).any(|w| w[0] >= w[1]) {
                return Err("test_starts must be in increasing order".into());
            }
        }
        if self.test_bars == Some(0) {
            return Err("test_bars must be at least 1".into());
        }
        if self.train_bars.is_some_and(|t| t < 20) {
            return Err("train_bars must be at least 20 (10 training rows and validation)".into());
        }
        Ok(())
    }

    /// The folds of `table`'s bars under `config` (whose own split dates
    /// are replaced by each fold's), oldest first.
    pub fn folds(
        &self,
        table: &BarTable,
        config: &FeatureConfig,
    ) -> Result<Vec<FoldDates>, String> {
        self.check()?;
        let n = table.len();
        let lookback = config.lookback();
        let horizon = config.max_target_horizon();
        let embargo = config.embargo.unwrap_or(horizon);
        let m = n.saturating_sub(lookback + horizon);
        // Usable row r is bar lookback + r.
        let bar = |r: usize| table.ts[lookback + r];
        let f = self.fold_count();
        let date = |r: usize| timefmt::format(bar(r));
        // Each fold's out-of-sample rows [lo, hi).
        let windows: Vec<(usize, usize)> = if self.test_starts.is_empty() {
            let test_bars = self.test_bars.unwrap_or(m / 2 / f);
            let held = test_bars.saturating_mul(f);
            if test_bars == 0 || held >= m {
                return Err(format!(
                    "{n} bars leave {m} usable rows (look-back {lookback}, horizon {horizon}): \
                     too few for {f} out-of-sample windows of {test_bars} rows; give fewer folds \
                     or test_bars"
                ));
            }
            (0..f)
                .map(|k| (m - (f - k) * test_bars, m - (f - k - 1) * test_bars))
                .collect()
        } else {
            let usable_ts: Vec<i64> = (0..m).map(bar).collect();
            let lo: Vec<usize> = self
                .test_starts
                .iter()
                .map(|t| usable_ts.partition_point(|&u| u < t.0))
                .collect();
            let mut windows = Vec::with_capacity(f);
            for k in 0..f {
                let hi = lo.get(k + 1).copied().unwrap_or(m);
                if lo[k] >= hi {
                    return Err(format!(
                        "test_starts[{k}] {} leaves fold {} no out-of-sample bar (usable bars \
                         run from {} to {})",
                        timefmt::format(self.test_starts[k].0),
                        k + 1,
                        usable_ts
                            .first()
                            .map_or("-".into(), |&t| timefmt::format(t)),
                        usable_ts.last().map_or("-".into(), |&t| timefmt::format(t)),
                    ));
                }
                windows.push((lo[k], hi));
            }
            windows
        };
        let mut out = Vec::with_capacity(f);
        for (k, &(test_lo, test_hi)) in windows.iter().enumerate() {
            let before = test_lo.saturating_sub(embargo);
            let first = match self.train_bars {
                Some(t) => before.saturating_sub(t),
                None => 0,
            };
            let span = before - first;
            let valid_rows = ((span as f64) * config.valid_fraction).round().max(1.0) as usize;
            let valid_lo = before.saturating_sub(valid_rows);
            let train_rows = valid_lo.saturating_sub(embargo).saturating_sub(first);
            if train_rows < 10 || valid_lo <= first {
                return Err(format!(
                    "fold {} of {f} (out-of-sample from {}) has {train_rows} training rows; at \
                     least 10 are needed (give fewer folds, fewer test_bars or more train_bars)",
                    k + 1,
                    date(test_lo)
                ));
            }
            out.push(FoldDates {
                // The cut keeps the look-back before the first training row.
                start: self.train_bars.map(|_| UtcTime(table.ts[first])),
                // The last out-of-sample row's target bar.
                end: UtcTime(table.ts[lookback + test_hi - 1 + horizon]),
                valid_start: UtcTime(bar(valid_lo)),
                test_start: UtcTime(bar(test_lo)),
            });
        }
        Ok(out)
    }
}

impl FoldDates {
    /// `config` with this fold's split dates.
    pub fn features(&self, config: &FeatureConfig) -> FeatureConfig {
        FeatureConfig {
            valid_start: Some(self.valid_start),
            test_start: Some(self.test_start),
            ..config.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::ContractBook;
    use crate::features::build_dataset;

    #[test]
    fn folds_are_consecutive_out_of_sample_windows_each_after_its_embargoed_training() {
        let table = crate::synth::es_test_bars(crate::table::BarInterval::Day, 1000, 5);
        let es = ContractBook::builtin().lookup("ES").unwrap().clone();
        let config = FeatureConfig {
            target_horizons: vec![1, 3],
            ..FeatureConfig::default()
        };
        let walk = |train_bars| WalkForward {
            folds: 4,
            test_starts: Vec::new(),
            test_bars: Some(50),
            train_bars,
            plan: Vec::new(),
        };
        for train_bars in [None, Some(300)] {
            let folds = walk(train_bars).folds(&table, &config).unwrap();
            assert_eq!(folds.len(), 4);
            let mut previous_last: Option<i64> = None;
            for fold in &folds {
                let cut = table.between(fold.start.map(|t| t.0), Some(fold.end.0));
                let d = build_dataset(&cut, &es, &fold.features(&config)).unwrap();
                let s = d.splits;
                // 50 out-of-sample rows, an embargo of 3 (the longest horizon) before each split.
                assert_eq!(d.timestamps.len() as u64 - s.test_start, 50);
                assert_eq!(s.test_start - s.valid_end, 3);
                assert_eq!(s.valid_start - s.train_end, 3);
                match train_bars {
                    None => assert_eq!(d.timestamps[0], table.ts[20], "expanding"),
                    Some(t) => assert_eq!(s.valid_end as usize, t, "sliding: {t} rows"),
                }
                let first_test = d.timestamps[s.test_start as usize];
                if let Some(last) = previous_last {
                    let i = table.ts.binary_search(&last).unwrap();
                    assert_eq!(table.ts[i + 1], first_test, "consecutive windows");
                }
                previous_last = d.timestamps.last().copied();
            }
            // The last window ends at the last usable bar (horizon 3 before the end).
            assert_eq!(previous_last, Some(table.ts[1000 - 1 - 3]));
        }
        let refused = |w: WalkForward, expected: &str| {
            let e = w.folds(&table, &config).unwrap_err();
            assert!(e.contains(expected), "{expected:?} in: {e}");
        };
        refused(
            WalkForward {
                folds: 1,
                ..walk(None)
            },
            "folds 1 must be 2 to 50",
        );
        refused(
            WalkForward {
                test_bars: Some(400),
                ..walk(None)
            },
            "too few for 4 out-of-sample windows of 400 rows",
        );
        refused(
            WalkForward {
                test_bars: Some(240),
                ..walk(None)
            },
            "fold 1 of 4",
        );
        // Windows by date: the same folds as by count when the dates are those windows' starts.
        let by_count = walk(None).folds(&table, &config).unwrap();
        let by_date = WalkForward {
            folds: 0,
            test_starts: by_count.iter().map(|f| f.test_start).collect(),
            test_bars: None,
            train_bars: None,
            plan: Vec::new(),
        };
        assert_eq!(by_date.folds(&table, &config).unwrap(), by_count);
        let mut late = by_date.clone();
        late.test_starts[3] = UtcTime(table.ts[999] + 1);
        let e = late.folds(&table, &config).unwrap_err();
        assert!(
            e.contains("test_starts[3]") && e.contains("no out-of-sample bar"),
            "{e}"
        );
        let mut swapped = by_date.clone();
        swapped.test_starts.swap(0, 1);
        assert!(swapped.check().unwrap_err().contains("increasing order"));
    }
}
