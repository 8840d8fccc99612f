//! Bars and prediction rows on the wire: `Bars` (columns of one symbol's
//! bars) ↔ [`BarTable`], and `PredictionRows` ↔ [`PredictionTable`]. A
//! client sends the bars of a file it read; the server checks them exactly
//! as a bar file's rows are checked before any model sees them.

use std::path::Path;
use tli_data::column_read::{ColumnValues, NamedColumn};
use tli_data::columns::MAX_COLUMN_NAME_BYTES;
use tli_data::table::{BarInterval, BarTable};
use tli_models::PredictionTable;
use tli_proto::v1 as pb;

/// Why bars from the wire were refused (one line, what to fix).
#[derive(Debug, thiserror::Error)]
pub enum BarsError {
    #[error("bars: {0}")]
    Shape(String),
    #[error(transparent)]
    Data(#[from] tli_data::DataError),
}

/// The most bars one message may carry (about 48 bytes each).
pub const MAX_BARS: usize = 80_000;

/// A bar table as a message.
pub fn bars_to_proto(table: &BarTable) -> pb::Bars {
    pb::Bars {
        symbol: table.symbol.clone(),
        interval: table.interval.name().to_string(),
        ts_unix_ns: table.ts.clone(),
        open: table.open.clone(),
        high: table.high.clone(),
        low: table.low.clone(),
        close: table.close.clone(),
        volume: table.volume.clone(),
        columns: table
            .extra
            .iter()
            .map(|c| match &c.values {
                ColumnValues::Real(v) => pb::BarColumn {
                    name: c.name.clone(),
                    values: v.clone(),
                    labels: Vec::new(),
                },
                ColumnValues::Text(v) => pb::BarColumn {
                    name: c.name.clone(),
                    values: Vec::new(),
                    labels: v.iter().map(|l| l.clone().unwrap_or_default()).collect(),
                },
            })
            .collect(),
    }
}

/// Longest label of a categorical column on the wire, in bytes.
pub const MAX_LABEL_BYTES: usize = 256;
/// Most columns beside the bars in one message (a client may send every
/// column of its frame; the model reads the ones it names).
pub const MAX_BAR_COLUMNS: usize = 4096;

/// The user's columns of a message, one value per bar each, checked.
fn columns_from_proto(columns: &[pb::BarColumn], n: usize) -> Result<Vec<NamedColumn>, BarsError> {
    if columns.len() > MAX_BAR_COLUMNS {
        return Err(BarsError::Shape(format!(
            "{} columns beside the bars; send at most {MAX_BAR_COLUMNS} (the ones the model \
             reads)",
            columns.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(columns.len());
    for c in columns {
        let name = c.name.trim();
        if name.is_empty()
            || name.len() > MAX_COLUMN_NAME_BYTES
            || name.chars().any(char::is_control)
        {
            return Err(BarsError::Shape(format!(
                "a column beside the bars needs a name of 1 to {MAX_COLUMN_NAME_BYTES} bytes"
            )));
        }
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(BarsError::Shape(format!("column {name:?} is sent twice")));
        }
        let values = match (c.values.len(), c.labels.len()) {
            (len, 0) if len == n => ColumnValues::Real(
                c.values
                    .iter()
                    .map(|x| if x.is_finite() { *x } else { f64::NAN })
                    .collect(),
            ),
            (0, len) if len == n => {
                if c.labels.iter().any(|l| l.len() > MAX_LABEL_BYTES) {
                    return Err(BarsError::Shape(format!(
                        "column {name:?}: a label is longer than {MAX_LABEL_BYTES} bytes"
                    )));
                }
                ColumnValues::Text(
                    c.labels
                        .iter()
                        .map(|l| (!l.is_empty()).then(|| l.clone()))
                        .collect(),
                )
            }
            (values, labels) => {
                return Err(BarsError::Shape(format!(
                    "column {name:?} has {values} values and {labels} labels for {n} bars; give \
                     one value per bar (values for a number, labels for a category)"
                )))
            }
        };
        out.push(NamedColumn {
            name: name.to_string(),
            values,
        });
    }
    Ok(out)
}

/// Bars from a message, every row checked; an empty interval is inferred
/// from the timestamps, or `fallback` when there are too few of them.
pub fn bars_from_proto(
    bars: &pb::Bars,
    fallback: Option<BarInterval>,
) -> Result<BarTable, BarsError> {
    let n = bars.ts_unix_ns.len();
    if n > MAX_BARS {
        return Err(BarsError::Shape(format!(
            "{n} bars in one message; send at most {MAX_BARS} (split the file by time)"
        )));
    }
    let lengths = [
        bars.open.len(),
        bars.high.len(),
        bars.low.len(),
        bars.close.len(),
        bars.volume.len(),
    ];
    if lengths.iter().any(|&l| l != n) {
        return Err(BarsError::Shape(format!(
            "the columns have different lengths (ts {n}, open {}, high {}, low {}, close {}, \
             volume {}); give every column one value per bar",
            lengths[0], lengths[1], lengths[2], lengths[3], lengths[4]
        )));
    }
    let symbol = bars.symbol.trim();
    if symbol.is_empty() || symbol.len() > 64 {
        return Err(BarsError::Shape(
            "give the bars' symbol (1 to 64 characters, e.g. ES or ESZ4)".into(),
        ));
    }
    let interval = if bars.interval.trim().is_empty() {
        BarInterval::infer(&bars.ts_unix_ns)
            .or(fallback)
            .ok_or_else(|| {
                BarsError::Shape(
                    "the bar interval cannot be inferred from fewer than two bars; say it \
                     (1s, 1m, 1h or 1d)"
                        .into(),
                )
            })?
    } else {
        BarInterval::parse(&bars.interval).map_err(|e| BarsError::Shape(e.to_string()))?
    };
    let mut table = BarTable::new(symbol, interval);
    table.ts = bars.ts_unix_ns.clone();
    table.open = bars.open.clone();
    table.high = bars.high.clone();
    table.low = bars.low.clone();
    table.close = bars.close.clone();
    table.volume = bars.volume.clone();
    table.validate(Path::new("bars"))?;
    table.extra = columns_from_proto(&bars.columns, n)?;
    Ok(table)
}

/// Prediction rows as a message (one symbol per table on the wire).
pub fn rows_to_proto(table: &PredictionTable) -> pb::PredictionRows {
    pb::PredictionRows {
        columns: table.columns.clone(),
        symbol: table.symbols.first().cloned().unwrap_or_default(),
        ts_unix_ns: table.timestamps.clone(),
        values: table.values.clone(),
    }
}

/// Prediction rows from a message; refuses values that do not fill whole rows.
pub fn rows_from_proto(rows: &pb::PredictionRows) -> Result<PredictionTable, BarsError> {
    let width = rows.columns.len();
    let n = rows.ts_unix_ns.len();
    if rows.values.len() != n * width {
        return Err(BarsError::Shape(format!(
            "{} values for {n} rows of {width} columns",
            rows.values.len()
        )));
    }
    let mut table = PredictionTable::new(rows.columns.clone());
    for (i, ts) in rows.ts_unix_ns.iter().enumerate() {
        table.push(*ts, &rows.symbol, &rows.values[i * width..(i + 1) * width]);
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_days() -> pb::Bars {
        pb::Bars {
            symbol: "ES".into(),
            interval: String::new(),
            ts_unix_ns: vec![0, 86_400_000_000_000],
            open: vec![10.0, 11.0],
            high: vec![12.0, 12.0],
            low: vec![9.0, 10.0],
            close: vec![11.0, 11.5],
            volume: vec![5, 6],
            columns: Vec::new(),
        }
    }

    #[test]
    fn bars_round_trip_and_are_checked_like_a_file() {
        let table = bars_from_proto(&two_days(), None).unwrap();
        assert_eq!(table.interval, BarInterval::Day);
        assert_eq!(
            bars_to_proto(&table),
            pb::Bars {
                interval: "1d".into(),
                ..two_days()
            }
        );
        let mut short = two_days();
        short.volume.pop();
        assert!(bars_from_proto(&short, None)
            .unwrap_err()
            .to_string()
            .contains("different lengths"));
        let mut unsorted = two_days();
        unsorted.ts_unix_ns.reverse();
        let e = bars_from_proto(&unsorted, None).unwrap_err().to_string();
        assert!(e.contains("not sorted"), "{e}");
        let mut bad_price = two_days();
        bad_price.close[1] = f64::NAN;
        assert!(bars_from_proto(&bad_price, None).is_err());
        let mut one = two_days();
        for c in [&mut one.open, &mut one.high, &mut one.low, &mut one.close] {
            c.truncate(1);
        }
        one.ts_unix_ns.truncate(1);
        one.volume.truncate(1);
        assert!(bars_from_proto(&one, None).is_err(), "no interval to infer");
        assert_eq!(
            bars_from_proto(&one, Some(BarInterval::Day)).unwrap().len(),
            1
        );
        let nameless = pb::Bars {
            symbol: " ".into(),
            ..two_days()
        };
        assert!(bars_from_proto(&nameless, None).is_err());
    }

    #[test]
    fn the_users_columns_travel_with_the_bars_and_are_checked() {
        let mut with = two_days();
        with.columns = vec![
            pb::BarColumn {
                name: "ofi".into(),
                values: vec![1.5, f64::NAN],
                labels: Vec::new(),
            },
            pb::BarColumn {
                name: "event".into(),
                values: Vec::new(),
                labels: vec!["FOMC".into(), String::new()],
            },
        ];
        let table = bars_from_proto(&with, None).unwrap();
        assert_eq!(table.extra.len(), 2);
        assert_eq!(
            table.extra[1].values,
            ColumnValues::Text(vec![Some("FOMC".into()), None])
        );
        let back = bars_to_proto(&table);
        assert_eq!(
            back.columns[1].labels,
            vec!["FOMC".to_string(), String::new()]
        );
        assert!(back.columns[0].values[1].is_nan());
        let refused = |columns: Vec<pb::BarColumn>, expected: &str| {
            let bars = pb::Bars {
                columns,
                ..two_days()
            };
            let e = bars_from_proto(&bars, None).unwrap_err().to_string();
            assert!(e.contains(expected), "{expected:?} in: {e}");
        };
        let real = |name: &str, values: Vec<f64>| pb::BarColumn {
            name: name.into(),
            values,
            labels: Vec::new(),
        };
        refused(
            vec![real("ofi", vec![1.0])],
            "has 1 values and 0 labels for 2 bars",
        );
        refused(
            vec![real("ofi", vec![1.0, 2.0]), real("OFI", vec![1.0, 2.0])],
            "is sent twice",
        );
        refused(vec![real("", vec![1.0, 2.0])], "needs a name");
    }

    #[test]
    fn prediction_rows_round_trip() {
        let mut table = PredictionTable::new(vec!["a".into(), "b".into()]);
        table.push(1, "ES", &[0.5, f64::NAN]);
        table.push(2, "ES", &[1.5, 2.0]);
        let back = rows_from_proto(&rows_to_proto(&table)).unwrap();
        assert_eq!(
            back.to_bytes(tli_models::TableFormat::Csv).unwrap(),
            table.to_bytes(tli_models::TableFormat::Csv).unwrap()
        );
        let mut broken = rows_to_proto(&table);
        broken.values.pop();
        assert!(rows_from_proto(&broken).is_err());
    }
}
