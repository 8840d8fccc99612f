//! A backtest's ledger: positions held bar by bar, priced with a
//! contract's point value and costs, and what a trader reads from it.
//!
//! # Timing (the trading environment's)
//!
//! Row `t` is bar `t`. The position `p_t` is decided at the close of bar
//! `t` and held over `(t, t+1]`; no later bar is seen before deciding. Row
//! `t` of the ledger books what bar `t` earned for the position decided one
//! row earlier, net of the cost of trading into that position:
//!
//! ```text
//! gross_t = p_{t−1} · point_value · (close_t − close_{t−1})
//! costs_t = cost · |p_{t−1} − p_{t−2}|          (p_{−1} = p_{−2} = 0)
//! net_t   = gross_t − costs_t,   cost = commission + slippage_ticks · tick_size · point_value
//! ```
//!
//! Row 0 books nothing (nothing was held). The last position is not
//! liquidated. So rows `1..n` are, bit for bit, [`strategy_pnl`]'s periods of
//! the positions of rows `0..n−1`: an agent's reported P&L and its backtest
//! are one computation.
//!
//! # Rolls
//!
//! A bar marked `roll_before` is the first of a new contract (a continuous
//! series' roll): the price change from the previous bar spans two contracts
//! and is not earned (`gross_t = 0`), and a held position is rolled, which
//! trades it twice (out of the old contract, into the new one): `costs_t`
//! gains `2 · cost · |p_{t−1}|`. Gaps (missing bars, a long weekend) are
//! ordinary periods: the market moved while the position was held.
//!
//! [`strategy_pnl`]: crate::metrics::strategy_pnl

use crate::metrics::{evaluate_pnl, CostTerms, PerformanceReport};
use crate::MetricsError;
use serde::Serialize;

/// One row of a ledger (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LedgerRow {
    /// Bar time, UTC nanoseconds.
    pub ts: i64,
    pub close: f64,
    /// The position decided at this bar's close, held over the next bar.
    pub position: f64,
    pub gross_pnl: f64,
    pub costs: f64,
    pub net_pnl: f64,
    /// Cumulative net P&L (currency).
    pub equity: f64,
    /// This bar starts a new contract.
    pub roll: bool,
}

/// Bars to price positions on: times, closes and roll markers, one each per bar.
#[derive(Clone, Copy, Debug)]
pub struct Bars<'a> {
    pub ts: &'a [i64],
    pub close: &'a [f64],
    pub roll_before: &'a [bool],
}

/// Prices `positions` (one per bar) on `bars` (see the module docs).
pub fn ledger(
    bars: Bars<'_>,
    positions: &[f64],
    terms: CostTerms,
) -> Result<Vec<LedgerRow>, MetricsError> {
    let n = bars.close.len();
    if n < 2 {
        return Err(MetricsError::data(format!(
            "a backtest needs at least 2 bars, got {n}"
        )));
    }
    if bars.ts.len() != n || bars.roll_before.len() != n || positions.len() != n {
        return Err(MetricsError::data(format!(
            "{} times, {n} closes, {} roll markers and {} positions: give one of each per bar",
            bars.ts.len(),
            bars.roll_before.len(),
            positions.len()
        )));
    }
    if let Some(i) = bars.close.iter().position(|c| !(c.is_finite() && *c > 0.0)) {
        return Err(MetricsError::data(format!(
            "close[{i}] = {} is not a finite positive price",
            bars.close[i]
        )));
    }
    if let Some(i) = positions.iter().position(|p| !p.is_finite()) {
        return Err(MetricsError::data(format!(
            "position[{i}] = {} is not finite",
            positions[i]
        )));
    }
    let mut rows = Vec::with_capacity(n);
    let (mut held, mut before, mut equity) = (0.0f64, 0.0f64, 0.0f64);
    for (t, &position) in positions.iter().enumerate() {
        let roll = bars.roll_before[t];
        let (gross, mut costs) = match t {
            0 => (0.0, 0.0),
            _ => {
                let paid = terms.cost_per_contract * (held - before).abs();
                let moved = if roll {
                    0.0
                } else {
                    held * terms.point_value * (bars.close[t] - bars.close[t - 1])
                };
                (moved, paid)
            }
        };
        if t > 0 && roll {
            costs += 2.0 * terms.cost_per_contract * held.abs();
        }
        // The operations of strategy_pnl, in its order: bit for bit the same.
        let net = gross - costs;
        equity += net;
        rows.push(LedgerRow {
            ts: bars.ts[t],
            close: bars.close[t],
            position,
            gross_pnl: gross,
            costs,
            net_pnl: net,
            equity,
            roll,
        });
        if t > 0 {
            before = held;
        }
        held = position;
    }
    Ok(rows)
}

/// What a trader reads from a ledger: the performance report of its
/// periods (rows `1..n`, net of costs) and more.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BacktestReport {
    /// Net of costs, over rows `1..n` (their positions are rows `0..n−1`).
    pub performance: PerformanceReport,
    pub gross_pnl: f64,
    pub costs: f64,
    pub net_pnl: f64,
    /// Position changes (a roll of a held position counts as one).
    pub trades: usize,
    /// Fraction of periods with a position.
    pub exposure: f64,
    /// The longest stretch, in periods, spent below a previous equity peak.
    pub max_drawdown_periods: usize,
}

