//! The orchestrator in-process with real plugin libraries and a real SQLite
//! store: memory budgets hold (asserted from the recorded reservation
//! timeline), sequential means one at a time, stop + resume gives the same
//! final weights as an uninterrupted run, a corrupt checkpoint falls back to
//! the previous one, a failing plugin fails only its own task, a task too
//! big for the budget is refused at submission, and a short task starts
//! beside long ones holding every slot (a `tli host serve` over gRPC).

use std::path::Path;
use std::time::Duration;
use tli_e2e_tests::*;
use tli_host::orchestrator::arbiter::Strategy;
use tli_host::orchestrator::engine::{Orchestrator, OrchestratorConfig};
use tli_host::orchestrator::job::JobSpec;
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::{ReservationRow, Store};
use tli_testkit::orchestrator_config;

/// The store of a running orchestrator, read-only (as `tli host status` reads it).
fn store_of(h: &Orchestrator) -> Store {
    Store::open_read_only(h.state_dir()).expect("store")
}

/// An orchestrator in this process with one core to share: libtorch's
/// intra-op thread count is process-wide, and the plugin tests running
/// beside these in the one e2e binary compare runs bit for bit on one thread.
/// `auto` is limited by memory alone here (not one task per core): these
/// tests are about the budget.
fn host(state: &Path, plugins: &Path, strategy: Strategy, budget: u64) -> Orchestrator {
    Orchestrator::open(OrchestratorConfig {
        cores: 1,
        cpu_auto_limit: Some(64),
        ..orchestrator_config(state, plugins, strategy, budget)
    })
    .unwrap()
}

/// `models` as JSON array text; one synthetic asset unless `assets` given.
fn spec(models: &str, assets: &str, checkpoint: &str) -> JobSpec {
    JobSpec::from_json(&format!(
        r#"{{"name":"t","models":{models},"assets":{assets},"seed":5,"checkpoint":{checkpoint},"slice_steps":5}}"#
    ))
    .unwrap()
}

const ONE_ASSET: &str = r#"[{"synthetic":{"rows":600}}]"#;

fn run(h: &Orchestrator) {
    h.run_until_idle(Duration::from_millis(2), |_| {}).unwrap();
}

/// Submits `spec`, runs it until idle and returns its tasks, all completed.
fn run_to_completion(
    h: &Orchestrator,
    spec: &JobSpec,
) -> Vec<tli_host::orchestrator::store::TaskRow> {
    let job = h.submit(spec).unwrap();
    run(h);
    let tasks = store_of(h).tasks_of(job).unwrap();
    assert!(
        tasks.iter().all(|t| t.state == TaskState::Completed),
        "{tasks:?}"
    );
    tasks
}

/// Largest total of bytes reserved at the same time, from the timeline.
pub(crate) fn peak_reserved(rows: &[ReservationRow]) -> (u64, usize) {
    let mut events: Vec<(i64, i64, u64)> = Vec::new(); // (time, +1/-1 ordering, bytes)
    for r in rows {
        events.push((r.reserved_ms, 1, r.bytes));
        events.push((
            r.released_ms.expect("every reservation was released"),
            0,
            r.bytes,
        ));
    }
    // Releases before reservations at the same millisecond.
    events.sort();
    let (mut now, mut peak, mut count, mut peak_count) = (0u64, 0u64, 0usize, 0usize);
    for (_, kind, bytes) in events {
        if kind == 1 {
            now += bytes;
            count += 1;
        } else {
            now -= bytes;
            count -= 1;
        }
        peak = peak.max(now);
        peak_count = peak_count.max(count);
    }
    (peak, peak_count)
}

