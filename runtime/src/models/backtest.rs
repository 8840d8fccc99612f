//! A model's predictions as a trader's P&L: the model applied to bars (as
//! `tli predict` does), its outputs turned into positions, and the positions
//! priced bar by bar with the contract's economics ([`tli_backtest`]),
//! beside buy-and-hold and flat on the same bars.
//!
//! * **Positions.** An agent's own (`position` column). A forecaster's from
//!   its one-bar-ahead forecast by a [`PositionRule`]: the P50 of horizon 1
//!   (`<target>:h1:p50`, or `<target>:p50`), sized with its P10–P90 band, or
//!   a point forecast (`<target>:mean`, the sign rule only). A bar the model
//!   gives no output for (inside the span, e.g. a window across a roll) is
//!   flat.
//! * **Bars.** From the first bar with an output to the last; roll markers
//!   from the file (continuous DBN series).
//! * **Costs.** Commission per contract and slippage in ticks: given, or an
//!   agent's own trading config, or the trading environment's defaults (2.0
//!   and 0.5 ticks).

use super::{LoadedModel, ModelError, PredictWindow};
use tli_backtest::ledger::{self, BacktestReport, Bars, LedgerRow};
use tli_backtest::metrics::CostTerms;
pub use tli_backtest::outcome::{Backtest, Forecasts};
use tli_backtest::rules::{self, PositionRule};
use tli_data::contracts::ContractSpec;
use tli_data::table::BarTable;
use tli_models::PredictionTable;
use tli_plugin_api::ROLL_BEFORE;

pub use tli_backtest::{DEFAULT_COMMISSION, DEFAULT_SLIPPAGE_TICKS};

/// How to trade a model's outputs.
#[derive(Clone, Copy, Debug)]
pub struct BacktestOptions {
    pub rule: PositionRule,
    pub max_contracts: f64,
    /// `None`: the agent's config, else the defaults.
    pub commission: Option<f64>,
    pub slippage_ticks: Option<f64>,
    pub window: PredictWindow,
}

/// The forecast column `read` (`…p50` or `…mean`), its band and the
/// target's realized values, from `outputs`.
fn forecasts(outputs: &PredictionTable, read: &str, target: &str) -> Forecasts {
    let column = |name: &str| -> Vec<f64> {
        match outputs.columns.iter().position(|c| c == name) {
            Some(c) => (0..outputs.len()).map(|i| outputs.row(i)[c]).collect(),
            None => Vec::new(),
        }
    };
    let prefix = read
        .strip_suffix("p50")
        .or_else(|| read.strip_suffix("mean"))
        .unwrap_or(read);
    Forecasts {
        ts: outputs.timestamps.clone(),
        p50: column(read),
        p10: column(&format!("{prefix}p10")),
        p90: column(&format!("{prefix}p90")),
        actual: column(&format!("{target}:actual")),
    }
}

/// Too few bars to trade (a request to fix: more bars, a wider window).
fn too_few(what: &str) -> ModelError {
    ModelError::Backtest(tli_backtest::MetricsError::Data(format!(
        "{what}: give more bars or widen the window"
    )))
}

fn bad(message: String) -> ModelError {
    ModelError::Card(message)
}

impl LoadedModel {
    /// The model backtested on `table`'s bars inside `options.window`.
    pub fn backtest(
        &mut self,
        table: &BarTable,
        contract: &ContractSpec,
        options: BacktestOptions,
    ) -> Result<Backtest, ModelError> {
        let prepared = self.prepare(table, contract, options.window)?;
        let outputs = self.predict_prepared(&prepared)?;
        let rows = &prepared.rows;
        // The span: from the first bar with an output to the last.
        let index = |ts: i64| rows.timestamps.binary_search(&ts).ok();
        let (Some(first), Some(last)) = (
            outputs.timestamps.first().and_then(|&t| index(t)),
            outputs.timestamps.last().and_then(|&t| index(t)),
        ) else {
            return Err(too_few(
                "the model gave no outputs on these bars (fewer bars than its look-back?)",
            ));
        };
        if last <= first {
            return Err(too_few(
                "the model gave an output for one bar only; a backtest needs at least 2",
            ));
        }
        let span = first..last + 1;
        let (wanted, forecast, positions_from) = self.positions(&outputs, options)?;
        let mut positions = vec![0.0; span.len()];
        for (i, &ts) in outputs.timestamps.iter().enumerate() {
            if let Some(r) = index(ts) {
                positions[r - first] = wanted[i];
            }
        }
        let (commission, slippage_ticks) = self.costs(options);
        let terms = CostTerms::new(
            contract.point_value,
            commission + slippage_ticks * contract.tick_size * contract.point_value,
        )?;
        let roll_before: Vec<bool> = rows.row_markers[span.clone()]
            .iter()
            .map(|m| m & ROLL_BEFORE != 0)
            .collect();
        let bars = Bars {
            ts: &rows.timestamps[span.clone()],
            close: &rows.close[span.clone()],
            roll_before: &roll_before,
        };
        let priced = price(bars, &positions, terms, self.card.inputs.periods_per_year)?;
        let forecasts = forecast
            .as_deref()
            .zip(self.card.inputs.target_names.first())
            .map(|(read, target)| self::forecasts(&outputs, read, target));
        Ok(Backtest {
            symbol: rows.symbol.clone(),
            positions_from,
            forecast,
            commission,
            slippage_ticks,
            cost_per_contract: terms.cost_per_contract,
            point_value: terms.point_value,
            currency: contract.currency.clone(),
            strategy: priced.strategy,
            buy_and_hold: priced.buy_and_hold,
            flat: priced.flat,
            ledger: priced.ledger,
            buy_and_hold_equity: priced.buy_and_hold_equity,
            forecasts,
        })
    }

