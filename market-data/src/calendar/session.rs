//! Session hours in the exchange's local time, and the conversions between
//! UTC nanoseconds and local (day, time of day) through the IANA time zone.
//!
//! A session belongs to a *trading date* D. When the close is after the
//! open (`01:15`–`22:00`), the session runs on D itself. When the close is
//! at or before the open (Globex `17:00`–`16:00`), it opens the evening
//! before, at the open time on D − 1, and closes on D; so Monday's session
//! opens on Sunday evening. Trading dates are Monday to Friday that are not
//! holidays. `24:00` is accepted as a close (a session to local midnight).

use super::CalendarError;
use crate::timefmt::{civil_from_days, days_from_civil, NANOS_PER_DAY, NANOS_PER_SECOND};
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::Timestamp;

const NANOS_PER_MINUTE: i64 = 60 * NANOS_PER_SECOND;

/// Parses `HH:MM` (24-hour clock) into minutes after midnight; `24:00` only
/// when `allow_midnight_end`.
pub fn parse_hhmm(text: &str, allow_midnight_end: bool) -> Result<u32, CalendarError> {
    let bad = || CalendarError::NotATime {
        text: text.to_string(),
        allow_midnight_end,
    };
    let (h, m) = text.trim().split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 {
        return Err(bad());
    }
    let h: u32 = h.parse().map_err(|_| bad())?;
    let m: u32 = m.parse().map_err(|_| bad())?;
    match (h, m) {
        (24, 0) if allow_midnight_end => Ok(24 * 60),
        (0..=23, 0..=59) => Ok(h * 60 + m),
        _ => Err(bad()),
    }
}

/// `HH:MM` of minutes after midnight.
pub fn format_hhmm(minutes: u32) -> String {
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// Daily session hours, local time, in minutes after midnight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionHours {
    pub open: u32,
    /// Up to 24 × 60.
    pub close: u32,
    /// The close on half days (early-close days), if any.
    pub early_close: Option<u32>,
}

impl SessionHours {
    /// Checks the hours: the open is not `24:00`, a same-day session is
    /// not empty, and an early close lies strictly inside the session.
    /// Errors name the key.
    pub fn new(open: u32, close: u32, early_close: Option<u32>) -> Result<Self, CalendarError> {
        let hours = Self {
            open,
            close,
            early_close,
        };
        if let Some(early) = early_close {
            let inside = if hours.overnight() {
                early < close
            } else {
                open < early && early < close
            };
            if !inside {
                return Err(CalendarError::EarlyCloseOutsideSession {
                    early_close: early,
                    open,
                    close,
                });
            }
        }
        Ok(hours)
    }

    /// Whether the session opens the evening before its trading date.
    pub fn overnight(&self) -> bool {
        self.close <= self.open
    }
}

/// Local wall-clock time of a UTC timestamp: (day count, nanoseconds after
/// local midnight by the clock).
pub fn to_local(tz: &TimeZone, ts: i64) -> (i64, i64) {
    let Ok(instant) = Timestamp::from_nanosecond(i128::from(ts)) else {
        // Outside jiff's range (cannot happen for i64 nanoseconds): UTC.
        return (ts.div_euclid(NANOS_PER_DAY), ts.rem_euclid(NANOS_PER_DAY));
    };
    let dt = tz.to_datetime(instant);
    let day = days_from_civil(i64::from(dt.year()), dt.month() as u32, dt.day() as u32);
    let clock =
        (i64::from(dt.hour()) * 3600 + i64::from(dt.minute()) * 60 + i64::from(dt.second()))
            * NANOS_PER_SECOND
            + i64::from(dt.subsec_nanosecond());
    (day, clock)
}

/// The UTC instant of local `minutes` after midnight of `day` (`24:00` is
/// midnight of the next day). A local time skipped by a DST change maps
/// forward by the change and a repeated one to its first occurrence (the
/// "compatible" rule); no exchange session boundary falls on either.
pub fn to_utc(tz: &TimeZone, day: i64, minutes: u32) -> i64 {
    let (day, minutes) = if minutes >= 24 * 60 {
        (day + 1, minutes - 24 * 60)
    } else {
        (day, minutes)
    };
    let (year, month, date) = civil_from_days(day);
    let utc_guess = day * NANOS_PER_DAY + i64::from(minutes) * NANOS_PER_MINUTE;
    let Ok(year) = i16::try_from(year) else {
        return utc_guess;
    };
    let local = DateTime::new(
        year,
        month as i8,
        date as i8,
        (minutes / 60) as i8,
        (minutes % 60) as i8,
        0,
        0,
    );
    match local.and_then(|dt| tz.to_ambiguous_timestamp(dt).compatible()) {
        Ok(instant) => i64::try_from(instant.as_nanosecond()).unwrap_or(utc_guess),
        Err(_) => utc_guess,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hhmm_parses_and_refuses() {
        assert_eq!(parse_hhmm("17:00", false), Ok(17 * 60));
        assert_eq!(parse_hhmm("01:15", false), Ok(75));
        assert_eq!(parse_hhmm("24:00", true), Ok(1440));
        for bad in ["24:00", "7:00", "17:60", "25:00", "17", "ab:cd", ""] {
            assert_eq!(
                parse_hhmm(bad, false),
                Err(CalendarError::NotATime {
                    text: bad.into(),
                    allow_midnight_end: false
                }),
                "{bad}"
            );
        }
        assert_eq!(
            parse_hhmm("7:00", false).map_err(|e| e.to_string()),
            Err("\"7:00\" is not a local time HH:MM (00:00-23:59)".to_string())
        );
        assert_eq!(
            parse_hhmm("24:01", true).map_err(|e| e.to_string()),
            Err("\"24:01\" is not a local time HH:MM (00:00-23:59 or 24:00)".to_string())
        );
        assert_eq!(format_hhmm(75), "01:15");
    }

    #[test]
    fn early_close_must_be_inside_the_session() {
        assert!(SessionHours::new(17 * 60, 16 * 60, Some(12 * 60 + 15)).is_ok());
        let e = SessionHours::new(17 * 60, 16 * 60, Some(16 * 60 + 30)).unwrap_err();
        assert_eq!(
            e,
            CalendarError::EarlyCloseOutsideSession {
                early_close: 16 * 60 + 30,
                open: 17 * 60,
                close: 16 * 60
            }
        );
        assert_eq!(
            e.to_string(),
            "early_close \"16:30\" must lie inside the session 17:00-16:00, before its close"
        );
        assert!(SessionHours::new(75, 22 * 60, Some(60)).is_err());
        assert!(SessionHours::new(75, 22 * 60, Some(14 * 60)).is_ok());
        assert!(SessionHours::new(17 * 60, 16 * 60, None)
            .unwrap()
            .overnight());
        assert!(!SessionHours::new(0, 1440, None).unwrap().overnight());
    }
}
