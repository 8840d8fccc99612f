//! Integration tests of the bar file formats (CSV, Parquet, DBN, DBN.zst):
//! exact round trips, refusal of truncated and malformed files with errors
//! that name the file, the row and the problem, and the front-contract roll
//! of parent-symbology DBN files.

use crate::fixtures::MinuteWalk;
use arrow_array::{
    ArrayRef, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use dbn::encode::{DbnEncoder, EncodeRecord};
use dbn::{OhlcvMsg, RecordHeader, SType, TradeMsg};
use parquet::arrow::ArrowWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tli_data::dbn_format;
use tli_data::timefmt::{self, NANOS_PER_DAY};
use tli_data::{
    csv_format, parquet_format, read_bars, write_bars, BarInterval, BarTable, ContractBars,
};

const MINUTE: i64 = 60_000_000_000;
const HOUR: i64 = 60 * MINUTE;

/// ~500 minute bars on a 0.25 grid (deterministic walk), with a few prices at
/// full 1e-9 resolution.
fn minute_bars(symbol: &'static str, n: usize) -> BarTable {
    let mut t = MinuteWalk {
        symbol,
        start: "2024-03-04T14:30:00Z",
        seed: 0x9E37_79B9_7F4A_7C15,
        price: 5000.0,
        floor: 1.0,
        max_volume: 5000,
    }
    .bars(n);
    // Prices at 1e-9 resolution (nearest doubles of 9-decimal numbers).
    let i = 7;
    t.open[i] = 4321.123456789;
    t.high[i] = 4322.5;
    t.low[i] = 4320.000000001;
    t.close[i] = 4321.987654321;
    if n > 300 {
        let i = 300;
        t.open[i] = 0.000000123;
        t.high[i] = 12.5;
        t.low[i] = 0.000000001;
        t.close[i] = 7.777777777;
    }
    t.validate(Path::new("sample")).unwrap();
    t
}

fn assert_same_bars(label: &str, got: &BarTable, want: &BarTable) {
    assert_eq!(got.symbol, want.symbol, "{label}: symbol");
    assert_eq!(got.interval, want.interval, "{label}: interval");
    assert_eq!(got.ts, want.ts, "{label}: ts");
    assert_eq!(got.volume, want.volume, "{label}: volume");
    for (name, g, w) in [
        ("open", &got.open, &want.open),
        ("high", &got.high, &want.high),
        ("low", &got.low, &want.low),
        ("close", &got.close, &want.close),
    ] {
        assert_eq!(g.len(), w.len(), "{label}: {name} length");
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{label}: {name} row {}: {a} vs {b}",
                i + 1
            );
        }
    }
    assert_eq!(got.rolls, want.rolls, "{label}: rolls");
    assert_eq!(got, want, "{label}");
}

fn error_text(result: Result<BarTable, tli_data::DataError>) -> String {
    match result {
        Ok(t) => panic!("expected an error, read {} bars", t.len()),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(text: &str, words: &[&str]) {
    for w in words {
        assert!(text.contains(w), "error {text:?} does not mention {w:?}");
    }
}

#[test]
fn every_format_round_trips_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let original = minute_bars("ESM4", 500);
    let files: Vec<PathBuf> = ["ESM4.csv", "ESM4.parquet", "ESM4.dbn", "ESM4.dbn.zst"]
        .iter()
        .map(|name| dir.path().join(name))
        .collect();
    for path in &files {
        write_bars(path, &original).unwrap();
    }
    let tables: Vec<BarTable> = files.iter().map(|p| read_bars(p).unwrap()).collect();
    for (path, table) in files.iter().zip(&tables) {
        assert_same_bars(&path.display().to_string(), table, &original);
    }
    for pair in tables.windows(2) {
        assert_eq!(pair[0], pair[1]);
    }
    // The format-specific entry points agree with read_bars.
    assert_eq!(csv_format::read(&files[0]).unwrap(), original);
    assert_eq!(parquet_format::read(&files[1]).unwrap(), original);
    assert_eq!(dbn_format::read(&files[2]).unwrap(), original);
    // Compression did something.
    let plain = std::fs::metadata(&files[2]).unwrap().len();
    let zstd = std::fs::metadata(&files[3]).unwrap().len();
    assert!(zstd < plain, "{zstd} >= {plain}");
}

/// A file tli writes reads back as the same symbol whatever its name: the
/// CSV writer wrote no symbol column, so `es.csv` of ES.FUT bars read back as
/// the symbol `es`, with no contract.
#[test]
fn every_format_keeps_its_symbol_under_any_file_name() {
    let dir = tempfile::tempdir().unwrap();
    for symbol in ["ESM4", "ES.FUT"] {
        let original = minute_bars(symbol, 50);
        for name in ["es.csv", "bars.parquet", "x.dbn", "y.dbn.zst"] {
            let path = dir.path().join(name);
            write_bars(&path, &original).unwrap();
            let (back, notes) = tli_data::BarSource::file(&path)
                .read(&tli_data::contracts::ContractBook::builtin())
                .unwrap();
            assert_eq!(back.symbol, symbol, "{name}");
            assert_ne!(
                notes.symbol_origin,
                tli_data::bar_source::SymbolOrigin::FileName,
                "{name}: the symbol came from the file name"
            );
            assert_same_bars(name, &back, &original);
        }
    }
}

#[test]
fn written_csv_has_the_documented_layout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("es.csv");
    let mut t = BarTable::new("es", BarInterval::Day);
    t.push(
        timefmt::parse("2024-01-02").unwrap(),
        4700.25,
        4710.0,
        4690.5,
        4705.123456789,
        1234,
    );
    csv_format::write(&path, &t).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        "ts_event,open,high,low,close,volume,symbol\n2024-01-02T00:00:00Z,4700.25,4710,4690.5,4705.123456789,1234,es\n"
    );
    // One bar cannot show its spacing: read back as daily.
    assert_eq!(csv_format::read(&path).unwrap(), t);
}

