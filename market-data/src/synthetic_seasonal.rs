//! A synthetic multi-asset dataset with a planted *known-future* effect and
//! an *observed-past* effect, for the TFT: the return of a bar depends on
//! its calendar slot (weekday × session slot, known in advance) with an
//! asset-specific amplitude, and on a flow feature observed on the bar
//! before it (known only in the past).
//!
//! Bars are `slots` per day, five days a week. For asset `a` the return of
//! bar `t` is `σ·(A_a·S[w_t, k_t] + β·flow_{t−1} + ε_t)`, `ε ~ N(0, 1)`,
//! with `S` a fixed weekday × slot table (zero mean, unit variance, drawn
//! from the seed), `A_a` the asset's amplitude (1, −0.6, 0.4, … by asset
//! index: a pooled model must tell the assets apart), and `flow ~ N(0, 1)`.
//! Features of row `t`: `flow` (observed past), and the calendar of bar
//! `t` as `dow_sin`, `dow_cos`, `slot_sin`, `slot_cos` (known future).
//! The target of row `t` is the return of bar `t + 1` divided by the
//! training split's standard deviation.
//!
//! [`SeasonalAsset::expected`] gives the best forecast of the return of any
//! bar from the information at an earlier row (the seasonal mean, plus the
//! flow term for the next bar only), in target units, so the achievable
//! q-risk and skill are measured on the same rows as a model's.

use crate::features::AnnotatedDataset;
use crate::synthetic_ar::{synthetic_contract, synthetic_splits};
use abi_stable::std_types::RString;
use tli_plugin_api::{Dataset, DatasetAnnex, FeatureRole};
use tli_rng::Rng;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeasonalSpec {
    pub rows: usize,
    pub assets: usize,
    /// Bars per day.
    pub slots: usize,
    /// Size of the seasonal effect in units of the noise's σ (asset 0's amplitude).
    pub seasonal: f64,
    /// β: the next return's loading on the observed flow.
    pub flow: f64,
    pub seed: u64,
}

impl Default for SeasonalSpec {
    fn default() -> Self {
        Self {
            rows: 8000,
            assets: 3,
            slots: 8,
            seasonal: 1.0,
            flow: 0.5,
            seed: 21,
        }
    }
}

/// One asset: its dataset and what the best forecasts need.
pub struct SeasonalAsset {
    pub data: AnnotatedDataset,
    /// The seasonal mean of each bar's return (`rows + horizon` bars; target units).
    seasonal_mean: Vec<f64>,
    /// β·flow of each row, the flow part of the next bar's mean (target units).
    flow_mean: Vec<f64>,
}

impl SeasonalAsset {
    /// The best forecast, at row `t`, of the return of bar `t + h` (`h ≥ 1`;
    /// `h = 1` is row `t`'s target), in target units.
    pub fn expected(&self, t: usize, h: usize) -> f64 {
        let flow = if h == 1 { self.flow_mean[t] } else { 0.0 };
        self.seasonal_mean[t + h] + flow
    }
}

/// Amplitude of asset `a`: 1, −0.6, 0.4, −0.8, 0.7, … (alternating signs).
fn amplitude(a: usize) -> f64 {
    const A: [f64; 5] = [1.0, -0.6, 0.4, -0.8, 0.7];
    A[a % A.len()]
}

