//! OHLCV bars as CSV text.
//!
//! **Written** (by [`write()`]): the header `ts_event,open,high,low,close,volume,symbol`
//! (then the table's own columns, if any: numbers, or labels; a missing
//! value as an empty field), one line per bar; `ts_event` as RFC 3339 UTC ([`timefmt::format`]), prices
//! with Rust's shortest round-trip `f64` formatting (so reading the file back
//! gives bit-identical prices), volume as an integer, and the table's symbol on
//! every line (so the file reads back as the same symbol whatever its name).
//!
//! **Read** (by [`read`]):
//! * the first line is the header; column names are matched case-insensitively
//!   (surrounding spaces ignored) and may come in any order;
//! * required: a timestamp column named `ts_event`, `timestamp`, `ts` or `date`
//!   (if several are present the first in that order is used), and `open`,
//!   `high`, `low`, `close`, `volume`; a column name that appears twice is an
//!   error;
//! * timestamps in any form [`timefmt::parse_stated`] reads (`YYYY-MM-DD`,
//!   `YYYY-MM-DDTHH:MM:SS[.f]` with `Z` or a UTC offset such as `-05:00`,
//!   integer nanoseconds); offsets are converted to UTC; a date and time
//!   without a zone only with a given time zone ([`crate::zones`]);
//! * volume a non-negative integer (`1500` or `1500.0`; `1500.5` is an error);
//! * an optional `symbol` column, which must hold the same value on every row;
//!   without one the symbol is the file name up to its first `.`
//!   (`es_daily.csv` → `es_daily`);
//! * any other column is ignored;
//! * the bar interval is [`BarInterval::infer`]red from the timestamps; a file
//!   with a single bar cannot show its spacing and is taken as daily bars.
//!
//! Every row is kept in file order; [`BarTable::validate`] then refuses
//! unsorted or repeated timestamps and impossible prices. Errors name the file,
//! the 1-based data row (the header is not counted), the column and the text.

use super::bar_source::{ReadNotes, SymbolOrigin};
use super::column_read::ColumnValues;
use super::timefmt;
use super::zones::{LocalZone, Timestamps};
use super::{excerpt, list_excerpt, BarInterval, BarTable, DataError};
use crate::files::LineCap;
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

/// Accepted names of the timestamp column, in order of preference
/// (`datetime`: pandas' and yfinance's name for an intraday index).
pub const TIMESTAMP_COLUMNS: [&str; 5] = ["ts_event", "timestamp", "ts", "datetime", "date"];

/// How a missing timestamp column is named in errors.
pub fn timestamp_columns_text() -> String {
    format!(
        "{} (or {})",
        TIMESTAMP_COLUMNS[0],
        TIMESTAMP_COLUMNS[1..].join(", ")
    )
}

/// The symbol a file stands for when it does not say: its name up to the
/// first `.` (`es_daily.csv` → `es_daily`, `ESH4.ohlcv-1m.dbn.zst` → `ESH4`).
pub fn symbol_from_file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy())
        .and_then(|name| name.split('.').next().map(str::to_string))
        .unwrap_or_default()
}

/// Reads a CSV bar file (see the module docs for what is accepted).
pub fn read(path: &Path) -> Result<BarTable, DataError> {
    read_with(path, None).map(|(table, _)| table)
}

