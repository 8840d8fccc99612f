//! OHLCV bars in Databento Binary Encoding (DBN), plain or zstd-compressed.
//!
//! **Written** by [`write()`] (one symbol) and [`write_parent`] (several
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
//!   - each switch is recorded as a [`Roll`](crate::Roll): `ts` = first bar taken from the
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
//! The result is checked with [`BarTable::validate`](crate::BarTable::validate).
//!
//! The parts: `reader.rs` decodes and checks the records, `roll.rs` rolls a
//! parent-symbology file to its front contract, `writer.rs` encodes bars.

mod reader;
mod roll;
mod writer;

pub use reader::read;
pub use writer::{write, write_parent};

use crate::BarInterval;
use dbn::{rtype, Schema, FIXED_PRICE_SCALE};

/// The dataset code written into files made here.
pub const DATASET: &str = "TLI.LOCAL";

const SCALE: f64 = FIXED_PRICE_SCALE as f64;

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
