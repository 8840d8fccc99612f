//! The normalized bar table: one symbol, bars sorted by strictly increasing
//! UTC open time, prices in price units, integer volume. Every reader builds
//! one of these and calls [`BarTable::validate`]; nothing is re-sorted,
//! de-duplicated or repaired behind the user's back. Also the front-contract
//! [`Roll`]s of a rolled series and [`ContractBars`], one contract's bars
//! before rolling.

use super::column_read::NamedColumn;
use super::timefmt::{self, NANOS_PER_DAY, NANOS_PER_SECOND};
use super::DataError;
use serde::Serialize;
use std::path::Path;

/// Why a bar interval's name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IntervalError {
    /// Not `1s`, `1m`, `1h` or `1d` (optionally `ohlcv-` before it).
    #[error("bar interval {interval:?} is not one of 1s, 1m, 1h, 1d")]
    Unknown {
        /// The name given, trimmed, lowercased, without an `ohlcv-` prefix.
        interval: String,
    },
}

/// Bar length, as in Databento's OHLCV schemas.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum BarInterval {
    Second,
    Minute,
    Hour,
    Day,
}

impl BarInterval {
    pub fn nanos(self) -> i64 {
        match self {
            Self::Second => NANOS_PER_SECOND,
            Self::Minute => 60 * NANOS_PER_SECOND,
            Self::Hour => 3600 * NANOS_PER_SECOND,
            Self::Day => NANOS_PER_DAY,
        }
    }

    /// `1s`, `1m`, `1h`, `1d`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Second => "1s",
            Self::Minute => "1m",
            Self::Hour => "1h",
            Self::Day => "1d",
        }
    }

    /// `1s`, `1m`, `1h`, `1d`, any case, optionally after `ohlcv-`
    /// (Databento's schema names).
    pub fn parse(text: &str) -> Result<Self, IntervalError> {
        match text
            .trim()
            .to_ascii_lowercase()
            .trim_start_matches("ohlcv-")
        {
            "1s" => Ok(Self::Second),
            "1m" => Ok(Self::Minute),
            "1h" => Ok(Self::Hour),
            "1d" => Ok(Self::Day),
            other => Err(IntervalError::Unknown {
                interval: other.to_string(),
            }),
        }
    }

    /// Bars per year for annualizing: 252 trading days of about 23 hours
    /// (CME Globex) for intraday bars.
    pub fn periods_per_year(self) -> f64 {
        match self {
            Self::Day => 252.0,
            Self::Hour => 252.0 * 23.0,
            Self::Minute => 252.0 * 23.0 * 60.0,
            Self::Second => 252.0 * 23.0 * 3600.0,
        }
    }

    /// Every interval, shortest first.
    pub const ALL: [Self; 4] = [Self::Second, Self::Minute, Self::Hour, Self::Day];

    /// The interval exactly `nanos` long (a model card's `bar_interval_ns`).
    pub fn from_nanos(nanos: i64) -> Option<Self> {
        Self::ALL.into_iter().find(|i| i.nanos() == nanos)
    }

    /// The interval whose length is nearest the median spacing of `ts`.
    pub fn infer(ts: &[i64]) -> Option<Self> {
        if ts.len() < 2 {
            return None;
        }
        let mut spacing: Vec<i64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
        spacing.sort_unstable();
        let median = spacing[spacing.len() / 2] as f64;
        Self::ALL.into_iter().min_by(|a, b| {
            let da = (median / a.nanos() as f64).ln().abs();
            let db = (median / b.nanos() as f64).ln().abs();
            da.total_cmp(&db)
        })
    }
}

/// A switch of the front contract in a series built from parent symbology.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Roll {
    /// First bar taken from the new contract.
    pub ts: i64,
    pub from: String,
    pub to: String,
    /// new close / old close on the last bar before the roll, used for the
    /// ratio back-adjustment of everything before it.
    pub ratio: f64,
}

/// A stretch with no bars that is longer than expected.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gap {
    pub after_ts: i64,
    pub before_ts: i64,
    /// Bars of this table's interval that would fit in the stretch.
    pub missing_bars: i64,
}

/// A bar whose price is far from every bar around it: a price a thousand
/// or a trillion times too large is a typing or unit slip, not a market
/// move, and it would dominate a model's scaling and returns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutlierBar {
    /// 0-based bar index.
    pub row: usize,
    pub ts: i64,
    /// `open`, `high`, `low` or `close`.
    pub column: &'static str,
    pub value: f64,
    /// The median close of the bars around it.
    pub typical: f64,
}

