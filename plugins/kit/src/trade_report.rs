//! The trading metrics every forecaster reports beside its forecast
//! metrics: its one-bar-ahead forecasts traded by the default position rule
//! (one contract, the sign of the P50 or point forecast) with the trading
//! environment's default costs, priced by [`tli_backtest`]'s ledger — the
//! code `tli backtest` prices a model's predictions with.
//!
//! # Rows
//!
//! A split's evaluation rows (the ends of the windows whose forecasts were
//! scored) are traded: the position at each is the rule's, and the bars
//! traded run from the first to the last of them; a bar between that is not
//! an evaluation row (a window across a gap or roll) is flat. So `tli
//! backtest --start <first evaluation bar> --end <last evaluation bar>` of
//! the model's bundle on the training file prices the same positions on the
//! same bars: the same numbers.
//!
//! # Names
//!
//! `{split}_trade_{name}{suffix}`: `net_pnl`, `gross_pnl`, `costs` (the
//! contract's currency), `sharpe`, `sortino` (annualized), `max_drawdown`,
//! `hit_rate`, `exposure`, `trades`, `turnover`, `periods`; and buy-and-hold
//! on the same bars, `{split}_trade_bh_net_pnl`, `{split}_trade_bh_sharpe`.
//! In a pooled task, each asset's carry the suffix `@SYMBOL`, and the
//! unsuffixed ones are the portfolio of the assets' positions (one contract
//! of each): P&L summed per bar time.

use std::collections::BTreeMap;
use tli_backtest::ledger::{self, BacktestReport, Bars, LedgerRow};
use tli_backtest::metrics::{evaluate_pnl, CostTerms};
use tli_backtest::rules::{self, PositionRule};
use tli_backtest::{DEFAULT_COMMISSION, DEFAULT_SLIPPAGE_TICKS};
use tli_plugin_api::{Dataset, Metric, PluginError, ROLL_BEFORE};

/// One asset's bars as a backtest prices them.
#[derive(Clone, Debug)]
pub struct Market {
    pub symbol: String,
    pub ts: Vec<i64>,
    pub close: Vec<f64>,
    /// Row starts a new contract (from the row markers' `ROLL_BEFORE`).
    pub roll_before: Vec<bool>,
    pub terms: CostTerms,
    pub periods_per_year: f64,
}

impl Market {
    /// The market of `dataset`, with its row markers (empty: no rolls),
    /// priced at the default costs; `None` when it cannot be traded (no
    /// contract terms, a close that is not a positive price): its task then
    /// reports no trading metrics.
    pub fn of(dataset: &Dataset, row_markers: &[u8]) -> Result<Option<Self>, PluginError> {
        let Ok(terms) = CostTerms::from_contract(
            &dataset.contract,
            DEFAULT_COMMISSION,
            DEFAULT_SLIPPAGE_TICKS,
        ) else {
            return Ok(None);
        };
        if !dataset.close.iter().all(|c| c.is_finite() && *c > 0.0) {
            return Ok(None);
        }
        let rows = dataset.rows();
        let roll_before = match row_markers.len() {
            0 => vec![false; rows],
            n if n == rows => row_markers.iter().map(|m| m & ROLL_BEFORE != 0).collect(),
            n => {
                return Err(PluginError::invalid_data(format!(
                    "{n} row markers for {rows} rows"
                )))
            }
        };
        if dataset.close.len() != rows || dataset.timestamps.len() != rows {
            return Ok(None);
        }
        Ok(Some(Self {
            symbol: dataset.symbol.to_string(),
            ts: dataset.timestamps.to_vec(),
            close: dataset.close.to_vec(),
            roll_before,
            terms,
            periods_per_year: dataset.periods_per_year,
        }))
    }
}

/// One asset's traded evaluation rows: the ledger over the bars from the
/// first row to the last, and buy-and-hold's report on them.
struct Traded {
    ledger: Vec<LedgerRow>,
    report: BacktestReport,
    buy_and_hold: BacktestReport,
}

