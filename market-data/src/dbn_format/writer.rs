//! Writing bars as DBN: one symbol ([`write()`]) or several contracts under a
//! parent symbol ([`write_parent`]); the file layout is in the
//! [module docs](super).

use super::{schema_of, DATASET, SCALE};
use crate::timefmt::{self, NANOS_PER_DAY};
use crate::{BarInterval, BarTable, ContractBars, DataError};
use dbn::encode::{DbnEncoder, DynWriter, EncodeRecord};
use dbn::{
    Compression, MappingInterval, Metadata, OhlcvMsg, RecordHeader, SType, Schema, SymbolMapping,
};
use std::fs::File;
use std::io::BufWriter;
use std::num::NonZeroU64;
use std::path::Path;

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