/// Builds every asset: 70% train, 15% validation, 15% test; the same
/// calendar for all, independent noise and flow per asset.
pub fn planted_seasonal(spec: SeasonalSpec) -> Vec<SeasonalAsset> {
    const SIGMA: f64 = 0.01;
    const HORIZON_SPARE: usize = 64;
    let slots = spec.slots.max(1);
    let week = 5 * slots;
    // The weekday × slot table: standard normal, then centred and scaled to unit variance.
    let mut rng = Rng::new(spec.seed);
    let mut table: Vec<f64> = (0..week).map(|_| rng.normal()).collect();
    let mean = table.iter().sum::<f64>() / week as f64;
    let sd = (table.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / week as f64).sqrt();
    for v in &mut table {
        *v = (*v - mean) / sd.max(1e-12);
    }
    let bars = spec.rows + HORIZON_SPARE;
    const SLOT_NS: i64 = 3_600_000_000_000;
    const DAY_NS: i64 = 86_400_000_000_000;
    const START_NS: i64 = 946_857_600_000_000_000; // Monday 2000-01-03T00:00:00Z
    let timestamp = |t: usize| {
        let (week_no, in_week) = (t / week, t % week);
        let (day, slot) = (in_week / slots, in_week % slots);
        START_NS + (week_no as i64 * 7 + day as i64) * DAY_NS + slot as i64 * SLOT_NS
    };
    let calendar = |t: usize| -> [f32; 4] {
        let in_week = t % week;
        let (day, slot) = (in_week / slots, in_week % slots);
        let d = std::f64::consts::TAU * day as f64 / 5.0;
        let s = std::f64::consts::TAU * slot as f64 / slots as f64;
        [
            d.sin() as f32,
            d.cos() as f32,
            s.sin() as f32,
            s.cos() as f32,
        ]
    };
    let train_end = spec.rows * 70 / 100;
    (0..spec.assets.max(1))
        .map(|a| {
            let mut rng = Rng::new(spec.seed).fork(100 + a as u64);
            let amp = spec.seasonal * amplitude(a);
            let flow: Vec<f64> = (0..bars).map(|_| rng.normal()).collect();
            let mean: Vec<f64> = (0..bars).map(|t| amp * table[t % week]).collect();
            let returns: Vec<f64> = (0..bars)
                .map(|t| {
                    let past = if t > 0 { spec.flow * flow[t - 1] } else { 0.0 };
                    SIGMA * (mean[t] + past + rng.normal())
                })
                .collect();
            let scale = {
                let train = &returns[1..=train_end.max(1)];
                let m = train.iter().sum::<f64>() / train.len() as f64;
                (train.iter().map(|r| (r - m).powi(2)).sum::<f64>() / train.len() as f64).sqrt()
            };
            let mut features = Vec::with_capacity(spec.rows * 5);
            let mut targets = Vec::with_capacity(spec.rows);
            let mut close = Vec::with_capacity(spec.rows);
            let mut log_price = 100f64.ln();
            for t in 0..spec.rows {
                log_price += returns[t];
                close.push(log_price.exp());
                features.push(flow[t] as f32);
                features.extend(calendar(t));
                targets.push((returns[t + 1] / scale) as f32);
            }
            let symbol = format!("SYNTH-SEASON-{a}");
            let names = ["flow", "dow_sin", "dow_cos", "slot_sin", "slot_cos"];
            let annex = DatasetAnnex {
                feature_roles: vec![
                    FeatureRole::ObservedPast,
                    FeatureRole::KnownFuture,
                    FeatureRole::KnownFuture,
                    FeatureRole::KnownFuture,
                    FeatureRole::KnownFuture,
                ],
                feature_variables: Vec::new(),
                target_horizons: vec![1],
                target_scales: vec![scale],
                bar_interval_ns: SLOT_NS,
                row_markers: vec![0; spec.rows],
                asset_index: a as u32,
            };
            let dataset = Dataset {
                symbol: RString::from(symbol.as_str()),
                timestamps: (0..spec.rows).map(timestamp).collect::<Vec<_>>().into(),
                features: features.into(),
                feature_names: names
                    .iter()
                    .map(|n| RString::from(*n))
                    .collect::<Vec<_>>()
                    .into(),
                targets: targets.into(),
                target_names: vec![RString::from("fwd_ret_1")].into(),
                splits: synthetic_splits(spec.rows, 0),
                close: close.into(),
                contract: synthetic_contract(),
                periods_per_year: 252.0 * slots as f64,
            };
            SeasonalAsset {
                data: AnnotatedDataset { dataset, annex },
                seasonal_mean: mean.iter().map(|m| SIGMA * m / scale).collect(),
                flow_mean: flow.iter().map(|f| SIGMA * spec.flow * f / scale).collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_carry_the_planted_means_and_the_oracle_beats_zero() {
        let spec = SeasonalSpec {
            rows: 20_000,
            ..SeasonalSpec::default()
        };
        let assets = planted_seasonal(spec);
        assert_eq!(assets.len(), 3);
        for (a, asset) in assets.iter().enumerate() {
            let d = &asset.data.dataset;
            d.check_consistent().unwrap();
            assert_eq!(asset.data.annex.asset_index, a as u32);
            // Row t's target is bar t + 1's return: its best forecast is expected(t, 1).
            let (mut err, mut zero) = (0.0, 0.0);
            for t in 0..d.rows() {
                let y = d.targets[t] as f64;
                err += (y - asset.expected(t, 1)).powi(2);
                zero += y * y;
            }
            let skill = 1.0 - err / zero;
            // Population skill: (A²s² + β²) / (1 + A²s² + β²).
            let explained = (spec.seasonal * amplitude(a)).powi(2) + spec.flow.powi(2);
            let want = explained / (1.0 + explained);
            assert!(
                (skill - want).abs() < 0.03,
                "asset {a}: skill {skill}, want {want}"
            );
        }
        // Same seed, same data; the calendar is the same for every asset.
        let again = planted_seasonal(spec);
        assert_eq!(
            again[1].data.dataset.targets,
            assets[1].data.dataset.targets
        );
        assert_eq!(
            assets[0].data.dataset.timestamps,
            assets[2].data.dataset.timestamps
        );
    }
}
