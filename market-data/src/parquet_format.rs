//! OHLCV bars as Apache Parquet (through arrow).
//!
//! **Written** (by [`write()`]): one row per bar with the columns
//! `ts_event` Timestamp(Nanosecond, "UTC"), `open`, `high`, `low`, `close`
//! Float64 and `volume` UInt64, none nullable (then the table's own columns,
//! if any: Float64 or Utf8, nullable); zstd-compressed; the file's
//! key-value metadata holds `tli.symbol` and `tli.interval` (`1s`, `1m`, `1h`,
//! `1d`).
//!
//! **Read** (by [`read`]), columns found by name, case-insensitively, in any
//! order; other columns are not read:
//! * `ts_event` (or `timestamp`, `ts`, `date`, the first found in that
//!   order): Timestamp of any unit, converted to nanoseconds (a time zone, if
//!   any, does not change the stored UTC instant — pandas' tz-aware index;
//!   a timestamp without one is local time in the zone given to
//!   [`read_with`], and UTC when none is given), or Int64 nanoseconds;
//! * `open`, `high`, `low`, `close`: Float64 or Float32;
//! * `volume`: UInt64, Int64 (must be ≥ 0) or Float64 (must be a
//!   non-negative integer);
//! * a null in any of these is an error naming the row and the column;
//! * symbol: the `tli.symbol` metadata, else a `symbol` Utf8 column (the same
//!   on every row), else the file name up to its first `.`;
//! * interval: the `tli.interval` metadata, else inferred from the
//!   timestamps ([`BarInterval::infer`]), else (one bar) daily.
//!
//! Rows are kept in file order and [`BarTable::validate`] is called on the
//! result. Row numbers in errors are 1-based over the whole file (across row
//! groups).

use super::bar_source::{ReadNotes, SymbolOrigin};
use super::column_read::ColumnValues;
use super::csv_format::{symbol_from_file_name, timestamp_columns_text, TIMESTAMP_COLUMNS};
use super::zones::{LocalZone, Timestamps};
use super::{excerpt, list_excerpt, BarInterval, BarTable, DataError};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int64Type, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, Float64Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{KeyValue, ParquetMetaData};
use parquet::file::properties::WriterProperties;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

/// File metadata key of the symbol.
pub const SYMBOL_KEY: &str = "tli.symbol";
/// File metadata key of the bar interval (`1s`, `1m`, `1h`, `1d`).
pub const INTERVAL_KEY: &str = "tli.interval";

const BATCH_ROWS: usize = 64 * 1024;

/// Writes `table` as Parquet (see the module docs). The table is validated
/// first: a table that [`read`] would refuse is not written.
pub fn write(path: &Path, table: &BarTable) -> Result<(), DataError> {
    table.validate(path)?;
    let mut fields = vec![
        Field::new(
            "ts_event",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            false,
        ),
        Field::new("open", DataType::Float64, false),
        Field::new("high", DataType::Float64, false),
        Field::new("low", DataType::Float64, false),
        Field::new("close", DataType::Float64, false),
        Field::new("volume", DataType::UInt64, false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(TimestampNanosecondArray::from(table.ts.clone()).with_timezone("UTC")),
        Arc::new(Float64Array::from(table.open.clone())),
        Arc::new(Float64Array::from(table.high.clone())),
        Arc::new(Float64Array::from(table.low.clone())),
        Arc::new(Float64Array::from(table.close.clone())),
        Arc::new(UInt64Array::from(table.volume.clone())),
    ];
    // The table's own columns: Float64 or Utf8, a missing value as null.
    for column in &table.extra {
        match &column.values {
            ColumnValues::Real(v) => {
                fields.push(Field::new(&column.name, DataType::Float64, true));
                columns.push(Arc::new(Float64Array::from(
                    v.iter()
                        .map(|x| (!x.is_nan()).then_some(*x))
                        .collect::<Vec<_>>(),
                )));
            }
            ColumnValues::Text(v) => {
                fields.push(Field::new(&column.name, DataType::Utf8, true));
                columns.push(Arc::new(StringArray::from(v.clone())));
            }
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let failed = |e: &dyn std::fmt::Display| {
        DataError::bad_file(path, format!("cannot be written as Parquet: {e}"))
    };
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| failed(&e))?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(SYMBOL_KEY.to_string(), table.symbol.clone()),
            KeyValue::new(INTERVAL_KEY.to_string(), table.interval.name().to_string()),
        ]))
        .build();
    let file = File::create(path).map_err(|e| DataError::io(path, e))?;
    let mut writer =
        ArrowWriter::try_new(file, schema, Some(properties)).map_err(|e| failed(&e))?;
    writer.write(&batch).map_err(|e| failed(&e))?;
    writer.close().map_err(|e| failed(&e))?;
    Ok(())
}

