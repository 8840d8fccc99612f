//! The known-future leakage test, on the bundled samples and on synthetic
//! bars: perturbing prices after bar t changes no input at or before t, and
//! changes no known-future input at all (those are a function of the
//! timestamp alone); the annex (roles, horizons, scales, interval, markers)
//! agrees with the dataset.

use std::path::PathBuf;
use tli_data::calendar::ExchangeCalendar;
use tli_data::contracts::ContractBook;
use tli_data::features::{
    build_annotated_dataset, raw_features, row_markers, FeatureConfig, Levels,
};
use tli_data::synth::{generate, SynthSpec};
use tli_data::{read_bars, timefmt, BarInterval, BarTable};
use tli_plugin_api::{FeatureRole, GAP_BEFORE};

fn sample(stem: &str) -> BarTable {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/samples")
        .join(format!("{stem}.csv"));
    read_bars(&path).unwrap()
}

/// Every price and volume after bar `t` changed (timestamps kept).
fn perturb_prices_after(table: &BarTable, t: usize) -> BarTable {
    let mut changed = table.clone();
    for i in t + 1..changed.len() {
        changed.close[i] *= 1.37;
        changed.high[i] *= 1.5;
        changed.low[i] *= 0.5;
        changed.open[i] *= 0.9;
        changed.volume[i] = changed.volume[i] * 7 + 3;
    }
    changed
}

fn check_no_leakage(table: &BarTable, calendar: &ExchangeCalendar) {
    let config = FeatureConfig::default();
    let base = raw_features(table, calendar, &config, &Levels::new()).unwrap();
    let width = base.names.len();
    let known: Vec<usize> = (0..width)
        .filter(|&c| base.roles[c] == FeatureRole::KnownFuture)
        .collect();
    assert!(
        known.len() >= 4,
        "{}: calendar inputs missing ({:?})",
        table.symbol,
        base.names
    );
    let n = table.len();
    for t in [n / 5, n / 2, n - 2] {
        let after = raw_features(
            &perturb_prices_after(table, t),
            calendar,
            &config,
            &Levels::new(),
        )
        .unwrap();
        for row in 0..n {
            for c in 0..width {
                let (a, b) = (base.values[row * width + c], after.values[row * width + c]);
                let same = a.to_bits() == b.to_bits();
                if row <= t || known.contains(&c) {
                    assert!(
                        same,
                        "{}: {} at row {row} changed after perturbing prices past row {t}",
                        table.symbol, base.names[c]
                    );
                }
            }
        }
        // The perturbation is visible in the observed inputs after t.
        let observed_changed = (t + 1..n).any(|row| {
            (0..width).any(|c| {
                base.roles[c] == FeatureRole::ObservedPast
                    && base.values[row * width + c].to_bits()
                        != after.values[row * width + c].to_bits()
            })
        });
        assert!(
            observed_changed,
            "{}: perturbation not visible",
            table.symbol
        );
    }
}

#[test]
fn no_input_leaks_on_the_bundled_samples() {
    let book = ContractBook::builtin();
    for stem in ["es_proxy_sp500_1d", "nq_proxy_nasdaq_1d", "cl_proxy_wti_1d"] {
        let table = sample(stem);
        let calendar = ExchangeCalendar::for_contract(book.lookup(&table.symbol).unwrap()).unwrap();
        check_no_leakage(&table, &calendar);
    }
}

#[test]
fn no_input_leaks_on_synthetic_bars() {
    let book = ContractBook::builtin();
    let calendar = ExchangeCalendar::for_contract(book.lookup("ES").unwrap()).unwrap();
    for interval in [BarInterval::Day, BarInterval::Hour, BarInterval::Minute] {
        let spec = SynthSpec {
            symbol: "ES".into(),
            interval,
            bars: 900,
            start: timefmt::parse("2024-03-01").unwrap(),
            seed: 11,
            planted_strength: 0.2,
            single_contract: true,
        };
        let table = generate(&spec, book.lookup("ES").unwrap())
            .unwrap()
            .remove(0)
            .table;
        check_no_leakage(&table, &calendar);
    }
}