#[test]
fn eight_tasks_under_a_budget_for_two_never_exceed_it() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    // Measure one task's reservation first, then size the budget for two.
    let probe = host(state.path(), plugins.path(), Strategy::Auto, u64::MAX / 4);
    let s = spec(
        r#"[{"plugin":"template","steps":40,"config":{"hidden_sizes":[32]}}]"#,
        r#"[{"synthetic":{"rows":600,"seed":1}},{"synthetic":{"rows":600,"seed":2}},{"synthetic":{"rows":600,"seed":3}},{"synthetic":{"rows":600,"seed":4}},{"synthetic":{"rows":600,"seed":5}},{"synthetic":{"rows":600,"seed":6}},{"synthetic":{"rows":600,"seed":7}},{"synthetic":{"rows":600,"seed":8}}]"#,
        r#"{"every_steps":20,"keep":2}"#,
    );
    let probe_job = probe.submit(&s).unwrap();
    let estimate = store_of(&probe).tasks_of(probe_job).unwrap()[0].estimate_bytes;
    drop(probe);
    let one = (estimate as f64 * 1.1).ceil() as u64;
    let budget = one * 2 + one / 2;
    let state = tempfile::tempdir().unwrap();
    let h = host(state.path(), plugins.path(), Strategy::Auto, budget);
    let job = h.submit(&s).unwrap();
    run(&h);
    let tasks = store_of(&h).tasks_of(job).unwrap();
    assert_eq!(tasks.len(), 8);
    assert!(
        tasks.iter().all(|t| t.state == TaskState::Completed),
        "{tasks:?}"
    );
    let timeline = store_of(&h).reservation_timeline().unwrap();
    assert_eq!(timeline.len(), 8);
    let (peak, concurrent) = peak_reserved(&timeline);
    assert!(peak <= budget, "reserved {peak} > budget {budget}");
    assert_eq!(
        concurrent, 2,
        "two tasks fit at once, and two should have run together"
    );
}

#[test]
fn auto_on_the_cpu_runs_one_task_per_core() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    // As `tli host serve --cores 2` opens it: auto, a budget for all five.
    let h = Orchestrator::open(OrchestratorConfig {
        cores: 2,
        ..orchestrator_config(state.path(), plugins.path(), Strategy::Auto, 1 << 32)
    })
    .unwrap();
    let s = spec(
        r#"[{"plugin":"behaviour","steps":40,"config":{"sleep_ms_per_step":2}}]"#,
        r#"[{"synthetic":{"rows":600,"seed":1}},{"synthetic":{"rows":600,"seed":2}},{"synthetic":{"rows":600,"seed":3}},{"synthetic":{"rows":600,"seed":4}},{"synthetic":{"rows":600,"seed":5}}]"#,
        r#"{"every_steps":0}"#,
    );
    run_to_completion(&h, &s);
    let (_, concurrent) = peak_reserved(&store_of(&h).reservation_timeline().unwrap());
    assert_eq!(concurrent, 2, "one per core, and both cores used");
}

#[test]
fn side_by_side_a_jobs_slow_tasks_start_before_its_quick_ones() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    let h = host(state.path(), plugins.path(), Strategy::Parallel(2), 1 << 30);
    // Quick: 200 steps of 1 ms; slow: 60 of 10 ms. Three assets each.
    let s = spec(
        r#"[{"plugin":"behaviour","steps":200,"config":{"sleep_ms_per_step":1}},
            {"plugin":"behaviour","steps":60,"config":{"sleep_ms_per_step":10}}]"#,
        r#"[{"synthetic":{"rows":600,"seed":1}},{"synthetic":{"rows":600,"seed":2}},{"synthetic":{"rows":600,"seed":3}}]"#,
        r#"{"every_steps":0}"#,
    );
    let tasks = run_to_completion(&h, &s);
    let slow = |id: i64| {
        tasks
            .iter()
            .find(|t| t.id == id)
            .is_some_and(|t| t.config_json.contains("\"sleep_ms_per_step\":10"))
    };
    let started: Vec<i64> = store_of(&h)
        .reservation_timeline()
        .unwrap()
        .iter()
        .map(|r| r.task_id)
        .collect();
    assert_eq!(started.len(), 6);
    // The first two start in submission order (no pace known yet); after
    // that every slow task starts before any quick one.
    let by_id: Vec<i64> = tasks.iter().map(|t| t.id).collect();
    assert_eq!(started[..2], by_id[..2], "{started:?}");
    let rest: Vec<bool> = started[2..].iter().map(|&id| slow(id)).collect();
    let first_quick = rest.iter().position(|s| !s).unwrap_or(rest.len());
    assert!(
        rest[first_quick..].iter().all(|s| !s),
        "a quick task started before a slow one: {started:?} (slow: {rest:?})"
    );
    assert_ne!(started, by_id, "not plain submission order");
}

