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
use tli_plugin_kit::forecast_metrics as fm;
use tli_plugin_kit::task_rows::{TaskData, WindowEnd};
use tli_plugin_kit::windows::{select_rows, window_batch};
use tli_plugin_kit::TchResultExt;

/// Forecasts and targets of some windows, row-major `[windows × horizons]`
/// (forecasts `× outputs`), with the targets' validity and each window's asset.
struct Forecasts {
    asset: Vec<u32>,
    forecast: Vec<f32>,
    target: Vec<f32>,
    valid: Vec<bool>,
}

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
    metrics.extend(metrics_of(&all, config, prefix, ""));
    if data.assets.len() > 1 {
        for (i, asset) in data.assets.iter().enumerate() {
            let mine: Vec<usize> = all
                .asset
                .iter()
                .enumerate()
                .filter(|(_, a)| **a as usize == i)
                .map(|(j, _)| j)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let part = all.subset(&mine, config);
            metrics.extend(metrics_of(
                &part,
                config,
                prefix,
                &format!("@{}", asset.symbol),
            ));
        }
    }
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
) -> Result<Forecasts, PluginError> {
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
    let mut out = Forecasts {
        asset: Vec::new(),
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
            out.forecast.extend(f);
            out.target.extend(t);
            out.valid.extend(v.into_iter().map(|v| v > 0.5));
        }
    }
    Ok(out)
}

impl Forecasts {
    /// The windows `rows` (indices into these forecasts).
    fn subset(&self, rows: &[usize], config: &ForecasterConfig) -> Self {
        let h = config.horizons;
        let q = config.outputs_per_horizon();
        let mut out = Forecasts {
            asset: rows.iter().map(|&r| self.asset[r]).collect(),
            forecast: Vec::with_capacity(rows.len() * h * q),
            target: Vec::with_capacity(rows.len() * h),
            valid: Vec::with_capacity(rows.len() * h),
        };
        for &r in rows {
            out.forecast
                .extend_from_slice(&self.forecast[r * h * q..(r + 1) * h * q]);
            out.target
                .extend_from_slice(&self.target[r * h..(r + 1) * h]);
            out.valid.extend_from_slice(&self.valid[r * h..(r + 1) * h]);
        }
        out
    }
}

/// Output index of the point forecast: 0, or the quantile nearest 0.5.
fn point_output(quantiles: &[f64]) -> usize {
    quantiles
        .iter()
        .enumerate()
        .min_by(|a, b| (a.1 - 0.5).abs().total_cmp(&(b.1 - 0.5).abs()))
        .map(|(i, _)| i)
        .unwrap_or(0)
}

/// Percent label of a quantile level (0.1 → "10", 0.025 → "2.5").
fn level(q: f64) -> String {
    let p = q * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{}", p.round() as i64)
    } else {
        format!("{p}")
    }
}

fn metrics_of(f: &Forecasts, config: &ForecasterConfig, prefix: &str, suffix: &str) -> Vec<Metric> {
    let (h, q) = (config.horizons, config.outputs_per_horizon());
    let name = |m: &str| format!("{prefix}_{m}{suffix}");
    // Valid (target, output j) pairs, optionally of one horizon.
    let pairs = |j: usize, horizon: Option<usize>| -> (Vec<f32>, Vec<f32>) {
        let mut y = Vec::new();
        let mut p = Vec::new();
        for (i, (&t, &ok)) in f.target.iter().zip(&f.valid).enumerate() {
            if ok && horizon.is_none_or(|k| i % h == k) {
                y.push(t);
                p.push(f.forecast[i * q + j]);
            }
        }
        (y, p)
    };
    let point = point_output(&config.quantiles);
    let (y, p) = pairs(point, None);
    let m = fm::point_metrics(&y, &p);
    let mut out = vec![
        Metric::new(&name("mse"), m.mse),
        Metric::new(&name("mse_zero_forecast"), m.mse_zero_forecast),
        Metric::new(&name("skill"), m.skill),
        Metric::new(&name("hit_rate"), m.hit_rate),
        Metric::new(&name("correlation"), m.correlation),
    ];
    if h > 1 {
        for k in 0..h {
            let (y, p) = pairs(point, Some(k));
            let m = fm::point_metrics(&y, &p);
            out.push(Metric::new(&name(&format!("mse_h{}", k + 1)), m.mse));
            out.push(Metric::new(&name(&format!("skill_h{}", k + 1)), m.skill));
        }
    }
    for (j, &level_q) in config.quantiles.iter().enumerate() {
        let (y, p) = pairs(j, None);
        let l = level(level_q);
        out.push(Metric::new(
            &name(&format!("pinball_p{l}")),
            fm::pinball_loss(&y, &p, level_q),
        ));
        out.push(Metric::new(
            &name(&format!("qrisk_p{l}")),
            fm::quantile_risk(&y, &p, level_q),
        ));
    }
    if q >= 2 {
        let (y, lower) = pairs(0, None);
        let (_, upper) = pairs(q - 1, None);
        let (lo, hi) = (level(config.quantiles[0]), level(config.quantiles[q - 1]));
        out.push(Metric::new(
            &name(&format!("coverage_p{lo}_p{hi}")),
            fm::coverage(&y, &lower, &upper),
        ));
    }
    out
}
