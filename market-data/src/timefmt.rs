//! UTC timestamps as integer nanoseconds since the Unix epoch, and their text
//! forms: `YYYY-MM-DD` (a date: midnight UTC), `YYYY-MM-DDTHH:MM:SS[.fffffffff]`
//! (also with a space instead of `T`) followed by `Z` or a UTC offset
//! (`+00:00`, `-05:00`, `-0500`, `-05`), or a plain integer of nanoseconds.
//! A time with an offset is converted to UTC; a time with neither `Z` nor an
//! offset is refused by [`parse`] and returned as [`Stated::Naive`] by
//! [`parse_stated`], for a reader that knows the file's time zone
//! ([`crate::zones`]).
//! Calendar arithmetic uses the proleptic Gregorian calendar (Howard
//! Hinnant's days-from-civil algorithm), so no time-zone database is needed here.

pub const NANOS_PER_SECOND: i64 = 1_000_000_000;
pub const NANOS_PER_DAY: i64 = 86_400 * NANOS_PER_SECOND;

/// Days since 1970-01-01 of a civil date.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Civil date (year, month, day) of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    (year, month, day)
}

/// Day of week, 0 = Monday … 6 = Sunday.
pub fn weekday(ts: i64) -> u32 {
    (ts.div_euclid(NANOS_PER_DAY) + 3).rem_euclid(7) as u32
}

/// What a timestamp's text said about its time zone.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stated {
    /// `Z` or a zero offset.
    Utc,
    /// A non-zero UTC offset in seconds (east positive), already applied.
    Offset(i32),
    /// A date and time with no zone: the value is the wall-clock time read
    /// as if it were UTC, for the caller to place in a zone.
    Naive,
    /// `YYYY-MM-DD`: midnight UTC of that date (a trading date, not a local time).
    Date,
    /// Integer nanoseconds since the epoch (UTC).
    Nanos,
}

/// Why a timestamp's text was refused. Each variant keeps the text (trimmed);
/// the message quotes it, cut after 60 characters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimestampError {
    /// All digits, but not an `i64` of nanoseconds.
    #[error("timestamp {}: {cause}", crate::excerpt(.text))]
    BadNanos {
        /// The text as read (trimmed).
        text: String,
        /// Why the integer did not parse (too large).
        cause: std::num::ParseIntError,
    },
    /// None of the accepted forms.
    #[error(
        "timestamp {} is not YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS[.f] with Z or a UTC offset \
         (-05:00), or integer nanoseconds",
        crate::excerpt(.text)
    )]
    Malformed {
        /// The text as read (trimmed).
        text: String,
    },
    /// A valid date and time outside what `i64` nanoseconds can hold.
    #[error(
        "timestamp {} is outside the range of i64 nanoseconds (1677-09-21 ..= 2262-04-11)",
        crate::excerpt(.text)
    )]
    OutOfRange {
        /// The text as read (trimmed).
        text: String,
    },
    /// A date and time without `Z` or an offset, where [`parse`] needs one.
    #[error(
        "timestamp {} has no time zone: end it in Z or a UTC offset (+00:00, -05:00)",
        crate::excerpt(.text)
    )]
    NoZone {
        /// The text as read (trimmed).
        text: String,
    },
}

/// Parses one of the accepted forms (see the module docs); a date and time
/// without `Z` or an offset is refused (see [`parse_stated`] to accept it).
pub fn parse(text: &str) -> Result<i64, TimestampError> {
    match parse_stated(text)? {
        (_, Stated::Naive) => Err(TimestampError::NoZone {
            text: text.trim().to_string(),
        }),
        (ts, _) => Ok(ts),
    }
}

/// Parses one of the accepted forms and says how its zone was given. A
/// [`Stated::Naive`] value is the wall-clock time as if UTC.
pub fn parse_stated(text: &str) -> Result<(i64, Stated), TimestampError> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<i64>()
            .map(|ts| (ts, Stated::Nanos))
            .map_err(|cause| TimestampError::BadNanos {
                text: t.to_string(),
                cause,
            });
    }
    let bad = || TimestampError::Malformed {
        text: t.to_string(),
    };
    // Nanoseconds since 1970 in an i64 cover 1677-09-21 ..= 2262-04-11.
    let out_of_range = || TimestampError::OutOfRange {
        text: t.to_string(),
    };
    let (date, time) = match t.find(['T', ' ']) {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let mut parts = date.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let year: i64 = y.parse().map_err(|_| bad())?;
    let month: u32 = m.parse().map_err(|_| bad())?;
    let day: u32 = d.parse().map_err(|_| bad())?;
    if y.len() != 4 || !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(bad());
    }
    let mut nanos = days_from_civil(year, month, day)
        .checked_mul(NANOS_PER_DAY)
        .ok_or_else(out_of_range)?;
    let Some(time) = time else {
        return Ok((nanos, Stated::Date));
    };
    let (time, stated) = split_zone(time).ok_or_else(bad)?;
    let (hms, fraction) = match time.split_once('.') {
        Some((hms, f)) => (hms, Some(f)),
        None => (time, None),
    };
    let fields: Vec<&str> = hms.split(':').collect();
    if fields.len() != 3 {
        return Err(bad());
    }
    // Unsigned: "-1" is not an hour.
    let field = |i: usize| fields[i].parse::<u32>().map(i64::from).map_err(|_| bad());
    let (h, mi, s) = (field(0)?, field(1)?, field(2)?);
    if h > 23 || mi > 59 || s > 59 {
        return Err(bad());
    }
    nanos = nanos
        .checked_add((h * 3600 + mi * 60 + s) * NANOS_PER_SECOND)
        .ok_or_else(out_of_range)?;
    if let Some(f) = fraction {
        if f.is_empty() || f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let padded = format!("{f:0<9}");
        nanos = nanos
            .checked_add(padded.parse::<i64>().map_err(|_| bad())?)
            .ok_or_else(out_of_range)?;
    }
    if let Stated::Offset(seconds) = stated {
        nanos = nanos
            .checked_sub(i64::from(seconds) * NANOS_PER_SECOND)
            .ok_or_else(out_of_range)?;
    }
    Ok((nanos, stated))
}

