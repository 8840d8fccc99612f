//! Time zones of bar files' timestamps: the IANA zone a user gives for
//! timestamps written without one ([`LocalZone`], `--tz` on the command line,
//! `"tz"` on a job's asset), the conversion of such wall-clock times to UTC,
//! and the [`ZoneReport`] of how a file's timestamps gave their zone (what
//! `tli data inspect` shows). [`Timestamps`] is a reader's per-file state.
//!
//! The rules: `Z`, an offset (`-05:00`) or integer nanoseconds say the
//! instant themselves, and a given zone does not change them; a date
//! (`YYYY-MM-DD`) is a trading date, kept at midnight UTC; a date and time
//! with no zone is refused unless a zone is given, then read as that zone's
//! local time. A local time that never happens (clocks go forward) is refused;
//! one that happens twice (clocks go back) is its first occurrence unless that
//! would not come after the bar before it, then its second — the only reading
//! under which a sorted file stays sorted (pandas' `ambiguous="infer"`).

use crate::excerpt;
use crate::timefmt::{self, Stated, TimestampError, NANOS_PER_DAY, NANOS_PER_SECOND};
use jiff::tz::{AmbiguousOffset, TimeZone};
use serde::Serialize;
use std::collections::BTreeMap;

/// What to tell a user whose file has times without a zone.
pub const NO_ZONE_REMEDY: &str = "give the zone the file's times are in (--tz \
     America/New_York on the command line, \"tz\" on a job's asset) or write them with Z or a \
     UTC offset (-05:00)";

/// Why a time zone or a timestamp read in one was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    /// The zone name is empty (or blank).
    #[error("time zone is empty; give an IANA name such as America/New_York")]
    EmptyName,
    /// No IANA zone of that name in the bundled tz database.
    #[error(
        "unknown time zone {}; give an IANA name such as America/New_York, America/Chicago, \
         Europe/London or UTC",
        excerpt(.name)
    )]
    UnknownZone {
        /// The name given (trimmed).
        name: String,
    },
    /// A wall-clock time outside what the conversion can represent.
    #[error("local time {} is out of range", local_text(*.wall))]
    OutOfRange {
        /// The local date and time read as if UTC (nanoseconds).
        wall: i64,
    },
    /// A wall-clock time skipped when the clocks went forward.
    #[error(
        "local time {} does not exist in {zone}: clocks went forward from {} to {} (is the \
         time zone right?)",
        local_text(*.wall),
        timefmt::format_offset(*.before),
        timefmt::format_offset(*.after)
    )]
    Skipped {
        /// The local date and time read as if UTC (nanoseconds).
        wall: i64,
        /// The IANA name of the zone.
        zone: String,
        /// The UTC offset before the change, in seconds.
        before: i32,
        /// The UTC offset after the change, in seconds.
        after: i32,
    },
    /// A date and time without a zone, and no zone given for such times.
    #[error("timestamp {} has no time zone; {NO_ZONE_REMEDY}", excerpt(.text))]
    NoZone {
        /// The timestamp's text (trimmed).
        text: String,
    },
    /// The timestamp's text is not one [`timefmt::parse_stated`] reads.
    #[error(transparent)]
    Timestamp(#[from] TimestampError),
}

/// An IANA time zone given for timestamps written without one.
#[derive(Clone, Debug)]
pub struct LocalZone {
    name: String,
    tz: TimeZone,
}

