//! The user's own columns and targets end to end through files: a bar file
//! with extra columns and covariate files, read, joined, featurized with
//! their roles and statistics, reproduced at inference, and every bad input
//! refused in one line.

use std::path::{Path, PathBuf};
use tli_data::column_read::ColumnValues;
use tli_data::columns::{ColumnKind, ColumnRole, Fill, Target, Transform, UserColumn};
use tli_data::contracts::ContractBook;
use tli_data::covariates::{attach_columns, column};
use tli_data::features::{build_with_stats, FeatureConfig};
use tli_data::inference::featurize_with_stats;
use tli_data::synth::{generate, SynthSpec};
use tli_data::zones::LocalZone;
use tli_data::{timefmt, BarInterval, BarSource, BarTable};
use tli_plugin_api::FeatureRole;

pub fn es_bars(interval: BarInterval, n: usize, start: &str) -> BarTable {
    let book = ContractBook::builtin();
    let spec = SynthSpec {
        symbol: "ES".into(),
        interval,
        bars: n,
        start: timefmt::parse(start).unwrap(),
        seed: 7,
        planted_strength: 0.2,
        single_contract: true,
    };
    generate(&spec, book.lookup("ES").unwrap())
        .unwrap()
        .remove(0)
        .table
}

/// Writes `table` as a CSV bar file with `extra` columns (text per row).
pub fn write_bar_csv(path: &Path, table: &BarTable, extra: &[(&str, Vec<String>)]) {
    let mut text = String::from("ts_event,open,high,low,close,volume,symbol");
    for (name, _) in extra {
        text.push(',');
        text.push_str(name);
    }
    text.push('\n');
    for i in 0..table.len() {
        text.push_str(&format!(
            "{},{},{},{},{},{},{}",
            timefmt::format(table.ts[i]),
            table.open[i],
            table.high[i],
            table.low[i],
            table.close[i],
            table.volume[i],
            table.symbol
        ));
        for (_, values) in extra {
            text.push(',');
            text.push_str(&values[i]);
        }
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

fn column_of(
    name: &str,
    role: ColumnRole,
    kind: ColumnKind,
    transform: Transform,
    fill: Fill,
) -> UserColumn {
    UserColumn {
        kind,
        transform,
        fill,
        ..UserColumn::new(name, role)
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    table: BarTable,
    ofi: Vec<f64>,
    event: Vec<Option<&'static str>>,
}

/// 600 daily ES bars with an order-flow column, a level, an event flag
/// (FOMC every 20th bar, CPI every 30th, empty otherwise) and a sector.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let table = es_bars(BarInterval::Day, 600, "2021-01-04");
    let n = table.len();
    let ofi: Vec<f64> = (0..n)
        .map(|i| ((i * 37 % 101) as f64 - 50.0) / 7.0)
        .collect();
    let event: Vec<Option<&str>> = (0..n)
        .map(|i| match (i % 20, i % 30) {
            (0, _) => Some("FOMC"),
            (_, 0) => Some("CPI"),
            _ => None,
        })
        .collect();
    let path = dir.path().join("es.csv");
    write_bar_csv(
        &path,
        &table,
        &[
            ("ofi", ofi.iter().map(|x| x.to_string()).collect()),
            ("level", (0..n).map(|i| (i % 13).to_string()).collect()),
            (
                "event",
                event.iter().map(|e| e.unwrap_or("").to_string()).collect(),
            ),
            ("sector", vec!["equity".to_string(); n]),
        ],
    );
    Fixture {
        _dir: dir,
        path,
        table,
        ofi,
        event,
    }
}

fn config() -> FeatureConfig {
    FeatureConfig {
        columns: vec![
            column_of(
                "ofi",
                ColumnRole::ObservedPast,
                ColumnKind::Real,
                Transform::Zscore,
                Fill::Refuse,
            ),
            column_of(
                "level",
                ColumnRole::ObservedPast,
                ColumnKind::Real,
                Transform::Diff,
                Fill::Refuse,
            ),
            column_of(
                "event",
                ColumnRole::KnownFuture,
                ColumnKind::Categorical,
                Transform::None,
                Fill::Zero,
            ),
            column_of(
                "sector",
                ColumnRole::Static,
                ColumnKind::Categorical,
                Transform::None,
                Fill::Refuse,
            ),
        ],
        ..FeatureConfig::default()
    }
}

fn read(path: &Path, config: &FeatureConfig) -> Result<BarTable, String> {
    let book = ContractBook::builtin();
    let source = BarSource {
        symbol: Some("ES".into()),
        ..BarSource::file(path)
    };
    source
        .read_for(&book, config)
        .map(|(t, _)| t)
        .map_err(|e| e.to_string())
}

#[test]
fn user_columns_become_features_with_their_roles_and_reproduce_at_inference() {
    let f = fixture();
    let config = config();
    let table = read(&f.path, &config).unwrap();
    let es = ContractBook::builtin().lookup("ES").unwrap().clone();
    let (built, stats) = build_with_stats(&table, &es, &config).unwrap();
    let (d, a) = (&built.dataset, &built.annex);
    a.check_against(d).unwrap();
    let names: Vec<String> = d.feature_names.iter().map(|n| n.to_string()).collect();
    let at = |name: &str| names.iter().position(|n| n == name).unwrap();
    let user = at("ofi");
    assert_eq!(
        names[user..],
        ["ofi", "level", "event=CPI", "event=FOMC", "sector=equity"]
    );
    // The built-in features stay, before the user's.
    assert_eq!(names[0], "logret_1");
    assert_eq!(
        a.feature_roles[user..],
        [
            FeatureRole::ObservedPast,
            FeatureRole::ObservedPast,
            FeatureRole::KnownFuture,
            FeatureRole::KnownFuture,
            FeatureRole::Static
        ]
    );
    // One variable per column: the event's two one-hot columns share one.
    let v = &a.feature_variables;
    assert_eq!(v[at("event=CPI")], v[at("event=FOMC")]);
    assert_eq!(v[at("level")] + 1, v[at("event=CPI")]);
    assert_eq!(v[at("event=FOMC")] + 1, v[at("sector=equity")]);
    assert_eq!(
        stats.levels["event"],
        vec!["CPI".to_string(), "FOMC".into()]
    );
    // ofi is z-scored with the training split's statistics; the rest are kept as they are.
    let width = names.len();
    let train = d.splits.train_end as usize;
    let mean: f64 = (0..train)
        .map(|r| f64::from(d.features[r * width + user]))
        .sum::<f64>()
        / train as f64;
    assert!(mean.abs() < 1e-4, "ofi mean {mean}");
    assert_eq!(
        (
            stats.feature_mean[at("level")],
            stats.feature_std[at("level")]
        ),
        (0.0, 1.0)
    );
    let first_bar = table.ts.iter().position(|&t| t == d.timestamps[0]).unwrap();
    for r in 0..d.timestamps.len() {
        let t = first_bar + r;
        let row = &d.features[r * width..(r + 1) * width];
        let expected_ofi = (f.ofi[t] - stats.feature_mean[user]) / stats.feature_std[user];
        assert_eq!(row[user], expected_ofi as f32, "ofi at row {r}");
        // diff of the level column: (t % 13) − ((t − 1) % 13).
        assert_eq!(
            row[at("level")],
            ((t % 13) as f32) - (((t - 1) % 13) as f32)
        );
        assert_eq!(
            row[at("event=FOMC")],
            f32::from(u8::from(f.event[t] == Some("FOMC")))
        );
        assert_eq!(
            row[at("event=CPI")],
            f32::from(u8::from(f.event[t] == Some("CPI")))
        );
        assert_eq!(row[at("sector=equity")], 1.0);
    }
    // Inference with the stored statistics gives the same features, bit for bit.
    let rows = featurize_with_stats(&table, &es, &config, &stats).unwrap();
    assert_eq!(rows.feature_names, names);
    for (r, ts) in d.timestamps.iter().enumerate() {
        let i = rows.timestamps.binary_search(ts).unwrap();
        let (x, y) = (
            &d.features[r * width..(r + 1) * width],
            &rows.features[i * width..(i + 1) * width],
        );
        assert!(
            x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits()),
            "row {r}"
        );
    }
    // A level training never saw is no level: every one-hot column 0.
    let mut new = table.clone();
    let last = new.len() - 1;
    if let Some(c) = new.extra.iter_mut().find(|c| c.name == "event") {
        if let ColumnValues::Text(v) = &mut c.values {
            v[last] = Some("NFP".into());
        }
    }
    let rows = featurize_with_stats(&new, &es, &config, &stats).unwrap();
    let newest = &rows.features[(rows.len() - 1) * width..];
    assert_eq!(
        (newest[at("event=CPI")], newest[at("event=FOMC")]),
        (0.0, 0.0)
    );
    // Without the built-in features only the user's remain.
    let own = FeatureConfig {
        builtin: false,
        ..config.clone()
    };
    let (built, _) = build_with_stats(&table, &es, &own).unwrap();
    assert_eq!(built.dataset.feature_names.len(), 5);
    assert_eq!(built.annex.feature_variables, vec![0, 1, 2, 2, 3]);
}

#[test]
fn targets_other_than_returns_are_computed_as_documented() {
    let f = fixture();
    let es = ContractBook::builtin().lookup("ES").unwrap().clone();
    let lc: Vec<f64> = f.table.close.iter().map(|c| c.ln()).collect();
    type ByHand<'a> = Box<dyn Fn(usize, usize) -> f64 + 'a>;
    let cases: Vec<(Target, ByHand<'_>)> = vec![
        (
            Target::FwdRealizedVol,
            Box::new(|t, h| {
                ((t + 1..=t + h)
                    .map(|i| (lc[i] - lc[i - 1]).powi(2))
                    .sum::<f64>()
                    / h as f64)
                    .sqrt()
            }),
        ),
        (
            Target::FwdRange,
            Box::new(|t, h| {
                let hi = (t + 1..=t + h)
                    .map(|i| f.table.high[i])
                    .fold(f64::MIN, f64::max);
                let lo = (t + 1..=t + h)
                    .map(|i| f.table.low[i])
                    .fold(f64::MAX, f64::min);
                (hi / lo).ln()
            }),
        ),
        (
            Target::FwdSign,
            Box::new(|t, h| {
                let r = lc[t + h] - lc[t];
                if r > 0.0 {
                    1.0
                } else if r < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            }),
        ),
        (Target::Column("ofi".into()), Box::new(|t, h| f.ofi[t + h])),
    ];
    for (target, expected) in cases {
        let config = FeatureConfig {
            target: target.clone(),
            target_horizons: vec![1, 3],
            ..FeatureConfig::default()
        };
        let table = read(&f.path, &config).unwrap();
        let (built, stats) = build_with_stats(&table, &es, &config).unwrap();
        let d = &built.dataset;
        assert_eq!(stats.target_names, vec![target.name(1), target.name(3)]);
        let first_bar = table.ts.iter().position(|&t| t == d.timestamps[0]).unwrap();
        for r in [0, 7, d.timestamps.len() - 1] {
            for (k, h) in [1usize, 3].into_iter().enumerate() {
                let got = f64::from(d.targets[r * 2 + k]) * stats.target_scales[k];
                let want = expected(first_bar + r, h);
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs().max(1e-3),
                    "{target:?} h{h} row {r}: {got} vs {want}"
                );
            }
        }
        // Inference gives the realized target unscaled, NaN past the file's end.
        let rows = featurize_with_stats(&table, &es, &config, &stats).unwrap();
        let i = rows.timestamps.binary_search(&d.timestamps[0]).unwrap();
        assert!((rows.realized[i * 2] - expected(first_bar, 1)).abs() < 1e-9);
        assert!(rows.realized.last().unwrap().is_nan());
    }
}

