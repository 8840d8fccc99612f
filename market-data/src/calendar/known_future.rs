//! The calendar columns of a bar series: each value is a function of that
//! bar's timestamp, the bar interval and the contract spec alone (never of
//! other bars or of prices), so the columns are known in advance for any
//! future bar. Every value is finite.
//!
//! With D the bar's trading date (see [`super`]) and t its open time:
//!
//! | column | definition |
//! |---|---|
//! | `dow_sin`, `dow_cos` | sin/cos(2π·w/7), w = weekday of D, Monday = 0 |
//! | `month_sin`, `month_cos` | sin/cos(2π·(m − 1)/12), m = month of D |
//! | `tod_sin`, `tod_cos` | sin/cos(2π·c), c = local clock time of t / 24 h (intraday only) |
//! | `minutes_since_open` | (t − open(D)) / L, clamped to [0, 1] (intraday only) |
//! | `minutes_to_close` | (close(D) − t) / L, clamped to [0, 1] (intraday only) |
//! | `session_open_bar` | 1 when the bar [t, t + interval) holds the open of a trading date's session, else 0 (intraday only) |
//! | `session_close_bar` | 1 when D trades and the session's close lies in (t, t + interval], else 0 (intraday only) |
//! | `holiday_next` | 1 when the next weekday after D is a holiday, else 0 |
//! | `half_day` | 1 when D trades and closes early, else 0 |
//! | `days_to_roll` | min(n, 63) / 63, n = trading dates after D up to and including the next roll date (0 on the roll date); only with a roll rule |
//!
//! open(D) and close(D) are the UTC instants of D's session (close(D) is
//! the early close on a half day); L is the length of D's *full* session,
//! so on a half day `minutes_to_close` reaches 0 earlier and
//! `minutes_since_open + minutes_to_close` < 1. Both are computed from the
//! clock even when D does not trade (bars in a holiday's abbreviated
//! session). The open-bar flag uses the trading date of the bar's last
//! instant, so a bar that starts before the open and holds it (an hourly bar
//! at 01:00 for a 01:15 open) is the first bar.
//!
//! Without a roll rule (`roll = "none"`) the `days_to_roll` column is left
//! out rather than filled with a constant; [`ExchangeCalendar::column_names`]
//! lists the columns a calendar produces.

use super::holidays::weekday_of_day;
use super::{ExchangeCalendar, ROLL_SCALE_DAYS};
use crate::table::BarInterval;
use crate::timefmt::{civil_from_days, NANOS_PER_DAY};
use std::collections::HashMap;
use std::f64::consts::TAU;

/// Facts about one trading date, shared by all its bars.
#[derive(Copy, Clone)]
struct DayFacts {
    trading: bool,
    half_day: bool,
    holiday_next: bool,
    days_to_roll: Option<f64>,
    dow_phase: f64,
    month_phase: f64,
    open: i64,
    close: i64,
    full_len: i64,
}

/// Every name a calendar column can have (which ones a calendar gives
/// depends on the bar interval and its roll rule: [`ExchangeCalendar::column_names`]).
pub const KNOWN_FUTURE_NAMES: [&str; 13] = [
    "dow_sin",
    "dow_cos",
    "month_sin",
    "month_cos",
    "tod_sin",
    "tod_cos",
    "minutes_since_open",
    "minutes_to_close",
    "session_open_bar",
    "session_close_bar",
    "holiday_next",
    "half_day",
    "days_to_roll",
];

impl ExchangeCalendar {
    /// The names of the columns [`Self::known_future_features`] returns, in order.
    pub fn column_names(&self, interval: BarInterval) -> Vec<String> {
        // Calendar (4), time of day and session (6, bars under a day), holidays (2), roll (1).
        let mut names = KNOWN_FUTURE_NAMES[..4].to_vec();
        if interval != BarInterval::Day {
            names.extend_from_slice(&KNOWN_FUTURE_NAMES[4..10]);
        }
        names.extend_from_slice(&KNOWN_FUTURE_NAMES[10..12]);
        if self.roll.kind != super::roll_schedule::RollKind::None {
            names.push(KNOWN_FUTURE_NAMES[12]);
        }
        names.into_iter().map(String::from).collect()
    }

    /// The calendar columns of bars opening at `ts` (UTC nanoseconds), as
    /// (name, one value per timestamp); see the module docs.
    pub fn known_future_features(
        &self,
        ts: &[i64],
        interval: BarInterval,
    ) -> Vec<(String, Vec<f64>)> {
        let names = self.column_names(interval);
        let mut columns: Vec<Vec<f64>> = vec![Vec::with_capacity(ts.len()); names.len()];
        let intraday = interval != BarInterval::Day;
        let step = interval.nanos();
        let mut days: HashMap<i64, DayFacts> = HashMap::new();
        let mut facts = |day: i64| *days.entry(day).or_insert_with(|| self.day_facts(day));
        let mut row = Vec::with_capacity(names.len());
        for &t in ts {
            row.clear();
            let day = self.trading_date(t, interval);
            let f = facts(day);
            row.extend([
                (TAU * f.dow_phase).sin(),
                (TAU * f.dow_phase).cos(),
                (TAU * f.month_phase).sin(),
                (TAU * f.month_phase).cos(),
            ]);
            if intraday {
                let (_, clock) = self.local_time(t);
                let phase = clock as f64 / NANOS_PER_DAY as f64;
                let len = f.full_len as f64;
                let since_open = ((t as f64 - f.open as f64) / len).clamp(0.0, 1.0);
                let to_close = ((f.close as f64 - t as f64) / len).clamp(0.0, 1.0);
                let last_instant = t.saturating_add(step - 1);
                let holder = facts(self.trading_date(last_instant, interval));
                let open_bar = holder.trading && t <= holder.open && holder.open <= last_instant;
                let close_bar = f.trading && t < f.close && f.close <= t.saturating_add(step);
                row.extend([
                    (TAU * phase).sin(),
                    (TAU * phase).cos(),
                    since_open,
                    to_close,
                    flag(open_bar),
                    flag(close_bar),
                ]);
            }
            row.extend([flag(f.holiday_next), flag(f.trading && f.half_day)]);
            if let Some(to_roll) = f.days_to_roll {
                row.push(to_roll);
            }
            for (column, &value) in columns.iter_mut().zip(&row) {
                // Finite by construction; a guard rather than a hope.
                column.push(if value.is_finite() { value } else { 0.0 });
            }
        }
        names.into_iter().zip(columns).collect()
    }

    fn day_facts(&self, day: i64) -> DayFacts {
        let (_, month, _) = civil_from_days(day);
        let mut next_weekday = day + 1;
        while weekday_of_day(next_weekday) >= 5 {
            next_weekday += 1;
        }
        DayFacts {
            trading: self.is_trading_day(day),
            half_day: self.is_half_day(day),
            holiday_next: self.is_holiday(next_weekday),
            days_to_roll: self
                .trading_days_to_roll(day)
                .map(|n| f64::from(n).min(ROLL_SCALE_DAYS) / ROLL_SCALE_DAYS),
            dow_phase: f64::from(weekday_of_day(day)) / 7.0,
            month_phase: f64::from(month - 1) / 12.0,
            open: self.open_utc(day),
            close: self.close_utc(day),
            full_len: self.full_session_nanos(day),
        }
    }
}

fn flag(on: bool) -> f64 {
    if on {
        1.0
    } else {
        0.0
    }
}
