//! PNG charts of a job: `tli train plot JOB` through a running host (the
//! `GetTrainingHistory` RPC) and `tli plot --state-dir DIR --job N` on the
//! store itself, also after the host stopped. An overview, one chart per
//! metric some task reported at more than one step (a validation metric on
//! its training twin's chart), the single values in a CSV table, and one
//! memory timeline per device, valid PNGs of the asked size; `--all` charts
//! every metric; the RPC carries the series the store holds; unknown metrics
//! and jobs are clear errors.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::store::{HistoryQuery, Store};

/// Width and height from a PNG's IHDR chunk; panics if it is not a PNG.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.len() > 24 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR",
        "{} is not a PNG",
        path.display()
    );
    let be =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (be(16), be(20))
}

fn files(result: &serde_json::Value) -> &Vec<serde_json::Value> {
    result["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files in {result}"))
}

/// (kind, name) of each chart written, in order.
fn charts(result: &serde_json::Value) -> Vec<(String, String)> {
    files(result)
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every PNG exists at `size` (a figure of panels as wide, at least as tall), and
/// the table is a CSV with the rows it claims.
fn check_pngs(result: &serde_json::Value, size: (u32, u32)) {
    for f in files(result) {
        let path = Path::new(f["path"].as_str().unwrap());
        match f["kind"].as_str().unwrap() {
            "table" => {
                let text = std::fs::read_to_string(path).unwrap();
                let mut lines = text.lines();
                assert_eq!(lines.next(), Some("task_id,task,metric,step,value"));
                assert_eq!(lines.count() as u64, f["rows"].as_u64().unwrap(), "{text}");
            }
            "overview" | "model" => {
                let (w, h) = png_size(path);
                assert!(w == size.0 && h >= size.1, "{w}×{h}");
            }
            _ => assert_eq!(png_size(path), size, "{}", path.display()),
        }
    }
}

/// What a default plot of `history` writes, worked out from the stored
/// series: a figure per plugin that reported a metric at more than one step
/// (an overview before them when there are two or more), the table when a
/// metric was reported only once, the memory timeline.
fn expected_default(history: &tli_host::orchestrator::store::JobHistory) -> Vec<(String, String)> {
    let mut models: Vec<String> = Vec::new();
    for t in &history.tasks {
        if t.series.iter().any(|s| s.steps.len() > 1) && !models.contains(&t.plugin) {
            models.push(t.plugin.clone());
        }
    }
    let mut out = Vec::new();
    if models.len() >= 2 {
        out.push(("overview".to_string(), "overview".to_string()));
    }
    out.extend(models.into_iter().map(|m| ("model".to_string(), m)));
    let once = history.metric_names.iter().any(|m| {
        history
            .tasks
            .iter()
            .flat_map(|t| t.series.iter().filter(|s| &s.name == m))
            .all(|s| s.steps.len() <= 1)
    });
    if once {
        out.push(("table".into(), "scalars".into()));
    }
    out.push(("memory".into(), "cpu".into()));
    out
}

/// `tli` in `cwd` with `args`, like the helpers (no LD_LIBRARY_PATH).
fn tli_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(tli_binary())
        .args(args)
        .current_dir(cwd)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("TLI_STATE_DIR")
        .env("NO_COLOR", "1")
        .output()
        .expect("run tli")
}

fn failed_with(out: &Output, parts: &[&str]) {
    assert!(!out.status.success(), "should fail: {}", stdout(out));
    let err = stderr(out);
    for part in parts {
        assert!(err.contains(part), "{part:?} not in: {err}");
    }
}

/// `tli train plot JOB --all -o json` through the host, into `DIR/all-rpc`.
fn all_charts(server: &Server, job: &str, dir: &Path) -> serde_json::Value {
    let out = dir.join("all-rpc");
    ok_json(&server.client(&[
        "train",
        "plot",
        job,
        "--all",
        "--out",
        out.to_str().unwrap(),
        "-o",
        "json",
    ]))
}

