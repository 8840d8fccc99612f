//! Dataset rows (as handed over the ABI) → tensors.

use crate::errors::TchResultExt;
use std::ops::Range;
use tch::{Device, Tensor};
use tli_plugin_api::{Dataset, PluginError, SplitBounds};

/// Which chronological split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Validation,
    Test,
}

impl Split {
    pub const ALL: [Split; 3] = [Split::Train, Split::Validation, Split::Test];

    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Validation => "valid",
            Split::Test => "test",
        }
    }

    /// This split's rows under `bounds` for a dataset of `rows` rows.
    pub fn range(self, bounds: &SplitBounds, rows: usize) -> Range<usize> {
        match self {
            Split::Train => 0..bounds.train_end as usize,
            Split::Validation => bounds.valid_start as usize..bounds.valid_end as usize,
            Split::Test => bounds.test_start as usize..rows,
        }
    }
}

/// Row range of a split.
pub fn split_rows(dataset: &Dataset, split: Split) -> Range<usize> {
    split.range(&dataset.splits, dataset.rows())
}

/// Feature rows `rows` as a `[n, features]` float tensor on `device`.
pub fn features(
    dataset: &Dataset,
    rows: Range<usize>,
    device: Device,
) -> Result<Tensor, PluginError> {
    let width = dataset.feature_names.len();
    matrix(
        &dataset.features[rows.start * width..rows.end * width],
        width,
        device,
    )
}

/// Target column `column` of rows `rows` as a `[n, 1]` float tensor on `device`.
pub fn target_column(
    dataset: &Dataset,
    rows: Range<usize>,
    column: usize,
    device: Device,
) -> Result<Tensor, PluginError> {
    let width = dataset.target_names.len();
    if column >= width {
        return Err(PluginError::invalid_config(format!(
            "target column {column} requested but the dataset has {width} target(s): {:?}",
            dataset
                .target_names
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
        )));
    }
    let values: Vec<f32> = rows.map(|r| dataset.targets[r * width + column]).collect();
    matrix(&values, 1, device)
}

/// `[rows, count]` float zeros with ones in column `index`: a one-hot of an
/// asset index for every row (a pooled task's static covariate).
pub fn one_hot_rows(
    rows: usize,
    count: usize,
    index: usize,
    device: Device,
) -> Result<Tensor, PluginError> {
    if index >= count {
        return Err(PluginError::invalid_data(format!(
            "asset index {index} is outside the job's {count} assets"
        )));
    }
    Tensor::f_zeros([rows as i64, count as i64], (tch::Kind::Float, device))
        .and_then(|t| t.f_narrow(1, index as i64, 1)?.f_fill_(1.0).map(|_| t))
        .plugin_err("building the asset one-hot")
}

fn matrix(values: &[f32], width: usize, device: Device) -> Result<Tensor, PluginError> {
    let rows = values.len().checked_div(width).unwrap_or(0);
    Tensor::f_from_slice(values)
        .and_then(|t| t.f_reshape([rows as i64, width as i64]))
        .and_then(|t| t.f_to_device(device))
        .plugin_err("copying dataset rows to the device")
}
