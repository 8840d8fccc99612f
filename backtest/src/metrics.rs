//! Evaluation metrics for a trading strategy, from per-period P&L and positions.
//!
//! Definitions (`x_t` = P&L of period `t`, `n` periods, `ppy` = periods per year):
//!
//! * **total P&L** `Σ x_t`; **total return** `Σ x_t / capital` when a capital is given.
//! * **Sharpe** `mean(x) / std(x) · √ppy`, `std` with `n − 1`; 0 when `n < 2` or `std = 0`.
//! * **Sortino** `mean(x) / DD · √ppy` with downside deviation
//!   `DD = √(Σ_t min(x_t, 0)² / n)`: target 0, root-mean over *all* `n`
//!   periods (periods with gains contribute zero); 0 when `DD = 0`.
//! * **max drawdown** the largest fall of cumulative P&L `C_t = Σ_{s≤t} x_s`
//!   from its running peak, starting from `C = 0` before the first period
//!   (currency, ≥ 0); as a fraction with capital: the largest
//!   `(peak − E_t) / peak` of equity `E_t = capital + C_t`.
//! * **turnover** `Σ_t |p_t − p_{t−1}|` with `p_{−1} = 0` (contracts traded),
//!   and its average per period.
//! * **hit rate** among periods with `p_t ≠ 0`, the fraction with `x_t > 0`
//!   (net of costs); 0 when never in the market.
//!
//! [`evaluate_strategy`] turns prices and positions into P&L with the same
//! timing as the trading environment: `p_t` is held over `(t, t+1]`, so
//! `x_t = p_t · point_value · (close[t+1] − close[t]) − cost · |p_t − p_{t−1}|`;
//! positions are not liquidated after the last period.
//! [`compare_with_baselines`] reports the strategy beside buy-and-hold (long one
//! contract throughout: the entry cost once) and flat (always 0).
//!
//! [`ewma_volatility`] is the causal per-bar volatility the trading environment
//! scales rewards by.
//!
//! The same functions accept per-period returns instead of currency P&L
//! (then leave `capital` out and read "currency" as "return units").

use crate::MetricsError;
use serde::Serialize;
use tli_plugin_api::{ContractTerms, Metric};

/// What turns positions into money.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CostTerms {
    /// Currency per 1.0 price move per contract.
    pub point_value: f64,
    /// Currency per contract traded (commission + slippage).
    pub cost_per_contract: f64,
}

impl CostTerms {
    pub fn new(point_value: f64, cost_per_contract: f64) -> Result<Self, MetricsError> {
        if !(point_value.is_finite() && point_value > 0.0) {
            return Err(MetricsError::data(format!(
                "point_value must be finite and > 0, got {point_value}"
            )));
        }
        if !(cost_per_contract.is_finite() && cost_per_contract >= 0.0) {
            return Err(MetricsError::config(format!(
                "cost_per_contract must be finite and ≥ 0, got {cost_per_contract}"
            )));
        }
        Ok(Self {
            point_value,
            cost_per_contract,
        })
    }

    /// `cost = commission + slippage_ticks · tick_size · point_value`.
    pub fn from_contract(
        terms: &ContractTerms,
        commission_per_contract: f64,
        slippage_ticks: f64,
    ) -> Result<Self, MetricsError> {
        Self::new(
            terms.point_value,
            commission_per_contract + slippage_ticks * terms.tick_size * terms.point_value,
        )
    }
}

/// A strategy's performance over one series of periods.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PerformanceReport {
    pub periods: usize,
    pub total_pnl: f64,
    /// `total_pnl / capital`, when a capital was given.
    pub total_return: Option<f64>,
    pub mean_pnl: f64,
    /// Sample standard deviation (`n − 1`).
    pub std_pnl: f64,
    pub sharpe: f64,
    pub sortino: f64,
    /// Currency, ≥ 0.
    pub max_drawdown: f64,
    /// Fraction of peak equity, when a capital was given.
    pub max_drawdown_frac: Option<f64>,
    /// Commission and slippage paid (included in the P&L), when known.
    pub costs: Option<f64>,
    /// Contracts traded in all.
    pub turnover: f64,
    /// Contracts traded per period.
    pub avg_turnover: f64,
    pub hit_rate: f64,
    /// Periods with a non-zero position.
    pub periods_in_market: usize,
}

