//! The host's TensorBoard event files, read back by TensorBoard itself
//! (`tests/python/tensorboard_roundtrip.py`: its `EventAccumulator`): every
//! metric of every slice the store holds is a scalar at its exact step with
//! its value (f32) under its grouped tag (`train/loss`), beside steps/s, the
//! measured memory, the hyperparameters as text and for the HParams
//! dashboard; each task's run named by its plugin and asset; a host killed
//! and restarted (a new file, the redone steps dropped); `--tensorboard-dir`
//! and `--no-tensorboard`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::store::{Store, TaskRow};
use tli_host::tensorboard::{run_name, scalar_tag, HYPERPARAMETERS, MEMORY_TAGS, STEPS_PER_SECOND};

/// A task's run in what the reader printed.
fn run_of<'a>(runs: &'a serde_json::Value, task: &TaskRow) -> &'a serde_json::Value {
    &runs[run_name(task.job_id, task.id, &task.plugin, &task.asset)]
}

/// What the Python reader printed: run (`job-N/task-M-…`) → its scalars, texts and hparams.
fn read_back(root: &Path) -> serde_json::Value {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(manifest.join("../.venv/bin/python"))
        .arg(manifest.join("python/tensorboard_roundtrip.py"))
        .arg(root)
        .output()
        .expect("run python");
    ok_json(&out)
}

/// A value as the reader prints it: a number, or "nan" / "inf" / "-inf".
fn as_f32(value: &serde_json::Value) -> f32 {
    match value {
        serde_json::Value::String(s) => s.parse().unwrap_or_else(|_| panic!("value {s}")),
        v => v.as_f64().unwrap_or_else(|| panic!("value {v}")) as f32,
    }
}

/// One tag's points as (step, value).
fn points(run: &serde_json::Value, tag: &str) -> Vec<(u64, f32)> {
    run["scalars"][tag]
        .as_array()
        .unwrap_or_else(|| panic!("no scalar {tag} in {run}"))
        .iter()
        .map(|p| (p[0].as_u64().expect("step"), as_f32(&p[1])))
        .collect()
}

/// Same step and the same f32 (NaN equal to NaN).
fn same(a: &[(u64, f32)], b: &[(u64, f32)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((s1, v1), (s2, v2))| s1 == s2 && (v1 == v2 || (v1.is_nan() && v2.is_nan())))
}

#[test]
fn every_stored_metric_reads_back_from_tensorboard_with_rate_memory_and_hyperparameters() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::tempdir().expect("temp dir");
    let mut server = Server::start(plugins.path(), state.path(), &[]);
    let started = server.start_small_template_job("tb", 60);
    let job = started["job_id"].as_i64().expect("job id");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]));
        let tasks = status["progress"]["tasks"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !tasks.is_empty() && tasks.iter().all(|t| t["state"] == "completed") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job never completed: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server.terminate();

    let runs = read_back(&state.path().join("tb"));
    let store = Store::open_read_only(state.path()).expect("store");
    let tasks = assert_every_metric_matches_the_store(&runs, &store, job);
    assert_eq!(tasks.len(), 2);
    for task in &tasks {
        let run = run_of(&runs, task);
        let rate = points(run, STEPS_PER_SECOND);
        assert!(
            !rate.is_empty() && rate.iter().all(|(step, r)| *step > 0 && *r > 0.0),
            "{rate:?}"
        );
        // Measured after the first slice (10 steps): at its step.
        let memory = task.measured_memory.expect("measured memory");
        let expected = [
            memory.total(),
            memory.parameters,
            memory.gradients,
            memory.optimizer_state,
            memory.activations,
        ];
        for (tag, bytes) in MEMORY_TAGS.iter().zip(expected) {
            assert_eq!(points(run, tag), [(10, bytes as f32)], "{tag}");
        }

        let texts = run["texts"][HYPERPARAMETERS]
            .as_array()
            .unwrap_or_else(|| panic!("no {HYPERPARAMETERS} text in {run}"));
        assert_eq!(texts.len(), 1, "{texts:?}");
        let text = texts[0][1].as_str().expect("text");
        for part in [
            "| plugin | template |".to_string(),
            format!("| asset | {} |", task.asset),
            format!("| seed | {} |", task.seed),
            "\"hidden_sizes\"".to_string(),
        ] {
            assert!(text.contains(&part), "{part} not in {text}");
        }
        // The HParams dashboard's view of the same task.
        let hparams = &run["hparams"];
        assert_eq!(hparams["plugin"], "template", "{run}");
        assert_eq!(hparams["asset"], task.asset.as_str());
        assert_eq!(hparams["seed"].as_f64(), Some(task.seed as f64));
        assert!(hparams["hidden_sizes"].is_string(), "{hparams}");
    }
    // Runs named by model and asset.
    let names: Vec<&String> = runs.as_object().unwrap().keys().collect();
    assert!(
        names
            .iter()
            .all(|n| n.starts_with(&format!("job-{job}/task-")) && n.contains("-template-")),
        "{names:?}"
    );
}

