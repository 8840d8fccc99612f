//! Reading a DBN file of OHLCV bars into a [`BarTable`]: every record decoded
//! and checked, a truncated file noticed, the symbol named; a file with several
//! instruments is handed to the front-contract roll (rules in the
//! [module docs](super)).

use super::roll::roll_to_front;
use super::{interval_of, SCALE};
use crate::csv_format::symbol_from_file_name;
use crate::timefmt;
use crate::{BarInterval, BarTable, DataError};
use dbn::decode::{DbnDecoder, DbnMetadata, DecodeRecordRef, DynReader};
use dbn::{
    rtype, OhlcvMsg, Record, TsSymbolMap, VersionUpgradePolicy, UNDEF_PRICE, UNDEF_TIMESTAMP,
};
use std::io::{self, BufReader, Read};
use std::path::Path;

/// Reads a DBN file of OHLCV bars (see the [module docs](super)).
pub fn read(path: &Path) -> Result<BarTable, DataError> {
    let file = crate::files::open_data_file(path)?;
    let file_bytes = file.metadata().map_err(|e| DataError::io(path, e))?.len();
    let mut reader = DynReader::inferred_with_buffer(BufReader::with_capacity(1 << 16, file))
        .map_err(|e| DataError::bad_file(path, format!("cannot be read as DBN: {e}")))?;
    // Room for the records the file probably holds (OHLCV records are 56
    // bytes; zstd shrinks bars about 4x), so the columns rarely regrow.
    let expansion = if reader.is_compressed() { 4 } else { 1 };
    let estimate = (file_bytes.saturating_mul(expansion) / 56).min(1 << 26) as usize;
    let head = read_metadata_block(path, &mut reader)?;
    let stream = io::Cursor::new(head).chain(reader);
    let mut decoder =
        DbnDecoder::with_upgrade_policy(Watched::new(stream), VersionUpgradePolicy::UpgradeToV3)
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
        if header.rtype != bar_rtype && header.rtype != rtype::OHLCV_DEPRECATED {
            return Err(DataError::bad_row(
                path,
                row,
                format!("record type {:#04x} is not an {schema} bar", header.rtype),
            ));
        }
        // `try_get`, not `get`: `get` panics on a record too short for its type.
        let bar = record.try_get::<OhlcvMsg>().map_err(|_| {
            DataError::bad_row(
                path,
                row,
                format!(
                    "record is {} bytes long, too short for an {schema} bar ({} bytes)",
                    header.record_size(),
                    std::mem::size_of::<OhlcvMsg>()
                ),
            )
        })?;
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

/// The prelude and metadata block at the start of the (decompressed)
/// stream, read ahead: the decoder allocates the metadata length the prelude
/// claims (up to 4 GiB) before reading it, so that length is only believed
/// once the stream has shown that it holds that many bytes. A stream that is
/// not DBN is returned as far as read, for the decoder to refuse.
fn read_metadata_block(path: &Path, reader: &mut impl Read) -> Result<Vec<u8>, DataError> {
    let unreadable =
        |e: io::Error| DataError::bad_file(path, format!("cannot be read as DBN: {e}"));
    let mut head = Vec::with_capacity(8);
    reader
        .by_ref()
        .take(8)
        .read_to_end(&mut head)
        .map_err(unreadable)?;
    if head.len() < 8 || !head.starts_with(b"DBN") {
        return Ok(head);
    }
    let claimed = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    // `read_to_end` grows the buffer with the bytes that arrive, not to `claimed`.
    let got = reader
        .by_ref()
        .take(u64::from(claimed))
        .read_to_end(&mut head)
        .map_err(unreadable)?;
    if got < claimed as usize {
        return Err(DataError::bad_file(
            path,
            format!(
                "the DBN metadata claims {claimed} bytes but the file ends after {got} \
                 (truncated or damaged)"
            ),
        ));
    }
    Ok(head)
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
pub(super) struct RawBars {
    pub(super) id: Vec<u32>,
    pub(super) ts: Vec<i64>,
    pub(super) open: Vec<f64>,
    pub(super) high: Vec<f64>,
    pub(super) low: Vec<f64>,
    pub(super) close: Vec<f64>,
    pub(super) volume: Vec<u64>,
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
            extra: Vec::new(),
        }
    }
}
