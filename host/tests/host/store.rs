//! The durable job store on real SQLite files in temporary directories.

use std::path::Path;

use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::{
    MeasuredMemory, MemorySource, NewTask, Store, StoreError, DB_FILE, LOCK_FILE, SCHEMA_VERSION,
};

fn new_task(i: u32) -> NewTask {
    NewTask {
        plugin: format!("plugin-{i}"),
        asset: format!("ES{i}"),
        config_json: format!("{{\"lr\":0.00{i}}}"),
        // Seeds use the whole u64 range (stored bit for bit).
        seed: u64::MAX - u64::from(i),
        total_steps: 1000 + u64::from(i),
        priority: -(i as i32),
        device: tli_plugin_api::Device::Cuda(i),
        estimate_bytes: (1 << 33) + u64::from(i),
        cost_weight: 1.5 + f64::from(i),
        plugin_version: Some(format!("{i}.1.0")),
        plugin_checksum: Some(format!("{i:064x}")),
        model_card: None,
    }
}

fn store_with_job(dir: &Path, n: u32) -> (Store, i64, Vec<i64>) {
    let store = Store::open(dir).expect("open");
    let tasks: Vec<NewTask> = (0..n).map(new_task).collect();
    let (job, ids) = store
        .create_job("job-a", "{\"spec\":true}", &tasks)
        .expect("create_job");
    (store, job, ids)
}

fn s(x: &str) -> String {
    x.to_string()
}

#[test]
fn store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Store>();
}

#[test]
fn wal_full_sync_foreign_keys_and_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let p = store.pragmas().unwrap();
    assert_eq!(p.journal_mode, "wal");
    assert_eq!(p.synchronous, 2, "synchronous must be FULL");
    assert!(p.foreign_keys);
    assert!(p.busy_timeout_ms > 0);
    assert_eq!(p.user_version, SCHEMA_VERSION);
    assert!(dir.path().join(DB_FILE).is_file());
    assert!(dir.path().join(LOCK_FILE).is_file());
}

#[test]
fn open_creates_a_missing_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b/state");
    let store = Store::open(&nested).unwrap();
    assert_eq!(store.path(), nested.join(DB_FILE));
}

#[test]
fn create_job_round_trips_all_fields_with_submitted_transitions() {
    let dir = tempfile::tempdir().unwrap();
    let (store, job, ids) = store_with_job(dir.path(), 3);
    assert_eq!(ids.len(), 3);

    let row = store.job(job).unwrap().expect("job exists");
    assert_eq!(row.id, job);
    assert_eq!(row.name, "job-a");
    assert_eq!(row.spec_json, "{\"spec\":true}");
    assert!(row.created_ms > 0);
    assert_eq!(store.job(job + 100).unwrap(), None);

    let (job2, _) = store.create_job("job-b", "{}", &[new_task(9)]).unwrap();
    let jobs = store.jobs().unwrap();
    assert_eq!(
        jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![job2, job],
        "newest first"
    );

    let tasks = store.tasks_of(job).unwrap();
    assert_eq!(tasks.iter().map(|t| t.id).collect::<Vec<_>>(), ids);
    for (i, t) in tasks.iter().enumerate() {
        let want = new_task(i as u32);
        assert_eq!(t.job_id, job);
        assert_eq!(t.ordinal, i as u32);
        assert_eq!(t.plugin, want.plugin);
        assert_eq!(t.asset, want.asset);
        assert_eq!(t.config_json, want.config_json);
        assert_eq!(t.seed, want.seed);
        assert_eq!(t.total_steps, want.total_steps);
        assert_eq!(t.priority, want.priority);
        assert_eq!(t.device, want.device);
        assert_eq!(t.estimate_bytes, want.estimate_bytes);
        assert_eq!(t.measured_bytes, None);
        assert_eq!(t.cost_weight, want.cost_weight);
        assert_eq!(t.state, TaskState::Queued);
        assert_eq!(t.steps_done, 0);
        assert_eq!(t.error, None);
        assert_eq!(t.created_ms, t.updated_ms);
        assert_eq!(store.task(t.id).unwrap().as_ref(), Some(t));

        let tr = store.transitions(t.id).unwrap();
        assert_eq!(tr.len(), 1);
        assert_eq!(tr[0].task_id, t.id);
        assert_eq!(tr[0].from, None);
        assert_eq!(tr[0].to, TaskState::Queued);
        assert_eq!(tr[0].reason, "submitted");
    }
    assert_eq!(store.task(-5).unwrap(), None);
    assert!(store.tasks_of(job + 100).unwrap().is_empty());

    store.set_measured_bytes(ids[1], 12345).unwrap();
    assert_eq!(
        store.task(ids[1]).unwrap().unwrap().measured_bytes,
        Some(12345)
    );
    assert!(matches!(
        store.set_measured_bytes(999, 1),
        Err(StoreError::NoSuchTask(999))
    ));

    // A job without tasks is fine too.
    let (empty, ids) = store.create_job("empty", "{}", &[]).unwrap();
    assert!(ids.is_empty());
    assert!(store.tasks_of(empty).unwrap().is_empty());
}

