//! A split's forecasts turned into the metrics every forecasting plugin
//! reports (Mamba-2, TFT), through [`forecast_metrics`](crate::forecast_metrics),
//! so the numbers are computed and named the same way everywhere.
//!
//! Names are `{prefix}_{metric}{suffix}`: the prefix is the split (`valid`,
//! `test`), the suffix `@SYMBOL` for one asset of a pooled task. `loss` is
//! the training loss on the set, as
//! [`masked_loss`](crate::forecast_loss::masked_loss) computes it on a batch
//! (the mean squared error of the point output for point forecasts, else
//! the pinball loss averaged over the quantile levels; averaged over the
//! valid targets; omitted when none is valid). Point metrics use the output
//! itself, or (quantile forecasts) the level nearest the median: `mse`,
//! `mse_zero_forecast`, `skill`, `hit_rate`, `correlation`, and with several
//! horizons `mse_h{h}`, `skill_h{h}`.
//! Quantile forecasts add per level `pinball_p{100q}` and `qrisk_p{100q}`
//! (and per horizon `qrisk_p{100q}_h{h}`), and the coverage of the
//! outermost pair `coverage_p{lo}_p{hi}`.

use crate::forecast_metrics as fm;
use crate::task_rows::AssetRows;
use crate::trade_report::{task_metrics, Market};
use tli_plugin_api::{Metric, PluginError};

/// Forecasts and targets of some windows, row-major `[windows × horizons]`
/// (forecasts `× outputs`), with the targets' validity and each window's asset.
#[derive(Clone, Debug, Default)]
pub struct ForecastSet {
    pub asset: Vec<u32>,
    /// Each window's last row, in the task's pooled row numbering
    /// ([`WindowEnd::row`](crate::task_rows::WindowEnd)).
    pub row: Vec<u32>,
    pub forecast: Vec<f32>,
    pub target: Vec<f32>,
    pub valid: Vec<bool>,
}

/// What the forecasts are: horizons per window, and the quantile levels of
/// the outputs (empty: one point forecast per horizon).
#[derive(Clone, Copy, Debug)]
pub struct ForecastLayout<'a> {
    pub horizons: usize,
    pub quantiles: &'a [f64],
}

impl ForecastLayout<'_> {
    pub fn outputs(&self) -> usize {
        self.quantiles.len().max(1)
    }
}