/// `forecasts` (one per row of `rows`, ascending dataset rows) traded on
/// `market` by the sign rule; `None` with fewer than 2 bars to trade.
fn trade(
    market: &Market,
    rows: &[usize],
    forecasts: &[f64],
) -> Result<Option<Traded>, PluginError> {
    let (Some(&first), Some(&last)) = (rows.first(), rows.last()) else {
        return Ok(None);
    };
    if last <= first || last >= market.close.len() || rows.len() != forecasts.len() {
        return Ok(None);
    }
    let wanted = rules::positions(PositionRule::Sign, forecasts, None, 1.0)?;
    let mut positions = vec![0.0; last - first + 1];
    for (&row, &p) in rows.iter().zip(&wanted) {
        positions[row - first] = p;
    }
    let span = first..last + 1;
    let bars = Bars {
        ts: &market.ts[span.clone()],
        close: &market.close[span.clone()],
        roll_before: &market.roll_before[span.clone()],
    };
    let run = |positions: &[f64]| -> Result<(Vec<LedgerRow>, BacktestReport), PluginError> {
        let rows = ledger::ledger(bars, positions, market.terms)?;
        let report = ledger::report(&rows, market.periods_per_year)?;
        Ok((rows, report))
    };
    let (ledger, report) = run(&positions)?;
    let (_, buy_and_hold) = run(&vec![1.0; span.len()])?;
    Ok(Some(Traded {
        ledger,
        report,
        buy_and_hold,
    }))
}

fn named(
    report: &BacktestReport,
    buy_and_hold: Option<&BacktestReport>,
    prefix: &str,
    suffix: &str,
) -> Vec<Metric> {
    let p = &report.performance;
    let mut out = vec![
        ("net_pnl", report.net_pnl),
        ("gross_pnl", report.gross_pnl),
        ("costs", report.costs),
        ("sharpe", p.sharpe),
        ("sortino", p.sortino),
        ("max_drawdown", p.max_drawdown),
        ("hit_rate", p.hit_rate),
        ("exposure", report.exposure),
        ("trades", report.trades as f64),
        ("turnover", p.turnover),
        ("periods", p.periods as f64),
    ];
    if let Some(bh) = buy_and_hold {
        out.push(("bh_net_pnl", bh.net_pnl));
        out.push(("bh_sharpe", bh.performance.sharpe));
    }
    out.into_iter()
        .map(|(name, v)| Metric::new(&format!("{prefix}_trade_{name}{suffix}"), v))
        .collect()
}

/// The trading metrics (see the module docs) of one asset's evaluation
/// `rows` and their one-bar-ahead `forecasts` (any positive scale: only the
/// sign is traded), named with `suffix`; none when fewer than 2 bars.
pub fn rule_metrics(
    market: &Market,
    rows: &[usize],
    forecasts: &[f64],
    prefix: &str,
    suffix: &str,
) -> Result<Vec<Metric>, PluginError> {
    Ok(match trade(market, rows, forecasts)? {
        Some(t) => named(&t.report, Some(&t.buy_and_hold), prefix, suffix),
        None => Vec::new(),
    })
}

