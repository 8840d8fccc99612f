//! Daily bars with two planted inputs of the user's own, as columns of the
//! bar table: an observed-past covariate that leads returns by one bar, and
//! a known-future categorical event flag with a known effect. A model that
//! reads the columns can beat one that cannot, by an amount known in advance.
//!
//! Bars are weekdays from `start`. The log return of bar `t` is
//!
//! ```text
//! r_t = σ·(β·ofi_{t−1} + μ·[event_t = FOMC] + √(1 − β²)·ε_t),   ε, ofi ~ N(0, 1)
//! ```
//!
//! with `event_t` drawn each bar: `FOMC` with probability `p`, `CPI` with
//! probability `p` (no effect: a level that must be told apart), else
//! `none`. Columns: `ofi` (real, observed past: known at the bar's close,
//! it moves the next bar) and `event` (categorical, known future: the
//! calendar of releases is known in advance, it moves its own bar). Prices:
//! the open is the previous close, high and low a random distance outside
//! open and close, volume random; every value is a function of the seed.

use crate::column_read::{ColumnValues, NamedColumn};
use crate::timefmt::{self, NANOS_PER_DAY};
use crate::{BarInterval, BarTable};
use tli_rng::Rng;

/// The planted inputs' sizes (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct PlantedCovariates {
    pub symbol: String,
    pub bars: usize,
    /// The first bar's day (UTC ns); weekends are skipped.
    pub start: i64,
    pub seed: u64,
    /// σ: the daily return's scale.
    pub sigma: f64,
    /// β: the next return's loading on `ofi`.
    pub lead: f64,
    /// μ: the mean of an FOMC bar's return, in units of σ.
    pub event_effect: f64,
    /// p: each bar's chance of an FOMC (and, apart, of a CPI) release.
    pub event_rate: f64,
}

impl Default for PlantedCovariates {
    fn default() -> Self {
        Self {
            symbol: "ES".into(),
            bars: 3000,
            start: timefmt::parse("2012-01-02").unwrap_or(0),
            seed: 1,
            sigma: 0.01,
            lead: 0.5,
            event_effect: 1.5,
            event_rate: 0.08,
        }
    }
}

/// The event levels, in the order they are drawn.
pub const EVENTS: [&str; 3] = ["none", "FOMC", "CPI"];

/// The bars with their `ofi` and `event` columns (see the module docs).
pub fn planted_covariates(spec: &PlantedCovariates) -> BarTable {
    let mut rng = Rng::new(spec.seed ^ 0x0c0f_fee5);
    let mut table = BarTable::new(&spec.symbol, BarInterval::Day);
    let mut ofi = Vec::with_capacity(spec.bars);
    let mut event = Vec::with_capacity(spec.bars);
    let mut day = spec.start - spec.start.rem_euclid(NANOS_PER_DAY);
    let mut close = 2000.0f64;
    let mut previous_ofi = 0.0;
    let noise = (1.0 - spec.lead * spec.lead).max(0.0).sqrt();
    for _ in 0..spec.bars {
        while timefmt::weekday(day) >= 5 {
            day += NANOS_PER_DAY;
        }
        let u = rng.uniform();
        let this_event = if u < spec.event_rate {
            EVENTS[1]
        } else if u < 2.0 * spec.event_rate {
            EVENTS[2]
        } else {
            EVENTS[0]
        };
        let effect = if this_event == EVENTS[1] {
            spec.event_effect
        } else {
            0.0
        };
        let r = spec.sigma * (spec.lead * previous_ofi + effect + noise * rng.normal());
        let open = close;
        close = open * r.exp();
        let high = open.max(close) * (spec.sigma * 0.3 * rng.normal().abs()).exp();
        let low = open.min(close) * (-spec.sigma * 0.3 * rng.normal().abs()).exp();
        let volume = 1000 + rng.below(9000);
        table.push(day, open, high, low, close, volume);
        let this_ofi = rng.normal();
        ofi.push(this_ofi);
        event.push(Some(this_event.to_string()));
        previous_ofi = this_ofi;
        day += NANOS_PER_DAY;
    }
    table.extra = vec![
        NamedColumn {
            name: "ofi".into(),
            values: ColumnValues::Real(ofi),
        },
        NamedColumn {
            name: "event".into(),
            values: ColumnValues::Text(event),
        },
    ];
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planted_effects_are_in_the_bars() {
        let spec = PlantedCovariates {
            bars: 6000,
            ..PlantedCovariates::default()
        };
        let t = planted_covariates(&spec);
        t.validate(std::path::Path::new("planted")).unwrap();
        assert_eq!(t, planted_covariates(&spec), "a function of the seed");
        let r: Vec<f64> = (1..t.len())
            .map(|i| (t.close[i] / t.close[i - 1]).ln() / spec.sigma)
            .collect();
        let ColumnValues::Real(ofi) = &t.extra[0].values else {
            panic!()
        };
        let ColumnValues::Text(event) = &t.extra[1].values else {
            panic!()
        };
        // The return of bar i loads β on the ofi of bar i − 1.
        let n = r.len() as f64;
        let cov = (1..t.len()).map(|i| r[i - 1] * ofi[i - 1]).sum::<f64>() / n;
        assert!((cov - spec.lead).abs() < 0.05, "loading {cov}");
        // FOMC bars move μσ on average, CPI bars do not.
        let mean_of = |level: &str| {
            let v: Vec<f64> = (1..t.len())
                .filter(|&i| event[i].as_deref() == Some(level))
                .map(|i| r[i - 1] - spec.lead * ofi[i - 1])
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        assert!((mean_of("FOMC") - spec.event_effect).abs() < 0.15);
        assert!(mean_of("CPI").abs() < 0.15);
        assert!(t.ts.iter().all(|&ts| timefmt::weekday(ts) < 5));
    }
}
