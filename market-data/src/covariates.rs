//! The user's columns joined to an asset's bars, one value per bar, kept on
//! the table ([`BarTable::extra`]) for the feature pipeline.
//!
//! * A column of the **bar file** belongs to the bar on its row.
//! * A column of a **covariate file** (its own timestamps) is joined by
//!   time: an `observed_past` column **as of** the bar — the last covariate
//!   row at or before the bar's timestamp, so nothing stamped after a bar
//!   reaches it — and a `known_future` column **exactly**: every bar needs a
//!   covariate row with its own timestamp (a missing one is refused, naming
//!   the first). Stamp covariate rows as the bars are stamped (bar open
//!   times, or dates for daily bars). A covariate file that starts after the
//!   first bar is refused: the first bars would have nothing to join.
//! * Timestamps are UTC instants on both sides, so the join does not care
//!   about time zones or daylight-saving changes; a covariate file's
//!   timestamps written without a zone are read in the asset's zone.
//! * Columns already on the table (bars sent over the API with their
//!   columns) are not read again.

use crate::column_read::{read_columns, read_columns_with, ColumnFile, ColumnValues, NamedColumn};
use crate::columns::{ColumnKind, ColumnRole, UserColumn};
use crate::features::FeatureConfig;
use crate::zones::LocalZone;
use crate::{timefmt, BarTable, DataError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A column to read: its name and kind.
pub type Wanted = (String, ColumnKind);

/// The columns of the bar file `config` reads: its user columns without a
/// file (the model's inputs: required), and a target column (read when the
/// file has it: new bars to forecast need not).
pub fn bar_file_columns(config: &FeatureConfig) -> (Vec<Wanted>, Vec<Wanted>) {
    let inputs: Vec<(String, ColumnKind)> = config
        .columns
        .iter()
        .filter(|c| c.file.is_none())
        .map(|c| (c.name.clone(), c.kind))
        .collect();
    let target = config
        .target
        .column()
        .filter(|t| !inputs.iter().any(|(n, _)| n.eq_ignore_ascii_case(t)))
        .map(|t| (t.to_string(), ColumnKind::Real));
    (inputs, target.into_iter().collect())
}

/// Reads the columns `config` names and puts them on `table`, one value per
/// bar (see the module docs): the bar file's ([`attach_bar_file_columns`])
/// and each covariate file's. `bar_file` is the file the bars came from
/// (`None`: bars that arrived with their columns); `zone` is the time zone
/// of timestamps written without one (the asset's; a column's own `tz`
/// overrides it for its covariate file).
pub fn attach_columns(
    table: &mut BarTable,
    bar_file: Option<&Path>,
    config: &FeatureConfig,
    zone: Option<&LocalZone>,
) -> Result<(), DataError> {
    attach_bar_file_columns(table, bar_file, config, zone)?;
    // Each covariate file once, with every column read from it.
    let mut by_file: BTreeMap<(PathBuf, Option<String>), Vec<&UserColumn>> = BTreeMap::new();
    for column in config.columns.iter().filter(|c| !has(table, &c.name)) {
        if let Some(file) = &column.file {
            by_file
                .entry((file.clone(), column.tz.clone()))
                .or_default()
                .push(column);
        }
    }
    for ((path, tz), columns) in by_file {
        let own_zone = match &tz {
            Some(tz) => Some(
                LocalZone::parse(tz)
                    .map_err(|e| DataError::Invalid(format!("{}: {e}", path.display())))?,
            ),
            None => None,
        };
        let wanted: Vec<(String, ColumnKind)> =
            columns.iter().map(|c| (c.name.clone(), c.kind)).collect();
        let file = read_columns(&path, &wanted, own_zone.as_ref().or(zone))?;
        let joined = join(table, &file, &columns)?;
        table.extra.extend(joined);
    }
    Ok(())
}

fn has(table: &BarTable, name: &str) -> bool {
    column(table, name).is_some()
}

/// Puts the columns of the bar file `config` reads ([`bar_file_columns`])
/// on `table`, read from `bar_file` (the file the bars came from; the bars
/// may be a cut of it); columns already on the table are kept. Without a
/// file, a column the table lacks is refused by name.
pub fn attach_bar_file_columns(
    table: &mut BarTable,
    bar_file: Option<&Path>,
    config: &FeatureConfig,
    zone: Option<&LocalZone>,
) -> Result<(), DataError> {
    let (inputs, target) = bar_file_columns(config);
    let wanted: Vec<(String, ColumnKind)> = inputs
        .into_iter()
        .filter(|(name, _)| !has(table, name))
        .collect();
    let target: Vec<(String, ColumnKind)> = target
        .into_iter()
        .filter(|(name, _)| !has(table, name))
        .collect();
    let Some(path) = bar_file else {
        if wanted.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = wanted.iter().map(|(n, _)| n.as_str()).collect();
        return Err(DataError::Invalid(format!(
            "the bars of {} come without the column{} {} the model reads; send {} with \
             the bars",
            table.symbol,
            if names.len() == 1 { "" } else { "s" },
            names.join(", "),
            if names.len() == 1 { "it" } else { "them" }
        )));
    };
    if wanted.is_empty() && target.is_empty() {
        return Ok(());
    }
    let file = read_columns_with(path, &wanted, &target, zone)?;
    let rows = same_rows(table, &file)?;
    for column in file.columns {
        table.extra.push(NamedColumn {
            name: column.name,
            values: column.values.select(rows.iter().copied()),
        });
    }
    Ok(())
}

/// For each bar, its row in `file` (the bar file read again for its
/// columns; the bars may be a cut of it).
fn same_rows(table: &BarTable, file: &ColumnFile) -> Result<Vec<usize>, DataError> {
    exact_rows(table, file, |ts| {
        format!(
            "has no row at {}, a bar of its own prices: the file changed while it was read?",
            timefmt::format(ts)
        )
    })
}

/// For each bar, the row of `file` with its timestamp; the first bar
/// without one is refused with `problem(its timestamp)`.
fn exact_rows(
    table: &BarTable,
    file: &ColumnFile,
    problem: impl Fn(i64) -> String,
) -> Result<Vec<usize>, DataError> {
    table
        .ts
        .iter()
        .map(|&ts| {
            file.ts
                .binary_search(&ts)
                .map_err(|_| DataError::bad_file(&file.path, problem(ts)))
        })
        .collect()
}

/// The columns of a covariate file joined to the bars (see the module docs).
fn join(
    table: &BarTable,
    file: &ColumnFile,
    columns: &[&UserColumn],
) -> Result<Vec<NamedColumn>, DataError> {
    let (Some(&first_bar), Some(&first_row)) = (table.ts.first(), file.ts.first()) else {
        return Ok(Vec::new());
    };
    if first_row > first_bar {
        return Err(DataError::bad_file(
            &file.path,
            format!(
                "starts at {}, after the first bar of {} at {}: every bar needs a covariate row \
                 at or before it. Extend the file back, or start the asset at or after {}",
                timefmt::format(first_row),
                table.symbol,
                timefmt::format(first_bar),
                timefmt::format(first_row)
            ),
        ));
    }
    let mut out = Vec::with_capacity(columns.len());
    for (column, read) in columns.iter().zip(&file.columns) {
        let rows: Vec<usize> = match column.role {
            ColumnRole::KnownFuture => exact_rows(table, file, |ts| {
                format!(
                    "column {} is known_future, so every bar needs a row at its own timestamp; \
                     there is none at {} (a bar of {}). Add the row, or declare the column \
                     observed_past to join it as of each bar",
                    column.name,
                    timefmt::format(ts),
                    table.symbol
                )
            })?,
            // The last row at or before each bar (the first row is at or
            // before the first bar, checked above).
            ColumnRole::ObservedPast | ColumnRole::Static => table
                .ts
                .iter()
                .map(|ts| file.ts.partition_point(|t| t <= ts) - 1)
                .collect(),
        };
        out.push(NamedColumn {
            name: column.name.clone(),
            values: read.values.select(rows.into_iter()),
        });
    }
    Ok(out)
}

/// The column `name` of `table` (found without regard to case).
pub fn column<'a>(table: &'a BarTable, name: &str) -> Option<&'a ColumnValues> {
    table
        .extra
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(name))
        .map(|c| &c.values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::BarInterval;
    use crate::timefmt::NANOS_PER_DAY;

    fn bars(first: &str, step: i64, n: usize) -> BarTable {
        let mut t = BarTable::new("ES", BarInterval::Day);
        let start = timefmt::parse(first).unwrap();
        for i in 0..n {
            t.push(start + i as i64 * step, 100.0, 101.0, 99.0, 100.0, 10);
        }
        t
    }

    fn config(columns: Vec<UserColumn>) -> FeatureConfig {
        FeatureConfig {
            columns,
            ..FeatureConfig::default()
        }
    }

    fn reals(table: &BarTable, name: &str) -> Vec<f64> {
        match column(table, name).unwrap() {
            ColumnValues::Real(v) => v.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn observed_columns_join_as_of_each_bar_and_known_ones_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cov.csv");
        std::fs::write(
            &path,
            "date,vix,event\n2024-01-01,10,1\n2024-01-03,30,0\n2024-01-04,40,1\n2024-01-05,50,0\n",
        )
        .unwrap();
        let mut table = bars("2024-01-02", NANOS_PER_DAY, 4);
        let vix = UserColumn {
            file: Some(path.clone()),
            ..UserColumn::new("vix", ColumnRole::ObservedPast)
        };
        attach_columns(&mut table, None, &config(vec![vix.clone()]), None).unwrap();
        // 01-02 takes 01-01's row; 01-03 … 01-05 their own.
        assert_eq!(reals(&table, "vix"), vec![10.0, 30.0, 40.0, 50.0]);
        let event = UserColumn {
            file: Some(path.clone()),
            ..UserColumn::new("event", ColumnRole::KnownFuture)
        };
        let mut table = bars("2024-01-02", NANOS_PER_DAY, 4);
        let e = attach_columns(&mut table, None, &config(vec![event]), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("there is none at 2024-01-02T00:00:00Z (a bar of ES)"),
            "{e}"
        );
        // A file that starts after the bars.
        let mut table = bars("2023-12-29", NANOS_PER_DAY, 4);
        let e = attach_columns(&mut table, None, &config(vec![vix]), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("starts at 2024-01-01T00:00:00Z, after the first bar of ES at 2023-12-29"),
            "{e}"
        );
    }

    #[test]
    fn bars_without_a_column_the_config_reads_are_refused_by_name() {
        let mut table = bars("2024-01-02", NANOS_PER_DAY, 4);
        let c = config(vec![UserColumn::new("ofi", ColumnRole::ObservedPast)]);
        let e = attach_columns(&mut table, None, &c, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("come without the column ofi the model reads"),
            "{e}"
        );
    }
}
