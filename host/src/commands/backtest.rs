//! `tli backtest --model BUNDLE --data FILE`: a bundle's predictions traded
//! in this process (tli-runtime `models::backtest`); shown as every client
//! shows a backtest (`tli_cli::backtests`).

use super::scan;
use anyhow::Result;
use std::path::Path;
use tli_backtest::rules::PositionRule;
use tli_cli::args::{BacktestArgs, OutputFormat, TradingArgs};
use tli_data::contracts::ContractBook;
use tli_models::Bundle;
use tli_runtime::models::backtest::BacktestOptions;
use tli_runtime::models::{LoadedModel, PredictWindow};

pub(super) fn backtest(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    args: &BacktestArgs,
    output: OutputFormat,
) -> Result<()> {
    let (rule, ledger) = tli_cli::backtests::check(args)?;
    let bundle = Bundle::open(&args.model)?;
    let book = ContractBook::load(contracts)?;
    let source = args.bars.source();
    let (table, notes) = source.read_for(&book, &bundle.card.features)?;
    let contract = source.contract(&table, &notes, &book)?;
    let registry = scan(plugin_dir)?;
    let name = bundle.card.plugin.name.clone();
    let mut model = LoadedModel::load(&registry, &bundle, &name, args.device)?;
    let window = PredictWindow {
        start: args.bars.start,
        end: args.bars.end,
    };
    let result = model.backtest(&table, contract, options(&args.trading, rule, window))?;
    tli_cli::backtests::show(&result, &model.plugin.label(), args, ledger, output)
}

/// How `trading` (checked: `rule`) trades the bars of `window`.
pub(super) fn options(
    trading: &TradingArgs,
    rule: PositionRule,
    window: PredictWindow,
) -> BacktestOptions {
    BacktestOptions {
        rule,
        max_contracts: trading.max_contracts,
        commission: trading.commission,
        slippage_ticks: trading.slippage_ticks,
        window,
    }
}
