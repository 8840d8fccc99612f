//! The valid files the mutations start from (small tables written by the
//! crate's own writers, a parent-symbology DBN file, the bundled samples),
//! and files with one known bad row (a bad price, an unsorted or repeated
//! timestamp, a null, a negative volume) written past the writers' checks.

use crate::fixtures::MinuteWalk;
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, TimestampNanosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use dbn::decode::DynReader;
use dbn::encode::DynWriter;
use dbn::Compression;
use parquet::arrow::ArrowWriter;
use proptest::prelude::*;
use proptest::sample::Index;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use tli_data::{timefmt, write_bars, BarInterval, BarTable, ContractBars};

/// The bundled sample data (`data/samples` at the workspace root).
pub fn sample(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../data/samples")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `n` one-minute bars.
pub fn minute_bars(n: usize) -> BarTable {
    MinuteWalk {
        symbol: "ESH4",
        start: "2024-01-02T14:30:00Z",
        seed: 0x9e37_79b9_7f4a_7c15,
        price: 4700.0,
        floor: 4000.0,
        max_volume: 500,
    }
    .bars(n)
}

/// `table` written by the crate to a file named `name`, as bytes.
pub fn written(name: &str, table: &BarTable) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    write_bars(&path, table).expect("a valid table is written");
    std::fs::read(&path).expect("written file")
}

/// Valid files of one format (`csv`, `parquet`, `dbn`), small ones first.
pub fn bases(extension: &str) -> Vec<Vec<u8>> {
    let name = format!("bars.{extension}");
    let mut out = vec![
        written(&name, &minute_bars(40)),
        written(&name, &minute_bars(1)),
        written(&name, &minute_bars(600)),
    ];
    match extension {
        "csv" => out.push(sample("cl_proxy_wti_1d.csv")),
        "parquet" => out.push(sample("cl_proxy_wti_1d.parquet")),
        "dbn" => {
            out.push(parent_file());
            out.push(unzstd(&sample("cl_proxy_wti_1d.dbn.zst")));
        }
        other => panic!("no bases for {other}"),
    }
    out
}

/// A plain DBN file under parent symbology: two outright contracts and a spread.
fn parent_file() -> Vec<u8> {
    let contract = |symbol: &str, start: &'static str, n: usize| ContractBars {
        raw_symbol: symbol.into(),
        table: MinuteWalk {
            symbol: "x",
            start,
            seed: 7 + n as u64,
            price: 100.0,
            floor: 50.0,
            max_volume: 100,
        }
        .bars(n),
    };
    let contracts = [
        contract("ESH4", "2024-03-01T14:00:00Z", 30),
        contract("ESM4", "2024-03-02T14:00:00Z", 30),
        contract("ESH4-ESM4", "2024-03-01T14:00:00Z", 5),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("parent.dbn");
    tli_data::dbn_format::write_parent(&path, "ES.FUT", BarInterval::Minute, &contracts)
        .expect("parent file");
    std::fs::read(&path).expect("written file")
}

/// zstd-compresses a DBN stream.
pub fn zstd(plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut writer = DynWriter::new(&mut out, Compression::Zstd).expect("zstd writer");
        writer.write_all(plain).expect("compress");
        writer.finish().expect("finish");
    }
    out
}

/// The DBN stream inside a `.dbn.zst` file.
pub fn unzstd(compressed: &[u8]) -> Vec<u8> {
    let mut plain = Vec::new();
    DynReader::inferred_with_buffer(std::io::BufReader::new(compressed))
        .expect("zstd reader")
        .read_to_end(&mut plain)
        .expect("decompress");
    plain
}

// ----- one known bad row ------------------------------------------------------------

/// A defect planted in one row; every reader must refuse the file naming that row.
#[derive(Clone, Debug)]
pub enum Defect {
    /// Column 0..4 = open, high, low, close set to a bad value.
    Price {
        column: usize,
        value: f64,
    },
    HighBelowLow,
    /// The row repeats the previous row's timestamp.
    RepeatedTime,
    /// The row is earlier than the previous one.
    EarlierTime,
    /// Volume −5 (CSV, Parquet Int64).
    NegativeVolume,
    /// A null price (Parquet).
    Null {
        column: usize,
    },
}

/// Bars in the planted file.
pub const DEFECT_ROWS: usize = 40;

