//! Deterministic synthetic futures bars (`tli data synth`), realistic enough
//! to exercise models and pipelines, with an optional planted predictable
//! component of known strength so tests can check that a model learns.
//!
//! Per bar, with `z` the standardized return:
//! * **planted component**: `z_t = ρ·z_{t−1} + √(1−ρ²)·ε_t`, so consecutive
//!   standardized returns correlate at exactly ρ (`planted_strength`) in
//!   expectation; ρ = 0 gives no predictability at all.
//! * **fat tails**: ε is Student-t with 4 degrees of freedom, scaled to unit variance.
//! * **volatility clustering**: GARCH(1,1) variance multiplier
//!   `v_t = (1−α−β) + α·v_{t−1}·ε²_{t−1} + β·v_{t−1}` (α = 0.06, β = 0.92).
//! * **regime shifts**: a two-state Markov chain (calm: 0.8× vol, slight
//!   up-drift; stressed: 1.8× vol, down-drift), mean stays 120 / 40 trading days.
//! * **intraday seasonality** (bars under a day): a U-shaped volatility and
//!   volume profile over the CME Globex session (23:00–22:00 UTC, Sun–Fri).
//! * prices on the contract's tick grid; daily bars on weekdays.
//! * contracts: quarterly outrights (H, M, U, Z; expiry on the third Friday)
//!   named like `ESH24`, with volume migrating to the next contract in the week before expiry, so
//!   the reader's roll logic has real rolls to find; or one instrument.
//!
//! The returned log-return of bar t is `drift + σ·s(τ)·√v_t·m_regime·z_t`,
//! with σ the contract's annual volatility per bar.

use super::contracts::ContractSpec;
use super::table::{BarInterval, BarTable, ContractBars};
use super::timefmt::{self, NANOS_PER_DAY};
use super::DataError;
use tli_rng::Rng;

#[derive(Clone, Debug)]
pub struct SynthSpec {
    /// `ES.FUT` (quarterly contracts with rolls) or a root like `ES`.
    pub symbol: String,
    pub interval: BarInterval,
    pub bars: usize,
    /// First bar at or after this time (UTC ns).
    pub start: i64,
    pub seed: u64,
    /// ρ in the module docs, in (−1, 1).
    pub planted_strength: f64,
    /// One instrument instead of quarterly contracts.
    pub single_contract: bool,
}

const MONTH_CODES: [(u32, char); 4] = [(3, 'H'), (6, 'M'), (9, 'U'), (12, 'Z')];
const SESSION_OPEN_MINUTE: i64 = 23 * 60; // 23:00 UTC
const SESSION_MINUTES: i64 = 23 * 60;

/// Bar open times: weekdays for daily bars; the Globex week (Sunday 23:00 to
/// Friday 22:00 UTC, closed 22:00–23:00 daily) for shorter bars.
fn schedule(start: i64, interval: BarInterval, bars: usize) -> Vec<i64> {
    let step = interval.nanos();
    let mut out = Vec::with_capacity(bars);
    let mut t = start.div_euclid(step) * step;
    if t < start {
        t += step;
    }
    while out.len() < bars {
        let weekday = timefmt::weekday(t); // 0 = Monday
        let open = if interval == BarInterval::Day {
            weekday < 5
        } else {
            let minute = t.rem_euclid(NANOS_PER_DAY) / 60_000_000_000;
            let in_break = (22 * 60..23 * 60).contains(&minute);
            let weekend = weekday == 5
                || (weekday == 4 && minute >= 22 * 60)
                || (weekday == 6 && minute < 23 * 60);
            !in_break && !weekend
        };
        if open {
            out.push(t);
        }
        t += step;
    }
    out
}

/// Position in the trading session, in [0, 1).
fn session_phase(ts: i64) -> f64 {
    let minute = ts.rem_euclid(NANOS_PER_DAY) / 60_000_000_000;
    ((minute - SESSION_OPEN_MINUTE).rem_euclid(24 * 60)).min(SESSION_MINUTES - 1) as f64
        / SESSION_MINUTES as f64
}