#[test]
fn sizes_beyond_i64_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut bad = new_task(1);
    bad.estimate_bytes = u64::MAX;
    let err = store
        .create_job("too-big", "{}", &[new_task(0), bad])
        .unwrap_err();
    assert!(matches!(err, StoreError::OutOfRange { .. }), "{err}");
    assert!(err.to_string().contains("estimate_bytes"), "{err}");
    // The transaction was rolled back: no job, no first task.
    assert!(store.jobs().unwrap().is_empty());
    assert!(store.tasks_in(&TaskState::ALL).unwrap().is_empty());
}

#[test]
fn legal_and_illegal_transitions() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 2);
    let t = ids[0];

    assert_eq!(
        store.transition(t, TaskState::Running, "admitted").unwrap(),
        TaskState::Queued
    );
    assert_eq!(
        store
            .transition(t, TaskState::Checkpointing, "step 100")
            .unwrap(),
        TaskState::Running
    );
    assert_eq!(
        store.transition(t, TaskState::Running, "saved").unwrap(),
        TaskState::Checkpointing
    );
    store
        .transition(t, TaskState::Failed, "plugin returned NaN")
        .unwrap();
    let row = store.task(t).unwrap().unwrap();
    assert_eq!(row.state, TaskState::Failed);
    assert_eq!(row.error.as_deref(), Some("plugin returned NaN"));
    assert!(row.updated_ms >= row.created_ms);

    store.transition(t, TaskState::Queued, "resume").unwrap();
    let row = store.task(t).unwrap().unwrap();
    assert_eq!(row.state, TaskState::Queued);
    assert_eq!(row.error, None, "queued clears the error");

    store.transition(t, TaskState::Running, "again").unwrap();
    store.transition(t, TaskState::Completed, "done").unwrap();

    let before = store.transitions(t).unwrap();
    let row_before = store.task(t).unwrap().unwrap();
    let err = store.transition(t, TaskState::Running, "nope").unwrap_err();
    match &err {
        StoreError::IllegalTransition { task, from, to } => {
            assert_eq!(*task, t);
            assert_eq!(*from, TaskState::Completed);
            assert_eq!(*to, TaskState::Running);
        }
        other => panic!("unexpected {other}"),
    }
    assert_eq!(
        err.to_string(),
        format!("task {t} cannot go from completed to running")
    );
    assert_eq!(store.transitions(t).unwrap(), before);
    assert_eq!(store.task(t).unwrap().unwrap(), row_before);

    let got: Vec<(Option<TaskState>, TaskState, String)> = before
        .iter()
        .map(|r| (r.from, r.to, r.reason.clone()))
        .collect();
    use TaskState::*;
    assert_eq!(
        got,
        vec![
            (None, Queued, s("submitted")),
            (Some(Queued), Running, s("admitted")),
            (Some(Running), Checkpointing, s("step 100")),
            (Some(Checkpointing), Running, s("saved")),
            (Some(Running), Failed, s("plugin returned NaN")),
            (Some(Failed), Queued, s("resume")),
            (Some(Queued), Running, s("again")),
            (Some(Running), Completed, s("done")),
        ]
    );
    assert!(before.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));

    // Queued cannot complete without running.
    let err = store
        .transition(ids[1], TaskState::Completed, "skip")
        .unwrap_err();
    assert!(matches!(err, StoreError::IllegalTransition { .. }));
    assert_eq!(store.task(ids[1]).unwrap().unwrap().state, Queued);
    assert_eq!(store.transitions(ids[1]).unwrap().len(), 1);

    let err = store.transition(4242, Running, "x").unwrap_err();
    assert!(matches!(err, StoreError::NoSuchTask(4242)), "{err}");
    assert!(err.to_string().contains("4242"));

    // tasks_in: by state, oldest first.
    assert!(store.tasks_in(&[]).unwrap().is_empty());
    assert_eq!(
        store
            .tasks_in(&[Completed, Queued])
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect::<Vec<_>>(),
        ids
    );
    assert!(store.tasks_in(&[Running]).unwrap().is_empty());
}

#[test]
fn progress_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 2);
    let t = ids[0];
    store
        .record_progress(t, 10, &[(s("loss"), 1.0), (s("acc"), 0.1)])
        .unwrap();
    store
        .record_progress(t, 20, &[(s("loss"), 0.5), (s("acc"), 0.2)])
        .unwrap();
    store.record_progress(t, 30, &[(s("loss"), 0.25)]).unwrap();
    store.record_progress(t, 35, &[]).unwrap();
    store
        .record_progress(ids[1], 5, &[(s("loss"), 9.0)])
        .unwrap();

    assert_eq!(store.task(t).unwrap().unwrap().steps_done, 35);
    assert_eq!(
        store.metric_history(t, "loss").unwrap(),
        vec![(10, 1.0), (20, 0.5), (30, 0.25)]
    );
    assert_eq!(
        store.metric_history(t, "acc").unwrap(),
        vec![(10, 0.1), (20, 0.2)]
    );
    assert!(store.metric_history(t, "nope").unwrap().is_empty());
    assert_eq!(
        store.latest_metrics(t).unwrap(),
        vec![(s("acc"), 0.2), (s("loss"), 0.25)]
    );
    assert_eq!(
        store.latest_metrics(ids[1]).unwrap(),
        vec![(s("loss"), 9.0)]
    );

    // NaN (stored by SQLite as NULL) comes back as NaN; infinities stay.
    store
        .record_progress(t, 40, &[(s("loss"), f64::NAN), (s("acc"), f64::INFINITY)])
        .unwrap();
    let latest = store.latest_metrics(t).unwrap();
    assert_eq!(latest[0], (s("acc"), f64::INFINITY));
    assert!(latest[1].1.is_nan());

    // Restarting from the checkpoint at step 20 drops the later metrics.
    store.set_steps_done(t, 20).unwrap();
    assert_eq!(store.task(t).unwrap().unwrap().steps_done, 20);
    assert_eq!(
        store.metric_history(t, "loss").unwrap(),
        vec![(10, 1.0), (20, 0.5)]
    );
    assert_eq!(
        store.latest_metrics(t).unwrap(),
        vec![(s("acc"), 0.2), (s("loss"), 0.5)]
    );

    assert!(matches!(
        store.record_progress(777, 1, &[(s("loss"), 1.0)]),
        Err(StoreError::NoSuchTask(777))
    ));
    assert!(matches!(
        store.set_steps_done(777, 1),
        Err(StoreError::NoSuchTask(777))
    ));
}

