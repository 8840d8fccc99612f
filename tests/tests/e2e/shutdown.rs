//! How a real `tli host serve` ends: every signal a terminal, a supervisor
//! or a batch system sends by default to end a process checkpoints the
//! running tasks and exits 0, and the store it leaves is whole in its
//! database file alone (a copy of `tli.sqlite3` is a backup), while a copy
//! of a store a host still has open is refused with what to copy.

use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::store::{Store, DB_FILE};

/// A behaviour task that runs for minutes; returns its job id once it runs.
fn start_long_task(server: &Server) -> u64 {
    let job = ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "--config",
        r#"{"sleep_ms_per_step":10}"#,
        "-a",
        "synthetic:100",
        "--steps",
        "100000",
        "-o",
        "json",
    ]))["job_id"]
        .as_u64()
        .expect("job_id");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]));
        if status["progress"]["tasks"][0]["steps_done"].as_u64() > Some(20) {
            return job;
        }
        assert!(Instant::now() < deadline, "the task does not run: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn fatal_signals_checkpoint_like_sigterm_and_leave_a_store_whole_in_one_file() {
    let plugins = template_and_behaviour();
    // SIGTERM, SIGHUP (a terminal closes), SIGQUIT (Ctrl-\), SIGUSR1 and SIGUSR2 (supervisors).
    for (signal, name) in [
        (15, "SIGTERM"),
        (1, "SIGHUP"),
        (3, "SIGQUIT"),
        (10, "SIGUSR1"),
        (12, "SIGUSR2"),
    ] {
        let state = tempfile::tempdir().unwrap();
        let mut server = Server::start(plugins.path(), state.path(), &[]);
        let job = start_long_task(&server);
        let exit = server.signal_and_wait(signal);
        assert!(exit.success(), "{name}: the host exited with {exit}");
        let store = Store::open_read_only(state.path()).unwrap();
        let task = &store.tasks_of(job as i64).unwrap()[0];
        assert_eq!(task.state.as_str(), "interrupted", "{name}");
        assert!(!store.checkpoints(task.id).unwrap().is_empty(), "{name}");
        drop(store);

        // The database file alone, copied after the shutdown, holds every job.
        let copy = tempfile::tempdir().unwrap();
        std::fs::copy(state.path().join(DB_FILE), copy.path().join(DB_FILE)).unwrap();
        let server = Server::start(plugins.path(), copy.path(), &[]);
        let listed = ok_json(&server.client(&["train", "list", "-o", "json"]));
        assert!(
            listed.to_string().contains(&format!("\"job_id\":{job}")),
            "{name}: the copied store lost the job: {listed}"
        );
    }
}

#[test]
fn a_copy_of_an_open_stores_file_alone_is_refused_and_left_as_it_was() {
    let plugins = template_and_behaviour();
    let state = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), state.path(), &[]);
    start_long_task(&server);
    let copy = tempfile::tempdir().unwrap();
    let db = copy.path().join(DB_FILE);
    std::fs::copy(state.path().join(DB_FILE), &db).unwrap();
    let before = std::fs::read(&db).unwrap();
    let out = run_tli(
        plugins.path(),
        &["host", "run", "--state-dir", copy.path().to_str().unwrap()],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("was not closed cleanly") && err.contains("tli.sqlite3-wal"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the refused file changed"
    );
    for side in ["tli.sqlite3-wal", "tli.sqlite3-shm"] {
        assert!(!copy.path().join(side).exists(), "{side} was created");
    }
    drop(server);
}

#[test]
fn the_store_itself_is_locked_and_a_host_whose_store_is_moved_away_stops() {
    let plugins = template_and_behaviour();
    let state = tempfile::tempdir().unwrap();
    let mut server = Server::start(plugins.path(), state.path(), &[]);
    let job = start_long_task(&server);

    // host.lock deleted: a second host is still refused, by the database file's own lock.
    std::fs::remove_file(state.path().join("host.lock")).unwrap();
    let mut second = std::process::Command::new(tli_binary());
    second
        .args(["host", "run", "--plugin-dir"])
        .arg(plugins.path())
        .arg("--state-dir")
        .arg(state.path());
    let out = output_within(second, Duration::from_secs(30));
    let exit = out.as_ref().map(|o| o.status);
    let err = out.as_ref().map(stderr).unwrap_or_default();
    assert!(
        exit.is_some_and(|s| !s.success()),
        "a second host ran on the same store ({exit:?}): {err}"
    );
    assert!(err.contains("locked by another host"), "{err}");
    let status = ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]));
    assert_eq!(
        status["progress"]["tasks"][0]["state"], "running",
        "{status}"
    );

    // The database file moved away: the host notices, checkpoints and exits with why.
    std::fs::rename(
        state.path().join(DB_FILE),
        state.path().join("moved-away.sqlite3"),
    )
    .unwrap();
    let exit = exit_within(&mut server.child, Duration::from_secs(30));
    let log = server.log.lock().unwrap().clone();
    assert!(
        exit.is_some_and(|s| !s.success()),
        "the host went on with its store moved away ({exit:?}): {log}"
    );
    assert!(
        log.contains("no longer the file this host opened") && log.contains("deleted or moved"),
        "{log}"
    );
}
