//! Bars brought by users: timestamps with UTC offsets are
//! converted and read the same bars as the UTC file; local times without a
//! zone are refused unless a zone is given, then read the same bars too
//! (across both daylight-saving changes); a symbol given on the asset names
//! the bars, by the rule of `tli_data::bar_source`; a Yahoo-style CSV reads.

use crate::fixtures::MinuteWalk;
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, TimestampNanosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::arrow::ArrowWriter;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tli_data::bar_source::SymbolOrigin;
use tli_data::contracts::ContractBook;
use tli_data::{csv_format, inspect, timefmt, BarSource, BarTable};

const NEW_YORK: &str = "America/New_York";

/// Minute bars from `start` (UTC), `n` of them, symbol ES.
fn bars(start: &'static str, n: usize) -> BarTable {
    MinuteWalk {
        symbol: "ES",
        start,
        seed: 0x2545_F491_4F6C_DD1D,
        price: 5000.0,
        floor: 1.0,
        max_volume: 900,
    }
    .bars(n)
}

/// The bar's open time in New York: (wall clock as `YYYY-MM-DD HH:MM:SS`, offset `-05:00`).
fn new_york(ts: i64) -> (String, String) {
    let zoned = jiff::Timestamp::from_nanosecond(i128::from(ts))
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::get(NEW_YORK).unwrap());
    (
        zoned.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        zoned.strftime("%:z").to_string(),
    )
}

/// `table` as a pandas-style CSV, its timestamps written by `stamp`.
fn write_csv(path: &Path, table: &BarTable, stamp: impl Fn(i64) -> String) {
    write_csv_as(path, "timestamp", table, stamp);
}

/// `table` as CSV whose first column(s) are `first_columns`, written by
/// `stamp` from each bar's time, then `open,high,low,close,volume`.
fn write_csv_as(path: &Path, first_columns: &str, table: &BarTable, stamp: impl Fn(i64) -> String) {
    let mut text = format!("{first_columns},open,high,low,close,volume\n");
    for i in 0..table.len() {
        writeln!(
            text,
            "{},{},{},{},{},{}",
            stamp(table.ts[i]),
            table.open[i],
            table.high[i],
            table.low[i],
            table.close[i],
            table.volume[i]
        )
        .unwrap();
    }
    std::fs::write(path, text).unwrap();
}

/// `table` as Parquet with a `timestamp` column of `values`, in `zone` if any.
fn write_parquet(path: &Path, table: &BarTable, values: Vec<i64>, zone: Option<&str>) {
    write_parquet_named(path, "timestamp", table, values, zone)
}

