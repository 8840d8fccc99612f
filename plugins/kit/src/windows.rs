//! Sliding windows over a dataset's rows for sequence models, and
//! multi-horizon targets, that never reach across a break in the data or a
//! split boundary.
//!
//! Rows are cut into *runs*: maximal ranges of consecutive rows that lie in
//! one split (train = `[0, train_end)`, valid = `[valid_start, valid_end)`,
//! test = `[test_start, rows)`; rows between splits belong to none) with no
//! break between neighbours. A break before row `r` is a marker bit of
//! `markers[r]` that the caller's `break_on` mask selects: [`GAP_BEFORE`]
//! (bars are missing between rows `r − 1` and `r`) or [`ROLL_BEFORE`] (the
//! front contract rolled there).
//!
//! A window ending at row `e` with lookback `L` covers rows `[e − L + 1, e]`
//! and its targets rows `(e, e + H]`; it is valid only when all of
//! `[e − L + 1, e + H]` lies in one run. Feature windows are views
//! ([`window_view`]): a batch copies only its own rows ([`window_batch`]).

use crate::errors::TchResultExt;
use std::ops::Range;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::{PluginError, SplitBounds};

/// The row-marker bits of the dataset annex (plugin API 1.1), re-exported.
pub use tli_plugin_api::{GAP_BEFORE, ROLL_BEFORE};
/// The default `break_on` mask: gaps and rolls both break windows.
pub const BREAK_ON_DEFAULT: u8 = GAP_BEFORE | ROLL_BEFORE;

pub use crate::data::Split;

/// Consecutive rows in one split with no break between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub split: Split,
    pub rows: Range<usize>,
}

/// Valid window end rows of each split.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowEnds {
    pub train: Vec<usize>,
    pub valid: Vec<usize>,
    pub test: Vec<usize>,
}

impl WindowEnds {
    pub fn of(&self, split: Split) -> &[usize] {
        match split {
            Split::Train => &self.train,
            Split::Validation => &self.valid,
            Split::Test => &self.test,
        }
    }
}

/// What a multi-horizon target at horizon `h` is, for a per-row series `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HorizonTarget {
    /// `s[t + h]`: the value `h` rows ahead (e.g. the 1-bar return of bar `t + h`).
    Value,
    /// `s[t + 1] + … + s[t + h]`: e.g. the `h`-bar return from summed 1-bar returns.
    Sum,
}

/// Targets `[rows, horizon]` (row-major) with their validity; an invalid
/// target's value is 0 (so a masked loss never meets a NaN).
#[derive(Clone, Debug, PartialEq)]
pub struct HorizonTargets {
    pub horizon: usize,
    pub values: Vec<f32>,
    pub valid: Vec<bool>,
}

impl HorizonTargets {
    /// `(values [rows, H] float, valid [rows, H] bool)` on `device`.
    pub fn to_tensors(&self, device: Device) -> Result<(Tensor, Tensor), PluginError> {
        let ctx = "building target tensors";
        let shape = [
            (self.values.len() / self.horizon.max(1)) as i64,
            self.horizon as i64,
        ];
        let values = Tensor::f_from_slice(&self.values)
            .and_then(|t| t.f_reshape(shape))
            .and_then(|t| t.f_to_device(device))
            .plugin_err(ctx)?;
        let valid = Tensor::f_from_slice(&self.valid)
            .and_then(|t| t.f_reshape(shape))
            .and_then(|t| t.f_to_device(device))
            .plugin_err(ctx)?;
        Ok((values, valid))
    }
}

/// A dataset's rows cut into runs (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowRuns {
    runs: Vec<Run>,
    /// Index into `runs` of each row's run; `None` for rows in no split.
    run_of: Vec<Option<usize>>,
}

impl RowRuns {
    /// `markers` holds one byte per row; a row whose byte shares a bit with
    /// `break_on` starts a new run (row 0's byte is irrelevant).
    pub fn new(
        rows: usize,
        markers: &[u8],
        break_on: u8,
        splits: &SplitBounds,
    ) -> Result<Self, PluginError> {
        if markers.len() != rows {
            return Err(PluginError::invalid_data(format!(
                "{} row markers for {rows} rows (one marker byte per row expected)",
                markers.len()
            )));
        }
        let s = splits;
        let ordered = s.train_end <= s.valid_start
            && s.valid_start <= s.valid_end
            && s.valid_end <= s.test_start
            && s.test_start <= rows as u64;
        if !ordered {
            return Err(PluginError::invalid_data(format!(
                "split bounds {s:?} are not ordered within {rows} rows \
                 (need train_end ≤ valid_start ≤ valid_end ≤ test_start ≤ rows)"
            )));
        }
        let mut runs: Vec<Run> = Vec::new();
        let mut run_of = vec![None; rows];
        for split in Split::ALL {
            let range = split.range(splits, rows);
            for r in range.clone() {
                let starts_run = r == range.start || markers[r] & break_on != 0;
                if starts_run {
                    runs.push(Run {
                        split,
                        rows: r..r + 1,
                    });
                } else if let Some(last) = runs.last_mut() {
                    last.rows.end = r + 1;
                }
                run_of[r] = Some(runs.len() - 1);
            }
        }
        Ok(Self { runs, run_of })
    }

    pub fn rows(&self) -> usize {
        self.run_of.len()
    }

    /// Runs in row order.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// The run holding `row`; `None` for rows in no split or out of range.
    pub fn run_of(&self, row: usize) -> Option<&Run> {
        self.run_of
            .get(row)
            .copied()
            .flatten()
            .map(|i| &self.runs[i])
    }