/// Reads a Parquet bar file (see the module docs for what is accepted).
///
/// The parquet crate panics on some damaged page data (a varint longer than
/// 10 bytes, for one: "panics … (bad input)" in its docs); such a panic is
/// caught here and becomes an error naming the file, like any other damage.
pub fn read(path: &Path) -> Result<BarTable, DataError> {
    read_with(path, None).map(|(table, _)| table)
}

/// [`read`], with the time zone of timestamps stored without one, and how
/// the symbol and the timestamps' zones were found.
pub fn read_with(
    path: &Path,
    zone: Option<&LocalZone>,
) -> Result<(BarTable, ReadNotes), DataError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_unguarded(path, zone)))
        .unwrap_or_else(|panic| {
            let cause = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            Err(DataError::bad_file(
                path,
                format!("is damaged: the Parquet decoder failed on it ({cause})"),
            ))
        })
}

/// [`read`] without the guard against the decoder's panics.
fn read_unguarded(
    path: &Path,
    zone: Option<&LocalZone>,
) -> Result<(BarTable, ReadNotes), DataError> {
    let file = crate::files::open_data_file(path)?;
    let file_bytes = file.metadata().map_err(|e| DataError::io(path, e))?.len();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| DataError::bad_file(path, format!("is not a readable Parquet file: {e}")))?;
    check_footer(path, builder.metadata(), file_bytes)?;

    let metadata_value = |key: &str| -> Option<String> {
        builder
            .metadata()
            .file_metadata()
            .key_value_metadata()?
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
    };
    let symbol_from_metadata = metadata_value(SYMBOL_KEY).filter(|s| !s.is_empty());
    let interval_from_metadata = match metadata_value(INTERVAL_KEY) {
        Some(text) => Some(
            BarInterval::parse(&text)
                .map_err(|e| DataError::bad_file(path, format!("metadata {INTERVAL_KEY}: {e}")))?,
        ),
        None => None,
    };

    let schema = builder.schema().clone();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let find = |wanted: &[&str]| -> Option<usize> {
        wanted
            .iter()
            .find_map(|w| names.iter().position(|n| n.eq_ignore_ascii_case(w)))
    };
    let missing_text = |name: &str| {
        format!(
            "missing required column {name:?}; the columns are: {}",
            list_excerpt(names.iter().map(String::as_str), ", ")
        )
    };
    let missing = |name: &str| DataError::bad_file(path, missing_text(name));
    let ts = find(&TIMESTAMP_COLUMNS).ok_or_else(|| {
        let mut problem = missing_text(&timestamp_columns_text());
        if names.iter().any(|n| n.starts_with("__index_level_")) {
            // pandas stores an index without a name as __index_level_0__.
            problem.push_str(
                ". Its __index_level_0__ column is a pandas index saved without a name: \
                 name it (df.index.name = \"ts_event\") before to_parquet",
            );
        }
        DataError::bad_file(path, problem)
    })?;
    let open = find(&["open"]).ok_or_else(|| missing("open"))?;
    let high = find(&["high"]).ok_or_else(|| missing("high"))?;
    let low = find(&["low"]).ok_or_else(|| missing("low"))?;
    let close = find(&["close"]).ok_or_else(|| missing("close"))?;
    let volume = find(&["volume"]).ok_or_else(|| missing("volume"))?;
    let symbol = if symbol_from_metadata.is_none() {
        find(&["symbol"])
    } else {
        None
    };

    // Refuse mistyped columns before reading any data.
    let check_type = |index: usize, accepted: &str, ok: fn(&DataType) -> bool| {
        let field = schema.field(index);
        if ok(field.data_type()) {
            Ok(())
        } else {
            Err(DataError::bad_file(
                path,
                format!(
                    "column {:?} has type {}; accepted: {accepted}",
                    field.name(),
                    field.data_type()
                ),
            ))
        }
    };
    check_type(ts, "Timestamp (any unit), Int64 nanoseconds", |t| {
        matches!(t, DataType::Timestamp(_, _) | DataType::Int64)
    })?;
    for index in [open, high, low, close] {
        check_type(index, "Float64, Float32", |t| {
            matches!(t, DataType::Float64 | DataType::Float32)
        })?;
    }
    check_type(volume, "UInt64, Int64, Float64", |t| {
        matches!(t, DataType::UInt64 | DataType::Int64 | DataType::Float64)
    })?;
    if let Some(index) = symbol {
        check_type(index, "Utf8, LargeUtf8, Utf8View", |t| {
            matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        })?;
    }

    let mut roots = vec![ts, open, high, low, close, volume];
    roots.extend(symbol);
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    // Room for the rows the footer announces, but no more than the file could
    // hold at 8 bytes a row: a damaged footer must not reserve billions.
    let rows = usize::try_from(builder.metadata().file_metadata().num_rows())
        .unwrap_or(0)
        .min(usize::try_from(file_bytes / 8).unwrap_or(usize::MAX));
    let reader = builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| DataError::bad_file(path, format!("is not a readable Parquet file: {e}")))?;

    let mut table = BarTable::new("", BarInterval::Day);
    table.ts.reserve(rows);
    table.open.reserve(rows);
    table.high.reserve(rows);
    table.low.reserve(rows);
    table.close.reserve(rows);
    table.volume.reserve(rows);
    let mut symbol_seen: Option<String> = None;
    let mut stamps = Timestamps::new(zone);
    for batch in reader {
        let first_row = table.len();
        let batch = batch
            .map_err(|e| DataError::bad_row(path, first_row + 1, format!("cannot be read: {e}")))?;
        let column = |index: usize| -> Result<&ArrayRef, DataError> {
            let name = &names[index];
            batch.column_by_name(name).ok_or_else(|| missing(name))
        };
        let at = Rows { path, first_row };
        at.append_ts(&names[ts], column(ts)?, &mut stamps, &mut table.ts)?;
        at.append_price(&names[open], column(open)?, &mut table.open)?;
        at.append_price(&names[high], column(high)?, &mut table.high)?;
        at.append_price(&names[low], column(low)?, &mut table.low)?;
        at.append_price(&names[close], column(close)?, &mut table.close)?;
        at.append_volume(&names[volume], column(volume)?, &mut table.volume)?;
        if let Some(index) = symbol {
            at.check_symbol(&names[index], column(index)?, &mut symbol_seen)?;
        }
    }

    let (symbol, symbol_origin) = match (symbol_from_metadata, symbol_seen) {
        (Some(s), _) => (s, SymbolOrigin::Metadata),
        (None, Some(s)) => (s, SymbolOrigin::Column),
        (None, None) => (symbol_from_file_name(path), SymbolOrigin::FileName),
    };
    table.symbol = symbol;
    table.interval = interval_from_metadata
        .or_else(|| BarInterval::infer(&table.ts))
        .unwrap_or(BarInterval::Day);
    table.validate(path)?;
    let notes = ReadNotes {
        symbol_origin,
        file_symbol: None,
        timestamps: stamps.report,
    };
    Ok((table, notes))
}

