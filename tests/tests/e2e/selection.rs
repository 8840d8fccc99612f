//! Best checkpoints and early stopping through the real binaries: a fixture
//! plugin whose validation curve is scripted pins the rule (which steps are
//! measured, which checkpoints are kept, when the task stops and why); a
//! stopped task is evaluated; a completed task trains further with
//! `tli train resume --steps`; bad rules are refused before anything runs.

use std::path::Path;
use tli_e2e_tests::*;
use tli_host::orchestrator::store::Store;

/// valid_loss at steps 10, 20, …: best 2.5 at 50, then three without improvement.
const CURVE: &str = "[5, 4, 3, 3.5, 2.5, 2.6, 2.7, 2.8, 2.9, 3.0]";

fn write_spec(dir: &Path, name: &str, model: &str) -> String {
    let path = dir.join(format!("{name}.json"));
    let spec = format!(
        r#"{{"name":"{name}","models":[{model}],"assets":[{{"synthetic":{{"rows":200}}}}],
            "checkpoint":{{"every_steps":25,"keep":1}},"slice_steps":7}}"#
    );
    std::fs::write(&path, spec).unwrap();
    path.display().to_string()
}

fn task(status: &serde_json::Value) -> &serde_json::Value {
    &status["progress"]["tasks"][0]
}

