//! Calendar tests: known dates, DST, roll dates, columns, gaps, spec keys.

use super::*;
use crate::contracts::ContractBook;
use crate::timefmt;

fn ts(text: &str) -> i64 {
    timefmt::parse(text).unwrap()
}

fn day(text: &str) -> i64 {
    ts(text).div_euclid(NANOS_PER_DAY)
}

fn builtin(root: &str) -> ExchangeCalendar {
    ExchangeCalendar::for_contract(ContractBook::builtin().lookup(root).unwrap()).unwrap()
}

fn spec(exchange: &str) -> ContractSpec {
    ContractSpec {
        root: "FDAX".into(),
        name: "DAX".into(),
        exchange: exchange.into(),
        tick_size: 1.0,
        point_value: 25.0,
        currency: "EUR".into(),
        session: String::new(),
        reference_price: None,
        annual_volatility: None,
        timezone: None,
        session_open: None,
        session_close: None,
        early_close: None,
        holidays: None,
        roll: None,
        expiry_months: None,
        roll_days_before_expiry: None,
    }
}

fn fdax() -> ExchangeCalendar {
    let mut s = spec("EUREX");
    s.session_open = Some("01:15".into());
    s.session_close = Some("22:00".into());
    s.roll = Some("quarterly".into());
    ExchangeCalendar::for_contract(&s).unwrap()
}

fn column<'a>(cols: &'a [(String, Vec<f64>)], name: &str) -> &'a [f64] {
    &cols
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .1
}

#[test]
fn known_cme_dates() {
    let es = builtin("ES");
    assert_eq!(es.timezone(), "America/Chicago");
    assert!(!es.is_trading_day(day("2024-11-28")), "Thanksgiving");
    assert!(es.is_holiday(day("2024-11-28")));
    assert_eq!(es.session(day("2024-11-28")), None);
    assert!(es.is_trading_day(day("2024-11-29")) && es.is_half_day(day("2024-11-29")));
    assert_eq!(
        es.session(day("2024-11-29")),
        Some((ts("2024-11-28T23:00:00Z"), ts("2024-11-29T18:15:00Z"))),
        "opens Thanksgiving evening 17:00 CST, closes 12:15 CST"
    );
    assert!(!es.is_trading_day(day("2024-03-29")), "Good Friday");
    assert!(
        es.is_trading_day(day("2021-06-18")),
        "no Juneteenth in 2021"
    );
    assert!(
        !es.is_trading_day(day("2022-06-20")),
        "Juneteenth 2022 observed"
    );
    assert!(
        !es.is_trading_day(day("2021-07-05")),
        "4 July 2021 a Sunday"
    );
    assert!(
        !es.is_trading_day(day("2021-12-24")),
        "Christmas 2021 a Saturday"
    );
    assert!(!es.is_trading_day(day("2024-06-15")), "a Saturday");
    assert!(
        es.is_trading_day(day("2021-12-31")),
        "New Year 2022 a Saturday"
    );
    let none = ExchangeCalendar::for_contract(&spec("XYZ")).unwrap();
    assert_eq!(none.timezone(), "UTC");
    assert!(none.is_trading_day(day("2024-12-25")));
    assert!(!none.is_half_day(day("2024-11-29")));
}

