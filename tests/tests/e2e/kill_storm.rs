//! Kill storm (docs/reliability.md): a real `tli host serve` running a
//! multi-model, multi-asset job is SIGKILLed again and again at random
//! moments — half of them aimed at checkpoint writes in progress — and
//! restarted on the same state directory each time, while a client keeps
//! submitting jobs. At the end:
//!
//! - every job whose submission was acknowledged exists, and every task of
//!   every job completed all its steps;
//! - no transition the store ever showed after a kill went missing later (each
//!   snapshot is a prefix of the final history), and every task's chain of
//!   transitions is unbroken (each `from` is the previous `to`);
//! - no checkpoint was ever refused on resume (a torn write that had been
//!   recorded would be), every checkpoint left verifies against its manifest,
//!   and no temporary checkpoint directory is left behind;
//! - the final checkpoint of every task is bit-identical (same manifest
//!   checksum) to that of an uninterrupted run of the same job.
//!
//! CI runs 12 kills. `scripts/kill-storm.sh` runs the long version:
//! `TLI_KILL_STORM_KILLS` (default 12) and `TLI_KILL_STORM_SEED` (default 1)
//! choose the storm; the figures are printed as one `kill storm:` line.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tli_e2e_tests::*;
use tli_host::orchestrator::checkpoint;
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::Store;

/// Three deterministic model families × two assets; checkpoints every 50
/// steps (keep 2) so that many kills land in or near a checkpoint write.
const JOB: &str = r#"{"name":"storm","models":[
    {"plugin":"template","steps":3000,"config":{"hidden_sizes":[16]}},
    {"plugin":"dqn","steps":2000},
    {"plugin":"ppo","steps":1536}],
  "assets":[{"synthetic":{"rows":1500,"seed":1}},{"synthetic":{"rows":1500,"seed":2}}],
  "checkpoint":{"every_steps":50,"keep":2},"slice_steps":10}"#;

/// Jobs kept unfinished during the storm, so that kills hit training.
const UNFINISHED_JOBS: usize = 2;

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

/// SplitMix64: a seeded source of kill moments (no dependency needed).
struct Moments(u64);

impl Moments {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default, Debug)]
struct Figures {
    kills: usize,
    kills_mid_training: usize,
    kills_mid_checkpoint_write: usize,
    kills_mid_submission: usize,
    submissions_acknowledged: usize,
    jobs: usize,
    tasks: usize,
    resumes: usize,
    transitions: usize,
    lost: usize,
}