/// How far from the bars around it a price must be to be an outlier: more
/// than this many times their median close away from it (so 10× too large,
/// or of the wrong sign and as large). Futures have moved 20% in a day and
/// crossed zero (crude oil, April 2020), never tenfold.
pub const OUTLIER_FACTOR: f64 = 9.0;

/// Bars on each side whose closes give the typical price.
const OUTLIER_NEIGHBOURS: usize = 10;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BarTable {
    pub symbol: String,
    pub interval: BarInterval,
    /// Bar open time, UTC nanoseconds.
    pub ts: Vec<i64>,
    pub open: Vec<f64>,
    pub high: Vec<f64>,
    pub low: Vec<f64>,
    pub close: Vec<f64>,
    pub volume: Vec<u64>,
    /// Front-contract rolls when built from parent symbology (else empty).
    pub rolls: Vec<Roll>,
    /// The user's own columns, one value per bar, when a feature config
    /// reads them ([`crate::covariates::attach_columns`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<NamedColumn>,
}

impl BarTable {
    pub fn new(symbol: &str, interval: BarInterval) -> Self {
        Self {
            symbol: symbol.to_string(),
            interval,
            ts: Vec::new(),
            open: Vec::new(),
            high: Vec::new(),
            low: Vec::new(),
            close: Vec::new(),
            volume: Vec::new(),
            rolls: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// The bars at or after `start` and at or before `end` (UTC ns; `None`:
    /// unbounded), with the rolls between them (a roll at the first kept
    /// bar is dropped: nothing before it is kept).
    pub fn between(&self, start: Option<i64>, end: Option<i64>) -> BarTable {
        let from = start.map_or(0, |s| self.ts.partition_point(|&t| t < s));
        let to = end.map_or(self.ts.len(), |e| self.ts.partition_point(|&t| t <= e));
        let to = to.max(from);
        let rows = from..to;
        let (first, last) = match (
            self.ts.get(from),
            to.checked_sub(1).and_then(|l| self.ts.get(l)),
        ) {
            (Some(&f), Some(&l)) if from < to => (f, l),
            _ => (i64::MAX, i64::MIN),
        };
        BarTable {
            symbol: self.symbol.clone(),
            interval: self.interval,
            ts: self.ts[rows.clone()].to_vec(),
            open: self.open[rows.clone()].to_vec(),
            high: self.high[rows.clone()].to_vec(),
            low: self.low[rows.clone()].to_vec(),
            close: self.close[rows.clone()].to_vec(),
            volume: self.volume[rows.clone()].to_vec(),
            extra: self
                .extra
                .iter()
                .map(|c| NamedColumn {
                    name: c.name.clone(),
                    values: c.values.select(rows.clone()),
                })
                .collect(),
            rolls: self
                .rolls
                .iter()
                .filter(|r| r.ts > first && r.ts <= last)
                .cloned()
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.ts.len()
    }

    /// `other`'s bars after this table's, with their user columns: the
    /// same names on both (a table without bars takes `other`'s).
    pub fn append(&mut self, other: &BarTable) -> Result<(), DataError> {
        let names = |t: &BarTable| -> Vec<String> {
            t.extra
                .iter()
                .map(|c| c.name.to_ascii_lowercase())
                .collect()
        };
        if self.is_empty() && self.extra.is_empty() {
            self.extra = other
                .extra
                .iter()
                .map(|c| NamedColumn {
                    name: c.name.clone(),
                    values: c.values.select(0..0),
                })
                .collect();
        } else if names(self) != names(other) {
            return Err(DataError::Invalid(format!(
                "bars of {} come with the columns [{}] after bars with [{}]; send the same \
                 columns with every batch",
                self.symbol,
                names(other).join(", "),
                names(self).join(", ")
            )));
        }
        for i in 0..other.len() {
            self.push(
                other.ts[i],
                other.open[i],
                other.high[i],
                other.low[i],
                other.close[i],
                other.volume[i],
            );
        }
        for (mine, theirs) in self.extra.iter_mut().zip(&other.extra) {
            mine.values.extend(&theirs.values)?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    pub fn push(&mut self, ts: i64, open: f64, high: f64, low: f64, close: f64, volume: u64) {
        self.ts.push(ts);
        self.open.push(open);
        self.high.push(high);
        self.low.push(low);
        self.close.push(close);
        self.volume.push(volume);
    }

    /// Checks every row (1-based row numbers in messages, in table order,
    /// which is file order for the readers): strictly increasing timestamps
    /// (a repeat is a duplicate, a decrease is unsorted), finite positive
    /// prices, low ≤ open, close ≤ high. Also refuses an empty table.
    pub fn validate(&self, file: &Path) -> Result<(), DataError> {
        if self.is_empty() {
            return Err(DataError::bad_file(file, "holds no bars"));
        }
        let n = self.len();
        if [
            self.open.len(),
            self.high.len(),
            self.low.len(),
            self.close.len(),
            self.volume.len(),
        ]
        .iter()
        .any(|&len| len != n)
        {
            return Err(DataError::bad_file(file, "columns have different lengths"));
        }
        for i in 0..n {
            let row = i + 1;
            // Formatted only when a message needs it (this loop runs per bar).
            let when = || timefmt::format(self.ts[i]);
            if i > 0 {
                let previous = self.ts[i - 1];
                if self.ts[i] == previous {
                    return Err(DataError::bad_row(
                        file,
                        row,
                        format!("duplicate timestamp {} (row {i} has the same)", when()),
                    ));
                }
                if self.ts[i] < previous {
                    return Err(DataError::bad_row(
                        file,
                        row,
                        format!(
                            "timestamps are not sorted: {} comes after {} (row {i})",
                            when(),
                            timefmt::format(previous)
                        ),
                    ));
                }
            }
            for (name, value) in [
                ("open", self.open[i]),
                ("high", self.high[i]),
                ("low", self.low[i]),
                ("close", self.close[i]),
            ] {
                if value.is_nan() {
                    return Err(DataError::bad_row(
                        file,
                        row,
                        format!("{name} is NaN at {}", when()),
                    ));
                }
                if !value.is_finite() || value <= 0.0 {
                    return Err(DataError::bad_row(
                        file,
                        row,
                        format!(
                            "{name} is {value} at {}; prices must be finite and positive",
                            when()
                        ),
                    ));
                }
            }
            let (o, h, l, c) = (self.open[i], self.high[i], self.low[i], self.close[i]);
            if h < l {
                return Err(DataError::bad_row(
                    file,
                    row,
                    format!("high {h} is below low {l} at {}", when()),
                ));
            }
            if o < l || o > h || c < l || c > h {
                return Err(DataError::bad_row(
                    file,
                    row,
                    format!(
                        "open {o} or close {c} lies outside low {l} .. high {h} at {}",
                        when()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Bars with a price more than [`OUTLIER_FACTOR`] times the median close
    /// of the [`OUTLIER_NEIGHBOURS`] bars on each side away from it, in bar
    /// order (one entry per price). Only bars that jump that far from the
    /// previous or the next close are looked at closely, so a clean file
    /// costs one pass.
    pub fn outliers(&self) -> Vec<OutlierBar> {
        let n = self.len();
        let far = |value: f64, typical: f64| {
            typical.is_finite()
                && typical != 0.0
                && (!value.is_finite() || (value - typical).abs() > OUTLIER_FACTOR * typical.abs())
        };
        let columns: [(&'static str, &[f64]); 4] = [
            ("open", &self.open),
            ("high", &self.high),
            ("low", &self.low),
            ("close", &self.close),
        ];
        let mut found = Vec::new();
        for row in 0..n {
            let candidate = columns.iter().any(|(_, values)| {
                let v = values[row];
                (row > 0 && far(v, self.close[row - 1]))
                    || (row + 1 < n && far(v, self.close[row + 1]))
            });
            if !candidate {
                continue;
            }
            let mut around: Vec<f64> = (row.saturating_sub(OUTLIER_NEIGHBOURS)
                ..(row + OUTLIER_NEIGHBOURS + 1).min(n))
                .filter(|&j| j != row)
                .map(|j| self.close[j])
                .filter(|c| c.is_finite())
                .collect();
            if around.is_empty() {
                continue;
            }
            around.sort_by(f64::total_cmp);
            let typical = around[around.len() / 2];
            for (column, values) in &columns {
                if far(values[row], typical) {
                    found.push(OutlierBar {
                        row,
                        ts: self.ts[row],
                        column,
                        value: values[row],
                        typical,
                    });
                }
            }
        }
        found
    }

    /// Stretches without bars longer than expected: more than one interval
    /// for intraday bars (so session breaks show too), and for daily bars
    /// more than a weekend (Friday → Monday is not a gap; a holiday is).
    pub fn gaps(&self) -> Vec<Gap> {
        let step = self.interval.nanos();
        self.ts
            .windows(2)
            .filter_map(|w| {
                let spacing = w[1] - w[0];
                let expected = if self.interval == BarInterval::Day
                    && timefmt::weekday(w[0]) == 4
                    && spacing == 3 * NANOS_PER_DAY
                {
                    spacing
                } else {
                    step
                };
                (spacing > expected).then(|| Gap {
                    after_ts: w[0],
                    before_ts: w[1],
                    missing_bars: spacing / step - 1,
                })
            })
            .collect()
    }
}

/// One contract's bars under its own symbol: what the synthetic generator
/// makes and [`write_parent`](crate::dbn_format::write_parent) writes under
/// a parent symbol (the reader rolls them back into one series).
#[derive(Clone, Debug)]
pub struct ContractBars {
    /// The contract's own symbol, e.g. `ESH4` (or `ESH4-ESM4` for a spread).
    pub raw_symbol: String,
    pub table: BarTable,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_far_from_its_neighbours_is_an_outlier_and_market_moves_are_not() {
        let mut t = BarTable::new("CL", BarInterval::Day);
        // 40 bars: a 50% crash, a crossing below zero, then one absurd close.
        let closes: Vec<f64> = (0..40)
            .map(|i| match i {
                0..=9 => 60.0 + i as f64,
                10..=14 => 30.0,
                15 => -37.0,
                16..=24 => 20.0,
                25 => 20.0e12,
                _ => 21.0,
            })
            .collect();
        for (i, &c) in closes.iter().enumerate() {
            t.ts.push(i as i64 * NANOS_PER_DAY);
            t.open.push(if i == 25 { 20.0 } else { c });
            t.high.push(c.max(20.0));
            t.low.push(c.min(20.0));
            t.close.push(c);
            t.volume.push(1);
        }
        let found = t.outliers();
        let columns: Vec<(usize, &str)> = found.iter().map(|o| (o.row, o.column)).collect();
        assert_eq!(columns, vec![(25, "high"), (25, "close")], "{found:?}");
        assert_eq!(found[1].typical, 21.0);
        assert_eq!(found[1].value, 20.0e12);
    }

    fn table() -> BarTable {
        let mut t = BarTable::new("ES.FUT", BarInterval::Day);
        let monday = timefmt::parse("2024-01-01").unwrap();
        for (d, c) in [
            (0, 100.0),
            (1, 101.0),
            (2, 102.0),
            (3, 101.5),
            (4, 103.0),
            (7, 104.0),
            (9, 104.5),
        ] {
            t.push(monday + d * NANOS_PER_DAY, c, c + 1.0, c - 1.0, c, 10);
        }
        t
    }

    #[test]
    fn intervals_parse_by_name_and_unknown_ones_are_refused() {
        assert_eq!(BarInterval::parse(" OHLCV-1m "), Ok(BarInterval::Minute));
        assert_eq!(BarInterval::parse("1d"), Ok(BarInterval::Day));
        let e = BarInterval::parse("ohlcv-5M").unwrap_err();
        assert_eq!(
            e,
            IntervalError::Unknown {
                interval: "5m".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "bar interval \"5m\" is not one of 1s, 1m, 1h, 1d"
        );
    }

    #[test]
    fn weekends_are_not_gaps_but_missing_days_are() {
        let t = table();
        t.validate(Path::new("x")).unwrap();
        let gaps = t.gaps();
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        assert_eq!(gaps[0].missing_bars, 1);
        assert_eq!(BarInterval::infer(&t.ts), Some(BarInterval::Day));
    }

    #[test]
    fn each_bad_row_is_named() {
        let file = Path::new("bars.csv");
        let mut t = table();
        t.ts[3] = t.ts[2];
        assert!(t
            .validate(file)
            .unwrap_err()
            .to_string()
            .starts_with("bars.csv: row 4: duplicate timestamp"));
        let mut t = table();
        t.ts.swap(2, 3);
        assert!(t
            .validate(file)
            .unwrap_err()
            .to_string()
            .contains("row 4: timestamps are not sorted"));
        let mut t = table();
        t.close[1] = f64::NAN;
        assert!(t
            .validate(file)
            .unwrap_err()
            .to_string()
            .contains("row 2: close is NaN"));
        let mut t = table();
        t.low[5] = -1.0;
        assert!(t
            .validate(file)
            .unwrap_err()
            .to_string()
            .contains("row 6: low is -1"));
        let mut t = table();
        t.high[0] = 98.0;
        assert!(t
            .validate(file)
            .unwrap_err()
            .to_string()
            .contains("row 1: high 98 is below low 99"));
    }
}
