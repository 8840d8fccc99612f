//! `tli predict`: a model bundle applied to a bar file, in this process.

use super::scan;
use anyhow::{bail, Result};
use std::path::Path;
use tli_cli::args::{OutputFormat, PredictArgs};
use tli_cli::new_table;
use tli_data::contracts::ContractBook;
use tli_data::BarSource;
use tli_models::{Bundle, PredictionTable, TableFormat};
use tli_runtime::models::{LoadedModel, PredictWindow};

pub(super) fn predict(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    args: &PredictArgs,
    output: OutputFormat,
) -> Result<()> {
    let format = table_format(output, args.out.as_deref())?;
    if let (Some(start), Some(end)) = (args.start, args.end) {
        if start > end {
            bail!("--start is after --end; nothing was written");
        }
    }
    let bundle = Bundle::open(&args.model)?;
    let book = ContractBook::load(contracts)?;
    let source = BarSource {
        tz: args.tz.clone(),
        ..args.data.clone()
    };
    let (table, notes) = source.read(&book)?;
    let contract = source.contract(&table, &notes, &book)?;
    if let Some(threads) = args.threads {
        tch::set_num_threads(threads);
    }
    let registry = scan(plugin_dir)?;
    let model_id = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let mut model = LoadedModel::load(&registry, &bundle, &model_id, args.device)?;
    let window = PredictWindow {
        start: args.start,
        end: args.end,
    };
    let predictions = model.predict_bars(&table, contract, window)?;
    eprintln!(
        "{} bars of {} predicted by {} ({})",
        predictions.len(),
        table.symbol,
        model.plugin.label(),
        model_id
    );
    match format {
        Some(format) => predictions.write(args.out.as_deref(), format)?,
        None => tli_cli::outln!("{}", human_table(&predictions)),
    }
    Ok(())
}

/// The file format: `-o csv|json|parquet`, or with `-o table` the `--out`
/// file's extension; `None` for a table on the terminal.
fn table_format(output: OutputFormat, out: Option<&Path>) -> Result<Option<TableFormat>> {
    Ok(match output {
        OutputFormat::Csv => Some(TableFormat::Csv),
        OutputFormat::Json => Some(TableFormat::Json),
        OutputFormat::Parquet => Some(TableFormat::Parquet),
        OutputFormat::Table => match out {
            None => None,
            Some(path) => match path.extension().and_then(|e| e.to_str()) {
                Some("csv") => Some(TableFormat::Csv),
                Some("json") => Some(TableFormat::Json),
                Some("parquet") => Some(TableFormat::Parquet),
                _ => bail!(
                    "--out {}: say the format with -o csv|json|parquet (or end the name in \
                     .csv, .json or .parquet); nothing was written",
                    path.display()
                ),
            },
        },
    })
}

fn human_table(predictions: &PredictionTable) -> comfy_table::Table {
    let mut header = vec!["TIME".to_string(), "SYMBOL".to_string()];
    header.extend(predictions.columns.iter().map(|c| c.to_uppercase()));
    let mut table = new_table(header.iter().map(String::as_str).collect());
    for i in 0..predictions.len() {
        let mut row = vec![
            tli_data::timefmt::format(predictions.timestamps[i]),
            predictions.symbols[i].clone(),
        ];
        row.extend(predictions.row(i).iter().map(|v| {
            if v.is_nan() {
                "-".to_string()
            } else {
                format!("{v:.6}")
            }
        }));
        table.add_row(row);
    }
    table
}
