//! Roll rules: when a continuous series customarily moves from the expiring
//! contract to the next one. A roll date is a trading date; everything is
//! a function of the calendar alone (known in advance).
//!
//! * `quarterly`: the contract of each expiry month expires on the third
//!   Friday of that month (the preceding trading day when that Friday is a
//!   holiday); the roll is `roll_days_before_expiry` calendar days earlier
//!   (default 8: CME Group's published convention for its equity-index
//!   futures, "roll the expiring quarterly contract eight calendar days
//!   before it expires"; this gives the Thursday of the week before expiry).
//! * `monthly`: NYMEX WTI crude oil (CL): the contract of month M stops
//!   trading three business days before the 25th calendar day of month
//!   M − 1, or four business days before it when the 25th is not a business
//!   day (NYMEX rulebook, chapter 200). The roll is
//!   `roll_days_before_expiry` calendar days earlier (default 5, a common
//!   practice rather than an exchange rule).
//! * `none`: no roll dates (no `days_to_roll` column).
//!
//! A roll date that is not a trading day moves to the trading day before.

use super::holidays::third_friday;
use super::CalendarError;
use crate::timefmt::{civil_from_days, days_from_civil};

/// CME month codes, January … December.
pub const MONTH_CODES: &str = "FGHJKMNQUVXZ";

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RollKind {
    None,
    Quarterly,
    Monthly,
}

impl RollKind {
    pub const NAMES: &'static str = "\"quarterly\", \"monthly\" or \"none\"";

    pub fn parse(name: &str) -> Result<Self, CalendarError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "quarterly" => Ok(Self::Quarterly),
            "monthly" => Ok(Self::Monthly),
            "none" => Ok(Self::None),
            _ => Err(CalendarError::UnknownRoll {
                name: name.to_string(),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Quarterly => "quarterly",
            Self::Monthly => "monthly",
        }
    }

    /// Expiry months when the spec gives none.
    pub fn default_months(self) -> &'static str {
        match self {
            Self::None => "",
            Self::Quarterly => "HMUZ",
            Self::Monthly => MONTH_CODES,
        }
    }

    /// Calendar days from roll to expiry when the spec gives none.
    pub fn default_days_before_expiry(self) -> u32 {
        match self {
            Self::None => 0,
            Self::Quarterly => 8,
            Self::Monthly => 5,
        }
    }
}

/// A parsed roll rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollSchedule {
    pub kind: RollKind,
    /// Which contract months are listed, January = bit 0.
    months: u16,
    pub days_before_expiry: u32,
}

impl RollSchedule {
    pub fn none() -> Self {
        Self {
            kind: RollKind::None,
            months: 0,
            days_before_expiry: 0,
        }
    }

    /// `months` are month codes such as `HMUZ`. Errors name the key.
    pub fn new(
        kind: RollKind,
        months: &str,
        days_before_expiry: u32,
    ) -> Result<Self, CalendarError> {
        if kind == RollKind::None {
            return Ok(Self::none());
        }
        let mut mask = 0u16;
        for c in months.trim().chars() {
            let index = MONTH_CODES.find(c.to_ascii_uppercase()).ok_or_else(|| {
                CalendarError::NotAMonthCode {
                    months: months.to_string(),
                    code: c,
                }
            })?;
            mask |= 1 << index;
        }
        if mask == 0 {
            return Err(CalendarError::NoMonths {
                months: months.to_string(),
            });
        }
        if days_before_expiry > 60 {
            return Err(CalendarError::RollTooEarly {
                days: days_before_expiry,
            });
        }
        Ok(Self {
            kind,
            months: mask,
            days_before_expiry,
        })
    }

    /// Month codes of the listed contract months, e.g. `HMUZ`.
    pub fn month_codes(&self) -> String {
        MONTH_CODES
            .chars()
            .enumerate()
            .filter(|(i, _)| self.months & (1 << i) != 0)
            .map(|(_, c)| c)
            .collect()
    }

    /// The expiry (last trading day) of the contract for `month` of `year`.
    pub fn expiry(&self, year: i64, month: u32, trading: &dyn Fn(i64) -> bool) -> Option<i64> {
        match self.kind {
            RollKind::None => None,
            RollKind::Quarterly => Some(on_or_before_trading(third_friday(year, month), trading)),
            RollKind::Monthly => {
                let (y, m) = if month == 1 {
                    (year - 1, 12)
                } else {
                    (year, month - 1)
                };
                let the_25th = days_from_civil(y, m, 25);
                let back = if trading(the_25th) { 3 } else { 4 };
                let mut day = the_25th;
                let mut counted = 0;
                while counted < back {
                    day -= 1;
                    if trading(day) {
                        counted += 1;
                    }
                }
                Some(day)
            }
        }
    }

    /// The roll date for the contract of `month` of `year`.
    pub fn roll_date(&self, year: i64, month: u32, trading: &dyn Fn(i64) -> bool) -> Option<i64> {
        let expiry = self.expiry(year, month, trading)?;
        Some(on_or_before_trading(
            expiry - i64::from(self.days_before_expiry),
            trading,
        ))
    }