#[test]
fn truncated_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let original = minute_bars("NQM4", 500);
    for name in ["cut.csv", "cut.parquet", "cut.dbn", "cut.dbn.zst"] {
        let path = dir.path().join(name);
        write_bars(&path, &original).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let text = error_text(read_bars(&path));
        assert_mentions(&text, &[name]);
    }
    // A zstd stream cut after many records (not just inside the metadata) is
    // noticed too, not read as a shorter table.
    let path = dir.path().join("long.dbn.zst");
    write_bars(&path, &minute_bars("NQM4", 20_000)).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let text = error_text(read_bars(&path));
    assert_mentions(&text, &["long.dbn.zst", "truncated", "incomplete frame"]);
    // A cut at any byte of a plain DBN file's records is noticed, however short.
    let path = dir.path().join("cut_small.dbn");
    write_bars(&path, &minute_bars("NQM4", 20)).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    for cut in [bytes.len() - 1, bytes.len() - 55, bytes.len() - 57] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let text = error_text(read_bars(&path));
        assert_mentions(&text, &["cut_small.dbn", "truncated"]);
    }
}

const GOOD_CSV: &str = "\
ts_event,open,high,low,close,volume
2024-01-02,100,101,99,100.5,10
2024-01-03,100.5,102,100,101,11
2024-01-04,101,103,100.5,102,12
2024-01-05,102,102.5,101,101.5,13
2024-01-08,101.5,104,101,103,14
";