/// [`write_parquet`] with the timestamp column named `ts_name`.
fn write_parquet_named(
    path: &Path,
    ts_name: &str,
    table: &BarTable,
    values: Vec<i64>,
    zone: Option<&str>,
) {
    let ts = TimestampNanosecondArray::from(values).with_timezone_opt(zone.map(Arc::<str>::from));
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            ts_name,
            DataType::Timestamp(TimeUnit::Nanosecond, zone.map(Into::into)),
            false,
        ),
        Field::new("open", DataType::Float64, false),
        Field::new("high", DataType::Float64, false),
        Field::new("low", DataType::Float64, false),
        Field::new("close", DataType::Float64, false),
        Field::new("volume", DataType::Int64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(ts),
        Arc::new(Float64Array::from(table.open.clone())),
        Arc::new(Float64Array::from(table.high.clone())),
        Arc::new(Float64Array::from(table.low.clone())),
        Arc::new(Float64Array::from(table.close.clone())),
        Arc::new(Int64Array::from(
            table.volume.iter().map(|&v| v as i64).collect::<Vec<_>>(),
        )),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let mut writer =
        ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

fn source(path: &Path, symbol: Option<&str>, tz: Option<&str>) -> BarSource {
    BarSource {
        path: path.to_path_buf(),
        symbol: symbol.map(str::to_string),
        tz: tz.map(str::to_string),
        ..BarSource::default()
    }
}

fn read(source: &BarSource) -> BarTable {
    source.read(&ContractBook::builtin()).unwrap().0
}

fn assert_same_bars(label: &str, got: &BarTable, want: &BarTable) {
    assert_eq!(got.ts, want.ts, "{label}: timestamps");
    assert_eq!(
        (&got.open, &got.high, &got.low, &got.close, &got.volume),
        (&want.open, &want.high, &want.low, &want.close, &want.volume),
        "{label}: prices and volumes"
    );
    assert_eq!(got.interval, want.interval, "{label}: interval");
}

/// Files around both New York clock changes of 2024: UTC, with offsets,
/// and as naive local times.
struct Versions {
    _dir: tempfile::TempDir,
    utc: PathBuf,
    offset: PathBuf,
    local: PathBuf,
    table: BarTable,
}

fn versions(start: &'static str, n: usize) -> Versions {
    let dir = tempfile::tempdir().unwrap();
    let table = bars(start, n);
    let utc = dir.path().join("es_utc.csv");
    csv_format::write(&utc, &table).unwrap();
    let offset = dir.path().join("es_offset.csv");
    write_csv(&offset, &table, |ts| {
        let (wall, offset) = new_york(ts);
        format!("{wall}{offset}")
    });
    let local = dir.path().join("es_local.csv");
    write_csv(&local, &table, |ts| new_york(ts).0);
    Versions {
        _dir: dir,
        utc,
        offset,
        local,
        table,
    }
}

#[test]
fn offset_and_local_times_read_the_same_bars_as_utc_across_clock_changes() {
    // Spring forward (2024-03-10 07:00Z) and fall back (2024-11-03 06:00Z),
    // four hours of minute bars around each.
    for start in ["2024-03-10T05:00:00Z", "2024-11-03T04:00:00Z"] {
        let v = versions(start, 240);
        let from_utc = read(&source(&v.utc, None, None));
        assert_same_bars(start, &from_utc, &v.table);
        let from_offsets = read(&source(&v.offset, None, None));
        assert_same_bars(&format!("{start} offsets"), &from_offsets, &from_utc);
        // A zone given for a file whose times have offsets changes nothing.
        let with_zone = read(&source(&v.offset, None, Some("Asia/Tokyo")));
        assert_same_bars(&format!("{start} offsets, zone"), &with_zone, &from_utc);

        let refused = source(&v.local, None, None)
            .read(&ContractBook::builtin())
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("es_local.csv: row 1: column timestamp")
                && refused.contains("has no time zone")
                && refused.contains("--tz America/New_York"),
            "{refused}"
        );
        let from_local = read(&source(&v.local, None, Some(NEW_YORK)));
        assert_same_bars(&format!("{start} local"), &from_local, &from_utc);
    }
}

#[test]
fn inspect_says_how_timestamps_were_converted() {
    let v = versions("2024-11-03T04:00:00Z", 240);
    let book = ContractBook::builtin();
    let offsets = inspect::summarize(&v.offset, &book).unwrap();
    assert_eq!(
        offsets.timestamps,
        "240 rows with UTC offsets -04:00, -05:00, converted to UTC"
    );
    let local = inspect::summarize_source(&source(&v.local, None, Some(NEW_YORK)), &book).unwrap();
    assert!(
        local.timestamps.starts_with(
            "240 rows local time in America/New_York, converted to UTC (60 rows in an hour \
             repeated when clocks went back, read as its second pass)"
        ),
        "{}",
        local.timestamps
    );
    let utc = inspect::summarize(&v.utc, &book).unwrap();
    assert_eq!(utc.timestamps, "240 rows UTC");
}

#[test]
fn a_local_time_that_never_happened_is_refused_naming_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gap.csv");
    std::fs::write(
        &path,
        "timestamp,open,high,low,close,volume\n2024-03-10 01:59:00,1,1,1,1,1\n\
         2024-03-10 02:00:00,1,1,1,1,1\n",
    )
    .unwrap();
    let e = source(&path, None, Some(NEW_YORK))
        .read(&ContractBook::builtin())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "gap.csv: row 2: column timestamp: local time 2024-03-10 02:00:00 does not \
                    exist in America/New_York"
        ),
        "{e}"
    );
    let e = source(&path, None, Some("America/NewYork"))
        .read(&ContractBook::builtin())
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown time zone \"America/NewYork\""), "{e}");
}

