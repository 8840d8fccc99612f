//! Named columns of a CSV or Parquet file, with the file's timestamps: the
//! user's own columns of a bar file, and covariate files (a timestamp
//! column and any columns, no prices needed).
//!
//! * Columns are found by name without regard to case; the timestamp column
//!   as for bars (`ts_event`, `timestamp`, `ts`, `datetime` or `date`), in
//!   any form the bar readers accept, with the same time zone rule.
//! * A real column holds numbers: CSV text that parses as a finite number,
//!   Parquet integers, floats or booleans. An empty field, `NaN`, `NA`,
//!   `null` or a Parquet null is a missing value (NaN here); `inf` and text
//!   are refused with the row and the column named.
//! * A categorical column holds labels: CSV text as written (trimmed),
//!   Parquet strings, dictionaries of strings (pandas' `category`) or
//!   integers (written as integers); empty or null is missing (`None`).
//! * Timestamps must increase strictly, as for bars.
//!
//! Every refusal names the file, and the row and column where there is one.

use crate::columns::ColumnKind;
use crate::csv_format::{timestamp_columns_text, TIMESTAMP_COLUMNS};
use crate::parquet_format::Rows;
use crate::zones::{LocalZone, Timestamps};
use crate::{excerpt, list_excerpt, timefmt, DataError, Format};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One column's values, one per row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum ColumnValues {
    /// Numbers; NaN where a value is missing.
    Real(Vec<f64>),
    /// Labels; `None` where a value is missing.
    Text(Vec<Option<String>>),
}

impl ColumnValues {
    pub fn len(&self) -> usize {
        match self {
            Self::Real(v) => v.len(),
            Self::Text(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_missing(&self, row: usize) -> bool {
        match self {
            Self::Real(v) => v[row].is_nan(),
            Self::Text(v) => v[row].is_none(),
        }
    }

    /// The values at `rows`, in that order.
    pub fn select(&self, rows: impl Iterator<Item = usize>) -> Self {
        match self {
            Self::Real(v) => Self::Real(rows.map(|r| v[r]).collect()),
            Self::Text(v) => Self::Text(rows.map(|r| v[r].clone()).collect()),
        }
    }

    /// Appends `other`'s values (of the same kind).
    pub fn extend(&mut self, other: &ColumnValues) -> Result<(), DataError> {
        match (self, other) {
            (Self::Real(a), Self::Real(b)) => a.extend_from_slice(b),
            (Self::Text(a), Self::Text(b)) => a.extend_from_slice(b),
            _ => {
                return Err(DataError::Invalid(
                    "a column holds numbers in one batch and labels in another".into(),
                ))
            }
        }
        Ok(())
    }

    /// The value at `row` for a message.
    pub fn show(&self, row: usize) -> String {
        match self {
            Self::Real(v) => v[row].to_string(),
            Self::Text(v) => v[row].as_deref().map(excerpt).unwrap_or_default(),
        }
    }
}

/// A named column.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamedColumn {
    /// The name as the config gives it.
    pub name: String,
    pub values: ColumnValues,
}

/// What [`read_columns`] read.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnFile {
    pub path: PathBuf,
    /// UTC nanoseconds, strictly increasing.
    pub ts: Vec<i64>,
    /// In the order asked for.
    pub columns: Vec<NamedColumn>,
}

/// Reads the timestamps and the columns `wanted` (name, kind) of a CSV or
/// Parquet file (see the module docs); `zone` is the time zone of
/// timestamps written without one.
pub fn read_columns(
    path: &Path,
    wanted: &[(String, ColumnKind)],
    zone: Option<&LocalZone>,
) -> Result<ColumnFile, DataError> {
    read_columns_with(path, wanted, &[], zone)
}

/// [`read_columns`], with `optional` columns read too when the file has
/// them (and left out of the result when it does not).
pub fn read_columns_with(
    path: &Path,
    wanted: &[(String, ColumnKind)],
    optional: &[(String, ColumnKind)],
    zone: Option<&LocalZone>,
) -> Result<ColumnFile, DataError> {
    let file = match Format::from_path(path)? {
        Format::Csv => read_csv(path, wanted, optional, zone)?,
        Format::Parquet => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            read_parquet(path, wanted, optional, zone)
        }))
        .unwrap_or_else(|_| {
            Err(DataError::bad_file(
                path,
                "is damaged: the Parquet decoder failed on it",
            ))
        })?,
        Format::Dbn => {
            return Err(DataError::bad_file(
                path,
                "a DBN file holds only prices and volume: put your own columns in a CSV or \
                 Parquet file (the bar file, or a covariate file)",
            ))
        }
    };
    check_increasing(path, &file.ts)?;
    Ok(file)
}