/// The trading metrics of a task's assets: `per_asset[i]` is asset `i`'s
/// evaluation rows and forecasts on `markets[i]`. One asset: its metrics.
/// Several: each with `@SYMBOL`, then the portfolio's (P&L summed per bar
/// time; trades, turnover and costs summed; exposure the share of periods
/// with any position).
pub fn task_metrics(
    markets: &[Option<Market>],
    per_asset: &[(Vec<usize>, Vec<f64>)],
    prefix: &str,
) -> Result<Vec<Metric>, PluginError> {
    let Some(markets) = markets.iter().cloned().collect::<Option<Vec<Market>>>() else {
        return Ok(Vec::new());
    };
    if markets.len() == 1 {
        let (rows, forecasts) = per_asset
            .first()
            .map(|(r, f)| (&r[..], &f[..]))
            .unwrap_or_default();
        return rule_metrics(&markets[0], rows, forecasts, prefix, "");
    }
    let mut out = Vec::new();
    let mut pnl: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
    let (mut gross, mut costs, mut trades, mut turnover) = (0.0, 0.0, 0.0, 0.0);
    for (market, (rows, forecasts)) in markets.iter().zip(per_asset) {
        let Some(t) = trade(market, rows, forecasts)? else {
            continue;
        };
        out.extend(named(
            &t.report,
            Some(&t.buy_and_hold),
            prefix,
            &format!("@{}", market.symbol),
        ));
        gross += t.report.gross_pnl;
        costs += t.report.costs;
        trades += t.report.trades as f64;
        turnover += t.report.performance.turnover;
        // Row r books the P&L of the position held at row r − 1.
        for pair in t.ledger.windows(2) {
            let e = pnl.entry(pair[1].ts).or_insert((0.0, 0.0));
            e.0 += pair[1].net_pnl;
            e.1 += pair[0].position.abs();
        }
    }
    if pnl.len() < 2 {
        return Ok(out);
    }
    let ppy = markets[0].periods_per_year;
    let (series, held): (Vec<f64>, Vec<f64>) = pnl.values().copied().unzip();
    let p = evaluate_pnl(&series, &held, ppy, None)?;
    let in_market = held.iter().filter(|h| **h != 0.0).count() as f64;
    for (name, v) in [
        ("net_pnl", series.iter().sum::<f64>()),
        ("gross_pnl", gross),
        ("costs", costs),
        ("sharpe", p.sharpe),
        ("sortino", p.sortino),
        ("max_drawdown", p.max_drawdown),
        ("hit_rate", p.hit_rate),
        ("exposure", in_market / held.len() as f64),
        ("trades", trades),
        ("turnover", turnover),
        ("periods", p.periods as f64),
    ] {
        out.push(Metric::new(&format!("{prefix}_trade_{name}"), v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tli_plugin_api::ContractTerms;

    fn market(close: &[f64], ts0: i64) -> Market {
        Market {
            symbol: "T".into(),
            ts: (0..close.len() as i64).map(|i| ts0 + i).collect(),
            close: close.to_vec(),
            roll_before: vec![false; close.len()],
            terms: CostTerms::from_contract(
                &ContractTerms {
                    root: "T".into(),
                    tick_size: 0.25,
                    point_value: 50.0,
                    currency: "USD".into(),
                },
                2.0,
                0.5,
            )
            .unwrap(),
            periods_per_year: 252.0,
        }
    }

    fn value(metrics: &[Metric], name: &str) -> f64 {
        metrics
            .iter()
            .find(|m| m.name.as_str() == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .value
    }

    #[test]
    fn the_sign_of_each_forecast_is_held_over_the_next_bar_at_the_default_costs() {
        // Rows 1..=4 are evaluation rows; row 3 is not (flat).
        let m = market(&[100.0, 101.0, 103.0, 102.0, 104.0, 90.0], 0);
        let rows = [1, 2, 4];
        let forecasts = [0.3, -0.1, 0.2];
        let metrics = rule_metrics(&m, &rows, &forecasts, "test", "").unwrap();
        // Positions over rows 1..=4: +1, −1, 0, +1 (the last is never held over a bar).
        // Row 2: +1 × 50 × (103 − 101) − 8.25 (bought one) = 91.75
        // Row 3: −1 × 50 × (102 − 103) − 8.25 × 2 (reversed) = 33.5
        // Row 4: 0 − 8.25 (closed) = −8.25
        let cost = 2.0 + 0.5 * 0.25 * 50.0;
        assert_eq!(
            value(&metrics, "test_trade_net_pnl"),
            100.0 - cost - 2.0 * cost - cost + 50.0
        );
        assert_eq!(value(&metrics, "test_trade_gross_pnl"), 150.0);
        assert_eq!(value(&metrics, "test_trade_costs"), 4.0 * cost);
        assert_eq!(value(&metrics, "test_trade_trades"), 3.0);
        assert_eq!(value(&metrics, "test_trade_periods"), 3.0);
        // Buy-and-hold over rows 1..=4: 50 × (104 − 101) − 8.25.
        assert_eq!(value(&metrics, "test_trade_bh_net_pnl"), 150.0 - cost);
        assert!(rule_metrics(&m, &[2], &[0.1], "test", "")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_pooled_task_reports_each_asset_and_their_portfolio() {
        let a = Market {
            symbol: "A".into(),
            ..market(&[100.0, 101.0, 103.0, 102.0], 0)
        };
        let b = Market {
            symbol: "B".into(),
            ..market(&[50.0, 49.0, 48.0, 47.0], 1)
        };
        let per_asset = vec![
            (vec![0, 1, 2], vec![1.0, 1.0, 1.0]),
            (vec![0, 1, 2], vec![-1.0, -1.0, 1.0]),
        ];
        let metrics =
            task_metrics(&[Some(a.clone()), Some(b.clone())], &per_asset, "valid").unwrap();
        let one = |m: &Market, i: usize| {
            rule_metrics(m, &per_asset[i].0, &per_asset[i].1, "valid", "").unwrap()
        };
        let (net_a, net_b) = (
            value(&one(&a, 0), "valid_trade_net_pnl"),
            value(&one(&b, 1), "valid_trade_net_pnl"),
        );
        assert_eq!(value(&metrics, "valid_trade_net_pnl@A"), net_a);
        assert_eq!(value(&metrics, "valid_trade_net_pnl@B"), net_b);
        assert!((value(&metrics, "valid_trade_net_pnl") - (net_a + net_b)).abs() < 1e-9);
        // Bar times 1, 2 (A) and 2, 3 (B): three portfolio periods.
        assert_eq!(value(&metrics, "valid_trade_periods"), 3.0);
    }
}