impl ForecastSet {
    /// The windows `rows` (indices into this set).
    pub fn subset(&self, rows: &[usize], layout: ForecastLayout<'_>) -> Self {
        let (h, q) = (layout.horizons, layout.outputs());
        let mut out = ForecastSet {
            asset: rows.iter().map(|&r| self.asset[r]).collect(),
            row: rows
                .iter()
                .filter_map(|&r| self.row.get(r).copied())
                .collect(),
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

    /// The metrics of the whole set, then (when `symbols` names more than
    /// one asset) of each asset's windows with the suffix `@SYMBOL`.
    pub fn metrics_with_assets(
        &self,
        layout: ForecastLayout<'_>,
        prefix: &str,
        symbols: &[&str],
    ) -> Vec<Metric> {
        let mut out = self.metrics(layout, prefix, "");
        if symbols.len() > 1 {
            for (i, symbol) in symbols.iter().enumerate() {
                let mine: Vec<usize> = (0..self.asset.len())
                    .filter(|&j| self.asset[j] as usize == i)
                    .collect();
                if !mine.is_empty() {
                    let part = self.subset(&mine, layout);
                    out.extend(part.metrics(layout, prefix, &format!("@{symbol}")));
                }
            }
        }
        out
    }

    /// The trading metrics of the default position rule
    /// ([`trade_report`](crate::trade_report)) on each asset's windows: the
    /// point forecast of horizon 1 at each window's last row.
    pub fn trading_metrics(
        &self,
        layout: ForecastLayout<'_>,
        assets: &[AssetRows],
        prefix: &str,
    ) -> Result<Vec<Metric>, PluginError> {
        let (h, q) = (layout.horizons, layout.outputs());
        let point = point_output(layout.quantiles);
        let mut per_asset: Vec<Vec<(usize, f64)>> = vec![Vec::new(); assets.len()];
        for (i, (&asset, &row)) in self.asset.iter().zip(&self.row).enumerate() {
            let Some(a) = assets.get(asset as usize) else {
                continue;
            };
            let local = (row as usize).saturating_sub(a.rows.start);
            per_asset[asset as usize].push((local, f64::from(self.forecast[i * h * q + point])));
        }
        let traded: Vec<(Vec<usize>, Vec<f64>)> = per_asset
            .into_iter()
            .map(|mut rows| {
                rows.sort_by_key(|(row, _)| *row);
                rows.into_iter().unzip()
            })
            .collect();
        let markets: Vec<Option<Market>> = assets.iter().map(|a| a.market.clone()).collect();
        task_metrics(&markets, &traded, prefix)
    }

    /// The metrics of the whole set (see the module docs).
    pub fn metrics(&self, layout: ForecastLayout<'_>, prefix: &str, suffix: &str) -> Vec<Metric> {
        let (h, q) = (layout.horizons, layout.outputs());
        let name = |m: &str| format!("{prefix}_{m}{suffix}");
        // Valid (target, output j) pairs, optionally of one horizon.
        let pairs = |j: usize, horizon: Option<usize>| -> (Vec<f32>, Vec<f32>) {
            let mut y = Vec::new();
            let mut p = Vec::new();
            for (i, (&t, &ok)) in self.target.iter().zip(&self.valid).enumerate() {
                if ok && horizon.is_none_or(|k| i % h == k) {
                    y.push(t);
                    p.push(self.forecast[i * q + j]);
                }
            }
            (y, p)
        };
        let point = point_output(layout.quantiles);
        let (y, p) = pairs(point, None);
        let m = fm::point_metrics(&y, &p);
        let mut out = Vec::new();
        if let Some(loss) = self.loss(layout) {
            out.push(Metric::new(&name("loss"), loss));
        }
        out.extend([
            Metric::new(&name("mse"), m.mse),
            Metric::new(&name("mse_zero_forecast"), m.mse_zero_forecast),
            Metric::new(&name("skill"), m.skill),
            Metric::new(&name("hit_rate"), m.hit_rate),
            Metric::new(&name("correlation"), m.correlation),
        ]);
        if h > 1 {
            for k in 0..h {
                let (y, p) = pairs(point, Some(k));
                let m = fm::point_metrics(&y, &p);
                out.push(Metric::new(&name(&format!("mse_h{}", k + 1)), m.mse));
                out.push(Metric::new(&name(&format!("skill_h{}", k + 1)), m.skill));
            }
        }
        for (j, &level_q) in layout.quantiles.iter().enumerate() {
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
            if h > 1 {
                for k in 0..h {
                    let (y, p) = pairs(j, Some(k));
                    out.push(Metric::new(
                        &name(&format!("qrisk_p{l}_h{}", k + 1)),
                        fm::quantile_risk(&y, &p, level_q),
                    ));
                }
            }
        }
        if q >= 2 {
            let (y, lower) = pairs(0, None);
            let (_, upper) = pairs(q - 1, None);
            let (lo, hi) = (level(layout.quantiles[0]), level(layout.quantiles[q - 1]));
            out.push(Metric::new(
                &name(&format!("coverage_p{lo}_p{hi}")),
                fm::coverage(&y, &lower, &upper),
            ));
        }
        out
    }
}

impl ForecastSet {
    /// The training loss on the set, as
    /// [`masked_loss`](crate::forecast_loss::masked_loss) computes it on a
    /// batch (in `f64` here): the squared error of output 0 for point
    /// forecasts, else the pinball loss `max(q·(y − ŷ_q), (q − 1)·(y − ŷ_q))`
    /// averaged over the levels; averaged over the valid targets. `None`
    /// when no target is valid.
    pub fn loss(&self, layout: ForecastLayout<'_>) -> Option<f64> {
        let q = layout.outputs();
        let (mut sum, mut count) = (0.0f64, 0usize);
        for (i, (&t, &ok)) in self.target.iter().zip(&self.valid).enumerate() {
            if !ok {
                continue;
            }
            let y = f64::from(t);
            let outputs = &self.forecast[i * q..(i + 1) * q];
            sum += if layout.quantiles.is_empty() {
                (f64::from(outputs[0]) - y).powi(2)
            } else {
                layout
                    .quantiles
                    .iter()
                    .zip(outputs)
                    .map(|(&level, &f)| {
                        let diff = y - f64::from(f);
                        (level * diff).max((level - 1.0) * diff)
                    })
                    .sum::<f64>()
                    / layout.quantiles.len() as f64
            };
            count += 1;
        }
        (count > 0).then(|| sum / count as f64)
    }
}

/// Output index of the point forecast: 0, or the quantile nearest 0.5.
pub fn point_output(quantiles: &[f64]) -> usize {
    quantiles
        .iter()
        .enumerate()
        .min_by(|a, b| (a.1 - 0.5).abs().total_cmp(&(b.1 - 0.5).abs()))
        .map(|(i, _)| i)
        .unwrap_or(0)
}

/// Percent label of a quantile level (0.1 → "10", 0.025 → "2.5").
pub fn level(q: f64) -> String {
    let p = q * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{}", p.round() as i64)
    } else {
        format!("{p}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forecast_loss::masked_loss;
    use tch::Tensor;

    /// Three windows × two horizons, one target invalid (and NaN, as
    /// unknown targets are).
    fn set(outputs: usize) -> ForecastSet {
        let target = vec![0.5f32, -1.0, 0.25, f32::NAN, -0.75, 2.0];
        let valid = target.iter().map(|t| t.is_finite()).collect();
        let forecast = (0..target.len() * outputs)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.3)
            .collect();
        ForecastSet {
            asset: vec![0; 3],
            row: vec![10, 11, 12],
            forecast,
            target,
            valid,
        }
    }

    /// `masked_loss` on the set as one batch `[windows, horizons, outputs]`.
    fn batch_loss(set: &ForecastSet, quantiles: &[f64]) -> f64 {
        let q = quantiles.len().max(1) as i64;
        let n = set.target.len() as i64;
        let forecast = Tensor::from_slice(&set.forecast).reshape([n / 2, 2, q]);
        // The loss multiplies by the mask: unknown targets enter as 0, as the
        // trainers' target tensors hold them.
        let y: Vec<f32> = set
            .target
            .iter()
            .map(|t| if t.is_finite() { *t } else { 0.0 })
            .collect();
        let y = Tensor::from_slice(&y).reshape([n / 2, 2]);
        let valid: Vec<f32> = set.valid.iter().map(|&v| f32::from(u8::from(v))).collect();
        let valid = Tensor::from_slice(&valid).reshape([n / 2, 2]);
        masked_loss(&forecast, &y, &valid, quantiles)
            .unwrap()
            .double_value(&[])
    }

    #[test]
    fn the_reported_loss_is_the_training_loss() {
        for quantiles in [&[][..], &[0.1, 0.5, 0.9][..]] {
            let set = set(quantiles.len().max(1));
            let layout = ForecastLayout {
                horizons: 2,
                quantiles,
            };
            let expected = batch_loss(&set, quantiles);
            let metrics = set.metrics(layout, "valid", "@ES");
            let reported = metrics
                .iter()
                .find(|m| m.name.as_str() == "valid_loss@ES")
                .expect("valid_loss@ES")
                .value;
            assert!(
                (reported - expected).abs() <= 1e-6 * expected.abs().max(1.0),
                "{quantiles:?}: {reported} vs {expected}"
            );
            assert!(expected > 0.0);
        }
        // Point forecasts: the loss is the MSE of the output.
        let set = set(1);
        let layout = ForecastLayout {
            horizons: 2,
            quantiles: &[],
        };
        let metrics = set.metrics(layout, "test", "");
        let value = |name: &str| {
            metrics
                .iter()
                .find(|m| m.name.as_str() == name)
                .unwrap()
                .value
        };
        assert_eq!(value("test_loss"), value("test_mse"));
        // No valid target: no loss.
        let none = ForecastSet {
            valid: vec![false; 6],
            ..set
        };
        assert_eq!(none.loss(layout), None);
        assert!(!none
            .metrics(layout, "valid", "")
            .iter()
            .any(|m| m.name.as_str() == "valid_loss"));
    }
}