/// Writes GOOD_CSV with data row `row` (1-based) replaced by `line`.
fn csv_with_row(dir: &Path, name: &str, row: usize, line: &str) -> PathBuf {
    let mut lines: Vec<&str> = GOOD_CSV.lines().collect();
    lines[row] = line;
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[test]
fn csv_errors_name_file_row_and_problem() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = d.join("good.csv");
    std::fs::write(&good, GOOD_CSV).unwrap();
    let t = csv_format::read(&good).unwrap();
    assert_eq!(
        (t.len(), t.symbol.as_str(), t.interval),
        (5, "good", BarInterval::Day)
    );

    let missing = d.join("missing.csv");
    std::fs::write(
        &missing,
        "ts_event,open,high,low,close\n2024-01-02,100,101,99,100.5\n",
    )
    .unwrap();
    assert_mentions(
        &error_text(csv_format::read(&missing)),
        &[
            "missing.csv",
            "missing required column \"volume\"",
            "ts_event,open,high,low,close",
        ],
    );

    let cases: [(&str, usize, &str, &[&str]); 8] = [
        (
            "mistyped.csv",
            3,
            "2024-01-04,101,103,100.5,abc,12",
            &["row 3", "close", "\"abc\""],
        ),
        (
            "unsorted.csv",
            4,
            "2024-01-03,102,102.5,101,101.5,13",
            &["row 4", "not sorted"],
        ),
        (
            "duplicate.csv",
            4,
            "2024-01-04,102,102.5,101,101.5,13",
            &["row 4", "duplicate timestamp"],
        ),
        (
            "nan.csv",
            2,
            "2024-01-03,100.5,102,100,NaN,11",
            &["row 2", "close is NaN"],
        ),
        (
            "zero.csv",
            5,
            "2024-01-08,101.5,104,0,103,14",
            &["row 5", "low is 0", "positive"],
        ),
        (
            "negative.csv",
            1,
            "2024-01-02,-1,101,99,100.5,10",
            &["row 1", "open is -1", "positive"],
        ),
        (
            "inverted.csv",
            2,
            "2024-01-03,100.5,99,100,99.5,11",
            &["row 2", "high 99 is below low 100"],
        ),
        (
            "fields.csv",
            2,
            "2024-01-03,100.5,102,100,101,11,7",
            &["row 2", "7 fields", "header has 6"],
        ),
    ];
    for (name, row, line, words) in cases {
        let path = csv_with_row(d, name, row, line);
        let text = error_text(csv_format::read(&path));
        assert_mentions(&text, &[name]);
        assert_mentions(&text, words);
    }

    let bad_ts = csv_with_row(d, "badts.csv", 2, "2024-13-03,100.5,102,100,101,11");
    assert_mentions(
        &error_text(csv_format::read(&bad_ts)),
        &["badts.csv", "row 2", "ts_event", "2024-13-03"],
    );
    let bad_volume = csv_with_row(d, "badvol.csv", 5, "2024-01-08,101.5,104,101,103,1.5");
    assert_mentions(
        &error_text(csv_format::read(&bad_volume)),
        &["badvol.csv", "row 5", "volume", "\"1.5\""],
    );

    let empty = d.join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    assert_mentions(
        &error_text(csv_format::read(&empty)),
        &["empty.csv", "empty"],
    );
    let header_only = d.join("header_only.csv");
    std::fs::write(&header_only, "ts_event,open,high,low,close,volume\n").unwrap();
    assert_mentions(
        &error_text(csv_format::read(&header_only)),
        &["header_only.csv", "no bars"],
    );
}

#[test]
fn csv_reader_accepts_other_layouts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("es_hourly.v2.csv");
    std::fs::write(
        &path,
        "Volume,Close,Symbol,Low,High,Open,Note,Timestamp\n\
         10,100.5,ESH4,99,101,100,x,2024-01-02T14:00:00Z\n\
         11,101,ESH4,100,102,100.5,y,2024-01-02T15:00:00Z\n\
         12,102,ESH4,100.5,103,101,,1704211200000000000\n",
    )
    .unwrap();
    let t = csv_format::read(&path).unwrap();
    assert_eq!(t.symbol, "ESH4");
    assert_eq!(t.interval, BarInterval::Hour);
    assert_eq!(t.ts[2], timefmt::parse("2024-01-02T16:00:00Z").unwrap());
    assert_eq!(
        (t.open[1], t.high[1], t.low[1], t.close[1], t.volume[1]),
        (100.5, 102.0, 100.0, 101.0, 11)
    );

    // Without a symbol column, the symbol is the name up to the first '.'.
    let path = dir.path().join("es_daily.csv");
    std::fs::write(
        &path,
        "date,open,high,low,close,volume\n2024-01-02,1,2,0.5,1.5,3\n2024-01-03,1,2,0.5,1.5,3\n",
    )
    .unwrap();
    let t = csv_format::read(&path).unwrap();
    assert_eq!(
        (t.symbol.as_str(), t.interval),
        ("es_daily", BarInterval::Day)
    );

    let path = dir.path().join("mixed.csv");
    std::fs::write(
        &path,
        "ts,open,high,low,close,volume,symbol\n2024-01-02,1,2,0.5,1.5,3,ESH4\n2024-01-03,1,2,0.5,1.5,3,ESM4\n",
    )
    .unwrap();
    assert_mentions(
        &error_text(csv_format::read(&path)),
        &["mixed.csv", "row 2", "ESM4", "ESH4"],
    );
}

