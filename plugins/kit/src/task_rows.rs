//! A sequence model's task data on the device, windowed (Mamba-2, TFT):
//! every asset's feature rows in one tensor (a pooled task may append a
//! one-hot of the asset index), multi-horizon targets with their validity,
//! each feature's role, and the window end rows of each split. Windows
//! never span a gap, a roll, a split boundary or two assets ([`RowRuns`]).
//!
//! Targets: with `horizons = 1` the chosen target column as it is (valid
//! where its value is finite and its own horizon stays inside the row's
//! run); with `horizons = H > 1`, from a 1-bar target column (a column of
//! another horizon is refused), for a window ending at row `e` either the
//! cumulative returns over 1..H bars ([`TargetKind::Cumulative`]: from the
//! close of bar `e` to that of `e + h`) or the return of each of bars
//! `e + 1 … e + H` ([`TargetKind::PerBar`]: from the close of `e + h − 1`
//! to that of `e + h`, the TFT's per-step decoder targets).

use crate::data::{self, Split};
use crate::trade_report::Market;
use crate::windows::{HorizonTarget, RowRuns, BREAK_ON_DEFAULT};
use crate::TchResultExt;
use std::ops::Range;
use tch::{Device, Tensor};
use tli_plugin_api::{Dataset, FeatureRole, PluginError, TaskInputs};

/// What the targets at horizons 1..H are (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// The `h`-bar return from the window's last bar.
    Cumulative,
    /// The 1-bar return of the `h`-th bar after the window.
    PerBar,
}

/// How [`TaskData::build`] lays a task out.
#[derive(Clone, Copy, Debug)]
pub struct TaskLayout {
    pub lookback: usize,
    pub horizons: usize,
    pub target_index: usize,
    pub target_kind: TargetKind,
    /// Append a one-hot of the asset index to a pooled task's features.
    pub one_hot_assets: bool,
}

/// One window: its asset and its last row in the pooled row numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowEnd {
    pub asset: u32,
    pub row: u32,
}

/// One asset of the task.
pub struct AssetRows {
    pub symbol: String,
    /// Its index in the job (the annex's `asset_index`; 0 for a plain dataset).
    pub asset_index: u32,
    /// Its rows in the task's tensors.
    pub rows: Range<usize>,
    /// Its bars as a backtest prices them (the trading metrics); `None`
    /// when they cannot be traded.
    pub market: Option<Market>,
}

pub struct TaskData {
    /// `[rows, width]` float, every asset's rows one after the other.
    pub features: Tensor,
    /// `[rows, horizons]` float (0 where invalid).
    pub targets: Tensor,
    /// `[rows, horizons]` float, 1 where the target is valid.
    pub target_valid: Tensor,
    pub width: usize,
    /// The role of each of the dataset's features (the first `width` columns
    /// without a one-hot), from the annex (all observed-past without one).
    pub roles: Vec<FeatureRole>,
    /// The input variable of each of those features (plugin API 1.4; one
    /// each without it): a categorical column's one-hot columns share one.
    pub variables: Vec<u32>,
    /// Asset categories: the job's asset count for a pooled task, else 1.
    pub asset_count: usize,
    pub assets: Vec<AssetRows>,
    pub train: Vec<WindowEnd>,
    pub valid: Vec<WindowEnd>,
    pub test: Vec<WindowEnd>,
}

