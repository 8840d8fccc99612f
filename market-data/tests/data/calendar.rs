//! The exchange calendar against real data: the bundled S&P 500 and
//! NASDAQ daily series (1999–2018, the ES and NQ proxies) trade on exactly
//! the CME/NYSE trading days the calendar computes by rule, except the
//! special closures it cannot know (see `tli_data::calendar::holidays`).

use std::path::PathBuf;
use tli_data::calendar::ExchangeCalendar;
use tli_data::{contracts::ContractBook, read_bars, timefmt, BarInterval};

fn sample(stem: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../data/samples/{stem}.csv"))
}

const UNKNOWN_CLOSURES: [&str; 9] = [
    "2001-09-11",
    "2001-09-12",
    "2001-09-13",
    "2001-09-14",
    "2004-06-11", // President Reagan's funeral
    "2007-01-02", // President Ford
    "2012-10-29", // Hurricane Sandy
    "2012-10-30",
    "2018-12-05", // President G. H. W. Bush
];

#[test]
fn daily_index_samples_trade_on_the_calendar_days() {
    let book = ContractBook::builtin();
    for (stem, symbol) in [("es_proxy_sp500_1d", "ES"), ("nq_proxy_nasdaq_1d", "NQ")] {
        let table = read_bars(&sample(stem)).unwrap();
        let cal = ExchangeCalendar::for_contract(book.lookup(symbol).unwrap()).unwrap();
        let day = |ts: i64| ts.div_euclid(timefmt::NANOS_PER_DAY);
        let on_closed_days: Vec<String> = table
            .ts
            .iter()
            .filter(|&&ts| !cal.is_trading_day(day(ts)))
            .map(|&ts| timefmt::format_date(ts))
            .collect();
        assert!(
            on_closed_days.is_empty(),
            "{stem}: bars on closed days {on_closed_days:?}"
        );
        let mut missing = Vec::new();
        for pair in table.ts.windows(2) {
            if cal.gap_before(pair[0], pair[1], BarInterval::Day) {
                for d in day(pair[0]) + 1..day(pair[1]) {
                    if cal.is_trading_day(d) {
                        missing.push(timefmt::format_date(d * timefmt::NANOS_PER_DAY));
                    }
                }
            } else {
                assert!(
                    (day(pair[0]) + 1..day(pair[1])).all(|d| !cal.is_trading_day(d)),
                    "{stem}: gap_before missed a day after {}",
                    timefmt::format_date(pair[0])
                );
            }
        }
        assert_eq!(missing, UNKNOWN_CLOSURES, "{stem}");
        // The columns of 20 years of daily bars are finite.
        for (name, values) in cal.known_future_features(&table.ts, BarInterval::Day) {
            assert!(values.iter().all(|v| v.is_finite()), "{stem}: {name}");
        }
    }
}