#[test]
fn checkpoints_newest_first_and_removal() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 2);
    let t = ids[0];
    let a = store
        .add_checkpoint(t, 100, "/ck/100", "sha-a", None)
        .unwrap();
    let b = store
        .add_checkpoint(t, 300, "/ck/300", "sha-b", None)
        .unwrap();
    let c = store
        .add_checkpoint(t, 200, "/ck/200", "sha-c", None)
        .unwrap();
    let d = store
        .add_checkpoint(t, 300, "/ck/300b", "sha-d", None)
        .unwrap();
    store
        .add_checkpoint(ids[1], 50, "/other", "x", None)
        .unwrap();

    let list = store.checkpoints(t).unwrap();
    assert_eq!(
        list.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![d, b, c, a]
    );
    assert_eq!(list[0].step, 300);
    assert_eq!(list[0].path, "/ck/300b");
    assert_eq!(list[0].checksum, "sha-d");
    assert_eq!(list[0].task_id, t);
    assert!(list[0].created_ms > 0);

    assert!(store.remove_checkpoint(b).unwrap());
    assert!(!store.remove_checkpoint(b).unwrap(), "already gone");
    assert_eq!(
        store
            .checkpoints(t)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect::<Vec<_>>(),
        vec![d, c, a]
    );
    assert_eq!(store.checkpoints(ids[1]).unwrap().len(), 1);
    assert!(matches!(
        store.add_checkpoint(555, 1, "/x", "y", None),
        Err(StoreError::NoSuchTask(555))
    ));
}

#[test]
fn reservations_timeline_and_open_set() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 2);
    let r1 = store
        .reserve(ids[0], tli_plugin_api::Device::Cuda(0), 1 << 30)
        .unwrap();
    let r2 = store
        .reserve(ids[1], tli_plugin_api::Device::Cuda(0), 2 << 30)
        .unwrap();
    let r3 = store
        .reserve(ids[1], tli_plugin_api::Device::Cuda(1), 3 << 30)
        .unwrap();

    let open = store.open_reservations().unwrap();
    assert_eq!(
        open.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![r1, r2, r3]
    );
    assert_eq!(open[1].task_id, ids[1]);
    assert_eq!(open[1].device, "cuda:0");
    assert_eq!(open[1].bytes, 2 << 30);
    assert_eq!(open[1].released_ms, None);

    store.release(r2).unwrap();
    let released_at = store.reservation_timeline().unwrap()[1].released_ms;
    assert!(released_at.is_some());
    std::thread::sleep(std::time::Duration::from_millis(5));
    store.release(r2).unwrap(); // twice: no-op
    assert_eq!(
        store.reservation_timeline().unwrap()[1].released_ms,
        released_at,
        "the first release time stays"
    );
    assert!(matches!(
        store.release(9999),
        Err(StoreError::NoSuchReservation(9999))
    ));

    let open = store.open_reservations().unwrap();
    assert_eq!(open.iter().map(|r| r.id).collect::<Vec<_>>(), vec![r1, r3]);
    let all = store.reservation_timeline().unwrap();
    assert_eq!(
        all.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![r1, r2, r3]
    );
    assert!(all[1].released_ms.unwrap() >= all[1].reserved_ms);
    assert!(matches!(
        store.reserve(31337, tli_plugin_api::Device::Cuda(0), 1),
        Err(StoreError::NoSuchTask(31337))
    ));
}

#[test]
fn everything_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (job, ids, ck, res) = {
        let (store, job, ids) = store_with_job(dir.path(), 2);
        store.transition(ids[0], TaskState::Running, "go").unwrap();
        store
            .record_progress(ids[0], 7, &[(s("loss"), 0.7)])
            .unwrap();
        store.set_measured_bytes(ids[0], 4096).unwrap();
        let ck = store
            .add_checkpoint(ids[0], 7, "/ck/7", "abc", None)
            .unwrap();
        let res = store
            .reserve(ids[0], tli_plugin_api::Device::Cuda(0), 4096)
            .unwrap();
        store.release(res).unwrap();
        (job, ids, ck, res)
    };
    let store = Store::open(dir.path()).expect("reopen");
    assert_eq!(store.job(job).unwrap().unwrap().name, "job-a");
    let t = store.task(ids[0]).unwrap().unwrap();
    assert_eq!(t.state, TaskState::Running);
    assert_eq!(t.steps_done, 7);
    assert_eq!(t.measured_bytes, Some(4096));
    assert_eq!(t.seed, u64::MAX);
    assert_eq!(store.tasks_of(job).unwrap().len(), 2);
    assert_eq!(store.transitions(ids[0]).unwrap().len(), 2);
    assert_eq!(
        store.metric_history(ids[0], "loss").unwrap(),
        vec![(7, 0.7)]
    );
    assert_eq!(store.checkpoints(ids[0]).unwrap()[0].id, ck);
    let timeline = store.reservation_timeline().unwrap();
    assert_eq!(timeline.len(), 1);
    assert_eq!(timeline[0].id, res);
    assert!(timeline[0].released_ms.is_some());
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
}