#[test]
fn each_bad_input_is_one_clear_line() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let es = ContractBook::builtin().lookup("ES").unwrap().clone();
    let n = f.table.len();
    let refused = |path: &Path, config: FeatureConfig, expected: &str| {
        let e = read(path, &config).and_then(|table| {
            build_with_stats(&table, &es, &config)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        let e = e.expect_err(expected);
        assert!(e.contains(expected), "{expected:?} in: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    };
    let one = |c: UserColumn| FeatureConfig {
        columns: vec![c],
        ..FeatureConfig::default()
    };
    let observed = |name: &str| UserColumn::new(name, ColumnRole::ObservedPast);
    // A named column that does not exist.
    refused(
        &f.path,
        one(observed("imbalance")),
        "has no column \"imbalance\"; its columns are: ts_event, open",
    );
    // A non-numeric real column.
    let path = dir.path().join("text.csv");
    let mut words = vec!["1.5".to_string(); n];
    words[40] = "high".into();
    write_bar_csv(&path, &f.table, &[("ofi", words)]);
    refused(
        &path,
        one(observed("ofi")),
        "row 41: column ofi: cannot parse \"high\" as a number",
    );
    // A categorical with more levels than its cap.
    let path = dir.path().join("levels.csv");
    write_bar_csv(
        &path,
        &f.table,
        &[("code", (0..n).map(|i| format!("c{}", i % 9)).collect())],
    );
    refused(
        &path,
        one(UserColumn {
            kind: ColumnKind::Categorical,
            max_levels: 4,
            ..observed("code")
        }),
        "categorical column code has 9 levels in the training split (c0, c1, c2, c3, c4, …), more than max_levels 4",
    );
    // A known-future column with a gap.
    let path = dir.path().join("gap.csv");
    let mut flags = vec!["0".to_string(); n];
    flags[300] = String::new();
    write_bar_csv(&path, &f.table, &[("event", flags)]);
    refused(
        &path,
        one(UserColumn::new("event", ColumnRole::KnownFuture)),
        &format!(
            "column event (known_future) has no value at {}; a known_future input must be known on every bar",
            timefmt::format(f.table.ts[300])
        ),
    );
    // An observed column with a gap: the fill rule is the remedy.
    let mut gappy = vec!["1".to_string(); n];
    gappy[300] = String::new();
    write_bar_csv(&path, &f.table, &[("ofi", gappy)]);
    refused(
        &path,
        one(observed("ofi")),
        "set fill zero, ffill or ffill:N",
    );
    let filled = one(UserColumn {
        fill: Fill::Ffill { limit: Some(1) },
        ..observed("ofi")
    });
    assert!(read(&path, &filled)
        .and_then(|t| build_with_stats(&t, &es, &filled).map_err(|e| e.to_string()))
        .is_ok());
    // A covariate file that starts after the bars.
    let cov = dir.path().join("late.csv");
    let mut text = String::from("date,vix\n");
    for t in &f.table.ts[10..] {
        text.push_str(&format!("{},20\n", timefmt::format_date(*t)));
    }
    std::fs::write(&cov, text).unwrap();
    refused(
        &f.path,
        one(UserColumn {
            file: Some(cov.clone()),
            ..observed("vix")
        }),
        &format!(
            "late.csv: starts at {}, after the first bar of ES",
            timefmt::format(f.table.ts[10])
        ),
    );
    // A target column with NaN at the end.
    let path = dir.path().join("target.csv");
    let mut basis = vec!["0.5".to_string(); n];
    basis[n - 1] = "NaN".into();
    write_bar_csv(&path, &f.table, &[("basis", basis)]);
    refused(
        &path,
        FeatureConfig {
            target: Target::Column("basis".into()),
            ..FeatureConfig::default()
        },
        &format!(
            "target column basis has no value at {}",
            timefmt::format(f.table.ts[n - 1])
        ),
    );
    // A static column that changes.
    let path = dir.path().join("static.csv");
    write_bar_csv(
        &path,
        &f.table,
        &[("margin", (0..n).map(|i| (i / 400).to_string()).collect())],
    );
    refused(
        &path,
        one(UserColumn::new("margin", ColumnRole::Static)),
        "column margin is static, but its value changes at",
    );
    // DBN bars have no columns of their own.
    let dbn = dir.path().join("es.dbn");
    tli_data::write_bars(&dbn, &f.table).unwrap();
    refused(
        &dbn,
        one(observed("ofi")),
        "a DBN file holds only prices and volume",
    );
}

/// Covariate rows as of each bar, computed the slow way: the last row
/// stamped at or before the bar.
fn as_of(rows: &[i64], bar: i64) -> Option<usize> {
    rows.iter().rposition(|&t| t <= bar)
}

#[test]
fn the_as_of_join_holds_at_daily_and_minute_bars_across_dst_and_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let chicago = LocalZone::parse("America/Chicago").unwrap();
    let minute = 60 * timefmt::NANOS_PER_SECOND;
    // Minute bars from the Friday before the March 2024 DST change to the
    // Monday after it, with an hour missing on Monday (a gap).
    let mut bars = es_bars(BarInterval::Minute, 6000, "2024-03-08T20:00:00Z");
    let gap_from = bars.ts[4000];
    let keep: Vec<usize> = (0..bars.len())
        .filter(|&i| !(bars.ts[i] >= gap_from && bars.ts[i] < gap_from + 60 * minute))
        .collect();
    bars = BarTable {
        ts: keep.iter().map(|&i| bars.ts[i]).collect(),
        open: keep.iter().map(|&i| bars.open[i]).collect(),
        high: keep.iter().map(|&i| bars.high[i]).collect(),
        low: keep.iter().map(|&i| bars.low[i]).collect(),
        close: keep.iter().map(|&i| bars.close[i]).collect(),
        volume: keep.iter().map(|&i| bars.volume[i]).collect(),
        ..bars
    };
    // Covariate rows every 7 minutes, written in Chicago wall time without
    // a zone (so the DST change is in the text), value = row number.
    let first = bars.ts[0] - 3 * minute;
    let rows: Vec<i64> = (0..)
        .map(|k| first + k * 7 * minute)
        .take_while(|&t| t <= *bars.ts.last().unwrap())
        .collect();
    let zone = jiff::tz::TimeZone::get("America/Chicago").unwrap();
    let mut text = String::from("timestamp,signal\n");
    for (k, &t) in rows.iter().enumerate() {
        let wall = jiff::Timestamp::from_nanosecond(i128::from(t))
            .unwrap()
            .to_zoned(zone.clone())
            .strftime("%Y-%m-%dT%H:%M:%S")
            .to_string();
        text.push_str(&format!("{wall},{k}\n"));
    }
    assert!(
        text.contains("2024-03-10T01:5") && text.contains("2024-03-10T03:0"),
        "crosses the change"
    );
    let cov = dir.path().join("signal.csv");
    std::fs::write(&cov, text).unwrap();
    let config = FeatureConfig {
        columns: vec![UserColumn {
            file: Some(cov.clone()),
            ..UserColumn::new("signal", ColumnRole::ObservedPast)
        }],
        ..FeatureConfig::default()
    };
    let mut table = bars.clone();
    attach_columns(&mut table, None, &config, Some(&chicago)).unwrap();
    let Some(ColumnValues::Real(joined)) = column(&table, "signal") else {
        panic!("no signal column")
    };
    for (i, &bar) in table.ts.iter().enumerate() {
        assert_eq!(
            joined[i],
            as_of(&rows, bar).unwrap() as f64,
            "bar {}",
            timefmt::format(bar)
        );
    }
    // Daily bars and a daily covariate file with a missing day: as of the day before.
    let days = es_bars(BarInterval::Day, 60, "2024-02-01");
    let mut text = String::from("date,vix\n");
    let mut stamps = Vec::new();
    for (k, &t) in days.ts.iter().enumerate() {
        if k != 30 {
            text.push_str(&format!("{},{k}\n", timefmt::format_date(t)));
            stamps.push(t);
        }
    }
    let cov = dir.path().join("vix.csv");
    std::fs::write(&cov, text).unwrap();
    let config = FeatureConfig {
        columns: vec![UserColumn {
            file: Some(cov.clone()),
            ..UserColumn::new("vix", ColumnRole::ObservedPast)
        }],
        ..FeatureConfig::default()
    };
    let mut table = days.clone();
    attach_columns(&mut table, None, &config, None).unwrap();
    let Some(ColumnValues::Real(joined)) = column(&table, "vix") else {
        panic!("no vix column")
    };
    assert_eq!(joined[29], 29.0);
    assert_eq!(joined[30], 29.0, "the missing day takes the day before");
    assert_eq!(joined[31], 31.0);
    // As known_future the missing day is refused by name.
    let known = FeatureConfig {
        columns: vec![UserColumn {
            file: Some(cov),
            ..UserColumn::new("vix", ColumnRole::KnownFuture)
        }],
        ..FeatureConfig::default()
    };
    let mut table = days.clone();
    let e = attach_columns(&mut table, None, &known, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "there is none at {}",
            timefmt::format(days.ts[30])
        )),
        "{e}"
    );
}