impl LocalZone {
    /// An IANA name (`America/New_York`, `Europe/London`, `UTC`), from the
    /// tz database bundled with the binary.
    pub fn parse(name: &str) -> Result<Self, ZoneError> {
        let name = name.trim();
        if name.is_empty() {
            return Err(ZoneError::EmptyName);
        }
        TimeZone::get(name)
            .map(|tz| Self {
                name: name.to_string(),
                tz,
            })
            .map_err(|_| ZoneError::UnknownZone {
                name: name.to_string(),
            })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The UTC instant of a wall-clock time here (`wall`: the local date and
    /// time read as if UTC), and whether it was the second pass of a
    /// repeated hour. `previous`: the instant of the bar before (see the
    /// module docs for the rule).
    pub fn to_utc(&self, wall: i64, previous: Option<i64>) -> Result<(i64, bool), ZoneError> {
        let (y, mo, d) = timefmt::civil_from_days(wall.div_euclid(NANOS_PER_DAY));
        let rest = wall.rem_euclid(NANOS_PER_DAY);
        let secs = rest / NANOS_PER_SECOND;
        let civil = i16::try_from(y)
            .ok()
            .and_then(|y| {
                jiff::civil::DateTime::new(
                    y,
                    mo as i8,
                    d as i8,
                    (secs / 3600) as i8,
                    ((secs / 60) % 60) as i8,
                    (secs % 60) as i8,
                    (rest % NANOS_PER_SECOND) as i32,
                )
                .ok()
            })
            .ok_or(ZoneError::OutOfRange { wall })?;
        let utc = |offset: jiff::tz::Offset| {
            wall.checked_sub(i64::from(offset.seconds()) * NANOS_PER_SECOND)
                .ok_or(ZoneError::OutOfRange { wall })
        };
        match self.tz.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => Ok((utc(offset)?, false)),
            AmbiguousOffset::Gap { before, after } => Err(ZoneError::Skipped {
                wall,
                zone: self.name.clone(),
                before: before.seconds(),
                after: after.seconds(),
            }),
            AmbiguousOffset::Fold { before, after } => {
                let first = utc(before)?;
                if previous.is_some_and(|p| first <= p) {
                    Ok((utc(after)?, true))
                } else {
                    Ok((first, false))
                }
            }
        }
    }
}

/// A wall-clock time for a message (`2024-03-10 02:30:00`).
fn local_text(wall: i64) -> String {
    timefmt::format(wall)
        .trim_end_matches('Z')
        .replacen('T', " ", 1)
}

/// How a file's timestamps gave their zone, row counts by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ZoneReport {
    /// UTC as written: `Z`, `+00:00`, integer nanoseconds, DBN, a Parquet
    /// column with a zone.
    pub utc: usize,
    /// Rows per explicit non-zero offset (`-05:00`), converted to UTC.
    pub offsets: BTreeMap<String, usize>,
    /// Dates without a time of day (midnight UTC of the date).
    pub dates: usize,
    /// The zone given for timestamps written without one.
    pub given_zone: Option<String>,
    /// Times without a zone, converted from `given_zone`.
    pub local: usize,
    /// Of `local`, those in a repeated hour read as its second pass.
    pub second_pass: usize,
    /// Parquet timestamps without a zone taken as UTC (no zone given).
    pub naive_as_utc: usize,
    /// The zone a Parquet timestamp column names (its instants are UTC).
    pub column_zone: Option<String>,
}

impl ZoneReport {
    /// One line for people: `1440 rows with UTC offsets -05:00, -04:00,
    /// converted to UTC`, `390 rows UTC`, …
    pub fn describe(&self) -> String {
        let rows = |n: usize| {
            if n == 1 {
                "1 row".to_string()
            } else {
                format!("{n} rows")
            }
        };
        let mut parts = Vec::new();
        if self.utc > 0 {
            let zone = match &self.column_zone {
                Some(z) if z != "UTC" && z != "+00:00" => {
                    format!(" (the column's zone is {z}; its instants are stored in UTC)")
                }
                _ => String::new(),
            };
            parts.push(format!("{} UTC{zone}", rows(self.utc)));
        }
        if !self.offsets.is_empty() {
            let n = self.offsets.values().sum();
            let list: Vec<&str> = self.offsets.keys().map(String::as_str).collect();
            parts.push(format!(
                "{} with UTC offsets {}, converted to UTC",
                rows(n),
                list.join(", ")
            ));
        }
        if self.local > 0 {
            let zone = self.given_zone.as_deref().unwrap_or_default();
            let repeated = match self.second_pass {
                0 => String::new(),
                n => format!(
                    " ({} in an hour repeated when clocks went back, read as its second pass)",
                    rows(n)
                ),
            };
            parts.push(format!(
                "{} local time in {zone}, converted to UTC{repeated}",
                rows(self.local)
            ));
        }
        if self.dates > 0 {
            parts.push(format!(
                "{} dates without a time of day (midnight UTC of the date)",
                rows(self.dates)
            ));
        }
        if self.naive_as_utc > 0 {
            parts.push(format!(
                "{} without a zone in the Parquet column, taken as UTC (give --tz if they are \
                 local times)",
                rows(self.naive_as_utc)
            ));
        }
        if let Some(zone) = &self.given_zone {
            if self.local == 0 {
                parts.push(format!(
                    "time zone {zone} given but unused: every timestamp gave its own"
                ));
            }
        }
        parts.join("; ")
    }
}

