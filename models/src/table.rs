//! A model's predictions as a table: one row per bar (timestamp, symbol)
//! and named value columns, written as CSV, JSON or Parquet.
//!
//! A value that does not exist (a realized return past the file's end) is
//! NaN in memory and written as an empty CSV field, a JSON `null` or a
//! Parquet null. Timestamps are UTC: RFC 3339 text in CSV and JSON, a
//! nanosecond timestamp with zone UTC in Parquet. Numbers are written so
//! that they read back to the same `f64`.

use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file formats a table is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    Csv,
    Json,
    Parquet,
}

impl TableFormat {
    pub fn name(self) -> &'static str {
        match self {
            Self::Csv => "csv",
            Self::Json => "json",
            Self::Parquet => "parquet",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {format}: {message}")]
    Encode {
        format: &'static str,
        message: String,
    },
    #[error("Parquet is binary: give a file with -o/--out rather than the terminal")]
    BinaryToTerminal,
}

fn encode(format: TableFormat, e: impl std::fmt::Display) -> TableError {
    TableError::Encode {
        format: format.name(),
        message: e.to_string(),
    }
}

/// Rows of predictions (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PredictionTable {
    pub columns: Vec<String>,
    /// UTC nanoseconds, one per row.
    pub timestamps: Vec<i64>,
    pub symbols: Vec<String>,
    /// Row-major, `rows × columns`; NaN where a value does not exist.
    pub values: Vec<f64>,
}

impl PredictionTable {
    pub fn new(columns: Vec<String>) -> Self {
        Self {
            columns,
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }

    /// Appends a row; `values` must have one value per column.
    pub fn push(&mut self, timestamp: i64, symbol: &str, values: &[f64]) {
        debug_assert_eq!(values.len(), self.columns.len());
        self.timestamps.push(timestamp);
        self.symbols.push(symbol.to_string());
        self.values.extend_from_slice(values);
    }

    pub fn row(&self, i: usize) -> &[f64] {
        let w = self.columns.len();
        &self.values[i * w..(i + 1) * w]
    }

    /// The table in `format` as bytes.
    pub fn to_bytes(&self, format: TableFormat) -> Result<Vec<u8>, TableError> {
        match format {
            TableFormat::Csv => self.csv(),
            TableFormat::Json => self.json(),
            TableFormat::Parquet => self.parquet(),
        }
    }

    /// Writes the table to `path` atomically (a temporary file beside it,
    /// renamed into place), or to standard output when `path` is `None`.
    pub fn write(&self, path: Option<&Path>, format: TableFormat) -> Result<(), TableError> {
        let bytes = self.to_bytes(format)?;
        match path {
            None => {
                if format == TableFormat::Parquet {
                    use std::io::IsTerminal;
                    if std::io::stdout().is_terminal() {
                        return Err(TableError::BinaryToTerminal);
                    }
                }
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)
                    .and_then(|_| out.flush())
                    .map_err(|source| TableError::Io {
                        path: PathBuf::from("standard output"),
                        source,
                    })
            }
            Some(path) => write_atomically(path, &bytes),
        }
    }

