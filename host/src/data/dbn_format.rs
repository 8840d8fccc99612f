//! OHLCV bars in Databento Binary Encoding (DBN), plain or zstd-compressed.
//!
//! **Written** by [`write`] (one symbol) and [`write_parent`] (several
//! contracts under a parent symbol such as `ES.FUT`, used by the synthetic
//! generator): DBN version 3, dataset `TLI.LOCAL`, the OHLCV schema of the
//! table's interval, prices as 1e-9 fixed point (`(p * 1e9).round()`; a
//! price with finer digits than 1e-9 is rounded, every other price reads back
//! bit-identical), zstd-compressed when the file name ends in `.zst`. The symbol mappings map
//! each raw symbol to its instrument id (1, 2, …) over the dates it has bars
//! (end date exclusive).
//!
//! **Read** by [`read`]:
//! * the schema must be `ohlcv-1s`, `ohlcv-1m`, `ohlcv-1h` or `ohlcv-1d`; it
//!   gives the bar interval. Every record must be a bar of that schema;
//!   undefined prices (`UNDEF_PRICE`) and timestamps are errors naming the
//!   record (`row` = 1-based record index).
//! * A file that ends inside a record or inside a zstd frame (a truncated
//!   download) is an error, not a shorter table. (A plain file cut exactly at
//!   a record boundary cannot be told apart from a complete one.)
//! * **One instrument**: the table is its bars in file order; the symbol is
//!   the instrument's raw symbol from the symbol mappings, else the
//!   metadata's first symbol, else the file name up to its first `.`.
//! * **Several instruments** are only accepted under parent symbology
//!   (`stype_in` = parent, one parent symbol such as `ES.FUT`); they are
//!   rolled into one front-contract series named after the parent:
//!   - instruments whose symbol contains `-` (calendar spreads such as
//!     `ESH4-ESM4`) are ignored;
//!   - each contract's bars must have strictly increasing timestamps and
//!     sane prices (checked per record);
//!   - for every UTC calendar day that has bars, the active contract is the
//!     one with the highest total volume on the *previous* day that had bars
//!     (no look-ahead; the first day uses its own volume; ties keep the
//!     active contract, then the lower instrument id), never one that was
//!     already rolled away from; the day's bars are the active contract's
//!     bars of that day (a day on which it has none contributes nothing);
//!   - each switch is recorded as a [`Roll`]: `ts` = first bar taken from the
//!     new contract, `ratio` = new close / old close on the last timestamp
//!     before the roll at which both traded (1.0 if there is none);
//!   - every bar before a roll has its open, high, low and close multiplied
//!     by the ratios of all later rolls (ratio back-adjustment), so a log
//!     return across a roll equals the new contract's own log return.
//!
//!   Databento's own parent-symbology files map the parent, not each
//!   contract, to the instrument ids; there every contract is named after
//!   the parent and spreads cannot be recognized by name.
//!
//! The result is checked with [`BarTable::validate`].

use super::csv_format::symbol_from_file_name;
use super::timefmt::{self, NANOS_PER_DAY};
use super::{BarInterval, BarTable, DataError, Roll};
use dbn::decode::{DbnDecoder, DbnMetadata, DecodeRecordRef, DynReader};
use dbn::encode::{DbnEncoder, DynWriter, EncodeRecord};
use dbn::{
    rtype, Compression, MappingInterval, Metadata, OhlcvMsg, Record, RecordHeader, SType, Schema,
    SymbolMapping, TsSymbolMap, VersionUpgradePolicy, FIXED_PRICE_SCALE, UNDEF_PRICE,
    UNDEF_TIMESTAMP,
};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read};
use std::num::NonZeroU64;
use std::path::Path;

/// The dataset code written into files made here.
pub const DATASET: &str = "TLI.LOCAL";

const SCALE: f64 = FIXED_PRICE_SCALE as f64;

/// One contract's bars for [`write_parent`].
#[derive(Clone, Debug)]
pub struct ContractBars {
    /// The contract's own symbol, e.g. `ESH4` (or `ESH4-ESM4` for a spread).
    pub raw_symbol: String,
    pub table: BarTable,
}