#[test]
fn recovery_after_a_host_died_mid_run() {
    let dir = tempfile::tempdir().unwrap();
    let ids = {
        let (store, _job, ids) = store_with_job(dir.path(), 4);
        store.transition(ids[0], TaskState::Running, "go").unwrap();
        store.transition(ids[1], TaskState::Running, "go").unwrap();
        store
            .transition(ids[1], TaskState::Checkpointing, "step 50")
            .unwrap();
        store.transition(ids[2], TaskState::Running, "go").unwrap();
        store
            .transition(ids[2], TaskState::Completed, "done")
            .unwrap();
        // ids[3] stays queued.
        store
            .reserve(ids[0], tli_plugin_api::Device::Cuda(0), 100)
            .unwrap();
        store
            .reserve(ids[1], tli_plugin_api::Device::Cuda(0), 200)
            .unwrap();
        let closed = store
            .reserve(ids[2], tli_plugin_api::Device::Cuda(0), 300)
            .unwrap();
        store.release(closed).unwrap();
        // The host "dies": the store is dropped with no cleanup at all.
        std::mem::forget(store);
        ids
    };
    // forget() leaked the connection (WAL never checkpointed, files never
    // closed) and the lock's descriptor, which in a real crash the kernel
    // would close; here it is still held, as it must be.
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");

    // Copy the database files (as a crash leaves them: WAL not checkpointed)
    // to a new state directory with no lock holder.
    let crashed = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(DB_FILE) {
            std::fs::copy(entry.path(), crashed.path().join(&name)).unwrap();
        }
    }
    assert!(
        crashed.path().join(format!("{DB_FILE}-wal")).is_file(),
        "the un-checkpointed WAL is what a crash leaves"
    );

    let store = Store::open(crashed.path()).expect("reopen after crash");
    assert_eq!(store.open_reservations().unwrap().len(), 2);
    let recovered = store.recover_after_restart("host restarted", &[]).unwrap();
    assert_eq!(recovered, vec![ids[0], ids[1]]);

    for &t in &ids[..2] {
        let row = store.task(t).unwrap().unwrap();
        assert_eq!(row.state, TaskState::Interrupted);
        let last = store.transitions(t).unwrap().pop().unwrap();
        assert_eq!(last.to, TaskState::Interrupted);
        assert_eq!(last.reason, "host restarted");
    }
    assert_eq!(
        store.transitions(ids[1]).unwrap().pop().unwrap().from,
        Some(TaskState::Checkpointing)
    );
    assert_eq!(
        store.task(ids[2]).unwrap().unwrap().state,
        TaskState::Completed
    );
    assert_eq!(
        store.task(ids[3]).unwrap().unwrap().state,
        TaskState::Queued
    );
    assert!(store.open_reservations().unwrap().is_empty());
    assert!(store
        .reservation_timeline()
        .unwrap()
        .iter()
        .all(|r| r.released_ms.is_some()));

    // A second recovery finds nothing to do.
    assert!(store
        .recover_after_restart("again", &[])
        .unwrap()
        .is_empty());
    // Interrupted tasks can be resumed.
    store
        .transition(ids[0], TaskState::Queued, "resume")
        .unwrap();
}

#[test]
fn recovery_after_a_plain_drop() {
    // The brief's variant: drop the Store (no cleanup) and reopen the same dir.
    let dir = tempfile::tempdir().unwrap();
    let ids = {
        let (store, _job, ids) = store_with_job(dir.path(), 2);
        store.transition(ids[0], TaskState::Running, "go").unwrap();
        store
            .reserve(ids[0], tli_plugin_api::Device::Cuda(0), 100)
            .unwrap();
        ids
    };
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store.recover_after_restart("host restarted", &[]).unwrap(),
        vec![ids[0]]
    );
    assert_eq!(
        store.task(ids[0]).unwrap().unwrap().state,
        TaskState::Interrupted
    );
    assert!(store.open_reservations().unwrap().is_empty());
}

#[test]
fn second_host_is_locked_out_but_read_only_works() {
    let dir = tempfile::tempdir().unwrap();
    let (store, job, ids) = store_with_job(dir.path(), 1);

    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("locked by another host process"), "{msg}");
    assert!(
        msg.contains(&dir.path().join(LOCK_FILE).display().to_string()),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );

    let ro = Store::open_read_only(dir.path()).expect("read-only while locked");
    assert!(ro.is_read_only());
    assert_eq!(ro.tasks_of(job).unwrap().len(), 1);
    // The writer's later commits are visible to the reader.
    store
        .record_progress(ids[0], 3, &[(s("loss"), 2.0)])
        .unwrap();
    assert_eq!(ro.task(ids[0]).unwrap().unwrap().steps_done, 3);
    // Writes through the read-only store fail cleanly.
    assert!(ro.create_job("x", "{}", &[]).is_err());
    assert!(ro.transition(ids[0], TaskState::Running, "x").is_err());
    assert_eq!(
        store.task(ids[0]).unwrap().unwrap().state,
        TaskState::Queued
    );

    drop(ro);
    drop(store);
    // The lock went with the store.
    Store::open(dir.path()).expect("open after the first host is gone");
}

