//! Hyperparameter sweeps through the real binaries: a fixture plugin whose
//! validation curves are scripted per trial pins ASHA's decisions (which
//! trial stops at which rung, which is best) against a hand computation;
//! "run all" trains every trial to the end; a trial ahead of the trials
//! before it waits at its rung; five SIGKILLs change no decision; bad
//! sweeps are refused before anything is stored.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::Store;

/// valid_loss of trial i at steps 10, 20, … (the last value repeats).
const CURVES: &str = "[[5,6],[3,9],[8],[1,0.5],[7],[2,7],[9],[4],[6]]";

/// By hand, with η = 3 and rungs 10, 30 (and 90): at step 10, trial i goes
/// on when fewer than ceil((n+1)/3) of the n trials before it are better:
/// 0 (5) and 1 (3, behind none) go on, 2 (8, behind 2 of 2) stops, 3 (1) goes
/// on, 4 (7, behind 3 of 4, keep 2) stops, 5 (2, behind 1 of 5) goes on, 6
/// (9), 7 (4, behind 3 of 7, keep 3) and 8 (6) stop. At step 30, among the
/// survivors (the stopped do not count): 0 (6) goes on, 1 (9, behind 1 of 1)
/// stops, 3 (0.5) goes on, 5 (7, behind 2 of 3, keep 2) stops. Trials 0 and
/// 3 reach 90; 3 is best with 0.5.
const STEPS: [u64; 9] = [90, 30, 10, 90, 10, 30, 10, 10, 10];

fn spec_text(scheduler: &str, sleep_ms: u64) -> String {
    format!(
        r#"{{"name":"asha","assets":[{{"synthetic":{{"rows":200}}}}],"slice_steps":5,
            "checkpoint":{{"every_steps":20,"keep":1}},
            "sweep":{{"plugin":"behaviour",
                      "config":{{"valid_every":10,"sleep_ms_per_step":{sleep_ms}}},
                      "space":{{"valid_curve":{{"grid":{CURVES}}}}},
                      "metric":"valid_loss","scheduler":{scheduler}}}}}"#
    )
}

const ASHA: &str = r#"{"asha":{"grace_period":10,"reduction_factor":3,"max_steps":90}}"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Each task's (state, steps, why it ended) in task order.
fn outcomes(state: &Path, job: i64) -> Vec<(TaskState, u64, String)> {
    let store = Store::open_read_only(state).unwrap();
    store
        .tasks_of(job)
        .unwrap()
        .into_iter()
        .map(|t| {
            let last = store.transitions(t.id).unwrap().pop().unwrap();
            (t.state, t.steps_done, last.reason)
        })
        .collect()
}

fn assert_asha_decisions(outcomes: &[(TaskState, u64, String)]) {
    let steps: Vec<u64> = outcomes.iter().map(|o| o.1).collect();
    assert_eq!(steps, STEPS, "{outcomes:#?}");
    for (state, steps, why) in outcomes {
        assert_eq!(*state, TaskState::Completed, "{outcomes:#?}");
        if *steps < 90 {
            assert!(
                why.starts_with(&format!("stopped early by ASHA at rung {steps}")),
                "{why}"
            );
        } else {
            assert_eq!(why, "completed 90 steps");
        }
    }
}

