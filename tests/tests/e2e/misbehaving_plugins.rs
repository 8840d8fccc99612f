//! Misbehaving plugins (docs/reliability.md §5): the
//! `behaviour` fixture, loaded into a real `tli host serve`, allocates far
//! beyond its estimate, never returns from `step`, floods stdout/stderr, or
//! aborts the process. Each test drives the host through the CLI and reads
//! the outcome from the store (read-only, as `tli host status` does), and
//! prints its figures as `misbehaving:` lines (`-- --nocapture`).

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::{Store, TaskRow, TransitionRow};

const MIB: u64 = 1 << 20;

/// Starts the job `spec` (JSON text, written next to the state) and returns its id.
fn start_job(server: &Server, dir: &Path, name: &str, spec: &str) -> String {
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, spec).expect("write spec");
    let file = file.to_str().expect("utf-8 path");
    let started = ok_json(&server.client(&["train", "start", "--spec", file, "-o", "json"]));
    started["job_id"].as_u64().expect("job_id").to_string()
}

/// A job's tasks from the store, in plan order.
fn tasks(state: &Path, job: &str) -> Vec<TaskRow> {
    let store = Store::open_read_only(state).expect("store");
    store.tasks_of(job.parse().expect("job id")).expect("tasks")
}

fn transitions(state: &Path, task: i64) -> Vec<TransitionRow> {
    let store = Store::open_read_only(state).expect("store");
    store.transitions(task).expect("transitions")
}

/// Waits up to `secs` for `done`; the panic names `what`.
fn wait_for(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn finished(tasks: &[TaskRow]) -> bool {
    tasks.iter().all(|t| t.state.is_finished())
}

/// When `task` last became `to` (ms since the epoch).
fn became(state: &Path, task: i64, to: TaskState) -> i64 {
    transitions(state, task)
        .iter()
        .rev()
        .find(|t| t.to == to)
        .unwrap_or_else(|| panic!("task {task} never became {to}"))
        .at_ms
}

/// One behaviour model; `config` is its JSON config.
fn model(steps: u64, config: &str) -> String {
    format!(r#"{{"plugin":"behaviour","steps":{steps},"config":{config}}}"#)
}

fn job_spec(name: &str, models: &[String], checkpoint: &str) -> String {
    format!(
        r#"{{"name":"{name}","models":[{}],"assets":[{{"synthetic":{{"rows":300}}}}],
            "checkpoint":{checkpoint},"slice_steps":2}}"#,
        models.join(",")
    )
}