fn write_parquet(path: &Path, fields: Vec<Field>, columns: Vec<ArrayRef>) {
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let mut writer =
        ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

#[test]
fn parquet_reader_checks_types_and_accepts_alternatives() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ts = || -> ArrayRef {
        Arc::new(TimestampMillisecondArray::from(vec![
            1_704_204_000_000,
            1_704_207_600_000,
            1_704_211_200_000,
        ]))
    };
    let ts_field = || {
        Field::new(
            "Timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        )
    };
    let f32s = |v: [f32; 3]| -> ArrayRef { Arc::new(Float32Array::from(v.to_vec())) };
    let f64s = |v: [f64; 3]| -> ArrayRef { Arc::new(Float64Array::from(v.to_vec())) };
    let price_fields = |t: DataType| {
        ["open", "high", "low", "close"]
            .map(|n| Field::new(n, t.clone(), true))
            .to_vec()
    };

    // Other accepted types: ms timestamps, Float32 prices, Int64 volume, symbol column.
    let path = d.join("alt.parquet");
    let mut fields = vec![ts_field()];
    fields.extend(price_fields(DataType::Float32));
    fields.push(Field::new("volume", DataType::Int64, false));
    fields.push(Field::new("symbol", DataType::Utf8, false));
    write_parquet(
        &path,
        fields.clone(),
        vec![
            ts(),
            f32s([100.0, 100.5, 101.0]),
            f32s([101.0, 102.0, 103.0]),
            f32s([99.0, 100.0, 100.5]),
            f32s([100.5, 101.0, 102.0]),
            Arc::new(Int64Array::from(vec![10, 11, 12])),
            Arc::new(StringArray::from(vec!["ESH4"; 3])),
        ],
    );
    let t = parquet_format::read(&path).unwrap();
    assert_eq!(
        (t.symbol.as_str(), t.interval, t.len()),
        ("ESH4", BarInterval::Hour, 3)
    );
    assert_eq!(t.ts[0], timefmt::parse("2024-01-02T14:00:00Z").unwrap());
    assert_eq!((t.close[0], t.volume[2]), (100.5, 12));

    // A negative Int64 volume and a null price are refused with their rows.
    let path = d.join("negative.parquet");
    write_parquet(
        &path,
        fields.clone(),
        vec![
            ts(),
            f32s([100.0, 100.5, 101.0]),
            f32s([101.0, 102.0, 103.0]),
            f32s([99.0, 100.0, 100.5]),
            f32s([100.5, 101.0, 102.0]),
            Arc::new(Int64Array::from(vec![10, 11, -12])),
            Arc::new(StringArray::from(vec!["ESH4"; 3])),
        ],
    );
    assert_mentions(
        &error_text(parquet_format::read(&path)),
        &["negative.parquet", "row 3", "volume", "-12"],
    );
    let path = d.join("null.parquet");
    write_parquet(
        &path,
        fields,
        vec![
            ts(),
            f32s([100.0, 100.5, 101.0]),
            f32s([101.0, 102.0, 103.0]),
            Arc::new(Float32Array::from(vec![Some(99.0), None, Some(100.5)])),
            f32s([100.5, 101.0, 102.0]),
            Arc::new(Int64Array::from(vec![10, 11, 12])),
            Arc::new(StringArray::from(vec!["ESH4"; 3])),
        ],
    );
    assert_mentions(
        &error_text(parquet_format::read(&path)),
        &["null.parquet", "row 2", "low", "null"],
    );

    // close as Utf8: the column, the type found and the types accepted.
    let path = d.join("mistyped.parquet");
    let mut fields = vec![ts_field()];
    fields.extend(price_fields(DataType::Float64));
    fields[4] = Field::new("close", DataType::Utf8, false);
    fields.push(Field::new("volume", DataType::UInt64, false));
    write_parquet(
        &path,
        fields,
        vec![
            ts(),
            f64s([100.0, 100.5, 101.0]),
            f64s([101.0, 102.0, 103.0]),
            f64s([99.0, 100.0, 100.5]),
            Arc::new(StringArray::from(vec!["100.5", "101", "102"])),
            Arc::new(UInt64Array::from(vec![10, 11, 12])),
        ],
    );
    assert_mentions(
        &error_text(parquet_format::read(&path)),
        &["mistyped.parquet", "\"close\"", "Utf8", "Float64"],
    );

    // No volume column.
    let path = d.join("novolume.parquet");
    let mut fields = vec![ts_field()];
    fields.extend(price_fields(DataType::Float64));
    write_parquet(
        &path,
        fields,
        vec![
            ts(),
            f64s([100.0, 100.5, 101.0]),
            f64s([101.0, 102.0, 103.0]),
            f64s([99.0, 100.0, 100.5]),
            f64s([100.5, 101.0, 102.0]),
        ],
    );
    assert_mentions(
        &error_text(parquet_format::read(&path)),
        &[
            "novolume.parquet",
            "missing required column \"volume\"",
            "Timestamp, open, high, low, close",
        ],
    );
}

#[test]
fn parquet_file_carries_symbol_and_interval_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = BarTable::new("CLZ4", BarInterval::Hour);
    t.push(
        timefmt::parse("2024-01-02").unwrap(),
        70.0,
        71.0,
        69.5,
        70.5,
        5,
    );
    // Named so that the file stem differs from the symbol, with a single bar
    // so that the interval cannot be inferred: both must come from metadata.
    let path = dir.path().join("oil.parquet");
    parquet_format::write(&path, &t).unwrap();
    assert_eq!(parquet_format::read(&path).unwrap(), t);
}

