//! `tli data inspect FILE`: what a bar file holds, checked the same way
//! training would read it.

use super::bar_source::{BarSource, SymbolOrigin};
use super::contracts::ContractBook;
use super::table::{Gap, Roll};
use super::timefmt;
use super::zones::ZoneReport;
use super::{DataError, Format};
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct Summary {
    pub file: String,
    pub format: String,
    pub bytes: u64,
    pub symbol: String,
    /// Where the symbol came from (the file name, the file, the asset).
    pub symbol_origin: SymbolOrigin,
    /// The symbol the file stated, when the asset's replaced it.
    pub file_symbol: Option<String>,
    /// How the timestamps gave their zone, for people: UTC, offsets
    /// converted to UTC, local time in the given zone …
    pub timestamps: String,
    /// The same, counted.
    pub timestamp_zones: ZoneReport,
    /// The contract spec that applies …
    pub contract: Option<String>,
    /// … or why none does.
    pub contract_error: Option<String>,
    pub interval: String,
    pub bars: usize,
    pub first: String,
    pub last: String,
    pub low: f64,
    pub high: f64,
    pub last_close: f64,
    pub total_volume: u64,
    pub gap_count: usize,
    /// The largest gaps, largest first (at most 5).
    pub largest_gaps: Vec<GapText>,
    pub rolls: Vec<RollText>,
    /// Prices far from every bar around them
    /// ([`BarTable::outliers`](crate::BarTable::outliers)), one per column …
    pub outlier_count: usize,
    /// … on this many bars.
    pub outlier_bars: usize,
    /// The first of them (at most 5).
    pub outliers: Vec<OutlierText>,
}

#[derive(Debug, Serialize)]
pub struct OutlierText {
    pub at: String,
    /// 1-based bar number, as a row of the file counts it after sorting.
    pub bar: usize,
    pub column: String,
    pub value: f64,
    pub typical: f64,
}

impl OutlierText {
    pub fn describe(&self) -> String {
        format!(
            "bar {} ({}): {} {} where the bars around it close near {}",
            self.bar, self.at, self.column, self.value, self.typical
        )
    }
}

/// What a person reads about `table`'s outlier bars: `None` without any.
pub fn outlier_warning(table: &crate::BarTable) -> Option<String> {
    let found = table.outliers();
    let first = found.first()?;
    let text = outlier_text(first).describe();
    Some(format!(
        "{} bar(s) with prices far from every bar around them (more than {}× their median close \
         away), first {text}; prices in the wrong unit or with a typing slip? (`tli data inspect` \
         lists them)",
        bars_of(&found),
        crate::table::OUTLIER_FACTOR + 1.0
    ))
}

fn bars_of(found: &[crate::table::OutlierBar]) -> usize {
    let mut rows: Vec<usize> = found.iter().map(|o| o.row).collect();
    rows.dedup();
    rows.len()
}

fn outlier_text(o: &crate::table::OutlierBar) -> OutlierText {
    OutlierText {
        at: timefmt::format(o.ts),
        bar: o.row + 1,
        column: o.column.to_string(),
        value: o.value,
        typical: o.typical,
    }
}

#[derive(Debug, Serialize)]
pub struct GapText {
    pub after: String,
    pub before: String,
    pub missing_bars: i64,
}

#[derive(Debug, Serialize)]
pub struct RollText {
    pub at: String,
    pub from: String,
    pub to: String,
    pub ratio: f64,
}

pub fn summarize(path: &Path, contracts: &ContractBook) -> Result<Summary, DataError> {
    summarize_source(&BarSource::file(path), contracts)
}

/// [`summarize`] a file read with a given symbol and time zone.
pub fn summarize_source(
    source: &BarSource,
    contracts: &ContractBook,
) -> Result<Summary, DataError> {
    let path = source.path.as_path();
    let format = Format::from_path(path)?;
    let bytes = std::fs::metadata(path)
        .map_err(|e| DataError::io(path, e))?
        .len();
    let (table, notes) = source.read(contracts)?;
    let contract = source.contract(&table, &notes, contracts);
    let outliers = table.outliers();
    let mut gaps: Vec<Gap> = table.gaps();
    let gap_count = gaps.len();
    gaps.sort_by_key(|g| std::cmp::Reverse(g.missing_bars));
    let fold = |init: f64, f: fn(f64, f64) -> f64, v: &[f64]| v.iter().copied().fold(init, f);
    Ok(Summary {
        file: path.display().to_string(),
        format: format!("{format:?}").to_lowercase(),
        bytes,
        contract: contract.as_ref().ok().map(|c| {
            format!(
                "{} ({}, {}): tick {} = {} {}",
                c.root,
                c.name,
                c.exchange,
                c.tick_size,
                c.tick_value(),
                c.currency
            )
        }),
        contract_error: contract.as_ref().err().map(|e| e.to_string()),
        symbol: table.symbol.clone(),
        symbol_origin: notes.symbol_origin,
        file_symbol: notes.file_symbol.clone(),
        timestamps: notes.timestamps.describe(),
        timestamp_zones: notes.timestamps.clone(),
        interval: table.interval.name().to_string(),
        bars: table.len(),
        first: timefmt::format(table.ts[0]),
        last: timefmt::format(table.ts[table.len() - 1]),
        low: fold(f64::INFINITY, f64::min, &table.low),
        high: fold(f64::NEG_INFINITY, f64::max, &table.high),
        last_close: table.close[table.len() - 1],
        total_volume: table.volume.iter().sum(),
        gap_count,
        largest_gaps: gaps
            .iter()
            .take(5)
            .map(|g| GapText {
                after: timefmt::format(g.after_ts),
                before: timefmt::format(g.before_ts),
                missing_bars: g.missing_bars,
            })
            .collect(),
        rolls: table.rolls.iter().map(roll_text).collect(),
        outlier_count: outliers.len(),
        outlier_bars: bars_of(&outliers),
        outliers: outliers.iter().take(5).map(outlier_text).collect(),
    })
}

fn roll_text(r: &Roll) -> RollText {
    RollText {
        at: timefmt::format(r.ts),
        from: r.from.clone(),
        to: r.to.clone(),
        ratio: r.ratio,
    }
}