#[test]
fn parquet_timestamps_with_a_zone_are_instants_and_without_one_take_the_given_zone() {
    for start in ["2024-03-10T05:00:00Z", "2024-11-03T04:00:00Z"] {
        let dir = tempfile::tempdir().unwrap();
        let table = bars(start, 240);
        // pandas' tz-aware index: UTC instants, the zone in the type.
        let aware = dir.path().join("aware.parquet");
        write_parquet(&aware, &table, table.ts.clone(), Some(NEW_YORK));
        assert_same_bars(start, &read(&source(&aware, None, None)), &table);
        // pandas' naive index of local times.
        let wall: Vec<i64> = table
            .ts
            .iter()
            .map(|&ts| timefmt::parse(&format!("{}Z", new_york(ts).0.replace(' ', "T"))).unwrap())
            .collect();
        let naive = dir.path().join("naive.parquet");
        write_parquet(&naive, &table, wall.clone(), None);
        assert_same_bars(
            &format!("{start} naive in New York"),
            &read(&source(&naive, None, Some(NEW_YORK))),
            &table,
        );
        // Without a zone a naive column is UTC, as it always was (in March
        // the wall clock only skips an hour, so it stays sorted).
        if start.starts_with("2024-03") {
            let (t, notes) = source(&naive, None, None)
                .read(&ContractBook::builtin())
                .unwrap();
            assert_eq!(t.ts, wall);
            assert!(notes.timestamps.describe().contains("taken as UTC"));
        }
    }
}

#[test]
fn a_symbol_given_on_the_asset_names_the_bars() {
    let dir = tempfile::tempdir().unwrap();
    let book = ContractBook::builtin();
    let table = bars("2024-03-04T14:30:00Z", 50);
    // A file that states no symbol (tli's own CSV files carry a symbol column).
    let yahoo = dir.path().join("ES_yahoo.csv");
    write_csv_as(&yahoo, "ts_event", &table, timefmt::format);

    // From the file name: refused, with naming the symbol offered first.
    let plain = BarSource::file(&yahoo);
    let (t, notes) = plain.read(&book).unwrap();
    assert_eq!(notes.symbol_origin, SymbolOrigin::FileName);
    let e = plain.contract(&t, &notes, &book).unwrap_err().to_string();
    let want = format!(
        "{}: no contract specification for symbol \"ES_yahoo\" (root \"ES_YAHOO\"). The symbol \
         is taken from the file's name; if the bars are of a listed contract, say which on the \
         asset: ES={}",
        yahoo.display(),
        yahoo.display()
    );
    assert!(e.starts_with(&want), "{e}\nwanted: {want}");
    assert!(e.contains("\"symbol\": \"ES\" (job spec)") && e.contains("contracts file"));

    let named = source(&yahoo, Some("ES"), None);
    let (t, notes) = named.read(&book).unwrap();
    assert_eq!(t.symbol, "ES");
    assert_eq!(notes.symbol_origin, SymbolOrigin::Asset);
    assert_eq!(named.contract(&t, &notes, &book).unwrap().root, "ES");
    assert_same_bars("named", &t, &table);

    // A symbol column: the same root or no contract yields; another contract is refused.
    let with_column = |symbol: &str| {
        let path = dir.path().join(format!("col_{symbol}.csv"));
        write_csv_as(&path, "ts_event,symbol", &table, |ts| {
            format!("{},{symbol}", timefmt::format(ts))
        });
        path
    };
    for (column, file_symbol) in [("ESH4", "ESH4"), ("SPY", "SPY")] {
        let (t, notes) = source(&with_column(column), Some("ES"), None)
            .read(&book)
            .unwrap();
        assert_eq!(t.symbol, "ES");
        assert_eq!(notes.file_symbol.as_deref(), Some(file_symbol));
    }
    let e = source(&with_column("NQ"), Some("ES"), None)
        .read(&book)
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with(
            "col_NQ.csv: the asset names its bars \"ES\", but the file's symbol column says they \
             are \"NQ\" (the NQ contract); give the symbol NQ on the asset, or none, or correct \
             the file"
        ),
        "{e}"
    );
    // A given symbol no contract knows is refused without the naming remedy.
    let unknown = source(&yahoo, Some("FDAX"), None);
    let (t, notes) = unknown.read(&book).unwrap();
    let e = unknown.contract(&t, &notes, &book).unwrap_err().to_string();
    assert!(
        e.contains("no contract specification for symbol \"FDAX\"")
            && !e.contains("say which")
            && e.contains("Add it in a contracts file"),
        "{e}"
    );
}