#[test]
fn read_only_needs_an_existing_store() {
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open_read_only(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Missing { .. }), "{err}");
    assert!(err.to_string().contains(DB_FILE), "{err}");

    // After the writing host has closed: read-only opens it alone.
    {
        store_with_job(dir.path(), 2);
    }
    let ro = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(ro.jobs().unwrap().len(), 1);
    assert_eq!(ro.tasks_in(&[TaskState::Queued]).unwrap().len(), 2);
}

#[test]
fn garbage_file_is_a_clear_error() {
    for garbage in [
        b"this is not an SQLite file at all\n".repeat(200),
        b"short".to_vec(),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DB_FILE), &garbage).unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("not an SQLite database"), "{msg}");
        assert!(msg.contains(DB_FILE), "{msg}");
        // The file was left as it was.
        assert_eq!(std::fs::read(dir.path().join(DB_FILE)).unwrap(), garbage);

        let err = Store::open_read_only(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
    }
}

#[test]
fn a_version_1_store_gains_latest_metrics_from_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 1);
    let t = ids[0];
    store
        .record_progress(t, 10, &[(s("loss"), 1.0), (s("acc"), 0.1)])
        .unwrap();
    store.record_progress(t, 20, &[(s("loss"), 0.5)]).unwrap();
    drop(store);
    {
        // What a version-1 host left behind: no latest_metrics table.
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!(
            "DROP TABLE latest_metrics; ALTER TABLE tasks DROP COLUMN oom_requeues;
             {DROP_V4} PRAGMA user_version = 1;"
        ))
        .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    assert_eq!(
        store.latest_metrics(t).unwrap(),
        vec![(s("acc"), 0.1), (s("loss"), 0.5)]
    );
}

#[test]
fn a_version_2_store_counts_oom_requeues_from_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 2);
    store
        .transition(ids[0], TaskState::Running, "started")
        .unwrap();
    store
        .requeue_after_oom(ids[0], "out of memory: CUDA; re-queued")
        .unwrap();
    assert_eq!(store.task(ids[0]).unwrap().unwrap().oom_requeues, 1);
    drop(store);
    {
        // What a version-2 host left behind: the count only in reasons.
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!(
            "ALTER TABLE tasks DROP COLUMN oom_requeues; {DROP_V4} PRAGMA user_version = 2;"
        ))
        .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    assert_eq!(store.task(ids[0]).unwrap().unwrap().oom_requeues, 1);
    assert_eq!(store.task(ids[1]).unwrap().unwrap().oom_requeues, 0);
}

#[test]
fn a_version_9_store_gains_its_session_mark_and_keeps_its_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let (store, job, _ids) = store_with_job(dir.path(), 2);
    drop(store);
    {
        // What a version-9 host left behind: no store_session.
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!(
            "{DROP_V11} DROP TABLE store_session; PRAGMA user_version = 9;"
        ))
        .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    assert!(store.job(job).unwrap().is_some());
}

/// What version 11 added: dropping it gives a version-10 store.
const DROP_V11: &str = "ALTER TABLE dispatches DROP COLUMN usage_elapsed_s;
    ALTER TABLE dispatches DROP COLUMN usage_cpus; ALTER TABLE dispatches DROP COLUMN usage_gpus;";

/// A dispatch's usage round-trips; a version-10 store gains the columns and
/// its dispatches read as not accounted yet.
#[test]
fn dispatch_usage_round_trips_and_a_version_10_store_gains_it() {
    use tli_host::orchestrator::store::DispatchUsage;
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 1);
    let first = store.open_dispatch(ids[0], "slurm").unwrap();
    store
        .set_dispatch_submitted(first, "41", "--gres=gpu:1")
        .unwrap();
    store
        .end_dispatch(first, "worker ended: Completed")
        .unwrap();
    let second = store.open_dispatch(ids[0], "slurm").unwrap();
    store.set_dispatch_submitted(second, "42", "").unwrap();
    let waiting = store.dispatches_awaiting_usage(0).unwrap();
    assert_eq!(
        waiting.iter().map(|d| d.id).collect::<Vec<_>>(),
        vec![first]
    );
    let usage = DispatchUsage {
        elapsed_seconds: 95.0,
        cpus: 4,
        gpus: 1.0,
    };
    store.set_dispatch_usage(first, &usage).unwrap();
    assert!(store.dispatches_awaiting_usage(0).unwrap().is_empty());
    assert_eq!(store.dispatch(first).unwrap().unwrap().usage, Some(usage));
    assert_eq!(store.dispatch(second).unwrap().unwrap().usage, None);
    drop(store);
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!("{DROP_V11} PRAGMA user_version = 10;"))
            .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    assert_eq!(store.dispatch(first).unwrap().unwrap().usage, None);
    assert_eq!(
        store.dispatches_awaiting_usage(0).unwrap().len(),
        1,
        "an ended dispatch of a version-10 store is asked about again"
    );
}

