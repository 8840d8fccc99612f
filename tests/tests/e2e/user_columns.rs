//! Your own columns through the real binaries. `tli data synth
//! --planted-covariates` writes daily bars with an observed-past column
//! (`ofi`, leads the next return) and a known-future event flag (`event`,
//! FOMC bars move up); a host trains the TFT, the template MLP, Mamba-2 and
//! PPO with them from `tli train start --feature-column`, and the TFT and
//! the MLP again without them. With the columns they forecast better, the
//! cards record the columns, `tli predict` sends the file's columns and the
//! TFT's forecast moves up on FOMC bars; a file without a column the model
//! reads is refused naming it; and every bad input is refused in one line
//! with nothing stored.

use std::path::{Path, PathBuf};
use tli_e2e_tests::*;

const TFT_SMALL: &str = r#"tft={"hidden_size": 16, "attention_heads": 2, "lookback": 20,
    "horizons": 1, "learning_rate": 0.003, "batch_size": 32, "eval_batch_size": 256}"#;
const MAMBA2_SMALL: &str = r#"mamba2={"d_model": 16, "layers": 1, "d_state": 8, "headdim": 8,
    "chunk_size": 8, "lookback": 32, "batch_size": 16, "horizons": 1}"#;
const PPO_SMALL: &str = r#"ppo={"num_envs": 2, "num_steps": 32, "hidden_sizes": [16]}"#;
const COLUMNS: [&str; 4] = [
    "--feature-column",
    "ofi:observed_past",
    "--feature-column",
    "event:known_future:categorical",
];