#[test]
fn sequential_runs_strictly_one_at_a_time() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    let h = host(state.path(), plugins.path(), Strategy::Sequential, 1 << 30);
    let s = spec(
        r#"[{"plugin":"template","steps":30,"config":{"hidden_sizes":[16]}},{"plugin":"behaviour","steps":200}]"#,
        r#"[{"synthetic":{"rows":600,"seed":1}},{"synthetic":{"rows":600,"seed":2}}]"#,
        r#"{"every_steps":10,"keep":1}"#,
    );
    let job = h.submit(&s).unwrap();
    run(&h);
    assert!(store_of(&h)
        .tasks_of(job)
        .unwrap()
        .iter()
        .all(|t| t.state == TaskState::Completed));
    let mut timeline = store_of(&h).reservation_timeline().unwrap();
    timeline.sort_by_key(|r| r.reserved_ms);
    for pair in timeline.windows(2) {
        assert!(
            pair[1].reserved_ms >= pair[0].released_ms.unwrap(),
            "overlap: {pair:?}"
        );
    }
    // Every transition is recorded with a time and a reason.
    let t = &store_of(&h).tasks_of(job).unwrap()[0];
    let states: Vec<TaskState> = store_of(&h)
        .transitions(t.id)
        .unwrap()
        .iter()
        .map(|x| x.to)
        .collect();
    assert_eq!(states.first(), Some(&TaskState::Queued));
    assert!(states.contains(&TaskState::Checkpointing));
    assert_eq!(states.last(), Some(&TaskState::Completed));
}

fn final_checksum(h: &Orchestrator, job: i64) -> String {
    let task = store_of(h).tasks_of(job).unwrap()[0].id;
    let ckpts = store_of(h).checkpoints(task).unwrap();
    tli_host::orchestrator::checkpoint::verify(Path::new(&ckpts[0].path)).unwrap()
}

#[test]
fn stop_and_resume_ends_with_the_same_weights_as_an_uninterrupted_run() {
    let plugins = template_and_behaviour();
    let s = spec(
        r#"[{"plugin":"template","steps":400,"config":{"hidden_sizes":[16]}}]"#,
        ONE_ASSET,
        r#"{"every_steps":50,"keep":2}"#,
    );

    let straight_dir = tempfile::tempdir().unwrap();
    let straight = host(straight_dir.path(), plugins.path(), Strategy::Auto, 1 << 30);
    let job = straight.submit(&s).unwrap();
    run(&straight);
    let expected = final_checksum(&straight, job);

    let dir = tempfile::tempdir().unwrap();
    let h = host(dir.path(), plugins.path(), Strategy::Auto, 1 << 30);
    let job = h.submit(&s).unwrap();
    let task = store_of(&h).tasks_of(job).unwrap()[0].id;
    // Run until it is part-way, then stop gracefully.
    while store_of(&h).task(task).unwrap().unwrap().steps_done < 120 {
        h.tick().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    h.stop_job(job, None).unwrap();
    run(&h);
    let stopped = store_of(&h).task(task).unwrap().unwrap();
    assert_eq!(stopped.state, TaskState::Cancelled);
    assert!(stopped.steps_done > 0 && stopped.steps_done < 400);
    let at = stopped.steps_done;
    assert_eq!(
        store_of(&h).checkpoints(task).unwrap()[0].step,
        at,
        "a graceful stop checkpoints"
    );

    assert_eq!(h.resume_job(job, None, false).unwrap(), 1);
    run(&h);
    let done = store_of(&h).task(task).unwrap().unwrap();
    assert_eq!(done.state, TaskState::Completed);
    let reasons: Vec<String> = store_of(&h)
        .transitions(task)
        .unwrap()
        .iter()
        .map(|t| t.reason.clone())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r == &format!("resumed from checkpoint step {at}")),
        "{reasons:?}"
    );
    assert_eq!(
        final_checksum(&h, job),
        expected,
        "final weights differ from the uninterrupted run"
    );
}