/// A table with columns of its own, written as CSV or Parquet, reads back
/// with the same values (numbers bit for bit, labels, missing values).
#[test]
fn written_columns_read_back_as_they_were() {
    use tli_data::synthetic_covariates::{planted_covariates, PlantedCovariates};
    let dir = tempfile::tempdir().unwrap();
    let mut table = planted_covariates(&PlantedCovariates {
        bars: 300,
        ..PlantedCovariates::default()
    });
    // A missing value in each column.
    if let ColumnValues::Real(v) = &mut table.extra[0].values {
        v[7] = f64::NAN;
    }
    if let ColumnValues::Text(v) = &mut table.extra[1].values {
        v[9] = None;
    }
    let config = FeatureConfig {
        columns: vec![
            UserColumn::new("ofi", ColumnRole::ObservedPast),
            UserColumn {
                kind: ColumnKind::Categorical,
                ..UserColumn::new("event", ColumnRole::KnownFuture)
            },
        ],
        ..FeatureConfig::default()
    };
    for name in ["planted.csv", "planted.parquet"] {
        let path = dir.path().join(name);
        tli_data::write_bars(&path, &table).unwrap();
        let back = read(&path, &config).unwrap();
        assert_eq!(back.ts, table.ts, "{name}");
        assert_eq!(back.close, table.close, "{name}");
        assert_eq!(back.extra.len(), 2, "{name}");
        let (ColumnValues::Real(a), ColumnValues::Real(b)) =
            (&table.extra[0].values, &back.extra[0].values)
        else {
            panic!("{name}: ofi is not real")
        };
        assert!(
            a.iter()
                .zip(b)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())),
            "{name}: ofi"
        );
        assert_eq!(back.extra[1].values, table.extra[1].values, "{name}: event");
    }
}