/// The report of a ledger, annualized with `periods_per_year`.
pub fn report(rows: &[LedgerRow], periods_per_year: f64) -> Result<BacktestReport, MetricsError> {
    if rows.len() < 2 {
        return Err(MetricsError::data(
            "a backtest report needs at least 2 bars",
        ));
    }
    let periods = &rows[1..];
    let pnl: Vec<f64> = periods.iter().map(|r| r.net_pnl).collect();
    let held: Vec<f64> = rows[..rows.len() - 1].iter().map(|r| r.position).collect();
    let mut performance = evaluate_pnl(&pnl, &held, periods_per_year, None)?;
    let costs: f64 = periods.iter().map(|r| r.costs).sum();
    performance.costs = Some(costs);
    let mut trades = 0;
    let mut previous = 0.0;
    for (i, &p) in held.iter().enumerate() {
        if p != previous || (periods[i].roll && previous != 0.0) {
            trades += 1;
        }
        previous = p;
    }
    let (mut peak, mut since_peak, mut longest) = (0.0f64, 0usize, 0usize);
    for r in periods {
        if r.equity >= peak {
            peak = r.equity;
            since_peak = 0;
        } else {
            since_peak += 1;
            longest = longest.max(since_peak);
        }
    }
    Ok(BacktestReport {
        exposure: performance.periods_in_market as f64 / performance.periods as f64,
        gross_pnl: periods.iter().map(|r| r.gross_pnl).sum(),
        costs,
        net_pnl: performance.total_pnl,
        performance,
        trades,
        max_drawdown_periods: longest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::strategy_pnl;

    fn terms() -> CostTerms {
        // ES-like: 50 per point; commission 2 + 1 tick of 0.25 = 14.5 per contract.
        CostTerms::new(50.0, 2.0 + 0.25 * 50.0).unwrap()
    }

    #[test]
    fn without_rolls_the_ledger_is_strategy_pnl_bit_for_bit() {
        let close = [100.0, 101.5, 100.25, 102.0, 101.0, 103.5];
        let positions = [1.0, 1.0, -2.0, 0.0, 3.0, 1.0];
        let ts: Vec<i64> = (0..6).collect();
        let bars = Bars {
            ts: &ts,
            close: &close,
            roll_before: &[false; 6],
        };
        let rows = ledger(bars, &positions, terms()).unwrap();
        let (pnl, costs) = strategy_pnl(&close, &positions[..5], terms()).unwrap();
        let booked: Vec<f64> = rows[1..].iter().map(|r| r.net_pnl).collect();
        assert_eq!(booked, pnl);
        let paid: f64 = rows.iter().map(|r| r.costs).sum();
        assert_eq!(paid, costs);
        assert_eq!(rows[0].net_pnl, 0.0);
        assert_eq!(rows[5].equity, pnl.iter().sum::<f64>());
    }

    #[test]
    fn a_roll_earns_nothing_across_contracts_and_costs_two_trades_per_contract() {
        let close = [100.0, 102.0, 110.0, 111.0];
        let positions = [2.0, 2.0, 2.0, 0.0];
        let ts = [0, 1, 2, 3];
        let rows = ledger(
            Bars {
                ts: &ts,
                close: &close,
                roll_before: &[false, false, true, false],
            },
            &positions,
            terms(),
        )
        .unwrap();
        // Row 1: 2 contracts over 100 → 102 = 200; paid 2 × 14.5 to get in.
        assert_eq!(rows[1].gross_pnl, 2.0 * 50.0 * 2.0);
        assert_eq!(rows[1].costs, 2.0 * 14.5);
        // Row 2: a new contract at 110: no P&L on the 8-point jump, 2 contracts rolled twice.
        assert_eq!(rows[2].gross_pnl, 0.0);
        assert_eq!(rows[2].costs, 2.0 * 14.5 * 2.0);
        // Row 3: 110 → 111 held.
        assert_eq!(rows[3].gross_pnl, 2.0 * 50.0 * 1.0);
        assert_eq!(rows[3].costs, 0.0);
        let report = report(&rows, 252.0).unwrap();
        assert_eq!(report.gross_pnl, 300.0);
        assert_eq!(report.costs, 29.0 + 58.0);
        assert_eq!(report.net_pnl, 300.0 - 87.0);
        // In, rolled: two trades; exposure all three periods.
        assert_eq!(report.trades, 2);
        assert_eq!(report.exposure, 1.0);
    }

    #[test]
    fn drawdown_duration_and_refusals() {
        let close = [10.0, 11.0, 10.0, 9.0, 9.5, 12.0];
        let positions = [1.0; 6];
        let ts = [0, 1, 2, 3, 4, 5];
        let rows = ledger(
            Bars {
                ts: &ts,
                close: &close,
                roll_before: &[false; 6],
            },
            &positions,
            CostTerms::new(1.0, 0.0).unwrap(),
        )
        .unwrap();
        // Equity 1, 0, −1, −0.5, 2: below the peak of 1 for three periods.
        let r = report(&rows, 252.0).unwrap();
        assert_eq!(r.max_drawdown_periods, 3);
        assert_eq!(r.performance.max_drawdown, 2.0);
        assert_eq!(r.trades, 1);
        let short = Bars {
            ts: &ts[..1],
            close: &close[..1],
            roll_before: &[false],
        };
        assert!(ledger(short, &[1.0], terms()).is_err());
        let bad = [10.0, f64::NAN];
        let e = ledger(
            Bars {
                ts: &ts[..2],
                close: &bad,
                roll_before: &[false; 2],
            },
            &[1.0, 1.0],
            terms(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("close[1]"), "{e}");
    }
}