#[test]
fn the_annex_describes_the_dataset() {
    let book = ContractBook::builtin();
    let table = sample("es_proxy_sp500_1d");
    let contract = book.lookup(&table.symbol).unwrap();
    let config = FeatureConfig {
        target_horizons: vec![1, 5],
        ..FeatureConfig::default()
    };
    let built = build_annotated_dataset(&table, contract, &config).unwrap();
    let (d, a) = (&built.dataset, &built.annex);
    a.check_against(d).unwrap();
    assert_eq!(a.target_horizons, vec![1, 5]);
    assert!(a.target_scales.iter().all(|s| *s > 0.0 && *s < 0.2));
    // Daily log-return scale grows with the horizon (about √5 for 5 bars).
    assert!(a.target_scales[1] > 1.5 * a.target_scales[0]);
    assert_eq!(a.bar_interval_ns, BarInterval::Day.nanos());
    assert_eq!(a.feature_roles[0], FeatureRole::ObservedPast);
    assert!(a.feature_roles.contains(&FeatureRole::KnownFuture));
    // S&P 500 closures the rule-based CME calendar cannot know (2001-09-11..14,
    // 2012-10-29..30) show up as gaps; ordinary weekends and holidays do not.
    let calendar = ExchangeCalendar::for_contract(contract).unwrap();
    let markers = row_markers(&table, &calendar);
    let gaps: Vec<String> = (0..table.len())
        .filter(|&t| markers[t] & GAP_BEFORE != 0)
        .map(|t| timefmt::format_date(table.ts[t]))
        .collect();
    assert!(gaps.contains(&"2001-09-17".to_string()), "gaps: {gaps:?}");
    assert!(gaps.len() < 40, "too many gaps for a daily index: {gaps:?}");
}