    /// The first roll date on or after `day`.
    pub fn next_roll_on_or_after(&self, day: i64, trading: &dyn Fn(i64) -> bool) -> Option<i64> {
        if self.kind == RollKind::None || self.months == 0 {
            return None;
        }
        let (year, month, _) = civil_from_days(day);
        // Contract months from this one on; a monthly contract expires in the
        // month before its own, so the next roll is at most 14 months away.
        (0..15).find_map(|k| {
            let index = i64::from(month) - 1 + k;
            let (y, m) = (year + index / 12, (index % 12) as u32 + 1);
            if self.months & (1 << (m - 1)) == 0 {
                return None;
            }
            self.roll_date(y, m, trading).filter(|&roll| roll >= day)
        })
    }
}

/// `day`, or the trading day before it.
fn on_or_before_trading(mut day: i64, trading: &dyn Fn(i64) -> bool) -> i64 {
    // Bounded: no calendar closes for more than a few days in a row.
    for _ in 0..30 {
        if trading(day) {
            break;
        }
        day -= 1;
    }
    day
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::holidays::is_weekend;
    use crate::calendar::holidays::HolidayCalendar;

    fn day(text: &str) -> i64 {
        crate::timefmt::parse(text).unwrap() / crate::timefmt::NANOS_PER_DAY
    }

    fn cme_trading(d: i64) -> bool {
        !is_weekend(d) && !HolidayCalendar::Cme.is_holiday(d)
    }

    #[test]
    fn quarterly_equity_index_rolls() {
        let rule = RollSchedule::new(RollKind::Quarterly, "HMUZ", 8).unwrap();
        assert_eq!(rule.month_codes(), "HMUZ");
        // CME Group's published ES roll dates (eight calendar days before expiry).
        for (from, roll) in [
            ("2014-09-01", "2014-09-11"),
            ("2014-09-12", "2014-12-11"),
            ("2024-01-02", "2024-03-07"),
            ("2024-03-08", "2024-06-13"),
            ("2024-06-13", "2024-06-13"),
            ("2024-06-14", "2024-09-12"),
            ("2024-09-13", "2024-12-12"),
            ("2024-12-13", "2025-03-13"),
        ] {
            assert_eq!(
                rule.next_roll_on_or_after(day(from), &cme_trading),
                Some(day(roll)),
                "from {from}"
            );
        }
        // The third Friday of March 2008 was Good Friday: expiry the Thursday.
        assert_eq!(rule.expiry(2008, 3, &cme_trading), Some(day("2008-03-20")));
        // CME's rule since 2025: the Monday of expiry week, four days before.
        let monday = RollSchedule::new(RollKind::Quarterly, "HMUZ", 4).unwrap();
        assert_eq!(
            monday.next_roll_on_or_after(day("2025-03-01"), &cme_trading),
            Some(day("2025-03-17"))
        );
    }

    #[test]
    fn monthly_crude_oil_expiry() {
        let rule = RollSchedule::new(RollKind::Monthly, MONTH_CODES, 5).unwrap();
        // CLF25 expired 2024-12-19 (25 December a holiday: four business days
        // before it); CLK24 2024-04-22 (25 April a Thursday: three before);
        // CLN24 2024-06-20 (25 June a Tuesday).
        assert_eq!(rule.expiry(2025, 1, &cme_trading), Some(day("2024-12-19")));
        assert_eq!(rule.expiry(2024, 5, &cme_trading), Some(day("2024-04-22")));
        assert_eq!(rule.expiry(2024, 7, &cme_trading), Some(day("2024-06-20")));
        assert_eq!(
            rule.next_roll_on_or_after(day("2024-04-18"), &cme_trading),
            Some(day("2024-05-16")),
            "CLM24 expired 2024-05-21 (25 May a Saturday); five days before is 2024-05-16"
        );
    }

    #[test]
    fn bad_rules_name_the_key() {
        let e = RollSchedule::new(RollKind::Quarterly, "HMUA", 8).unwrap_err();
        assert_eq!(
            e,
            CalendarError::NotAMonthCode {
                months: "HMUA".into(),
                code: 'A'
            }
        );
        assert_eq!(
            e.to_string(),
            "expiry_months \"HMUA\": 'A' is not a month code (one of FGHJKMNQUVXZ)"
        );
        let e = RollSchedule::new(RollKind::Quarterly, "", 8).unwrap_err();
        assert_eq!(e, CalendarError::NoMonths { months: "".into() });
        assert_eq!(
            e.to_string(),
            "expiry_months \"\" must list at least one month code (FGHJKMNQUVXZ)"
        );
        let e = RollSchedule::new(RollKind::Monthly, "F", 61).unwrap_err();
        assert_eq!(e, CalendarError::RollTooEarly { days: 61 });
        assert_eq!(
            e.to_string(),
            "roll_days_before_expiry 61 must be at most 60"
        );
        let e = RollKind::parse("weekly").unwrap_err();
        assert_eq!(
            e,
            CalendarError::UnknownRoll {
                name: "weekly".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "is not a known roll rule (\"quarterly\", \"monthly\" or \"none\")"
        );
        assert_eq!(RollKind::parse("Quarterly"), Ok(RollKind::Quarterly));
    }
}
