//! Exchange holiday calendars, computed by rule (no tables of dates).
//!
//! The `cme` calendar follows the holiday rules CME Group publishes for its
//! US equity-index, interest-rate, FX, energy and metals futures each year
//! ("CME Group Holiday Calendar"), which are the NYSE's market holidays
//! (NYSE Rule 7.2, "Holidays"): the exchange is closed on
//!
//! * New Year's Day, 1 January; on a Sunday it is observed Monday 2 January;
//!   on a Saturday it is not observed (the Friday before is a year-end
//!   trading day);
//! * Martin Luther King Jr. Day, the third Monday of January (from 1998);
//! * Presidents' Day (Washington's Birthday), the third Monday of February;
//! * Good Friday, two days before Easter Sunday (Gregorian computus);
//! * Memorial Day, the last Monday of May;
//! * Juneteenth, 19 June (from 2022);
//! * Independence Day, 4 July;
//! * Labor Day, the first Monday of September;
//! * Thanksgiving Day, the fourth Thursday of November;
//! * Christmas Day, 25 December.
//!
//! A fixed-date holiday (except New Year's Day, above) that falls on a
//! Saturday is observed the Friday before, on a Sunday the Monday after.
//!
//! Early closes (half days: the exchange closes at the contract's
//! `early_close`) are the day after Thanksgiving, Christmas Eve (24 December)
//! when it falls Monday to Thursday, and 3 July when it falls Monday to
//! Thursday (the day before Independence Day).
//!
//! What the calendar does **not** know: special closures announced at the
//! time (2001-09-11 to 2001-09-14, Hurricane Sandy 2012-10-29 and -30,
//! national days of mourning such as 2004-06-11, 2007-01-02, 2018-12-05,
//! 2025-01-09) and one-off schedule changes. Those days count as trading
//! days, so data without them shows gaps there. CME Globex also trades
//! abbreviated sessions on some holidays (e.g. MLK Day until 12:00 CT);
//! here a holiday is a day without a session of its own, and bars in such an
//! abbreviated session are extra bars, never a gap.
//!
//! Days are `i64` counts since 1970-01-01 (see [`crate::timefmt`]).

use super::CalendarError;
use crate::timefmt::{civil_from_days, days_from_civil};

/// Day of week of a day count, 0 = Monday … 6 = Sunday.
pub fn weekday_of_day(day: i64) -> u32 {
    (day + 3).rem_euclid(7) as u32
}

/// Whether a day count is a Saturday or Sunday.
pub fn is_weekend(day: i64) -> bool {
    weekday_of_day(day) >= 5
}

/// A holiday calendar by name (`holidays = "…"` in a contract spec).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HolidayCalendar {
    /// No holidays: every weekday trades, none closes early.
    None,
    /// CME Group / NYSE rules (see the module docs).
    Cme,
}

impl HolidayCalendar {
    pub const NAMES: &'static str = "\"cme\" or \"none\"";

    pub fn parse(name: &str) -> Result<Self, CalendarError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "cme" => Ok(Self::Cme),
            "none" => Ok(Self::None),
            _ => Err(CalendarError::UnknownHolidays {
                name: name.to_string(),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Cme => "cme",
        }
    }

    /// The holiday on `day`, if the exchange is closed for one (weekends are
    /// not holidays; they are simply not trading days).
    pub fn holiday(self, day: i64) -> Option<&'static str> {
        match self {
            Self::None => None,
            Self::Cme => cme_holiday(day),
        }
    }

    pub fn is_holiday(self, day: i64) -> bool {
        self.holiday(day).is_some()
    }

    /// Whether `day` is a trading day that closes early.
    pub fn is_early_close(self, day: i64) -> bool {
        match self {
            Self::None => false,
            Self::Cme => cme_early_close(day),
        }
    }
}