/// A time of day and what follows it: `Z`, an offset (`±HH:MM`, `±HHMM`,
/// `±HH`, hours 0..=23 and minutes 0..=59), or nothing. `None` when the
/// zone part is malformed.
fn split_zone(time: &str) -> Option<(&str, Stated)> {
    if let Some(rest) = time.strip_suffix('Z') {
        return Some((rest, Stated::Utc));
    }
    // The sign of an offset comes after the time (a leading sign is no time).
    let Some(at) = time.rfind(['+', '-']).filter(|&i| i > 0) else {
        return Some((time, Stated::Naive));
    };
    let (rest, zone) = (&time[..at], &time[at + 1..]);
    let sign = if time.as_bytes()[at] == b'-' { -1 } else { 1 };
    let digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    let (hours, minutes) = match zone.len() {
        2 => (zone, "00"),
        4 => (&zone[..2], &zone[2..]),
        5 if zone.as_bytes()[2] == b':' => (&zone[..2], &zone[3..]),
        _ => return None,
    };
    if !digits(hours) || !digits(minutes) {
        return None;
    }
    let (h, m): (i32, i32) = (hours.parse().ok()?, minutes.parse().ok()?);
    if h > 23 || m > 59 {
        return None;
    }
    let seconds = sign * (h * 3600 + m * 60);
    Some((
        rest,
        if seconds == 0 {
            Stated::Utc
        } else {
            Stated::Offset(seconds)
        },
    ))
}

