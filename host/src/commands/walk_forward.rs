//! `tli walk-forward JOB --state-dir S`: a walk-forward job's out-of-sample
//! record, read offline. For every model and asset of the job, each fold's
//! model (its task's newest good checkpoint, as `tli models export` takes
//! it) is backtested on its own fold's out-of-sample bars (the card's test
//! split: bars it never trained on; the bars before still serve as
//! look-back), and the folds are concatenated into one ledger
//! (tli-runtime `models::backtest::concatenate`). Printed per fold and over
//! the whole span, with forecast scores for forecasters.

use super::scan;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use tli_backtest::outcome::Backtest;
use tli_cli::args::{OutputFormat, WalkForwardArgs};
use tli_cli::backtests::{forecast_scores, ForecastScores};
use tli_cli::{new_table, print_json};
use tli_core::job::{AssetSpec, JobSpec};
use tli_core::state::TaskState;
use tli_data::contracts::ContractBook;
use tli_plugin_api::Device;
use tli_runtime::models::backtest::concatenate;
use tli_runtime::models::catalog::Catalog;
use tli_runtime::models::{LoadedModel, PredictWindow};
use tli_store::Store;

/// One fold of a series.
#[derive(Serialize)]
struct Fold {
    task: i64,
    /// First and last out-of-sample bar (UTC ns).
    test: [i64; 2],
    backtest: Backtest,
    forecast: Option<ForecastScores>,
}

/// One model on one asset across the folds.
#[derive(Serialize)]
struct Series {
    model: usize,
    plugin: String,
    config: serde_json::Value,
    symbol: String,
    folds: Vec<Fold>,
    out_of_sample: Backtest,
    forecast: Option<ForecastScores>,
}