/// The `n`-th (1-based) `weekday` (0 = Monday) of a month, as a day count.
fn nth_weekday(year: i64, month: u32, weekday: u32, n: i64) -> i64 {
    let first = days_from_civil(year, month, 1);
    let offset = (weekday as i64 - weekday_of_day(first) as i64).rem_euclid(7);
    first + offset + 7 * (n - 1)
}

/// The last `weekday` (0 = Monday) of a month, as a day count.
fn last_weekday(year: i64, month: u32, weekday: u32) -> i64 {
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    let last = days_from_civil(next_year, next_month, 1) - 1;
    last - (weekday_of_day(last) as i64 - weekday as i64).rem_euclid(7)
}

/// The third Friday of a month (equity-index futures expiry), as a day count.
pub fn third_friday(year: i64, month: u32) -> i64 {
    nth_weekday(year, month, 4, 3)
}

/// Easter Sunday of a year (Gregorian calendar), as a day count: the
/// anonymous Gregorian computus (Meeus/Jones/Butcher).
pub fn easter_sunday(year: i64) -> i64 {
    let a = year % 19;
    let b = year / 100;
    let c = year % 100;
    let d = b / 4;
    let e = b % 4;
    let f = (b + 8) / 25;
    let g = (b - f + 1) / 3;
    let h = (19 * a + b - d - g + 15) % 30;
    let i = c / 4;
    let k = c % 4;
    let l = (32 + 2 * e + 2 * i - h - k) % 7;
    let m = (a + 11 * h + 22 * l) / 451;
    let month = (h + l - 7 * m + 114) / 31;
    let day = (h + l - 7 * m + 114) % 31 + 1;
    days_from_civil(year, month as u32, day as u32)
}

/// The day a fixed-date holiday is observed: Saturday → Friday before,
/// Sunday → Monday after.
fn observed(year: i64, month: u32, day: u32) -> i64 {
    let date = days_from_civil(year, month, day);
    match weekday_of_day(date) {
        5 => date - 1,
        6 => date + 1,
        _ => date,
    }
}

fn cme_holiday(day: i64) -> Option<&'static str> {
    if is_weekend(day) {
        return None;
    }
    let (year, month, _) = civil_from_days(day);
    let is = |date: i64| date == day;
    match month {
        1 => {
            let new_year = days_from_civil(year, 1, 1);
            // Saturday: not observed (NYSE Rule 7.2); Sunday: Monday 2 January.
            if is(new_year) || (weekday_of_day(new_year) == 6 && is(new_year + 1)) {
                Some("New Year's Day")
            } else if year >= 1998 && is(nth_weekday(year, 1, 0, 3)) {
                Some("Martin Luther King Jr. Day")
            } else {
                None
            }
        }
        2 => is(nth_weekday(year, 2, 0, 3)).then_some("Presidents' Day"),
        3 | 4 => is(easter_sunday(year) - 2).then_some("Good Friday"),
        5 => is(last_weekday(year, 5, 0)).then_some("Memorial Day"),
        6 => (year >= 2022 && is(observed(year, 6, 19))).then_some("Juneteenth"),
        7 => is(observed(year, 7, 4)).then_some("Independence Day"),
        9 => is(nth_weekday(year, 9, 0, 1)).then_some("Labor Day"),
        11 => is(nth_weekday(year, 11, 3, 4)).then_some("Thanksgiving Day"),
        12 => is(observed(year, 12, 25)).then_some("Christmas Day"),
        _ => None,
    }
}