    pub fn split_of(&self, row: usize) -> Option<Split> {
        self.run_of(row).map(|r| r.split)
    }

    /// End rows `e` (ascending) of the windows `[e − lookback + 1, e]` of
    /// `split` whose targets `(e, e + horizon]` lie in the same run.
    pub fn window_ends(&self, split: Split, lookback: usize, horizon: usize) -> Vec<usize> {
        let mut ends = Vec::new();
        if lookback == 0 {
            return ends;
        }
        for run in self.runs.iter().filter(|r| r.split == split) {
            let first = run.rows.start + lookback - 1;
            // Last e with e + horizon ≤ run end − 1.
            if let Some(last) = run.rows.end.checked_sub(1 + horizon) {
                ends.extend(first..=last);
            }
        }
        ends
    }

    /// [`window_ends`](Self::window_ends) for every split.
    pub fn all_window_ends(&self, lookback: usize, horizon: usize) -> WindowEnds {
        WindowEnds {
            train: self.window_ends(Split::Train, lookback, horizon),
            valid: self.window_ends(Split::Validation, lookback, horizon),
            test: self.window_ends(Split::Test, lookback, horizon),
        }
    }

    /// Targets at horizons `1..=horizon` for every row from a per-row
    /// `series`: the target of row `t` at `h` is valid when `t + h` is in
    /// `t`'s run (so it neither leaves `t`'s split nor crosses a break) and
    /// every series value it uses is finite.
    pub fn horizon_targets(
        &self,
        series: &[f32],
        horizon: usize,
        kind: HorizonTarget,
    ) -> Result<HorizonTargets, PluginError> {
        let rows = self.rows();
        if series.len() != rows {
            return Err(PluginError::invalid_data(format!(
                "target series has {} values for {rows} rows",
                series.len()
            )));
        }
        if horizon == 0 {
            return Err(PluginError::invalid_config(
                "the target horizon must be at least 1",
            ));
        }
        let mut values = vec![0.0f32; rows * horizon];
        let mut valid = vec![false; rows * horizon];
        for t in 0..rows {
            let Some(run) = self.run_of(t) else { continue };
            let mut sum = 0.0f64;
            for h in 1..=horizon.min(run.rows.end - 1 - t) {
                let x = series[t + h];
                if !x.is_finite() {
                    // Sums over this value stay invalid at longer horizons too.
                    if kind == HorizonTarget::Sum {
                        break;
                    }
                    continue;
                }
                sum += x as f64;
                let value = match kind {
                    HorizonTarget::Value => x,
                    HorizonTarget::Sum => sum as f32,
                };
                values[t * horizon + h - 1] = value;
                valid[t * horizon + h - 1] = true;
            }
        }
        Ok(HorizonTargets {
            horizon,
            values,
            valid,
        })
    }
}

/// All windows of `lookback` rows of a `[rows, F]` tensor as a
/// `[rows − lookback + 1, lookback, F]` view of the same storage (no copy):
/// element `[i, j, f]` is `features[i + j, f]`, i.e. window `i` ends at row
/// `i + lookback − 1`.
pub fn window_view(features: &Tensor, lookback: usize) -> Result<Tensor, PluginError> {
    let size = features.size();
    if size.len() != 2 {
        return Err(PluginError::invalid_data(format!(
            "windowing needs a [rows, features] tensor, got shape {size:?}"
        )));
    }
    if lookback == 0 || lookback as i64 > size[0] {
        return Err(PluginError::invalid_config(format!(
            "lookback {lookback} must be between 1 and the {} rows",
            size[0]
        )));
    }
    // unfold → [rows − L + 1, F, L] (strides [s0, s1, s0]); swap the last two.
    features
        .f_unfold(0, lookback as i64, 1)
        .and_then(|t| t.f_transpose(1, 2))
        .plugin_err("building the window view")
}

/// The windows ending at `ends` (rows of `features`): `[n, lookback, F]`,
/// gathered from [`window_view`] so only these `n` windows are copied.
pub fn window_batch(
    features: &Tensor,
    lookback: usize,
    ends: &[usize],
) -> Result<Tensor, PluginError> {
    let view = window_view(features, lookback)?;
    let rows = features.size()[0] as usize;
    let mut starts = Vec::with_capacity(ends.len());
    for &e in ends {
        if e + 1 < lookback || e >= rows {
            return Err(PluginError::invalid_config(format!(
                "window end row {e} has no full {lookback}-row window in {rows} rows"
            )));
        }
        starts.push((e + 1 - lookback) as i64);
    }
    select_rows_i64(&view, &starts).plugin_err("gathering a window batch")
}

/// Rows `rows` of `t` along dimension 0 (e.g. the targets `[n, H]` of a
/// batch of window ends), as a new tensor on `t`'s device.
pub fn select_rows(t: &Tensor, rows: &[usize]) -> Result<Tensor, PluginError> {
    let n = t.size().first().copied().unwrap_or(0);
    if let Some(&bad) = rows.iter().find(|&&r| r as i64 >= n) {
        return Err(PluginError::invalid_config(format!(
            "row {bad} is out of range for a tensor of {n} rows"
        )));
    }
    let rows: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    select_rows_i64(t, &rows).plugin_err("selecting rows")
}

fn select_rows_i64(t: &Tensor, rows: &[i64]) -> Result<Tensor, tch::TchError> {
    let index = Tensor::f_from_slice(rows)?
        .f_to_kind(Kind::Int64)?
        .f_to_device(t.device())?;
    t.f_index_select(0, &index)
}
