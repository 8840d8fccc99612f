//! UTC timestamps as integer nanoseconds since the Unix epoch, and their text
//! forms: `YYYY-MM-DD` (midnight UTC), `YYYY-MM-DDTHH:MM:SS[.fffffffff]Z`
//! (also with a space instead of `T`), or a plain integer of nanoseconds.
//! Calendar arithmetic uses the proleptic Gregorian calendar (Howard
//! Hinnant's days-from-civil algorithm), so no time-zone database is needed.

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

/// Parses one of the accepted forms (see the module docs).
pub fn parse(text: &str) -> Result<i64, String> {
    let t = text.trim();
    let shown = || crate::excerpt(t);
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<i64>()
            .map_err(|e| format!("timestamp {}: {e}", shown()));
    }
    let bad = || {
        format!(
            "timestamp {} is not YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS[.f]Z or integer nanoseconds",
            shown()
        )
    };
    // Nanoseconds since 1970 in an i64 cover 1677-09-21 ..= 2262-04-11.
    let out_of_range = || {
        format!(
            "timestamp {} is outside the range of i64 nanoseconds (1677-09-21 ..= 2262-04-11)",
            shown()
        )
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
    if let Some(time) = time {
        let time = time
            .strip_suffix('Z')
            .or_else(|| time.strip_suffix("+00:00"))
            .ok_or_else(|| format!("timestamp {} must be UTC (end in Z or +00:00)", shown()))?;
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
    }
    Ok(nanos)
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
        assert!(parse("2018-12-31T10:00:00+02:00")
            .unwrap_err()
            .contains("UTC"));
        // Found by market-data/tests/hostile_files: these wrapped around silently.
        assert!(parse("2024-01-01T-1:00:00Z").is_err());
        for far in ["9999-12-31", "2262-04-12T00:00:00Z", "1677-09-20"] {
            assert!(
                parse(far).unwrap_err().contains("outside the range"),
                "{far}"
            );
        }
        assert!(parse("2262-04-11T23:47:16Z").is_ok());
    }
}
