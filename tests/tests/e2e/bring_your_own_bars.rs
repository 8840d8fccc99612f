//! Bars users bring, written in the test by pandas and pyarrow
//! (tests/python/write_bar_files.py, from the project's .venv) and a
//! Yahoo-style CSV: each trains through `tli train local` and through a
//! running host once its symbol is given on the asset (`ES=FILE`, `"symbol"`
//! in a job spec); the UTC, offset and local-time versions of one file read
//! the same bars; local times without a zone are refused until `--tz` (or
//! `"tz"`) gives it.

use std::path::Path;
use std::time::{Duration, Instant};
use tli_e2e_tests::*;

const NEW_YORK: &str = "America/New_York";

/// The files of tests/python/write_bar_files.py in a fresh directory.
fn bar_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("../.venv/bin/python"))
        .arg(root.join("python/write_bar_files.py"))
        .arg(dir.path())
        .output()
        .expect("run .venv/bin/python (make bootstrap installs pandas and pyarrow)");
    assert!(
        out.status.success(),
        "write_bar_files.py: {}{}",
        stdout(&out),
        stderr(&out)
    );
    dir
}

fn path_of(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

/// Every file, as `(name, needs --tz)`.
const FILES: [(&str, bool); 6] = [
    ("pandas_utc.csv", false),
    ("pandas_offsets.csv", false),
    ("pandas_local.csv", true),
    ("pandas_ny.parquet", false),
    ("pyarrow_local.parquet", true),
    ("ES_yahoo.csv", false),
];

#[test]
fn bring_your_own_files_train_locally_once_the_symbol_is_given() {
    let (plugins, files) = (template_and_behaviour(), bar_files());
    // The file name is no contract: refused, with naming the symbol offered first.
    let yahoo = path_of(files.path(), "ES_yahoo.csv");
    let refused = run_tli(
        plugins.path(),
        &["train", "local", "-p", "template", "--data", &yahoo],
    );
    assert_eq!(refused.status.code(), Some(1));
    let err = stderr(&refused);
    assert!(
        err.contains(&format!(
            "no contract specification for symbol \"ES_yahoo\" (root \"ES_YAHOO\"). The symbol \
             is taken from the file's name; if the bars are of a listed contract, say which on \
             the asset: ES={yahoo} (tli train local --data"
        )),
        "{err}"
    );
    for (name, local) in FILES {
        let data = format!("ES={}", path_of(files.path(), name));
        let mut args = vec![
            "train", "local", "-p", "template", "--steps", "30", "--data", &data, "-o", "json",
        ];
        if local {
            args.extend(["--tz", NEW_YORK]);
        }
        let run = run_tli(plugins.path(), &args);
        let report = ok_json(&run);
        assert_eq!(report[0]["status"], "completed", "{name}: {report}");
        assert_eq!(report[0]["steps_done"], 30, "{name}: {report}");
        assert!(
            stderr(&run).contains("dataset ES: "),
            "{name}: {}",
            stderr(&run)
        );
    }
}

#[test]
fn utc_offset_and_local_versions_read_identical_bars() {
    let files = bar_files();
    let dir = files.path();
    let no_plugins = tempfile::tempdir().unwrap();
    // `tli data convert` writes what it read as UTC CSV: equal files, equal bars.
    let converted = |name: &str, tz: Option<&str>| -> String {
        let out = path_of(dir, &format!("{name}.converted.csv"));
        let source = format!("ES={}", path_of(dir, name));
        let mut args = vec!["data", "convert", &source, &out];
        if let Some(tz) = tz {
            args.extend(["--tz", tz]);
        }
        let run = run_tli(no_plugins.path(), &args);
        assert!(run.status.success(), "{name}: {}", stderr(&run));
        std::fs::read_to_string(&out).unwrap()
    };
    let utc = converted("pandas_utc.csv", None);
    assert_eq!(utc.lines().count(), 1 + 10 * 390);
    assert!(
        utc.starts_with("ts_event,open,high,low,close,volume,symbol\n2024-03-04T14:30:00Z,5100,")
    );
    assert!(utc.lines().skip(1).all(|line| line.ends_with(",ES")));
    assert!(
        utc.contains("\n2024-03-15T13:30:00Z,"),
        "EDT after 2024-03-10"
    );
    for (name, tz) in [
        ("pandas_offsets.csv", None),
        ("pandas_ny.parquet", None),
        ("pandas_local.csv", Some(NEW_YORK)),
        ("pyarrow_local.parquet", Some(NEW_YORK)),
        // A zone changes nothing where the file gives offsets.
        ("pandas_offsets.csv", Some("Asia/Tokyo")),
    ] {
        assert!(
            converted(name, tz) == utc,
            "{name} ({tz:?}) differs from the UTC file"
        );
    }

    // Local times without a zone: refused, naming the file, row and remedy.
    let local = path_of(dir, "pandas_local.csv");
    let refused = run_tli(no_plugins.path(), &["data", "inspect", &local]);
    assert_eq!(refused.status.code(), Some(1));
    let err = stderr(&refused);
    assert!(
        err.contains(
            "pandas_local.csv: row 1: column timestamp: timestamp \"2024-03-04 09:30:00\" \
             has no time zone; give the zone the file's times are in (--tz America/New_York"
        ),
        "{err}"
    );

    // Inspect says how the timestamps were read.
    let inspect = |file: &str, tz: Option<&str>| -> serde_json::Value {
        let path = path_of(dir, file);
        let mut args = vec!["data", "inspect", &path, "-o", "json"];
        if let Some(tz) = tz {
            args.extend(["--tz", tz]);
        }
        ok_json(&run_tli(no_plugins.path(), &args))[0].clone()
    };
    let timestamps = |v: &serde_json::Value| v["timestamps"].as_str().unwrap().to_string();
    assert_eq!(
        timestamps(&inspect("pandas_offsets.csv", None)),
        "3900 rows with UTC offsets -04:00, -05:00, converted to UTC"
    );
    assert_eq!(
        timestamps(&inspect("pandas_local.csv", Some(NEW_YORK))),
        "3900 rows local time in America/New_York, converted to UTC"
    );
    assert_eq!(
        timestamps(&inspect("pandas_ny.parquet", None)),
        "3900 rows UTC (the column's zone is America/New_York; its instants are stored in UTC)"
    );
    assert_eq!(
        timestamps(&inspect("ES_yahoo.csv", None)),
        "700 rows dates without a time of day (midnight UTC of the date)"
    );
    let unknown = run_tli(
        no_plugins.path(),
        &["data", "inspect", &local, "--tz", "America/NewYork"],
    );
    assert!(
        stderr(&unknown).contains("unknown time zone \"America/NewYork\""),
        "{}",
        stderr(&unknown)
    );
}

/// Polls `train status` until every task has ended; returns the status.
fn wait_until_done(server: &Server, job: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let status = ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]));
        let tasks = status["progress"]["tasks"].as_array().unwrap().clone();
        let ended = |t: &serde_json::Value| {
            ["completed", "failed", "cancelled"].contains(&t["state"].as_str().unwrap_or(""))
        };
        if !tasks.is_empty() && tasks.iter().all(ended) {
            return status;
        }
        assert!(Instant::now() < deadline, "job {job} did not end: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `(asset, state)` of every task.
fn task_assets(status: &serde_json::Value) -> Vec<(String, String)> {
    status["progress"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["asset"].as_str().unwrap().to_string(),
                t["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_running_host_trains_each_file_with_the_symbol_on_the_asset() {
    let (plugins, state, files) = (
        template_and_behaviour(),
        tempfile::tempdir().unwrap(),
        bar_files(),
    );
    let dir = files.path();
    let server = Server::start(
        plugins.path(),
        state.path(),
        &["--data-root", dir.to_str().unwrap()],
    );
    let start = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "start",
            "-p",
            "template",
            "--config",
            r#"{"hidden_sizes":[8]}"#,
            "--steps",
            "30",
            "-o",
            "json",
        ];
        args.extend_from_slice(extra);
        server.client(&args)
    };

    // Without the symbol: refused at submission, with the remedy.
    let yahoo = path_of(dir, "ES_yahoo.csv");
    let refused = start(&["-a", &yahoo]);
    assert_eq!(refused.status.code(), Some(1));
    let err = stderr(&refused);
    assert!(
        err.contains("no contract specification for symbol \"ES_yahoo\"")
            && err.contains(&format!("ES={yahoo}")),
        "{err}"
    );
    // Local times without the zone: refused at submission too.
    let local_csv = path_of(dir, "pandas_local.csv");
    let refused = start(&["-a", &format!("ES={local_csv}")]);
    assert!(
        stderr(&refused).contains("has no time zone"),
        "{}",
        stderr(&refused)
    );

    // Every file in one job: `-a SYMBOL=FILE`, `--tz` for those without zones.
    let assets: Vec<String> = FILES
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            // Two symbols in one job: the asset's symbol names it.
            let symbol = if i == 3 { "NQ" } else { "ES" };
            format!("{symbol}={}", path_of(dir, name))
        })
        .collect();
    let mut args: Vec<&str> = assets.iter().flat_map(|a| ["-a", a.as_str()]).collect();
    args.extend(["--tz", NEW_YORK]);
    let job = ok_json(&start(&args))["job_id"].as_u64().unwrap();
    let status = wait_until_done(&server, job);
    let got = task_assets(&status);
    let want: Vec<(String, String)> = assets
        .iter()
        .map(|a| (a.clone(), "completed".to_string()))
        .collect();
    assert_eq!(got, want, "{status}");

    // A job spec gives the symbol and zone per asset.
    let spec = dir.join("job.json");
    std::fs::write(
        &spec,
        serde_json::json!({
            "name": "own-bars",
            "models": [{"plugin": "template", "steps": 30, "config": {"hidden_sizes": [8]}}],
            "assets": [
                {"data": local_csv, "symbol": "ES", "tz": NEW_YORK},
                {"data": yahoo, "symbol": "ES"}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let job = ok_json(&server.client(&[
        "train",
        "start",
        "--spec",
        spec.to_str().unwrap(),
        "-o",
        "json",
    ]))["job_id"]
        .as_u64()
        .unwrap();
    let got = task_assets(&wait_until_done(&server, job));
    assert_eq!(
        got,
        [
            (format!("ES={local_csv}"), "completed".to_string()),
            (format!("ES={yahoo}"), "completed".to_string())
        ]
    );
}
