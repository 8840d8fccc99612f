//! `tli-data`: market data, with no libtorch. OHLCV bars from Databento DBN
//! (plain or zstd), Parquet and CSV files, checked and normalized into one
//! [`BarTable`] per symbol; the futures contract specifications; the
//! synthetic bar generator; the feature pipeline that turns bars into the
//! [`Dataset`](tli_plugin_api::Dataset) plugins receive; and the synthetic
//! AR(1) dataset used offline and in tests.
//!
//! * [`files`]: opening data files: only regular files, without blocking; lines capped.
//! * [`table`]: [`BarTable`], [`BarInterval`], [`Roll`], [`ContractBars`]; row checks, gaps.
//! * [`csv_format`], [`parquet_format`], [`dbn_format`]: readers and writers; DBN parent roll.
//! * [`bar_source`]: an asset's bar file as the user names it (`ES=prices.csv`, a time zone):
//!   the symbol rule, refusals that say what to do.
//! * [`zones`]: timestamps' time zones: offsets, local times in a given IANA zone, the report.
//! * [`contracts`]: contract specs (built-in and TOML), symbol → root lookup.
//! * [`calendar`]: exchange calendars: local time, sessions, holidays, rolls; known-future columns.
//! * [`synth`]: deterministic synthetic bars (GARCH, t tails, regimes, seasonality, planted ρ).
//! * [`columns`]: the user's own columns (role, kind, transform, fill) and targets, as configured.
//! * [`column_read`]: named columns of a CSV or Parquet file, with its timestamps.
//! * [`covariates`]: those columns joined to an asset's bars (the bar file's rows; a covariate
//!   file as of each bar, or exactly for known-future columns).
//! * [`user_features`]: the joined columns as features (fill, transform, one-hot), the targets.
//! * [`features`]: bars → features, targets, splits, normalization → `Dataset`.
//! * [`inference`]: new bars as a trained model's inputs, scaled with its training statistics.
//! * [`inspect`]: `tli data inspect` summaries.
//! * [`timefmt`]: UTC ns ↔ text, civil-date arithmetic.
//! * [`synthetic_ar`]: the deterministic synthetic AR(1) `Dataset` (offline demo and tests).
//! * [`synthetic_memory`]: a `Dataset` with a planted long-memory signal (200+ bars back).
//! * [`synthetic_covariates`]: daily bars with a planted observed-past column (leads returns by
//!   one bar) and a planted known-future event flag (a known effect), for the user-column bench.
//! * [`synthetic_seasonal`]: assets with a planted known-future (calendar) and observed-past
//!   (flow) effect, for the TFT.
//!
//! Nothing is silently repaired: a bad row is an error that names the file,
//! the row and the problem ([`DataError`]).

pub mod bar_source;
pub mod calendar;
pub mod column_read;
pub mod columns;
pub mod contracts;
pub mod covariates;
pub mod csv_format;
pub mod dbn_format;
pub mod features;
pub mod files;
pub mod inference;
pub mod inspect;
pub mod parquet_format;
pub mod synth;
pub mod synthetic_ar;
pub mod synthetic_covariates;
pub mod synthetic_memory;
pub mod synthetic_seasonal;
pub mod table;
pub mod timefmt;
pub mod user_features;
pub mod walk_forward;
pub mod zones;

pub use bar_source::{read_bars_with, BarSource, SourceError, SymbolError};
pub use table::{BarInterval, BarTable, ContractBars, IntervalError, Roll};

use std::path::{Path, PathBuf};

/// Why market data was refused. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The cause is both in the message (so `to_string()` alone says it)
    /// and the `source()` (so callers can inspect the `io::Error`); error
    /// chains that skip a cause already quoted print it once.
    #[error("{file}: cannot be read or written: {cause}")]
    Io {
        file: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("{file}: row {row}: {problem}")]
    BadRow {
        file: PathBuf,
        /// 1-based data row (the header, if any, is not counted).
        row: usize,
        problem: String,
    },
    #[error("{file}: {problem}")]
    BadFile { file: PathBuf, problem: String },
    /// What was opened lies outside the host's data roots (a symbolic link
    /// or directory changed after the path was checked); nothing was read.
    #[error(
        "{file}: outside the host's data roots when opened (a symbolic link or directory on \
         its path leads out of them); the host reads data only under its roots"
    )]
    OutsideRoots { file: PathBuf },
    /// No contract specification for a symbol.
    #[error("{0}")]
    Contract(String),
    /// A request that cannot be met (a feature config, synthetic-data parameters).
    #[error("{0}")]
    Invalid(String),
}