/// A reader's timestamps of one file, in row order: converted to UTC by the
/// rules of the module docs and counted in [`Timestamps::report`].
pub struct Timestamps<'a> {
    zone: Option<&'a LocalZone>,
    previous: Option<i64>,
    pub report: ZoneReport,
}

impl<'a> Timestamps<'a> {
    pub fn new(zone: Option<&'a LocalZone>) -> Self {
        Self {
            zone,
            previous: None,
            report: ZoneReport {
                given_zone: zone.map(|z| z.name.clone()),
                ..ZoneReport::default()
            },
        }
    }

    /// A timestamp as text (CSV), in any form [`timefmt::parse_stated`] reads.
    pub fn text(&mut self, text: &str) -> Result<i64, ZoneError> {
        let (ts, stated) = timefmt::parse_stated(text)?;
        let ts = match stated {
            Stated::Utc | Stated::Nanos => {
                self.report.utc += 1;
                ts
            }
            Stated::Offset(seconds) => {
                *self
                    .report
                    .offsets
                    .entry(timefmt::format_offset(seconds))
                    .or_default() += 1;
                ts
            }
            Stated::Date => {
                self.report.dates += 1;
                ts
            }
            Stated::Naive if self.zone.is_none() => {
                return Err(ZoneError::NoZone {
                    text: text.trim().to_string(),
                })
            }
            Stated::Naive => self.local(ts)?,
        };
        self.previous = Some(ts);
        Ok(ts)
    }

    /// A Parquet timestamp without a zone (`wall`: as if UTC): local time in
    /// the given zone, or UTC when none is given (what such files always meant).
    pub fn naive(&mut self, wall: i64) -> Result<i64, ZoneError> {
        let ts = match self.zone {
            None => {
                self.report.naive_as_utc += 1;
                wall
            }
            Some(_) => self.local(wall)?,
        };
        self.previous = Some(ts);
        Ok(ts)
    }

    /// `count` instants that are UTC already, the last being `last`.
    pub fn utc(&mut self, count: usize, last: Option<i64>) {
        self.report.utc += count;
        if last.is_some() {
            self.previous = last;
        }
    }