/// Writes one symbol's bars (instrument id 1, raw symbology). The table is
/// validated first.
pub fn write(path: &Path, table: &BarTable) -> Result<(), DataError> {
    table.validate(path)?;
    let (schema, bar_rtype) = schema_of(table.interval);
    let mut records = Vec::with_capacity(table.len());
    push_records(path, table, None, 1, bar_rtype, &mut records)?;
    let (first, last) = (table.ts[0], table.ts[table.len() - 1]);
    let mappings = vec![SymbolMapping {
        raw_symbol: table.symbol.clone(),
        intervals: vec![mapping_interval(path, first, last, 1)?],
    }];
    let metadata = metadata(
        path,
        schema,
        SType::RawSymbol,
        &table.symbol,
        mappings,
        first,
        last + table.interval.nanos(),
    )?;
    encode(path, &metadata, &records)
}

/// Writes several contracts under the parent symbol `parent` (e.g. `ES.FUT`):
/// instrument ids 1, 2, … in the order given, parent symbology, one symbol
/// mapping per contract over its dates, records merged in timestamp order
/// (ties by instrument id). Each contract must have `interval` bars with
/// strictly increasing timestamps and finite prices (spreads may be ≤ 0).
pub fn write_parent(
    path: &Path,
    parent: &str,
    interval: BarInterval,
    contracts: &[ContractBars],
) -> Result<(), DataError> {
    if contracts.is_empty() {
        return Err(DataError::bad_file(
            path,
            "write_parent was given no contracts",
        ));
    }
    let (schema, bar_rtype) = schema_of(interval);
    let mut records = Vec::with_capacity(contracts.iter().map(|c| c.table.len()).sum());
    let mut mappings = Vec::with_capacity(contracts.len());
    let (mut start, mut end) = (i64::MAX, i64::MIN);
    for (k, contract) in contracts.iter().enumerate() {
        let name = &contract.raw_symbol;
        let table = &contract.table;
        if name.is_empty() || contracts[..k].iter().any(|c| &c.raw_symbol == name) {
            return Err(DataError::bad_file(
                path,
                format!("contract symbol {name:?} is empty or given twice"),
            ));
        }
        if table.interval != interval {
            return Err(DataError::bad_file(
                path,
                format!(
                    "contract {name} has {} bars, not {}",
                    table.interval.name(),
                    interval.name()
                ),
            ));
        }
        let lengths = [
            table.open.len(),
            table.high.len(),
            table.low.len(),
            table.close.len(),
            table.volume.len(),
        ];
        if table.is_empty() || lengths.iter().any(|&n| n != table.len()) {
            return Err(DataError::bad_file(
                path,
                format!("contract {name} has no bars or columns of different lengths"),
            ));
        }
        if let Some(i) = (1..table.len()).find(|&i| table.ts[i] <= table.ts[i - 1]) {
            return Err(DataError::bad_row(
                path,
                i + 1,
                format!(
                    "contract {name}: timestamp {} is not after the previous bar's",
                    timefmt::format(table.ts[i])
                ),
            ));
        }
        let id =
            u32::try_from(k + 1).map_err(|_| DataError::bad_file(path, "too many contracts"))?;
        push_records(path, table, Some(name), id, bar_rtype, &mut records)?;
        let (first, last) = (table.ts[0], table.ts[table.len() - 1]);
        mappings.push(SymbolMapping {
            raw_symbol: name.clone(),
            intervals: vec![mapping_interval(path, first, last, id)?],
        });
        start = start.min(first);
        end = end.max(last + interval.nanos());
    }
    records.sort_by_key(|r| (r.hd.ts_event, r.hd.instrument_id));
    let metadata = metadata(path, schema, SType::Parent, parent, mappings, start, end)?;
    encode(path, &metadata, &records)
}