fn encode_dbn<R: dbn::encode::DbnEncodable>(path: &Path, metadata: &dbn::Metadata, records: &[R]) {
    let file = std::fs::File::create(path).unwrap();
    let mut encoder = DbnEncoder::new(file, metadata).unwrap();
    encoder.encode_records(records).unwrap();
}

#[test]
fn dbn_refuses_other_schemas_and_undefined_prices() {
    let dir = tempfile::tempdir().unwrap();
    let start = timefmt::parse("2024-01-02T14:30:00Z").unwrap() as u64;
    let path = dir.path().join("trades.dbn");
    let metadata = dbn::Metadata::builder()
        .dataset("TLI.LOCAL")
        .schema(Some(dbn::Schema::Trades))
        .start(start)
        .stype_in(Some(SType::RawSymbol))
        .stype_out(SType::InstrumentId)
        .symbols(vec!["ESH4".into()])
        .build();
    let trades: Vec<TradeMsg> = (0..2)
        .map(|i| TradeMsg {
            hd: RecordHeader::new::<TradeMsg>(dbn::rtype::MBP_0, 0, 1, start + i),
            price: 4_700_250_000_000,
            size: 1,
            ..Default::default()
        })
        .collect();
    encode_dbn(&path, &metadata, &trades);
    assert_mentions(
        &error_text(dbn_format::read(&path)),
        &["trades.dbn", "schema trades", "ohlcv-1m"],
    );

    let path = dir.path().join("undef.dbn");
    let metadata = dbn::Metadata::builder()
        .dataset("TLI.LOCAL")
        .schema(Some(dbn::Schema::Ohlcv1M))
        .start(start)
        .stype_in(Some(SType::RawSymbol))
        .stype_out(SType::InstrumentId)
        .symbols(vec!["ESH4".into()])
        .build();
    let bars: Vec<OhlcvMsg> = (0..3)
        .map(|i| OhlcvMsg {
            hd: RecordHeader::new::<OhlcvMsg>(
                dbn::rtype::OHLCV_1M,
                0,
                1,
                start + i * MINUTE as u64,
            ),
            open: 100_000_000_000,
            high: if i == 1 {
                dbn::UNDEF_PRICE
            } else {
                101_000_000_000
            },
            low: 99_000_000_000,
            close: 100_000_000_000,
            volume: 1,
        })
        .collect();
    encode_dbn(&path, &metadata, &bars);
    assert_mentions(
        &error_text(dbn_format::read(&path)),
        &["undef.dbn", "row 2", "high", "UNDEF_PRICE"],
    );
    // Without mappings, the symbol is the metadata's first symbol.
    encode_dbn(&path, &metadata, &bars[..1]);
    let t = dbn_format::read(&path).unwrap();
    assert_eq!(
        (t.symbol.as_str(), t.interval, t.close[0]),
        ("ESH4", BarInterval::Minute, 100.0)
    );
}

/// Hourly bars 13:00..=18:00 UTC on each of `days` (day offsets from 2024-03-01).
fn contract(
    symbol: &str,
    days: std::ops::Range<i64>,
    price: impl Fn(i64) -> f64,
    volume: impl Fn(i64) -> u64,
) -> ContractBars {
    let base = timefmt::parse("2024-03-01").unwrap();
    let mut t = BarTable::new(symbol, BarInterval::Hour);
    for day in days {
        for h in 13..=18 {
            let step = day * 6 + (h - 13);
            let p = price(step);
            t.push(
                base + day * NANOS_PER_DAY + h * HOUR,
                p,
                p + 0.5,
                p - 0.75,
                p + 0.25,
                volume(day),
            );
        }
    }
    ContractBars {
        raw_symbol: symbol.to_string(),
        table: t,
    }
}