/// What versions 9 to 11 added: dropping it gives a version-8 store.
const DROP_V9: &str = "ALTER TABLE dispatches DROP COLUMN usage_elapsed_s;
    ALTER TABLE dispatches DROP COLUMN usage_cpus; ALTER TABLE dispatches DROP COLUMN usage_gpus;
    DROP TABLE store_session; ALTER TABLE checkpoints DROP COLUMN best_metric;
    ALTER TABLE checkpoints DROP COLUMN best_value; ALTER TABLE checkpoints DROP COLUMN best_mode;";

/// What versions 8 to 11 added: dropping it gives a version-7 store.
const DROP_V8: &str = "ALTER TABLE dispatches DROP COLUMN usage_elapsed_s;
    ALTER TABLE dispatches DROP COLUMN usage_cpus; ALTER TABLE dispatches DROP COLUMN usage_gpus;
    DROP TABLE store_session; ALTER TABLE checkpoints DROP COLUMN best_metric;
    ALTER TABLE checkpoints DROP COLUMN best_value; ALTER TABLE checkpoints DROP COLUMN best_mode;
    DROP TABLE model_cards;";

/// What versions 7 to 11 added: dropping it gives a version-6 store.
const DROP_V7: &str = "ALTER TABLE dispatches DROP COLUMN usage_elapsed_s;
    ALTER TABLE dispatches DROP COLUMN usage_cpus; ALTER TABLE dispatches DROP COLUMN usage_gpus;
    DROP TABLE store_session; ALTER TABLE checkpoints DROP COLUMN best_metric;
    ALTER TABLE checkpoints DROP COLUMN best_value; ALTER TABLE checkpoints DROP COLUMN best_mode;
    DROP TABLE model_cards; ALTER TABLE tasks DROP COLUMN plugin_version;
    ALTER TABLE tasks DROP COLUMN plugin_checksum;";

/// What versions 4 to 11 added: dropping it gives a version-3 store.
const DROP_V4: &str = "DROP TABLE store_session; ALTER TABLE checkpoints DROP COLUMN best_metric;
    ALTER TABLE checkpoints DROP COLUMN best_value; ALTER TABLE checkpoints DROP COLUMN best_mode;
    DROP TABLE model_cards; ALTER TABLE tasks DROP COLUMN plugin_version;
    ALTER TABLE tasks DROP COLUMN plugin_checksum;
    DROP TABLE dispatches; DROP TABLE device_budgets;
    ALTER TABLE tasks DROP COLUMN measured_parameters;
    ALTER TABLE tasks DROP COLUMN measured_gradients;
    ALTER TABLE tasks DROP COLUMN measured_optimizer_state;
    ALTER TABLE tasks DROP COLUMN measured_activations;
    ALTER TABLE tasks DROP COLUMN measured_source;";

/// A best checkpoint keeps its mark; a version-8 store gains the columns,
/// and its checkpoints read as newest-kept ones.
#[test]
fn best_checkpoints_round_trip_and_a_version_8_store_gains_them() {
    use tli_core::selection::Mode;
    use tli_host::orchestrator::store::BestMark;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (_job, ids) = store.create_job("best", "{}", &[new_task(0)]).unwrap();
    let t = ids[0];
    let mark = |value| BestMark {
        metric: "valid_loss".into(),
        value,
        mode: Mode::Min,
    };
    store.add_checkpoint(t, 10, "/ck/10", "a", None).unwrap();
    store
        .add_checkpoint(t, 20, "/ck/best/20", "b", Some(&mark(0.5)))
        .unwrap();
    store
        .add_checkpoint(t, 30, "/ck/best/30", "c", Some(&mark(0.25)))
        .unwrap();
    store
        .add_checkpoint(t, 40, "/ck/best/40", "d", Some(&mark(0.75)))
        .unwrap();
    let best = store.best_checkpoint(t).unwrap().unwrap();
    assert_eq!((best.step, best.best), (30, Some(mark(0.25))));
    drop(store);
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!(
            "DELETE FROM checkpoints WHERE step > 10; {DROP_V9} PRAGMA user_version = 8;"
        ))
        .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    let rows = store.checkpoints(t).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].best, None);
    assert!(store.best_checkpoint(t).unwrap().is_none());
}

/// A task's model card is kept with it; a version-7 store gains the table
/// and its tasks read as having none.
#[test]
fn model_cards_round_trip_and_a_version_7_store_gains_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let with_card = NewTask {
        model_card: Some(r#"{"format":"tli-model"}"#.into()),
        ..new_task(0)
    };
    let (_job, ids) = store
        .create_job("cards", "{}", &[with_card, new_task(1)])
        .unwrap();
    assert_eq!(
        store.model_card(ids[0]).unwrap().as_deref(),
        Some(r#"{"format":"tli-model"}"#)
    );
    assert_eq!(store.model_card(ids[1]).unwrap(), None);
    drop(store);
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!("{DROP_V8} PRAGMA user_version = 7;"))
            .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    assert_eq!(store.model_card(ids[0]).unwrap(), None);
    let (_job, more) = store
        .create_job(
            "again",
            "{}",
            &[NewTask {
                model_card: Some("{}".into()),
                ..new_task(2)
            }],
        )
        .unwrap();
    assert_eq!(store.model_card(more[0]).unwrap().as_deref(), Some("{}"));
}