/// Checks the footer's counts, offsets and sizes before anything trusts
/// them: the parquet crate panics on a negative column offset or length and
/// believes the row counts, so a damaged footer must be refused here, naming
/// the row group and column.
pub(crate) fn check_footer(
    path: &Path,
    metadata: &ParquetMetaData,
    file_bytes: u64,
) -> Result<(), DataError> {
    let bad = |what: String| DataError::bad_file(path, format!("damaged Parquet footer: {what}"));
    let claimed = metadata.file_metadata().num_rows();
    if claimed < 0 {
        return Err(bad(format!("the file claims {claimed} rows")));
    }
    let mut rows: i64 = 0;
    for (g, group) in metadata.row_groups().iter().enumerate() {
        if group.num_rows() < 0 {
            return Err(bad(format!(
                "row group {g} claims {} rows",
                group.num_rows()
            )));
        }
        rows = rows.saturating_add(group.num_rows());
        for column in group.columns() {
            let name = column.column_path().string();
            let start = column
                .dictionary_page_offset()
                .unwrap_or(column.data_page_offset());
            let length = column.compressed_size();
            let inside = u64::try_from(start)
                .ok()
                .zip(u64::try_from(length).ok())
                .and_then(|(start, length)| start.checked_add(length))
                .is_some_and(|end| end <= file_bytes);
            if !inside {
                return Err(bad(format!(
                    "row group {g}, column {name}: {length} bytes at offset {start} \
                     do not lie inside the file's {file_bytes} bytes"
                )));
            }
            if column.num_values() < 0 || column.uncompressed_size() < 0 {
                return Err(bad(format!(
                    "row group {g}, column {name}: {} values of {} bytes",
                    column.num_values(),
                    column.uncompressed_size()
                )));
            }
        }
    }
    if rows != claimed {
        return Err(bad(format!(
            "the file claims {claimed} rows but its row groups hold {rows}"
        )));
    }
    Ok(())
}