impl PerformanceReport {
    /// The report as metrics named `{prefix}{field}` (optional fields only when present).
    pub fn metrics(&self, prefix: &str) -> Vec<Metric> {
        let mut out: Vec<(&str, f64)> = vec![
            ("periods", self.periods as f64),
            ("total_pnl", self.total_pnl),
            ("mean_pnl", self.mean_pnl),
            ("std_pnl", self.std_pnl),
            ("sharpe", self.sharpe),
            ("sortino", self.sortino),
            ("max_drawdown", self.max_drawdown),
            ("turnover", self.turnover),
            ("avg_turnover", self.avg_turnover),
            ("hit_rate", self.hit_rate),
            ("periods_in_market", self.periods_in_market as f64),
        ];
        for (name, value) in [
            ("total_return", self.total_return),
            ("max_drawdown_frac", self.max_drawdown_frac),
            ("costs", self.costs),
        ] {
            if let Some(v) = value {
                out.push((name, v));
            }
        }
        out.into_iter()
            .map(|(name, v)| Metric::new(&format!("{prefix}{name}"), v))
            .collect()
    }
}

/// A strategy beside the two baselines, on the same prices and terms.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BaselineComparison {
    pub strategy: PerformanceReport,
    pub buy_and_hold: PerformanceReport,
    pub flat: PerformanceReport,
}

impl BaselineComparison {
    /// Strategy metrics unprefixed, then `bh_…` and `flat_…`.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut out = self.strategy.metrics("");
        out.extend(self.buy_and_hold.metrics("bh_"));
        out.extend(self.flat.metrics("flat_"));
        out
    }
}

fn mean(x: &[f64]) -> f64 {
    if x.is_empty() {
        0.0
    } else {
        x.iter().sum::<f64>() / x.len() as f64
    }
}

/// Sample standard deviation (`n − 1`); 0 for fewer than two values.
pub fn std_dev(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let m = mean(x);
    (x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (x.len() - 1) as f64).sqrt()
}

/// Annualized Sharpe ratio (module docs); 0 when the std is 0.
pub fn sharpe_ratio(pnl: &[f64], periods_per_year: f64) -> f64 {
    let sd = std_dev(pnl);
    if sd > 0.0 {
        mean(pnl) / sd * periods_per_year.sqrt()
    } else {
        0.0
    }
}

/// Annualized Sortino ratio (module docs); 0 when no period lost.
pub fn sortino_ratio(pnl: &[f64], periods_per_year: f64) -> f64 {
    if pnl.is_empty() {
        return 0.0;
    }
    let down = (pnl.iter().map(|v| v.min(0.0).powi(2)).sum::<f64>() / pnl.len() as f64).sqrt();
    if down > 0.0 {
        mean(pnl) / down * periods_per_year.sqrt()
    } else {
        0.0
    }
}

/// Largest fall of cumulative P&L from its running peak (peak starts at 0).
pub fn max_drawdown(pnl: &[f64]) -> f64 {
    let (mut cum, mut peak, mut worst) = (0.0f64, 0.0f64, 0.0f64);
    for x in pnl {
        cum += x;
        peak = peak.max(cum);
        worst = worst.max(peak - cum);
    }
    worst
}

/// Largest `(peak − equity) / peak` of `equity = capital + cumulative P&L`.
pub fn max_drawdown_fraction(pnl: &[f64], capital: f64) -> f64 {
    let (mut equity, mut peak, mut worst) = (capital, capital, 0.0f64);
    for x in pnl {
        equity += x;
        peak = peak.max(equity);
        worst = worst.max((peak - equity) / peak);
    }
    worst
}

fn check_common(periods_per_year: f64, capital: Option<f64>) -> Result<(), MetricsError> {
    if !(periods_per_year.is_finite() && periods_per_year > 0.0) {
        return Err(MetricsError::data(format!(
            "periods_per_year must be finite and > 0, got {periods_per_year}"
        )));
    }
    match capital {
        Some(c) if !(c.is_finite() && c > 0.0) => Err(MetricsError::config(format!(
            "capital must be finite and > 0 when given, got {c}"
        ))),
        _ => Ok(()),
    }
}

fn check_finite(what: &str, x: &[f64]) -> Result<(), MetricsError> {
    match x.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(MetricsError::data(format!(
            "{what}[{i}] = {} is not finite",
            x[i]
        ))),
    }
}

/// The report for a per-period P&L (or return) series and the positions
/// held in those periods (equal lengths, at least one period).
pub fn evaluate_pnl(
    pnl: &[f64],
    positions: &[f64],
    periods_per_year: f64,
    capital: Option<f64>,
) -> Result<PerformanceReport, MetricsError> {
    check_common(periods_per_year, capital)?;
    if pnl.is_empty() {
        return Err(MetricsError::data(
            "cannot evaluate a strategy over zero periods",
        ));
    }
    if pnl.len() != positions.len() {
        return Err(MetricsError::data(format!(
            "{} P&L periods but {} positions",
            pnl.len(),
            positions.len()
        )));
    }
    check_finite("pnl", pnl)?;
    check_finite("positions", positions)?;
    let mut prev = 0.0;
    let (mut turnover, mut in_market, mut hits) = (0.0, 0usize, 0usize);
    for (&p, &x) in positions.iter().zip(pnl) {
        turnover += (p - prev).abs();
        prev = p;
        if p != 0.0 {
            in_market += 1;
            hits += usize::from(x > 0.0);
        }
    }
    let total: f64 = pnl.iter().sum();
    let n = pnl.len();
    Ok(PerformanceReport {
        periods: n,
        total_pnl: total,
        total_return: capital.map(|c| total / c),
        mean_pnl: mean(pnl),
        std_pnl: std_dev(pnl),
        sharpe: sharpe_ratio(pnl, periods_per_year),
        sortino: sortino_ratio(pnl, periods_per_year),
        max_drawdown: max_drawdown(pnl),
        max_drawdown_frac: capital.map(|c| max_drawdown_fraction(pnl, c)),
        costs: None,
        turnover,
        avg_turnover: turnover / n as f64,
        hit_rate: if in_market > 0 {
            hits as f64 / in_market as f64
        } else {
            0.0
        },
        periods_in_market: in_market,
    })
}