/// `tli data synth --planted-covariates` of 1,500 bars of `symbol` into `dir/name`.
fn synth(dir: &Path, name: &str, symbol: &str, seed: &str) -> PathBuf {
    let path = dir.join(name);
    let out = run_tli(
        Path::new("/nonexistent"),
        &[
            "data",
            "synth",
            "--planted-covariates",
            "--symbol",
            symbol,
            "--bars",
            "1500",
            "--seed",
            seed,
            "-O",
            path.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    path
}

/// `file` with column `column` of each row after the header rewritten by `edit`
/// (row index from 0, old value → new value), written to `out`.
fn rewrite(file: &Path, out: &Path, column: &str, edit: impl Fn(usize, &str) -> String) {
    let text = std::fs::read_to_string(file).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let at = header.split(',').position(|c| c == column);
    let mut written = vec![header.to_string()];
    for (i, line) in lines.enumerate() {
        let mut fields: Vec<String> = line.split(',').map(str::to_string).collect();
        match at {
            Some(c) => fields[c] = edit(i, &fields[c]),
            None => fields.push(edit(i, "")),
        }
        written.push(fields.join(","));
    }
    let mut header_fields = written[0].clone();
    if at.is_none() {
        header_fields.push(',');
        header_fields.push_str(column);
    }
    written[0] = header_fields;
    std::fs::write(out, written.join("\n") + "\n").unwrap();
}

/// `file` without column `column`.
fn drop_column(file: &Path, out: &Path, column: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let c = header.iter().position(|h| *h == column).unwrap();
    let kept: Vec<String> = text
        .lines()
        .map(|line| {
            let mut fields: Vec<&str> = line.split(',').collect();
            fields.remove(c);
            fields.join(",")
        })
        .collect();
    std::fs::write(out, kept.join("\n") + "\n").unwrap();
}

fn start(server: &Server, args: &[&str]) -> std::process::Output {
    let mut all = vec!["train", "start", "--seed", "3", "-o", "json"];
    all.extend_from_slice(args);
    server.client(&all)
}

fn job_ids(server: &Server) -> Vec<u64> {
    ok_json(&server.client(&["train", "list", "-o", "json"]))["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect()
}

/// Each task's (plugin, test metrics) of a finished job.
fn finished(server: &Server, job: u64) -> Vec<(String, serde_json::Value, u64)> {
    let out = server.client(&["train", "watch", &job.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]));
    status["progress"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["state"], "completed", "{status}");
            (
                t["plugin"].as_str().unwrap().to_string(),
                t["metrics"].clone(),
                t["task_id"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn metric(tasks: &[(String, serde_json::Value, u64)], plugin: &str, name: &str) -> f64 {
    let (_, m, _) = tasks.iter().find(|(p, _, _)| p == plugin).unwrap();
    m[name]
        .as_f64()
        .unwrap_or_else(|| panic!("{plugin} reported no {name}: {m}"))
}

fn mean_p50(csv: &str) -> f64 {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let c = header.iter().position(|h| h.ends_with(":p50")).unwrap();
    let values: Vec<f64> = lines
        .map(|l| l.split(',').nth(c).unwrap().parse().unwrap())
        .collect();
    values.iter().sum::<f64>() / values.len() as f64
}

#[test]
fn user_columns_train_forecast_and_refuse_bad_input_through_a_host() {
    let plugins = PluginDir::with(&[
        (TFT, "tft"),
        (TEMPLATE, "template"),
        (MAMBA2, "mamba2"),
        (PPO, "ppo"),
    ]);
    let (dir, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let bars = synth(dir.path(), "planted.csv", "ES", "4");
    let asset = format!("ES={}", bars.display());
    let root = dir.path().to_str().unwrap();
    let server = Server::start(
        plugins.path(),
        state.path(),
        &["--data-root", root, "--ui-listen", "off"],
    );

    // Columns shape a bar file's inputs: without one, `train local` refuses them.
    let out = run_tli(
        plugins.path(),
        &[
            "train",
            "local",
            "-p",
            "template",
            "--feature-column",
            "ofi:observed_past",
        ],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("give --data"), "{}", stderr(&out));

    // What the models will receive, with the columns' roles and sources.
    let shown = run_tli(
        plugins.path(),
        &[
            "data",
            "inspect",
            &asset,
            "--features",
            COLUMNS[0],
            COLUMNS[1],
            COLUMNS[2],
            COLUMNS[3],
            "-o",
            "json",
        ],
    );
    let features = &ok_json(&shown)[0]["features"];
    let named = |name: &str| {
        features
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {features}"))
            .clone()
    };
    assert_eq!(named("ofi")["role"], "observed_past");
    assert_eq!(named("ofi")["source"], "bar file");
    assert_eq!(named("event=FOMC")["role"], "known_future");
    assert_eq!(
        named("event=FOMC")["variable"],
        named("event=CPI")["variable"]
    );

    // Every model family with the columns, and the forecasters without them.
    let (tft, template) = (["-p", "tft"], ["-p", "template"]);
    let mut with_args = vec![
        "-a",
        &asset,
        "--steps",
        "120",
        "--config",
        TFT_SMALL,
        "--config",
        MAMBA2_SMALL,
        "--config",
        PPO_SMALL,
    ];
    with_args.extend_from_slice(&tft);
    with_args.extend_from_slice(&template);
    with_args.extend_from_slice(&["-p", "mamba2", "-p", "ppo"]);
    with_args.extend_from_slice(&COLUMNS);
    let with_job = ok_json(&start(&server, &with_args))["job_id"]
        .as_u64()
        .unwrap();
    let mut without_args = vec!["-a", &asset, "--steps", "120", "--config", TFT_SMALL];
    without_args.extend_from_slice(&tft);
    without_args.extend_from_slice(&template);
    let without_job = ok_json(&start(&server, &without_args))["job_id"]
        .as_u64()
        .unwrap();
    let with = finished(&server, with_job);
    let without = finished(&server, without_job);
    assert_eq!(with.len(), 4);
    // The planted columns carry what the prices alone cannot.
    for (plugin, name) in [("tft", "test_qrisk_p50"), ("template", "test_mse")] {
        let (a, b) = (metric(&with, plugin, name), metric(&without, plugin, name));
        assert!(
            a < 0.97 * b,
            "{plugin} {name}: {a} with the columns, {b} without"
        );
    }
    assert!(metric(&with, "template", "test_correlation") > 0.2);
    // The TFT weighs the planted inputs most where they act.
    let (_, tft_metrics, tft_task) = with.iter().find(|(p, _, _)| p == "tft").unwrap();
    let weights = |group: &str| -> Vec<(String, f64)> {
        tft_metrics
            .as_object()
            .unwrap()
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(&format!("test_vsn_{group}_"))
                    .map(|n| (n.to_string(), v.as_f64().unwrap()))
            })
            .collect()
    };
    let top = |group: &str| {
        weights(group)
            .into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
            .0
    };
    assert_eq!(top("future"), "event", "{:?}", weights("future"));
    // After 120 steps ofi is not yet the top input at the last encoder bar (the
    // bench trains longer: docs/benchmarks.md), but it is above an even share.
    let last = weights("last");
    let ofi = last.iter().find(|(n, _)| n == "ofi").unwrap().1;
    assert!(ofi > 1.0 / last.len() as f64, "{last:?}");

    // Each model's card records the columns; PPO's observation window holds them.
    for (plugin, _, task) in &with {
        let card = ok_json(&server.client(&["models", "show", &task.to_string(), "-o", "json"]))
            ["card"]
            .clone();
        let columns = &card["features"]["columns"];
        assert_eq!(columns[0]["name"], "ofi", "{plugin}: {card}");
        assert_eq!(columns[1]["kind"], "categorical", "{plugin}: {card}");
        let names = card["inputs"]["feature_names"].to_string();
        assert!(
            names.contains("\"ofi\"") && names.contains("\"event=FOMC\""),
            "{plugin}: {names}"
        );
    }

    // The same bars with every event FOMC, then none: the forecast moves up.
    let loaded = server.client(&["models", "load", &tft_task.to_string()]);
    assert!(loaded.status.success(), "{}", stderr(&loaded));
    let (fomc, none) = (dir.path().join("fomc.csv"), dir.path().join("none.csv"));
    rewrite(&bars, &fomc, "event", |_, _| "FOMC".into());
    rewrite(&bars, &none, "event", |_, _| "none".into());
    let predict = |file: &Path| {
        let out = server.client(&[
            "predict",
            "--model",
            &tft_task.to_string(),
            "--data",
            &format!("ES={}", file.display()),
            "--start",
            "2028-01-01",
            "-o",
            "csv",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let effect = (mean_p50(&predict(&fomc)) - mean_p50(&predict(&none))) / 0.01;
    assert!(
        effect > 0.3,
        "the TFT moved FOMC forecasts by {effect}σ (planted: 1.5σ)"
    );

    // New bars without a column the model reads: refused, naming it.
    let lacking = dir.path().join("no-event.csv");
    drop_column(&bars, &lacking, "event");
    let out = server.client(&[
        "predict",
        "--model",
        &tft_task.to_string(),
        "--data",
        &format!("ES={}", lacking.display()),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("has no column \"event\""),
        "{}",
        stderr(&out)
    );

    // One covariate file shared by the assets of a pooled task (NQ: another planted file
    // on the same days), joined as of each bar of each.
    let nq = synth(dir.path(), "nq.csv", "NQ", "5");
    let shared = dir.path().join("shared-vix.csv");
    let mut cov = String::from("ts_event,vix\n");
    for (i, line) in std::fs::read_to_string(&bars)
        .unwrap()
        .lines()
        .skip(1)
        .enumerate()
    {
        cov.push_str(&format!(
            "{},{}\n",
            line.split(',').next().unwrap(),
            15 + i % 7
        ));
    }
    std::fs::write(&shared, cov).unwrap();
    let shared_column = format!("vix:observed_past:file={}", shared.display());
    let nq_asset = format!("NQ={}", nq.display());
    let pooled = ok_json(&start(
        &server,
        &[
            "-p",
            "template",
            "--pooled",
            "-a",
            &asset,
            "-a",
            &nq_asset,
            "--steps",
            "30",
            "--feature-column",
            "ofi:observed_past",
            "--feature-column",
            &shared_column,
        ],
    ))["job_id"]
        .as_u64()
        .unwrap();
    let pooled_tasks = finished(&server, pooled);
    assert_eq!(pooled_tasks.len(), 1, "one pooled task");
    let card = ok_json(&server.client(&[
        "models",
        "show",
        &pooled_tasks[0].2.to_string(),
        "-o",
        "json",
    ]))["card"]
        .clone();
    assert_eq!(card["assets"].as_array().unwrap().len(), 2, "{card}");
    let files = card["training"]["data"].to_string();
    assert!(files.contains("shared-vix.csv"), "{files}");

    // A model of another target trains, predicts its target, and is not traded.
    let vol = ok_json(&start(
        &server,
        &[
            "-p",
            "template",
            "-a",
            &asset,
            "--steps",
            "20",
            "--target",
            "fwd_realized_vol",
            "--target-horizons",
            "5",
        ],
    ))["job_id"]
        .as_u64()
        .unwrap();
    let vol_task = finished(&server, vol)[0].2.to_string();
    let loaded = server.client(&["models", "load", &vol_task]);
    assert!(loaded.status.success(), "{}", stderr(&loaded));
    let data = format!("ES={}", bars.display());
    let out = server.client(&[
        "predict", "--model", &vol_task, "--data", &data, "-o", "csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out)
            .lines()
            .next()
            .unwrap()
            .contains("fwd_realized_vol_5"),
        "{}",
        stdout(&out)
    );
    let out = server.client(&["backtest", "--model", &vol_task, "--data", &data]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("forecasts fwd_realized_vol rather than returns"),
        "{}",
        stderr(&out)
    );

    // Bad input: one clear line each, and no job stored.
    let jobs = job_ids(&server);
    let gap = dir.path().join("gap.csv");
    rewrite(&bars, &gap, "event", |i, v| {
        if i == 700 {
            String::new()
        } else {
            v.to_string()
        }
    });
    let basis = dir.path().join("basis.csv");
    rewrite(&bars, &basis, "basis", |i, _| {
        if i == 1499 {
            "NaN".into()
        } else {
            "0.5".into()
        }
    });
    let late = dir.path().join("late-vix.csv");
    let text = std::fs::read_to_string(&bars).unwrap();
    let mut cov = String::from("ts_event,vix\n");
    for line in text.lines().skip(11) {
        cov.push_str(&format!("{},20\n", line.split(',').next().unwrap()));
    }
    std::fs::write(&late, cov).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let elsewhere = outside.path().join("vix.csv");
    std::fs::copy(&late, &elsewhere).unwrap();
    let gap_asset = format!("ES={}", gap.display());
    let basis_asset = format!("ES={}", basis.display());
    let late_column = format!("vix:observed_past:file={}", late.display());
    let outside_column = format!("vix:observed_past:file={}", elsewhere.display());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["-a", &asset, "--feature-column", "imbalance:observed_past"],
            "has no column \"imbalance\"",
        ),
        (
            vec!["-a", &asset, "--feature-column", "event:observed_past"],
            "as a number (declare the column categorical if it holds labels)",
        ),
        (
            vec![
                "-a",
                &asset,
                "--feature-column",
                "event:known_future:categorical:levels=2",
            ],
            "categorical column event has 3 levels in the training split",
        ),
        (
            vec![
                "-a",
                &gap_asset,
                "--feature-column",
                "event:known_future:categorical",
            ],
            "column event (known_future) has no value at",
        ),
        (
            vec!["-a", &asset, "--feature-column", &late_column],
            "late-vix.csv: starts at",
        ),
        (
            vec!["-a", &basis_asset, "--target", "column:basis"],
            "target column basis has no value at",
        ),
        (
            vec!["-a", &asset, "--feature-column", &outside_column],
            "outside the host's data roots",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["-p", "template", "--steps", "5"];
        all.extend_from_slice(&args);
        let out = start(&server, &all);
        let message = stderr(&out);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(message.contains(expected), "{expected:?} in: {message}");
        assert_eq!(
            message.trim().lines().count(),
            1,
            "one line for {args:?}: {message}"
        );
    }
    assert_eq!(job_ids(&server), jobs, "a refused job was stored");
}
