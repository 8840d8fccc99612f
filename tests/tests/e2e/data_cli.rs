//! `tli data` through the real binary: synthetic bars with rolls, inspect,
//! refusal of unknown contracts, and learning on a planted signal through
//! the whole pipeline (DBN → features → ABI → template plugin).

use std::path::Path;
use tli_e2e_tests::*;

fn synth(dir: &Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let out = dir.join(name);
    let mut args = vec!["data", "synth", "-O", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let run = run_tli(dir, &args);
    assert!(run.status.success(), "{}", stderr(&run));
    out
}

#[test]
fn synthetic_bars_roll_between_quarterly_contracts_and_are_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--symbol",
        "NQ.FUT",
        "--interval",
        "1h",
        "--bars",
        "3000",
        "--seed",
        "4",
    ];
    let a = synth(dir.path(), "a.dbn.zst", &args);
    let b = synth(dir.path(), "b.dbn.zst", &args);
    assert_eq!(
        std::fs::read(&a).unwrap(),
        std::fs::read(&b).unwrap(),
        "same seed, same bytes"
    );

    let summary = json(&run_tli(
        dir.path(),
        &["data", "inspect", a.to_str().unwrap(), "-o", "json"],
    ));
    let s = &summary[0];
    assert_eq!(s["symbol"], "NQ.FUT");
    assert_eq!(s["interval"], "1h");
    assert_eq!(s["bars"], 3000);
    assert!(
        s["contract"]
            .as_str()
            .unwrap()
            .starts_with("NQ (E-mini Nasdaq-100"),
        "{s}"
    );
    let rolls = s["rolls"].as_array().unwrap();
    assert!(!rolls.is_empty(), "a 3000-hour series spans an expiry: {s}");
    assert_eq!(rolls[0]["from"], "NQH24");
    assert_eq!(rolls[0]["to"], "NQM24");
    // Hourly bars stop for the daily break and the weekend: gaps are reported.
    assert!(s["gap_count"].as_u64().unwrap() > 0);

    // What plugins receive (plugin API 1.1): roles, horizons, scales, interval, markers.
    let view = json(&run_tli(
        dir.path(),
        &[
            "data",
            "inspect",
            "--features",
            "--feature-config",
            r#"{"target_horizons":[1,4]}"#,
            a.to_str().unwrap(),
            "-o",
            "json",
        ],
    ));
    let v = &view[0];
    assert_eq!(v["bar_interval_ns"], 3_600_000_000_000i64);
    let roles: Vec<(&str, &str)> = v["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["role"].as_str().unwrap()))
        .collect();
    assert!(roles.contains(&("logret_1", "observed_past")), "{roles:?}");
    assert!(roles.contains(&("tod_sin", "known_future")), "{roles:?}");
    assert!(
        roles.contains(&("days_to_roll", "known_future")),
        "{roles:?}"
    );
    let targets = v["targets"].as_array().unwrap();
    assert_eq!(targets[1]["name"], "fwd_logret_4");
    assert_eq!(targets[1]["horizon"], 4);
    assert!(targets[1]["scale"].as_f64().unwrap() > targets[0]["scale"].as_f64().unwrap());
    // The NQH24 → NQM24 roll is marked on the row where the new contract starts.
    assert!(!v["roll_rows"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn unknown_contracts_are_refused_until_a_contracts_file_adds_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.dbn");
    let run = run_tli(
        dir.path(),
        &[
            "data",
            "synth",
            "--symbol",
            "FDAX.FUT",
            "-O",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(run.status.code(), Some(1));
    let err = stderr(&run);
    assert!(
        err.contains("no contract specification for symbol \"FDAX.FUT\""),
        "{err}"
    );
    assert!(!out.exists(), "nothing is written for a refused request");

    let contracts = dir.path().join("contracts.toml");
    std::fs::write(&contracts, "[[contract]]\nroot = \"FDAX\"\nname = \"DAX\"\nexchange = \"EUREX\"\ntick_size = 1.0\npoint_value = 25.0\ncurrency = \"EUR\"\nsession = \"01:15-22:00 CET\"\nreference_price = 18000.0\n").unwrap();
    let run = run_tli(
        dir.path(),
        &[
            "data",
            "synth",
            "--symbol",
            "FDAX.FUT",
            "--bars",
            "500",
            "--contracts",
            contracts.to_str().unwrap(),
            "-O",
            out.to_str().unwrap(),
        ],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    let listed = json(&run_tli_with_env(
        dir.path(),
        &["data", "contracts", "-o", "json"],
        &[("TLI_CONTRACTS", contracts.to_str().unwrap())],
    ));
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["root"] == "FDAX" && c["currency"] == "EUR"));
}

#[test]
fn bad_bar_files_are_refused_with_file_row_and_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "ts_event,open,high,low,close,volume\n2024-01-02,10,11,9,10.5,100\n2024-01-03,10,9,11,10.5,100\n").unwrap();
    let run = run_tli(dir.path(), &["data", "inspect", bad.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(1));
    let err = stderr(&run);
    assert!(
        err.contains("bad.csv: row 2: high 9 is below low 11"),
        "{err}"
    );
}

#[test]
fn the_template_learns_a_planted_signal_through_the_whole_pipeline() {
    let dir = PluginDir::new();
    dir.add(TEMPLATE, "template");
    let skill = |rho: &str| {
        let file = synth(
            dir.path(),
            &format!("es_{rho}.dbn.zst"),
            &[
                "--interval",
                "1d",
                "--bars",
                "5000",
                "--seed",
                "3",
                "--planted-strength",
                rho,
            ],
        );
        let run = run_tli(
            dir.path(),
            &[
                "train",
                "local",
                "-p",
                "template",
                "--steps",
                "300",
                "--data",
                file.to_str().unwrap(),
                "-o",
                "json",
            ],
        );
        assert!(run.status.success(), "{}", stderr(&run));
        let report = json(&run);
        assert!(stderr(&run).contains("dataset ES.FUT:"), "{}", stderr(&run));
        report[0]["evaluation"]["valid_correlation"]
            .as_f64()
            .unwrap()
    };
    let planted = skill("0.3");
    let none = skill("0");
    assert!(
        planted > 0.15,
        "correlation with a planted ρ = 0.3: {planted}"
    );
    assert!(planted > none + 0.1, "planted {planted} vs none {none}");
}

/// One bar of a real file with its prices a trillion times too large:
/// `tli data inspect` lists it (bar, time, column, value, the typical close
/// around it), and a host accepts a job on the file but says so, on stderr
/// of `train start` (stdout keeps its JSON). Both used to pass it silently.
#[test]
fn an_absurd_bar_is_flagged_by_inspect_and_at_submission() {
    let dir = tempfile::tempdir().unwrap();
    let sample =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/samples/es_proxy_sp500_1d.csv");
    let text = std::fs::read_to_string(sample).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // Row 200: open, high, low and close times 1e12 (a bar in the wrong unit).
    let header: Vec<String> = lines[0].split(',').map(str::to_string).collect();
    let mut changed: Vec<String> = lines[200].split(',').map(str::to_string).collect();
    for column in ["open", "high", "low", "close"] {
        let i = header.iter().position(|h| h == column).unwrap();
        changed[i] = format!("{}", changed[i].parse::<f64>().unwrap() * 1e12);
    }
    lines[200] = changed.join(",");
    let bars = dir.path().join("es.csv");
    std::fs::write(&bars, lines.join("\n") + "\n").unwrap();

    let inspect = std::process::Command::new(tli_binary())
        .args(["data", "inspect"])
        .arg(&bars)
        .output()
        .unwrap();
    assert!(inspect.status.success(), "{}", stderr(&inspect));
    let shown = stdout(&inspect);
    assert!(
        shown.contains("4 price(s) on 1 bar(s) far from every bar around them"),
        "{shown}"
    );
    assert!(
        shown.contains("bar 200 (1999-10-18T00:00:00Z): open "),
        "{shown}"
    );
    let json = std::process::Command::new(tli_binary())
        .args(["data", "inspect", "-o", "json"])
        .arg(&bars)
        .output()
        .unwrap();
    let summary = ok_json(&json);
    assert_eq!(summary[0]["outlier_count"], 4, "{summary}");
    assert_eq!(summary[0]["outlier_bars"], 1, "{summary}");
    assert_eq!(summary[0]["outliers"][3]["column"], "close", "{summary}");

    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::tempdir().unwrap();
    let root = format!("--data-root={}", dir.path().display());
    let server = Server::start(plugins.path(), state.path(), &[&root]);
    let started = server.client(&[
        "train",
        "start",
        "-p",
        "template",
        "-a",
        bars.to_str().unwrap(),
        "--steps",
        "5",
        "-o",
        "json",
    ]);
    assert!(started.status.success(), "{}", stderr(&started));
    assert!(ok_json(&started)["job_id"].is_u64());
    let warned = stderr(&started);
    assert!(
        warned.contains("warning: ")
            && warned.contains("es.csv: 1 bar(s) with prices far from every bar"),
        "{warned}"
    );
}