/// A defect and the 0-based row it is planted in (rows ≥ 1, so there is a previous one).
pub fn defect() -> impl Strategy<Value = (Defect, usize)> {
    let bad_price = prop::sample::select(vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -1.0,
        0.0,
        -0.0,
    ]);
    let defect = prop_oneof![
        3 => (0usize..4, bad_price).prop_map(|(column, value)| Defect::Price { column, value }),
        1 => Just(Defect::HighBelowLow),
        1 => Just(Defect::RepeatedTime),
        1 => Just(Defect::EarlierTime),
        1 => Just(Defect::NegativeVolume),
        1 => (0usize..4).prop_map(|column| Defect::Null { column }),
    ];
    (defect, any::<Index>()).prop_map(|(d, i)| (d, 1 + i.index(DEFECT_ROWS - 1)))
}

/// The columns of a planted file: prices as `Option` (None = null), volume signed.
struct Columns {
    ts: Vec<i64>,
    prices: [Vec<Option<f64>>; 4],
    volume: Vec<i64>,
}

fn planted(defect: &Defect, row: usize) -> Columns {
    let t = minute_bars(DEFECT_ROWS);
    let some = |v: &[f64]| v.iter().copied().map(Some).collect::<Vec<_>>();
    let mut c = Columns {
        ts: t.ts.clone(),
        prices: [some(&t.open), some(&t.high), some(&t.low), some(&t.close)],
        volume: t.volume.iter().map(|&v| v as i64).collect(),
    };
    match defect {
        Defect::Price { column, value } => c.prices[*column][row] = Some(*value),
        Defect::HighBelowLow => {
            let low = c.prices[2][row].unwrap_or(1.0);
            c.prices[1][row] = Some(low - 0.25);
        }
        Defect::RepeatedTime => c.ts[row] = c.ts[row - 1],
        Defect::EarlierTime => c.ts[row] = c.ts[row - 1] - 1,
        Defect::NegativeVolume => c.volume[row] = -5,
        Defect::Null { column } => c.prices[*column][row] = None,
    }
    c
}

/// The planted file as CSV (a null becomes an empty field).
pub fn planted_csv(defect: &Defect, row: usize) -> Vec<u8> {
    let c = planted(defect, row);
    let mut text = String::from("ts_event,open,high,low,close,volume\n");
    for i in 0..c.ts.len() {
        let price = |k: usize| c.prices[k][i].map(|p| p.to_string()).unwrap_or_default();
        text.push_str(&format!(
            "{},{},{},{},{},{}\n",
            timefmt::format(c.ts[i]),
            price(0),
            price(1),
            price(2),
            price(3),
            c.volume[i]
        ));
    }
    text.into_bytes()
}

/// The planted file as Parquet (nullable prices, Int64 volume).
pub fn planted_parquet(defect: &Defect, row: usize) -> Vec<u8> {
    let c = planted(defect, row);
    let mut fields = vec![Field::new(
        "ts_event",
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        false,
    )];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(TimestampNanosecondArray::from(c.ts))];
    for (name, values) in ["open", "high", "low", "close"].iter().zip(c.prices) {
        fields.push(Field::new(*name, DataType::Float64, true));
        columns.push(Arc::new(Float64Array::from(values)));
    }
    fields.push(Field::new("volume", DataType::Int64, false));
    columns.push(Arc::new(Int64Array::from(c.volume)));
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("batch");
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, None).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    out
}

/// The planted file as plain DBN: a valid file with the record's fields
/// overwritten (a price that cannot be fixed-point, NaN or a null, becomes
/// `UNDEF_PRICE`; a negative volume cannot be written and leaves the row
/// valid, so it is not planted in DBN).
pub fn planted_dbn(defect: &Defect, row: usize) -> Option<Vec<u8>> {
    if matches!(defect, Defect::NegativeVolume) {
        return None;
    }
    let c = planted(defect, row);
    let mut bytes = written("bars.dbn", &minute_bars(DEFECT_ROWS));
    let metadata_len = 8 + u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
    let record = metadata_len + row * std::mem::size_of::<dbn::OhlcvMsg>();
    bytes[record + 8..record + 16].copy_from_slice(&(c.ts[row] as u64).to_le_bytes());
    for k in 0..4 {
        let fixed = match c.prices[k][row] {
            Some(p) if p.is_finite() => (p * 1e9).round() as i64,
            _ => dbn::UNDEF_PRICE,
        };
        let at = record + 16 + 8 * k;
        bytes[at..at + 8].copy_from_slice(&fixed.to_le_bytes());
    }
    Some(bytes)
}