fn check_increasing(path: &Path, ts: &[i64]) -> Result<(), DataError> {
    if ts.is_empty() {
        return Err(DataError::bad_file(path, "holds no rows"));
    }
    for (i, pair) in ts.windows(2).enumerate() {
        if pair[1] <= pair[0] {
            let what = if pair[1] == pair[0] {
                "is repeated"
            } else {
                "comes before the row above"
            };
            return Err(DataError::bad_row(
                path,
                i + 2,
                format!(
                    "timestamp {} {what}: timestamps must increase",
                    timefmt::format(pair[1])
                ),
            ));
        }
    }
    Ok(())
}

/// A missing value as CSV text.
fn is_missing_text(text: &str) -> bool {
    text.is_empty()
        || ["nan", "na", "n/a", "null", "none"]
            .iter()
            .any(|m| text.eq_ignore_ascii_case(m))
}

/// A column the file lacks.
fn missing_column(path: &Path, name: &str, names: &[String]) -> DataError {
    DataError::bad_file(
        path,
        format!(
            "has no column {}; its columns are: {}",
            excerpt(name),
            list_excerpt(names.iter().map(String::as_str), ", ")
        ),
    )
}

/// Where a file's columns are: the timestamp column's position, and the
/// position of each column read (`wanted`, then those of `optional` the file has).
struct Located {
    wanted: Vec<(String, ColumnKind)>,
    ts_index: usize,
    indices: Vec<usize>,
}

/// Finds the timestamp column and the wanted ones among the file's column
/// `names` (without regard to case); a missing one is refused by name.
fn locate(
    path: &Path,
    names: &[String],
    wanted: &[(String, ColumnKind)],
    optional: &[(String, ColumnKind)],
) -> Result<Located, DataError> {
    let position = |name: &str| names.iter().position(|n| n.eq_ignore_ascii_case(name));
    let mut all = wanted.to_vec();
    all.extend(
        optional
            .iter()
            .filter(|(n, _)| position(n).is_some())
            .cloned(),
    );
    let ts_index = TIMESTAMP_COLUMNS
        .iter()
        .find_map(|n| position(n))
        .ok_or_else(|| missing_column(path, &timestamp_columns_text(), names))?;
    let indices = all
        .iter()
        .map(|(name, _)| position(name).ok_or_else(|| missing_column(path, name, names)))
        .collect::<Result<_, _>>()?;
    Ok(Located {
        wanted: all,
        ts_index,
        indices,
    })
}

fn read_csv(
    path: &Path,
    wanted: &[(String, ColumnKind)],
    optional: &[(String, ColumnKind)],
    zone: Option<&LocalZone>,
) -> Result<ColumnFile, DataError> {
    let (mut reader, header) = crate::csv_format::open_with_header(path)?;
    let Located {
        wanted,
        ts_index,
        indices,
    } = locate(path, &header, wanted, optional)?;
    let wanted = &wanted;
    let mut ts = Vec::new();
    let mut values = empty_values(wanted);
    let mut stamps = Timestamps::new(zone);
    let mut record = csv::StringRecord::new();
    let mut row = 0usize;
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(crate::csv_format::csv_error(path, Some(row + 1), e)),
        }
        row += 1;
        if record.len() != header.len() {
            return Err(DataError::bad_row(
                path,
                row,
                format!(
                    "has {} fields but the header has {}",
                    record.len(),
                    header.len()
                ),
            ));
        }
        let field = |i: usize| record.get(i).unwrap_or_default().trim();
        ts.push(stamps.text(field(ts_index)).map_err(|e| {
            DataError::bad_row(path, row, format!("column {}: {e}", header[ts_index]))
        })?);
        for ((column, &index), (name, _)) in values.iter_mut().zip(&indices).zip(wanted) {
            let text = field(index);
            match column {
                ColumnValues::Real(v) => {
                    let value = if is_missing_text(text) {
                        f64::NAN
                    } else {
                        match text.parse::<f64>() {
                            Ok(x) if x.is_finite() => x,
                            Ok(_) => {
                                return Err(DataError::bad_row(
                                    path,
                                    row,
                                    format!(
                                        "column {name}: {} is not a finite number (leave the \
                                         field empty for a missing value)",
                                        excerpt(text)
                                    ),
                                ))
                            }
                            Err(_) => {
                                return Err(DataError::bad_row(
                                    path,
                                    row,
                                    format!(
                                        "column {name}: cannot parse {} as a number (declare \
                                         the column categorical if it holds labels)",
                                        excerpt(text)
                                    ),
                                ))
                            }
                        }
                    };
                    v.push(value);
                }
                ColumnValues::Text(v) => {
                    v.push((!text.is_empty()).then(|| text.to_string()));
                }
            }
        }
    }
    Ok(column_file(path, ts, wanted, values))
}