/// One-hot columns cannot grow a dataset without bound: more than the
/// pipeline's feature cap is refused before the columns are built.
#[test]
fn too_many_one_hot_columns_are_refused_before_they_are_built() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let n = f.table.len();
    let path = dir.path().join("wide.csv");
    let labels = || (0..n).map(|i| format!("c{}", i % 7)).collect();
    write_bar_csv(
        &path,
        &f.table,
        &[("a", labels()), ("b", labels()), ("c", labels())],
    );
    // Three columns of 1,000 declared levels each: 3,000 one-hot columns.
    let categorical = |name: &str| UserColumn {
        kind: ColumnKind::Categorical,
        max_levels: 1024,
        levels: Some((0..1000).map(|i| format!("c{i}")).collect()),
        ..UserColumn::new(name, ColumnRole::ObservedPast)
    };
    let config = FeatureConfig {
        columns: vec![categorical("a"), categorical("b"), categorical("c")],
        ..FeatureConfig::default()
    };
    let es = ContractBook::builtin().lookup("ES").unwrap().clone();
    let table = read(&path, &config).unwrap();
    let e = match build_with_stats(&table, &es, &config) {
        Ok(_) => panic!("3,000 one-hot columns were built"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("give more than 2048 features"), "{e}");
    assert!(e.contains("by column c;"), "{e}");
}