/// Reads a DBN file of OHLCV bars (see the module docs).
pub fn read(path: &Path) -> Result<BarTable, DataError> {
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let file_bytes = file.metadata().map_err(|e| DataError::io(path, e))?.len();
    let reader = DynReader::inferred_with_buffer(BufReader::with_capacity(1 << 16, file))
        .map_err(|e| DataError::bad_file(path, format!("cannot be read as DBN: {e}")))?;
    // Room for the records the file probably holds (OHLCV records are 56
    // bytes; zstd shrinks bars about 4x), so the columns rarely regrow.
    let expansion = if reader.is_compressed() { 4 } else { 1 };
    let estimate = (file_bytes.saturating_mul(expansion) / 56).min(1 << 26) as usize;
    let mut decoder =
        DbnDecoder::with_upgrade_policy(Watched::new(reader), VersionUpgradePolicy::UpgradeToV3)
            .map_err(|e| DataError::bad_file(path, format!("is not a readable DBN file: {e}")))?;
    let metadata = decoder.metadata().clone();
    let schema = metadata
        .schema
        .ok_or_else(|| DataError::bad_file(path, "holds mixed schemas, not OHLCV bars"))?;
    let (interval, bar_rtype) = interval_of(schema).ok_or_else(|| {
        DataError::bad_file(
            path,
            format!(
                "holds schema {schema}, not OHLCV bars (accepted: ohlcv-1s, ohlcv-1m, ohlcv-1h, ohlcv-1d)"
            ),
        )
    })?;

    let mut bars = RawBars::with_capacity(estimate);
    let mut record_bytes: u64 = 0;
    loop {
        let row = bars.len() + 1;
        let record = match decoder.decode_record_ref() {
            Ok(Some(record)) => record,
            Ok(None) => break,
            Err(e) => {
                return Err(DataError::bad_row(
                    path,
                    row,
                    format!("record cannot be decoded: {e}"),
                ))
            }
        };
        record_bytes += record.record_size() as u64;
        let header = record.header();
        let bar = match record.get::<OhlcvMsg>() {
            Some(bar) if header.rtype == bar_rtype || header.rtype == rtype::OHLCV_DEPRECATED => {
                bar
            }
            _ => {
                return Err(DataError::bad_row(
                    path,
                    row,
                    format!("record type {:#04x} is not an {schema} bar", header.rtype),
                ))
            }
        };
        bars.push(path, row, bar)?;
    }
    let source = decoder.get_ref();
    if let Some(e) = &source.failure {
        return Err(DataError::bad_row(
            path,
            bars.len() + 1,
            format!(
                "the file ends early or cannot be read after {} complete records (truncated?): {e}",
                bars.len()
            ),
        ));
    }
    let expected = source.metadata_bytes() + record_bytes;
    if source.bytes != expected {
        return Err(DataError::bad_row(
            path,
            bars.len() + 1,
            format!(
                "the file ends inside a record: {} byte(s) after {} complete records (truncated?)",
                source.bytes.abs_diff(expected),
                bars.len()
            ),
        ));
    }
    if bars.is_empty() {
        return Err(DataError::bad_file(path, "holds no bars"));
    }

    let symbols = if metadata.mappings.is_empty() {
        TsSymbolMap::new()
    } else {
        TsSymbolMap::from_metadata(&metadata).map_err(|e| {
            DataError::bad_file(path, format!("symbol mappings cannot be read: {e}"))
        })?
    };
    let first_id = bars.id[0];
    if bars.id.iter().all(|&id| id == first_id) {
        let symbol = symbols
            .get_for_ts(bars.ts[0] as u64, first_id)
            .or_else(|| metadata.symbols.first())
            .filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| symbol_from_file_name(path));
        let table = bars.into_table(symbol, interval);
        table.validate(path)?;
        return Ok(table);
    }
    roll_to_front(path, &metadata, &bars, &symbols, interval)
}

/// The schema and record type of an interval.
fn schema_of(interval: BarInterval) -> (Schema, u8) {
    match interval {
        BarInterval::Second => (Schema::Ohlcv1S, rtype::OHLCV_1S),
        BarInterval::Minute => (Schema::Ohlcv1M, rtype::OHLCV_1M),
        BarInterval::Hour => (Schema::Ohlcv1H, rtype::OHLCV_1H),
        BarInterval::Day => (Schema::Ohlcv1D, rtype::OHLCV_1D),
    }
}