pub(super) fn run(
    plugin_dir: &std::path::Path,
    contracts: Option<&std::path::Path>,
    args: &WalkForwardArgs,
    output: OutputFormat,
) -> Result<()> {
    let rule = tli_cli::backtests::check_trading(&args.trading)?;
    let state_dir = &args.state_dir;
    let store = Store::open_read_only(state_dir)
        .with_context(|| format!("reading the store of {}", state_dir.display()))?;
    let job_id = i64::try_from(args.job).map_err(|_| anyhow!("no job {}", args.job))?;
    let job = store
        .job(job_id)?
        .ok_or_else(|| anyhow!("no job {} in {}", args.job, state_dir.display()))?;
    let spec: JobSpec = serde_json::from_str(&job.spec_json).context("the stored job spec")?;
    if spec.walk_forward.is_none() {
        bail!(
            "job {} has no walk-forward folds; backtest one of its models with `tli backtest \
             --model BUNDLE` (`tli models export`)",
            args.job
        );
    }
    let tasks = store.tasks_of(job_id)?;
    let catalog = Catalog {
        store: &store,
        state_dir,
    };
    let registry = scan(plugin_dir)?;
    let book = ContractBook::load(contracts)?;
    let scratch = std::env::temp_dir().join(format!("tli-walk-forward-{}", std::process::id()));
    let (folds, units) = (spec.folds(), spec.assets.len() * spec.folds());
    // Each asset's bars, read once for every model.
    let mut bars = Vec::new();
    for asset in &spec.assets {
        let AssetSpec::Data(source) = asset else {
            bars.push(None);
            continue;
        };
        let (table, notes) = source.read_for(&book, &spec.features)?;
        let contract = source.contract(&table, &notes, &book)?.clone();
        bars.push(Some((table, contract)));
    }
    let mut all = Vec::new();
    for (m, model) in spec.models.iter().enumerate() {
        for (a, asset) in spec.assets.iter().enumerate() {
            let Some((table, contract)) = &bars[a] else {
                continue;
            };
            let mut series_folds = Vec::new();
            let mut periods_per_year = 252.0;
            for k in 0..folds {
                let ordinal = (m * units + a * folds + k) as u32;
                let task = tasks
                    .iter()
                    .find(|t| t.ordinal == ordinal)
                    .ok_or_else(|| anyhow!("job {} has no task {ordinal}", args.job))?;
                if task.state != TaskState::Completed {
                    bail!(
                        "task {} (fold {} of {} on {}) is {}: wait for the job to finish, or \
                         resume it (`tli train resume {}`)",
                        task.id,
                        k + 1,
                        model.plugin,
                        asset.label(),
                        task.state.as_str(),
                        args.job
                    );
                }
                let (entry, bundle) = catalog.open(&registry, &task.id.to_string(), &scratch)?;
                let test = entry
                    .card
                    .assets
                    .first()
                    .and_then(|c| c.splits.test)
                    .ok_or_else(|| anyhow!("task {}'s model has no test split", task.id))?;
                periods_per_year = entry.card.inputs.periods_per_year;
                let mut loaded = LoadedModel::load(&registry, &bundle, &entry.id, Device::Cpu)?;
                let window = PredictWindow {
                    start: Some(test[0]),
                    end: Some(test[1]),
                };
                let options = super::backtest::options(&args.trading, rule, window);
                let backtest = loaded.backtest(table, contract, options)?;
                series_folds.push(Fold {
                    task: task.id,
                    test,
                    forecast: backtest.forecasts.as_ref().and_then(forecast_scores),
                    backtest,
                });
            }
            let parts: Vec<Backtest> = series_folds.iter().map(|f| f.backtest.clone()).collect();
            let whole = concatenate(&parts, periods_per_year)?;
            all.push(Series {
                model: m,
                plugin: model.plugin.clone(),
                config: model.config.clone().unwrap_or(serde_json::Value::Null),
                symbol: whole.symbol.clone(),
                forecast: whole.forecasts.as_ref().and_then(forecast_scores),
                folds: series_folds,
                out_of_sample: whole,
            });
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if let Some(dir) = &args.out {
        for s in &all {
            let sub = dir.join(format!("model{}-{}", s.model, s.symbol));
            std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
            let ledger = sub.join("ledger.csv");
            tli_wire::backtest::ledger_table(&s.out_of_sample)
                .write(Some(&ledger), tli_models::TableFormat::Csv)?;
            let label = format!("{} (model {}) out of sample", s.plugin, s.model);
            let starts: Vec<i64> = s.folds.iter().skip(1).map(|f| f.test[0]).collect();
            tli_cli::backtests::plots(&sub, &s.out_of_sample, &label, &starts)?;
        }
    }
    if output == OutputFormat::Json {
        return print_json(&all);
    }
    for s in &all {
        print_series(s);
    }
    Ok(())
}

fn print_series(s: &Series) {
    let b = &s.out_of_sample;
    tli_cli::outln!(
        "model {} ({} {}) on {}: {} folds, {} out-of-sample bars, positions from {}; {} {} per \
         contract traded",
        s.model,
        s.plugin,
        s.config,
        s.symbol,
        s.folds.len(),
        b.ledger.len(),
        b.positions_from,
        b.cost_per_contract,
        b.currency
    );
    let mut table = new_table(vec![
        "", "FROM", "TO", "NET P&L", "COSTS", "SHARPE", "MAX DD", "TRADES", "B&H P&L", "MSE",
        "SIGN HIT", "CORR",
    ]);
    let date = |t: i64| tli_data::timefmt::format_date(t);
    let row = |label: String, from: i64, to: i64, b: &Backtest, f: Option<ForecastScores>| {
        let score =
            |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        vec![
            label,
            date(from),
            date(to),
            format!("{:.2}", b.strategy.net_pnl),
            format!("{:.2}", b.strategy.costs),
            format!("{:.3}", b.strategy.performance.sharpe),
            format!("{:.2}", b.strategy.performance.max_drawdown),
            b.strategy.trades.to_string(),
            format!("{:.2}", b.buy_and_hold.net_pnl),
            score(f.map(|f| f.mse), 6),
            score(f.map(|f| 100.0 * f.hit_rate), 1),
            score(f.map(|f| f.correlation), 3),
        ]
    };
    for (k, f) in s.folds.iter().enumerate() {
        table.add_row(row(
            format!("fold {} (task {})", k + 1, f.task),
            f.test[0],
            f.test[1],
            &f.backtest,
            f.forecast,
        ));
    }
    let first = b.ledger.first().map_or(0, |r| r.ts);
    let last = b.ledger.last().map_or(0, |r| r.ts);
    table.add_row(row("out of sample".into(), first, last, b, s.forecast));
    tli_cli::outln!("{table}");
}