/// The same test for the user's columns: observed-past columns of the bar
/// file and of a covariate file (joined as of each bar), and a
/// known-future categorical of a covariate file (joined exactly). Changing
/// every bar after t — prices, the bar file's own columns, and every
/// covariate row stamped after bar t — changes no input at or before t;
/// changing prices and observed columns changes no known-future input at all.
#[test]
fn no_user_column_leaks_from_the_bar_file_or_a_covariate_file() {
    use std::collections::BTreeMap;
    use tli_data::column_read::{ColumnValues, NamedColumn};
    use tli_data::columns::{ColumnKind, ColumnRole, Transform, UserColumn};
    use tli_data::covariates::attach_columns;

    let book = ContractBook::builtin();
    let calendar = ExchangeCalendar::for_contract(book.lookup("ES").unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for interval in [BarInterval::Day, BarInterval::Minute] {
        let spec = SynthSpec {
            symbol: "ES".into(),
            interval,
            bars: 700,
            start: timefmt::parse("2024-03-01").unwrap(),
            seed: 5,
            planted_strength: 0.2,
            single_contract: true,
        };
        let bars = generate(&spec, book.lookup("ES").unwrap())
            .unwrap()
            .remove(0)
            .table;
        let n = bars.len();
        // Covariate rows between the bars (stamped half a bar after each),
        // one before the first bar, so the as-of join picks the row before.
        let half = interval.nanos() / 2;
        let write_covariates = |name: &str, bump_after: Option<i64>| {
            let path = dir.path().join(name);
            let mut text = String::from("ts,vix\n");
            let first = bars.ts[0] - half;
            let stamps = std::iter::once(first).chain(bars.ts.iter().map(|t| t + half));
            for (k, ts) in stamps.enumerate() {
                let bumped = bump_after.is_some_and(|after| ts > after);
                let vix = 15.0 + (k % 11) as f64 + if bumped { 100.0 } else { 0.0 };
                text.push_str(&format!("{ts},{vix}\n"));
            }
            std::fs::write(&path, text).unwrap();
            path
        };
        let events = dir.path().join("events.csv");
        let mut text = String::from("ts,event\n");
        for (k, ts) in bars.ts.iter().enumerate() {
            text.push_str(&format!("{ts},{}\n", ["none", "cpi", "fomc"][k % 3]));
        }
        std::fs::write(&events, text).unwrap();
        let categorical = |name: &str, role: ColumnRole, levels: &[&str]| UserColumn {
            kind: ColumnKind::Categorical,
            levels: Some(levels.iter().map(|l| l.to_string()).collect()),
            ..UserColumn::new(name, role)
        };
        let config = |covariates: &std::path::Path| FeatureConfig {
            columns: vec![
                UserColumn {
                    transform: Transform::Diff,
                    ..UserColumn::new("ofi", ColumnRole::ObservedPast)
                },
                categorical("regime", ColumnRole::ObservedPast, &["calm", "wild"]),
                UserColumn {
                    file: Some(covariates.to_path_buf()),
                    transform: Transform::Log1p,
                    ..UserColumn::new("vix", ColumnRole::ObservedPast)
                },
                UserColumn {
                    file: Some(events.clone()),
                    ..categorical("event", ColumnRole::KnownFuture, &["cpi", "fomc"])
                },
            ],
            ..FeatureConfig::default()
        };
        let own = |table: &mut BarTable, bump_after: Option<usize>| {
            let bumped = |i: usize| bump_after.is_some_and(|t| i > t);
            table.extra = vec![
                NamedColumn {
                    name: "ofi".into(),
                    values: ColumnValues::Real(
                        (0..n)
                            .map(|i| (i % 17) as f64 + if bumped(i) { 9.0 } else { 0.0 })
                            .collect(),
                    ),
                },
                NamedColumn {
                    name: "regime".into(),
                    values: ColumnValues::Text(
                        (0..n)
                            .map(|i| {
                                Some(
                                    if (i % 5 == 0) != bumped(i) {
                                        "wild"
                                    } else {
                                        "calm"
                                    }
                                    .into(),
                                )
                            })
                            .collect(),
                    ),
                },
            ];
        };
        let levels = BTreeMap::from([
            (
                "regime".to_string(),
                vec!["calm".to_string(), "wild".into()],
            ),
            ("event".to_string(), vec!["cpi".to_string(), "fomc".into()]),
        ]);
        let base_cov = write_covariates("cov.csv", None);
        let mut base_table = bars.clone();
        own(&mut base_table, None);
        attach_columns(&mut base_table, None, &config(&base_cov), None).unwrap();
        let base = raw_features(&base_table, &calendar, &config(&base_cov), &levels).unwrap();
        let width = base.names.len();
        let user: Vec<usize> = (0..width)
            .filter(|&c| {
                ["ofi", "regime=", "vix", "event="]
                    .iter()
                    .any(|p| base.names[c].starts_with(p))
            })
            .collect();
        assert_eq!(user.len(), 6, "{:?}", base.names);
        let known: Vec<usize> = (0..width)
            .filter(|&c| base.roles[c] == FeatureRole::KnownFuture)
            .collect();
        for t in [n / 5, n / 2, n - 2] {
            let cov = write_covariates("cov_bumped.csv", Some(bars.ts[t]));
            let mut changed = perturb_prices_after(&bars, t);
            own(&mut changed, Some(t));
            attach_columns(&mut changed, None, &config(&cov), None).unwrap();
            let after = raw_features(&changed, &calendar, &config(&cov), &levels).unwrap();
            for row in 0..n {
                for c in 0..width {
                    let (a, b) = (base.values[row * width + c], after.values[row * width + c]);
                    if row <= t || known.contains(&c) {
                        assert!(
                            a.to_bits() == b.to_bits(),
                            "{interval:?}: {} at row {row} changed after perturbing everything past row {t}",
                            base.names[c]
                        );
                    }
                }
            }
            // Every observed user column shows the change after t.
            for &c in user.iter().filter(|c| !known.contains(c)) {
                let name = &base.names[c];
                if name == "regime=calm" || name == "regime=wild" || name == "ofi" || name == "vix"
                {
                    let visible = (t + 1..n).any(|row| {
                        base.values[row * width + c].to_bits()
                            != after.values[row * width + c].to_bits()
                    });
                    assert!(
                        visible,
                        "{interval:?}: {name} does not show the change after {t}"
                    );
                }
            }
        }
    }
}