/// A task that allocates 200 MiB while claiming 1 MiB takes the device over
/// its budget: the arbiter raises its reservation to the measurement, and
/// nothing new starts until the device is back within budget, though
/// `parallel:3` has a free place. One that allocates more than the whole
/// budget fails with the figures, and fails again at admission when resumed
/// (it waited in the queue forever before). The others finish.
#[test]
fn an_allocation_far_beyond_the_estimate_is_noticed_and_contained() {
    let (plugins, dir) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let state = dir.path().join("state");
    let budget = 256 * MIB;
    let server = Server::start(
        plugins.path(),
        &state,
        &["--memory-budget", "256MiB", "--strategy", "parallel:3"],
    );
    let small = r#""estimate_bytes":1048576,"sleep_ms_per_step":50"#;
    let wide = r#""estimate_bytes":67108864,"sleep_ms_per_step":50"#;
    let models = [
        // A: claims 1 MiB, holds 200 MiB from step 2 on, for 12 s. It is
        // measured again about a second in, long before B ends.
        model(
            240,
            &format!(
                r#"{{{small},"allocate_bytes_at":2,"allocate_bytes":{}}}"#,
                200 * MIB
            ),
        ),
        model(100, &format!("{{{wide}}}")), // B: 64 MiB for 5 s
        model(160, &format!("{{{wide}}}")), // C: 64 MiB for 8 s
        model(20, &format!("{{{small}}}")), // D: waits for a place
    ];
    let submitted = Instant::now();
    let job = start_job(
        &server,
        dir.path(),
        "over",
        &job_spec("over", &models, r#"{"keep":1}"#),
    );
    let ids: Vec<i64> = tasks(&state, &job).iter().map(|t| t.id).collect();
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);

    // The arbiter notices: A's reservation follows its measurement, over the budget.
    let mut seen_over = None;
    wait_for(60, "A's growth in `tli resources`", || {
        let resources = ok_json(&server.client(&["resources", "-o", "json"]));
        let device = &resources["devices"][0];
        let reserved = device["reserved_bytes"].as_u64().expect("reserved_bytes");
        let held = device["reservations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let grown = held.iter().find(|r| {
            r["task_id"].as_u64() == Some(a as u64)
                && r["measured_bytes"].as_u64().is_some_and(|m| m >= 200 * MIB)
        });
        if let Some(r) = grown {
            seen_over = Some((reserved, r["reserved_bytes"].as_u64().unwrap_or(0)));
        }
        seen_over.is_some()
    });
    let noticed = submitted.elapsed();
    let (reserved, a_reserved) = seen_over.unwrap_or_default();
    assert!(
        a_reserved >= 220 * MIB,
        "A holds {a_reserved} (200 MiB + 10%)"
    );
    assert!(
        reserved > budget,
        "the device is over budget: {reserved} > {budget}"
    );

    wait_for(120, "the first job", || finished(&tasks(&state, &job)));
    let rows = tasks(&state, &job);
    assert!(
        rows.iter().all(|t| t.state == TaskState::Completed),
        "the first job's tasks all complete: {rows:?}"
    );
    assert!(
        rows[0].measured_bytes.is_some_and(|m| m >= 200 * MIB),
        "{:?}",
        rows[0]
    );
    // B's end freed a place, but with A's 220 MiB the device stayed over
    // budget: D started only once C or A had ended.
    let (b_end, d_start) = (
        became(&state, b, TaskState::Completed),
        became(&state, d, TaskState::Running),
    );
    let back_within =
        became(&state, c, TaskState::Completed).min(became(&state, a, TaskState::Completed));
    assert!(
        d_start >= back_within && d_start > b_end,
        "D started at {d_start}, B ended at {b_end}, the device was back within budget at {back_within}"
    );
    eprintln!(
        "misbehaving: over-allocation: A estimated 1 MiB, measured {} bytes, reserved {a_reserved}; \
         device reserved {reserved} of {budget}, seen by `tli resources` {} ms after the job was \
         submitted; D waited {} ms after B's end",
        rows[0].measured_bytes.unwrap_or(0),
        noticed.as_millis(),
        d_start - b_end
    );

    // More than the whole budget: that task fails, its neighbour finishes.
    let models = [
        model(
            100,
            &format!(
                r#"{{{small},"allocate_bytes_at":2,"allocate_bytes":{}}}"#,
                300 * MIB
            ),
        ),
        model(40, &format!("{{{small}}}")),
    ];
    let job = start_job(
        &server,
        dir.path(),
        "huge",
        &job_spec("huge", &models, r#"{"keep":1}"#),
    );
    wait_for(60, "the second job", || finished(&tasks(&state, &job)));
    let rows = tasks(&state, &job);
    let (huge, other) = (&rows[0], &rows[1]);
    assert_eq!(other.state, TaskState::Completed);
    assert_eq!(huge.state, TaskState::Failed);
    let error = huge.error.clone().unwrap_or_default();
    assert!(
        error.contains("uses more memory than the cpu budget can ever hold")
            && error.contains("measured 301.0 MiB")
            && error.contains("estimated 1.0 MiB"),
        "{error}"
    );
    eprintln!("misbehaving: over the whole budget: {error}");

    // Resumed, it is refused at admission (it waited in the queue forever before).
    ok_json(&server.client(&["train", "resume", &job, "-o", "json"]));
    wait_for(30, "the resumed task to fail at admission", || {
        let last = transitions(&state, huge.id).pop().expect("transitions");
        last.to == TaskState::Failed && last.reason.contains("can never start on this host")
    });
    let reason = transitions(&state, huge.id)
        .pop()
        .expect("transitions")
        .reason;
    assert!(
        reason.contains("what it measured when it last ran, 301.0 MiB"),
        "{reason}"
    );
}