fn read_parquet(
    path: &Path,
    wanted: &[(String, ColumnKind)],
    optional: &[(String, ColumnKind)],
    zone: Option<&LocalZone>,
) -> Result<ColumnFile, DataError> {
    let file = crate::files::open_data_file(path)?;
    let file_bytes = file.metadata().map_err(|e| DataError::io(path, e))?.len();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| DataError::bad_file(path, format!("is not a readable Parquet file: {e}")))?;
    crate::parquet_format::check_footer(path, builder.metadata(), file_bytes)?;
    let schema = builder.schema().clone();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let Located {
        wanted,
        ts_index,
        indices,
    } = locate(path, &names, wanted, optional)?;
    let wanted = &wanted;
    for (&index, (name, kind)) in indices.iter().zip(wanted) {
        let data_type = schema.field(index).data_type();
        let ok = match kind {
            ColumnKind::Real => is_numeric(data_type),
            ColumnKind::Categorical => is_numeric(data_type) || is_text(data_type),
        };
        if !ok {
            let hint = if *kind == ColumnKind::Real && is_text(data_type) {
                " (declare the column categorical if it holds labels)"
            } else {
                ""
            };
            let needs = match kind {
                ColumnKind::Real => "a real column needs numbers",
                ColumnKind::Categorical => "a categorical column needs numbers or text",
            };
            return Err(DataError::bad_file(
                path,
                format!("column {name} has type {data_type}; {needs}{hint}"),
            ));
        }
    }
    let mut roots = vec![ts_index];
    roots.extend(&indices);
    roots.sort_unstable();
    roots.dedup();
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(64 * 1024)
        .build()
        .map_err(|e| DataError::bad_file(path, format!("is not a readable Parquet file: {e}")))?;
    let mut ts = Vec::new();
    let mut values = empty_values(wanted);
    let mut stamps = Timestamps::new(zone);
    for batch in reader {
        let first_row = ts.len();
        let batch = batch
            .map_err(|e| DataError::bad_row(path, first_row + 1, format!("cannot be read: {e}")))?;
        let at = Rows { path, first_row };
        let column = |index: usize| -> Result<&ArrayRef, DataError> {
            batch
                .column_by_name(&names[index])
                .ok_or_else(|| missing_column(path, &names[index], &names))
        };
        at.append_ts(&names[ts_index], column(ts_index)?, &mut stamps, &mut ts)?;
        for ((out, &index), (name, _)) in values.iter_mut().zip(&indices).zip(wanted) {
            let array = column(index)?;
            match out {
                ColumnValues::Real(v) => {
                    v.extend(numbers(array).ok_or_else(|| at.wrong_type(name, array))?)
                }
                ColumnValues::Text(v) => {
                    v.extend(labels(array).ok_or_else(|| at.wrong_type(name, array))?)
                }
            }
        }
    }
    Ok(column_file(path, ts, wanted, values))
}

/// One empty column per wanted one, of its kind.
fn empty_values(wanted: &[(String, ColumnKind)]) -> Vec<ColumnValues> {
    wanted
        .iter()
        .map(|(_, kind)| match kind {
            ColumnKind::Real => ColumnValues::Real(Vec::new()),
            ColumnKind::Categorical => ColumnValues::Text(Vec::new()),
        })
        .collect()
}

/// What a reader read, the columns named as asked.
fn column_file(
    path: &Path,
    ts: Vec<i64>,
    wanted: &[(String, ColumnKind)],
    values: Vec<ColumnValues>,
) -> ColumnFile {
    let columns = wanted
        .iter()
        .zip(values)
        .map(|((name, _), values)| NamedColumn {
            name: name.clone(),
            values,
        })
        .collect();
    ColumnFile {
        path: path.to_path_buf(),
        ts,
        columns,
    }
}

fn is_numeric(t: &DataType) -> bool {
    t.is_numeric() && !matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
        || matches!(t, DataType::Boolean)
}

fn is_text(t: &DataType) -> bool {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, values) => is_text(values) || is_numeric(values),
        _ => false,
    }
}