#[test]
fn a_storm_of_sigkills_loses_nothing_and_ends_bit_identical() {
    let kills = env_number("TLI_KILL_STORM_KILLS", 12) as usize;
    let mut moments = Moments(env_number("TLI_KILL_STORM_SEED", 1));
    let plugins = PluginDir::with(&[(TEMPLATE, "template"), (DQN, "dqn"), (PPO, "ppo")]);
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.json");
    std::fs::write(&spec, JOB).unwrap();

    let reference = uninterrupted_checksums(plugins.path(), &dir.path().join("reference"), &spec);
    let state = dir.path().join("storm");
    let started = Instant::now();
    let mut figures = Figures::default();
    let mut acknowledged: HashSet<i64> = HashSet::new();
    let mut seen: BTreeMap<i64, Vec<(i64, TaskState, String)>> = BTreeMap::new();

    for kill in 0..kills {
        let unfinished = unfinished_jobs(&state);
        let left_before: HashSet<PathBuf> = temporary_checkpoints(&state).into_iter().collect();
        let new_write = |state: &Path| {
            temporary_checkpoints(state)
                .iter()
                .any(|p| !left_before.contains(p))
        };
        let mut server = Server::start(
            plugins.path(),
            &state,
            &["--ui-listen", "off", "--no-tensorboard"],
        );
        // Submissions race the kill: one acknowledged must never be lost.
        let submission = (unfinished < UNFINISHED_JOBS).then(|| {
            let endpoint = server.endpoint();
            let spec = spec.clone();
            std::thread::spawn(move || submit(&endpoint, &spec))
        });
        if kill % 2 == 0 {
            std::thread::sleep(Duration::from_millis(moments.below(1500)));
        } else {
            // Aimed: kill as soon as a checkpoint is being written (or after 2 s).
            let until = Instant::now() + Duration::from_millis(2000);
            while Instant::now() < until && !new_write(&state) {
                std::thread::yield_now();
            }
        }
        server.kill9();
        figures.kills += 1;
        if let Some(handle) = submission {
            match handle.join().unwrap() {
                Some(job) => {
                    acknowledged.insert(job);
                }
                None => figures.kills_mid_submission += 1,
            }
        }

        if new_write(&state) {
            figures.kills_mid_checkpoint_write += 1;
        }
        let store = Store::open_read_only(&state).expect("the store opens after a kill");
        let live = store
            .tasks_in(&[TaskState::Running, TaskState::Checkpointing])
            .unwrap();
        if !live.is_empty() {
            figures.kills_mid_training += 1;
        }
        let jobs: HashSet<i64> = store.jobs().unwrap().iter().map(|j| j.id).collect();
        for job in &acknowledged {
            assert!(
                jobs.contains(job),
                "kill {kill}: acknowledged job {job} is gone"
            );
        }
        check_history_kept(&store, &mut seen, &format!("after kill {kill}"));
    }
    figures.submissions_acknowledged = acknowledged.len();

    // The last start runs everything to completion.
    let server = Server::start(
        plugins.path(),
        &state,
        &["--ui-listen", "off", "--no-tensorboard"],
    );
    wait_until_all_done(&state, Duration::from_secs(600));
    drop(server);

    let store = Store::open_read_only(&state).unwrap();
    check_history_kept(&store, &mut seen, "at the end");
    let jobs = store.jobs().unwrap();
    figures.lost = acknowledged
        .iter()
        .filter(|job| !jobs.iter().any(|j| j.id == **job))
        .count();
    assert_eq!(figures.lost, 0, "acknowledged jobs lost: {figures:?}");
    figures.jobs = jobs.len();
    for job in &jobs {
        for task in store.tasks_of(job.id).unwrap() {
            figures.tasks += 1;
            let label = format!("job {} task {} ({})", job.id, task.id, task.plugin);
            assert_eq!(task.state, TaskState::Completed, "{label}");
            assert_eq!(task.steps_done, task.total_steps, "{label}");
            let transitions = store.transitions(task.id).unwrap();
            figures.transitions += transitions.len();
            assert_eq!(transitions[0].from, None, "{label}");
            assert_eq!(transitions[0].to, TaskState::Queued, "{label}");
            for pair in transitions.windows(2) {
                assert_eq!(
                    pair[1].from,
                    Some(pair[0].to),
                    "{label}: the chain of transitions is broken: {pair:?}"
                );
            }
            for t in &transitions {
                assert!(
                    !t.reason.contains("refused"),
                    "{label}: a checkpoint was refused on resume: {}",
                    t.reason
                );
                if t.reason.starts_with("resumed from checkpoint") {
                    figures.resumes += 1;
                }
            }
            let rows = store.checkpoints(task.id).unwrap();
            for row in &rows {
                let checksum = checkpoint::verify(Path::new(&row.path))
                    .unwrap_or_else(|e| panic!("{label}: {} does not verify: {e}", row.path));
                assert_eq!(checksum, row.checksum, "{label}: {}", row.path);
            }
            let last = rows.first().expect("a final checkpoint");
            assert_eq!(last.step, task.total_steps, "{label}");
            assert_eq!(
                Some(&last.checksum),
                reference.get(&task.ordinal),
                "{label}: the final weights differ from the uninterrupted run's"
            );
        }
    }
    assert!(
        temporary_checkpoints(&state).is_empty(),
        "temporary checkpoint directories left: {:?}",
        temporary_checkpoints(&state)
    );
    assert!(store.open_reservations().unwrap().is_empty());
    assert!(
        figures.kills_mid_training * 2 >= figures.kills,
        "most kills should land while tasks train: {figures:?}"
    );
    assert!(
        figures.resumes > 0,
        "no task ever resumed from a checkpoint: {figures:?}"
    );
    println!(
        "kill storm: {} kills ({} while tasks trained, {} during a checkpoint write, {} during a \
         submission), {} submissions acknowledged, {} jobs, {} tasks completed, {} resumes from \
         checkpoints, {} transitions, lost {}, final checkpoints bit-identical to the \
         uninterrupted run: {}/{}, {:.0} s",
        figures.kills,
        figures.kills_mid_training,
        figures.kills_mid_checkpoint_write,
        figures.kills_mid_submission,
        figures.submissions_acknowledged,
        figures.jobs,
        figures.tasks,
        figures.resumes,
        figures.transitions,
        figures.lost,
        figures.tasks,
        figures.tasks,
        started.elapsed().as_secs_f64()
    );
}