#[test]
fn a_yahoo_style_csv_reads_with_its_extra_columns_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ES=F.csv");
    std::fs::write(
        &path,
        "Date,Open,High,Low,Close,Adj Close,Volume\n\
         2024-01-02,4782.5,4798.25,4740.0,4757.75,4757.75,1620000\n\
         2024-01-03,4752.0,4760.5,4720.25,4723.0,4723.0,1840000\n\
         2024-01-04,4726.0,4746.0,4712.5,4719.5,4719.5,1570000\n",
    )
    .unwrap();
    // `ES=F.csv` is Yahoo's name for ES futures: on the command line write
    // `ES=./ES=F.csv` (the symbol, then the path).
    let parsed = BarSource::parse_arg(&format!("ES={}", path.display())).unwrap();
    assert_eq!(parsed.path, path);
    let (t, notes) = parsed.read(&ContractBook::builtin()).unwrap();
    assert_eq!(t.symbol, "ES");
    assert_eq!(t.len(), 3);
    assert_eq!(t.close, vec![4757.75, 4723.0, 4719.5]);
    assert_eq!(notes.timestamps.dates, 3);
}

#[test]
fn a_pandas_index_saved_without_a_name_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("unnamed.csv");
    std::fs::write(&csv, ",open,high,low,close,volume\n2024-01-02,1,1,1,1,1\n").unwrap();
    let e = tli_data::read_bars(&csv).unwrap_err().to_string();
    assert!(
        e.contains("missing required column") && e.contains("df.index.name = \"ts_event\""),
        "{e}"
    );
    let table = bars("2024-03-04T14:30:00Z", 3);
    let parquet = dir.path().join("unnamed.parquet");
    write_parquet_named(
        &parquet,
        "__index_level_0__",
        &table,
        table.ts.clone(),
        Some("UTC"),
    );
    let e = tli_data::read_bars(&parquet).unwrap_err().to_string();
    assert!(
        e.contains("__index_level_0__ column is a pandas index saved without a name")
            && e.contains("df.index.name = \"ts_event\""),
        "{e}"
    );
}

#[test]
fn a_yfinance_intraday_export_with_a_datetime_column_reads() {
    // yfinance names an intraday index `Datetime` and pandas writes it with
    // the exchange's offset.
    let dir = tempfile::tempdir().unwrap();
    let table = bars("2024-03-04T14:30:00Z", 30);
    let utc = dir.path().join("utc.csv");
    csv_format::write(&utc, &table).unwrap();
    let yf = dir.path().join("es_yf.csv");
    write_csv_as(&yf, "Datetime", &table, |ts| {
        let (wall, offset) = new_york(ts);
        format!("{wall}{offset}")
    });
    let from_utc = read(&source(&utc, Some("ES"), None));
    let from_yf = read(&source(&yf, Some("ES"), None));
    assert_same_bars("yfinance Datetime", &from_yf, &from_utc);
}

#[test]
fn a_source_cut_by_start_and_end_reads_only_those_bars_and_an_empty_cut_is_refused() {
    let v = versions("2024-03-10T05:00:00Z", 240);
    let all = read(&source(&v.utc, None, None));
    let (start, end) = (all.ts[10] + 1, all.ts[100]);
    let cut = read(&BarSource {
        start: Some(start),
        end: Some(end),
        ..source(&v.utc, None, None)
    });
    // From the first bar at or after start to the last at or before end, both inclusive.
    assert_eq!(cut.ts, all.ts[11..=100].to_vec());
    assert_eq!(cut.close, all.close[11..=100].to_vec());
    let open_ended = read(&BarSource {
        start: Some(all.ts[200]),
        ..source(&v.utc, None, None)
    });
    assert_eq!(open_ended.ts, all.ts[200..].to_vec());
    let after = BarSource {
        start: Some(all.ts[239] + 1),
        ..source(&v.utc, None, None)
    };
    let e = after
        .read(&ContractBook::builtin())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no bar lies between") && e.contains("the file's bars run from 2024-03-10"),
        "{e}"
    );
    let backwards = BarSource {
        start: Some(end),
        end: Some(start),
        ..source(&v.utc, None, None)
    };
    assert!(backwards
        .check()
        .unwrap_err()
        .to_string()
        .contains("is after end"));
}