/// A numeric array as f64, NaN for nulls (`None`: not a numeric type).
fn numbers(array: &ArrayRef) -> Option<Vec<f64>> {
    macro_rules! prim {
        ($t:ty) => {
            array
                .as_primitive_opt::<$t>()?
                .iter()
                .map(|v| v.map_or(f64::NAN, |x| x as f64))
                .collect()
        };
    }
    let values: Vec<f64> = match array.data_type() {
        DataType::Float64 => array
            .as_primitive_opt::<Float64Type>()?
            .iter()
            .map(|v| v.unwrap_or(f64::NAN))
            .collect(),
        DataType::Float32 => prim!(Float32Type),
        DataType::Int8 => prim!(Int8Type),
        DataType::Int16 => prim!(Int16Type),
        DataType::Int32 => prim!(Int32Type),
        DataType::Int64 => prim!(Int64Type),
        DataType::UInt8 => prim!(UInt8Type),
        DataType::UInt16 => prim!(UInt16Type),
        DataType::UInt32 => prim!(UInt32Type),
        DataType::UInt64 => prim!(UInt64Type),
        DataType::Boolean => array
            .as_boolean_opt()?
            .iter()
            .map(|v| v.map_or(f64::NAN, |b| f64::from(u8::from(b))))
            .collect(),
        _ => return None,
    };
    // A non-finite number is no value a model can use: a missing one.
    Some(
        values
            .into_iter()
            .map(|x| if x.is_finite() { x } else { f64::NAN })
            .collect(),
    )
}

/// A number as a label: integers without a fraction.
fn number_label(x: f64) -> Option<String> {
    if x.is_nan() {
        None
    } else if x.fract() == 0.0 && x.abs() < 1e15 {
        Some(format!("{}", x as i64))
    } else {
        Some(x.to_string())
    }
}

/// A text, dictionary or numeric array as labels, `None` for nulls and
/// empty strings (`None` overall: another type).
fn labels(array: &ArrayRef) -> Option<Vec<Option<String>>> {
    let own = |v: Option<&str>| v.filter(|s| !s.is_empty()).map(str::to_string);
    match array.data_type() {
        DataType::Utf8 => Some(array.as_string_opt::<i32>()?.iter().map(own).collect()),
        DataType::LargeUtf8 => Some(array.as_string_opt::<i64>()?.iter().map(own).collect()),
        DataType::Utf8View => Some(array.as_string_view_opt()?.iter().map(own).collect()),
        DataType::Dictionary(_, _) => {
            let dict = array.as_any_dictionary_opt()?;
            let values = labels(dict.values())?;
            let keys = dict.normalized_keys();
            let nulls = array.logical_nulls();
            Some(
                keys.iter()
                    .enumerate()
                    .map(|(i, &k)| {
                        if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                            None
                        } else {
                            values.get(k).cloned().flatten()
                        }
                    })
                    .collect(),
            )
        }
        _ => numbers(array).map(|v| v.into_iter().map(number_label).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn csv_columns_read_with_missing_values_and_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "cov.csv",
            "Date,VIX,Event,other\n2024-01-02,13.2,,x\n2024-01-03,,FOMC,y\n2024-01-04,NaN,CPI,z\n",
        );
        let f = read_columns(
            &path,
            &[
                ("vix".into(), ColumnKind::Real),
                ("event".into(), ColumnKind::Categorical),
            ],
            None,
        )
        .unwrap();
        assert_eq!(f.ts.len(), 3);
        let ColumnValues::Real(vix) = &f.columns[0].values else {
            panic!()
        };
        assert_eq!(vix[0], 13.2);
        assert!(vix[1].is_nan() && vix[2].is_nan());
        assert_eq!(
            f.columns[1].values,
            ColumnValues::Text(vec![None, Some("FOMC".into()), Some("CPI".into())])
        );
    }

    #[test]
    fn each_bad_column_is_refused_naming_the_row_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let refused = |text: &str, wanted: &[(String, ColumnKind)], expected: &str| {
            let path = write(dir.path(), "c.csv", text);
            let e = read_columns(&path, wanted, None).unwrap_err().to_string();
            assert!(e.contains(expected), "{expected:?} in: {e}");
        };
        let real = |n: &str| vec![(n.to_string(), ColumnKind::Real)];
        refused(
            "ts,a\n2024-01-02,1\n",
            &real("b"),
            "has no column \"b\"; its columns are: ts, a",
        );
        refused("a\n1\n", &real("a"), "has no column \"ts_event (or");
        refused(
            "ts,a\n2024-01-02,1\n2024-01-03,high\n",
            &real("a"),
            "row 2: column a: cannot parse \"high\" as a number (declare the column categorical",
        );
        refused(
            "ts,a\n2024-01-02,inf\n",
            &real("a"),
            "row 1: column a: \"inf\" is not a finite",
        );
        refused(
            "ts,a\n2024-01-03,1\n2024-01-02,2\n",
            &real("a"),
            "row 2: timestamp 2024-01-02T00:00:00Z comes before the row above",
        );
        let dbn = dir.path().join("x.dbn");
        let e = read_columns(&dbn, &real("a"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a DBN file holds only prices"), "{e}");
    }
}