#[test]
fn parent_symbology_rolls_to_the_front_contract_without_look_ahead() {
    let dir = tempfile::tempdir().unwrap();
    // A deterministic path on a 0.25 grid; M4 trades 2.0 above H4.
    let h4_price =
        |step: i64| 5000.0 + ((step * 7919) % 23 - 11) as f64 * 0.25 + step as f64 * 0.25;
    let m4_price = move |step: i64| h4_price(step) + 2.0;
    // Volume moves from H4 to M4 on day 10; H4 still trades until day 14.
    let h4 = contract(
        "ESH4",
        0..15,
        h4_price,
        |day| if day < 10 { 1000 } else { 100 },
    );
    let m4 = contract(
        "ESM4",
        0..20,
        m4_price,
        |day| if day < 10 { 100 } else { 1000 },
    );
    let spread = contract("ESH4-ESM4", 0..20, |_| -2.0, |_| 1_000_000);
    let path = dir.path().join("ES.FUT.ohlcv-1h.dbn.zst");
    dbn_format::write_parent(
        &path,
        "ES.FUT",
        BarInterval::Hour,
        &[h4.clone(), m4.clone(), spread],
    )
    .unwrap();

    let t = read_bars(&path).unwrap();
    assert_eq!(
        (t.symbol.as_str(), t.interval),
        ("ES.FUT", BarInterval::Hour)
    );
    assert_eq!(t.len(), 20 * 6, "one bar per timestamp");
    assert!(t.ts.windows(2).all(|w| w[0] < w[1]));

    assert_eq!(t.rolls.len(), 1, "{:?}", t.rolls);
    let roll = &t.rolls[0];
    let day11 = timefmt::parse("2024-03-12T13:00:00Z").unwrap();
    assert_eq!(
        roll.ts,
        day11,
        "roll on the day after the crossover: {}",
        timefmt::format(roll.ts)
    );
    assert_eq!((roll.from.as_str(), roll.to.as_str()), ("ESH4", "ESM4"));
    // Last common bar before the roll: day 10, 18:00.
    let k = 10 * 6 + 5;
    let expected_ratio = m4.table.close[k] / h4.table.close[k];
    assert_eq!(roll.ratio, expected_ratio);

    let at = t.ts.iter().position(|&ts| ts == roll.ts).unwrap();
    assert_eq!(at, 11 * 6);
    for i in 0..t.len() {
        let (src, factor) = if i < at {
            (&h4.table, roll.ratio)
        } else {
            (&m4.table, 1.0)
        };
        assert_eq!(t.ts[i], src.ts[i]);
        assert_eq!(t.volume[i], src.volume[i]);
        for (got, want) in [
            (t.open[i], src.open[i]),
            (t.high[i], src.high[i]),
            (t.low[i], src.low[i]),
            (t.close[i], src.close[i]),
        ] {
            assert_eq!(got, want * factor, "row {}", i + 1);
        }
    }
    // The log return across the roll is the new contract's own.
    let across = (t.close[at] / t.close[at - 1]).ln();
    let own = (m4.table.close[at] / m4.table.close[at - 1]).ln();
    assert!((across - own).abs() < 1e-12, "{across} vs {own}");
}

#[test]
fn parent_roll_never_goes_back_and_spreads_alone_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Volume: H4 leads days 0-4, M4 leads days 5-9, H4 leads again days 10-14.
    let h4 = contract(
        "ESH4",
        0..15,
        |s| 100.0 + s as f64 * 0.25,
        |d| if (5..10).contains(&d) { 10 } else { 50 },
    );
    let m4 = contract(
        "ESM4",
        0..15,
        |s| 101.0 + s as f64 * 0.25,
        |d| if (5..10).contains(&d) { 50 } else { 10 },
    );
    let path = dir.path().join("back.dbn");
    dbn_format::write_parent(&path, "ES.FUT", BarInterval::Hour, &[h4, m4]).unwrap();
    let t = dbn_format::read(&path).unwrap();
    assert_eq!(t.rolls.len(), 1, "{:?}", t.rolls);
    assert_eq!(
        t.rolls[0].ts,
        timefmt::parse("2024-03-07T13:00:00Z").unwrap()
    );
    assert_eq!(t.len(), 15 * 6);

    let spreads = [
        contract("ESH4-ESM4", 0..3, |_| -1.0, |_| 5),
        contract("ESM4-ESU4", 0..3, |_| -1.5, |_| 5),
    ];
    let path = dir.path().join("spreads.dbn");
    dbn_format::write_parent(&path, "ES.FUT", BarInterval::Hour, &spreads).unwrap();
    assert_mentions(
        &error_text(dbn_format::read(&path)),
        &["spreads.dbn", "spreads"],
    );
}