    /// The position of every output row, the forecast column read, and
    /// where the positions came from.
    fn positions(
        &self,
        outputs: &PredictionTable,
        options: BacktestOptions,
    ) -> Result<(Vec<f64>, Option<String>, String), ModelError> {
        let column = |name: &str| outputs.columns.iter().position(|c| c == name);
        let values =
            |c: usize| -> Vec<f64> { (0..outputs.len()).map(|i| outputs.row(i)[c]).collect() };
        if let Some(c) = column("position") {
            return Ok((values(c), None, "agent".into()));
        }
        // A forecaster trades its return forecasts (or their sign): a forecast of volatility,
        // range or a column of the user's says nothing about which way to trade.
        use tli_data::columns::Target;
        let trained_on = &self.card.features.target;
        if !matches!(trained_on, Target::FwdLogret | Target::FwdSign) {
            return Err(bad(format!(
                "this model forecasts {} rather than returns, so its forecasts give no \
                 position to trade; backtest a model whose target is fwd_logret or fwd_sign",
                trained_on.name(1).trim_end_matches("_1")
            )));
        }
        let target = self
            .card
            .inputs
            .target_names
            .first()
            .ok_or_else(|| bad("the model has no target".into()))?;
        let prefixes = [format!("{target}:h1:"), format!("{target}:")];
        for prefix in &prefixes {
            if let Some(p50) = column(&format!("{prefix}p50")) {
                let band = column(&format!("{prefix}p10")).zip(column(&format!("{prefix}p90")));
                let (p10, p90) = match band {
                    Some((lo, hi)) => (values(lo), values(hi)),
                    None => (Vec::new(), Vec::new()),
                };
                let band = (!p10.is_empty()).then_some((&p10[..], &p90[..]));
                let positions =
                    rules::positions(options.rule, &values(p50), band, options.max_contracts)?;
                return Ok((positions, Some(format!("{prefix}p50")), options.rule.name()));
            }
        }
        for prefix in &prefixes {
            if let Some(mean) = column(&format!("{prefix}mean")) {
                let positions =
                    rules::positions(options.rule, &values(mean), None, options.max_contracts)?;
                return Ok((
                    positions,
                    Some(format!("{prefix}mean")),
                    options.rule.name(),
                ));
            }
        }
        Err(bad(format!(
            "the model's outputs [{}] hold no position and no forecast of {target} to trade",
            outputs.columns.join(", ")
        )))
    }

    /// Commission and slippage: given, the agent's own, or the defaults.
    fn costs(&self, options: BacktestOptions) -> (f64, f64) {
        let own = |key: &str| {
            self.card
                .config
                .get("trading")
                .and_then(|t| t.get(key))
                .and_then(|v| v.as_f64())
        };
        (
            options
                .commission
                .or_else(|| own("commission_per_contract"))
                .unwrap_or(DEFAULT_COMMISSION),
            options
                .slippage_ticks
                .or_else(|| own("slippage_ticks"))
                .unwrap_or(DEFAULT_SLIPPAGE_TICKS),
        )
    }
}