#[test]
fn charts_of_a_job_through_the_host_and_from_its_state_dir() {
    let (plugins, state, out) = (
        template_and_behaviour(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let mut server = Server::start(plugins.path(), state.path(), &[]);
    let started = server.start_small_template_job("plots", 120);
    let job = started["job_id"].as_u64().unwrap();
    let job_arg = job.to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = ok_json(&server.client(&["train", "status", &job_arg, "-o", "json"]));
        let states: Vec<&str> = status["progress"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["state"].as_str().unwrap())
            .collect();
        if states.iter().all(|s| *s == "completed") {
            break;
        }
        assert!(Instant::now() < deadline, "job did not complete: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // What the store holds (read-only, as the host runs).
    let store = Store::open_read_only(state.path()).unwrap();
    let history = store
        .job_history(job as i64, &HistoryQuery::default())
        .unwrap()
        .unwrap();
    assert!(
        history.metric_names.iter().any(|m| m == "train_loss"),
        "{:?}",
        history.metric_names
    );
    let expected = expected_default(&history);
    assert_eq!(
        expected[0],
        ("model".to_string(), "template".to_string()),
        "{expected:?}"
    );
    let mut every_metric: Vec<(String, String)> = history
        .metric_names
        .iter()
        .map(|m| ("metric".to_string(), m.clone()))
        .collect();
    every_metric.push(("memory".into(), "cpu".into()));
    assert!(
        expected.len() < every_metric.len(),
        "fewer files than metrics: {expected:?}"
    );

    // Through the host: the overview, the curves, the table, the cpu timeline, 800×450.
    let rpc_dir = out.path().join("rpc");
    let rpc_dir_arg = rpc_dir.to_str().unwrap();
    let size_args = ["--width", "800", "--height", "450", "-o", "json"];
    let mut args = vec!["train", "plot", &job_arg, "--out", rpc_dir_arg];
    args.extend(size_args);
    let through_host = ok_json(&server.client(&args));
    assert_eq!(charts(&through_host), expected);
    check_pngs(&through_host, (800, 450));
    for f in files(&through_host) {
        assert!(f["path"].as_str().unwrap().starts_with(rpc_dir_arg), "{f}");
    }
    // Every metric as a chart of its own, for the line-by-line checks.
    let host_all = all_charts(&server, &job_arg, out.path());
    // The template's figure has a panel per metric curve, train_loss first.
    let figure = &files(&through_host)[0];
    assert_eq!(figure["metrics"][0], "train_loss", "{figure}");
    // The RPC carried the series the store holds (2 tasks × each metric).
    for f in files(&host_all).iter().filter(|f| f["kind"] == "metric") {
        let name = f["name"].as_str().unwrap();
        for line in f["series"].as_array().unwrap() {
            let task = line["task_id"].as_i64().unwrap();
            let stored = store.metric_series(task, name, 0).unwrap();
            assert_eq!(
                line["points"].as_u64(),
                Some(stored.steps.len() as u64),
                "{line}"
            );
            assert_eq!(
                line["recorded_points"].as_u64(),
                Some(stored.recorded_points)
            );
            assert_eq!(line["last_step"].as_u64(), stored.steps.last().copied());
            assert_eq!(
                line["last_value"].as_f64(),
                stored.values.last().copied().filter(|v| v.is_finite()),
                "{name} of task {task}"
            );
        }
    }
    let loss = files(&host_all)
        .iter()
        .find(|f| f["kind"] == "metric" && f["name"] == "train_loss")
        .unwrap();
    assert_eq!(loss["series"].as_array().unwrap().len(), 2, "{loss}");
    let memory = files(&through_host).last().unwrap();
    assert_eq!(memory["reservations"].as_u64(), Some(2), "{memory}");
    assert!(memory["budget_bytes"].as_u64().unwrap() > 0, "{memory}");

    // Thinned over the wire: at most 5 points, the last one kept.
    let thin = ok_json(&server.client(&[
        "train",
        "plot",
        &job_arg,
        "--metric",
        "train_loss",
        "--max-points",
        "5",
        "--out",
        out.path().join("thin").to_str().unwrap(),
        "-o",
        "json",
    ]));
    assert_eq!(
        charts(&thin),
        [
            ("metric".into(), "train_loss".into()),
            ("memory".into(), "cpu".into())
        ]
    );
    for line in files(&thin)[0]["series"].as_array().unwrap() {
        let stored = store
            .metric_series(line["task_id"].as_i64().unwrap(), "train_loss", 0)
            .unwrap();
        assert!(stored.steps.len() > 5, "a long enough series to thin");
        assert_eq!(line["points"].as_u64(), Some(5), "{line}");
        assert_eq!(line["last_step"].as_u64(), stored.steps.last().copied());
    }

    // Without --out: ./tli-plots/job-N, one path per line; default size.
    let cwd = out.path().join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let endpoint = server.endpoint();
    let plain = tli_in(
        &cwd,
        &[
            "train",
            "plot",
            &job_arg,
            "--metric",
            "train_loss",
            "--endpoint",
            &endpoint,
        ],
    );
    assert!(plain.status.success(), "{}", stderr(&plain));
    let default_dir = format!("tli-plots/job-{job}");
    assert_eq!(
        stdout(&plain).lines().collect::<Vec<_>>(),
        [
            format!("{default_dir}/metric-train_loss.png"),
            format!("{default_dir}/memory-cpu.png")
        ]
    );
    assert_eq!(
        png_size(&cwd.join(&default_dir).join("metric-train_loss.png")),
        (1200, 700)
    );

    // Mistakes: an unknown metric lists those that exist; an unknown job; a
    // place that cannot be written.
    let unknown = server.client(&[
        "train",
        "plot",
        &job_arg,
        "--metric",
        "sharpe_ratio",
        "--out",
        rpc_dir_arg,
    ]);
    failed_with(
        &unknown,
        &[
            "\"sharpe_ratio\"",
            "the metrics reported are:",
            "train_loss",
        ],
    );
    failed_with(
        &server.client(&["train", "plot", "999"]),
        &["not found", "job 999"],
    );
    let file = out.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let blocked = server.client(&["train", "plot", &job_arg, "--out", file.to_str().unwrap()]);
    failed_with(&blocked, &["cannot write charts to", "a-file"]);

    // From the state directory, after the host stopped: the same charts, the same lines.
    server.terminate();
    let store_dir = out.path().join("store");
    let state_arg = state.path().to_str().unwrap();
    let mut args = vec!["plot", "--state-dir", state_arg, "--job", &job_arg, "--out"];
    args.push(store_dir.to_str().unwrap());
    args.extend(size_args);
    let from_store = ok_json(&tli_in(out.path(), &args));
    assert_eq!(charts(&from_store), expected);
    check_pngs(&from_store, (800, 450));
    assert_eq!(files(&through_host).len(), files(&from_store).len());
    // The job as `tli train plot` takes it: JOB, positional.
    let positional = out.path().join("positional");
    let mut args = vec!["plot", &job_arg, "--state-dir", state_arg, "--out"];
    args.push(positional.to_str().unwrap());
    args.extend(size_args);
    assert_eq!(charts(&ok_json(&tli_in(out.path(), &args))), expected);
    // --all: a chart per metric, single values included.
    let all = out.path().join("all");
    let mut args = vec!["plot", &job_arg, "--state-dir", state_arg, "--all", "--out"];
    args.push(all.to_str().unwrap());
    args.extend(size_args);
    let all = ok_json(&tli_in(out.path(), &args));
    assert_eq!(charts(&all), every_metric);
    check_pngs(&all, (800, 450));
    for (a, b) in files(&host_all).iter().zip(files(&all)) {
        assert_eq!(a["series"], b["series"], "the RPC and the store agree");
    }
    failed_with(
        &tli_in(out.path(), &["plot", "999", "--state-dir", state_arg]),
        &["job 999 not found in the store"],
    );
    failed_with(
        &tli_in(
            out.path(),
            &[
                "plot",
                "--state-dir",
                state_arg,
                "--job",
                &job_arg,
                "--metric",
                "nope",
            ],
        ),
        &["\"nope\"", "train_loss"],
    );
}
