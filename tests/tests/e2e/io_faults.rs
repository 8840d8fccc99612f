//! I/O faults (docs/reliability.md) against the real `tli host serve`: a disk
//! that fills up under the checkpoints (a small tmpfs), a file-size limit
//! (`ulimit -f`) and a state directory that is read-only. The rule of
//! `store/src/checkpoint/failures.rs` is followed (scheduled
//! writes may fail twice in a row, the third failure fails the task), the
//! last good checkpoint stays loadable, the store stays consistent, the host
//! stays up and answers, and `tli train resume` continues once space is back.
//!
//! Mounting needs root (as do the Slurm tests); elsewhere the mount tests
//! fail with what to do, or are skipped with `TLI_SKIP_MOUNT_TESTS=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tli_e2e_tests::*;
use tli_host::orchestrator::checkpoint;
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::Store;

/// A template model whose checkpoint is about 3.2 MB (parameters and Adam
/// state of hidden layers [512, 512]), checkpointed every 100 steps.
fn big_model_job(name: &str, steps: u64) -> String {
    format!(
        r#"{{"name":"{name}","models":[{{"plugin":"template","steps":{steps},
            "config":{{"hidden_sizes":[512,512]}}}}],
           "assets":[{{"synthetic":{{"rows":1500,"seed":1}}}}],
           "checkpoint":{{"every_steps":100,"keep":2}},"slice_steps":10}}"#
    )
}

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `8m`) at `dir`; `None` when the test
    /// is to be skipped (not root, and `TLI_SKIP_MOUNT_TESTS=1`).
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Tmpfs(dir.to_path_buf())),
            other => {
                if std::env::var_os("TLI_SKIP_MOUNT_TESTS").is_some() {
                    eprintln!("skipped: cannot mount a tmpfs ({other:?})");
                    return None;
                }
                panic!(
                    "cannot mount a tmpfs at {} ({other:?}): run the tests as root (as `make \
                     test` on CI does), or set TLI_SKIP_MOUNT_TESTS=1 to skip them",
                    dir.display()
                )
            }
        }
    }

    fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(status.success(), "remount {options} failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn start_job(server: &Server, dir: &Path, spec: &str) -> String {
    let path = dir.join("job.json");
    std::fs::write(&path, spec).unwrap();
    let started = ok_json(&server.client(&[
        "train",
        "start",
        "-o",
        "json",
        "--spec",
        path.to_str().unwrap(),
    ]));
    started["job_id"].as_u64().expect("job_id").to_string()
}