#[test]
fn sessions_follow_us_daylight_saving_time() {
    let es = builtin("ES");
    // Spring forward on Sunday 2024-03-10: the week before is CST (UTC−6),
    // Monday's session opens Sunday 17:00 CDT (UTC−5).
    assert_eq!(es.open_utc(day("2024-03-08")), ts("2024-03-07T23:00:00Z"));
    assert_eq!(es.close_utc(day("2024-03-08")), ts("2024-03-08T22:00:00Z"));
    assert_eq!(es.open_utc(day("2024-03-11")), ts("2024-03-10T22:00:00Z"));
    assert_eq!(es.close_utc(day("2024-03-11")), ts("2024-03-11T21:00:00Z"));
    // Fall back on Sunday 2024-11-03.
    assert_eq!(es.close_utc(day("2024-11-01")), ts("2024-11-01T21:00:00Z"));
    assert_eq!(es.open_utc(day("2024-11-04")), ts("2024-11-03T23:00:00Z"));
    assert_eq!(
        es.full_session_nanos(day("2024-11-04")),
        23 * 3600 * 1_000_000_000
    );
    // The trading date flips at the local open, not at a UTC hour.
    let minute = BarInterval::Minute;
    assert_eq!(
        es.trading_date(ts("2024-03-10T21:59:00Z"), minute),
        day("2024-03-10")
    );
    assert_eq!(
        es.trading_date(ts("2024-03-10T22:00:00Z"), minute),
        day("2024-03-11")
    );
    assert_eq!(
        es.trading_date(ts("2024-03-04T22:30:00Z"), minute),
        day("2024-03-04")
    );
    assert_eq!(
        es.trading_date(ts("2024-03-04T23:00:00Z"), minute),
        day("2024-03-05")
    );
    // Local clock: 09:30 CDT, 09:30 CST.
    let clock = |t: &str| es.local_time(ts(t)).1 / 60_000_000_000;
    assert_eq!(clock("2024-03-11T14:30:00Z"), 9 * 60 + 30);
    assert_eq!(clock("2024-03-08T15:30:00Z"), 9 * 60 + 30);
    assert_eq!(clock("2024-11-04T15:30:00Z"), 9 * 60 + 30);
}

#[test]
fn sessions_follow_berlin_daylight_saving_time() {
    let fdax = fdax();
    assert_eq!(fdax.timezone(), "Europe/Berlin");
    assert_eq!(fdax.holiday_calendar(), HolidayCalendar::None);
    // Summer time from Sunday 2024-03-31 (two weeks after the US).
    assert_eq!(fdax.open_utc(day("2024-03-28")), ts("2024-03-28T00:15:00Z"));
    assert_eq!(
        fdax.close_utc(day("2024-03-28")),
        ts("2024-03-28T21:00:00Z")
    );
    assert_eq!(fdax.open_utc(day("2024-04-01")), ts("2024-03-31T23:15:00Z"));
    assert_eq!(
        fdax.close_utc(day("2024-04-01")),
        ts("2024-04-01T20:00:00Z")
    );
    // Back to CET on Sunday 2024-10-27.
    assert_eq!(
        fdax.close_utc(day("2024-10-25")),
        ts("2024-10-25T20:00:00Z")
    );
    assert_eq!(
        fdax.close_utc(day("2024-10-28")),
        ts("2024-10-28T21:00:00Z")
    );
    // Same-day session: the trading date is the local date.
    let minute = BarInterval::Minute;
    assert_eq!(
        fdax.trading_date(ts("2024-03-31T23:30:00Z"), minute),
        day("2024-04-01")
    );
}

#[test]
fn es_roll_dates_follow_the_eight_day_rule() {
    let es = builtin("ES");
    // Eight calendar days before the third-Friday expiry (CME Group's
    // published convention); the third Friday of March 2024 was the 15th.
    for (from, roll) in [
        ("2024-01-02", "2024-03-07"),
        ("2024-03-08", "2024-06-13"),
        ("2024-06-14", "2024-09-12"),
        ("2024-09-13", "2024-12-12"),
    ] {
        assert_eq!(es.next_roll(day(from)), Some(day(roll)), "{from}");
    }
    assert_eq!(es.trading_days_to_roll(day("2024-06-13")), Some(0));
    assert_eq!(es.trading_days_to_roll(day("2024-06-12")), Some(1));
    // Friday → Monday … Thursday of the next week: 5 trading days.
    assert_eq!(es.trading_days_to_roll(day("2024-06-06")), Some(5));
    assert_eq!(builtin("6E").next_roll(day("2024-01-02")), None);
    assert!(builtin("CL").next_roll(day("2024-01-02")).is_some());
}

#[test]
fn column_names_depend_on_interval_and_roll_rule() {
    let es = builtin("ES");
    assert_eq!(
        es.column_names(BarInterval::Day),
        [
            "dow_sin",
            "dow_cos",
            "month_sin",
            "month_cos",
            "holiday_next",
            "half_day",
            "days_to_roll"
        ]
    );
    let minute = es.column_names(BarInterval::Minute);
    assert_eq!(minute.len(), 13);
    assert_eq!(
        minute[4..10],
        [
            "tod_sin",
            "tod_cos",
            "minutes_since_open",
            "minutes_to_close",
            "session_open_bar",
            "session_close_bar"
        ]
    );
    assert!(!builtin("6E")
        .column_names(BarInterval::Hour)
        .contains(&"days_to_roll".to_string()));
}