/// An offset in seconds as `±HH:MM`.
pub fn format_offset(seconds: i32) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let abs = seconds.unsigned_abs();
    format!("{sign}{:02}:{:02}", abs / 3600, (abs / 60) % 60)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fffffffff]Z`, with the fraction only when non-zero.
pub fn format(ts: i64) -> String {
    let days = ts.div_euclid(NANOS_PER_DAY);
    let rest = ts.rem_euclid(NANOS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let secs = rest / NANOS_PER_SECOND;
    let frac = rest % NANOS_PER_SECOND;
    let base = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    );
    if frac == 0 {
        format!("{base}Z")
    } else {
        format!("{base}.{frac:09}Z")
    }
}

/// `YYYY-MM-DD` of a timestamp.
pub fn format_date(ts: i64) -> String {
    let (y, m, d) = civil_from_days(ts.div_euclid(NANOS_PER_DAY));
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_known_values() {
        assert_eq!(parse("1970-01-01").unwrap(), 0);
        assert_eq!(parse("2000-01-01").unwrap(), 946_684_800 * NANOS_PER_SECOND);
        assert_eq!(
            parse("2024-02-29T13:45:01.5Z").unwrap(),
            parse("2024-02-29").unwrap()
                + (13 * 3600 + 45 * 60 + 1) * NANOS_PER_SECOND
                + 500_000_000
        );
        for ts in [
            0,
            1,
            946_684_800_123_456_789,
            -86_400_000_000_001,
            1_700_000_000_000_000_000,
        ] {
            assert_eq!(parse(&format(ts)).unwrap(), ts, "{}", format(ts));
        }
        assert_eq!(parse("123").unwrap(), 123);
        assert_eq!(
            weekday(parse("2026-11-30").unwrap()),
            0,
            "2026-11-30 is a Monday"
        );
        assert_eq!(
            format_date(parse("1999-12-31T23:59:59Z").unwrap()),
            "1999-12-31"
        );
    }

    #[test]
    fn rejects_bad_dates_and_zones() {
        for bad in [
            "2023-02-29",
            "2023-13-01",
            "12/31/2018",
            "2018-12-31T10:00:00",
            "2018-12-31T25:00:00Z",
            "",
            "2018-1-1x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let e = parse("2018-12-31T10:00:00").unwrap_err();
        assert_eq!(
            e,
            TimestampError::NoZone {
                text: "2018-12-31T10:00:00".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "timestamp \"2018-12-31T10:00:00\" has no time zone: end it in Z or a UTC offset \
             (+00:00, -05:00)"
        );
        for bad_zone in [
            "2018-12-31T10:00:00+2",
            "2018-12-31T10:00:00+24:00",
            "2018-12-31T10:00:00+05:60",
            "2018-12-31T10:00:00+05:3",
            "2018-12-31T10:00:00 EST",
            "2018-12-31T10:00:00ZZ",
        ] {
            assert!(parse(bad_zone).is_err(), "{bad_zone}");
        }
        // Found by market-data/tests/hostile_files: these wrapped around silently.
        assert!(parse("2024-01-01T-1:00:00Z").is_err());
        for far in ["9999-12-31", "2262-04-12T00:00:00Z", "1677-09-20"] {
            let e = parse(far).unwrap_err();
            assert_eq!(e, TimestampError::OutOfRange { text: far.into() });
            assert!(e.to_string().contains("outside the range"), "{far}");
        }
        let e = parse(" 12/31/2018 ").unwrap_err();
        assert_eq!(
            e,
            TimestampError::Malformed {
                text: "12/31/2018".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "timestamp \"12/31/2018\" is not YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS[.f] with Z or a UTC \
             offset (-05:00), or integer nanoseconds"
        );
        let e = parse("99999999999999999999").unwrap_err();
        assert!(matches!(e, TimestampError::BadNanos { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "timestamp \"99999999999999999999\": number too large to fit in target type"
        );
        assert!(parse("2262-04-11T23:47:16Z").is_ok());
    }

    #[test]
    fn offsets_are_converted_to_utc() {
        let utc = parse("2024-03-01T14:30:00Z").unwrap();
        for text in [
            "2024-03-01 09:30:00-05:00",
            "2024-03-01T09:30:00-0500",
            "2024-03-01T09:30:00-05",
            "2024-03-01T14:30:00+00:00",
            "2024-03-01T14:30:00-00:00",
            "2024-03-01T20:00:00+05:30",
        ] {
            assert_eq!(parse(text).unwrap(), utc, "{text}");
        }
        assert_eq!(
            parse_stated("2024-03-01 09:30:00.25-05:00").unwrap(),
            (utc + 250_000_000, Stated::Offset(-5 * 3600))
        );
        assert_eq!(
            parse_stated("2024-03-01T14:30:00+00:00").unwrap().1,
            Stated::Utc
        );
        assert_eq!(
            parse_stated("2024-03-01 09:30:00").unwrap(),
            (parse("2024-03-01T09:30:00Z").unwrap(), Stated::Naive)
        );
        assert_eq!(parse_stated("2024-03-01").unwrap().1, Stated::Date);
        assert_eq!(parse_stated("17").unwrap(), (17, Stated::Nanos));
        // An offset crossing midnight moves the date.
        assert_eq!(
            parse("2024-03-01T23:30:00-05:00").unwrap(),
            parse("2024-03-02T04:30:00Z").unwrap()
        );
        // The range check applies after the offset.
        assert!(matches!(
            parse("2262-04-11T23:00:00-05:00"),
            Err(TimestampError::OutOfRange { .. })
        ));
        assert_eq!(format_offset(-5 * 3600), "-05:00");
        assert_eq!(format_offset(5 * 3600 + 1800), "+05:30");
    }
}

/// A time a user writes in a spec or config (a date, an RFC 3339 time with
/// `Z` or an offset, or UTC nanoseconds), held as UTC nanoseconds; written
/// back as nanoseconds, so a spec read and stored reads back the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcTime(pub i64);

impl serde::Serialize for UtcTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(self.0)
    }
}

impl<'de> serde::Deserialize<'de> for UtcTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = UtcTime;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a date (2016-01-04), an RFC 3339 time with Z or an offset, or UTC nanoseconds",
                )
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<UtcTime, E> {
                Ok(UtcTime(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<UtcTime, E> {
                i64::try_from(v)
                    .map(UtcTime)
                    .map_err(|_| E::custom(format!("{v} ns is out of range")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<UtcTime, E> {
                parse(v).map(UtcTime).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod utc_time_tests {
    use super::*;

    #[test]
    fn a_time_is_read_as_a_date_a_time_or_nanoseconds_and_written_as_nanoseconds() {
        let day: UtcTime = serde_json::from_str("\"2016-01-04\"").unwrap();
        assert_eq!(day.0, days_from_civil(2016, 1, 4) * NANOS_PER_DAY);
        let same: UtcTime = serde_json::from_str("\"2016-01-04T00:00:00Z\"").unwrap();
        assert_eq!(same, day);
        let ns: UtcTime = serde_json::from_str(&day.0.to_string()).unwrap();
        assert_eq!(ns, day);
        assert_eq!(serde_json::to_string(&day).unwrap(), day.0.to_string());
        let e = serde_json::from_str::<UtcTime>("\"2016-01-04T10:00:00\"").unwrap_err();
        assert!(e.to_string().contains("2016-01-04T10:00:00"), "{e}");
        assert!(serde_json::from_str::<UtcTime>("true").is_err());
    }
}
