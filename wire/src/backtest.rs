//! A backtest on the wire: [`Backtest`] ↔ `BacktestResponse`, exactly (a
//! client shows what the host computed, to the bit).

use crate::bars::{rows_from_proto, rows_to_proto, BarsError};
use tli_backtest::ledger::{BacktestReport, LedgerRow};
use tli_backtest::metrics::PerformanceReport;
use tli_backtest::outcome::{Backtest, Forecasts};
use tli_models::PredictionTable;
use tli_proto::v1 as pb;

/// The ledger's columns, in order, after the time and symbol: on the wire
/// and in `tli backtest --ledger` files.
pub const LEDGER_COLUMNS: [&str; 8] = [
    "close",
    "position",
    "gross_pnl",
    "costs",
    "net_pnl",
    "equity",
    "roll",
    "buy_and_hold_equity",
];

/// A backtest's ledger as a table: one row per bar, with buy-and-hold's
/// equity beside.
pub fn ledger_table(b: &Backtest) -> PredictionTable {
    let mut table = PredictionTable::new(LEDGER_COLUMNS.map(String::from).to_vec());
    for (i, r) in b.ledger.iter().enumerate() {
        let held = b.buy_and_hold_equity.get(i).copied().unwrap_or(f64::NAN);
        table.push(
            r.ts,
            &b.symbol,
            &[
                r.close,
                r.position,
                r.gross_pnl,
                r.costs,
                r.net_pnl,
                r.equity,
                f64::from(u8::from(r.roll)),
                held,
            ],
        );
    }
    table
}

fn report_to_proto(r: &BacktestReport) -> pb::BacktestReport {
    let p = &r.performance;
    pb::BacktestReport {
        net_pnl: r.net_pnl,
        gross_pnl: r.gross_pnl,
        costs: r.costs,
        periods: p.periods as u64,
        mean_pnl: p.mean_pnl,
        std_pnl: p.std_pnl,
        sharpe: p.sharpe,
        sortino: p.sortino,
        max_drawdown: p.max_drawdown,
        max_drawdown_periods: r.max_drawdown_periods as u64,
        turnover: p.turnover,
        avg_turnover: p.avg_turnover,
        hit_rate: p.hit_rate,
        periods_in_market: p.periods_in_market as u64,
        exposure: r.exposure,
        trades: r.trades as u64,
    }
}

/// A report from the wire. A backtest's P&L is in currency (no capital), so
/// its return and drawdown fraction are absent and its costs present.
fn report_from_proto(r: &pb::BacktestReport) -> BacktestReport {
    BacktestReport {
        performance: PerformanceReport {
            periods: r.periods as usize,
            total_pnl: r.net_pnl,
            total_return: None,
            mean_pnl: r.mean_pnl,
            std_pnl: r.std_pnl,
            sharpe: r.sharpe,
            sortino: r.sortino,
            max_drawdown: r.max_drawdown,
            max_drawdown_frac: None,
            costs: Some(r.costs),
            turnover: r.turnover,
            avg_turnover: r.avg_turnover,
            hit_rate: r.hit_rate,
            periods_in_market: r.periods_in_market as usize,
        },
        gross_pnl: r.gross_pnl,
        costs: r.costs,
        net_pnl: r.net_pnl,
        trades: r.trades as usize,
        exposure: r.exposure,
        max_drawdown_periods: r.max_drawdown_periods as usize,
    }
}

