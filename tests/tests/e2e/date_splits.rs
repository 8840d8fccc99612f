//! Cuts and splits by date with the real binaries: `tli train start --start --end
//! --valid-start --test-start` through a host (the API's additive asset fields and features),
//! and `tli train local` with the same dates offline, give a model card whose splits begin
//! and end on the bars a hand count over the file says (the embargo bar left out before each
//! split); bad dates are refused before anything runs.

use super::predict_cli::{bar_times, day_ns, sample};
use tli_e2e_tests::*;

const ES: &str = "data/samples/es_proxy_sp500_1d.csv";

fn splits(card: &serde_json::Value) -> [[i64; 2]; 3] {
    let s = &card["assets"][0]["splits"];
    ["train", "valid", "test"].map(|k| [0, 1].map(|i| s[k][i].as_i64().unwrap()))
}

#[test]
fn splits_and_cuts_given_as_dates_begin_and_end_on_the_bars_a_hand_count_says() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), state.path(), &[]);
    let file = format!("ES={}", sample(ES).display());
    let dates = [
        "--start",
        "2005-01-03",
        "--end",
        "2017-12-29",
        "--valid-start",
        "2014-01-02",
        "--test-start",
        "2016-01-04",
    ];
    let mut args = vec![
        "train", "start", "-p", "template", "-a", &file, "--steps", "40",
    ];
    args.extend(dates);
    args.push("--watch");
    let out = server.client(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = ok_json(&server.client(&["models", "show", "1", "-o", "json"]));
    let card = &shown["card"];
    assert_eq!(
        card["features"]["test_start"],
        day_ns("2016-01-04T00:00:00Z")
    );

    // By hand: the bars from 2005-01-03 to 2017-12-29; rows from the 21st (20 bars of
    // look-back) to the one before the last (its target is the next bar); the test split
    // from the first bar on or after 2016-01-04, the validation split from 2014-01-02, one
    // embargo bar (the target horizon) before each.
    let ts: Vec<i64> = bar_times(ES)
        .into_iter()
        .filter(|&t| (day_ns("2005-01-03T00:00:00Z")..=day_ns("2017-12-29T00:00:00Z")).contains(&t))
        .collect();
    let usable = &ts[20..ts.len() - 1];
    let at = |date: &str| usable.partition_point(|&t| t < day_ns(&format!("{date}T00:00:00Z")));
    let (valid, test) = (at("2014-01-02"), at("2016-01-04"));
    assert_eq!(usable[test], day_ns("2016-01-04T00:00:00Z"));
    let expected = [
        [usable[0], usable[valid - 2]],
        [usable[valid], usable[test - 2]],
        [usable[test], *usable.last().unwrap()],
    ];
    assert_eq!(splits(card), expected);

    // Offline, the same dates (the splits as features JSON, the cut as flags): the same splits.
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("m");
    let out = run_tli(
        plugins.path(),
        &[
            "train",
            "local",
            "-p",
            "template",
            "--steps",
            "20",
            "--data",
            &file,
            "--start",
            "2005-01-03",
            "--end",
            "2017-12-29",
            "--features",
            r#"{"valid_start":"2014-01-02","test_start":"2016-01-04"}"#,
            "--save",
            bundle.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let local: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("model.json")).unwrap()).unwrap();
    assert_eq!(splits(&local), expected);

    // Refused before anything runs: one line each, no job added.
    let refused = |extra: &[&str], expected: &str| {
        let mut args = vec!["train", "start", "-p", "template", "-a", &file];
        args.extend(extra);
        let out = server.client(&args);
        // 1 for what the spec check refuses, 2 for what the argument parser refuses.
        assert!(matches!(out.status.code(), Some(1 | 2)), "{}", stderr(&out));
        let text = stderr(&out);
        assert!(text.contains(expected), "expected {expected:?} in: {text}");
    };
    refused(
        &["--valid-start", "2016-01-04", "--test-start", "2014-01-02"],
        "is not before test_start",
    );
    refused(
        &["--start", "2017-01-01", "--end", "2016-01-01"],
        "assets[0].start",
    );
    refused(&["--test-start", "next tuesday"], "next tuesday");
    let jobs = ok_json(&server.client(&["train", "list", "-o", "json"]));
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");

    // A cut that leaves no bar fails the task with the file's range, not silently.
    let spec = dir.path().join("late.json");
    std::fs::write(
        &spec,
        serde_json::json!({
            "name": "late",
            "models": [{"plugin": "template", "steps": 5}],
            "assets": [{"data": sample(ES), "symbol": "ES", "start": "2030-01-01"}],
        })
        .to_string(),
    )
    .unwrap();
    let out = server.client(&[
        "train",
        "start",
        "--spec",
        spec.to_str().unwrap(),
        "--watch",
    ]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        text.contains("no bar lies between 2030-01-01")
            && text.contains("the file's bars run from 1999-01-04"),
        "{text}"
    );
}