/// Every metric of every slice of `job`'s tasks in the store is in
/// `runs` (one per task) under its name, at the same steps with the same
/// values, and nothing else under that name; the job's tasks.
fn assert_every_metric_matches_the_store(
    runs: &serde_json::Value,
    store: &Store,
    job: i64,
) -> Vec<TaskRow> {
    let tasks = store.tasks_of(job).expect("tasks");
    assert_eq!(
        runs.as_object().map(|r| r.len()),
        Some(tasks.len()),
        "one run per task: {runs}"
    );
    for task in &tasks {
        let run = run_of(runs, task);
        assert!(run.is_object(), "no run for task {}: {runs}", task.id);
        let names: Vec<String> = store
            .latest_metrics(task.id)
            .expect("metrics")
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert!(names.len() >= 2, "the template reports metrics: {names:?}");
        let mut steps = BTreeSet::new();
        for name in &names {
            let stored: Vec<(u64, f32)> = store
                .metric_history(task.id, name)
                .expect("history")
                .into_iter()
                .map(|(step, value)| (step, value as f32))
                .collect();
            let found = points(run, &scalar_tag(name));
            assert!(
                same(&stored, &found),
                "task {} metric {name}: store {stored:?}, TensorBoard {found:?}",
                task.id
            );
            steps.extend(stored.iter().map(|(step, _)| *step));
        }
        assert!(steps.len() > 1, "metrics of several slices: {steps:?}");
    }
    tasks
}

#[test]
fn a_restarted_host_adds_a_file_and_tensorboard_drops_the_redone_steps() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let dir = tempfile::tempdir().expect("temp dir");
    let job = dir.path().join("job.json");
    // Far more steps than either host runs: both are stopped mid-way.
    std::fs::write(
        &job,
        r#"{"name":"restart","models":[{"plugin":"template","steps":10000000,"config":{"hidden_sizes":[8]}}],
            "assets":[{"synthetic":{"rows":300}}],"checkpoint":{"every_steps":500,"keep":2},"slice_steps":10}"#,
    )
    .expect("job file");
    let state = dir.path().join("state");
    let mut first = Command::new(tli_binary())
        .args(["host", "run", "--state-dir"])
        .arg(&state)
        .arg("--submit")
        .arg(&job)
        .env("TLI_PLUGIN_DIR", plugins.path())
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the host");
    // (checkpoint step, steps done) of the task, once steps were recorded
    // after its latest checkpoint.
    let progress = || {
        let store = Store::open_read_only(&state).ok()?;
        let task = store.tasks_of(1).ok()?.into_iter().next()?;
        let checkpoint = store.checkpoints(task.id).ok()?.first()?.step;
        Some((checkpoint, task.steps_done))
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let killed_at = loop {
        assert!(Instant::now() < deadline, "no progress after a checkpoint");
        assert!(first.try_wait().expect("wait").is_none(), "the host exited");
        if let Some((checkpoint, steps)) = progress().filter(|(c, s)| *s >= c + 30) {
            break (checkpoint, steps);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    first.kill().expect("SIGKILL");
    first.wait().expect("wait");
    let (_, killed_steps) = progress().expect("progress after the kill");
    assert!(killed_steps >= killed_at.1, "{killed_at:?} {killed_steps}");

    // The restarted host resumes the task from its checkpoint, redoes the
    // steps after it and goes on; then it stops gracefully.
    let mut server = Server::start(plugins.path(), &state, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while progress().is_none_or(|(_, steps)| steps < killed_steps + 500) {
        assert!(
            Instant::now() < deadline,
            "the resumed task made no progress"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.terminate();

    let store = Store::open_read_only(&state).expect("store");
    let tasks = assert_every_metric_matches_the_store(&read_back(&state.join("tb")), &store, 1);
    assert!(
        store
            .transitions(tasks[0].id)
            .expect("transitions")
            .iter()
            .any(|t| t.reason.starts_with("resumed from checkpoint step")),
        "the task resumed from a checkpoint"
    );
    let dir = run_name(1, tasks[0].id, &tasks[0].plugin, &tasks[0].asset);
    let files = std::fs::read_dir(state.join("tb").join(dir))
        .expect("task dir")
        .count();
    assert_eq!(files, 2, "one event file per host process");
}

#[test]
fn tensorboard_dir_and_no_tensorboard_choose_where_and_whether() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let dir = tempfile::tempdir().expect("temp dir");
    let job = dir.path().join("job.json");
    std::fs::write(
        &job,
        r#"{"name":"tiny","models":[{"plugin":"template","steps":20}],"assets":[{"synthetic":{"rows":300}}],"checkpoint":{"keep":1}}"#,
    )
    .expect("job file");
    let host_run = |state: &Path, extra: &[&str]| {
        let mut args = vec![
            "host",
            "run",
            "--state-dir",
            state.to_str().expect("path"),
            "--submit",
            job.to_str().expect("path"),
        ];
        args.extend_from_slice(extra);
        run_tli(plugins.path(), &args)
    };

    let (state, elsewhere) = (dir.path().join("a"), dir.path().join("boards"));
    let run = host_run(
        &state,
        &["--tensorboard-dir", elsewhere.to_str().expect("path")],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(!state.join("tb").exists(), "nothing under the state dir");
    let runs = read_back(&elsewhere);
    let only = runs.as_object().expect("runs");
    assert_eq!(only.len(), 1, "{runs}");
    let run = only.values().next().expect("a run");
    assert!(
        !points(run, "train/loss").is_empty() && run["texts"][HYPERPARAMETERS].is_array(),
        "{runs}"
    );

    let state = dir.path().join("b");
    let run = host_run(&state, &["--no-tensorboard"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(state.is_dir(), "the host ran");
    assert!(
        !state.join("tb").exists(),
        "--no-tensorboard wrote event files"
    );

    let both = host_run(
        &dir.path().join("c"),
        &["--no-tensorboard", "--tensorboard-dir", "x"],
    );
    assert!(!both.status.success(), "conflicting options accepted");
}