/// The final checkpoint checksum of each task ordinal, from an uninterrupted
/// `tli host run` of the job.
fn uninterrupted_checksums(plugins: &Path, state: &Path, spec: &Path) -> BTreeMap<u32, String> {
    let out = Command::new(tli_binary())
        .args(["host", "run", "--no-tensorboard", "--state-dir"])
        .arg(state)
        .arg("--submit")
        .arg(spec)
        .env("TLI_PLUGIN_DIR", plugins)
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let store = Store::open_read_only(state).unwrap();
    let job = store.jobs().unwrap()[0].id;
    store
        .tasks_of(job)
        .unwrap()
        .into_iter()
        .map(|t| {
            assert_eq!(t.state, TaskState::Completed);
            let last = store.checkpoints(t.id).unwrap().remove(0);
            (t.ordinal, last.checksum)
        })
        .collect()
}

/// `tli train start --spec`; the job id if the host acknowledged it.
fn submit(endpoint: &str, spec: &Path) -> Option<i64> {
    let out = Command::new(tli_binary())
        .args([
            "train",
            "start",
            "-o",
            "json",
            "--endpoint",
            endpoint,
            "--spec",
        ])
        .arg(spec)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("TLI_TOKEN")
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    reply["job_id"].as_i64()
}

/// Jobs with a task not yet completed (0 before the store exists).
fn unfinished_jobs(state: &Path) -> usize {
    let Ok(store) = Store::open_read_only(state) else {
        return 0;
    };
    store
        .jobs()
        .unwrap()
        .iter()
        .filter(|j| {
            store
                .tasks_of(j.id)
                .unwrap()
                .iter()
                .any(|t| t.state != TaskState::Completed)
        })
        .count()
}

/// Temporary directories of checkpoint writes under every task's root.
fn temporary_checkpoints(state: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(tasks) = std::fs::read_dir(state.join("checkpoints")) else {
        return found;
    };
    for task in tasks.flatten() {
        let Ok(entries) = std::fs::read_dir(task.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(".tmp") {
                found.push(entry.path());
            }
        }
    }
    found
}

/// Every transition seen before is still there, in the same order: each
/// earlier snapshot of a task's history is a prefix of the current one.
fn check_history_kept(
    store: &Store,
    seen: &mut BTreeMap<i64, Vec<(i64, TaskState, String)>>,
    when: &str,
) {
    for job in store.jobs().unwrap() {
        for task in store.tasks_of(job.id).unwrap() {
            let now: Vec<(i64, TaskState, String)> = store
                .transitions(task.id)
                .unwrap()
                .into_iter()
                .map(|t| (t.id, t.to, t.reason))
                .collect();
            let before = seen.entry(task.id).or_default();
            assert!(
                now.starts_with(before),
                "{when}: task {} lost transitions: had {before:?}, now {now:?}",
                task.id
            );
            *before = now;
        }
    }
}

fn wait_until_all_done(state: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let store = Store::open_read_only(state).unwrap();
        let open = store
            .tasks_in(&[
                TaskState::Queued,
                TaskState::Running,
                TaskState::Checkpointing,
                TaskState::Interrupted,
            ])
            .unwrap();
        if open.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "tasks still open after {limit:?}: {:?}",
            open.iter().map(|t| (t.id, t.state)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