/// Per-period P&L of `positions` (`close.len() − 1` of them, `p_t` held over
/// `(t, t+1]`) and the total cost paid.
pub fn strategy_pnl(
    close: &[f64],
    positions: &[f64],
    terms: CostTerms,
) -> Result<(Vec<f64>, f64), MetricsError> {
    if close.len() < 2 {
        return Err(MetricsError::data(format!(
            "need at least 2 close prices for one period, got {}",
            close.len()
        )));
    }
    if positions.len() != close.len() - 1 {
        return Err(MetricsError::data(format!(
            "{} positions for {} close prices: expected one per period, {} \
             (position t is held from close t to close t+1)",
            positions.len(),
            close.len(),
            close.len() - 1
        )));
    }
    check_finite("close", close)?;
    check_finite("positions", positions)?;
    let mut prev = 0.0;
    let mut costs = 0.0;
    let pnl = positions
        .iter()
        .zip(close.windows(2))
        .map(|(&p, w)| {
            let paid = terms.cost_per_contract * (p - prev).abs();
            prev = p;
            costs += paid;
            p * terms.point_value * (w[1] - w[0]) - paid
        })
        .collect();
    Ok((pnl, costs))
}

/// The report of holding `positions` (see [`strategy_pnl`]) on `close`.
pub fn evaluate_strategy(
    close: &[f64],
    positions: &[f64],
    terms: CostTerms,
    periods_per_year: f64,
    capital: Option<f64>,
) -> Result<PerformanceReport, MetricsError> {
    let (pnl, costs) = strategy_pnl(close, positions, terms)?;
    let mut report = evaluate_pnl(&pnl, positions, periods_per_year, capital)?;
    report.costs = Some(costs);
    Ok(report)
}

/// The strategy beside buy-and-hold (long one contract throughout) and flat.
pub fn compare_with_baselines(
    close: &[f64],
    positions: &[f64],
    terms: CostTerms,
    periods_per_year: f64,
    capital: Option<f64>,
) -> Result<BaselineComparison, MetricsError> {
    let strategy = evaluate_strategy(close, positions, terms, periods_per_year, capital)?;
    let long = vec![1.0; positions.len()];
    let flat = vec![0.0; positions.len()];
    Ok(BaselineComparison {
        strategy,
        buy_and_hold: evaluate_strategy(close, &long, terms, periods_per_year, capital)?,
        flat: evaluate_strategy(close, &flat, terms, periods_per_year, capital)?,
    })
}

/// σ_t for every row: the zero-mean, bias-corrected EWMA standard deviation of
/// log returns `r_s = ln(close[s] / close[s−1])` for `1 ≤ s ≤ t`, with decay
/// `λ = 0.5^(1/halflife)`: `σ_t² = Σ λ^(t−s) r_s² / Σ λ^(t−s)`. Row 0 has no
/// return and gets 0. Uses no data after `t`. Prices must be finite and positive.
pub fn ewma_volatility(close: &[f64], halflife: f64) -> Result<Vec<f64>, MetricsError> {
    if !(halflife.is_finite() && halflife > 0.0) {
        return Err(MetricsError::config(format!(
            "EWMA volatility half-life must be finite and > 0, got {halflife}"
        )));
    }
    if let Some((row, c)) = close
        .iter()
        .enumerate()
        .find(|(_, c)| !(c.is_finite() && **c > 0.0))
    {
        return Err(MetricsError::data(format!(
            "volatility scaling needs positive prices, but close[{row}] = {c}"
        )));
    }
    let lambda = 0.5f64.powf(1.0 / halflife);
    let (mut sum, mut weight) = (0.0f64, 0.0f64);
    let mut out = Vec::with_capacity(close.len());
    out.extend(close.first().map(|_| 0.0));
    for pair in close.windows(2) {
        let r = (pair[1] / pair[0]).ln();
        sum = lambda * sum + r * r;
        weight = lambda * weight + 1.0;
        out.push((sum / weight).sqrt());
    }
    Ok(out)
}
