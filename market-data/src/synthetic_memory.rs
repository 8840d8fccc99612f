//! A synthetic dataset with a planted *long-memory* signal: the next return
//! depends on a feature seen `delay` or more bars earlier and on nothing
//! nearer, so a model that cannot look that far back has no skill at all.
//!
//! Bars come in blocks of `period` bars. The first bar of block `b` carries
//! the feature `pulse = s_b` (±1, a fair coin; 0 on every other bar). The
//! return of a bar at offset `j` in its block is
//! `σ·(μ·s_b·[j > delay] + ε)`, `ε ~ N(0, 1)`: the row `t` at offset `k`
//! forecasts the return of bar `t + 1`, which carries the signal exactly when
//! `k ≥ delay` and `t + 1` is still in the block, i.e. the pulse that
//! matters is at least `delay` bars before the forecast row. `pulse` is the
//! only feature (no past return is one: returns inside the signal stretch
//! would carry the sign from nearer bars). Targets are the next return
//! divided by the training split's standard deviation.
//!
//! The best forecast is known: [`PlantedMemory::oracle`] holds it per row
//! (in target units), so the *achievable* skill on any split is measured on
//! the same rows as a model's. In the population it is `f·μ²/(1 + f·μ²)` with
//! `f = (period − 1 − delay)/period` the fraction of rows that carry signal
//! ([`PlantedMemorySpec::population_skill`]).

use crate::features::AnnotatedDataset;
use crate::synthetic_ar::{synthetic_contract, synthetic_splits};
use abi_stable::std_types::RString;
use tli_plugin_api::{Dataset, DatasetAnnex, FeatureRole};
use tli_rng::Rng;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlantedMemorySpec {
    pub rows: usize,
    /// Bars per block (one pulse each).
    pub period: usize,
    /// Rows at least this many bars after their block's pulse carry the signal.
    pub delay: usize,
    /// Signal size in units of the noise's σ.
    pub effect: f64,
    pub seed: u64,
}

impl Default for PlantedMemorySpec {
    fn default() -> Self {
        Self {
            rows: 20_000,
            period: 256,
            delay: 200,
            effect: 1.5,
            seed: 11,
        }
    }
}

impl PlantedMemorySpec {
    /// Fraction of rows whose target carries the signal.
    pub fn signal_fraction(&self) -> f64 {
        self.period.saturating_sub(1 + self.delay) as f64 / self.period.max(1) as f64
    }

    /// The best forecast's skill over the zero forecast, in the population.
    pub fn population_skill(&self) -> f64 {
        let s = self.signal_fraction() * self.effect.powi(2);
        s / (1.0 + s)
    }
}

pub struct PlantedMemory {
    pub data: AnnotatedDataset,
    /// The best forecast of each row's target (target units).
    pub oracle: Vec<f32>,
}

/// Builds the dataset: 70% train, 15% validation, 15% test (no embargo is
/// needed: every feature is of its own bar).
pub fn planted_memory(spec: PlantedMemorySpec) -> PlantedMemory {
    let PlantedMemorySpec {
        rows,
        period,
        delay,
        effect,
        seed,
    } = spec;
    let period = period.max(1);
    const SIGMA: f64 = 0.01;
    let mut rng = Rng::new(seed);
    // Bar j's block sign, pulse and return (one bar beyond the last row).
    let mut sign = 1.0;
    let mut pulse = Vec::with_capacity(rows);
    let mut mean = Vec::with_capacity(rows + 1);
    let mut returns = Vec::with_capacity(rows + 1);
    for j in 0..=rows {
        let offset = j % period;
        if offset == 0 {
            sign = if rng.uniform() < 0.5 { -1.0 } else { 1.0 };
        }
        if j < rows {
            pulse.push(if offset == 0 { sign as f32 } else { 0.0 });
        }
        let m = if offset > delay { effect * sign } else { 0.0 };
        mean.push(m);
        returns.push(SIGMA * (m + rng.normal()));
    }
    let train_end = rows * 70 / 100;
    let scale = {
        let train = &returns[1..=train_end.max(1).min(rows)];
        let m = train.iter().sum::<f64>() / train.len() as f64;
        (train.iter().map(|r| (r - m).powi(2)).sum::<f64>() / train.len() as f64).sqrt()
    };
    let mut features = Vec::with_capacity(rows);
    let mut targets = Vec::with_capacity(rows);
    let mut oracle = Vec::with_capacity(rows);
    let mut close = Vec::with_capacity(rows);
    let mut timestamps = Vec::with_capacity(rows);
    let mut log_price = 100f64.ln();
    const DAY_NS: i64 = 86_400_000_000_000;
    const START_NS: i64 = 946_684_800_000_000_000; // 2000-01-01T00:00:00Z
    for t in 0..rows {
        log_price += returns[t];
        close.push(log_price.exp());
        features.push(pulse[t]);
        targets.push((returns[t + 1] / scale) as f32);
        oracle.push((SIGMA * mean[t + 1] / scale) as f32);
        timestamps.push(START_NS + t as i64 * DAY_NS);
    }
    let annex = DatasetAnnex {
        feature_roles: vec![FeatureRole::ObservedPast; 1],
        feature_variables: Vec::new(),
        target_horizons: vec![1],
        target_scales: vec![scale],
        bar_interval_ns: DAY_NS,
        row_markers: vec![0; rows],
        asset_index: 0,
    };
    let dataset = Dataset {
        symbol: RString::from("SYNTH-MEMORY"),
        timestamps: timestamps.into(),
        features: features.into(),
        feature_names: vec![RString::from("pulse")].into(),
        targets: targets.into(),
        target_names: vec![RString::from("fwd_ret_1")].into(),
        splits: synthetic_splits(rows, 0),
        close: close.into(),
        contract: synthetic_contract(),
        periods_per_year: 252.0,
    };
    PlantedMemory {
        data: AnnotatedDataset { dataset, annex },
        oracle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signal_sits_delay_bars_after_the_pulse_and_nowhere_nearer() {
        let spec = PlantedMemorySpec {
            rows: 4096,
            ..PlantedMemorySpec::default()
        };
        let p = planted_memory(spec);
        let d = &p.data.dataset;
        d.check_consistent().unwrap();
        let pulse_at = |t: usize| d.features[t];
        for t in 0..d.rows() {
            let k = t % spec.period;
            let carries = k >= spec.delay && k + 1 < spec.period;
            assert_eq!(p.oracle[t] != 0.0, carries, "row {t}");
            if carries {
                // The oracle's sign is the pulse k ≥ delay bars back.
                let s = pulse_at(t - k);
                assert_eq!(p.oracle[t].signum(), s, "row {t}");
                for near in t - k + 1..=t {
                    assert_eq!(pulse_at(near), 0.0);
                }
            }
        }
        assert_eq!(planted_memory(spec).oracle, p.oracle);
        let f = spec.signal_fraction();
        assert!((f - 55.0 / 256.0).abs() < 1e-12);
        assert!(spec.population_skill() > 0.3);
    }
}
