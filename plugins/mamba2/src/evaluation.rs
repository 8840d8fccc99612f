//! Forecast quality on a split: the forecasts at the last bar of every
//! window of the split, against its targets, through the kit's
//! `forecast_metrics` (so every forecasting plugin reports the same numbers
//! the same way). Metric names are `{valid|test}_{metric}`, per asset
//! `…@SYMBOL` in a pooled task, per horizon `…_h{h}` when there are several.
//!
//! Forecasts are made as in training: a window of `lookback` bars forecasts
//! from its last `loss_positions` bars, so consecutive window ends share one
//! forward pass (`loss_positions`× less work at long lookbacks; with
//! `loss_positions = 1` every window is its own pass).
//!
//! The point forecast is the output itself, or (quantile config) the level
//! nearest the median; quantile configs add the pinball loss and q-risk of
//! each level (`…_pinball_p{100q}`, `…_qrisk_p{100q}`) and the coverage of
//! the outermost pair (`…_coverage_p{lo}_p{hi}`).

use crate::config::ForecasterConfig;
use crate::model::Forecaster;
use std::collections::BTreeMap;
use tch::Kind;
use tli_plugin_api::{Metric, PluginError};
use tli_plugin_kit::data::Split;
use tli_plugin_kit::forecast_report::{ForecastLayout, ForecastSet};
use tli_plugin_kit::task_rows::{TaskData, WindowEnd};
use tli_plugin_kit::windows::{select_rows, window_batch};
use tli_plugin_kit::TchResultExt;

/// The metrics of `split` (none when it has no window).
pub fn split_metrics(
    model: &Forecaster,
    config: &ForecasterConfig,
    data: &TaskData,
    split: Split,
) -> Result<Vec<Metric>, PluginError> {
    let windows = data.windows(split);
    if windows.is_empty() {
        return Ok(Vec::new());
    }
    let prefix = match split {
        Split::Train => "train",
        Split::Validation => "valid",
        Split::Test => "test",
    };
    let all = forecasts(model, config, data, windows)?;
    let mut metrics = vec![Metric::new(
        &format!("{prefix}_windows"),
        windows.len() as f64,
    )];
    let symbols: Vec<&str> = data.assets.iter().map(|a| a.symbol.as_str()).collect();
    let layout = ForecastLayout {
        horizons: config.horizons,
        quantiles: &config.quantiles,
    };
    metrics.extend(all.metrics_with_assets(layout, prefix, &symbols));
    metrics.extend(all.trading_metrics(layout, &data.assets, prefix)?);
    Ok(metrics)
}

/// Forecasts at the window ends `windows` (ascending per asset): runs of
/// up to `loss_positions` consecutive ends share the forward pass of the
/// window ending at the last of them; passes of equal length are batched
/// `eval_batch_size` at a time.
fn forecasts(
    model: &Forecaster,
    config: &ForecasterConfig,
    data: &TaskData,
    windows: &[WindowEnd],
) -> Result<ForecastSet, PluginError> {
    // (asset, last row, positions) of each shared pass, grouped by positions.
    let mut passes: BTreeMap<usize, Vec<(u32, usize)>> = BTreeMap::new();
    let mut current: Option<(u32, usize, usize)> = None;
    for w in windows {
        let row = w.row as usize;
        current = match current {
            Some((asset, last, n))
                if asset == w.asset && row == last + 1 && n < config.loss_positions =>
            {
                Some((asset, row, n + 1))
            }
            other => {
                if let Some((asset, last, n)) = other {
                    passes.entry(n).or_default().push((asset, last));
                }
                Some((w.asset, row, 1))
            }
        };
    }
    if let Some((asset, last, n)) = current {
        passes.entry(n).or_default().push((asset, last));
    }
    let mut out = ForecastSet {
        asset: Vec::new(),
        row: Vec::new(),
        forecast: Vec::new(),
        target: Vec::new(),
        valid: Vec::new(),
    };
    for (positions, ends) in passes {
        for batch in ends.chunks(config.eval_batch_size) {
            let last_rows: Vec<usize> = batch.iter().map(|(_, e)| *e).collect();
            let rows: Vec<usize> = last_rows
                .iter()
                .flat_map(|&e| e + 1 - positions..=e)
                .collect();
            let (f, t, v) = tch::no_grad(|| -> Result<_, PluginError> {
                let x = window_batch(&data.features, config.lookback, &last_rows)?;
                let f = model.forward(&x, positions, None)?;
                let flat = |t: tch::Tensor| -> Result<Vec<f32>, PluginError> {
                    t.f_to_kind(Kind::Float)
                        .and_then(|t| t.f_reshape([-1]))
                        .and_then(|t| Vec::<f32>::try_from(&t))
                        .plugin_err("reading forecasts")
                };
                Ok((
                    flat(f)?,
                    flat(select_rows(&data.targets, &rows)?)?,
                    flat(select_rows(&data.target_valid, &rows)?)?,
                ))
            })?;
            for (asset, _) in batch {
                out.asset.extend(std::iter::repeat_n(*asset, positions));
            }
            out.row.extend(rows.iter().map(|&r| r as u32));
            out.forecast.extend(f);
            out.target.extend(t);
            out.valid.extend(v.into_iter().map(|v| v > 0.5));
        }
    }
    Ok(out)
}
