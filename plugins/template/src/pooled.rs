//! A pooled task's data (plugin API 1.1): one model across every asset of a
//! job. Each asset's rows get a one-hot of its asset index appended (the
//! static covariate), and the rows are laid out as every asset's training
//! rows first, then every asset's validation rows, so the trainer samples
//! batches from `0..train_rows` exactly as for one asset and evaluates each
//! asset on its own stretch.

use std::ops::Range;
use tch::{Device, Tensor};
use tli_plugin_api::{PluginError, TaskInputs};
use tli_plugin_kit::data::{self, Split};
use tli_plugin_kit::TchResultExt;

pub struct PooledData {
    /// `[rows, features + assets]`: training rows of every asset, then validation rows.
    pub features: Tensor,
    /// `[rows, 1]`.
    pub targets: Tensor,
    pub train_rows: u64,
    /// Each asset's symbol and its validation rows in `features`.
    pub valid: Vec<(String, Range<usize>)>,
    /// Feature width the model sees (dataset features + one-hot asset index).
    pub width: usize,
}

/// Builds the pooled layout of `inputs` for target column `target`.
pub fn pooled_data(
    inputs: &TaskInputs,
    target: usize,
    device: Device,
) -> Result<PooledData, PluginError> {
    let assets = inputs.asset_count().max(inputs.datasets.len());
    let base_width = inputs.datasets[0].feature_names.len();
    for d in inputs.datasets.iter() {
        if d.feature_names != inputs.datasets[0].feature_names {
            return Err(PluginError::invalid_data(format!(
                "pooled assets must share their features; {} and {} differ",
                inputs.datasets[0].symbol, d.symbol
            )));
        }
    }
    // Each dataset's asset index (read and checked once, used for both splits).
    let asset_index: Vec<u32> = (0..inputs.datasets.len())
        .map(|i| inputs.annex(i).map(|a| a.asset_index))
        .collect::<Result<_, _>>()?;
    let mut feature_parts = Vec::new();
    let mut target_parts = Vec::new();
    let mut per_split = |split: Split| -> Result<Vec<(String, usize)>, PluginError> {
        let mut sizes = Vec::new();
        for (i, dataset) in inputs.datasets.iter().enumerate() {
            let rows = data::split_rows(dataset, split);
            let x = data::features(dataset, rows.clone(), device)?;
            let one_hot = data::one_hot_rows(rows.len(), assets, asset_index[i] as usize, device)?;
            feature_parts.push(Tensor::f_cat(&[x, one_hot], 1).plugin_err("pooling features")?);
            target_parts.push(data::target_column(dataset, rows.clone(), target, device)?);
            sizes.push((dataset.symbol.to_string(), rows.len()));
        }
        Ok(sizes)
    };
    let train = per_split(Split::Train)?;
    let valid_sizes = per_split(Split::Validation)?;
    let train_rows: usize = train.iter().map(|(_, n)| n).sum();
    let mut start = train_rows;
    let valid = valid_sizes
        .into_iter()
        .map(|(symbol, n)| {
            let range = start..start + n;
            start += n;
            (symbol, range)
        })
        .collect();
    Ok(PooledData {
        features: Tensor::f_cat(&feature_parts, 0).plugin_err("pooling features")?,
        targets: Tensor::f_cat(&target_parts, 0).plugin_err("pooling targets")?,
        train_rows: train_rows as u64,
        valid,
        width: base_width + assets,
    })
}