/// A backtest as a response (`model` and `served_by` are the server's to
/// fill); without its per-bar series when `summary_only`.
pub fn backtest_to_proto(b: &Backtest, summary_only: bool) -> pb::BacktestResponse {
    let series = (!summary_only).then(|| {
        let ledger = ledger_table(b);
        let forecasts = b.forecasts.as_ref().map(|f| {
            let banded = f.p10.len() == f.ts.len() && f.p90.len() == f.ts.len();
            let mut columns = vec!["p50"];
            if banded {
                columns.extend(["p10", "p90"]);
            }
            columns.push("actual");
            let mut table = PredictionTable::new(columns.iter().map(|c| c.to_string()).collect());
            let at = |v: &[f64], i: usize| v.get(i).copied().unwrap_or(f64::NAN);
            for (i, &ts) in f.ts.iter().enumerate() {
                let mut row = vec![at(&f.p50, i)];
                if banded {
                    row.extend([f.p10[i], f.p90[i]]);
                }
                row.push(at(&f.actual, i));
                table.push(ts, &b.symbol, &row);
            }
            rows_to_proto(&table)
        });
        (rows_to_proto(&ledger), forecasts)
    });
    let (ledger, forecasts) = match series {
        Some((ledger, forecasts)) => (Some(ledger), forecasts),
        None => (None, None),
    };
    pb::BacktestResponse {
        model: String::new(),
        served_by: String::new(),
        symbol: b.symbol.clone(),
        positions_from: b.positions_from.clone(),
        forecast: b.forecast.clone().unwrap_or_default(),
        commission: b.commission,
        slippage_ticks: b.slippage_ticks,
        cost_per_contract: b.cost_per_contract,
        point_value: b.point_value,
        currency: b.currency.clone(),
        strategy: Some(report_to_proto(&b.strategy)),
        buy_and_hold: Some(report_to_proto(&b.buy_and_hold)),
        flat: Some(report_to_proto(&b.flat)),
        ledger,
        forecasts,
    }
}

/// The values of column `name` of `table`, or `None` without it.
fn column(table: &PredictionTable, name: &str) -> Option<Vec<f64>> {
    let c = table.columns.iter().position(|x| x == name)?;
    Some((0..table.len()).map(|i| table.row(i)[c]).collect())
}

