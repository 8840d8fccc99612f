//! The real `tli host run` process killed with SIGKILL mid-training and
//! started again: every job is still there, the tasks that were running
//! become `interrupted`, resume from their last checkpoint, and finish.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::Store;

#[test]
fn sigkill_then_restart_resumes_every_task_from_its_last_checkpoint() {
    let plugins = PluginDir::new();
    plugins.add(TEMPLATE, "template");
    let state = tempfile::tempdir().unwrap();
    let job = state.path().join("job.json");
    std::fs::write(
        &job,
        r#"{"name":"restart","models":[{"plugin":"template","steps":3000,"config":{"hidden_sizes":[32]}}],
            "assets":[{"synthetic":{"rows":2000,"seed":1}},{"synthetic":{"rows":2000,"seed":2}}],
            "checkpoint":{"every_steps":100,"keep":2},"slice_steps":10}"#,
    )
    .unwrap();
    let state_dir = state.path().join("state");
    let mut first = Command::new(tli_binary())
        .args([
            "host",
            "run",
            "--state-dir",
            state_dir.to_str().unwrap(),
            "--submit",
            job.to_str().unwrap(),
        ])
        .env("TLI_PLUGIN_DIR", plugins.path())
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // Wait until both tasks have at least two checkpoints, then kill -9.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            Instant::now() < deadline,
            "the host never checkpointed both tasks"
        );
        if let Ok(store) = Store::open_read_only(&state_dir) {
            let tasks = store.tasks_in(&TaskState::ALL).unwrap_or_default();
            let ready = tasks.len() == 2
                && tasks.iter().all(|t| {
                    store
                        .checkpoints(t.id)
                        .map(|c| c.len() >= 2)
                        .unwrap_or(false)
                });
            if ready {
                break;
            }
        }
        assert!(
            first.try_wait().unwrap().is_none(),
            "the host exited before it was killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();

    let before = Store::open_read_only(&state_dir).unwrap();
    let checkpointed: Vec<(i64, u64)> = before
        .tasks_in(&TaskState::ALL)
        .unwrap()
        .iter()
        .map(|t| (t.id, before.checkpoints(t.id).unwrap()[0].step))
        .collect();
    assert!(checkpointed
        .iter()
        .all(|(_, step)| *step > 0 && *step < 3000));
    drop(before);

    let second = Command::new(tli_binary())
        .args([
            "host",
            "run",
            "--state-dir",
            state_dir.to_str().unwrap(),
            "-o",
            "json",
        ])
        .env("TLI_PLUGIN_DIR", plugins.path())
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(second.status.success(), "{}", stderr(&second));
    let jobs = json(&second);
    assert_eq!(
        jobs.as_array().unwrap().len(),
        1,
        "the job survived the kill"
    );
    assert_eq!(jobs[0]["weighted_fraction"], 1.0);

    let store = Store::open_read_only(&state_dir).unwrap();
    for (task, step) in checkpointed {
        let row = store.task(task).unwrap().unwrap();
        assert_eq!(row.state, TaskState::Completed);
        assert_eq!(row.steps_done, 3000);
        let transitions = store.transitions(task).unwrap();
        let states: Vec<TaskState> = transitions.iter().map(|t| t.to).collect();
        let i = states
            .iter()
            .position(|s| *s == TaskState::Interrupted)
            .expect("marked interrupted after the kill");
        assert_eq!(states[i + 1], TaskState::Queued);
        assert_eq!(
            transitions[i + 1].reason,
            format!("re-queued at host start to resume from its checkpoint at step {step}")
        );
        let resumed = transitions[i + 1..]
            .iter()
            .find(|t| t.to == TaskState::Running)
            .unwrap();
        assert_eq!(
            resumed.reason,
            format!("resumed from checkpoint step {step}"),
            "{transitions:?}"
        );
    }
    assert!(store.open_reservations().unwrap().is_empty());
}

