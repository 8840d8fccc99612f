//! Hostile market-data files, generated (the reliability suite, docs/reliability.md): valid DBN (plain and
//! zstd), Parquet and CSV files are mutated at random — bytes flipped, set,
//! inserted, deleted, duplicated, the file cut, hostile numbers written over
//! header fields, Parquet footer fields set to billions of rows or absurd
//! sizes and offsets, CSV fields replaced with NaN, infinities, negative
//! numbers and impossible dates, lines swapped, fields megabytes long,
//! headers with hundreds of thousands of columns, other encodings — and read
//! the way the host reads an asset ([`tli_data::read_bars`]).
//!
//! Every case must: not panic; answer within [`harness::TIME_LIMIT`]; hold at
//! most [`harness::memory_bound`] bytes at its peak (64 × the file + 64 MiB,
//! counted by this binary's allocator); if refused, say so in a message that
//! names the file and the problem; if accepted, give a table that passes
//! `BarTable::validate` and that the feature pipeline takes without a panic.
//! Files with one planted bad row must be refused naming that row.
//!
//! `PROPTEST_CASES` sets the cases per property (48 here; the long run,
//! `scripts/fuzz-inputs.sh`, uses thousands). Each property prints a
//! `hostile-inputs …` summary line (see `--nocapture`). With
//! `HOSTILE_LAST_CASE_DIR` set, each property keeps its case in progress in
//! a file there, for a run that was killed. A read holding more than 4 GiB,
//! or eight hung reads at once, abort the binary rather than the machine.
//! The defects these properties found are pinned by the plain tests at the end.

mod bases;
#[path = "../data/fixtures.rs"]
mod fixtures;
mod harness;
mod mutate;