impl TaskData {
    /// The windowed data of `dataset` (or of every asset of a pooled task
    /// when `inputs` says so) laid out as `layout` says.
    pub fn build(
        dataset: &Dataset,
        inputs: Option<&TaskInputs>,
        layout: TaskLayout,
        device: Device,
    ) -> Result<Self, PluginError> {
        let TaskLayout {
            lookback,
            horizons,
            target_index,
            target_kind,
            one_hot_assets,
        } = layout;
        let pooled = inputs.filter(|i| i.pooled);
        let asset_count = pooled.map_or(1, |i| i.asset_count().max(i.datasets.len()));
        let one_hot_width = pooled.filter(|_| one_hot_assets).map(|_| asset_count);
        let datasets: Vec<&Dataset> = match pooled {
            Some(inputs) => inputs.datasets.iter().map(|d| &**d).collect(),
            None => vec![dataset],
        };
        let base_width = datasets[0].feature_names.len();
        if base_width == 0 {
            return Err(PluginError::invalid_data(
                "the dataset has no feature columns",
            ));
        }
        let mut features = Vec::new();
        let mut targets = Vec::new();
        let mut target_valid = Vec::new();
        let mut assets = Vec::new();
        let (mut train, mut valid, mut test) = (Vec::new(), Vec::new(), Vec::new());
        let mut roles = Vec::new();
        let mut variables = Vec::new();
        let mut offset = 0usize;
        for (i, d) in datasets.iter().enumerate() {
            if d.feature_names != datasets[0].feature_names {
                let first = &datasets[0].feature_names;
                let differing = first
                    .iter()
                    .zip(d.feature_names.iter())
                    .find(|(a, b)| a != b)
                    .map(|(a, b)| format!("{a} against {b}"))
                    .unwrap_or_else(|| {
                        format!("{} features against {}", first.len(), d.feature_names.len())
                    });
                return Err(PluginError::invalid_data(format!(
                    "pooled assets must share their features; {} and {} differ ({differing}); \
                     a categorical column's levels are fitted per asset unless the feature \
                     config gives them",
                    datasets[0].symbol, d.symbol
                )));
            }
            let annex = match inputs {
                Some(inputs) => inputs.annex(if pooled.is_some() { i } else { 0 })?,
                None => tli_plugin_api::DatasetAnnex::plain(d),
            };
            if i == 0 {
                roles = annex.feature_roles.clone();
                variables = annex.variables();
            } else if annex.feature_roles != roles || annex.variables() != variables {
                return Err(PluginError::invalid_data(format!(
                    "pooled assets must give their features the same roles; {} and {} differ",
                    datasets[0].symbol, d.symbol
                )));
            }
            let rows = d.rows();
            let runs = RowRuns::new(rows, &annex.row_markers, BREAK_ON_DEFAULT, &d.splits)?;
            let (values, ok) =
                horizon_targets(d, &runs, &annex, horizons, target_index, target_kind)?;
            let mut x = data::features(d, 0..rows, device)?;
            if let Some(n) = one_hot_width {
                let one_hot = data::one_hot_rows(rows, n, annex.asset_index as usize, device)?;
                x = Tensor::f_cat(&[x, one_hot], 1).plugin_err("pooling features")?;
            }
            features.push(x);
            targets.extend(values);
            target_valid.extend(ok.into_iter().map(|v| if v { 1.0f32 } else { 0.0 }));
            for (split, out) in [
                (Split::Train, &mut train),
                (Split::Validation, &mut valid),
                (Split::Test, &mut test),
            ] {
                out.extend(
                    runs.window_ends(split, lookback, horizons)
                        .into_iter()
                        .map(|e| WindowEnd {
                            asset: i as u32,
                            row: (offset + e) as u32,
                        }),
                );
            }
            assets.push(AssetRows {
                symbol: d.symbol.to_string(),
                asset_index: if pooled.is_some() {
                    annex.asset_index
                } else {
                    0
                },
                rows: offset..offset + rows,
                market: Market::of(d, &annex.row_markers)?,
            });
            offset += rows;
        }
        if offset > u32::MAX as usize {
            return Err(PluginError::invalid_data(format!(
                "{offset} rows; at most {} per task",
                u32::MAX
            )));
        }
        let shape = [offset as i64, horizons as i64];
        let matrix = |v: &[f32]| {
            Tensor::f_from_slice(v)
                .and_then(|t| t.f_reshape(shape))
                .and_then(|t| t.f_to_device(device))
                .plugin_err("copying targets to the device")
        };
        Ok(Self {
            features: Tensor::f_cat(&features, 0).plugin_err("pooling features")?,
            targets: matrix(&targets)?,
            target_valid: matrix(&target_valid)?,
            width: base_width + one_hot_width.unwrap_or(0),
            roles,
            variables,
            asset_count,
            assets,
            train,
            valid,
            test,
        })
    }

    pub fn windows(&self, split: Split) -> &[WindowEnd] {
        match split {
            Split::Train => &self.train,
            Split::Validation => &self.valid,
            Split::Test => &self.test,
        }
    }

    /// Bytes of the tensors held.
    pub fn bytes(&self) -> u64 {
        [&self.features, &self.targets, &self.target_valid]
            .iter()
            .map(|t| crate::tensor_bytes(t))
            .sum()
    }
}

/// Bytes [`TaskData`] holds for `rows` rows of `width` inputs.
pub fn data_bytes(rows: u64, width: u64, horizons: u64) -> u64 {
    4 * rows * (width + 2 * horizons)
}

/// `[rows × horizons]` target values and validity for one dataset.
fn horizon_targets(
    d: &Dataset,
    runs: &RowRuns,
    annex: &tli_plugin_api::DatasetAnnex,
    horizons: usize,
    column: usize,
    kind: TargetKind,
) -> Result<(Vec<f32>, Vec<bool>), PluginError> {
    let width = d.target_names.len();
    if column >= width {
        return Err(PluginError::invalid_config(format!(
            "target_index: column {column} requested but {} has {width} target(s): {:?}",
            d.symbol,
            d.target_names
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
        )));
    }
    let own_horizon = annex.target_horizons.get(column).copied().unwrap_or(1) as usize;
    let rows = d.rows();
    let column_values: Vec<f32> = (0..rows).map(|r| d.targets[r * width + column]).collect();
    if horizons == 1 {
        // The column as it is: row t's value looks own_horizon bars ahead.
        let valid = (0..rows)
            .map(|t| {
                column_values[t].is_finite()
                    && runs
                        .run_of(t)
                        .is_some_and(|run| t + own_horizon < run.rows.end)
            })
            .collect::<Vec<bool>>();
        let values = column_values
            .iter()
            .zip(&valid)
            .map(|(v, ok)| if *ok { *v } else { 0.0 })
            .collect();
        return Ok((values, valid));
    }
    if own_horizon != 1 {
        return Err(PluginError::invalid_config(format!(
            "horizons: {horizons} horizons are built from a 1-bar target, but target \
             {:?} looks {own_horizon} bars ahead; choose a 1-bar target_index or horizons 1",
            d.target_names[column].as_str()
        )));
    }
    // Row t's 1-bar target is the return of bar t + 1: shifted by one, s[t+h]
    // is the return of bar t + h and s[t+1] + … + s[t+h] the h-bar return from bar t.
    let mut shifted = vec![f32::NAN; rows];
    if rows > 1 {
        shifted[1..].copy_from_slice(&column_values[..rows - 1]);
    }
    let kind = match kind {
        TargetKind::Cumulative => HorizonTarget::Sum,
        TargetKind::PerBar => HorizonTarget::Value,
    };
    let t = runs.horizon_targets(&shifted, horizons, kind)?;
    Ok((t.values, t.valid))
}