/// The interval and record type of an OHLCV schema; `None` for other schemas.
fn interval_of(schema: Schema) -> Option<(BarInterval, u8)> {
    match schema {
        Schema::Ohlcv1S => Some((BarInterval::Second, rtype::OHLCV_1S)),
        Schema::Ohlcv1M => Some((BarInterval::Minute, rtype::OHLCV_1M)),
        Schema::Ohlcv1H => Some((BarInterval::Hour, rtype::OHLCV_1H)),
        Schema::Ohlcv1D => Some((BarInterval::Day, rtype::OHLCV_1D)),
        _ => None,
    }
}

/// A price as 1e-9 fixed point.
fn to_fixed(path: &Path, row: usize, what: &str, price: f64) -> Result<i64, DataError> {
    let fixed = (price * SCALE).round();
    // i64::MAX is UNDEF_PRICE; stay well inside the range.
    if !fixed.is_finite() || fixed.abs() >= 9.2e18 {
        return Err(DataError::bad_row(
            path,
            row,
            format!("{what} {price} cannot be stored as a 1e-9 fixed-point DBN price"),
        ));
    }
    Ok(fixed as i64)
}

/// Appends `table`'s bars as OHLCV records of instrument `id`.
fn push_records(
    path: &Path,
    table: &BarTable,
    contract: Option<&str>,
    id: u32,
    bar_rtype: u8,
    out: &mut Vec<OhlcvMsg>,
) -> Result<(), DataError> {
    let label = |what: &str| match contract {
        Some(name) => format!("contract {name}: {what}"),
        None => what.to_string(),
    };
    for i in 0..table.len() {
        let row = i + 1;
        let ts = u64::try_from(table.ts[i]).map_err(|_| {
            DataError::bad_row(
                path,
                row,
                label("timestamps before 1970 cannot be stored in DBN"),
            )
        })?;
        out.push(OhlcvMsg {
            hd: RecordHeader::new::<OhlcvMsg>(bar_rtype, 0, id, ts),
            open: to_fixed(path, row, &label("open"), table.open[i])?,
            high: to_fixed(path, row, &label("high"), table.high[i])?,
            low: to_fixed(path, row, &label("low"), table.low[i])?,
            close: to_fixed(path, row, &label("close"), table.close[i])?,
            volume: table.volume[i],
        });
    }
    Ok(())
}

/// The UTC date of a timestamp as a `time::Date`.
fn date_of(path: &Path, ts: i64) -> Result<time::Date, DataError> {
    const UNIX_EPOCH_JULIAN_DAY: i64 = 2_440_588;
    i32::try_from(ts.div_euclid(NANOS_PER_DAY) + UNIX_EPOCH_JULIAN_DAY)
        .ok()
        .and_then(|jd| time::Date::from_julian_day(jd).ok())
        .ok_or_else(|| {
            DataError::bad_file(path, format!("timestamp {ts} is out of the date range"))
        })
}

/// The mapping to instrument `id` from the date of `first` to the day after
/// the date of `last`.
fn mapping_interval(
    path: &Path,
    first: i64,
    last: i64,
    id: u32,
) -> Result<MappingInterval, DataError> {
    Ok(MappingInterval {
        start_date: date_of(path, first)?,
        end_date: date_of(path, last + NANOS_PER_DAY)?,
        symbol: id.to_string(),
    })
}

fn metadata(
    path: &Path,
    schema: Schema,
    stype_in: SType,
    symbol: &str,
    mappings: Vec<SymbolMapping>,
    start: i64,
    end: i64,
) -> Result<Metadata, DataError> {
    let start = u64::try_from(start)
        .map_err(|_| DataError::bad_file(path, "timestamps before 1970 cannot be stored in DBN"))?;
    let end = u64::try_from(end).ok().and_then(NonZeroU64::new);
    Ok(Metadata::builder()
        .dataset(DATASET)
        .schema(Some(schema))
        .start(start)
        .end(end)
        .stype_in(Some(stype_in))
        .stype_out(SType::InstrumentId)
        .symbols(vec![symbol.to_string()])
        .mappings(mappings)
        .build())
}