#[test]
fn measured_memory_by_component_round_trips_and_a_version_3_store_gains_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 2);
    store.set_measured_bytes(ids[1], 777).unwrap();
    let memory = MeasuredMemory {
        parameters: 10,
        gradients: 10,
        optimizer_state: 20,
        activations: 5,
        source: MemorySource::PluginCount,
    };
    store.set_measured_memory(ids[0], &memory).unwrap();
    let row = store.task(ids[0]).unwrap().unwrap();
    assert_eq!(row.measured_memory, Some(memory));
    assert_eq!(row.measured_bytes, Some(45), "the total is the parts' sum");
    assert!(matches!(
        store.set_measured_memory(999, &memory),
        Err(StoreError::NoSuchTask(999))
    ));
    drop(store);
    {
        // What a version-3 host left behind: only the total.
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!("{DROP_V4} PRAGMA user_version = 3;"))
            .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    let old = store.task(ids[1]).unwrap().unwrap();
    assert_eq!((old.measured_bytes, old.measured_memory), (Some(777), None));
    assert_eq!(store.task(ids[0]).unwrap().unwrap().measured_memory, None);
}

#[test]
fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path()).unwrap());
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let newer = SCHEMA_VERSION + 1;
    let err = Store::open(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found,
                known: SCHEMA_VERSION,
                ..
            } if found == newer
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!(
            "has schema version {newer}, this host knows up to {SCHEMA_VERSION}"
        )),
        "{msg}"
    );
    assert!(msg.contains(DB_FILE), "{msg}");

    let err = Store::open_read_only(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { .. }), "{err:?}");
}

#[test]
fn concurrent_writers_from_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 4);
    let store = std::sync::Arc::new(store);
    let handles: Vec<_> = ids
        .iter()
        .map(|&t| {
            let store = store.clone();
            std::thread::spawn(move || {
                store.transition(t, TaskState::Running, "go").unwrap();
                for step in 1..=25u64 {
                    store
                        .record_progress(t, step, &[(s("loss"), 1.0 / step as f64)])
                        .unwrap();
                }
                store.transition(t, TaskState::Completed, "done").unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for &t in &ids {
        let row = store.task(t).unwrap().unwrap();
        assert_eq!(row.state, TaskState::Completed);
        assert_eq!(row.steps_done, 25);
        assert_eq!(store.metric_history(t, "loss").unwrap().len(), 25);
    }
}

#[test]
fn dispatches_are_leases_and_adopted_tasks_survive_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 3);
    for &t in &ids {
        store.transition(t, TaskState::Running, "started").unwrap();
    }
    let first = store.open_dispatch(ids[0], "slurm").unwrap();
    store
        .set_dispatch_submitted(first, "41", "--mem=512M")
        .unwrap();
    store.end_dispatch(first, "Slurm job 41 ended").unwrap();
    let second = store.open_dispatch(ids[0], "slurm").unwrap();
    store
        .set_dispatch_submitted(second, "42", "--gres=gpu:1 --mem=2048M")
        .unwrap();
    store.set_dispatch_node(second, "node7").unwrap();
    assert!(second > first, "a new attempt gets a new lease");
    assert!(matches!(
        store.open_dispatch(999, "slurm"),
        Err(StoreError::NoSuchTask(999))
    ));
    let open = store.open_dispatches().unwrap();
    assert_eq!(open.len(), 1);
    let row = &open[0];
    assert_eq!(
        (
            row.id,
            row.task_id,
            row.external_id.as_deref(),
            row.node.as_deref()
        ),
        (second, ids[0], Some("42"), Some("node7"))
    );
    assert_eq!(row.request.as_deref(), Some("--gres=gpu:1 --mem=2048M"));
    let ended = store.dispatch(first).unwrap().unwrap();
    assert_eq!(ended.end_reason.as_deref(), Some("Slurm job 41 ended"));
    // Ending twice keeps the first reason.
    store.end_dispatch(first, "again").unwrap();
    assert_eq!(
        store
            .dispatch(first)
            .unwrap()
            .unwrap()
            .end_reason
            .as_deref(),
        Some("Slurm job 41 ended")
    );
    assert_eq!(store.dispatches_of(ids[0]).unwrap().len(), 2);
    drop(store);

    // A restart that re-adopts task 0's worker interrupts only the others.
    let store = Store::open(dir.path()).unwrap();
    let recovered = store
        .recover_after_restart("host restarted", &[ids[0]])
        .unwrap();
    assert_eq!(recovered, vec![ids[1], ids[2]]);
    assert_eq!(
        store.task(ids[0]).unwrap().unwrap().state,
        TaskState::Running
    );
    assert_eq!(
        store.task(ids[1]).unwrap().unwrap().state,
        TaskState::Interrupted
    );
}

#[test]
fn a_version_4_store_gains_dispatches() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 1);
    drop(store);
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!(
            "{DROP_V7} DROP TABLE dispatches; DROP TABLE device_budgets; PRAGMA user_version = 4;"
        ))
        .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    assert!(store.open_dispatches().unwrap().is_empty());
    store.open_dispatch(ids[0], "slurm").unwrap();
}