    fn csv(&self) -> Result<Vec<u8>, TableError> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let header = ["timestamp", "symbol"]
            .into_iter()
            .chain(self.columns.iter().map(String::as_str));
        w.write_record(header)
            .map_err(|e| encode(TableFormat::Csv, e))?;
        for i in 0..self.len() {
            let mut record = vec![
                tli_data::timefmt::format(self.timestamps[i]),
                self.symbols[i].clone(),
            ];
            record.extend(self.row(i).iter().map(|v| {
                if v.is_nan() {
                    String::new()
                } else {
                    v.to_string()
                }
            }));
            w.write_record(&record)
                .map_err(|e| encode(TableFormat::Csv, e))?;
        }
        w.into_inner().map_err(|e| encode(TableFormat::Csv, e))
    }

    fn json(&self) -> Result<Vec<u8>, TableError> {
        let rows: Vec<serde_json::Value> = (0..self.len())
            .map(|i| {
                let mut row = serde_json::Map::new();
                row.insert(
                    "timestamp".into(),
                    tli_data::timefmt::format(self.timestamps[i]).into(),
                );
                row.insert("symbol".into(), self.symbols[i].clone().into());
                for (name, v) in self.columns.iter().zip(self.row(i)) {
                    let value = serde_json::Number::from_f64(*v)
                        .map(serde_json::Value::Number)
                        .unwrap_or(serde_json::Value::Null);
                    row.insert(name.clone(), value);
                }
                serde_json::Value::Object(row)
            })
            .collect();
        let mut bytes =
            serde_json::to_vec_pretty(&rows).map_err(|e| encode(TableFormat::Json, e))?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    fn parquet(&self) -> Result<Vec<u8>, TableError> {
        let mut fields = vec![
            Field::new(
                "timestamp",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
                false,
            ),
            Field::new("symbol", DataType::Utf8, false),
        ];
        fields.extend(
            self.columns
                .iter()
                .map(|c| Field::new(c, DataType::Float64, true)),
        );
        let schema = Arc::new(Schema::new(fields));
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampNanosecondArray::from(self.timestamps.clone()).with_timezone("UTC")),
            Arc::new(StringArray::from(self.symbols.clone())),
        ];
        let width = self.columns.len();
        for c in 0..width {
            let values: Vec<Option<f64>> = (0..self.len())
                .map(|r| Some(self.values[r * width + c]).filter(|v| !v.is_nan()))
                .collect();
            columns.push(Arc::new(Float64Array::from(values)));
        }
        let batch = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| encode(TableFormat::Parquet, e))?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(properties))
            .map_err(|e| encode(TableFormat::Parquet, e))?;
        writer
            .write(&batch)
            .map_err(|e| encode(TableFormat::Parquet, e))?;
        writer
            .close()
            .map_err(|e| encode(TableFormat::Parquet, e))?;
        Ok(bytes)
    }
}

/// Writes `bytes` to a temporary file beside `path` and renames it there.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), TableError> {
    let io = |source| TableError::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "predictions".into());
    let tmp = path.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> PredictionTable {
        let mut t = PredictionTable::new(vec!["y:p50".into(), "y:actual".into()]);
        t.push(1_700_000_000_000_000_000, "ES", &[0.1 + 0.2, f64::NAN]);
        t.push(1_700_086_400_000_000_000, "ES", &[-1e-300, 2.5]);
        t
    }

    #[test]
    fn csv_keeps_every_digit_and_leaves_missing_values_empty() {
        let text = String::from_utf8(table().to_bytes(TableFormat::Csv).unwrap()).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("timestamp,symbol,y:p50,y:actual"));
        let first = lines.next().unwrap();
        assert!(first.ends_with(",ES,0.30000000000000004,"), "{first}");
        let second: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(second[2].parse::<f64>().unwrap(), -1e-300);
    }

    #[test]
    fn json_rows_are_records_with_null_for_missing_values() {
        let rows: serde_json::Value =
            serde_json::from_slice(&table().to_bytes(TableFormat::Json).unwrap()).unwrap();
        assert_eq!(rows[0]["symbol"], "ES");
        assert!(rows[0]["y:actual"].is_null());
        assert_eq!(rows[1]["y:actual"], 2.5);
        assert_eq!(rows[0]["y:p50"].as_f64().unwrap(), 0.1 + 0.2);
    }

    #[test]
    fn parquet_reads_back_with_nulls() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.parquet");
        table().write(Some(&path), TableFormat::Parquet).unwrap();
        let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 2);
        let schema = reader.metadata().file_metadata().schema_descr();
        let names: Vec<&str> = schema.columns().iter().map(|c| c.name()).collect();
        assert_eq!(names, ["timestamp", "symbol", "y:p50", "y:actual"]);
    }

    #[test]
    fn a_file_is_written_whole_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.csv");
        table().write(Some(&path), TableFormat::Csv).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["p.csv"]);
    }
}