    fn local(&mut self, wall: i64) -> Result<i64, ZoneError> {
        let Some(zone) = self.zone else {
            return Ok(wall);
        };
        let (ts, second) = zone.to_utc(wall, self.previous)?;
        self.report.local += 1;
        self.report.second_pass += usize::from(second);
        Ok(ts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> i64 {
        timefmt::parse(text).unwrap()
    }

    #[test]
    fn zones_are_iana_names_and_unknown_ones_are_refused_with_examples() {
        assert_eq!(
            LocalZone::parse(" America/New_York ").unwrap().name(),
            "America/New_York"
        );
        assert!(LocalZone::parse("UTC").is_ok());
        let e = LocalZone::parse("America/NewYork").unwrap_err();
        assert_eq!(
            e,
            ZoneError::UnknownZone {
                name: "America/NewYork".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "unknown time zone \"America/NewYork\"; give an IANA name such as America/New_York, \
             America/Chicago, Europe/London or UTC"
        );
        let e = LocalZone::parse(" ").unwrap_err();
        assert_eq!(e, ZoneError::EmptyName);
        assert_eq!(
            e.to_string(),
            "time zone is empty; give an IANA name such as America/New_York"
        );
    }

    #[test]
    fn local_times_become_utc_across_daylight_saving() {
        let ny = LocalZone::parse("America/New_York").unwrap();
        let mut stamps = Timestamps::new(Some(&ny));
        // EST (-05:00) in winter, EDT (-04:00) in summer.
        assert_eq!(
            stamps.text("2024-03-01 09:30:00").unwrap(),
            ts("2024-03-01T14:30:00Z")
        );
        assert_eq!(
            stamps.text("2024-07-01T09:30:00").unwrap(),
            ts("2024-07-01T13:30:00Z")
        );
        // Offsets, Z and dates are not touched by the given zone.
        assert_eq!(
            stamps.text("2024-07-01T09:31:00-04:00").unwrap(),
            ts("2024-07-01T13:31:00Z")
        );
        assert_eq!(stamps.text("2024-07-02").unwrap(), ts("2024-07-02"));
        assert_eq!(stamps.report.local, 2);
        assert_eq!(stamps.report.dates, 1);
        assert_eq!(stamps.report.offsets.get("-04:00"), Some(&1));
        let text = stamps.report.describe();
        assert!(
            text.contains("2 rows local time in America/New_York"),
            "{text}"
        );
        assert!(text.contains("-04:00"), "{text}");
    }

    #[test]
    fn a_repeated_hour_is_read_in_order_and_a_skipped_one_is_refused() {
        let ny = LocalZone::parse("America/New_York").unwrap();
        let mut stamps = Timestamps::new(Some(&ny));
        // 2024-11-03: 01:00–01:59 happens at -04:00, then again at -05:00.
        let got: Vec<i64> = [
            "2024-11-03 00:30:00",
            "2024-11-03 01:30:00",
            "2024-11-03 01:30:00",
            "2024-11-03 02:30:00",
        ]
        .iter()
        .map(|t| stamps.text(t).unwrap())
        .collect();
        let want: Vec<i64> = [
            "2024-11-03T04:30:00Z",
            "2024-11-03T05:30:00Z",
            "2024-11-03T06:30:00Z",
            "2024-11-03T07:30:00Z",
        ]
        .iter()
        .map(|t| ts(t))
        .collect();
        assert_eq!(got, want);
        assert_eq!(stamps.report.second_pass, 1);
        // 2024-03-10 02:30 never happens in New York.
        let e = stamps.text("2024-03-10 02:30:00").unwrap_err();
        assert!(
            matches!(&e, ZoneError::Skipped { zone, before: -18000, after: -14400, .. }
                if zone == "America/New_York"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "local time 2024-03-10 02:30:00 does not exist in America/New_York: clocks went \
             forward from -05:00 to -04:00 (is the time zone right?)"
        );
        // Text that is no timestamp: the timestamp error, unchanged.
        let e = stamps.text("soon").unwrap_err();
        assert!(
            matches!(e, ZoneError::Timestamp(TimestampError::Malformed { .. })),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            timefmt::parse_stated("soon").unwrap_err().to_string()
        );
    }

    #[test]
    fn without_a_zone_naive_text_is_refused_and_naive_parquet_is_utc() {
        let mut stamps = Timestamps::new(None);
        let e = stamps.text(" 2024-03-01 09:30:00 ").unwrap_err();
        assert_eq!(
            e,
            ZoneError::NoZone {
                text: "2024-03-01 09:30:00".into()
            }
        );
        assert_eq!(
            e.to_string(),
            format!("timestamp \"2024-03-01 09:30:00\" has no time zone; {NO_ZONE_REMEDY}")
        );
        assert!(e.to_string().contains("--tz"), "{e}");
        assert_eq!(stamps.naive(5).unwrap(), 5);
        assert_eq!(stamps.report.naive_as_utc, 1);
        assert!(stamps.report.describe().contains("taken as UTC"));
    }

    #[test]
    fn an_unused_zone_is_reported() {
        let ny = LocalZone::parse("America/New_York").unwrap();
        let mut stamps = Timestamps::new(Some(&ny));
        stamps.text("2024-03-01T14:30:00Z").unwrap();
        let text = stamps.report.describe();
        assert!(text.contains("1 row UTC"), "{text}");
        assert!(text.contains("given but unused"), "{text}");
    }
}