/// [`read`], with the time zone of timestamps written without one, and how
/// the symbol and the timestamps' zones were found.
pub fn read_with(
    path: &Path,
    zone: Option<&LocalZone>,
) -> Result<(BarTable, ReadNotes), DataError> {
    let (mut reader, header) = open_with_header(path)?;
    let header: Vec<String> = header.iter().map(|h| h.to_ascii_lowercase()).collect();
    if header.is_empty() || header.iter().all(String::is_empty) {
        return Err(DataError::bad_file(path, "is empty: no header line"));
    }
    let columns = Columns::find(path, &header)?;

    let mut table = BarTable::new("", BarInterval::Day);
    let mut symbol: Option<String> = None;
    let mut stamps = Timestamps::new(zone);
    let mut record = csv::StringRecord::new();
    let mut row = 0usize;
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(csv_error(path, Some(row + 1), e)),
        }
        row += 1;
        if record.len() != header.len() {
            return Err(DataError::bad_row(
                path,
                row,
                format!(
                    "has {} fields but the header has {} ({})",
                    record.len(),
                    header.len(),
                    header_list(&header)
                ),
            ));
        }
        let field = |index: usize| record.get(index).unwrap_or_default().trim();
        let ts_text = field(columns.ts);
        let ts = stamps.text(ts_text).map_err(|e| {
            DataError::bad_row(path, row, format!("column {}: {e}", header[columns.ts]))
        })?;
        let price = |index: usize| -> Result<f64, DataError> {
            let text = field(index);
            text.parse::<f64>().map_err(|_| {
                DataError::bad_row(
                    path,
                    row,
                    format!(
                        "column {}: cannot parse {} as a number",
                        header[index],
                        excerpt(text)
                    ),
                )
            })
        };
        let open = price(columns.open)?;
        let high = price(columns.high)?;
        let low = price(columns.low)?;
        let close = price(columns.close)?;
        let volume_text = field(columns.volume);
        let volume = parse_volume(volume_text).ok_or_else(|| {
            DataError::bad_row(
                path,
                row,
                format!(
                    "column {}: cannot parse {} as a volume (a non-negative integer)",
                    header[columns.volume],
                    excerpt(volume_text)
                ),
            )
        })?;
        if let Some(index) = columns.symbol {
            let text = field(index);
            match &symbol {
                None => symbol = Some(text.to_string()),
                Some(first) if first != text => {
                    return Err(DataError::bad_row(
                        path,
                        row,
                        format!(
                            "symbol {} differs from {} on row 1; a file must hold one symbol",
                            excerpt(text),
                            excerpt(first)
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        table.push(ts, open, high, low, close, volume);
    }
    if row == 0 {
        return Err(DataError::bad_file(path, "holds a header but no bars"));
    }
    let symbol_origin = match symbol {
        Some(s) if !s.is_empty() => {
            table.symbol = s;
            SymbolOrigin::Column
        }
        Some(_) => return Err(DataError::bad_row(path, 1, "symbol is empty")),
        None => {
            table.symbol = symbol_from_file_name(path);
            SymbolOrigin::FileName
        }
    };
    table.interval = BarInterval::infer(&table.ts).unwrap_or(BarInterval::Day);
    table.validate(path)?;
    let notes = ReadNotes {
        symbol_origin,
        file_symbol: None,
        timestamps: stamps.report,
    };
    Ok((table, notes))
}

/// A CSV reader of a data file (its lines capped).
pub(crate) type CsvReader = csv::Reader<BufReader<LineCap<File>>>;

/// A CSV reader of `path` past its header, and the header's names (a
/// byte-order mark and surrounding spaces removed, case kept).
pub(crate) fn open_with_header(path: &Path) -> Result<(CsvReader, Vec<String>), DataError> {
    let file = crate::files::open_data_file(path)?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(BufReader::with_capacity(1 << 16, LineCap::new(file)));
    let header = reader
        .headers()
        .map_err(|e| csv_error(path, None, e))?
        .iter()
        .map(|name| name.trim_start_matches('\u{feff}').trim().to_string())
        .collect();
    Ok((reader, header))
}

/// Writes `table` as CSV (see the module docs). The table is validated first:
/// a table that [`read`] would refuse is not written.
pub fn write(path: &Path, table: &BarTable) -> Result<(), DataError> {
    table.validate(path)?;
    let file = File::create(path).map_err(|e| DataError::io(path, e))?;
    let mut writer = csv::WriterBuilder::new().from_writer(BufWriter::with_capacity(1 << 16, file));
    let write_error = |e: csv::Error| match e.into_kind() {
        csv::ErrorKind::Io(io) => DataError::io(path, io),
        other => DataError::bad_file(path, format!("cannot write CSV: {other:?}")),
    };
    let mut header = vec![
        "ts_event", "open", "high", "low", "close", "volume", "symbol",
    ];
    header.extend(table.extra.iter().map(|c| c.name.as_str()));
    writer.write_record(&header).map_err(write_error)?;
    for i in 0..table.len() {
        let mut record = vec![
            timefmt::format(table.ts[i]),
            table.open[i].to_string(),
            table.high[i].to_string(),
            table.low[i].to_string(),
            table.close[i].to_string(),
            table.volume[i].to_string(),
            table.symbol.clone(),
        ];
        for column in &table.extra {
            record.push(match &column.values {
                ColumnValues::Real(v) if v[i].is_nan() => String::new(),
                ColumnValues::Real(v) => v[i].to_string(),
                ColumnValues::Text(v) => v[i].clone().unwrap_or_default(),
            });
        }
        writer.write_record(&record).map_err(write_error)?;
    }
    writer.flush().map_err(|e| DataError::io(path, e))?;
    Ok(())
}

/// Column positions in the header.
struct Columns {
    ts: usize,
    open: usize,
    high: usize,
    low: usize,
    close: usize,
    volume: usize,
    symbol: Option<usize>,
}

impl Columns {
    fn find(path: &Path, header: &[String]) -> Result<Self, DataError> {
        // A set, not a scan of the names before each: a header can have
        // hundreds of thousands of columns.
        let mut seen = HashSet::with_capacity(header.len());
        for name in header {
            if !name.is_empty() && !seen.insert(name.as_str()) {
                return Err(DataError::bad_file(
                    path,
                    format!(
                        "column {} appears twice in the header ({})",
                        excerpt(name),
                        header_list(header)
                    ),
                ));
            }
        }
        let position = |name: &str| header.iter().position(|h| h == name);
        let missing = |name: &str| {
            DataError::bad_file(
                path,
                format!(
                    "missing required column {name:?}; the header has: {}",
                    header_list(header)
                ),
            )
        };
        let ts = TIMESTAMP_COLUMNS
            .iter()
            .find_map(|name| position(name))
            .ok_or_else(|| match header.first() {
                // pandas writes an index without a name as a nameless first column.
                Some(first) if first.is_empty() => DataError::bad_file(
                    path,
                    format!(
                        "missing required column \"{}\"; the header has: {}. Its first \
                         column has no name: a pandas index written without one; name it \
                         (df.index.name = \"ts_event\") before to_csv",
                        timestamp_columns_text(),
                        header_list(header)
                    ),
                ),
                _ => missing(&timestamp_columns_text()),
            })?;
        let required = |name: &str| position(name).ok_or_else(|| missing(name));
        Ok(Self {
            ts,
            open: required("open")?,
            high: required("high")?,
            low: required("low")?,
            close: required("close")?,
            volume: required("volume")?,
            symbol: position("symbol"),
        })
    }
}

/// The header's names for a message (the first few of a long header).
fn header_list(header: &[String]) -> String {
    list_excerpt(header.iter().map(String::as_str), ",")
}

/// A non-negative integer, also written as a float with no fraction (`1500.0`).
fn parse_volume(text: &str) -> Option<u64> {
    if let Ok(v) = text.parse::<u64>() {
        return Some(v);
    }
    let v = text.parse::<f64>().ok()?;
    // 2^64 is exactly representable; anything at or above it does not fit.
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 18_446_744_073_709_551_616.0)
        .then_some(v as u64)
}

/// A CSV parse error on a data row (`Some(row)`) or the header (`None`).
pub(crate) fn csv_error(path: &Path, row: Option<usize>, error: csv::Error) -> DataError {
    let problem = match error.into_kind() {
        csv::ErrorKind::Io(io) => return DataError::io(path, io),
        csv::ErrorKind::Utf8 { err, .. } => {
            format!("field {} is not valid UTF-8", err.field() + 1)
        }
        other => format!("cannot be parsed as CSV: {other:?}"),
    };
    match row {
        Some(row) => DataError::bad_row(path, row, problem),
        None => DataError::bad_file(path, format!("header: {problem}")),
    }
}