#[test]
fn a_corrupt_checkpoint_is_refused_and_the_previous_one_used() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    let s = spec(
        r#"[{"plugin":"template","steps":300,"config":{"hidden_sizes":[16]}}]"#,
        ONE_ASSET,
        r#"{"every_steps":20,"keep":3}"#,
    );
    let h = host(state.path(), plugins.path(), Strategy::Auto, 1 << 30);
    let job = h.submit(&s).unwrap();
    let task = store_of(&h).tasks_of(job).unwrap()[0].id;
    while store_of(&h).checkpoints(task).unwrap().len() < 3 {
        h.tick().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    h.stop_job(job, None).unwrap();
    run(&h);
    let ckpts = store_of(&h).checkpoints(task).unwrap();
    assert!(ckpts.len() >= 2);
    let (newest, previous) = (&ckpts[0], &ckpts[1]);
    let weights = Path::new(&newest.path).join("tensors.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&weights, bytes).unwrap();

    h.resume_job(job, None, false).unwrap();
    run(&h);
    assert_eq!(
        store_of(&h).task(task).unwrap().unwrap().state,
        TaskState::Completed
    );
    let reasons: Vec<String> = store_of(&h)
        .transitions(task)
        .unwrap()
        .iter()
        .map(|t| t.reason.clone())
        .collect();
    let resumed = reasons
        .iter()
        .find(|r| r.starts_with(&format!("resumed from checkpoint step {}", previous.step)))
        .unwrap_or_else(|| panic!("not resumed from step {}: {reasons:?}", previous.step));
    assert!(
        resumed.contains("refused") && resumed.contains("tensors.safetensors"),
        "{resumed}"
    );
}

#[test]
fn a_failing_or_panicking_plugin_fails_only_its_own_task() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    let h = host(state.path(), plugins.path(), Strategy::Auto, 1 << 30);
    let s = spec(
        r#"[{"plugin":"behaviour","steps":100,"config":{"panic_in_step_at":12}},
            {"plugin":"behaviour","steps":100,"config":{"error_in_step_at":7}},
            {"plugin":"template","steps":60,"config":{"hidden_sizes":[16]}}]"#,
        ONE_ASSET,
        r#"{"every_steps":25,"keep":1}"#,
    );
    let job = h.submit(&s).unwrap();
    run(&h);
    let tasks = store_of(&h).tasks_of(job).unwrap();
    assert_eq!(tasks[0].state, TaskState::Failed);
    assert!(
        tasks[0]
            .error
            .as_deref()
            .unwrap()
            .contains("deliberate panic at step 12"),
        "{:?}",
        tasks[0].error
    );
    assert_eq!(tasks[1].state, TaskState::Failed);
    assert!(
        tasks[1]
            .error
            .as_deref()
            .unwrap()
            .contains("deliberate error at step 7"),
        "{:?}",
        tasks[1].error
    );
    assert_eq!(tasks[2].state, TaskState::Completed);
    assert_eq!(tasks[2].steps_done, 60);
}