impl DataError {
    pub fn bad_row(file: &Path, row: usize, problem: impl Into<String>) -> Self {
        Self::BadRow {
            file: file.to_path_buf(),
            row,
            problem: problem.into(),
        }
    }
    pub fn bad_file(file: &Path, problem: impl Into<String>) -> Self {
        Self::BadFile {
            file: file.to_path_buf(),
            problem: problem.into(),
        }
    }
    pub fn io(file: &Path, cause: std::io::Error) -> Self {
        Self::Io {
            file: file.to_path_buf(),
            cause,
        }
    }
}

/// `text` quoted for an error message, cut after 60 characters (the full
/// length noted): a message quotes what it refused, but a field or column
/// name can be megabytes long in a damaged file.
pub(crate) fn excerpt(text: &str) -> String {
    quoted_prefix(text, 60)
}

fn quoted_prefix(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// Names for an error message, `separator`-separated: the first 12 (the long
/// ones quoted and cut after 30 characters), then how many there are in all.
pub(crate) fn list_excerpt<'a>(
    names: impl ExactSizeIterator<Item = &'a str>,
    separator: &str,
) -> String {
    const SHOWN: usize = 12;
    let total = names.len();
    let mut text = names
        .take(SHOWN)
        .map(|name| match name.char_indices().nth(30) {
            None => name.to_string(),
            Some(_) => quoted_prefix(name, 30),
        })
        .collect::<Vec<_>>()
        .join(separator);
    if total > SHOWN {
        text.push_str(&format!("{separator}… ({total} in all)"));
    }
    text
}

/// The file formats bars can be read from and written to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// Databento DBN; zstd-compressed when the name ends in `.zst`.
    Dbn,
    Parquet,
    Csv,
}

impl Format {
    /// Guesses the format from the file name: `.dbn`, `.dbn.zst`, `.parquet`, `.csv`.
    pub fn from_path(path: &Path) -> Result<Self, DataError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_ascii_lowercase();
        if name.ends_with(".dbn") || name.ends_with(".dbn.zst") {
            Ok(Self::Dbn)
        } else if name.ends_with(".parquet") {
            Ok(Self::Parquet)
        } else if name.ends_with(".csv") {
            Ok(Self::Csv)
        } else {
            Err(DataError::bad_file(
                path,
                "unknown format: name it *.dbn, *.dbn.zst, *.parquet or *.csv",
            ))
        }
    }
}

/// Reads one symbol's bars from any supported file (see [`Format::from_path`]).
/// DBN files with parent symbology (`ES.FUT`) are rolled to the front contract.
pub fn read_bars(path: &Path) -> Result<BarTable, DataError> {
    match Format::from_path(path)? {
        Format::Dbn => dbn_format::read(path),
        Format::Parquet => parquet_format::read(path),
        Format::Csv => csv_format::read(path),
    }
}

/// Writes bars in the format given by the file name.
pub fn write_bars(path: &Path, table: &BarTable) -> Result<(), DataError> {
    match Format::from_path(path)? {
        Format::Dbn => dbn_format::write(path, table),
        Format::Parquet => parquet_format::write(path, table),
        Format::Csv => csv_format::write(path, table),
    }
}

#[cfg(test)]
mod data_error_tests {
    use super::*;

    #[test]
    fn an_io_error_is_both_quoted_and_kept_as_the_source() {
        let cause = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = DataError::io(Path::new("bars.csv"), cause);
        assert!(e
            .to_string()
            .starts_with("bars.csv: cannot be read or written: "));
        let source = std::error::Error::source(&e).expect("the io::Error is the source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
    }
}