/// A plugin that never returns from `step`: a forced stop marks it
/// cancelled at the deadline; the stuck thread keeps its memory but not its
/// place, so `sequential` still starts and finishes new tasks; SIGTERM does
/// not wait for it. A task stuck when SIGTERM comes is marked `interrupted`
/// at the shutdown timeout and the host exits.
#[test]
fn a_plugin_stuck_in_step_is_given_up_on_without_blocking_the_host() {
    let (plugins, dir) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let state = dir.path().join("state");
    let flags = ["--strategy", "sequential", "--shutdown-timeout", "3"];
    let mut server = Server::start(plugins.path(), &state, &flags);
    let hang = model(
        1000,
        r#"{"hang_in_step_at":3,"sleep_ms_per_step":10,"estimate_bytes":1048576}"#,
    );
    let job = start_job(
        &server,
        dir.path(),
        "stuck",
        &job_spec("stuck", std::slice::from_ref(&hang), r#"{"keep":1}"#),
    );
    let stuck = tasks(&state, &job)[0].id;
    wait_for(30, "the stuck task to run", || {
        tasks(&state, &job)[0].state == TaskState::Running
    });
    std::thread::sleep(Duration::from_millis(500)); // well into step 3, which never ends

    // The CLI's own round trip (process start included), for the figure below.
    let asking = Instant::now();
    ok_json(&server.client(&["resources", "-o", "json"]));
    let round_trip = asking.elapsed();
    let stopping = Instant::now();
    let out = server.client(&["train", "stop", &job, "--force", "--deadline-ms", "1000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stop_took = stopping.elapsed();
    let row = &tasks(&state, &job)[0];
    assert_eq!(row.state, TaskState::Cancelled);
    let reason = transitions(&state, stuck)
        .pop()
        .expect("transitions")
        .reason;
    assert!(
        reason.starts_with("forced stop: the plugin did not return within 1.0s"),
        "{reason}"
    );

    // Its memory stays reserved (its thread lives) ...
    let resources = ok_json(&server.client(&["resources", "-o", "json"]));
    let held = resources["devices"][0]["reservations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        held.iter()
            .any(|r| r["task_id"].as_u64() == Some(stuck as u64)),
        "{resources}"
    );
    // ... but under `sequential` a new task still starts and completes.
    let normal = model(20, r#"{"sleep_ms_per_step":5}"#);
    let next = start_job(
        &server,
        dir.path(),
        "next",
        &job_spec("next", &[normal], r#"{"keep":1}"#),
    );
    wait_for(60, "a new task beside the stuck thread", || {
        finished(&tasks(&state, &next))
    });
    assert_eq!(tasks(&state, &next)[0].state, TaskState::Completed);

    // SIGTERM: the abandoned thread is not waited for.
    let first_shutdown = server.terminate();
    assert!(server
        .child
        .try_wait()
        .ok()
        .flatten()
        .is_some_and(|s| s.success()));
    let log = server.log.lock().map(|l| l.clone()).unwrap_or_default();
    assert!(!log.contains("did not checkpoint within"), "{log}");
    assert_eq!(
        tasks(&state, &job)[0].state,
        TaskState::Cancelled,
        "not resumed"
    );

    // A task stuck when SIGTERM comes: marked interrupted at the timeout.
    let mut server = Server::start(plugins.path(), &state, &flags);
    let job = start_job(
        &server,
        dir.path(),
        "stuck2",
        &job_spec("stuck2", &[hang], r#"{"keep":1}"#),
    );
    wait_for(30, "the second stuck task to run", || {
        tasks(&state, &job)[0].state == TaskState::Running
    });
    std::thread::sleep(Duration::from_millis(500));
    let second_shutdown = server.terminate();
    assert!(server
        .child
        .try_wait()
        .ok()
        .flatten()
        .is_some_and(|s| s.success()));
    let log = server.log.lock().map(|l| l.clone()).unwrap_or_default();
    assert!(
        log.contains("1 task(s) did not checkpoint within 3s; marked interrupted"),
        "{log}"
    );
    let row = &tasks(&state, &job)[0];
    assert_eq!(row.state, TaskState::Interrupted, "{row:?}");
    let reason = transitions(&state, row.id)
        .pop()
        .expect("transitions")
        .reason;
    assert!(reason.contains("did not checkpoint within 3s"), "{reason}");
    eprintln!(
        "misbehaving: stuck step: forced stop (deadline 1000 ms) returned in {} ms (a plain \
         `tli resources` call: {} ms); shutdown with the abandoned thread {} ms; shutdown with \
         a task stuck at SIGTERM (timeout 3 s) {} ms",
        stop_took.as_millis(),
        round_trip.as_millis(),
        first_shutdown.as_millis(),
        second_shutdown.as_millis()
    );
}

/// Reads everything from `pipe` on a thread; returns the byte count at EOF.
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<(u64, u64)> {
    std::thread::spawn(move || {
        let (mut bytes, mut lines, mut buf) = (0u64, 0u64, vec![0u8; 1 << 16]);
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            bytes += n as u64;
            lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        }
        (bytes, lines)
    })
}

/// A task writing 10 MiB to each of stdout and stderr while the host's
/// pipes are read: the host answers status calls throughout, everything
/// written arrives, and the job completes. With stdout a pipe nobody reads,
/// the writer blocks in its own `step` (only it): the host still answers,
/// other tasks finish, and the writer is stopped like any stuck task.
#[test]
fn a_plugin_flooding_stdout_and_stderr_does_not_stall_the_host() {
    let (plugins, dir) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let state = dir.path().join("state");
    let mut server = Server::start_with_stdout(
        plugins.path(),
        &state,
        "127.0.0.1:0",
        &[],
        &[],
        Stdio::piped(),
    );
    let reader = drain(server.child.stdout.take().expect("stdout"));
    let (per_step, steps) = (256 * 1024u64, 40u64);
    let models = [
        model(
            steps,
            &format!(r#"{{"spam_bytes_per_step":{per_step},"sleep_ms_per_step":20}}"#),
        ),
        model(40, r#"{"sleep_ms_per_step":20}"#),
    ];
    let asking = Instant::now();
    ok_json(&server.client(&["resources", "-o", "json"]));
    let quiet_call = asking.elapsed();
    let started = Instant::now();
    let job = start_job(
        &server,
        dir.path(),
        "spam",
        &job_spec("spam", &models, r#"{"keep":1}"#),
    );
    let (mut answered, mut slowest) = (0, Duration::ZERO);
    wait_for(120, "the spamming job", || {
        let asking = Instant::now();
        let status = ok_json(&server.client(&["train", "status", &job, "-o", "json"]));
        slowest = slowest.max(asking.elapsed());
        answered += 1;
        status["progress"]["tasks"].as_array().is_some_and(|t| {
            t.iter()
                .all(|t| t["state"] == "completed" || t["state"] == "failed")
        })
    });
    let took = started.elapsed();
    assert!(tasks(&state, &job)
        .iter()
        .all(|t| t.state == TaskState::Completed));
    server.terminate();
    let (bytes, lines) = reader.join().expect("reader");
    assert_eq!(
        bytes,
        per_step * steps,
        "everything written to stdout arrived"
    );
    assert_eq!(lines, per_step * steps / 64);
    let logged = server.log.lock().map(|l| l.len() as u64).unwrap_or(0);
    assert!(
        logged >= per_step * steps,
        "stderr carried the spam: {logged} bytes"
    );
    eprintln!(
        "misbehaving: heavy output: {bytes} bytes to stdout and as many to stderr in {} ms; \
         {answered} status calls answered meanwhile, the slowest in {} ms (a call before the \
         job: {} ms)",
        took.as_millis(),
        slowest.as_millis(),
        quiet_call.as_millis()
    );

    // Nobody reads stdout: the 64 KiB pipe fills and the writer blocks.
    let state = dir.path().join("state2");
    let mut server = Server::start_with_stdout(
        plugins.path(),
        &state,
        "127.0.0.1:0",
        &[],
        &[],
        Stdio::piped(),
    );
    let models = [
        model(
            1000,
            r#"{"spam_bytes_per_step":65536,"sleep_ms_per_step":20}"#,
        ),
        model(40, r#"{"sleep_ms_per_step":20}"#),
    ];
    let job = start_job(
        &server,
        dir.path(),
        "blocked",
        &job_spec("blocked", &models, r#"{"keep":1}"#),
    );
    wait_for(60, "the quiet task beside the blocked writer", || {
        tasks(&state, &job)[1].state == TaskState::Completed
    });
    let status = ok_json(&server.client(&["train", "status", &job, "-o", "json"]));
    let writer = &status["progress"]["tasks"][0];
    assert_eq!(writer["state"], "running", "{status}");
    assert!(
        writer["steps_done"].as_u64().is_some_and(|s| s < 10),
        "blocked: {writer}"
    );
    let out = server.client(&["train", "stop", &job, "--force", "--deadline-ms", "500"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tasks(&state, &job)[0].state, TaskState::Cancelled);
    server.terminate();
    assert!(server
        .child
        .try_wait()
        .ok()
        .flatten()
        .is_some_and(|s| s.success()));
}

/// The aborted host must not leave a core file behind (children inherit the limit).
fn no_core_dumps() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid rlimit values for this process's own core-size limit;
    // only the soft limit is lowered.
    let result = unsafe {
        libc::getrlimit(libc::RLIMIT_CORE, &mut limit);
        limit.rlim_cur = 0;
        libc::setrlimit(libc::RLIMIT_CORE, &limit)
    };
    assert_eq!(result, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// A plugin that aborts kills the whole host (plugins run in-process: that
/// is the blast radius). The handler names the task on its way down; the
/// restarted host fails that task instead of resuming it into another
/// crash, and every other task resumes from its checkpoint and completes.
#[test]
fn a_plugin_abort_kills_the_host_and_the_restart_resumes_everything_else() {
    use std::os::unix::process::ExitStatusExt;
    no_core_dumps();
    let (plugins, dir) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let state = dir.path().join("state");
    // All three at once, whatever the cores (`auto` runs one per core on the CPU).
    let all_at_once = ["--strategy", "parallel:3"];
    let mut server = Server::start(plugins.path(), &state, &all_at_once);
    let steady = r#"{"sleep_ms_per_step":10}"#;
    let models = [
        model(400, steady),
        model(400, r#"{"sleep_ms_per_step":10,"abort_in_step_at":150}"#),
        model(400, steady),
    ];
    let started = Instant::now();
    let spec = job_spec("abort", &models, r#"{"every_steps":20,"keep":2}"#);
    let job = start_job(&server, dir.path(), "abort", &spec);
    let ids: Vec<i64> = tasks(&state, &job).iter().map(|t| t.id).collect();
    let mut status = None;
    wait_for(120, "the host to die", || {
        status = server.child.try_wait().ok().flatten();
        status.is_some()
    });
    let died_after = started.elapsed();
    let status = status.expect("exit status");
    assert_eq!(status.signal(), Some(6), "killed by SIGABRT: {status:?}");
    let named = format!("kills the host: task {} signal 6", ids[1]);
    let log = || server.log.lock().map(|l| l.clone()).unwrap_or_default();
    wait_for(10, "the handler's line on stderr", || {
        log().contains(&named)
    });
    let before = tasks(&state, &job);
    assert!(
        before.iter().all(|t| t.state.is_active()),
        "all were running: {before:?}"
    );
    let store = Store::open_read_only(&state).expect("store");
    let checkpointed: Vec<u64> = [ids[0], ids[2]]
        .iter()
        .map(|&t| {
            store
                .checkpoints(t)
                .expect("checkpoints")
                .first()
                .map_or(0, |c| c.step)
        })
        .collect();
    drop(store);
    assert!(checkpointed.iter().all(|&s| s > 0), "{checkpointed:?}");

    let restarted = Instant::now();
    let server = Server::start(plugins.path(), &state, &all_at_once);
    wait_for(120, "the job after the restart", || {
        finished(&tasks(&state, &job))
    });
    let took = restarted.elapsed();
    let after = tasks(&state, &job);
    let aborter = &after[1];
    assert_eq!(aborter.state, TaskState::Failed, "{aborter:?}");
    let error = aborter.error.clone().unwrap_or_default();
    assert!(
        error.contains("died of SIGABRT raised on this task's runner thread"),
        "{error}"
    );
    for (i, t) in [(0, &after[0]), (1, &after[2])] {
        assert_eq!(t.state, TaskState::Completed, "{t:?}");
        assert_eq!(t.steps_done, 400);
        let resumed = transitions(&state, t.id)
            .into_iter()
            .filter(|r| r.to == TaskState::Running)
            .find(|r| r.reason.starts_with("resumed from checkpoint step"))
            .expect("resumed from a checkpoint");
        assert_eq!(
            resumed.reason,
            format!("resumed from checkpoint step {}", checkpointed[i])
        );
    }
    assert!(
        !state.join("crashed-tasks").exists(),
        "the crash record was taken"
    );
    drop(server);
    eprintln!(
        "misbehaving: abort: the host died {} ms after the job started (step 150 of the \
         aborting task); the other tasks resumed from steps {checkpointed:?} and completed \
         {} ms after the restart",
        died_after.as_millis(),
        took.as_millis()
    );
}

/// The steps a job's first task has done, as the host reports them (`tli train status`).
fn reported_steps(server: &Server, job: &str) -> u64 {
    let status = ok_json(&server.client(&["train", "status", job, "-o", "json"]));
    status["progress"]["tasks"][0]["steps_done"]
        .as_u64()
        .expect("steps_done")
}

/// A plugin whose `validate_config` takes 5 s to answer holds up its own
/// submission and nothing else: while the host is inside that call,
/// `GetResources` (`tli resources`) answers and a running job keeps making
/// progress. Submission used to call the plugin under the arbiter's lock,
/// which every scheduling round and `GetResources` take, so `tli resources`
/// only answered once the slow submission had returned.
#[test]
fn a_slow_validate_config_holds_up_neither_resources_nor_a_running_job() {
    let (plugins, dir) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let state = dir.path().join("state");
    let server = Server::start(plugins.path(), &state, &["--strategy", "parallel:2"]);
    let never = r#"{"every_seconds":0}"#;
    let busy = model(1_000_000, r#"{"sleep_ms_per_step":2}"#);
    let running = start_job(
        &server,
        dir.path(),
        "busy",
        &job_spec("busy", &[busy], never),
    );
    wait_for(60, "the busy job to make progress", || {
        reported_steps(&server, &running) > 0
    });

    let marker = dir.path().join("inside-validate");
    let slow_config = format!(
        r#"{{"validate_sleep_ms":5000,"validate_marker":{}}}"#,
        serde_json::Value::String(marker.display().to_string())
    );
    let slow_file = dir.path().join("slow.json");
    std::fs::write(
        &slow_file,
        job_spec("slow", &[model(4, &slow_config)], never),
    )
    .unwrap();
    let (binary, endpoint) = (tli_binary(), server.endpoint());
    let submitted = Arc::new(AtomicBool::new(false));
    let submit = {
        let submitted = submitted.clone();
        std::thread::spawn(move || {
            let out = std::process::Command::new(binary)
                .args(["train", "start", "--spec", slow_file.to_str().unwrap()])
                .args(["--endpoint", &endpoint, "-o", "json"])
                .env("NO_COLOR", "1")
                .output()
                .expect("run tli train start");
            submitted.store(true, Ordering::SeqCst);
            out
        })
    };
    wait_for(30, "the host to call validate_config", || marker.exists());

    // The marker exists exactly while validate_config sleeps: what is answered
    // while it exists was answered while the plugin held the submission.
    let before = reported_steps(&server, &running);
    let resources = ok_json(&server.client(&["resources", "-o", "json"]));
    assert!(
        marker.exists(),
        "GetResources answered only once validate_config had returned: {resources}"
    );
    assert!(resources["devices"].is_array(), "{resources}");
    std::thread::sleep(Duration::from_millis(1500));
    let after = reported_steps(&server, &running);
    assert!(
        marker.exists(),
        "validate_config returned within 2 s of its 5 s sleep"
    );
    assert!(
        after > before,
        "the running job made no progress while a submission was validated ({before} -> {after})"
    );
    assert!(!submitted.load(Ordering::SeqCst));

    let out = submit.join().expect("submit thread");
    let slow = ok_json(&out)["job_id"]
        .as_u64()
        .expect("job_id")
        .to_string();
    wait_for(60, "the slow job to finish", || {
        finished(&tasks(&state, &slow))
    });
    assert!(tasks(&state, &slow)
        .iter()
        .all(|t| t.state == TaskState::Completed));
    ok_json(&server.client(&["train", "stop", &running, "-o", "json"]));
}