/// U-shaped intraday activity, mean 1 over the session.
fn seasonality(ts: i64, interval: BarInterval) -> f64 {
    if interval == BarInterval::Day {
        return 1.0;
    }
    let x = 2.0 * session_phase(ts) - 1.0;
    (0.6 + 1.6 * x * x) / (0.6 + 1.6 / 3.0)
}

fn student_t4(rng: &mut Rng) -> f64 {
    let nu = 4.0;
    let chi2: f64 = (0..4).map(|_| rng.normal().powi(2)).sum();
    rng.normal() / (chi2 / nu).sqrt() / (nu / (nu - 2.0)).sqrt()
}

fn round_to_tick(price: f64, tick: f64) -> f64 {
    ((price / tick).round() * tick * 1e9).round() / 1e9
}

/// Third Friday of a month, 00:00 UTC.
fn third_friday(year: i64, month: u32) -> i64 {
    let first = timefmt::days_from_civil(year, month, 1) * NANOS_PER_DAY;
    let offset = (4 + 7 - timefmt::weekday(first) as i64) % 7;
    first + (offset + 14) * NANOS_PER_DAY
}

/// Quarterly contracts covering `[from, to]`: (raw symbol, expiry).
fn quarterly_contracts(root: &str, from: i64, to: i64) -> Vec<(String, i64)> {
    let (mut year, _, _) = timefmt::civil_from_days(from.div_euclid(NANOS_PER_DAY));
    let mut out = Vec::new();
    loop {
        for (month, code) in MONTH_CODES {
            let expiry = third_friday(year, month);
            if expiry > from {
                out.push((format!("{root}{code}{:02}", year.rem_euclid(100)), expiry));
            }
            if expiry > to && out.len() >= 2 {
                return out;
            }
        }
        year += 1;
    }
}

/// Generates the bars, per contract.
pub fn generate(spec: &SynthSpec, contract: &ContractSpec) -> Result<Vec<ContractBars>, DataError> {
    let bad = |m: String| DataError::Invalid(format!("synthetic data: {m}"));
    if spec.planted_strength.is_nan() || spec.planted_strength.abs() >= 1.0 {
        return Err(bad(format!(
            "planted strength {} must be in (-1, 1)",
            spec.planted_strength
        )));
    }
    if spec.bars < 2 {
        return Err(bad("at least 2 bars are needed".into()));
    }
    let times = schedule(spec.start, spec.interval, spec.bars);
    let ppy = spec.interval.periods_per_year();
    let sigma = contract.annual_volatility.unwrap_or(0.2) / ppy.sqrt();
    let tick = contract.tick_size;
    let mut rng = Rng::new(spec.seed);
    let bars_per_day = (ppy / 252.0).max(1.0);
    let switch_prob = [1.0 / (120.0 * bars_per_day), 1.0 / (40.0 * bars_per_day)];
    let (vol_mult, drift) = ([0.8, 1.8], [0.05 / ppy, -0.10 / ppy]);
    let base_volume = 1_500_000.0 / bars_per_day;
    let rho = spec.planted_strength;

    let mut front = BarTable::new(&spec.symbol, spec.interval);
    let (mut regime, mut v, mut z, mut eps_prev) = (0usize, 1.0f64, 0.0f64, 0.0f64);
    let mut log_price = contract.reference_price.unwrap_or(100.0).ln();
    let mut prev_close = round_to_tick(log_price.exp(), tick);
    let mut volumes = Vec::with_capacity(times.len());
    for &t in &times {
        if rng.uniform() < switch_prob[regime] {
            regime = 1 - regime;
        }
        v = (1.0 - 0.06 - 0.92) + 0.06 * v * eps_prev * eps_prev + 0.92 * v;
        let eps = student_t4(&mut rng);
        z = rho * z + (1.0 - rho * rho).sqrt() * eps;
        eps_prev = eps;
        let s = seasonality(t, spec.interval);
        let bar_sigma = sigma * s * v.sqrt() * vol_mult[regime];
        log_price += drift[regime] + bar_sigma * z;
        let open = prev_close;
        let close = round_to_tick(log_price.exp(), tick).max(tick);
        let wick = |rng: &mut Rng| rng.normal().abs() * 0.5 * bar_sigma * close;
        let high = round_to_tick(open.max(close) + wick(&mut rng) + tick * 0.49, tick);
        let low = round_to_tick(
            (open.min(close) - wick(&mut rng) - tick * 0.49).max(tick),
            tick,
        );
        let volume =
            (base_volume * s * (0.3 * rng.normal()).exp() * (1.0 + 2.0 * z.abs())).max(1.0) as u64;
        front.push(
            t,
            open,
            high.max(open.max(close)),
            low.min(open.min(close)),
            close,
            volume,
        );
        volumes.push(volume);
        prev_close = close;
    }

    let root = contract.root.clone();
    if spec.single_contract {
        front.symbol = root.clone();
        return Ok(vec![ContractBars {
            raw_symbol: root,
            table: front,
        }]);
    }
    Ok(split_into_contracts(&front, &root, tick))
}