/// Where a batch starts in the file, for row numbers in errors.
pub(crate) struct Rows<'a> {
    pub(crate) path: &'a Path,
    /// 0-based index of the batch's first row in the file.
    pub(crate) first_row: usize,
}

impl Rows<'_> {
    pub(crate) fn error(
        &self,
        index: usize,
        column: &str,
        problem: impl std::fmt::Display,
    ) -> DataError {
        DataError::bad_row(
            self.path,
            self.first_row + index + 1,
            format!("column {column}: {problem}"),
        )
    }

    fn no_nulls(&self, column: &str, array: &dyn Array) -> Result<(), DataError> {
        if let Some(nulls) = array.logical_nulls() {
            if let Some(i) = (0..nulls.len()).find(|&i| nulls.is_null(i)) {
                return Err(self.error(i, column, "is null"));
            }
        }
        Ok(())
    }

    pub(crate) fn wrong_type(&self, column: &str, array: &dyn Array) -> DataError {
        DataError::bad_file(
            self.path,
            format!(
                "column {column:?} has unexpected type {}",
                array.data_type()
            ),
        )
    }

    /// Appends a batch's timestamps as UTC ns: a Timestamp column with a
    /// zone and Int64 are UTC instants; one without a zone goes through
    /// `stamps` (local time in the given zone, or UTC).
    pub(crate) fn append_ts(
        &self,
        column: &str,
        array: &ArrayRef,
        stamps: &mut Timestamps<'_>,
        out: &mut Vec<i64>,
    ) -> Result<(), DataError> {
        self.no_nulls(column, array)?;
        let naive = match array.data_type() {
            DataType::Timestamp(_, None) => true,
            DataType::Timestamp(_, Some(zone)) => {
                stamps.report.column_zone = Some(zone.to_string());
                false
            }
            _ => false,
        };
        let (values, per_unit): (&[i64], i64) = match array.data_type() {
            DataType::Timestamp(TimeUnit::Second, _) => (
                array
                    .as_primitive_opt::<TimestampSecondType>()
                    .map(|a| a.values().as_ref())
                    .ok_or_else(|| self.wrong_type(column, array))?,
                1_000_000_000,
            ),
            DataType::Timestamp(TimeUnit::Millisecond, _) => (
                array
                    .as_primitive_opt::<TimestampMillisecondType>()
                    .map(|a| a.values().as_ref())
                    .ok_or_else(|| self.wrong_type(column, array))?,
                1_000_000,
            ),
            DataType::Timestamp(TimeUnit::Microsecond, _) => (
                array
                    .as_primitive_opt::<TimestampMicrosecondType>()
                    .map(|a| a.values().as_ref())
                    .ok_or_else(|| self.wrong_type(column, array))?,
                1_000,
            ),
            DataType::Timestamp(TimeUnit::Nanosecond, _) => (
                array
                    .as_primitive_opt::<TimestampNanosecondType>()
                    .map(|a| a.values().as_ref())
                    .ok_or_else(|| self.wrong_type(column, array))?,
                1,
            ),
            DataType::Int64 => (
                array
                    .as_primitive_opt::<Int64Type>()
                    .map(|a| a.values().as_ref())
                    .ok_or_else(|| self.wrong_type(column, array))?,
                1,
            ),
            _ => return Err(self.wrong_type(column, array)),
        };
        let first = out.len();
        if per_unit == 1 {
            out.extend_from_slice(values);
        } else {
            for (i, &v) in values.iter().enumerate() {
                let ns = v.checked_mul(per_unit).ok_or_else(|| {
                    self.error(
                        i,
                        column,
                        format!("timestamp {v} does not fit in i64 nanoseconds"),
                    )
                })?;
                out.push(ns);
            }
        }
        if naive {
            for (i, ts) in out[first..].iter_mut().enumerate() {
                *ts = stamps.naive(*ts).map_err(|e| self.error(i, column, e))?;
            }
        } else {
            stamps.utc(values.len(), out.last().copied());
        }
        Ok(())
    }

    fn append_price(
        &self,
        column: &str,
        array: &ArrayRef,
        out: &mut Vec<f64>,
    ) -> Result<(), DataError> {
        self.no_nulls(column, array)?;
        match array.data_type() {
            DataType::Float64 => {
                let a = array
                    .as_primitive_opt::<Float64Type>()
                    .ok_or_else(|| self.wrong_type(column, array))?;
                out.extend_from_slice(a.values());
            }
            DataType::Float32 => {
                let a = array
                    .as_primitive_opt::<Float32Type>()
                    .ok_or_else(|| self.wrong_type(column, array))?;
                out.extend(a.values().iter().map(|&v| f64::from(v)));
            }
            _ => return Err(self.wrong_type(column, array)),
        }
        Ok(())
    }

    fn append_volume(
        &self,
        column: &str,
        array: &ArrayRef,
        out: &mut Vec<u64>,
    ) -> Result<(), DataError> {
        self.no_nulls(column, array)?;
        match array.data_type() {
            DataType::UInt64 => {
                let a = array
                    .as_primitive_opt::<UInt64Type>()
                    .ok_or_else(|| self.wrong_type(column, array))?;
                out.extend_from_slice(a.values());
            }
            DataType::Int64 => {
                let a = array
                    .as_primitive_opt::<Int64Type>()
                    .ok_or_else(|| self.wrong_type(column, array))?;
                for (i, &v) in a.values().iter().enumerate() {
                    let v = u64::try_from(v)
                        .map_err(|_| self.error(i, column, format!("volume {v} is negative")))?;
                    out.push(v);
                }
            }
            DataType::Float64 => {
                let a = array
                    .as_primitive_opt::<Float64Type>()
                    .ok_or_else(|| self.wrong_type(column, array))?;
                for (i, &v) in a.values().iter().enumerate() {
                    // 2^64 is exactly representable; anything at or above it does not fit.
                    if !(v.is_finite()
                        && v >= 0.0
                        && v.fract() == 0.0
                        && v < 18_446_744_073_709_551_616.0)
                    {
                        return Err(self.error(
                            i,
                            column,
                            format!("volume {v} is not a non-negative integer"),
                        ));
                    }
                    out.push(v as u64);
                }
            }
            _ => return Err(self.wrong_type(column, array)),
        }
        Ok(())
    }

    fn check_symbol(
        &self,
        column: &str,
        array: &ArrayRef,
        seen: &mut Option<String>,
    ) -> Result<(), DataError> {
        self.no_nulls(column, array)?;
        let values: Box<dyn Iterator<Item = Option<&str>>> = match array.data_type() {
            DataType::Utf8 => Box::new(
                array
                    .as_string_opt::<i32>()
                    .ok_or_else(|| self.wrong_type(column, array))?
                    .iter(),
            ),
            DataType::LargeUtf8 => Box::new(
                array
                    .as_string_opt::<i64>()
                    .ok_or_else(|| self.wrong_type(column, array))?
                    .iter(),
            ),
            DataType::Utf8View => Box::new(
                array
                    .as_string_view_opt()
                    .ok_or_else(|| self.wrong_type(column, array))?
                    .iter(),
            ),
            _ => return Err(self.wrong_type(column, array)),
        };
        for (i, value) in values.enumerate() {
            let value = value.unwrap_or_default();
            match seen {
                None if value.is_empty() => return Err(self.error(i, column, "symbol is empty")),
                None => *seen = Some(value.to_string()),
                Some(first) if first != value => {
                    return Err(self.error(
                        i,
                        column,
                        format!(
                            "symbol {} differs from {} on row 1; a file must hold one symbol",
                            excerpt(value),
                            excerpt(first)
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
