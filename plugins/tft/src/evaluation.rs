//! A split's forecasts and the TFT's interpretability readouts.
//!
//! Forecast metrics come from the kit's
//! [`forecast_report`](tli_plugin_kit::forecast_report) (q-risk per level,
//! overall and per horizon; P10–P90 coverage; point metrics of the median;
//! per asset in a pooled task). The TFT adds, per split:
//!
//! * `{split}_vsn_static_{name}`, `{split}_vsn_past_{name}`,
//!   `{split}_vsn_future_{name}`: the mean variable-selection weight of each
//!   input over the split's windows (and bars); `position` is the relative
//!   time input, `asset` the asset embedding (a categorical column is one
//!   input, named by its column);
//! * `{split}_vsn_last_{name}`: the past weights on the last encoder bar
//!   alone (the bar the forecast is made at: an input that moves only the
//!   next bar shows there, not in the mean over every past bar);
//! * `{split}_attention_lag_h{h}`: the attention-weighted mean distance in
//!   bars from decoder bar `h` back to the bars it attends to (averaged over
//!   heads and windows), and `{split}_attention_encoder_h{h}` the share of
//!   its attention on the encoder (past) bars.

use crate::batches::TftData;
use crate::config::TftConfig;
use crate::model::{TftBatch, TftOutput};
use tch::{Kind, Tensor};
use tli_plugin_api::{Metric, PluginError};
use tli_plugin_kit::data::Split;
use tli_plugin_kit::forecast_report::{ForecastLayout, ForecastSet};
use tli_plugin_kit::TchResultExt;

/// Sums of the interpretability outputs over a split's windows.
struct Readouts {
    windows: f64,
    static_weights: Vec<f64>,
    past_weights: Vec<f64>,
    /// Past weights on each window's last encoder bar.
    last_weights: Vec<f64>,
    future_weights: Vec<f64>,
    /// Per horizon: Σ attention · lag, Σ attention on encoder bars.
    lag: Vec<f64>,
    encoder_share: Vec<f64>,
}

fn to_f64(t: &Tensor) -> Result<Vec<f64>, PluginError> {
    t.f_to_kind(Kind::Double)
        .and_then(|t| t.f_reshape([-1]))
        .and_then(|t| Vec::<f64>::try_from(&t))
        .plugin_err("reading evaluation outputs")
}

fn to_f32(t: &Tensor) -> Result<Vec<f32>, PluginError> {
    t.f_to_kind(Kind::Float)
        .and_then(|t| t.f_reshape([-1]))
        .and_then(|t| Vec::<f32>::try_from(&t))
        .plugin_err("reading evaluation outputs")
}

