//! The TFT's view of a task: the kit's [`TaskData`] (every asset's rows,
//! per-bar targets 1..H, window ends) with the feature columns split by
//! role, and batches of windows cut from it as [`TftBatch`]es.
//!
//! A window ending at row `e` gives the encoder rows `e − T + 1 … e` of the
//! observed and known columns, the decoder rows `e + 1 … e + H` of the
//! known columns (a function of the timestamp: known in advance), the
//! static columns of row `e`, the asset's index, and the targets: the
//! return of each bar `e + h` (per bar, [`TargetKind::PerBar`]).

use crate::config::TftConfig;
use crate::model::{InputGroups, TftBatch, TftShape};
use tch::{Device, Kind, Tensor};
use tli_plugin_api::{Dataset, FeatureRole, PluginError, TaskInputs};
use tli_plugin_kit::task_rows::{TargetKind, TaskData, TaskLayout, WindowEnd};
use tli_plugin_kit::windows::{select_rows, window_batch};
use tli_plugin_kit::TchResultExt;

pub struct TftData {
    pub rows: TaskData,
    /// `[rows, observed + known]`: the encoder's inputs.
    past: Tensor,
    /// `[rows, known]`.
    known: Tensor,
    /// `[rows, static]`.
    statics: Tensor,
    pub observed_names: Vec<String>,
    pub known_names: Vec<String>,
    pub static_names: Vec<String>,
    /// Which of those columns form one variable (a categorical's one-hot columns).
    pub groups: InputGroups,
}

/// The variable names of `columns` grouped by `groups` (empty: one each):
/// a one-hot column `NAME=LEVEL` stands for its column `NAME`.
pub fn variable_names(columns: &[String], groups: &[usize]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (j, name) in columns.iter().enumerate() {
        let v = groups.get(j).copied().unwrap_or(names.len());
        if v == names.len() {
            // `groups` is empty when no column is grouped: names stay as they are.
            names.push(match name.split_once('=') {
                Some((column, _)) if !groups.is_empty() => column.to_string(),
                _ => name.clone(),
            });
        }
    }
    names
}

/// A batch of windows with its targets.
pub struct WindowBatch {
    pub inputs: TftBatch,
    /// `[B, H]`.
    pub targets: Tensor,
    /// `[B, H]` float, 1 where the target is valid.
    pub valid: Tensor,
}

impl TftData {
    pub fn build(
        dataset: &Dataset,
        inputs: Option<&TaskInputs>,
        config: &TftConfig,
        device: Device,
    ) -> Result<Self, PluginError> {
        let layout = TaskLayout {
            lookback: config.lookback,
            horizons: config.horizons,
            target_index: config.target_index,
            target_kind: TargetKind::PerBar,
            one_hot_assets: false,
        };
        let rows = TaskData::build(dataset, inputs, layout, device)?;
        let names: Vec<String> = dataset
            .feature_names
            .iter()
            .map(|n| n.to_string())
            .collect();
        let columns = |role: FeatureRole| -> Vec<usize> {
            (0..names.len())
                .filter(|&j| rows.roles.get(j) == Some(&role))
                .collect()
        };
        let (observed, known, statics) = (
            columns(FeatureRole::ObservedPast),
            columns(FeatureRole::KnownFuture),
            columns(FeatureRole::Static),
        );
        let past_columns: Vec<usize> = observed.iter().chain(&known).copied().collect();
        let pick = |cols: &[usize]| -> Result<Tensor, PluginError> {
            let index: Vec<i64> = cols.iter().map(|&c| c as i64).collect();
            Tensor::f_from_slice(&index)
                .and_then(|i| i.f_to_device(device))
                .and_then(|i| rows.features.f_index_select(1, &i))
                .plugin_err("splitting features by role")
        };
        let name = |cols: &[usize]| cols.iter().map(|&c| names[c].clone()).collect();
        let groups = InputGroups {
            past: InputGroups::relabel(&rows.variables, &past_columns),
            future: InputGroups::relabel(&rows.variables, &known),
            statics: InputGroups::relabel(&rows.variables, &statics),
        };
        Ok(Self {
            past: pick(&past_columns)?,
            known: pick(&known)?,
            statics: pick(&statics)?,
            observed_names: name(&observed),
            known_names: name(&known),
            static_names: name(&statics),
            groups,
            rows,
        })
    }

    /// The network's shape for this data and `config`.
    pub fn shape(&self, config: &TftConfig) -> TftShape {
        TftShape {
            hidden: config.hidden_size,
            heads: config.attention_heads,
            lstm_layers: config.lstm_layers,
            dropout: config.dropout,
            observed: self.observed_names.len(),
            known: self.known_names.len(),
            static_reals: self.static_names.len(),
            assets: self.rows.asset_count,
            horizons: config.horizons,
            outputs: config.quantiles.len(),
            groups: self.groups.clone(),
        }
    }

    /// The past variables' names (observed, then known, grouped).
    pub fn past_variable_names(&self) -> Vec<String> {
        let columns: Vec<String> = self
            .observed_names
            .iter()
            .chain(&self.known_names)
            .cloned()
            .collect();
        variable_names(&columns, &self.groups.past)
    }

    /// The future variables' names (known, grouped).
    pub fn future_variable_names(&self) -> Vec<String> {
        variable_names(&self.known_names, &self.groups.future)
    }

    /// The static variables' names besides the asset (grouped).
    pub fn static_variable_names(&self) -> Vec<String> {
        variable_names(&self.static_names, &self.groups.statics)
    }

    /// The windows ending at `ends`.
    pub fn batch(
        &self,
        ends: &[WindowEnd],
        lookback: usize,
        horizons: usize,
    ) -> Result<WindowBatch, PluginError> {
        let ctx = "assembling a TFT batch";
        let rows: Vec<usize> = ends.iter().map(|e| e.row as usize).collect();
        let decoder_ends: Vec<usize> = rows.iter().map(|r| r + horizons).collect();
        let assets: Vec<i64> = ends
            .iter()
            .map(|e| self.rows.assets[e.asset as usize].asset_index as i64)
            .collect();
        let inputs = TftBatch {
            past: window_batch(&self.past, lookback, &rows)?,
            future: window_batch(&self.known, horizons, &decoder_ends)?,
            static_reals: select_rows(&self.statics, &rows)?,
            asset: Tensor::f_from_slice(&assets)
                .and_then(|a| a.f_to_device(self.past.device()))
                .plugin_err(ctx)?,
        };
        Ok(WindowBatch {
            inputs,
            targets: select_rows(&self.rows.targets, &rows)?,
            valid: select_rows(&self.rows.target_valid, &rows)?
                .f_to_kind(Kind::Float)
                .plugin_err(ctx)?,
        })
    }
}