/// Spreads the front series over quarterly contracts: each bar goes to the
/// contract that is front at that time; in the 14 days before expiry the next
/// contract also trades (two ticks above), its volume share rising from 0
/// to 1 between 8 and 4 days before expiry.
fn split_into_contracts(front: &BarTable, root: &str, tick: f64) -> Vec<ContractBars> {
    let (first, last) = (front.ts[0], front.ts[front.len() - 1]);
    let contracts = quarterly_contracts(root, first, last);
    let mut tables: Vec<BarTable> = contracts
        .iter()
        .map(|(sym, _)| BarTable::new(sym, front.interval))
        .collect();
    for i in 0..front.len() {
        let t = front.ts[i];
        let Some(k) = contracts.iter().position(|(_, expiry)| *expiry > t) else {
            continue;
        };
        let to_expiry = (contracts[k].1 - t) as f64 / NANOS_PER_DAY as f64;
        let next_share = ((8.0 - to_expiry) / 4.0).clamp(0.0, 1.0);
        let (o, h, l, c, vol) = (
            front.open[i],
            front.high[i],
            front.low[i],
            front.close[i],
            front.volume[i] as f64,
        );
        let front_volume = ((1.0 - next_share) * vol).max(1.0) as u64;
        tables[k].push(t, o, h, l, c, front_volume);
        if to_expiry < 14.0 && k + 1 < contracts.len() {
            let spread = 2.0 * tick;
            let next_volume = (next_share * vol + 0.02 * vol).max(1.0) as u64;
            let shift = |p: f64| round_to_tick(p + spread, tick);
            tables[k + 1].push(t, shift(o), shift(h), shift(l), shift(c), next_volume);
        }
    }
    contracts
        .into_iter()
        .zip(tables)
        .filter(|(_, table)| !table.is_empty())
        .map(|((raw_symbol, _), table)| ContractBars { raw_symbol, table })
        .collect()
}

