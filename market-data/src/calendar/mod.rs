//! The exchange calendar of a contract: local exchange time (IANA zone,
//! DST included), daily session hours, holidays and half days, and roll
//! dates, all from the contract spec. Everything here is a function of a
//! timestamp and the spec alone, so its columns are *known-future* inputs:
//! they are known for any future bar before it happens.
//!
//! * [`holidays`]: holiday calendars by rule (`cme`, `none`), Easter.
//! * [`session`]: session hours, UTC ↔ local time.
//! * [`roll_schedule`]: roll rules (`quarterly`, `monthly`, `none`).
//! * [`known_future`]: the calendar columns ([`ExchangeCalendar::known_future_features`]).
//!
//! **Trading date.** A session belongs to a trading date D, a weekday that
//! is not a holiday. A Globex-style session (close at or before open, e.g.
//! `17:00`–`16:00` America/Chicago) opens at the open time on D − 1 and
//! closes on D: a bar at 17:30 CT on Wednesday belongs to Thursday's
//! session, and Monday's session opens Sunday evening. The trading date of
//! an intraday bar is read off the local clock: D = the local date, plus
//! one day when the session is overnight and the local time is at or after
//! the open. The trading date of a **daily** bar is the UTC calendar date of
//! its timestamp (Databento's `ohlcv-1d` and the bundled samples stamp a
//! trading day at 00:00 UTC of that date).
//!
//! **Defaults by exchange** (when the spec leaves a key out): CME, CBOT,
//! NYMEX, COMEX and CME Globex: `America/Chicago`, session `17:00`–`16:00`,
//! holidays `cme`; EUREX: `Europe/Berlin`; ICE: `America/New_York`;
//! anything else: `UTC`. Outside CME Group the default session is the whole
//! local day (`00:00`–`24:00`) and the default holiday calendar `none`. With
//! the `cme` holidays the early close defaults to `12:00` (`early_close =
//! "none"`: no half days). The roll rule defaults to `none`.

pub mod holidays;
pub mod known_future;
pub mod roll_schedule;
pub mod session;
pub use known_future::KNOWN_FUTURE_NAMES;

use crate::contracts::ContractSpec;
use crate::table::BarInterval;
use crate::timefmt::NANOS_PER_DAY;
use crate::DataError;
use holidays::{is_weekend, HolidayCalendar};
use jiff::tz::TimeZone;
use roll_schedule::{RollKind, RollSchedule};
use session::{parse_hhmm, to_local, to_utc, SessionHours};

/// Why a calendar key of a contract spec was refused: a holiday calendar or
/// roll rule name, expiry months, session times. The message names the key
/// where the value alone does not; [`ExchangeCalendar::for_contract`]
/// prefixes the contract.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// A holiday calendar name other than [`HolidayCalendar::NAMES`].
    #[error("is not a known holiday calendar ({})", HolidayCalendar::NAMES)]
    UnknownHolidays {
        /// The name given.
        name: String,
    },
    /// A roll rule name other than [`RollKind::NAMES`].
    #[error("is not a known roll rule ({})", RollKind::NAMES)]
    UnknownRoll {
        /// The name given.
        name: String,
    },
    /// A character of `expiry_months` that is no CME month code.
    #[error(
        "expiry_months {months:?}: {code:?} is not a month code (one of {})",
        roll_schedule::MONTH_CODES
    )]
    NotAMonthCode {
        /// The `expiry_months` value.
        months: String,
        /// The offending character.
        code: char,
    },
    /// `expiry_months` lists no month.
    #[error(
        "expiry_months {months:?} must list at least one month code ({})",
        roll_schedule::MONTH_CODES
    )]
    NoMonths {
        /// The `expiry_months` value.
        months: String,
    },
    /// `roll_days_before_expiry` above 60.
    #[error("roll_days_before_expiry {days} must be at most 60")]
    RollTooEarly {
        /// The days given.
        days: u32,
    },
    /// Not a local time `HH:MM`.
    #[error(
        "{text:?} is not a local time HH:MM (00:00-23:59{})",
        if *.allow_midnight_end { " or 24:00" } else { "" }
    )]
    NotATime {
        /// The text given.
        text: String,
        /// Whether `24:00` was allowed (a close).
        allow_midnight_end: bool,
    },
    /// An early close outside the session or not before its close.
    #[error(
        "early_close {:?} must lie inside the session {}-{}, before its close",
        session::format_hhmm(*.early_close),
        session::format_hhmm(*.open),
        session::format_hhmm(*.close)
    )]
    EarlyCloseOutsideSession {
        /// The early close, minutes after midnight.
        early_close: u32,
        /// The session open, minutes after midnight.
        open: u32,
        /// The session close, minutes after midnight.
        close: u32,
    },
}