/// The metrics of `split` (none when it has no window), from forward
/// passes over `pass_windows` windows at a time.
pub fn split_metrics(
    forward: &mut dyn FnMut(&TftBatch) -> Result<TftOutput, PluginError>,
    config: &TftConfig,
    data: &TftData,
    split: Split,
    pass_windows: usize,
) -> Result<Vec<Metric>, PluginError> {
    let windows = data.rows.windows(split);
    if windows.is_empty() {
        return Ok(Vec::new());
    }
    let prefix = match split {
        Split::Train => "train",
        Split::Validation => "valid",
        Split::Test => "test",
    };
    let ctx = "summarising attention";
    let (t, h) = (config.lookback as i64, config.horizons as i64);
    // lag[h, k] = (t + h) − k for decoder bar h (0-based) and key k; encoder mask k < t.
    let keys = Tensor::f_arange(t + h, (Kind::Float, tch::Device::Cpu)).plugin_err(ctx)?;
    let queries = Tensor::f_arange_start(t, t + h, (Kind::Float, tch::Device::Cpu))
        .plugin_err(ctx)?
        .f_unsqueeze(1)
        .plugin_err(ctx)?;
    let lags = queries
        .f_sub(&keys)
        .plugin_err(ctx)?
        .f_clamp_min(0.0)
        .plugin_err(ctx)?;
    let encoder = keys
        .f_lt(t as f64)
        .plugin_err(ctx)?
        .f_to_kind(Kind::Float)
        .plugin_err(ctx)?;

    let mut set = ForecastSet::default();
    let mut r = Readouts {
        windows: 0.0,
        static_weights: vec![0.0; 1 + data.static_variable_names().len()],
        past_weights: vec![0.0; data.past_variable_names().len() + 1],
        last_weights: vec![0.0; data.past_variable_names().len() + 1],
        future_weights: vec![0.0; data.future_variable_names().len() + 1],
        lag: vec![0.0; config.horizons],
        encoder_share: vec![0.0; config.horizons],
    };
    for chunk in windows.chunks(pass_windows.max(1)) {
        let batch = data.batch(chunk, config.lookback, config.horizons)?;
        let out = forward(&batch.inputs)?;
        set.asset.extend(chunk.iter().map(|w| w.asset));
        set.row.extend(chunk.iter().map(|w| w.row));
        set.forecast.extend(to_f32(&out.forecast)?);
        set.target.extend(to_f32(&batch.targets)?);
        set.valid
            .extend(to_f32(&batch.valid)?.into_iter().map(|v| v > 0.5));
        r.windows += chunk.len() as f64;
        let sum_over = |w: &Tensor, dims: &[i64]| -> Result<Vec<f64>, PluginError> {
            to_f64(
                &w.f_sum_dim_intlist(dims, false, Kind::Double)
                    .plugin_err(ctx)?,
            )
        };
        add(&mut r.static_weights, &sum_over(&out.static_weights, &[0])?);
        // Past and future weights: mean over bars, summed over windows.
        let last = out.past_weights.f_select(1, t - 1).plugin_err(ctx)?;
        add(&mut r.last_weights, &sum_over(&last, &[0])?);
        let past = sum_over(&out.past_weights, &[0, 1])?;
        add(
            &mut r.past_weights,
            &past.iter().map(|v| v / t as f64).collect::<Vec<_>>(),
        );
        let future = sum_over(&out.future_weights, &[0, 1])?;
        add(
            &mut r.future_weights,
            &future.iter().map(|v| v / h as f64).collect::<Vec<_>>(),
        );
        // Attention [B, heads, H, T+H] → mean over heads, summed over windows: [H, T+H].
        let heads = out.attention.size()[1] as f64;
        let a = out
            .attention
            .f_to_device(tch::Device::Cpu)
            .and_then(|a| a.f_sum_dim_intlist([0i64, 1].as_slice(), false, Kind::Float))
            .and_then(|a| a.f_div_scalar(heads))
            .plugin_err(ctx)?;
        let lag = a.f_mul(&lags).plugin_err(ctx)?;
        add(&mut r.lag, &sum_over(&lag, &[1])?);
        let enc = a.f_mul(&encoder).plugin_err(ctx)?;
        add(&mut r.encoder_share, &sum_over(&enc, &[1])?);
    }
    let layout = ForecastLayout {
        horizons: config.horizons,
        quantiles: &config.quantiles,
    };
    let symbols: Vec<&str> = data.rows.assets.iter().map(|a| a.symbol.as_str()).collect();
    let mut metrics = vec![Metric::new(&format!("{prefix}_windows"), r.windows)];
    metrics.extend(set.metrics_with_assets(layout, prefix, &symbols));
    metrics.extend(set.trading_metrics(layout, &data.rows.assets, prefix)?);
    let mean = |v: f64| v / r.windows.max(1.0);
    let mut named = |group: &str, names: Vec<String>, sums: &[f64]| {
        for (name, sum) in names.iter().zip(sums) {
            metrics.push(Metric::new(
                &format!("{prefix}_vsn_{group}_{name}"),
                mean(*sum),
            ));
        }
    };
    let with = |head: &[&str], names: &[String], tail: &[&str]| -> Vec<String> {
        head.iter()
            .map(|s| s.to_string())
            .chain(names.iter().cloned())
            .chain(tail.iter().map(|s| s.to_string()))
            .collect()
    };
    named(
        "static",
        with(&["asset"], &data.static_variable_names(), &[]),
        &r.static_weights,
    );
    named(
        "past",
        with(&[], &data.past_variable_names(), &["position"]),
        &r.past_weights,
    );
    named(
        "last",
        with(&[], &data.past_variable_names(), &["position"]),
        &r.last_weights,
    );
    named(
        "future",
        with(&[], &data.future_variable_names(), &["position"]),
        &r.future_weights,
    );
    for k in 0..config.horizons {
        metrics.push(Metric::new(
            &format!("{prefix}_attention_lag_h{}", k + 1),
            mean(r.lag[k]),
        ));
        metrics.push(Metric::new(
            &format!("{prefix}_attention_encoder_h{}", k + 1),
            mean(r.encoder_share[k]),
        ));
    }
    Ok(metrics)
}

fn add(total: &mut [f64], part: &[f64]) {
    for (t, p) in total.iter_mut().zip(part) {
        *t += p;
    }
}