#[test]
fn host_status_reads_a_state_directory_and_refuses_unknown_jobs() {
    let state = tempfile::tempdir().unwrap();
    let out = run_tli(
        state.path(),
        &[
            "host",
            "status",
            "--state-dir",
            state.path().join("s").to_str().unwrap(),
        ],
    );
    // An empty (missing) state directory is an error that says so, or an empty listing.
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("no jobs") || text.contains("state"), "{text}");
    let plugins = PluginDir::new();
    plugins.add(TEMPLATE, "template");
    let job = state.path().join("job.json");
    std::fs::write(&job, r#"{"name":"tiny","models":[{"plugin":"template","steps":20}],"assets":[{"synthetic":{"rows":300}}],"checkpoint":{"keep":1}}"#).unwrap();
    let dir = state.path().join("s2");
    let run = run_tli(
        plugins.path(),
        &[
            "host",
            "run",
            "--state-dir",
            dir.to_str().unwrap(),
            "--submit",
            job.to_str().unwrap(),
        ],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stdout(&run).contains("completed"), "{}", stdout(&run));
    let status = json(&run_tli(
        plugins.path(),
        &[
            "host",
            "status",
            "--state-dir",
            dir.to_str().unwrap(),
            "-o",
            "json",
        ],
    ));
    assert_eq!(status[0]["name"], "tiny");
    assert_eq!(status[0]["tasks"][0]["state"], "completed");
    let missing = run_tli(
        plugins.path(),
        &[
            "host",
            "status",
            "--state-dir",
            dir.to_str().unwrap(),
            "--job",
            "99",
        ],
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("no job 99"),
        "{}",
        stderr(&missing)
    );
    let too_big = run_tli(
        plugins.path(),
        &[
            "host",
            "run",
            "--state-dir",
            dir.to_str().unwrap(),
            "--memory-budget",
            "10KiB",
            "--submit",
            job.to_str().unwrap(),
        ],
    );
    assert_eq!(too_big.status.code(), Some(1));
    assert!(stderr(&too_big).contains("too big"), "{}", stderr(&too_big));
}

/// A job over two bar files, stopped; one file then disappears. At the next
/// start the task of the other file resumes and completes; only the task
/// that reads the missing file fails, naming it.
#[test]
fn a_missing_bar_file_fails_only_the_tasks_that_read_it() {
    let plugins = template_and_behaviour();
    let (state, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sample = slurm::repo_root().join("data/samples/es_proxy_sp500_1d.csv");
    let (kept, lost) = (data.path().join("kept.csv"), data.path().join("lost.csv"));
    std::fs::copy(&sample, &kept).unwrap();
    std::fs::copy(&sample, &lost).unwrap();
    let root = format!("--data-root={}", data.path().display());
    let mut server = Server::start(plugins.path(), state.path(), &[&root]);
    let job = ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "--config",
        r#"{"sleep_ms_per_step":5}"#,
        "-a",
        kept.to_str().unwrap(),
        "-a",
        lost.to_str().unwrap(),
        "--steps",
        "600",
        "-o",
        "json",
    ]))["job_id"]
        .as_u64()
        .unwrap();
    let status = |server: &Server| {
        ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !status(&server).to_string().contains("\"running\"") {
        assert!(
            Instant::now() < deadline,
            "nothing runs: {}",
            status(&server)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.terminate();
    std::fs::remove_file(&lost).unwrap();

    let server = Server::start(plugins.path(), state.path(), &[&root]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let tasks = loop {
        let now = status(&server);
        let tasks = now["progress"]["tasks"].as_array().unwrap().clone();
        if tasks
            .iter()
            .all(|t| matches!(t["state"].as_str(), Some("completed" | "failed")))
        {
            break tasks;
        }
        assert!(Instant::now() < deadline, "the tasks did not end: {now}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let store = Store::open_read_only(state.path()).unwrap();
    let rows = store.tasks_of(job as i64).unwrap();
    let of = |file: &str| {
        let row = rows.iter().find(|r| r.asset.contains(file)).unwrap();
        tasks
            .iter()
            .find(|t| t["task_id"].as_i64() == Some(row.id))
            .unwrap()
            .clone()
    };
    assert_eq!(of("kept.csv")["state"], "completed", "{tasks:?}");
    let failed = of("lost.csv");
    assert_eq!(failed["state"], "failed", "{tasks:?}");
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or_default()
            .contains("lost.csv"),
        "{failed}"
    );
}
