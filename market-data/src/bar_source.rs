//! An asset's bar file as a user names it: the path, the symbol its bars are
//! when the user says so (`ES=prices.csv` on the command line, `"symbol"` on
//! a job's asset), and the time zone of timestamps written without one
//! (`--tz`, `"tz"`). [`BarSource::read`] reads the file with them and
//! [`BarSource::contract`] finds its contract, with refusals that name the
//! file and say what to do.
//!
//! The symbol rule: a symbol given on the asset names the bars (the dataset,
//! the task's asset). A symbol the file states itself — a `symbol` column,
//! Parquet `tli.symbol` metadata, DBN symbology — must not contradict it:
//! when the file's symbol is a known contract with another root than the
//! given one (the file says NQ, the asset says ES) the file is refused; when
//! it has the same root (`ESH4` for ES) or is no known contract (`SPY`,
//! `^GSPC`), the given symbol wins. A symbol taken from the file name is
//! only a default and always yields.

use crate::contracts::{ContractBook, ContractSpec};
use crate::covariates::attach_columns;
use crate::csv_format::symbol_from_file_name;
use crate::features::FeatureConfig;
use crate::zones::{LocalZone, Timestamps, ZoneError, ZoneReport};
use crate::{csv_format, dbn_format, excerpt, parquet_format, BarTable, DataError, Format};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Longest symbol an asset may give, in bytes.
pub const MAX_SYMBOL_BYTES: usize = 32;

/// Where the symbol of a table read from a file came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolOrigin {
    /// The file name up to its first `.` (no symbol in the file).
    FileName,
    /// A `symbol` column (CSV, Parquet).
    Column,
    /// Parquet `tli.symbol` metadata.
    Metadata,
    /// DBN symbology.
    Dbn,
    /// Given on the asset.
    Asset,
}

impl SymbolOrigin {
    fn describe(self) -> &'static str {
        match self {
            Self::FileName => "taken from the file's name",
            Self::Column => "the file's symbol column",
            Self::Metadata => "the file's tli.symbol metadata",
            Self::Dbn => "the DBN file's symbology",
            Self::Asset => "given on the asset",
        }
    }
}

/// What reading a file found out besides its bars.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReadNotes {
    pub symbol_origin: SymbolOrigin,
    /// The symbol the file stated (not its name), when the asset's replaced it.
    pub file_symbol: Option<String>,
    /// How the timestamps gave their zone.
    pub timestamps: ZoneReport,
}

/// Reads one symbol's bars from any supported file, with the time zone of
/// timestamps written without one, and notes how the symbol and zones were
/// found. DBN timestamps are UTC; a DBN parent (`ES.FUT`) is rolled.
pub fn read_bars_with(
    path: &Path,
    zone: Option<&LocalZone>,
) -> Result<(BarTable, ReadNotes), DataError> {
    match Format::from_path(path)? {
        Format::Dbn => {
            let table = dbn_format::read(path)?;
            let mut stamps = Timestamps::new(zone);
            stamps.utc(table.len(), None);
            let symbol_origin = if table.symbol == symbol_from_file_name(path) {
                SymbolOrigin::FileName
            } else {
                SymbolOrigin::Dbn
            };
            let notes = ReadNotes {
                symbol_origin,
                file_symbol: None,
                timestamps: stamps.report,
            };
            Ok((table, notes))
        }
        Format::Parquet => parquet_format::read_with(path, zone),
        Format::Csv => csv_format::read_with(path, zone),
    }
}

/// Why a symbol given on an asset was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SymbolError {
    /// Not 1 to [`MAX_SYMBOL_BYTES`] ASCII letters, digits, `.`, `_` or `-`
    /// starting with a letter or digit.
    #[error(
        "symbol {}: use 1 to {MAX_SYMBOL_BYTES} letters, digits, '.', '_' or '-', starting with \
         a letter or digit (ES, ESH4, ES.FUT)",
        excerpt(.symbol)
    )]
    BadSymbol {
        /// The symbol as given.
        symbol: String,
    },
}