#[test]
fn intraday_columns_at_known_bars() {
    let es = builtin("ES");
    let times = [
        "2024-03-06T23:00:00Z", // Wed 17:00 CST: first bar of Thursday 2024-03-07, the roll date
        "2024-03-07T21:59:00Z", // Thu 15:59 CST: last bar
        "2024-03-07T22:00:00Z", // Thu 16:00 CST: in the daily break
        "2024-11-27T21:00:00Z", // Wed 15:00 CST: Thanksgiving next
        "2024-11-29T18:14:00Z", // Fri 12:14 CST: last bar of a half day
        "2024-03-10T22:00:00Z", // Sun 17:00 CDT: Monday's first bar after the DST change
    ];
    let t: Vec<i64> = times.iter().map(|s| ts(s)).collect();
    let cols = es.known_future_features(&t, BarInterval::Minute);
    assert_eq!(cols.len(), 13);
    let c = |name: &str| column(&cols, name).to_vec();
    assert_eq!(c("session_open_bar"), [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    assert_eq!(c("session_close_bar"), [0.0, 1.0, 0.0, 0.0, 1.0, 0.0]);
    assert_eq!(c("holiday_next"), [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
    assert_eq!(c("half_day"), [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    assert_eq!(c("days_to_roll")[..2], [0.0, 0.0]);
    assert_eq!(
        c("days_to_roll")[2],
        0.0,
        "16:00 Thursday still belongs to Thursday"
    );
    let since = c("minutes_since_open");
    let to_close = c("minutes_to_close");
    let full = 23.0 * 60.0;
    assert_eq!((since[0], to_close[0]), (0.0, 1.0));
    assert!((to_close[1] - 1.0 / full).abs() < 1e-12);
    assert_eq!((since[2], to_close[2]), (1.0, 0.0));
    assert!(
        (to_close[4] - 1.0 / full).abs() < 1e-12,
        "closes 12:15 on the half day"
    );
    assert!(since[4] + to_close[4] < 0.9);
    // Thursday for the first three bars (Monday = 0), Monday for the last.
    let dow = c("dow_sin");
    assert!((dow[0] - (std::f64::consts::TAU * 3.0 / 7.0).sin()).abs() < 1e-12);
    assert_eq!(dow[5], 0.0);
    // Local time of day: 17:00 → phase 17/24.
    let tod = c("tod_sin");
    assert!((tod[0] - (std::f64::consts::TAU * 17.0 / 24.0).sin()).abs() < 1e-12);
    assert!(
        (tod[5] - tod[0]).abs() < 1e-12,
        "17:00 CDT has the phase of 17:00 CST"
    );
    // An hourly bar that holds a 01:15 open is the session's first bar.
    let fdax = fdax();
    let hours = [ts("2024-04-02T23:00:00Z"), ts("2024-04-02T22:00:00Z")]; // 01:00, 00:00 CEST
    let cols = fdax.known_future_features(&hours, BarInterval::Hour);
    assert_eq!(column(&cols, "session_open_bar"), [1.0, 0.0]);
}

#[test]
fn daily_columns_at_known_dates() {
    let es = builtin("ES");
    let dates = [
        "2024-11-27",
        "2024-11-29",
        "2024-05-24",
        "2024-03-07",
        "2024-03-06",
        "2024-03-08",
    ];
    let t: Vec<i64> = dates.iter().map(|s| ts(s)).collect();
    let cols = es.known_future_features(&t, BarInterval::Day);
    assert_eq!(
        column(&cols, "holiday_next"),
        [1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(column(&cols, "half_day"), [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    let roll = column(&cols, "days_to_roll");
    assert_eq!(roll[3], 0.0);
    assert_eq!(roll[4], 1.0 / 63.0);
    assert_eq!(
        roll[5], 1.0,
        "the June roll is more than 63 trading days away"
    );
    let month = column(&cols, "month_cos");
    assert!((month[0] - (std::f64::consts::TAU * 10.0 / 12.0).cos()).abs() < 1e-12);
}

#[test]
fn every_column_is_finite_and_bounded() {
    for root in ["ES", "6E", "CL"] {
        let cal = builtin(root);
        for interval in [BarInterval::Minute, BarInterval::Hour, BarInterval::Day] {
            // Every 37 minutes (or days) across 1999-2026 boundaries and DST changes.
            let step = if interval == BarInterval::Day {
                NANOS_PER_DAY
            } else {
                37 * 60_000_000_000
            };
            let start = ts("1999-12-20");
            let t: Vec<i64> = (0..20_000).map(|i| start + i * step).collect();
            for (name, values) in cal.known_future_features(&t, interval) {
                assert_eq!(values.len(), t.len());
                assert!(
                    values
                        .iter()
                        .all(|v| v.is_finite() && (-1.0..=1.0).contains(v)),
                    "{root} {interval:?} {name}"
                );
            }
        }
    }
}

/// The columns are a pure function of each timestamp: rows for ts[..k] do
/// not move when later timestamps change, are dropped or are added.
#[test]
fn columns_are_known_in_advance() {
    let es = builtin("ES");
    for interval in [BarInterval::Minute, BarInterval::Day] {
        let step = interval.nanos() * if interval == BarInterval::Day { 1 } else { 7 };
        let base: Vec<i64> = (0..3000).map(|i| ts("2024-02-20") + i * step).collect();
        let full = es.known_future_features(&base, interval);
        for k in [1, 500, 2999] {
            let mut changed = base[..k].to_vec();
            changed.extend(base[k..].iter().map(|t| t + 3 * step + 12_345));
            changed.push(ts("2030-01-01"));
            let prefix = es.known_future_features(&base[..k], interval);
            let other = es.known_future_features(&changed, interval);
            for ((name, a), ((_, b), (_, c))) in full.iter().zip(prefix.iter().zip(&other)) {
                for i in 0..k {
                    assert_eq!(a[i].to_bits(), b[i].to_bits(), "{name} row {i}");
                    assert_eq!(a[i].to_bits(), c[i].to_bits(), "{name} row {i}");
                }
            }
        }
    }
}

#[test]
fn daily_gaps() {
    let es = builtin("ES");
    let gap = |a: &str, b: &str| es.gap_before(ts(a), ts(b), BarInterval::Day);
    assert!(!gap("2024-03-01", "2024-03-04"), "a weekend");
    assert!(!gap("2024-03-04", "2024-03-05"));
    assert!(gap("2024-03-05", "2024-03-07"), "a missing Wednesday");
    assert!(
        !gap("2024-03-28", "2024-04-01"),
        "Good Friday and a weekend"
    );
    assert!(!gap("2024-11-27", "2024-11-29"), "Thanksgiving");
    assert!(
        gap("2001-09-10", "2001-09-17"),
        "a closure the calendar does not know"
    );
    assert!(!gap("2024-03-05", "2024-03-05"));
}

#[test]
fn intraday_gaps() {
    let es = builtin("ES");
    let gap = |a: &str, b: &str, interval| es.gap_before(ts(a), ts(b), interval);
    let (minute, hour) = (BarInterval::Minute, BarInterval::Hour);
    assert!(
        !gap("2024-03-05T21:59:00Z", "2024-03-05T23:00:00Z", minute),
        "the 16:00-17:00 CT break"
    );
    assert!(
        gap("2024-03-05T21:58:00Z", "2024-03-05T23:00:00Z", minute),
        "15:59 CT missing"
    );
    assert!(gap("2024-03-05T15:00:00Z", "2024-03-05T15:02:00Z", minute));
    assert!(!gap("2024-03-05T15:00:00Z", "2024-03-05T15:01:00Z", minute));
    assert!(
        !gap("2024-03-08T21:59:00Z", "2024-03-10T22:00:00Z", minute),
        "a weekend across DST"
    );
    assert!(
        !gap("2024-11-01T20:59:00Z", "2024-11-03T23:00:00Z", minute),
        "a weekend across DST"
    );
    assert!(
        !gap("2024-11-27T21:59:00Z", "2024-11-28T23:00:00Z", minute),
        "Thanksgiving"
    );
    assert!(
        !gap("2024-11-29T18:14:00Z", "2024-12-01T23:00:00Z", minute),
        "after an early close"
    );
    assert!(
        gap("2024-11-29T18:13:00Z", "2024-12-01T23:00:00Z", minute),
        "12:14 CT missing"
    );
    assert!(
        gap("2024-03-05T21:59:00Z", "2024-03-07T14:30:00Z", minute),
        "a missing Wednesday"
    );
    assert!(
        !gap("2024-03-05T21:00:00Z", "2024-03-05T23:00:00Z", hour),
        "15:00 then 17:00 CT"
    );
    assert!(
        gap("2024-03-05T20:00:00Z", "2024-03-05T23:00:00Z", hour),
        "15:00 CT missing"
    );
    assert!(!gap("2024-03-05T21:00:00Z", "2024-03-05T21:00:00Z", hour));
}

#[test]
fn defaults_come_from_the_exchange() {
    let cbot = ExchangeCalendar::for_contract(&spec("CBOT")).unwrap();
    assert_eq!(cbot.timezone(), "America/Chicago");
    assert_eq!(
        cbot.session_hours(),
        &SessionHours {
            open: 1020,
            close: 960,
            early_close: Some(720)
        }
    );
    assert_eq!(cbot.holiday_calendar(), HolidayCalendar::Cme);
    assert_eq!(cbot.roll_schedule().kind, RollKind::None);
    let eurex = ExchangeCalendar::for_contract(&spec("EUREX")).unwrap();
    assert_eq!(eurex.timezone(), "Europe/Berlin");
    assert_eq!(
        eurex.session_hours(),
        &SessionHours {
            open: 0,
            close: 1440,
            early_close: None
        }
    );
    assert_eq!(
        ExchangeCalendar::for_contract(&spec("ICE"))
            .unwrap()
            .timezone(),
        "America/New_York"
    );
    let mut quarterly = spec("EUREX");
    quarterly.roll = Some("quarterly".into());
    let cal = ExchangeCalendar::for_contract(&quarterly).unwrap();
    assert_eq!(cal.roll_schedule().month_codes(), "HMUZ");
    assert_eq!(cal.roll_schedule().days_before_expiry, 8);
}

#[test]
fn bad_keys_name_the_contract_and_the_key() {
    type Edit = fn(&mut ContractSpec);
    let cases: [(Edit, &str); 9] = [
        (
            |s| s.timezone = Some("Mars/Olympus".into()),
            "FDAX: timezone \"Mars/Olympus\"",
        ),
        (
            |s| {
                s.session_open = Some("25:00".into());
                s.session_close = Some("16:00".into())
            },
            "FDAX: session_open \"25:00\"",
        ),
        (
            |s| {
                s.session_open = Some("17:00".into());
                s.session_close = Some("4pm".into())
            },
            "FDAX: session_close \"4pm\"",
        ),
        (
            |s| s.session_open = Some("17:00".into()),
            "FDAX: session_open and session_close must be given together",
        ),
        (
            |s| s.holidays = Some("nyse".into()),
            "FDAX: holidays \"nyse\" is not a known holiday calendar",
        ),
        (
            |s| s.roll = Some("weekly".into()),
            "FDAX: roll \"weekly\" is not a known roll rule",
        ),
        (
            |s| s.expiry_months = Some("HMUZ".into()),
            "FDAX: expiry_months and roll_days_before_expiry need a roll rule",
        ),
        (
            |s| {
                s.roll = Some("quarterly".into());
                s.expiry_months = Some("HX1".into())
            },
            "FDAX: expiry_months \"HX1\"",
        ),
        (
            |s| {
                s.holidays = Some("cme".into());
                s.session_open = Some("13:00".into());
                s.session_close = Some("16:00".into())
            },
            "FDAX: early_close \"12:00\" must lie inside",
        ),
    ];
    for (edit, expected) in cases {
        let mut s = spec("EUREX");
        edit(&mut s);
        let e = ExchangeCalendar::for_contract(&s).unwrap_err().to_string();
        assert!(
            e.starts_with("contract FDAX: ") && e.contains(expected),
            "{e}\nwanted: {expected}"
        );
    }
}