use harness::{read_checked, Counting, Outcome, Stats};
use parquet::file::metadata::{
    ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter, RowGroupMetaData,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::Strategy;
use proptest::test_runner::{TestCaseError, TestRunner};
use std::path::{Path, PathBuf};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs one property over `strategy`, writing each case's bytes to a file
/// named `name` in a fresh directory, and prints its summary line.
fn property<S: Strategy>(
    name: &str,
    strategy: S,
    bytes_of: impl Fn(&S::Value) -> (String, Vec<u8>),
    check: impl Fn(&Path, &S::Value, Outcome) -> Result<(), TestCaseError>,
) {
    harness::quiet_reader_panics();
    let dir = tempfile::tempdir().expect("temp dir");
    let stats = Stats::default();
    // For post-mortems of a run that was killed (out of memory, say): each
    // property's case in progress, overwritten case by case.
    let last_case = std::env::var_os("HOSTILE_LAST_CASE_DIR")
        .map(|dir| PathBuf::from(dir).join(format!("{name}.txt")));
    let result = TestRunner::new(harness::config()).run(&strategy, |case| {
        if let Some(file) = &last_case {
            let _ = std::fs::write(file, format!("{case:#?}"));
        }
        let (file_name, bytes) = bytes_of(&case);
        let path = dir.path().join(file_name);
        std::fs::write(&path, &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let outcome = read_checked(&path, &stats)?;
        check(&path, &case, outcome)
    });
    stats.print(name);
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

/// Any outcome that passed the harness's checks is fine.
fn any_outcome<V>(_: &Path, _: &V, _: Outcome) -> Result<(), TestCaseError> {
    Ok(())
}

#[test]
fn mutated_csv_files() {
    let bases = bases::bases("csv");
    let strategy = (any::<Index>(), mutate::text_edits());
    property(
        "csv",
        strategy,
        |(base, edits)| {
            let mut bytes = base.get(&bases).clone();
            mutate::apply_text(&mut bytes, edits);
            ("bars.csv".into(), bytes)
        },
        any_outcome,
    );
}

#[test]
fn mutated_parquet_files() {
    let bases = bases::bases("parquet");
    property(
        "parquet",
        (any::<Index>(), mutate::edits()),
        |(base, edits)| {
            let mut bytes = base.get(&bases).clone();
            mutate::apply(&mut bytes, edits);
            ("bars.parquet".into(), bytes)
        },
        any_outcome,
    );
}

/// A footer field of the first row group set to a hostile value.
#[derive(Clone, Debug)]
enum FooterField {
    RowCount,
    /// Of column `0..6`:
    ValueCount(usize),
    CompressedSize(usize),
    UncompressedSize(usize),
    DataPageOffset(usize),
}

fn footer_field() -> impl Strategy<Value = FooterField> {
    prop_oneof![
        2 => Just(FooterField::RowCount),
        1 => (0usize..6).prop_map(FooterField::ValueCount),
        1 => (0usize..6).prop_map(FooterField::CompressedSize),
        1 => (0usize..6).prop_map(FooterField::UncompressedSize),
        1 => (0usize..6).prop_map(FooterField::DataPageOffset),
    ]
}

/// `file` with its footer rewritten so that `field` says `value`.
fn with_footer_field(file: &[u8], field: &FooterField, value: i64) -> Vec<u8> {
    let n = file.len();
    let length = u32::from_le_bytes([file[n - 8], file[n - 7], file[n - 6], file[n - 5]]);
    let start = n - 8 - length as usize;
    let metadata = ParquetMetaDataReader::decode_metadata(&file[start..n - 8]).expect("footer");
    let mut groups: Vec<RowGroupMetaData> = metadata.row_groups().to_vec();
    let group = groups[0].clone();
    let mut columns = group.columns().to_vec();
    let column = |k: usize| columns[k].clone().into_builder();
    groups[0] = match field {
        FooterField::RowCount => group.into_builder().set_num_rows(value),
        FooterField::ValueCount(k) => {
            columns[*k] = column(*k).set_num_values(value).build().expect("column");
            group.into_builder().set_column_metadata(columns)
        }
        FooterField::CompressedSize(k) => {
            columns[*k] = column(*k)
                .set_total_compressed_size(value)
                .build()
                .expect("column");
            group.into_builder().set_column_metadata(columns)
        }
        FooterField::UncompressedSize(k) => {
            columns[*k] = column(*k)
                .set_total_uncompressed_size(value)
                .build()
                .expect("column");
            group.into_builder().set_column_metadata(columns)
        }
        FooterField::DataPageOffset(k) => {
            columns[*k] = column(*k)
                .set_data_page_offset(value)
                .build()
                .expect("column");
            group.into_builder().set_column_metadata(columns)
        }
    }
    .build()
    .expect("row group");
    let rewritten = ParquetMetaData::new(metadata.file_metadata().clone(), groups);
    let mut out = file[..start].to_vec();
    ParquetMetaDataWriter::new(&mut out, &rewritten)
        .finish()
        .expect("footer written");
    out
}

#[test]
fn parquet_footers_claiming_billions() {
    let bases = bases::bases("parquet");
    let values = prop::sample::select(
        mutate::HOSTILE_NUMBERS
            .iter()
            .map(|&v| v as i64)
            .chain([-1, i64::MIN, 4_000_000_000])
            .collect::<Vec<_>>(),
    );
    property(
        "parquet-footer",
        (any::<Index>(), footer_field(), values),
        |(base, field, value)| {
            let base = base.get(&bases[..3]); // the crate's own files: one row group, six columns
            (
                "bars.parquet".into(),
                with_footer_field(base, field, *value),
            )
        },
        any_outcome,
    );
}

#[test]
fn mutated_dbn_streams() {
    let bases = bases::bases("dbn");
    property(
        "dbn",
        (any::<Index>(), mutate::edits(), any::<bool>()),
        |(base, edits, compressed)| {
            let mut bytes = base.get(&bases).clone();
            mutate::apply(&mut bytes, edits);
            if *compressed {
                ("bars.dbn.zst".into(), bases::zstd(&bytes))
            } else {
                ("bars.dbn".into(), bytes)
            }
        },
        any_outcome,
    );
}

#[test]
fn dbn_metadata_claiming_billions() {
    let bases = bases::bases("dbn");
    let strategy = (
        any::<Index>(),
        0u16..160, // the prelude and the fixed metadata fields
        prop::sample::select(vec![2u8, 4, 8]),
        prop::sample::select(mutate::HOSTILE_NUMBERS.to_vec()),
        any::<bool>(),
    );
    property(
        "dbn-metadata",
        strategy,
        |(base, at, width, value, compressed)| {
            let mut bytes = base.get(&bases).clone();
            let at = mutate::Spot::Head(*at);
            let (width, value) = (*width, *value);
            mutate::apply(&mut bytes, &[mutate::Edit::Number { at, width, value }]);
            if *compressed {
                ("bars.dbn.zst".into(), bases::zstd(&bytes))
            } else {
                ("bars.dbn".into(), bytes)
            }
        },
        any_outcome,
    );
}

#[test]
fn mutated_zstd_frames() {
    let bases: Vec<Vec<u8>> = bases::bases("dbn").iter().map(|b| bases::zstd(b)).collect();
    property(
        "dbn.zst",
        (any::<Index>(), mutate::edits()),
        |(base, edits)| {
            let mut bytes = base.get(&bases).clone();
            mutate::apply(&mut bytes, edits);
            ("bars.dbn.zst".into(), bytes)
        },
        any_outcome,
    );
}

#[test]
fn planted_bad_rows_are_refused_naming_the_row() {
    let formats = prop::sample::select(vec!["csv", "parquet", "dbn", "dbn.zst"]);
    property(
        "planted-rows",
        (bases::defect(), formats),
        |((defect, row), format)| {
            let bytes = match *format {
                "csv" => bases::planted_csv(defect, *row),
                "parquet" => bases::planted_parquet(defect, *row),
                // A defect DBN cannot hold is planted as a repeated timestamp.
                _ => bases::planted_dbn(defect, *row).unwrap_or_else(|| {
                    bases::planted_dbn(&bases::Defect::RepeatedTime, *row).expect("dbn")
                }),
            };
            let bytes = if *format == "dbn.zst" {
                bases::zstd(&bytes)
            } else {
                bytes
            };
            (format!("planted.{format}"), bytes)
        },
        |path, ((defect, row), _), outcome| match outcome {
            Outcome::Read { bars } => Err(TestCaseError::fail(format!(
                "{}: {defect:?} at row {} was accepted ({bars} bars)",
                path.display(),
                row + 1
            ))),
            Outcome::Refused(message) if message.contains(&format!("row {}:", row + 1)) => Ok(()),
            Outcome::Refused(message) => Err(TestCaseError::fail(format!(
                "{defect:?} at row {}: the refusal names another row: {message}",
                row + 1
            ))),
        },
    );
}

// ----- the defects found, pinned ------------------------------------------------------

/// One guarded read of `bytes` as `name`: the harness's checks must pass;
/// returns the outcome.
fn read_once(name: &str, bytes: &[u8]) -> Outcome {
    let dir = tempfile::tempdir().expect("temp dir");
    let path: PathBuf = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write");
    match read_checked(&path, &Stats::default()) {
        Ok(outcome) => outcome,
        Err(e) => panic!("{e}"),
    }
}

fn refused(outcome: Outcome) -> String {
    match outcome {
        Outcome::Refused(message) => message,
        Outcome::Read { bars } => panic!("accepted ({bars} bars)"),
    }
}

/// The base file `bases::bases(extension)[2]` (600 minute bars).
fn base_600(extension: &str) -> Vec<u8> {
    bases::written(&format!("bars.{extension}"), &bases::minute_bars(600))
}

/// Found by `mutated_csv_files`: a header field megabytes long was quoted
/// whole in the refusal ("missing required column …; the header has: 7777…").
#[test]
fn csv_refusals_quote_long_text_briefly() {
    let long = "7".repeat(1 << 20);
    let text = format!("{long},open\n1,2\n");
    let message = refused(read_once("bars.csv", text.as_bytes()));
    assert!(message.contains("missing required column"), "{message}");
    assert!(message.contains("1048576 bytes"), "{message}");
    let junk = "x".repeat(1 << 20);
    let text = format!("ts_event,open,high,low,close,volume\n2024-01-02,{junk},1,1,1,1\n");
    let message = refused(read_once("bars.csv", text.as_bytes()));
    assert!(
        message.contains("row 1: column open: cannot parse"),
        "{message}"
    );
}

/// Found by review, pinned here: the duplicate-column check compared each
/// name with every name before it, so 300 000 columns took minutes.
#[test]
fn csv_header_with_300k_columns_answers_in_time() {
    let mut text = String::from("ts_event,open,high,low,close,volume");
    for k in 0..300_000 {
        text.push_str(&format!(",c{k}"));
    }
    text.push_str("\n2024-01-02,1,1,1,1,1\n");
    let message = refused(read_once("wide.csv", text.as_bytes()));
    assert!(
        message.contains("row 1: has 6 fields but the header has 300006"),
        "{message}"
    );
}

/// Found by review of the far dates `mutated_csv_files` writes: years past
/// 2262 (and before 1677) wrapped around to other timestamps instead of
/// being refused.
#[test]
fn csv_dates_outside_i64_nanoseconds_are_refused() {
    for date in ["9999-12-31", "0000-01-01", "2262-04-12T00:00:00Z"] {
        let text = format!("ts_event,open,high,low,close,volume\n{date},1,1,1,1,1\n");
        let message = refused(read_once("bars.csv", text.as_bytes()));
        assert!(message.contains("row 1: column ts_event"), "{message}");
        assert!(message.contains("outside the range"), "{message}");
    }
}

/// Found by `parquet_footers_claiming_billions`: a negative column size made
/// the parquet crate panic ("column start and length should not be negative").
#[test]
fn parquet_footer_with_negative_size_is_refused() {
    let base = base_600("parquet");
    for field in [
        FooterField::CompressedSize(0),
        FooterField::UncompressedSize(2),
    ] {
        let bytes = with_footer_field(&base, &field, -1);
        let message = refused(read_once("bars.parquet", &bytes));
        assert!(
            message.contains("damaged Parquet footer: row group 0, column"),
            "{message}"
        );
    }
}

/// Found by `parquet_footers_claiming_billions`: the reader reserved room for
/// the rows the footer claims (2^40 rows: terabytes; the process aborted).
#[test]
fn parquet_footer_claiming_2_pow_40_rows_is_bounded() {
    let bytes = with_footer_field(&base_600("parquet"), &FooterField::RowCount, 1 << 40);
    let _ = read_once("bars.parquet", &bytes); // the harness checks the peak
}

/// Found by `mutated_parquet_files`: ten 0xff bytes in a page make the
/// parquet crate panic ("Num of bytes exceed MAX_VLQ_BYTE_LEN (10)"); the
/// reader turns that into a refusal.
#[test]
fn parquet_decoder_panic_is_a_refusal() {
    let mut bytes = base_600("parquet");
    // The minimal failing case: the run at Index(6703981060967016558).
    let at = (((bytes.len() as u128 + 1) * 6_703_981_060_967_016_558u128) >> 64) as usize;
    bytes.splice(at..at, [0xff; 10]);
    let message = refused(read_once("bars.parquet", &bytes));
    assert!(message.contains("the Parquet decoder failed"), "{message}");
}

/// Found by `mutated_dbn_streams`: a record whose length byte says 16 bytes
/// made the dbn crate panic ("Malformed `OhlcvMsg` record").
#[test]
fn dbn_record_too_short_for_its_type_is_refused() {
    let mut bytes = base_600("dbn");
    let metadata = 8 + u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
    bytes[metadata + 56 * 3] = 4; // the fourth record: 4 × 4 = 16 bytes
    let message = refused(read_once("bars.dbn", &bytes));
    assert!(
        message.contains("row 4: record is 16 bytes long, too short"),
        "{message}"
    );
}

/// Found by review, pinned here (and generated by `dbn_metadata_claiming_billions`):
/// the dbn decoder allocates the metadata length the prelude claims, up to 4 GiB.
#[test]
fn dbn_metadata_length_is_believed_only_for_bytes_present() {
    let mut bytes = base_600("dbn");
    bytes[4..8].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let message = refused(read_once("bars.dbn", &bytes));
    assert!(
        message.contains("the DBN metadata claims 4294967280 bytes"),
        "{message}"
    );
    let message = refused(read_once("bars.dbn.zst", &bases::zstd(&bytes)));
    assert!(
        message.contains("the DBN metadata claims 4294967280 bytes"),
        "{message}"
    );
}

/// Found by review, pinned here: the parent roll looked at every contract on
/// every day, so 100 000 one-bar contracts took minutes.
#[test]
fn dbn_parent_file_with_100k_contracts_answers_in_time() {
    use dbn::encode::{DbnEncoder, EncodeRecord};
    let metadata = dbn::Metadata::builder()
        .dataset("TLI.LOCAL")
        .schema(Some(dbn::Schema::Ohlcv1D))
        .start(0)
        .stype_in(Some(dbn::SType::Parent))
        .stype_out(dbn::SType::InstrumentId)
        .symbols(vec!["ES.FUT".into()])
        .build();
    let day = 86_400_000_000_000u64;
    let bars: Vec<dbn::OhlcvMsg> = (0..100_000u32)
        .map(|i| dbn::OhlcvMsg {
            hd: dbn::RecordHeader::new::<dbn::OhlcvMsg>(
                dbn::rtype::OHLCV_1D,
                0,
                i + 1,
                u64::from(i) * day,
            ),
            open: 100_000_000_000,
            high: 101_000_000_000,
            low: 99_000_000_000,
            close: 100_000_000_000,
            volume: 1,
        })
        .collect();
    let mut bytes = Vec::new();
    DbnEncoder::new(&mut bytes, &metadata)
        .and_then(|mut encoder| encoder.encode_records(&bars))
        .expect("encode");
    // Each day's front contract is the previous day's busiest, which has no
    // bars on the day itself: one bar comes out. The point is that it does.
    match read_once("parent.dbn", &bytes) {
        Outcome::Read { bars } => assert_eq!(bars, 1),
        Outcome::Refused(message) => panic!("{message}"),
    }
}
