//! `tli predict`: a model bundle applied to a bar file, in this process.

use super::scan;
use anyhow::{bail, Result};
use std::path::Path;
use tli_cli::args::{OutputFormat, PredictArgs};
use tli_data::contracts::ContractBook;
use tli_models::Bundle;
use tli_runtime::models::{LoadedModel, PredictWindow};

pub(super) fn predict(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    args: &PredictArgs,
    output: OutputFormat,
) -> Result<()> {
    let format = tli_cli::predictions::table_format(output, args.out.as_deref())?;
    if !args.bars.is_ordered() {
        bail!("--start is after --end; nothing was written");
    }
    let bundle = Bundle::open(&args.model)?;
    let book = ContractBook::load(contracts)?;
    let source = args.bars.source();
    let (table, notes) = source.read_for(&book, &bundle.card.features)?;
    let contract = source.contract(&table, &notes, &book)?;
    let registry = scan(plugin_dir)?;
    let model_id = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let mut model = LoadedModel::load(&registry, &bundle, &model_id, args.device)?;
    if let Some(threads) = args.threads {
        model.set_threads(threads);
    }
    let window = PredictWindow {
        start: args.bars.start,
        end: args.bars.end,
    };
    let predictions = model.predict_bars(&table, contract, window)?;
    eprintln!(
        "{} bars of {} predicted by {} ({})",
        predictions.len(),
        table.symbol,
        model.plugin.label(),
        model_id
    );
    tli_cli::predictions::write(&predictions, format, args.out.as_deref())
}