fn cme_early_close(day: i64) -> bool {
    if is_weekend(day) || cme_holiday(day).is_some() {
        return false;
    }
    let (year, month, date) = civil_from_days(day);
    let monday_to_thursday = weekday_of_day(day) <= 3;
    match (month, date) {
        (7, 3) | (12, 24) => monday_to_thursday,
        (11, _) => day == nth_weekday(year, 11, 3, 4) + 1,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> i64 {
        crate::timefmt::parse(text).unwrap() / crate::timefmt::NANOS_PER_DAY
    }

    #[test]
    fn calendar_names_parse_and_unknown_ones_are_refused() {
        assert_eq!(HolidayCalendar::parse(" CME "), Ok(HolidayCalendar::Cme));
        assert_eq!(HolidayCalendar::parse("none"), Ok(HolidayCalendar::None));
        let e = HolidayCalendar::parse("nyse").unwrap_err();
        assert_eq!(
            e,
            CalendarError::UnknownHolidays {
                name: "nyse".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "is not a known holiday calendar (\"cme\" or \"none\")"
        );
    }

    #[test]
    fn easter_is_right_for_known_years() {
        for (year, date) in [
            (1999, "1999-04-04"),
            (2000, "2000-04-23"),
            (2008, "2008-03-23"),
            (2011, "2011-04-24"),
            (2019, "2019-04-21"),
            (2024, "2024-03-31"),
            (2025, "2025-04-20"),
            (2038, "2038-04-25"),
        ] {
            assert_eq!(easter_sunday(year), day(date), "{year}");
        }
    }

    #[test]
    fn cme_holidays_and_observance() {
        let cme = HolidayCalendar::Cme;
        for (date, name) in [
            ("2024-01-01", "New Year's Day"),
            ("2023-01-02", "New Year's Day"), // 1 January a Sunday
            ("2024-01-15", "Martin Luther King Jr. Day"),
            ("2024-02-19", "Presidents' Day"),
            ("2024-03-29", "Good Friday"),
            ("2008-03-21", "Good Friday"),
            ("2024-05-27", "Memorial Day"),
            ("2022-06-20", "Juneteenth"), // 19 June a Sunday
            ("2024-06-19", "Juneteenth"),
            ("2021-07-05", "Independence Day"), // 4 July a Sunday
            ("2020-07-03", "Independence Day"), // 4 July a Saturday
            ("2024-07-04", "Independence Day"),
            ("2024-09-02", "Labor Day"),
            ("2024-11-28", "Thanksgiving Day"),
            ("2021-12-24", "Christmas Day"), // 25 December a Saturday
            ("2022-12-26", "Christmas Day"), // 25 December a Sunday
            ("2024-12-25", "Christmas Day"),
        ] {
            assert_eq!(cme.holiday(day(date)), Some(name), "{date}");
        }
        for date in [
            "2021-06-18", // Juneteenth before 2022 (19 June 2021 a Saturday)
            "2021-12-31", // New Year's Day 2022 a Saturday: not observed
            "2024-11-29", // half day, not a holiday
            "2024-07-05",
            "2024-03-28",
            "1997-01-20", // MLK Day before 1998
            "2024-06-15", // a Saturday
        ] {
            assert_eq!(cme.holiday(day(date)), None, "{date}");
        }
        assert_eq!(HolidayCalendar::None.holiday(day("2024-12-25")), None);
    }

    #[test]
    fn cme_early_closes() {
        let cme = HolidayCalendar::Cme;
        for date in [
            "2024-11-29",
            "2024-12-24",
            "2024-07-03",
            "2023-07-03",
            "2019-12-24",
        ] {
            assert!(cme.is_early_close(day(date)), "{date}");
        }
        for date in [
            "2021-12-24", // the observed Christmas holiday
            "2020-07-02", // 3 July 2020 is the observed holiday
            "2022-07-01", // 3 July 2022 a Sunday
            "2024-11-28",
            "2024-12-23",
            "2024-12-31",
        ] {
            assert!(!cme.is_early_close(day(date)), "{date}");
        }
    }

    #[test]
    fn weekday_helpers() {
        assert_eq!(weekday_of_day(day("2026-11-30")), 0);
        assert_eq!(third_friday(2024, 3), day("2024-03-15"));
        assert_eq!(third_friday(2024, 6), day("2024-06-21"));
        assert_eq!(last_weekday(2024, 5, 0), day("2024-05-27"));
        assert_eq!(nth_weekday(2024, 11, 3, 4), day("2024-11-28"));
    }
}