/// Why a [`BarSource`] (a `[SYMBOL=]PATH` argument, or a source's symbol and
/// time zone) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The `[SYMBOL=]PATH` argument is empty (or blank).
    #[error("empty; give a bar file, or SYMBOL=FILE (ES=prices.csv)")]
    EmptyArg,
    /// `SYMBOL=` with nothing after the `=`.
    #[error("{}: give the bar file after the = ({symbol}=prices.csv)", excerpt(.text))]
    NoPathAfterSymbol {
        /// The whole argument.
        text: String,
        /// The symbol before the `=`.
        symbol: String,
    },
    /// The source's path is empty.
    #[error("the bar file path is empty")]
    EmptyPath,
    /// The given symbol is malformed.
    #[error(transparent)]
    Symbol(#[from] SymbolError),
    /// The given time zone is no IANA zone.
    #[error(transparent)]
    Zone(#[from] ZoneError),
    /// The cut's start is after its end.
    #[error("start {start} is after end {end}")]
    StartAfterEnd { start: String, end: String },
}

/// A symbol given on an asset: 1 to [`MAX_SYMBOL_BYTES`] ASCII letters,
/// digits, `.`, `_` or `-`, starting with a letter or digit.
pub fn check_symbol(symbol: &str) -> Result<(), SymbolError> {
    let bytes = symbol.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_SYMBOL_BYTES
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(b));
    if ok {
        Ok(())
    } else {
        Err(SymbolError::BadSymbol {
            symbol: symbol.to_string(),
        })
    }
}

/// A bar file with what the user says about it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BarSource {
    pub path: PathBuf,
    /// The symbol of the bars (see the module docs for the rule).
    pub symbol: Option<String>,
    /// IANA time zone of timestamps written without one.
    pub tz: Option<String>,
    /// Only bars at or after this time (UTC nanoseconds).
    pub start: Option<i64>,
    /// Only bars at or before this time (UTC nanoseconds).
    pub end: Option<i64>,
}