/// A backtest from a response; refuses a response without its reports or
/// with a ledger that lacks a column.
pub fn backtest_from_proto(r: &pb::BacktestResponse) -> Result<Backtest, BarsError> {
    let report = |name: &str, r: &Option<pb::BacktestReport>| {
        r.as_ref()
            .map(report_from_proto)
            .ok_or_else(|| BarsError::Shape(format!("the backtest has no {name} report")))
    };
    let mut ledger = Vec::new();
    let mut buy_and_hold_equity = Vec::new();
    if let Some(rows) = &r.ledger {
        let table = rows_from_proto(rows)?;
        let mut columns = Vec::new();
        for name in LEDGER_COLUMNS {
            columns.push(column(&table, name).ok_or_else(|| {
                BarsError::Shape(format!("the backtest's ledger has no {name} column"))
            })?);
        }
        for (i, &ts) in table.timestamps.iter().enumerate() {
            ledger.push(LedgerRow {
                ts,
                close: columns[0][i],
                position: columns[1][i],
                gross_pnl: columns[2][i],
                costs: columns[3][i],
                net_pnl: columns[4][i],
                equity: columns[5][i],
                roll: columns[6][i] != 0.0,
            });
        }
        buy_and_hold_equity = columns[7].clone();
    }
    let forecasts = match &r.forecasts {
        None => None,
        Some(rows) => {
            let table = rows_from_proto(rows)?;
            Some(Forecasts {
                ts: table.timestamps.clone(),
                p50: column(&table, "p50").unwrap_or_default(),
                p10: column(&table, "p10").unwrap_or_default(),
                p90: column(&table, "p90").unwrap_or_default(),
                actual: column(&table, "actual").unwrap_or_default(),
            })
        }
    };
    Ok(Backtest {
        symbol: r.symbol.clone(),
        positions_from: r.positions_from.clone(),
        forecast: (!r.forecast.is_empty()).then(|| r.forecast.clone()),
        commission: r.commission,
        slippage_ticks: r.slippage_ticks,
        cost_per_contract: r.cost_per_contract,
        point_value: r.point_value,
        currency: r.currency.clone(),
        strategy: report("strategy", &r.strategy)?,
        buy_and_hold: report("buy-and-hold", &r.buy_and_hold)?,
        flat: report("flat", &r.flat)?,
        ledger,
        buy_and_hold_equity,
        forecasts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tli_backtest::ledger::{self, Bars};
    use tli_backtest::metrics::CostTerms;

    fn outcome() -> Backtest {
        let ts = [0, 1, 2, 3, 4];
        let close = [100.0, 101.0, 99.5, 102.0, 103.0];
        let roll = [false, false, true, false, false];
        let bars = Bars {
            ts: &ts,
            close: &close,
            roll_before: &roll,
        };
        let terms = CostTerms::new(50.0, 14.5).unwrap();
        let run = |p: &[f64]| {
            let rows = ledger::ledger(bars, p, terms).unwrap();
            let report = ledger::report(&rows, 252.0).unwrap();
            (rows, report)
        };
        let (rows, strategy) = run(&[1.0, -1.0, -1.0, 0.5, 0.0]);
        let (held, buy_and_hold) = run(&[1.0; 5]);
        let (_, flat) = run(&[0.0; 5]);
        Backtest {
            symbol: "ES".into(),
            positions_from: "scaled".into(),
            forecast: Some("log_return:h1:p50".into()),
            commission: 2.0,
            slippage_ticks: 0.5,
            cost_per_contract: 14.5,
            point_value: 50.0,
            currency: "USD".into(),
            strategy,
            buy_and_hold,
            flat,
            ledger: rows,
            buy_and_hold_equity: held.iter().map(|r| r.equity).collect(),
            forecasts: Some(Forecasts {
                ts: ts.to_vec(),
                p50: vec![0.1, -0.2, -0.1, 0.05, 0.0],
                p10: vec![-0.1; 5],
                p90: vec![0.3; 5],
                actual: vec![0.01, -0.015, 0.025, 0.01, f64::NAN],
            }),
        }
    }

    fn json(b: &Backtest) -> String {
        serde_json::to_string(b).unwrap()
    }

    #[test]
    fn a_backtest_crosses_the_wire_exactly() {
        let b = outcome();
        let back = backtest_from_proto(&backtest_to_proto(&b, false)).unwrap();
        assert_eq!(json(&back), json(&b));
        assert_eq!(back.ledger, b.ledger);
        assert_eq!(back.buy_and_hold_equity, b.buy_and_hold_equity);
        let (f, g) = (b.forecasts.unwrap(), back.forecasts.unwrap());
        assert_eq!((f.ts, f.p50, f.p10, f.p90), (g.ts, g.p50, g.p10, g.p90));
        assert!(g.actual[4].is_nan());
    }

    #[test]
    fn a_summary_has_no_series_and_a_point_forecast_no_band() {
        let mut b = outcome();
        let summary = backtest_from_proto(&backtest_to_proto(&b, true)).unwrap();
        assert!(summary.ledger.is_empty() && summary.forecasts.is_none());
        assert_eq!(json(&summary), json(&b));
        b.forecasts.as_mut().unwrap().p10.clear();
        b.forecasts.as_mut().unwrap().p90.clear();
        let wire = backtest_to_proto(&b, false);
        assert_eq!(wire.forecasts.as_ref().unwrap().columns, ["p50", "actual"]);
        let back = backtest_from_proto(&wire).unwrap().forecasts.unwrap();
        assert!(back.p10.is_empty() && back.p90.is_empty());
    }

    #[test]
    fn a_response_without_reports_or_ledger_columns_is_refused() {
        let mut wire = backtest_to_proto(&outcome(), false);
        wire.ledger.as_mut().unwrap().columns[5] = "equity?".into();
        let e = backtest_from_proto(&wire).unwrap_err();
        assert!(e.to_string().contains("no equity column"), "{e}");
        let mut wire = backtest_to_proto(&outcome(), true);
        wire.flat = None;
        assert!(backtest_from_proto(&wire).is_err());
    }
}