/// Unit-test bars: `n` synthetic single-contract ES bars from 2024-01-02.
#[cfg(test)]
pub(crate) fn es_test_bars(interval: BarInterval, n: usize, seed: u64) -> BarTable {
    let spec = SynthSpec {
        symbol: "ES".into(),
        interval,
        bars: n,
        start: timefmt::parse("2024-01-02").expect("a date"),
        seed,
        planted_strength: 0.2,
        single_contract: true,
    };
    let book = crate::contracts::ContractBook::builtin();
    generate(&spec, book.lookup("ES").expect("ES is built in"))
        .expect("synthetic bars")
        .remove(0)
        .table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::ContractBook;

    fn spec(interval: BarInterval, bars: usize, rho: f64) -> SynthSpec {
        SynthSpec {
            symbol: "ES.FUT".into(),
            interval,
            bars,
            start: timefmt::parse("2024-01-02").unwrap(),
            seed: 11,
            planted_strength: rho,
            single_contract: true,
        }
    }

    fn log_returns(t: &BarTable) -> Vec<f64> {
        t.close.windows(2).map(|w| (w[1] / w[0]).ln()).collect()
    }

    #[test]
    fn bars_are_valid_on_the_tick_grid_and_deterministic() {
        let book = ContractBook::builtin();
        let es = book.lookup("ES").unwrap();
        let a = generate(&spec(BarInterval::Minute, 5000, 0.0), es).unwrap();
        let b = generate(&spec(BarInterval::Minute, 5000, 0.0), es).unwrap();
        assert_eq!(a[0].table, b[0].table);
        let t = &a[0].table;
        t.validate(std::path::Path::new("synth")).unwrap();
        for p in t.close.iter().chain(&t.high).chain(&t.low) {
            let ticks = p / 0.25;
            assert!(
                (ticks - ticks.round()).abs() < 1e-6,
                "{p} is off the 0.25 grid"
            );
        }
        // No bars in the daily break or on Saturday.
        for &ts in &t.ts {
            let minute = ts.rem_euclid(NANOS_PER_DAY) / 60_000_000_000;
            assert!(!(22 * 60..23 * 60).contains(&minute));
            assert_ne!(timefmt::weekday(ts), 5);
        }
    }

    #[test]
    fn fat_tails_clustering_and_the_planted_correlation_are_there() {
        let book = ContractBook::builtin();
        let es = book.lookup("ES").unwrap();
        let t = &generate(&spec(BarInterval::Day, 20_000, 0.0), es).unwrap()[0].table;
        let r = log_returns(t);
        let n = r.len() as f64;
        let mean = r.iter().sum::<f64>() / n;
        let var = r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        let kurtosis = r.iter().map(|x| (x - mean).powi(4)).sum::<f64>() / n / var.powi(2);
        assert!(kurtosis > 4.0, "excess kurtosis expected, got {kurtosis}");
        let sq: Vec<f64> = r.iter().map(|x| x * x).collect();
        assert!(
            autocorr(&sq) > 0.05,
            "volatility clustering expected, got {}",
            autocorr(&sq)
        );
        assert!(
            autocorr(&r).abs() < 0.05,
            "no planted signal → ~0 autocorrelation, got {}",
            autocorr(&r)
        );

        let planted = &generate(&spec(BarInterval::Day, 20_000, 0.3), es).unwrap()[0].table;
        let ac = autocorr(&log_returns(planted));
        assert!((0.2..0.4).contains(&ac), "planted 0.3, measured {ac}");
    }

    fn autocorr(x: &[f64]) -> f64 {
        let n = x.len() as f64;
        let m = x.iter().sum::<f64>() / n;
        let v: f64 = x.iter().map(|a| (a - m).powi(2)).sum();
        x.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum::<f64>() / v
    }

    #[test]
    fn quarterly_contracts_overlap_before_expiry() {
        let book = ContractBook::builtin();
        let mut s = spec(BarInterval::Day, 300, 0.0);
        s.single_contract = false;
        let contracts = generate(&s, book.lookup("ES").unwrap()).unwrap();
        let names: Vec<&str> = contracts.iter().map(|c| c.raw_symbol.as_str()).collect();
        assert_eq!(&names[..3], ["ESH24", "ESM24", "ESU24"]);
        let h = &contracts[0].table;
        let m = &contracts[1].table;
        assert!(
            m.ts[0] < *h.ts.last().unwrap(),
            "ESM4 must start trading before ESH4 stops"
        );
        for c in &contracts {
            c.table
                .validate(std::path::Path::new(&c.raw_symbol))
                .unwrap();
        }
        assert_eq!(third_friday(2024, 3), timefmt::parse("2024-03-15").unwrap());
    }
}