impl BarSource {
    /// The file alone: its symbol from the file, every timestamp with its zone.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            ..Self::default()
        }
    }

    /// `[SYMBOL=]PATH` as given on the command line (`ES=prices.csv`). Text
    /// before the first `=` is a symbol only if it looks like one
    /// ([`check_symbol`]); write `./a=b.csv` for a file whose name holds `=`.
    pub fn parse_arg(text: &str) -> Result<Self, SourceError> {
        if text.trim().is_empty() {
            return Err(SourceError::EmptyArg);
        }
        match text.split_once('=') {
            Some((symbol, path)) if check_symbol(symbol).is_ok() => {
                if path.trim().is_empty() {
                    return Err(SourceError::NoPathAfterSymbol {
                        text: text.to_string(),
                        symbol: symbol.to_string(),
                    });
                }
                Ok(Self {
                    path: path.into(),
                    symbol: Some(symbol.to_string()),
                    ..Self::default()
                })
            }
            _ => Ok(Self::file(text)),
        }
    }

    /// The `[SYMBOL=]PATH` text [`parse_arg`](Self::parse_arg) reads back
    /// as this source (without the time zone).
    pub fn arg(&self) -> String {
        let path = self.path.display().to_string();
        match (&self.symbol, path.split_once('=')) {
            (Some(symbol), _) => format!("{symbol}={path}"),
            (None, Some((before, _))) if check_symbol(before).is_ok() => format!("./{path}"),
            (None, _) => path,
        }
    }

    /// The given symbol and time zone are well-formed.
    pub fn check(&self) -> Result<(), SourceError> {
        if self.path.as_os_str().is_empty() {
            return Err(SourceError::EmptyPath);
        }
        if let Some(symbol) = &self.symbol {
            check_symbol(symbol)?;
        }
        if let Some(tz) = &self.tz {
            LocalZone::parse(tz)?;
        }
        if let (Some(start), Some(end)) = (self.start, self.end) {
            if start > end {
                return Err(SourceError::StartAfterEnd {
                    start: crate::timefmt::format(start),
                    end: crate::timefmt::format(end),
                });
            }
        }
        Ok(())
    }

    /// Reads the file: timestamps without a zone in the given one, the given
    /// symbol applied by the rule of the module docs (`book` tells which
    /// symbols are contracts).
    pub fn read(&self, book: &ContractBook) -> Result<(BarTable, ReadNotes), DataError> {
        let (table, notes) = self.read_whole(book)?;
        if self.start.is_none() && self.end.is_none() {
            return Ok((table, notes));
        }
        let (first, last) = (table.ts.first().copied(), table.ts.last().copied());
        let cut = table.between(self.start, self.end);
        if cut.is_empty() {
            let at = |t: Option<i64>| t.map_or("the file's end".into(), crate::timefmt::format);
            return Err(DataError::bad_file(
                &self.path,
                format!(
                    "no bar lies between {} and {} (the file's bars run from {} to {}); give \
                     start and end within them",
                    self.start
                        .map_or("its start".into(), crate::timefmt::format),
                    at(self.end),
                    at(first),
                    at(last)
                ),
            ));
        }
        Ok((cut, notes))
    }

    /// [`read`](Self::read), with the user's columns `features` names (of
    /// the bar file and of covariate files) joined to the bars
    /// ([`crate::covariates::attach_columns`]).
    pub fn read_for(
        &self,
        book: &ContractBook,
        features: &FeatureConfig,
    ) -> Result<(BarTable, ReadNotes), DataError> {
        let (mut table, notes) = self.read(book)?;
        if features.columns.is_empty() && features.target.column().is_none() {
            return Ok((table, notes));
        }
        let zone = self.zone()?;
        attach_columns(&mut table, Some(&self.path), features, zone.as_ref())?;
        Ok((table, notes))
    }

    /// The time zone of timestamps written without one, parsed.
    pub fn zone(&self) -> Result<Option<LocalZone>, DataError> {
        match &self.tz {
            Some(tz) => Ok(Some(LocalZone::parse(tz).map_err(|e| {
                DataError::Invalid(format!("{}: {e}", self.path.display()))
            })?)),
            None => Ok(None),
        }
    }

    /// [`read`](Self::read) without the start/end cut.
    fn read_whole(&self, book: &ContractBook) -> Result<(BarTable, ReadNotes), DataError> {
        let path = &self.path;
        let zone = self.zone()?;
        let (mut table, mut notes) = read_bars_with(path, zone.as_ref())?;
        let Some(given) = &self.symbol else {
            return Ok((table, notes));
        };
        check_symbol(given).map_err(|e| DataError::Invalid(format!("{}: {e}", path.display())))?;
        if notes.symbol_origin != SymbolOrigin::FileName {
            if let Ok(stated) = book.lookup(&table.symbol) {
                if book.lookup(given).ok().map(|g| &g.root) != Some(&stated.root) {
                    return Err(DataError::bad_file(
                        path,
                        format!(
                            "the asset names its bars {given:?}, but {} says they are {:?} \
                             (the {} contract); give the symbol {} on the asset, or none, or \
                             correct the file",
                            notes.symbol_origin.describe(),
                            table.symbol,
                            stated.root,
                            stated.root
                        ),
                    ));
                }
            }
        }
        let replaced = std::mem::replace(&mut table.symbol, given.clone());
        if notes.symbol_origin != SymbolOrigin::FileName {
            notes.file_symbol = Some(replaced);
        }
        notes.symbol_origin = SymbolOrigin::Asset;
        Ok((table, notes))
    }

    /// The contract of bars read by [`read`](Self::read). A symbol the
    /// user did not give that is no contract is refused with the remedy
    /// first: name the symbol on the asset.
    pub fn contract<'b>(
        &self,
        table: &BarTable,
        notes: &ReadNotes,
        book: &'b ContractBook,
    ) -> Result<&'b ContractSpec, DataError> {
        let remedy = match notes.symbol_origin {
            SymbolOrigin::Asset => None,
            origin => {
                let example = book.root_prefix_of(&table.symbol).unwrap_or("SYMBOL");
                Some(format!(
                    "The symbol is {}; if the bars are of a listed contract, say which on the \
                     asset: {} (tli train local --data, tli train start -a, tli data inspect) \
                     or \"symbol\": \"{example}\" (job spec)",
                    origin.describe(),
                    Self {
                        symbol: Some(example.to_string()),
                        ..self.clone()
                    }
                    .arg()
                ))
            }
        };
        book.lookup_or_suggest(&table.symbol, remedy.as_deref())
            .map_err(|e| DataError::Contract(format!("{}: {e}", self.path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbol_before_an_equals_sign_names_the_bars() {
        let s = BarSource::parse_arg("ES=data/prices.csv").unwrap();
        assert_eq!(s.symbol.as_deref(), Some("ES"));
        assert_eq!(s.path, Path::new("data/prices.csv"));
        assert_eq!(s.arg(), "ES=data/prices.csv");
        let plain = BarSource::parse_arg("data/prices.csv").unwrap();
        assert_eq!(plain, BarSource::file("data/prices.csv"));
        // Not a symbol before the `=`: the whole text is the path.
        for path in ["./a=b.csv", "/data/x=1.csv", "^GSPC=x.csv"] {
            let s = BarSource::parse_arg(path).unwrap();
            assert_eq!((s.symbol, s.path), (None, PathBuf::from(path)), "{path}");
        }
        // arg() writes back what parse_arg reads.
        let odd = BarSource::file("a=b.csv");
        assert_eq!(odd.arg(), "./a=b.csv");
        assert_eq!(
            BarSource::parse_arg(&odd.arg()).unwrap().path,
            Path::new("./a=b.csv")
        );
        let e = BarSource::parse_arg("ES=").unwrap_err();
        assert_eq!(
            e,
            SourceError::NoPathAfterSymbol {
                text: "ES=".into(),
                symbol: "ES".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "\"ES=\": give the bar file after the = (ES=prices.csv)"
        );
        let e = BarSource::parse_arg(" ").unwrap_err();
        assert_eq!(e, SourceError::EmptyArg);
        assert_eq!(
            e.to_string(),
            "empty; give a bar file, or SYMBOL=FILE (ES=prices.csv)"
        );
    }

    #[test]
    fn symbols_and_zones_are_checked() {
        for good in ["ES", "ESH4", "ES.FUT", "6E", "es_daily"] {
            assert!(check_symbol(good).is_ok(), "{good}");
        }
        for bad in ["", ".ES", "E S", "ES/NQ", &"X".repeat(33), "É"] {
            assert_eq!(
                check_symbol(bad),
                Err(SymbolError::BadSymbol { symbol: bad.into() }),
                "{bad:?}"
            );
        }
        assert_eq!(
            check_symbol("E S").map_err(|e| e.to_string()),
            Err(
                "symbol \"E S\": use 1 to 32 letters, digits, '.', '_' or '-', starting with a \
                 letter or digit (ES, ESH4, ES.FUT)"
                    .to_string()
            )
        );
        let mut s = BarSource::file("a.csv");
        s.symbol = Some("E S".into());
        let e = s.check().unwrap_err();
        assert!(matches!(e, SourceError::Symbol(_)), "{e:?}");
        assert_eq!(e.to_string(), check_symbol("E S").unwrap_err().to_string());
        s.symbol = None;
        s.tz = Some("Mars/Olympus".into());
        let e = s.check().unwrap_err();
        assert_eq!(
            e,
            SourceError::Zone(ZoneError::UnknownZone {
                name: "Mars/Olympus".into()
            })
        );
        assert!(
            e.to_string()
                .starts_with("unknown time zone \"Mars/Olympus\"; "),
            "{e}"
        );
        assert_eq!(
            BarSource::default().check(),
            Err(SourceError::EmptyPath),
            "an empty path"
        );
        assert_eq!(
            SourceError::EmptyPath.to_string(),
            "the bar file path is empty"
        );
        s.tz = Some("America/Chicago".into());
        s.symbol = Some("NQ".into());
        assert!(s.check().is_ok());
    }
}