#[test]
fn a_version_5_store_gains_device_budgets_and_keeps_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let (store, job, ids) = store_with_job(dir.path(), 1);
    store
        .record_progress(ids[0], 10, &[(s("loss"), 1.0)])
        .unwrap();
    let r = store
        .reserve(ids[0], tli_plugin_api::Device::Cpu, 1 << 20)
        .unwrap();
    store.release(r).unwrap();
    drop(store);
    {
        // What a version-5 host left behind: no budgets.
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!(
            "{DROP_V7} DROP TABLE device_budgets; PRAGMA user_version = 5;"
        ))
        .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    let query = tli_host::orchestrator::store::HistoryQuery::default();
    let history = store.job_history(job, &query).unwrap().unwrap();
    assert!(history.devices.iter().all(|d| d.budget.is_empty()));
    assert_eq!(history.tasks[0].series[0].steps, [10]);
    // Released reservations are kept: the memory timeline draws them.
    assert_eq!(store.reservation_timeline().unwrap().len(), 1);
    assert!(store
        .record_budget(tli_plugin_api::Device::Cpu, 1 << 30)
        .unwrap());
    assert!(!store
        .record_budget(tli_plugin_api::Device::Cpu, 1 << 30)
        .unwrap());
    let budget = store.budget_history("cpu", 0, i64::MAX).unwrap();
    assert_eq!(budget.len(), 1);
    assert_eq!(budget[0].bytes, 1 << 30);
}

#[test]
fn tasks_record_their_plugin_version_and_a_version_6_store_gains_the_columns() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 2);
    let row = store.task(ids[1]).unwrap().unwrap();
    assert_eq!(row.plugin_version.as_deref(), Some("1.1.0"));
    assert_eq!(row.plugin_checksum, Some(format!("{:064x}", 1)));
    store.set_task_plugin(ids[1], "1.2.0", "ab").unwrap();
    store.transition(ids[0], TaskState::Running, "go").unwrap();
    store.transition(ids[1], TaskState::Running, "go").unwrap();
    store
        .transition(ids[1], TaskState::Completed, "done")
        .unwrap();
    let mut usage = store.plugin_version_use().unwrap();
    usage.sort_by(|a, b| a.plugin.cmp(&b.plugin));
    let counts: Vec<(&str, &str, u64, u64)> = usage
        .iter()
        .map(|u| {
            (
                u.plugin.as_str(),
                u.version.as_str(),
                u.active_tasks,
                u.tasks,
            )
        })
        .collect();
    assert_eq!(
        counts,
        [("plugin-0", "0.1.0", 1, 1), ("plugin-1", "1.2.0", 0, 1)]
    );
    drop(store);
    {
        // What a version-6 host left behind: no plugin versions.
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!("{DROP_V7} PRAGMA user_version = 6;"))
            .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.pragmas().unwrap().user_version, SCHEMA_VERSION);
    let row = store.task(ids[0]).unwrap().unwrap();
    assert_eq!((row.plugin_version, row.plugin_checksum), (None, None));
    assert!(store.plugin_version_use().unwrap().is_empty());
}

#[test]
fn state_counts_cover_tasks_and_jobs_as_a_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _, a) = store_with_job(dir.path(), 3);
    let (_, b) = store.create_job("job-b", "{}", &[new_task(7)]).unwrap();
    let (_, c) = store
        .create_job("job-c", "{}", &[new_task(8), new_task(9)])
        .unwrap();
    store.transition(a[0], TaskState::Running, "go").unwrap();
    store.transition(b[0], TaskState::Running, "go").unwrap();
    store
        .transition(b[0], TaskState::Completed, "done")
        .unwrap();
    store.transition(c[0], TaskState::Running, "go").unwrap();
    store.transition(c[0], TaskState::Failed, "broke").unwrap();
    store
        .transition(c[1], TaskState::Cancelled, "stop")
        .unwrap();
    let mut tasks = store.task_state_counts().unwrap();
    tasks.sort();
    assert_eq!(
        tasks,
        vec![
            (s("cancelled"), 1),
            (s("completed"), 1),
            (s("failed"), 1),
            (s("queued"), 2),
            (s("running"), 1)
        ]
    );
    let mut jobs = store.job_state_counts().unwrap();
    jobs.sort();
    // job-a has a running task, job-b is done, job-c failed (failure wins over cancellation).
    assert_eq!(
        jobs,
        vec![(s("active"), 1), (s("completed"), 1), (s("failed"), 1)]
    );
}

/// Reads use connections of their own: a write that waits (here on another
/// connection's write lock, in life on its fsync) holds the writer, and a
/// read on another thread still finishes at once, seeing only what was
/// committed.
#[test]
fn a_read_does_not_wait_for_a_write_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _job, ids) = store_with_job(dir.path(), 1);
    let store = std::sync::Arc::new(store);
    let blocker = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();

    let writing = {
        let store = store.clone();
        let task = ids[0];
        // Waits for the write lock (busy timeout 10 s) while holding the writer.
        std::thread::spawn(move || store.set_steps_done(task, 7))
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        !writing.is_finished(),
        "the write should be waiting for the lock"
    );

    let reading = {
        let store = store.clone();
        let task = ids[0];
        std::thread::spawn(move || store.task(task))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !reading.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let read_finished_first = reading.is_finished() && !writing.is_finished();
    blocker.execute_batch("ROLLBACK").unwrap();
    writing
        .join()
        .unwrap()
        .expect("the write goes through once the lock is free");
    let row = reading.join().unwrap().unwrap().expect("the task");
    assert!(
        read_finished_first,
        "a read waited for a write in progress on another thread"
    );
    assert_eq!(row.steps_done, 0, "the read saw an uncommitted write");
    assert_eq!(store.task(ids[0]).unwrap().unwrap().steps_done, 7);
}