/// `days_to_roll` is trading days to the next roll divided by this (about a
/// quarter of trading days) and capped at 1.
pub const ROLL_SCALE_DAYS: f64 = 63.0;

/// The calendar of one contract (see the module docs).
#[derive(Clone, Debug)]
pub struct ExchangeCalendar {
    root: String,
    timezone: String,
    tz: TimeZone,
    hours: SessionHours,
    holidays: HolidayCalendar,
    roll: RollSchedule,
}

/// Whether an exchange name is part of CME Group (one calendar and Globex hours).
fn is_cme_group(exchange: &str) -> bool {
    matches!(
        exchange.trim().to_ascii_uppercase().as_str(),
        "CME" | "CBOT" | "NYMEX" | "COMEX" | "CME GLOBEX" | "GLOBEX"
    )
}

/// The time zone an exchange trades in, when the spec names none.
pub fn default_timezone(exchange: &str) -> &'static str {
    if is_cme_group(exchange) {
        return "America/Chicago";
    }
    match exchange.trim().to_ascii_uppercase().as_str() {
        "EUREX" => "Europe/Berlin",
        "ICE" | "ICE US" | "ICE FUTURES US" => "America/New_York",
        _ => "UTC",
    }
}

impl ExchangeCalendar {
    /// The calendar of a contract; errors name the contract and the key.
    pub fn for_contract(spec: &ContractSpec) -> Result<Self, DataError> {
        Self::parse(spec).map_err(|e| DataError::Contract(format!("contract {e}")))
    }