/// Waits until the job's only task reaches a terminal state; returns it.
fn wait_for_end(state: &Path, limit: Duration) -> tli_host::orchestrator::store::TaskRow {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(store) = Store::open_read_only(state) {
            if let Some(task) = store.tasks_in(&TaskState::ALL).unwrap().pop() {
                if matches!(
                    task.state,
                    TaskState::Completed | TaskState::Failed | TaskState::Cancelled
                ) {
                    return task;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "the task did not end in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The host still answers, and its store is consistent: every recorded
/// checkpoint verifies, and no temporary directory is left.
fn assert_host_up_and_checkpoints_good(server: &mut Server, state: &Path, job: &str) {
    assert!(server.child.try_wait().unwrap().is_none(), "the host died");
    let status = server.client(&["train", "status", job, "-o", "json"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let store = Store::open_read_only(state).unwrap();
    for task in store.tasks_in(&TaskState::ALL).unwrap() {
        for row in store.checkpoints(task.id).unwrap() {
            let sum = checkpoint::verify(Path::new(&row.path))
                .unwrap_or_else(|e| panic!("{} does not verify: {e}", row.path));
            assert_eq!(sum, row.checksum);
        }
        let root = state.join("checkpoints").join(format!("task-{}", task.id));
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                assert!(
                    !name.starts_with(".tmp"),
                    "temporary directory left: {name}"
                );
            }
        }
    }
}

#[test]
fn a_full_disk_fails_the_task_by_the_rule_refuses_requests_and_resume_continues_once_space_is_back()
{
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    // The store and the checkpoints on one small disk: room for two
    // checkpoints of ~3.2 MB and the store, not for a third checkpoint.
    let Some(disk) = Tmpfs::mount(&dir.path().join("disk"), "8m") else {
        return;
    };
    let state = dir.path().join("disk/state");
    let mut server = Server::start(
        plugins.path(),
        &state,
        &["--ui-listen", "off", "--no-tensorboard"],
    );
    let job = start_job(&server, dir.path(), &big_model_job("full-disk", 600));
    let task = wait_for_end(&state, Duration::from_secs(300));
    assert_eq!(task.state, TaskState::Failed);
    let error = task.error.clone().unwrap_or_default();
    for needle in [
        "No space left on device",
        "3 checkpoint writes in a row failed",
        "the last good checkpoint (step 200) is kept",
        &format!("`tli train resume {job}`"),
    ] {
        assert!(error.contains(needle), "{needle:?} not in {error:?}");
    }
    assert_eq!(
        task.steps_done, 500,
        "attempts at steps 300, 400 and 500 failed"
    );
    let store = Store::open_read_only(&state).unwrap();
    let transitions = store.transitions(task.id).unwrap();
    let goes_on = transitions
        .iter()
        .filter(|t| t.reason.contains("checkpoint failed; training goes on"))
        .count();
    assert_eq!(goes_on, 2, "{transitions:?}");
    let steps: Vec<u64> = store
        .checkpoints(task.id)
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, [200, 100]);
    drop(store);
    assert_host_up_and_checkpoints_good(&mut server, &state, &job);

    // The disk fills up completely: requests that write are refused with
    // RESOURCE_EXHAUSTED and change nothing; reads still work.
    let filler = dir.path().join("disk/filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", filler.display()))
        .output()
        .unwrap();
    for args in [
        vec!["train", "resume", job.as_str()],
        vec![
            "train",
            "start",
            "-p",
            "template",
            "-a",
            "synthetic:300:1",
            "--steps",
            "10",
        ],
    ] {
        let out = server.client(&args);
        assert!(!out.status.success(), "{args:?} succeeded on a full disk");
        let message = stderr(&out);
        assert!(
            message.contains("resource exhausted") || message.contains("resource_exhausted"),
            "{args:?}: {message}"
        );
        assert!(
            message.contains("disk of the state directory is full"),
            "{message}"
        );
    }
    let store = Store::open_read_only(&state).unwrap();
    assert_eq!(store.jobs().unwrap().len(), 1, "no job was added");
    assert_eq!(
        store.transitions(task.id).unwrap(),
        transitions,
        "nothing changed"
    );
    drop(store);
    assert_host_up_and_checkpoints_good(&mut server, &state, &job);

    // Space comes back: resume continues from the kept checkpoint and completes.
    std::fs::remove_file(&filler).unwrap();
    disk.remount("size=64m");
    let resumed = server.client(&["train", "resume", &job]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let task = wait_for_end(&state, Duration::from_secs(300));
    assert_eq!(task.state, TaskState::Completed, "{:?}", task.error);
    let store = Store::open_read_only(&state).unwrap();
    assert!(
        store
            .transitions(task.id)
            .unwrap()
            .iter()
            .any(|t| t.reason == "resumed from checkpoint step 200"),
        "resumed from the last good checkpoint"
    );
    drop(store);
    assert_host_up_and_checkpoints_good(&mut server, &state, &job);
}

#[test]
fn a_file_size_limit_fails_checkpoints_not_the_host() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // `ulimit -f 2048` (RLIMIT_FSIZE 2 MiB per file), set on the running
    // host: the store stays under it; each checkpoint's tensors (about
    // 3.2 MB) do not. Without the host ignoring SIGXFSZ the first checkpoint
    // would kill it (it did: exit 153, "File size limit exceeded").
    let mut server = Server::start(
        plugins.path(),
        &state,
        &["--ui-listen", "off", "--no-tensorboard"],
    );
    let limit = libc::rlimit {
        rlim_cur: 2 << 20,
        rlim_max: 2 << 20,
    };
    // SAFETY: prlimit on our own child with a valid limit and no old-limit out-pointer.
    let set = unsafe {
        libc::prlimit(
            server.child.id() as libc::pid_t,
            libc::RLIMIT_FSIZE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(set, 0, "prlimit: {}", std::io::Error::last_os_error());
    let job = start_job(&server, dir.path(), &big_model_job("file-size-limit", 400));
    let task = wait_for_end(&state, Duration::from_secs(300));
    assert_eq!(task.state, TaskState::Failed);
    let error = task.error.clone().unwrap_or_default();
    for needle in [
        "File too large",
        "3 checkpoint writes in a row failed",
        "there is no earlier checkpoint",
    ] {
        assert!(error.contains(needle), "{needle:?} not in {error:?}");
    }
    assert_eq!(task.steps_done, 300, "attempts at steps 100, 200 and 300");
    assert_host_up_and_checkpoints_good(&mut server, &state, &job);
    // A second job still runs on the same host.
    let small = start_job(
        &server,
        dir.path(),
        &big_model_job("small", 200).replace("[512,512]", "[8]"),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = ok_json(&server.client(&["train", "status", &small, "-o", "json"]));
        if status["progress"]["weighted_fraction"] == 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second job did not finish: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = server.terminate();
    assert!(took < Duration::from_secs(60));
}

#[test]
fn a_read_only_state_directory_is_refused_with_advice_and_can_still_be_read() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&dir.path().join("disk"), "16m") else {
        return;
    };
    let state = dir.path().join("disk/state");
    let spec = dir.path().join("job.json");
    std::fs::write(
        &spec,
        big_model_job("small", 100).replace("[512,512]", "[8]"),
    )
    .unwrap();
    let run = run_tli(
        plugins.path(),
        &[
            "host",
            "run",
            "--no-tensorboard",
            "--state-dir",
            state.to_str().unwrap(),
            "--submit",
            spec.to_str().unwrap(),
        ],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    disk.remount("ro");

    let state_arg = state.to_str().unwrap();
    for args in [
        vec![
            "host",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ui-listen",
            "off",
            "--state-dir",
            state_arg,
        ],
        vec!["host", "run", "--state-dir", state_arg],
    ] {
        let out = run_tli(plugins.path(), &args);
        let command = args[1];
        assert!(
            !out.status.success(),
            "host {command} started on a read-only state directory"
        );
        let message = stderr(&out);
        assert!(message.contains("Read-only file system"), "{message}");
        assert!(
            message.contains("needs a state directory it can write"),
            "{message}"
        );
    }
    // Reading needs no write: the finished job is there.
    let status = run_tli(
        plugins.path(),
        &[
            "host",
            "status",
            "--state-dir",
            state.to_str().unwrap(),
            "-o",
            "json",
        ],
    );
    assert!(status.status.success(), "{}", stderr(&status));
    let jobs = json(&status);
    assert_eq!(jobs[0]["weighted_fraction"], 1.0, "{jobs}");
}

#[test]
fn checkpoints_that_become_read_only_mid_run_fail_by_the_rule_and_resume_continues() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let Some(disk) = Tmpfs::mount(&state.join("checkpoints"), "16m") else {
        return;
    };
    let mut server = Server::start(
        plugins.path(),
        &state,
        &["--ui-listen", "off", "--no-tensorboard"],
    );
    let spec = big_model_job("read-only", 20_000)
        .replace("[512,512]", "[8]")
        .replace("\"slice_steps\":10", "\"slice_steps\":1");
    let job = start_job(&server, dir.path(), &spec);
    // Once a checkpoint is on disk, the checkpoint filesystem turns read-only
    // (a remount fails while a write holds a file open: try again).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let store = Store::open_read_only(&state).ok();
        let written = store
            .and_then(|s| s.tasks_in(&TaskState::ALL).ok().map(|t| (s, t)))
            .and_then(|(s, t)| t.first().and_then(|t| s.checkpoints(t.id).ok()))
            .is_some_and(|c| !c.is_empty());
        if written
            && Command::new("mount")
                .args(["-o", "remount,ro"])
                .arg(&disk.0)
                .status()
                .unwrap()
                .success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint, or no read-only remount"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let task = wait_for_end(&state, Duration::from_secs(300));
    assert_eq!(task.state, TaskState::Failed);
    let error = task.error.clone().unwrap_or_default();
    for needle in [
        "Read-only file system",
        "3 checkpoint writes in a row failed",
        "is kept",
    ] {
        assert!(error.contains(needle), "{needle:?} not in {error:?}");
    }
    assert_host_up_and_checkpoints_good(&mut server, &state, &job);
    let kept = Store::open_read_only(&state)
        .unwrap()
        .checkpoints(task.id)
        .unwrap()[0]
        .step;

    disk.remount("rw");
    let resumed = server.client(&["train", "resume", &job]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let task = wait_for_end(&state, Duration::from_secs(300));
    assert_eq!(task.state, TaskState::Completed, "{:?}", task.error);
    let store = Store::open_read_only(&state).unwrap();
    let resumed_from = format!("resumed from checkpoint step {kept}");
    assert!(
        store
            .transitions(task.id)
            .unwrap()
            .iter()
            .any(|t| t.reason == resumed_from),
        "resumed from the last good checkpoint (step {kept})"
    );
    drop(store);
    assert_host_up_and_checkpoints_good(&mut server, &state, &job);
}