#[test]
fn a_task_too_big_for_the_budget_is_refused_at_submission() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    let h = host(state.path(), plugins.path(), Strategy::Auto, 64 * 1024);
    let s = spec(
        r#"[{"plugin":"template","steps":10,"config":{"hidden_sizes":[512,512]}}]"#,
        ONE_ASSET,
        r#"{"keep":1}"#,
    );
    let e = h.submit(&s).unwrap_err().to_string();
    assert!(
        e.contains("too big") && e.contains("needs") && e.contains("budget"),
        "{e}"
    );
    assert!(
        store_of(&h).jobs().unwrap().is_empty(),
        "nothing is stored for a refused job"
    );
    // Unknown plugins and bad configs are refused too, naming the model.
    let e = h
        .submit(&spec(r#"[{"plugin":"nope","steps":10}]"#, ONE_ASSET, "{}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("models[0] (nope): no such plugin"), "{e}");
    let e = h
        .submit(&spec(
            r#"[{"plugin":"template","steps":10,"config":{"learning_rate":-1}}]"#,
            ONE_ASSET,
            "{}",
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("learning_rate"), "{e}");
}

#[test]
fn out_of_memory_requeues_once_then_fails_that_task_alone() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    let h = host(state.path(), plugins.path(), Strategy::Auto, 1 << 30);
    let s = spec(
        r#"[{"plugin":"behaviour","steps":50,"config":{"oom_in_step_at":5}},{"plugin":"behaviour","steps":50}]"#,
        ONE_ASSET,
        r#"{"keep":1}"#,
    );
    let job = h.submit(&s).unwrap();
    run(&h);
    let tasks = store_of(&h).tasks_of(job).unwrap();
    assert_eq!(tasks[0].state, TaskState::Failed);
    assert!(
        tasks[0]
            .error
            .as_deref()
            .unwrap()
            .starts_with("out of memory again"),
        "{:?}",
        tasks[0].error
    );
    let transitions = store_of(&h).transitions(tasks[0].id).unwrap();
    assert!(
        transitions
            .iter()
            .any(|t| t.to == TaskState::Queued && t.reason.contains("re-queued")),
        "{transitions:?}"
    );
    assert_eq!(tasks[1].state, TaskState::Completed);
}

#[test]
fn a_forced_stop_cancels_without_a_checkpoint_and_honours_its_deadline() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    let h = host(state.path(), plugins.path(), Strategy::Auto, 1 << 30);
    // A cooperative plugin: returns from step() as soon as it sees the cancel.
    let cooperative = spec(
        r#"[{"plugin":"behaviour","steps":100000,"config":{"sleep_ms_per_step":5}}]"#,
        ONE_ASSET,
        r#"{"every_steps":1000000,"every_seconds":1000000,"keep":1}"#,
    );
    let job = h.submit(&cooperative).unwrap();
    let task = store_of(&h).tasks_of(job).unwrap()[0].id;
    while store_of(&h).task(task).unwrap().unwrap().steps_done < 10 {
        h.tick().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let started = std::time::Instant::now();
    h.stop_task(task, Some(Duration::from_secs(5))).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a cooperative plugin stops within a slice"
    );
    run(&h);
    let row = store_of(&h).task(task).unwrap().unwrap();
    assert_eq!(row.state, TaskState::Cancelled);
    assert!(
        store_of(&h).checkpoints(task).unwrap().is_empty(),
        "a forced stop writes no checkpoint"
    );

    // A plugin that ignores the cancel: the deadline marks the task cancelled
    // anyway, long before its 10-step slice (3 s) would end.
    let stubborn = spec(
        r#"[{"plugin":"behaviour","steps":100000,"config":{"sleep_ms_per_step":300,"ignore_cancel":true}}]"#,
        ONE_ASSET,
        r#"{"keep":1}"#,
    );
    let job = h.submit(&stubborn).unwrap();
    let task = store_of(&h).tasks_of(job).unwrap()[0].id;
    while store_of(&h).task(task).unwrap().unwrap().state != TaskState::Running {
        h.tick().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    // `running` is recorded just before the first slice starts; a stop seen
    // before it would end the task at step 0 without needing the deadline.
    std::thread::sleep(Duration::from_millis(200));
    let started = std::time::Instant::now();
    h.stop_task(task, Some(Duration::from_millis(30))).unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the stop waited for the slice instead of the deadline"
    );
    let row = store_of(&h).task(task).unwrap().unwrap();
    assert_eq!(row.state, TaskState::Cancelled);
    let last = store_of(&h).transitions(task).unwrap().pop().unwrap();
    assert!(
        last.reason
            .starts_with("forced stop: the plugin did not return within"),
        "{}",
        last.reason
    );
    run(&h); // the abandoned slice ends on its own; its reservation is then released
    assert!(store_of(&h).open_reservations().unwrap().is_empty());
}

#[test]
fn a_forced_stop_of_a_job_waits_one_deadline_for_all_its_tasks() {
    let (state, plugins) = (tempfile::tempdir().unwrap(), template_and_behaviour());
    let h = host(state.path(), plugins.path(), Strategy::Auto, 1 << 30);
    // Two plugins that ignore the cancel, each in a 10-step slice of 3 s.
    let stubborn = spec(
        r#"[{"plugin":"behaviour","steps":100000,"config":{"sleep_ms_per_step":300,"ignore_cancel":true}}]"#,
        r#"[{"synthetic":{"rows":600,"seed":1}},{"synthetic":{"rows":600,"seed":2}}]"#,
        r#"{"keep":1}"#,
    );
    let job = h.submit(&stubborn).unwrap();
    while !store_of(&h)
        .tasks_of(job)
        .unwrap()
        .iter()
        .all(|t| t.state == TaskState::Running)
    {
        h.tick().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(200)); // both inside their first slice
    let started = std::time::Instant::now();
    h.stop_job(job, Some(Duration::from_millis(800))).unwrap();
    // One deadline for the job, not one per task (that would be 1.6 s or more).
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "stopping took {:?}",
        started.elapsed()
    );
    for task in store_of(&h).tasks_of(job).unwrap() {
        assert_eq!(task.state, TaskState::Cancelled);
    }
    run(&h);
    assert!(store_of(&h).open_reservations().unwrap().is_empty());
}