/// Writes metadata and records, zstd-compressed when the name ends in `.zst`.
fn encode(path: &Path, metadata: &Metadata, records: &[OhlcvMsg]) -> Result<(), DataError> {
    let zstd = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase().ends_with(".zst"))
        .unwrap_or(false);
    let failed =
        |e: dbn::Error| DataError::bad_file(path, format!("cannot be written as DBN: {e}"));
    let file = File::create(path).map_err(|e| DataError::io(path, e))?;
    let compression = if zstd {
        Compression::Zstd
    } else {
        Compression::None
    };
    let mut out =
        DynWriter::new(BufWriter::with_capacity(1 << 16, file), compression).map_err(failed)?;
    {
        let mut encoder = DbnEncoder::new(&mut out, metadata).map_err(failed)?;
        encoder.encode_records(records).map_err(failed)?;
    }
    out.finish().map_err(failed)?;
    Ok(())
}

/// The decompressed byte stream handed to the DBN decoder, watched: the
/// decoder treats an early end (also zstd's "incomplete frame") as a clean
/// end of the records, so the reader checks what was seen here afterwards.
struct Watched<R> {
    inner: R,
    /// Bytes handed out.
    bytes: u64,
    /// The first 8 bytes: `DBN`, version, metadata length (u32 LE).
    prelude: [u8; 8],
    /// The first read error, if any.
    failure: Option<io::Error>,
}

impl<R> Watched<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            bytes: 0,
            prelude: [0; 8],
            failure: None,
        }
    }

    /// Length of the metadata block, prelude included.
    fn metadata_bytes(&self) -> u64 {
        let length = u32::from_le_bytes([
            self.prelude[4],
            self.prelude[5],
            self.prelude[6],
            self.prelude[7],
        ]);
        8 + u64::from(length)
    }
}

impl<R: Read> Read for Watched<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                let seen = usize::try_from(self.bytes).unwrap_or(usize::MAX);
                if seen < self.prelude.len() {
                    let k = (self.prelude.len() - seen).min(n);
                    self.prelude[seen..seen + k].copy_from_slice(&buf[..k]);
                }
                self.bytes += n as u64;
                Ok(n)
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted && self.failure.is_none() {
                    self.failure = Some(io::Error::new(e.kind(), e.to_string()));
                }
                Err(e)
            }
        }
    }
}

/// Decoded bars of all instruments, in file order. Prices are divided (not
/// multiplied) by 1e9, so that a price written as `(p * 1e9).round()` reads
/// back as exactly `p`.
struct RawBars {
    id: Vec<u32>,
    ts: Vec<i64>,
    open: Vec<f64>,
    high: Vec<f64>,
    low: Vec<f64>,
    close: Vec<f64>,
    volume: Vec<u64>,
}

impl RawBars {
    fn with_capacity(n: usize) -> Self {
        Self {
            id: Vec::with_capacity(n),
            ts: Vec::with_capacity(n),
            open: Vec::with_capacity(n),
            high: Vec::with_capacity(n),
            low: Vec::with_capacity(n),
            close: Vec::with_capacity(n),
            volume: Vec::with_capacity(n),
        }
    }

    fn len(&self) -> usize {
        self.ts.len()
    }

    fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    fn push(&mut self, path: &Path, row: usize, bar: &OhlcvMsg) -> Result<(), DataError> {
        if bar.hd.ts_event == UNDEF_TIMESTAMP || bar.hd.ts_event > i64::MAX as u64 {
            return Err(DataError::bad_row(path, row, "ts_event is undefined"));
        }
        for (name, value) in [
            ("open", bar.open),
            ("high", bar.high),
            ("low", bar.low),
            ("close", bar.close),
        ] {
            if value == UNDEF_PRICE {
                return Err(DataError::bad_row(
                    path,
                    row,
                    format!(
                        "{name} is undefined (UNDEF_PRICE) at {}",
                        timefmt::format(bar.hd.ts_event as i64)
                    ),
                ));
            }
        }
        self.id.push(bar.hd.instrument_id);
        self.ts.push(bar.hd.ts_event as i64);
        self.open.push(bar.open as f64 / SCALE);
        self.high.push(bar.high as f64 / SCALE);
        self.low.push(bar.low as f64 / SCALE);
        self.close.push(bar.close as f64 / SCALE);
        self.volume.push(bar.volume);
        Ok(())
    }

