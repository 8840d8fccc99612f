//! How `tli backtest` checks its arguments and shows a backtest, wherever
//! it ran (a bundle in this process, or a model loaded on the host): the
//! summary beside buy-and-hold and flat (or `-o json`), the per-bar ledger
//! (`--ledger FILE`) and the charts (`--plots DIR`).

use crate::args::{BacktestArgs, OutputFormat, TradingArgs};
use crate::charts::{equity_chart, forecast_chart};
use crate::{new_table, print_json};
use anyhow::{bail, Result};
use std::path::Path;
use tli_backtest::ledger::BacktestReport;
use tli_backtest::outcome::Backtest;
use tli_backtest::rules::PositionRule;
use tli_models::TableFormat;

/// The arguments checked before anything runs: the rule, and the ledger
/// file's format.
pub fn check(args: &BacktestArgs) -> Result<(PositionRule, Option<TableFormat>)> {
    let rule = check_trading(&args.trading)?;
    if !args.bars.is_ordered() {
        bail!("--start is after --end; nothing was run");
    }
    let ledger = match &args.ledger {
        None => None,
        Some(path) => crate::predictions::table_format(OutputFormat::Table, Some(path))?,
    };
    Ok((rule, ledger))
}

/// The position rule, with the numbers checked.
pub fn check_trading(args: &TradingArgs) -> Result<PositionRule> {
    let rule = PositionRule::parse(&args.rule)?;
    if !(args.max_contracts.is_finite() && args.max_contracts > 0.0) {
        bail!("--max-contracts must be a finite number > 0");
    }
    for (name, value) in [
        ("--commission", args.commission),
        ("--slippage-ticks", args.slippage_ticks),
    ] {
        if value.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
            bail!("{name} must be a finite number ≥ 0");
        }
    }
    Ok(rule)
}

/// Forecast scores of what a forecaster traded: rows with a realized
/// return, the MSE of the P50 (or point forecast), the share whose sign was
/// right, and the correlation (log returns).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ForecastScores {
    pub rows: usize,
    pub mse: f64,
    pub hit_rate: f64,
    pub correlation: f64,
}

/// The scores of `f` (`None` without realized rows).
pub fn forecast_scores(f: &tli_backtest::outcome::Forecasts) -> Option<ForecastScores> {
    let pairs: Vec<(f64, f64)> = f
        .p50
        .iter()
        .zip(&f.actual)
        .filter(|(p, a)| p.is_finite() && a.is_finite())
        .map(|(p, a)| (*p, *a))
        .collect();
    let n = pairs.len();
    if n == 0 {
        return None;
    }
    let mean = |v: &dyn Fn(&(f64, f64)) -> f64| pairs.iter().map(v).sum::<f64>() / n as f64;
    let (mp, ma) = (mean(&|x| x.0), mean(&|x| x.1));
    let cov = mean(&|x| (x.0 - mp) * (x.1 - ma));
    let (vp, va) = (mean(&|x| (x.0 - mp).powi(2)), mean(&|x| (x.1 - ma).powi(2)));
    Some(ForecastScores {
        rows: n,
        mse: mean(&|x| (x.0 - x.1).powi(2)),
        hit_rate: pairs.iter().filter(|(p, a)| p * a > 0.0).count() as f64 / n as f64,
        correlation: if vp > 0.0 && va > 0.0 {
            cov / (vp * va).sqrt()
        } else {
            0.0
        },
    })
}

/// Writes the ledger and the charts the arguments ask for, then prints the
/// summary (`label` names the model: "tft@1.3.0").
pub fn show(
    result: &Backtest,
    label: &str,
    args: &BacktestArgs,
    ledger: Option<TableFormat>,
    output: OutputFormat,
) -> Result<()> {
    if let (Some(path), Some(format)) = (&args.ledger, ledger) {
        tli_wire::backtest::ledger_table(result).write(Some(path), format)?;
    }
    if let Some(dir) = &args.plots {
        plots(dir, result, label, &[])?;
    }
    if output == OutputFormat::Json {
        return print_json(result);
    }
    // A host's answer without the ledger (none asked for) has no dates: its
    // bars are counted from the periods (a period per bar after the first).
    let span = match (result.ledger.first(), result.ledger.last()) {
        (Some(first), Some(last)) => format!(
            "from {} to {} ({} bars)",
            tli_data::timefmt::format(first.ts),
            tli_data::timefmt::format(last.ts),
            result.ledger.len()
        ),
        _ => format!("({} bars)", result.strategy.performance.periods + 1),
    };
    eprintln!(
        "{label} on {} {span}: positions from {}{}; {} {} per contract traded \
         (commission {} + {} ticks)",
        result.symbol,
        result.positions_from,
        result
            .forecast
            .as_deref()
            .map(|f| format!(" of {f}"))
            .unwrap_or_default(),
        result.cost_per_contract,
        result.currency,
        result.commission,
        result.slippage_ticks
    );
    let mut summary = new_table(vec![
        "", "NET P&L", "GROSS", "COSTS", "SHARPE", "SORTINO", "MAX DD", "DD BARS", "HIT",
        "EXPOSURE", "TRADES",
    ]);
    let row = |label: &str, r: &BacktestReport| {
        vec![
            label.to_string(),
            format!("{:.2}", r.net_pnl),
            format!("{:.2}", r.gross_pnl),
            format!("{:.2}", r.costs),
            format!("{:.3}", r.performance.sharpe),
            format!("{:.3}", r.performance.sortino),
            format!("{:.2}", r.performance.max_drawdown),
            r.max_drawdown_periods.to_string(),
            format!("{:.1}%", 100.0 * r.performance.hit_rate),
            format!("{:.1}%", 100.0 * r.exposure),
            r.trades.to_string(),
        ]
    };
    summary.add_row(row("model", &result.strategy));
    summary.add_row(row("buy and hold", &result.buy_and_hold));
    summary.add_row(row("flat", &result.flat));
    crate::outln!("{summary}");
    Ok(())
}

/// `equity.png` and, for a forecaster, `forecast.png` in `dir`; `marks`:
/// times to draw a vertical line at on the equity chart (fold starts).
pub fn plots(dir: &Path, result: &Backtest, label: &str, marks: &[i64]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let ts: Vec<i64> = result.ledger.iter().map(|r| r.ts).collect();
    let equity: Vec<f64> = result.ledger.iter().map(|r| r.equity).collect();
    let how = match &result.forecast {
        Some(f) => format!("{} of {f}", result.positions_from),
        None => "the agent's positions".into(),
    };
    let path = dir.join("equity.png");
    equity_chart::draw(
        &path,
        &equity_chart::EquityCurves {
            title: format!(
                "{label} on {}: {how} · net P&L after {} per contract traded",
                result.symbol, result.cost_per_contract
            ),
            ts: &ts,
            model: &equity,
            buy_and_hold: &result.buy_and_hold_equity,
            currency: result.currency.clone(),
            marks,
        },
        (1200, 760),
    )?;
    eprintln!("equity chart written to {}", path.display());
    if let Some(f) = &result.forecasts {
        let path = dir.join("forecast.png");
        forecast_chart::draw(
            &path,
            &forecast_chart::ForecastSeries {
                title: format!(
                    "{label} on {}: forecasts against what happened",
                    result.symbol
                ),
                ts: &f.ts,
                p50: &f.p50,
                p10: &f.p10,
                p90: &f.p90,
                actual: &f.actual,
            },
            (1200, 700),
        )?;
        eprintln!("forecast chart written to {}", path.display());
    }
    Ok(())
}