#[test]
fn a_scripted_validation_curve_keeps_the_best_checkpoints_stops_after_patience_and_extends() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = Server::start(plugins.path(), &state, &[]);
    let model = format!(
        r#"{{"plugin":"behaviour","steps":200,"config":{{"valid_every":10,"valid_curve":{CURVE}}},
            "keep_best":{{"metric":"valid_loss","k":2}},
            "early_stopping":{{"metric":"valid_loss","patience":3}}}}"#
    );
    let spec = write_spec(dir.path(), "curve", &model);
    let out = server.client(&["train", "start", "--spec", &spec, "--watch"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let status = ok_json(&server.client(&["train", "status", "1", "-o", "json"]));
    let t = task(&status);
    assert_eq!(t["state"], "completed", "{status}");
    // 2.6, 2.7 and 2.8 do not beat 2.5: the third of them (step 80) stops it.
    assert_eq!(t["steps_done"], 80, "{status}");
    let why = t["stopped_early"].as_str().unwrap();
    assert!(
        why.starts_with("stopped early at step 80: valid_loss did not improve")
            && why.contains("best 2.500000 at step 50"),
        "{why}"
    );
    assert_eq!(
        t["best"],
        serde_json::json!({"step": 50, "metric": "valid_loss", "value": 2.5})
    );
    // The table says it too.
    let table = stdout(&server.client(&["train", "status", "1"]));
    assert!(
        table.contains("model = best checkpoint, step 50"),
        "{table}"
    );

    let store = Store::open_read_only(&state).unwrap();
    // Slices of 7 steps end on every multiple of valid_every: measured exactly there.
    let series = store.metric_series(1, "valid_loss", 0).unwrap();
    assert_eq!(
        series.steps,
        [10, 20, 30, 40, 50, 60, 70, 80, 80],
        "the last is the evaluation"
    );
    // k = 2: the two best (50 and 60), apart from the newest (keep 1: the final at 80).
    let rows = store.checkpoints(1).unwrap();
    let mut best: Vec<(u64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.step, r.best.as_ref()?.value)))
        .collect();
    best.sort_by_key(|b| b.0);
    assert_eq!(best, [(50, 2.5), (60, 2.6)]);
    let newest: Vec<u64> = rows
        .iter()
        .filter(|r| r.best.is_none())
        .map(|r| r.step)
        .collect();
    assert_eq!(newest, [80]);
    let on_disk = |sub: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(state.join("checkpoints/task-1").join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("step-"))
            .collect();
        names.sort();
        names
    };
    assert_eq!(on_disk("best"), ["step-000000000050", "step-000000000060"]);
    assert_eq!(on_disk(""), ["step-000000000080"]);
    drop(store);

    // Train it further: it goes on from its final checkpoint with patience counted afresh.
    let out = server.client(&["train", "resume", "1", "--steps", "30"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = server.client(&["train", "watch", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = ok_json(&server.client(&["train", "status", "1", "-o", "json"]));
    let t = task(&status);
    assert_eq!(
        (&t["state"], &t["steps_done"], &t["total_steps"]),
        (&"completed".into(), &110.into(), &110.into()),
        "{status}"
    );
    assert_eq!(t["best"]["step"], 50, "nothing beat 2.5 after step 80");
    let store = Store::open_read_only(&state).unwrap();
    let steps = store.metric_series(1, "valid_loss", 0).unwrap().steps;
    assert!(steps.ends_with(&[90, 100, 110, 110]), "{steps:?}");

    // Refused before anything runs, naming the field: a test metric, patience 0, k 0.
    for (bad, field) in [
        (
            r#""early_stopping":{"metric":"test_loss","patience":2}"#,
            "test_loss",
        ),
        (
            r#""early_stopping":{"metric":"valid_loss","patience":0}"#,
            "patience",
        ),
        (
            r#""keep_best":{"metric":"valid_loss","k":0}"#,
            "keep_best.k",
        ),
        (r#""keep_best":{"metric":"valid_loss","mode":"up"}"#, "mode"),
    ] {
        let model = format!(r#"{{"plugin":"behaviour","steps":20,{bad}}}"#);
        let spec = write_spec(dir.path(), "bad", &model);
        let out = server.client(&["train", "start", "--spec", &spec]);
        assert!(!out.status.success());
        assert!(stderr(&out).contains(field), "{bad}: {}", stderr(&out));
    }
    let out = server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "-a",
        "synthetic:200",
        "--early-stopping",
        "valid_loss",
    ]);
    assert!(!out.status.success(), "--early-stopping needs --patience");
    let listed = ok_json(&server.client(&["train", "list", "-o", "json"]));
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(1), "{listed}");
}

#[test]
fn a_task_stopped_by_its_user_is_evaluated_before_it_stops() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), dir.path(), &[]);
    let spec = write_spec(
        dir.path(),
        "slow",
        r#"{"plugin":"behaviour","steps":100000,"config":{"sleep_ms_per_step":2}}"#,
    );
    let out = server.client(&["train", "start", "--spec", &spec]);
    assert!(out.status.success(), "{}", stderr(&out));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = ok_json(&server.client(&["train", "status", "1", "-o", "json"]));
        if task(&status)["steps_done"].as_u64().unwrap_or(0) >= 14 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = server.client(&["train", "stop", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let _ = server.client(&["train", "watch", "1"]);
    let status = ok_json(&server.client(&["train", "status", "1", "-o", "json"]));
    let t = task(&status);
    assert_eq!(t["state"], "cancelled", "{status}");
    // The behaviour plugin's evaluation reports its step count.
    assert_eq!(
        t["metrics"]["steps"].as_f64(),
        t["steps_done"].as_f64(),
        "{status}"
    );
}

/// A host killed with SIGKILL between the task's best step and its stop, and
/// started again: the task resumes from its routine checkpoint of step 60
/// with the early-stopping state saved in it (best 2.5 at step 50, one
/// validation since), so it stops at step 80 as an uninterrupted run does; a
/// fresh state would take 2.7 at step 70 for a new best and stop at 100.
#[test]
fn a_sigkill_between_the_best_checkpoint_and_the_stop_changes_no_decision() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    use tli_host::orchestrator::state::TaskState;
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let model = format!(
        r#"{{"plugin":"behaviour","steps":200,
            "config":{{"valid_every":10,"valid_curve":{CURVE},"sleep_ms_per_step":25}},
            "keep_best":{{"metric":"valid_loss","k":2}},
            "early_stopping":{{"metric":"valid_loss","patience":3}}}}"#
    );
    let spec = dir.path().join("job.json");
    std::fs::write(
        &spec,
        format!(
            r#"{{"name":"kill","models":[{model}],"assets":[{{"synthetic":{{"rows":200}}}}],
                "checkpoint":{{"every_steps":20,"keep":1}},"slice_steps":5}}"#
        ),
    )
    .unwrap();
    let host = |submit: bool| {
        let mut c = Command::new(tli_binary());
        c.args(["host", "run", "--no-tensorboard", "--state-dir"])
            .arg(&state)
            .env("TLI_PLUGIN_DIR", plugins.path())
            .env_remove("LD_LIBRARY_PATH")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if submit {
            c.arg("--submit").arg(&spec);
        }
        c
    };
    let mut first = host(true).spawn().unwrap();
    // Kill once the routine checkpoint of step 60 is recorded.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "no checkpoint at step 60");
        let routine_at_60 = Store::open_read_only(&state)
            .ok()
            .and_then(|s| s.checkpoints(1).ok())
            .is_some_and(|rows| rows.iter().any(|r| r.step == 60 && r.best.is_none()));
        if routine_at_60 {
            break;
        }
        assert!(first.try_wait().unwrap().is_none(), "the host ended first");
        std::thread::sleep(Duration::from_millis(5));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let out = host(false).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));

    let store = Store::open_read_only(&state).unwrap();
    let task = store.task(1).unwrap().unwrap();
    assert_eq!((task.state, task.steps_done), (TaskState::Completed, 80));
    let transitions = store.transitions(1).unwrap();
    assert!(
        transitions.iter().any(|t| t.to == TaskState::Interrupted),
        "{transitions:?}"
    );
    let resumed: Vec<&str> = transitions
        .iter()
        .filter(|t| t.reason.starts_with("resumed from checkpoint step"))
        .map(|t| t.reason.as_str())
        .collect();
    assert_eq!(
        resumed,
        ["resumed from checkpoint step 60"],
        "{transitions:?}"
    );
    let last = transitions.last().unwrap();
    assert_eq!(
        last.reason,
        "stopped early at step 80: valid_loss did not improve by more than 0 in 3 \
         validation(s) (best 2.500000 at step 50)"
    );
    let mut best: Vec<(u64, f64)> = store
        .checkpoints(1)
        .unwrap()
        .iter()
        .filter_map(|r| Some((r.step, r.best.as_ref()?.value)))
        .collect();
    best.sort_by_key(|b| b.0);
    assert_eq!(best, [(50, 2.5), (60, 2.6)]);
    let mut on_disk: Vec<String> = std::fs::read_dir(state.join("checkpoints/task-1/best"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    assert_eq!(on_disk, ["step-000000000050", "step-000000000060"]);
}

/// A template task on the real ES series that keeps its best checkpoint by
/// `valid_loss`: its model (`models show`, exports, `tli predict` through
/// the host) is the checkpoint of the lowest validation loss on its curve;
/// `ID:last` is its newest.
#[test]
fn a_task_keeping_its_best_checkpoint_is_that_model_and_id_last_its_newest() {
    use super::predict_cli::sample;
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = Server::start(plugins.path(), &state, &[]);
    let es = format!(
        "ES={}",
        sample("data/samples/es_proxy_sp500_1d.csv").display()
    );
    let out = server.client(&[
        "train",
        "start",
        "-p",
        "template",
        "-a",
        &es,
        "--steps",
        "400",
        "--config",
        r#"{"hidden_sizes": [64, 64], "learning_rate": 0.01, "valid_every": 20}"#,
        "--keep-best",
        "valid_loss",
        "--watch",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = ok_json(&server.client(&["train", "status", "1", "-o", "json"]));
    let best = &task(&status)["best"];
    let store = Store::open_read_only(&state).unwrap();
    let curve = store.metric_series(1, "valid_loss", 0).unwrap();
    let lowest = curve.values.iter().copied().fold(f64::INFINITY, f64::min);
    let first_lowest = curve.steps[curve.values.iter().position(|&v| v == lowest).unwrap()];
    assert_eq!(best["value"].as_f64(), Some(lowest), "{status}");
    assert_eq!(best["step"].as_u64(), Some(first_lowest), "{status}");
    assert!(
        first_lowest < 400,
        "it overfits: the best is before the end ({curve:?})"
    );

    let shown = |id: &str| ok_json(&server.client(&["models", "show", id, "-o", "json"]));
    assert_eq!(shown("1")["steps"].as_u64(), Some(first_lowest));
    assert_eq!(shown("1:last")["steps"], 400);
    let export = |id: &str| {
        let to = dir.path().join(format!("bundle-{}", id.replace(':', "-")));
        let out = server.client(&["models", "export", id, to.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        to
    };
    let (best_dir, last_dir) = (export("1"), export("1:last"));
    let weights = |d: &Path| std::fs::read(d.join("weights.safetensors")).unwrap();
    assert_ne!(weights(&best_dir), weights(&last_dir));
    // The host applies the same model `tli predict` applies to the exported bundle.
    let predict = |model: &str, remote: bool| {
        let args = ["predict", "--model", model, "--data", &es, "-o", "csv"];
        let out = if remote {
            server.client(&args)
        } else {
            run_tli(plugins.path(), &args)
        };
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let out = server.client(&["models", "load", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        predict("1", true),
        predict(best_dir.to_str().unwrap(), false)
    );
    assert_ne!(
        predict(best_dir.to_str().unwrap(), false),
        predict(last_dir.to_str().unwrap(), false)
    );
}