    /// All bars as one table.
    fn into_table(self, symbol: String, interval: BarInterval) -> BarTable {
        BarTable {
            symbol,
            interval,
            ts: self.ts,
            open: self.open,
            high: self.high,
            low: self.low,
            close: self.close,
            volume: self.volume,
            rolls: Vec::new(),
        }
    }
}

/// One contract of a parent-symbology file: its records (indices into
/// [`RawBars`], in time order) split by UTC day.
struct Contract {
    id: u32,
    symbol: String,
    records: Vec<usize>,
    /// (day, volume of the day, range in `records`), days ascending.
    days: Vec<(i64, u128, std::ops::Range<usize>)>,
}

impl Contract {
    fn day(&self, day: i64) -> Option<&(i64, u128, std::ops::Range<usize>)> {
        self.days
            .binary_search_by_key(&day, |d| d.0)
            .ok()
            .map(|i| &self.days[i])
    }
}

/// Rolls a parent-symbology file to one front-contract series (rules in the
/// module docs).
fn roll_to_front(
    path: &Path,
    metadata: &Metadata,
    bars: &RawBars,
    symbols: &TsSymbolMap,
    interval: BarInterval,
) -> Result<BarTable, DataError> {
    let mut index: HashMap<u32, usize> = HashMap::new();
    let mut contracts: Vec<Contract> = Vec::new();
    for (record, &id) in bars.id.iter().enumerate() {
        let k = *index.entry(id).or_insert_with(|| {
            contracts.push(Contract {
                id,
                symbol: symbols
                    .get_for_ts(bars.ts[record] as u64, id)
                    .cloned()
                    .unwrap_or_else(|| format!("instrument {id}")),
                records: Vec::new(),
                days: Vec::new(),
            });
            contracts.len() - 1
        });
        contracts[k].records.push(record);
    }
    let names = || {
        contracts
            .iter()
            .map(|c| c.symbol.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if metadata.stype_in != Some(SType::Parent) {
        return Err(DataError::bad_file(
            path,
            format!(
                "holds {} instruments ({}) but its symbology is {}, not parent; \
                 only parent symbols such as ES.FUT are rolled into one series",
                contracts.len(),
                names(),
                metadata
                    .stype_in
                    .map_or("mixed".to_string(), |s| s.to_string())
            ),
        ));
    }
    let parent = match metadata.symbols.as_slice() {
        [one] if !one.is_empty() => one.clone(),
        other => {
            return Err(DataError::bad_file(
                path,
                format!("parent symbology needs exactly one parent symbol; the file has {other:?}"),
            ))
        }
    };
    contracts.retain(|c| !c.symbol.contains('-'));
    if contracts.is_empty() {
        return Err(DataError::bad_file(
            path,
            "holds only calendar spreads (symbols with '-')",
        ));
    }
    contracts.sort_by_key(|c| c.id);

    for contract in &mut contracts {
        for pair in contract.records.windows(2) {
            if bars.ts[pair[1]] <= bars.ts[pair[0]] {
                return Err(DataError::bad_row(
                    path,
                    pair[1] + 1,
                    format!(
                        "{}: timestamp {} is not after the contract's previous bar (record {})",
                        contract.symbol,
                        timefmt::format(bars.ts[pair[1]]),
                        pair[0] + 1
                    ),
                ));
            }
        }
        for &record in &contract.records {
            check_bar(path, bars, record, &contract.symbol)?;
        }
        let mut start = 0;
        while start < contract.records.len() {
            let day = bars.ts[contract.records[start]].div_euclid(NANOS_PER_DAY);
            let mut end = start;
            let mut volume: u128 = 0;
            while end < contract.records.len()
                && bars.ts[contract.records[end]].div_euclid(NANOS_PER_DAY) == day
            {
                volume += u128::from(bars.volume[contract.records[end]]);
                end += 1;
            }
            contract.days.push((day, volume, start..end));
            start = end;
        }
    }

    let mut days: Vec<i64> = contracts
        .iter()
        .flat_map(|c| c.days.iter().map(|d| d.0))
        .collect();
    days.sort_unstable();
    days.dedup();

    let mut table = BarTable::new(&parent, interval);
    let mut retired = vec![false; contracts.len()];
    let mut active: Option<usize> = None;
    // The contract rolled away from, until the first bar of the new one is taken.
    let mut pending_from: Option<usize> = None;
    // (position in the table of the first bar after the roll, roll)
    let mut rolls: Vec<(usize, Roll)> = Vec::new();
    for (k, &day) in days.iter().enumerate() {
        let volume_day = if k == 0 { day } else { days[k - 1] };
        let best = (0..contracts.len())
            .filter(|&c| !retired[c])
            .filter_map(|c| contracts[c].day(volume_day).map(|d| (c, d.1)))
            .max_by(|a, b| {
                a.1.cmp(&b.1)
                    .then_with(|| (Some(a.0) == active).cmp(&(Some(b.0) == active)))
                    .then_with(|| contracts[b.0].id.cmp(&contracts[a.0].id))
            })
            .map(|(c, _)| c);
        match (active, best) {
            (None, Some(c)) => active = Some(c),
            (Some(a), Some(c)) if a != c => {
                retired[a] = true;
                pending_from = pending_from.or(Some(a));
                active = Some(c);
            }
            _ => {}
        }
        let Some(a) = active else { continue };
        let Some((_, _, range)) = contracts[a].day(day) else {
            continue;
        };
        for &record in &contracts[a].records[range.clone()] {
            if let Some(from) = pending_from.take() {
                let ratio = roll_ratio(bars, &contracts[from], &contracts[a], bars.ts[record]);
                rolls.push((
                    table.len(),
                    Roll {
                        ts: bars.ts[record],
                        from: contracts[from].symbol.clone(),
                        to: contracts[a].symbol.clone(),
                        ratio,
                    },
                ));
            }
            table.push(
                bars.ts[record],
                bars.open[record],
                bars.high[record],
                bars.low[record],
                bars.close[record],
                bars.volume[record],
            );
        }
    }

    // Ratio back-adjustment: walk backwards, multiplying by each roll's ratio
    // once past it.
    let mut factor = 1.0;
    let mut next_roll = rolls.len();
    for i in (0..table.len()).rev() {
        while next_roll > 0 && rolls[next_roll - 1].0 > i {
            factor *= rolls[next_roll - 1].1.ratio;
            next_roll -= 1;
        }
        if factor != 1.0 {
            table.open[i] *= factor;
            table.high[i] *= factor;
            table.low[i] *= factor;
            table.close[i] *= factor;
        }
    }
    table.rolls = rolls.into_iter().map(|(_, roll)| roll).collect();
    table.validate(path)?;
    Ok(table)
}

/// new close / old close at the last timestamp before `roll_ts` at which both
/// contracts have a bar; 1.0 if there is none.
fn roll_ratio(bars: &RawBars, old: &Contract, new: &Contract, roll_ts: i64) -> f64 {
    let new_ts: Vec<i64> = new.records.iter().map(|&r| bars.ts[r]).collect();
    for &old_record in old.records.iter().rev() {
        let ts = bars.ts[old_record];
        if ts >= roll_ts {
            continue;
        }
        if let Ok(j) = new_ts.binary_search(&ts) {
            return bars.close[new.records[j]] / bars.close[old_record];
        }
    }
    1.0
}

/// The checks of [`BarTable::validate`] on one record, so that errors name
/// the record (the rolled table's rows are not the file's records).
fn check_bar(path: &Path, bars: &RawBars, record: usize, symbol: &str) -> Result<(), DataError> {
    let row = record + 1;
    let when = timefmt::format(bars.ts[record]);
    let [o, h, l, c] = [&bars.open, &bars.high, &bars.low, &bars.close].map(|v| v[record]);
    for (name, value) in [("open", o), ("high", h), ("low", l), ("close", c)] {
        if value <= 0.0 {
            return Err(DataError::bad_row(
                path,
                row,
                format!(
                    "{symbol}: {name} is {value} at {when}; prices must be finite and positive"
                ),
            ));
        }
    }
    if h < l {
        return Err(DataError::bad_row(
            path,
            row,
            format!("{symbol}: high {h} is below low {l} at {when}"),
        ));
    }
    if o < l || o > h || c < l || c > h {
        return Err(DataError::bad_row(
            path,
            row,
            format!("{symbol}: open {o} or close {c} lies outside low {l} .. high {h} at {when}"),
        ));
    }
    Ok(())
}
