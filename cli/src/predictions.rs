//! How `tli predict` writes its rows, wherever they were computed (a bundle
//! in this process, or a model loaded on the host): `-o csv|json|parquet`
//! to standard output or `--out FILE` (atomically), or a table.

use crate::args::OutputFormat;
use crate::new_table;
use anyhow::{bail, Result};
use std::path::Path;
use tli_models::{PredictionTable, TableFormat};

/// The file format: `-o csv|json|parquet`, or with `-o table` the `--out`
/// file's extension; `None` for a table on the terminal.
pub fn table_format(output: OutputFormat, out: Option<&Path>) -> Result<Option<TableFormat>> {
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

/// Writes `predictions` in `format` (to `out`, or standard output), or as a
/// table on standard output.
pub fn write(
    predictions: &PredictionTable,
    format: Option<TableFormat>,
    out: Option<&Path>,
) -> Result<()> {
    match format {
        Some(format) => predictions.write(out, format)?,
        None => crate::outln!("{}", human_table(predictions)),
    }
    Ok(())
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