    /// Parses and checks the calendar keys of a spec. The error starts
    /// with the root and names the key (`ES: session_open "25:00" …`).
    pub(crate) fn parse(spec: &ContractSpec) -> Result<Self, String> {
        let root = &spec.root;
        let cme = is_cme_group(&spec.exchange);
        let timezone = spec
            .timezone
            .as_deref()
            .unwrap_or_else(|| default_timezone(&spec.exchange))
            .trim()
            .to_string();
        let tz = TimeZone::get(&timezone).map_err(|_| {
            format!(
                "{root}: timezone {timezone:?} is not an IANA time zone name \
                 (e.g. America/Chicago, Europe/Berlin, UTC)"
            )
        })?;
        let (open, close) = match (&spec.session_open, &spec.session_close) {
            (Some(open), Some(close)) => (
                parse_hhmm(open, false).map_err(|e| format!("{root}: session_open {e}"))?,
                parse_hhmm(close, true).map_err(|e| format!("{root}: session_close {e}"))?,
            ),
            (None, None) if cme => (17 * 60, 16 * 60),
            (None, None) => (0, 24 * 60),
            _ => {
                return Err(format!(
                    "{root}: session_open and session_close must be given together \
                     (local times HH:MM, e.g. \"17:00\" and \"16:00\")"
                ))
            }
        };
        let holidays = match &spec.holidays {
            Some(name) => HolidayCalendar::parse(name)
                .map_err(|e| format!("{root}: holidays {name:?} {e}"))?,
            None if cme => HolidayCalendar::Cme,
            None => HolidayCalendar::None,
        };
        let early_close = match spec.early_close.as_deref().map(str::trim) {
            Some("none") => None,
            Some(text) => {
                Some(parse_hhmm(text, false).map_err(|e| format!("{root}: early_close {e}"))?)
            }
            None if holidays == HolidayCalendar::Cme => Some(12 * 60),
            None => None,
        };
        let hours =
            SessionHours::new(open, close, early_close).map_err(|e| format!("{root}: {e}"))?;
        let kind = match &spec.roll {
            Some(name) => {
                RollKind::parse(name).map_err(|e| format!("{root}: roll {name:?} {e}"))?
            }
            None => RollKind::None,
        };
        if kind == RollKind::None
            && (spec.expiry_months.is_some() || spec.roll_days_before_expiry.is_some())
        {
            return Err(format!(
                "{root}: expiry_months and roll_days_before_expiry need a roll rule \
                 (roll = {})",
                RollKind::NAMES
            ));
        }
        let months = spec
            .expiry_months
            .as_deref()
            .unwrap_or(kind.default_months());
        let days = spec
            .roll_days_before_expiry
            .unwrap_or(kind.default_days_before_expiry());
        let roll = RollSchedule::new(kind, months, days).map_err(|e| format!("{root}: {e}"))?;
        Ok(Self {
            root: root.clone(),
            timezone,
            tz,
            hours,
            holidays,
            roll,
        })
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// The IANA time zone name.
    pub fn timezone(&self) -> &str {
        &self.timezone
    }

    pub fn session_hours(&self) -> &SessionHours {
        &self.hours
    }

    pub fn holiday_calendar(&self) -> HolidayCalendar {
        self.holidays
    }

    pub fn roll_schedule(&self) -> &RollSchedule {
        &self.roll
    }

    /// Whether a day (count since 1970-01-01) is a trading date: a weekday
    /// that is not a holiday.
    pub fn is_trading_day(&self, day: i64) -> bool {
        !is_weekend(day) && !self.holidays.is_holiday(day)
    }

    /// Whether a day is a holiday of the calendar.
    pub fn is_holiday(&self, day: i64) -> bool {
        self.holidays.is_holiday(day)
    }

    /// Whether a trading date closes early (at `early_close`).
    pub fn is_half_day(&self, day: i64) -> bool {
        self.hours.early_close.is_some() && self.holidays.is_early_close(day)
    }

    /// Local wall-clock time of a timestamp: (day count, nanoseconds after
    /// local midnight).
    pub fn local_time(&self, ts: i64) -> (i64, i64) {
        to_local(&self.tz, ts)
    }

    /// The trading date (day count) a bar belongs to (see the module docs).
    pub fn trading_date(&self, ts: i64, interval: BarInterval) -> i64 {
        if interval == BarInterval::Day {
            return ts.div_euclid(NANOS_PER_DAY);
        }
        let (day, clock) = self.local_time(ts);
        let open = i64::from(self.hours.open) * 60 * crate::timefmt::NANOS_PER_SECOND;
        if self.hours.overnight() && clock >= open {
            day + 1
        } else {
            day
        }
    }

    /// The UTC instant the session of trading date `day` opens (whether or
    /// not `day` trades).
    pub fn open_utc(&self, day: i64) -> i64 {
        let open_day = if self.hours.overnight() { day - 1 } else { day };
        to_utc(&self.tz, open_day, self.hours.open)
    }

    /// The UTC instant the session of `day` closes: early on a half day.
    pub fn close_utc(&self, day: i64) -> i64 {
        let close = match self.hours.early_close {
            Some(early) if self.holidays.is_early_close(day) => early,
            _ => self.hours.close,
        };
        to_utc(&self.tz, day, close)
    }

    /// The length of a full (not early-closing) session of `day`, in
    /// nanoseconds of real time.
    pub fn full_session_nanos(&self, day: i64) -> i64 {
        (to_utc(&self.tz, day, self.hours.close) - self.open_utc(day)).max(1)
    }

    /// The session of a trading date as UTC [open, close); `None` on
    /// weekends and holidays.
    pub fn session(&self, day: i64) -> Option<(i64, i64)> {
        self.is_trading_day(day)
            .then(|| (self.open_utc(day), self.close_utc(day)))
    }

    /// The first roll date on or after `day`; `None` without a roll rule.
    pub fn next_roll(&self, day: i64) -> Option<i64> {
        self.roll
            .next_roll_on_or_after(day, &|d| self.is_trading_day(d))
    }

    /// Trading dates after `day` up to and including the next roll date
    /// (0 on a roll date); `None` without a roll rule.
    pub fn trading_days_to_roll(&self, day: i64) -> Option<u32> {
        let roll = self.next_roll(day)?;
        Some((day + 1..=roll).filter(|&d| self.is_trading_day(d)).count() as u32)
    }

    /// Whether at least one whole bar the exchange would normally trade is
    /// missing strictly between the bars at `prev_ts` and `ts`. Daily: a
    /// trading date between the two bars' trading dates. Intraday: a bar
    /// start `prev_ts + k·interval` (k ≥ 1) before `ts` that lies inside a
    /// trading date's session [open, close). Weekends, holidays, the time
    /// after an early close and the daily break between sessions are not
    /// gaps. Special closures the calendar does not know (see
    /// [`holidays`]) are, and so are intraday bars a data vendor leaves out
    /// because nothing traded.
    pub fn gap_before(&self, prev_ts: i64, ts: i64, interval: BarInterval) -> bool {
        if ts <= prev_ts {
            return false;
        }
        if interval == BarInterval::Day {
            let (from, to) = (
                self.trading_date(prev_ts, interval),
                self.trading_date(ts, interval),
            );
            return (from + 1..to).any(|d| self.is_trading_day(d));
        }
        let step = interval.nanos();
        let Some(first) = prev_ts.checked_add(step) else {
            return false;
        };
        if first >= ts {
            return false;
        }
        let (from, to) = (
            self.trading_date(first, interval),
            self.trading_date(ts - 1, interval),
        );
        (from..=to).any(|day| {
            let Some((open, close)) = self.session(day) else {
                return false;
            };
            let lo = open.max(first);
            let hi = close.min(ts);
            if lo >= hi {
                return false;
            }
            // The first bar start on the grid prev_ts + k·step at or after lo.
            let k = (lo - first + step - 1).div_euclid(step);
            first + k * step < hi
        })
    }
}

#[cfg(test)]
mod tests;