/// Backtests of consecutive spans (the out-of-sample windows of walk-forward
/// folds, each traded by the model of its fold) as one: their bars and
/// positions concatenated in order and priced as one ledger, so the position
/// a fold's model takes at its last bar is held over the next fold's first
/// bar, beside buy-and-hold and flat on the same bars.
pub fn concatenate(parts: &[Backtest], periods_per_year: f64) -> Result<Backtest, ModelError> {
    let first = parts
        .first()
        .ok_or_else(|| bad("no backtests to concatenate".into()))?;
    let rows: Vec<&LedgerRow> = parts.iter().flat_map(|p| &p.ledger).collect();
    if let Some(w) = rows.windows(2).find(|w| w[0].ts >= w[1].ts) {
        return Err(bad(format!(
            "the spans overlap or are out of order at {}",
            tli_data::timefmt::format(w[1].ts)
        )));
    }
    if parts
        .iter()
        .any(|p| p.symbol != first.symbol || p.cost_per_contract != first.cost_per_contract)
    {
        return Err(bad("the backtests are of different symbols or costs".into()));
    }
    let ts: Vec<i64> = rows.iter().map(|r| r.ts).collect();
    let close: Vec<f64> = rows.iter().map(|r| r.close).collect();
    let roll_before: Vec<bool> = rows.iter().map(|r| r.roll).collect();
    let positions: Vec<f64> = rows.iter().map(|r| r.position).collect();
    let terms = CostTerms::new(first.point_value, first.cost_per_contract)?;
    let bars = Bars {
        ts: &ts,
        close: &close,
        roll_before: &roll_before,
    };
    let priced = price(bars, &positions, terms, periods_per_year)?;
    let forecasts = parts
        .iter()
        .map(|p| p.forecasts.as_ref())
        .collect::<Option<Vec<_>>>()
        .map(|all| {
            let mut joined = Forecasts::default();
            for f in all {
                joined.ts.extend(&f.ts);
                joined.p50.extend(&f.p50);
                joined.p10.extend(&f.p10);
                joined.p90.extend(&f.p90);
                joined.actual.extend(&f.actual);
            }
            joined
        });
    Ok(Backtest {
        ledger: priced.ledger,
        strategy: priced.strategy,
        buy_and_hold: priced.buy_and_hold,
        flat: priced.flat,
        buy_and_hold_equity: priced.buy_and_hold_equity,
        forecasts,
        ..first.clone()
    })
}

/// Positions priced on bars, beside buy-and-hold and flat.
struct Priced {
    ledger: Vec<LedgerRow>,
    strategy: BacktestReport,
    buy_and_hold: BacktestReport,
    buy_and_hold_equity: Vec<f64>,
    flat: BacktestReport,
}

fn price(
    bars: Bars<'_>,
    positions: &[f64],
    terms: CostTerms,
    periods_per_year: f64,
) -> Result<Priced, ModelError> {
    let run = |positions: &[f64]| -> Result<(Vec<LedgerRow>, BacktestReport), ModelError> {
        let rows = ledger::ledger(bars, positions, terms)?;
        let report = ledger::report(&rows, periods_per_year)?;
        Ok((rows, report))
    };
    let n = positions.len();
    let (ledger, strategy) = run(positions)?;
    let (held, buy_and_hold) = run(&vec![1.0; n])?;
    let (_, flat) = run(&vec![0.0; n])?;
    Ok(Priced {
        ledger,
        strategy,
        buy_and_hold,
        buy_and_hold_equity: held.iter().map(|r| r.equity).collect(),
        flat,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(ts: std::ops::Range<i64>, positions: &[f64]) -> Backtest {
        let close: Vec<f64> = ts.clone().map(|t| 100.0 + (t * t % 7) as f64).collect();
        let ts: Vec<i64> = ts.collect();
        let roll = vec![false; ts.len()];
        let terms = CostTerms::new(50.0, 8.25).unwrap();
        let bars = Bars {
            ts: &ts,
            close: &close,
            roll_before: &roll,
        };
        let rows = ledger::ledger(bars, positions, terms).unwrap();
        let report = ledger::report(&rows, 252.0).unwrap();
        Backtest {
            symbol: "ES".into(),
            positions_from: "sign".into(),
            forecast: None,
            commission: 2.0,
            slippage_ticks: 0.5,
            cost_per_contract: 8.25,
            point_value: 50.0,
            currency: "USD".into(),
            strategy: report.clone(),
            buy_and_hold: report.clone(),
            flat: report,
            ledger: rows,
            buy_and_hold_equity: Vec::new(),
            forecasts: None,
        }
    }

    #[test]
    fn consecutive_spans_are_priced_as_one_ledger_with_each_folds_last_position_held_on() {
        let a = part(0..4, &[1.0, 1.0, -1.0, 1.0]);
        let b = part(4..7, &[1.0, 0.0, -1.0]);
        let whole = concatenate(&[a.clone(), b.clone()], 252.0).unwrap();
        let one = part(0..7, &[1.0, 1.0, -1.0, 1.0, 1.0, 0.0, -1.0]);
        assert_eq!(whole.ledger, one.ledger);
        assert_eq!(whole.strategy, one.strategy);
        // The fold boundary earns what a's last position made over b's first bar.
        let boundary = &whole.ledger[4];
        assert_eq!(
            boundary.gross_pnl,
            50.0 * (b.ledger[0].close - a.ledger[3].close)
        );
        let e = concatenate(&[b, a], 252.0).unwrap_err().to_string();
        assert!(e.contains("overlap or are out of order"), "{e}");
    }
}