/// Submits the spec file `spec` to `server`; its job id.
fn submit_spec(server: &Server, spec: &Path) -> i64 {
    let out = server.client(&[
        "train",
        "start",
        "--spec",
        spec.to_str().expect("a UTF-8 path"),
        "-o",
        "json",
    ]);
    ok_json(&out)["job_id"].as_i64().expect("a job id")
}

/// Waits (up to 2 minutes) until every task of `job` has ended; its tasks.
fn wait_for_job(state: &Path, job: i64) -> Vec<tli_host::orchestrator::store::TaskRow> {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let tasks = Store::open_read_only(state)
            .and_then(|s| s.tasks_of(job))
            .unwrap_or_default();
        if !tasks.is_empty() && tasks.iter().all(|t| t.state.is_finished()) {
            return tasks;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {job} did not end: {tasks:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// When the task last entered `state` (ms), from its recorded transitions.
fn entered(store: &Store, task: i64, state: TaskState) -> (i64, String) {
    let t = store
        .transitions(task)
        .unwrap()
        .into_iter()
        .rfind(|t| t.to == state)
        .unwrap_or_else(|| panic!("task {task} never became {state}"));
    (t.at_ms, t.reason)
}

/// Two long tasks held both slots of a 2-core host (`auto`: one task per
/// core) and a 0.1 s task queued with them waited until one had ended. Once
/// every model's pace is known, the short task starts beside the full slots
/// and completes while both long ones still run. Only the order is asserted.
#[test]
fn a_short_task_starts_beside_long_ones_holding_every_slot() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = Server::start(plugins.path(), &state, &["--cores", "2"]);
    // Long: 10 ms a step; short: 1 ms a step. Final checkpoints only.
    const LONG: &str = r#"{"plugin":"behaviour","config":{"sleep_ms_per_step":10}"#;
    const SHORT: &str = r#"{"plugin":"behaviour","config":{"sleep_ms_per_step":1}"#;
    let write = |name: &str, models: String| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                r#"{{"name":"{name}","models":[{models}],"assets":[{{"synthetic":{{"rows":600}}}}],
                    "checkpoint":{{"every_steps":0,"every_seconds":0,"keep":1}},"slice_steps":5}}"#
            ),
        )
        .unwrap();
        path
    };
    // A first job measures both models' paces.
    let warm = write(
        "warm.json",
        format!(r#"{LONG},"steps":60}},{SHORT},"steps":20}}"#),
    );
    let warm = submit_spec(&server, &warm);
    let warmed = wait_for_job(&state, warm);
    assert!(
        warmed.iter().all(|t| t.state == TaskState::Completed),
        "{warmed:?}"
    );
    // Two long tasks (about 4 s each) and a short one (20 steps) after them.
    let main = write(
        "main.json",
        format!(r#"{LONG},"steps":400}},{LONG},"steps":400}},{SHORT},"steps":20}}"#),
    );
    let job = submit_spec(&server, &main);
    let tasks = wait_for_job(&state, job);
    assert!(
        tasks.iter().all(|t| t.state == TaskState::Completed),
        "{tasks:?}"
    );
    let store = Store::open_read_only(&state).unwrap();
    let (long, short): (Vec<_>, Vec<_>) = tasks.iter().partition(|t| t.total_steps == 400);
    let short = short[0].id;
    let (short_started, why) = entered(&store, short, TaskState::Running);
    let (short_done, _) = entered(&store, short, TaskState::Completed);
    for task in &long {
        let (long_done, _) = entered(&store, task.id, TaskState::Completed);
        assert!(
            short_started < long_done && short_done < long_done,
            "the short task (started {short_started}, done {short_done}) waited for long task \
             {} (done {long_done}): {why}",
            task.id
        );
    }
    assert!(why.contains("beside"), "{why}");
}