#[test]
fn asha_stops_bad_trials_at_their_rungs_and_names_the_best_and_run_all_agrees() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = Server::start(plugins.path(), &state, &["--strategy", "parallel:4"]);
    let spec = write(dir.path(), "asha.json", &spec_text(ASHA, 0));
    let out = server.client(&["sweep", "start", "--spec", &spec, "--watch", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_asha_decisions(&outcomes(&state, 1));

    assert_eq!(results["scheduler"], "asha");
    assert_eq!(results["rungs"], serde_json::json!([10, 30, 90]));
    assert_eq!(results["steps_trained"], 290);
    assert_eq!(results["steps_if_run_all"], 810);
    assert_eq!(results["best"], serde_json::json!([3]));
    let trials = results["trials"].as_array().unwrap();
    let status: Vec<&str> = trials
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        status,
        [
            "completed",
            "stopped at rung 30",
            "stopped at rung 10",
            "completed",
            "stopped at rung 10",
            "stopped at rung 30",
            "stopped at rung 10",
            "stopped at rung 10",
            "stopped at rung 10"
        ]
    );
    let t3 = &trials[3];
    assert_eq!(t3["params"], serde_json::json!({"valid_curve": [1, 0.5]}));
    assert_eq!(
        t3["rung_values"],
        serde_json::json!({"10": 1.0, "30": 0.5, "90": 0.5})
    );
    assert_eq!(t3["final_value"], 0.5);
    // Its model is its best checkpoint: 0.5 first measured at step 20.
    assert_eq!(
        t3["best_checkpoint"],
        serde_json::json!({"step": 20, "metric": "valid_loss", "value": 0.5})
    );
    assert_eq!(trials[1]["final_value"], 9.0, "its value at rung 30");
    assert_eq!(trials[2]["rung_values"], serde_json::json!({"10": 8.0}));

    // A stopped trial was evaluated and says why it stopped.
    let status = ok_json(&server.client(&["train", "status", "1", "-o", "json"]));
    let task2 = &status["progress"]["tasks"][2];
    assert!(
        task2["stopped_early"]
            .as_str()
            .unwrap()
            .starts_with("stopped early by ASHA at rung 10"),
        "{task2}"
    );
    let store = Store::open_read_only(&state).unwrap();
    let id2 = task2["task_id"].as_i64().unwrap();
    let evaluated = store.metric_history(id2, "steps").unwrap();
    assert_eq!(evaluated, [(10, 10.0)], "the evaluation at its rung");

    // The table and the plot.
    let plot = dir.path().join("plots/asha.png");
    let out = server.client(&["sweep", "results", "1", "--plot", plot.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("★ best"), "{table}");
    assert!(
        table.contains("290 of 810 steps trained (36% of running every trial to the end)"),
        "{table}"
    );
    assert!(
        table.contains("best trial 3 (task 4): valid_loss 0.50000"),
        "{table}"
    );
    let png = std::fs::read(&plot).unwrap();
    assert_eq!(&png[1..4], b"PNG");

    // Trained further: the trials that reached the end go on; those ASHA stopped stay stopped.
    let out = server.client(&["train", "resume", "1", "--steps", "30"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("resumed 2 task(s) of job 1"),
        "{}",
        stderr(&out)
    );
    let out = server.client(&["train", "watch", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let steps: Vec<u64> = outcomes(&state, 1).iter().map(|o| o.1).collect();
    assert_eq!(steps, [120, 30, 10, 120, 10, 30, 10, 10, 10]);

    // The same trials run to completion: the same best trial, in 810 steps.
    let out = server.client(&[
        "sweep",
        "start",
        "-p",
        "behaviour",
        "-a",
        "synthetic:200",
        "--config",
        r#"{"valid_every": 10}"#,
        "--space",
        &format!(r#"{{"valid_curve": {{"grid": {CURVES}}}}}"#),
        "--max-steps",
        "90",
        "--run-all",
        "--watch",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all["scheduler"], "run_all");
    assert_eq!(all["steps_trained"], 810);
    assert_eq!(all["best"], serde_json::json!([3]));
    assert!(outcomes(&state, 2).iter().all(|o| o.1 == 90));

    // A job that is not a sweep has no sweep table.
    let out = server.client(&["sweep", "results", "77"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
}

/// Two trials at once, the first slow: the second reaches rung 10 first,
/// waits there (checkpointed, back in the queue) until the first got there,
/// then is decided as if it had come second, which it is.
#[test]
fn a_trial_ahead_of_the_trials_before_it_waits_at_its_rung() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = Server::start(plugins.path(), &state, &["--strategy", "parallel:2"]);
    let out = server.client(&[
        "sweep",
        "start",
        "-p",
        "behaviour",
        "-a",
        "synthetic:200",
        "--config",
        r#"{"valid_every": 10, "valid_curve": [4, 3]}"#,
        "--space",
        r#"{"sleep_ms_per_step": {"grid": [60, 0]}}"#,
        "--max-steps",
        "30",
        "--grace-period",
        "10",
        "--reduction-factor",
        "2",
        "--watch",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let store = Store::open_read_only(&state).unwrap();
    let tasks = store.tasks_of(1).unwrap();
    let reasons: Vec<String> = store
        .transitions(tasks[1].id)
        .unwrap()
        .into_iter()
        .map(|t| t.reason)
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r == "waiting at rung 10 for the trials before it"),
        "{reasons:?}"
    );
    // Equal values: the earlier trial ranks first, so the second stops (top 1 of 2).
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps: Vec<u64> = results["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["steps_done"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [30, 10], "{results}");
}

/// SIGKILL the host five times during an ASHA sweep: the decisions and the
/// best trial are those of the uninterrupted sweep (the hand computation
/// above), since each is a function of recorded values only.
#[test]
fn five_sigkills_during_a_sweep_change_no_decision() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let spec = write(dir.path(), "asha.json", &spec_text(ASHA, 15));
    let host = |submit: bool| {
        let mut c = Command::new(tli_binary());
        c.args([
            "host",
            "run",
            "--no-tensorboard",
            "--strategy",
            "parallel:3",
        ])
        .arg("--state-dir")
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
    let done = || -> u64 {
        Store::open_read_only(&state)
            .ok()
            .and_then(|s| s.tasks_of(1).ok())
            .map_or(0, |tasks| tasks.iter().map(|t| t.steps_done).sum())
    };
    for kill in 0..5 {
        let mut child = host(kill == 0).spawn().unwrap();
        let before = done();
        let deadline = Instant::now() + Duration::from_secs(60);
        // Kill once it made some progress (more than one slice of some task).
        while done() < before + 25 {
            assert!(Instant::now() < deadline, "no progress after kill {kill}");
            assert!(
                child.try_wait().unwrap().is_none(),
                "the host finished the sweep before kill {}",
                kill + 1
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert!(done() < 290, "the sweep was not finished when last killed");
    let out = host(false).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_asha_decisions(&outcomes(&state, 1));
    let store = Store::open_read_only(&state).unwrap();
    let interrupted = store
        .tasks_of(1)
        .unwrap()
        .iter()
        .flat_map(|t| store.transitions(t.id).unwrap())
        .filter(|t| t.to == TaskState::Interrupted)
        .count();
    assert!(interrupted >= 5, "{interrupted} interruptions");
}

#[test]
fn bad_sweeps_are_refused_naming_the_key_and_nothing_is_submitted() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), dir.path(), &[]);
    let start = |space: &str, extra: &[&str]| {
        let mut args = vec![
            "sweep",
            "start",
            "-p",
            "behaviour",
            "-a",
            "synthetic:200",
            "--config",
            r#"{"valid_every": 10}"#,
            "--space",
            space,
            "--max-steps",
            "90",
        ];
        args.extend_from_slice(extra);
        if !extra.contains(&"--grace-period") {
            args.extend_from_slice(&["--grace-period", "10"]);
        }
        let out = server.client(&args);
        assert!(!out.status.success(), "{space} {extra:?} was accepted");
        stderr(&out)
    };
    // Checked by the host against the plugin's schema.
    let e = start(r#"{"valid_curv": {"grid": [[1]]}}"#, &[]);
    assert!(
        e.contains(
            "space.valid_curv: the plugin's config has no such key (did you mean valid_curve?)"
        ),
        "{e}"
    );
    let e = start(r#"{"log_every": {"int": [0, 2000000]}}"#, &[]);
    assert!(
        e.contains("space.log_every: 2000000 is refused by the plugin's config schema"),
        "{e}"
    );
    let e = start(
        r#"{"log_every": {"int": [0, 5]}}"#,
        &["--grace-period", "15"],
    );
    assert!(
        e.contains("validates every 10 steps, which does not divide the rung at step 15"),
        "{e}"
    );
    // Checked before anything is sent.
    let e = start(r#"{"log_every": {"choice": []}}"#, &[]);
    assert!(
        e.contains("space.log_every: an empty list of values"),
        "{e}"
    );
    let e = start(
        r#"{"log_every": {"int": [0, 5]}}"#,
        &["--reduction-factor", "1"],
    );
    assert!(e.contains("reduction_factor: 1 must be at least 2"), "{e}");
    let e = start(
        r#"{"log_every": {"int": [0, 5]}}"#,
        &["--metric", "train_loss"],
    );
    assert!(e.contains("is not a validation metric"), "{e}");
    let jobs = ok_json(&server.client(&["train", "list", "-o", "json"]));
    assert_eq!(jobs["jobs"], serde_json::json!([]), "nothing was submitted");
}
