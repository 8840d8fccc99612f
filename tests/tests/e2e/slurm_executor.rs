//! The Slurm executor on a real single-node Slurm cluster (slurm-wlm +
//! munge, `scripts/slurm-cluster.sh`): a `tli host serve --executor slurm`
//! child submits each task as a Slurm job running `tli worker`, which
//! records everything through the host's worker service.
//!
//! Needs root and Slurm installed (`make test` installs it as root);
//! `TLI_SKIP_SLURM_TESTS=1` skips these tests elsewhere. One cluster at a
//! time: the tests take turns.

use std::path::{Path, PathBuf};
use std::time::Duration;
use tli_e2e_tests::slurm::{repo_root, SlurmCluster};
use tli_e2e_tests::{
    ok_json, run_tli, stderr, stdout, PluginDir, Server, BEHAVIOUR, DQN, TEMPLATE,
};
use tli_host::orchestrator::store::Store;

const SLURM_HOST: &[&str] = &["--executor", "slurm", "--slurm-cpus-per-task", "1"];

/// `tli host serve --executor slurm` on `cluster` with `plugins`, its state in
/// `work/host`, with `extra` host options. Bind the plugin dir first so it
/// outlives the server: `let (_plugins, state, server) = …`.
fn slurm_host(
    cluster: &SlurmCluster,
    work: &Path,
    plugins: &[(&str, &str)],
    extra: &[&str],
) -> (PluginDir, PathBuf, Server) {
    let plugins = PluginDir::with(plugins);
    let state = work.join("host");
    let (key, conf) = cluster.env();
    let mut args = SLURM_HOST.to_vec();
    args.extend_from_slice(extra);
    let server = Server::start_with(
        plugins.path(),
        &state,
        "127.0.0.1:0",
        &args,
        &[(key, &conf)],
    );
    (plugins, state, server)
}

fn sample(name: &str) -> String {
    repo_root()
        .join("data/samples")
        .join(name)
        .display()
        .to_string()
}

fn write_spec(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

fn job_of(started: &serde_json::Value) -> String {
    started["job_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no job_id in {started}"))
        .to_string()
}

fn status(server: &Server, job: &str) -> serde_json::Value {
    ok_json(&server.client(&["train", "status", job, "-o", "json"]))
}

/// (task id, state, steps done) of every task.
fn tasks(status: &serde_json::Value) -> Vec<(i64, String, u64)> {
    status["progress"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks in {status}"))
        .iter()
        .map(|t| {
            (
                t["task_id"].as_i64().unwrap(),
                t["state"].as_str().unwrap().to_string(),
                t["steps_done"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn all_in(server: &Server, job: &str, state: &str) -> bool {
    tasks(&status(server, job)).iter().all(|t| t.1 == state)
}

/// A task's dispatches (Slurm submissions), oldest first.
fn dispatches(state: &Path, task: i64) -> Vec<tli_host::orchestrator::store::DispatchRow> {
    Store::open_read_only(state)
        .unwrap()
        .dispatches_of(task)
        .unwrap()
}

/// The Slurm job id of a task's first dispatch.
fn first_job(state: &Path, task: i64) -> String {
    dispatches(state, task)[0]
        .external_id
        .clone()
        .expect("the first dispatch was submitted")
}

/// The reasons of a task's transitions, oldest first.
fn reasons(state: &Path, task: i64) -> Vec<String> {
    let store = Store::open_read_only(state).unwrap();
    store
        .transitions(task)
        .unwrap()
        .into_iter()
        .map(|t| format!("{}: {}", t.to.as_str(), t.reason))
        .collect()
}

/// A one-task job of 50 template steps on a small synthetic asset; its id.
fn start_short_template_job(server: &Server) -> String {
    job_of(&ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "template",
        "-a",
        "synthetic:300:1",
        "--steps",
        "50",
        "-o",
        "json",
    ])))
}

/// A long template task: ~10 s in a Slurm job, a checkpoint every 500 steps.
fn long_template_spec(dir: &Path, assets: usize) -> String {
    let all = [
        sample("es_proxy_sp500_1d.dbn.zst"),
        sample("nq_proxy_nasdaq_1d.dbn.zst"),
    ];
    let assets: Vec<String> = all[..assets]
        .iter()
        .map(|a| format!(r#"{{"data":"{a}"}}"#))
        .collect();
    write_spec(
        dir,
        "long",
        &format!(
            r#"{{"name":"long","models":[{{"plugin":"template","steps":20000}}],
                "assets":[{}],"seed":11,"slice_steps":20,"checkpoint":{{"every_steps":500}}}}"#,
            assets.join(",")
        ),
    )
}

#[test]
fn a_two_by_two_job_runs_as_four_slurm_jobs_watched_live_and_equals_the_local_run() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let plugins = PluginDir::with(&[(TEMPLATE, "template"), (DQN, "dqn")]);
    let work = tempfile::tempdir().unwrap();
    let spec = write_spec(
        work.path(),
        "two-by-two",
        &format!(
            r#"{{"name":"2x2","models":[
                {{"plugin":"template","steps":600}},
                {{"plugin":"dqn","steps":600,"config":{{"learning_starts":100,"train_frequency":8,
                  "gradient_steps":2,"buffer_size":2000}}}}],
              "assets":[{{"data":"{}"}},{{"data":"{}"}}],
              "seed":3,"slice_steps":10,"checkpoint":{{"every_steps":200}}}}"#,
            sample("es_proxy_sp500_1d.dbn.zst"),
            sample("nq_proxy_nasdaq_1d.dbn.zst")
        ),
    );
    let slurm_state = work.path().join("slurm-host");
    let (key, conf) = cluster.env();
    let server = Server::start_with(
        plugins.path(),
        &slurm_state,
        "127.0.0.1:0",
        SLURM_HOST,
        &[(key, &conf)],
    );
    let job = job_of(&ok_json(
        &server.client(&["train", "start", "--spec", &spec, "-o", "json"]),
    ));
    // Watched live, as a user would, until the job ends.
    let watch = std::process::Command::new("timeout")
        .arg("300")
        .arg(tli_e2e_tests::tli_binary())
        .args(["train", "watch", &job, "--interval-ms", "100", "-o", "json"])
        .args(["--endpoint", &server.endpoint()])
        .env("NO_COLOR", "1")
        .output()
        .expect("run tli train watch");
    assert!(watch.status.success(), "{}", stderr(&watch));
    let events: Vec<serde_json::Value> = stdout(&watch)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let completed = events
        .iter()
        .filter(|e| e["event"] == "state_changed" && e["to"] == "completed")
        .count();
    assert_eq!(
        completed,
        4,
        "every task completes ({} events)",
        events.len()
    );
    assert!(
        events.iter().any(|e| e["event"] == "progress"),
        "no live progress reached the watcher ({} events)",
        events.len()
    );
    // The DQN workers' log lines reach the host's log as its own tasks' do.
    let host_log = server.log.lock().unwrap().clone();
    assert!(
        host_log
            .lines()
            .any(|l| l.contains("DQN on") && l.contains("dqn")),
        "no DQN worker line in the host's log:\n{host_log}"
    );
    let final_status = status(&server, &job);
    assert!(
        tasks(&final_status)
            .iter()
            .all(|t| t.1 == "completed" && t.2 == 600),
        "{final_status}"
    );

    // Four Slurm jobs, one per task, named after it, each completed.
    let store = Store::open_read_only(&slurm_state).unwrap();
    let ended = cluster.ended_jobs();
    for (task, _, _) in tasks(&final_status) {
        let dispatches = store.dispatches_of(task).unwrap();
        assert_eq!(dispatches.len(), 1, "task {task}: {dispatches:?}");
        let slurm_job = dispatches[0].external_id.clone().expect("a Slurm job id");
        assert!(
            ended.iter().any(|(id, name, state)| id == &slurm_job
                && name == &format!("tli-task-{task}")
                && state == "COMPLETED"),
            "task {task} as Slurm job {slurm_job} in sacct -c: {ended:?}"
        );
        assert_eq!(
            dispatches[0].node.as_deref(),
            Some(tli_host::slurm::host_name().as_str())
        );
        // `train status` says where each task ran.
        let shown = final_status["progress"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task_id"] == task)
            .unwrap()["slurm"]
            .clone();
        assert_eq!(shown["job_id"], slurm_job.as_str(), "{shown}");
        assert_eq!(
            shown["node"],
            tli_host::slurm::host_name().as_str(),
            "{shown}"
        );
    }
    drop(store);
    // What each task's job used, from Slurm's accounting (here the job-completion log):
    // elapsed seconds × allocated CPUs, as sacct reports them.
    let accounted: std::collections::HashMap<String, f64> = cluster
        .run(
            "sacct",
            &["-c", "-n", "-P", "--format=JobID,ElapsedRaw,AllocCPUS"],
        )
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            let seconds = f.get(1)?.parse::<f64>().ok()? * f.get(2)?.parse::<f64>().ok()?;
            Some((f[0].to_string(), seconds))
        })
        .collect();
    cluster.wait_until(
        Duration::from_secs(30),
        "every task's Slurm usage is recorded",
        || {
            tasks(&status(&server, &job)).iter().all(|(task, _, _)| {
                Store::open_read_only(&slurm_state)
                    .unwrap()
                    .dispatches_of(*task)
                    .unwrap()[0]
                    .usage
                    .is_some()
            })
        },
    );
    let final_status = status(&server, &job);
    for t in final_status["progress"]["tasks"].as_array().unwrap() {
        let slurm = &t["slurm"];
        let id = slurm["job_id"].as_str().unwrap();
        assert_eq!(slurm["jobs"], 1, "{slurm}");
        assert_eq!(slurm["gpu_seconds"], 0.0, "a CPU task: {slurm}");
        assert_eq!(
            slurm["cpu_seconds"].as_f64(),
            Some(accounted[id]),
            "job {id}: {slurm} against sacct {accounted:?}"
        );
        assert!(accounted[id] >= 1.0, "{accounted:?}");
    }
    let table = stdout(&server.client(&["train", "status", &job]));
    assert!(table.contains("SLURM JOB"), "{table}");
    assert!(
        table.contains("1 Slurm job, 0.00 CPU-h, 0.00 GPU-h"),
        "{table}"
    );

    // The same job run locally (one thread, as the workers): identical final checkpoints.
    let (local_state, _) = run_locally(plugins.path(), work.path(), &spec);
    let differing = differing_final_checkpoints(&slurm_state, &local_state, 600);
    assert!(differing.is_empty(), "{differing:#?}");
}

/// Runs job spec `spec` in a local `tli host run` with one core (one
/// thread, as the workers); its state directory and wall seconds.
fn run_locally(plugins: &Path, work: &Path, spec: &str) -> (PathBuf, f64) {
    let state = work.join("local-host");
    let started = std::time::Instant::now();
    let local = run_tli(
        plugins,
        &[
            "host",
            "run",
            "--state-dir",
            state.to_str().unwrap(),
            "--cores",
            "1",
            "--submit",
            spec,
        ],
    );
    assert!(local.status.success(), "{}", stderr(&local));
    (state, started.elapsed().as_secs_f64())
}

/// The tasks of job 1 whose final checkpoint (at `steps`) differs between
/// the two state directories, file by file: "task 3 (dqn): model.safetensors".
fn differing_final_checkpoints(slurm: &Path, local: &Path, steps: u64) -> Vec<String> {
    let (slurm_store, local_store) = (
        Store::open_read_only(slurm).unwrap(),
        Store::open_read_only(local).unwrap(),
    );
    let mut differing = Vec::new();
    for (s, l) in slurm_store
        .tasks_of(1)
        .unwrap()
        .iter()
        .zip(&local_store.tasks_of(1).unwrap())
    {
        assert_eq!((&s.plugin, &s.asset, s.seed), (&l.plugin, &l.asset, l.seed));
        let (sc, lc) = (
            &slurm_store.checkpoints(s.id).unwrap()[0],
            &local_store.checkpoints(l.id).unwrap()[0],
        );
        assert_eq!((sc.step, lc.step), (steps, steps));
        for file in std::fs::read_dir(&lc.path).unwrap() {
            let name = file.unwrap().file_name();
            if std::fs::read(Path::new(&sc.path).join(&name)).unwrap()
                != std::fs::read(Path::new(&lc.path).join(&name)).unwrap()
            {
                differing.push(format!("task {} ({}): {name:?}", s.id, s.plugin));
            }
        }
    }
    differing
}

#[test]
fn scancel_of_a_worker_resumes_its_task_from_its_checkpoint_in_a_new_slurm_job() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (_plugins, state, server) =
        slurm_host(&cluster, work.path(), &[(TEMPLATE, "template")], &[]);
    let spec = long_template_spec(work.path(), 1);
    let job = job_of(&ok_json(
        &server.client(&["train", "start", "--spec", &spec, "-o", "json"]),
    ));
    cluster.wait_until(Duration::from_secs(60), "the task passes step 1000", || {
        tasks(&status(&server, &job))[0].2 > 1000
    });
    let task = tasks(&status(&server, &job))[0].0;
    let first = first_job(&state, task);
    cluster.run("scancel", &[&first]);
    let started = std::time::Instant::now();
    while !all_in(&server, &job, "completed") {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the task did not complete in 120 s after the scancel: {:?}\nhistory {:#?}\ndispatches {:#?}\nended {:?}\nlive {:?}\n{}",
            tasks(&status(&server, &job)),
            reasons(&state, task),
            dispatches(&state, task),
            cluster.ended_jobs(),
            cluster.live_jobs(),
            cluster.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let dispatches = dispatches(&state, task);
    assert_eq!(dispatches.len(), 2, "{dispatches:?}");
    assert_ne!(dispatches[1].external_id.as_deref(), Some(first.as_str()));
    let history = reasons(&state, task);
    let resumed = history
        .iter()
        .find_map(|r| r.strip_prefix("running: resumed from checkpoint step "))
        .unwrap_or_else(|| panic!("no resume in {history:#?}"));
    assert!(resumed.parse::<u64>().unwrap() >= 1000, "{history:#?}");
    assert!(
        history.iter().any(|r| r.starts_with("interrupted: Slurm")),
        "{history:#?}"
    );
    assert!(
        cluster
            .ended_jobs()
            .iter()
            .any(|(id, _, state)| id == &first && state.starts_with("CANCELLED")),
        "{:?}",
        cluster.ended_jobs()
    );
}

/// A worker still saving its signal checkpoint while Slurm shows its job
/// COMPLETING: the host waits for its report, the task resumes from that very
/// checkpoint (no step redone) and only then does a new job take the lease.
#[test]
fn a_worker_slow_to_save_after_scancel_keeps_its_signal_checkpoint() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (_plugins, state, server) =
        slurm_host(&cluster, work.path(), &[(BEHAVIOUR, "behaviour")], &[]);
    // No scheduled checkpoint: the signal's is the only one to resume from.
    let spec = write_spec(
        work.path(),
        "slow-save",
        r#"{"name":"slow-save","models":[{"plugin":"behaviour","steps":3000,
            "config":{"sleep_ms_per_step":2,"save_sleep_ms":5000}}],
            "assets":[{"synthetic":{"rows":300}}],"slice_steps":20,
            "checkpoint":{"every_steps":1000000}}"#,
    );
    let job = job_of(&ok_json(
        &server.client(&["train", "start", "--spec", &spec, "-o", "json"]),
    ));
    cluster.wait_until(Duration::from_secs(60), "the task passes step 300", || {
        tasks(&status(&server, &job))[0].2 > 300
    });
    let task = tasks(&status(&server, &job))[0].0;
    let first = first_job(&state, task);
    cluster.run("scancel", &[&first]);
    cluster.wait_until(
        Duration::from_secs(8),
        "Slurm shows the job COMPLETING",
        || {
            cluster
                .live_jobs()
                .iter()
                .any(|(id, _, state)| id == &first && state == "COMPLETING")
        },
    );
    cluster.wait_until(Duration::from_secs(120), "the task completes", || {
        all_in(&server, &job, "completed")
    });
    let history = reasons(&state, task);
    let signalled: u64 = history
        .iter()
        .find_map(|r| {
            r.strip_prefix(
                "checkpointing: pre-emption (Slurm is ending the job) checkpoint at step ",
            )
        })
        .unwrap_or_else(|| panic!("no signal checkpoint in {history:#?}"))
        .parse()
        .unwrap();
    let resumed: u64 = history
        .iter()
        .find_map(|r| r.strip_prefix("running: resumed from checkpoint step "))
        .unwrap_or_else(|| panic!("no resume in {history:#?}"))
        .parse()
        .unwrap();
    assert_eq!(resumed, signalled, "steps redone: {history:#?}");
    assert!(
        !history
            .iter()
            .any(|r| r.contains("without its worker reporting")),
        "{history:#?}"
    );
    let dispatches = dispatches(&state, task);
    assert_eq!(dispatches.len(), 2, "{dispatches:#?}");
    assert_eq!(
        dispatches[0].end_reason.as_deref(),
        Some("worker ended: Interrupted"),
        "{dispatches:#?}"
    );
    // The new job was submitted only after the first worker's report.
    assert!(
        dispatches[1].submitted_ms >= dispatches[0].ended_ms.unwrap(),
        "{dispatches:#?}"
    );
}

/// A controller restart is not a refusal: a job submitted while slurmctld
/// is down for a minute waits (its task stays queued, submissions back off)
/// and starts and completes once slurmctld is back.
#[test]
fn a_job_submitted_while_slurmctld_is_down_starts_when_it_returns() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (_plugins, state, server) =
        slurm_host(&cluster, work.path(), &[(TEMPLATE, "template")], &[]);
    cluster.stop_controller();
    let job = start_short_template_job(&server);
    let task = tasks(&status(&server, &job))[0].0;
    let down = std::time::Instant::now();
    let mut detail = String::new();
    while down.elapsed() < Duration::from_secs(60) {
        let now = status(&server, &job);
        assert_eq!(tasks(&now)[0].1, "queued", "{:#?}", reasons(&state, task));
        if let Some(d) = now["progress"]["tasks"][0]["detail"].as_str() {
            detail = d.to_string();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // What it waits for is in its status, not only in the host's log.
    assert!(
        detail.starts_with("waiting for Slurm: Slurm is not reachable now")
            && detail.contains("slurm controller"),
        "{detail:?}"
    );
    let table = stdout(&server.client(&["train", "status", &job]));
    assert!(
        table.contains(&format!("task {task}: waiting for Slurm")),
        "{table}"
    );
    let attempts = dispatches(&state, task);
    assert!(
        attempts.iter().any(|d| d
            .end_reason
            .as_deref()
            .is_some_and(|r| r.contains("not reachable now"))),
        "{attempts:#?}"
    );
    // Backing off: a few attempts in a minute, not one per scheduling round.
    assert!(attempts.len() <= 12, "{} attempts", attempts.len());
    cluster.start_controller();
    cluster.wait_until(Duration::from_secs(120), "the task completes", || {
        let now = tasks(&status(&server, &job))[0].1.clone();
        assert_ne!(now, "failed", "{:#?}", reasons(&state, task));
        now == "completed"
    });
}

/// A job cancelled by an administrator while it waits for resources says
/// nothing about the worker: three such cancels leave the task queued (it
/// is submitted again each time), and it completes once there is room.
#[test]
fn cancels_of_a_pending_job_leave_its_task_queued() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (_plugins, state, server) =
        slurm_host(&cluster, work.path(), &[(TEMPLATE, "template")], &[]);
    // Another user's job takes every CPU: tli's job pends.
    let blocker = cluster
        .run(
            "sbatch",
            &[
                "--parsable",
                "-c",
                "4",
                "--output=/dev/null",
                "--wrap",
                "sleep 300",
            ],
        )
        .trim()
        .to_string();
    cluster.wait_until(Duration::from_secs(20), "the blocker runs", || {
        cluster
            .live_jobs()
            .iter()
            .any(|(id, _, st)| id == &blocker && st == "RUNNING")
    });
    let job = start_short_template_job(&server);
    let task = tasks(&status(&server, &job))[0].0;
    let dispatches = || dispatches(&state, task);
    for cancel in 1..=3 {
        let mut pending = String::new();
        cluster.wait_until(
            Duration::from_secs(30),
            &format!("dispatch {cancel} pends in Slurm"),
            || {
                let Some(id) = dispatches()
                    .get(cancel - 1)
                    .and_then(|d| d.external_id.clone())
                else {
                    return false;
                };
                pending = id;
                cluster
                    .live_jobs()
                    .iter()
                    .any(|(id, _, st)| id == &pending && st == "PENDING")
            },
        );
        if cancel == 1 {
            cluster.wait_until(
                Duration::from_secs(10),
                "status says why the job waits",
                || {
                    status(&server, &job)["progress"]["tasks"][0]["detail"]
                        .as_str()
                        .is_some_and(|d| d.starts_with(&format!("Slurm job {pending} pending: ")))
                },
            );
        }
        cluster.run("scancel", &[&pending]);
    }
    cluster.wait_until(Duration::from_secs(30), "a fourth submission", || {
        dispatches().len() >= 4
    });
    assert_eq!(tasks(&status(&server, &job))[0].1, "queued");
    cluster.run("scancel", &[&blocker]);
    cluster.wait_until(Duration::from_secs(120), "the task completes", || {
        let now = tasks(&status(&server, &job))[0].1.clone();
        assert_ne!(now, "failed", "{:#?}", reasons(&state, task));
        now == "completed"
    });
    let ended: Vec<String> = dispatches()
        .iter()
        .take(3)
        .map(|d| d.end_reason.clone().unwrap_or_default())
        .collect();
    assert!(ended.iter().all(|r| r.contains("CANCELLED")), "{ended:?}");
}

/// A worker that cannot reach the host (a wrong --worker-url): its running
/// job is reported as such, given up after the attach timeout, and the task
/// fails after three such jobs, each cancelled, not after the worker's own
/// reconnect time.
#[test]
fn a_worker_that_cannot_reach_the_host_fails_its_task_within_the_attach_timeout() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (_plugins, state, server) = slurm_host(
        &cluster,
        work.path(),
        &[(TEMPLATE, "template")],
        // Port 1: nothing listens there.
        &[
            "--worker-url",
            "http://127.0.0.1:1",
            "--slurm-attach-timeout",
            "6",
        ],
    );
    let started = std::time::Instant::now();
    let job = start_short_template_job(&server);
    let task = tasks(&status(&server, &job))[0].0;
    cluster.wait_until(
        Duration::from_secs(30),
        "status says the job runs without its worker",
        || {
            status(&server, &job)["progress"]["tasks"][0]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("its worker has not reached the host yet"))
        },
    );
    cluster.wait_until(Duration::from_secs(90), "the task fails", || {
        tasks(&status(&server, &job))[0].1 == "failed"
    });
    let took = started.elapsed();
    let error = status(&server, &job)["progress"]["tasks"][0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.starts_with("3 Slurm jobs ended before their worker reached the host")
            && error.contains("ran for 6 s and its worker did not reach the host"),
        "{error}"
    );
    let attempts = dispatches(&state, task);
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    // Each job was cancelled, none left holding its allocation.
    cluster.wait_until(Duration::from_secs(20), "no job of the task lives", || {
        let live = cluster.live_jobs();
        attempts.iter().all(|d| {
            !live
                .iter()
                .any(|(id, _, _)| Some(id) == d.external_id.as_ref())
        })
    });
    eprintln!("failed {:.1} s after submission", took.as_secs_f64());
}

#[test]
fn a_host_killed_while_workers_run_re_adopts_them_after_a_restart() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (plugins, state, mut server) =
        slurm_host(&cluster, work.path(), &[(TEMPLATE, "template")], &[]);
    let spec = long_template_spec(work.path(), 2);
    let job = job_of(&ok_json(
        &server.client(&["train", "start", "--spec", &spec, "-o", "json"]),
    ));
    cluster.wait_until(Duration::from_secs(60), "both tasks run", || {
        tasks(&status(&server, &job)).iter().all(|t| t.2 > 200)
    });
    let address = server.address.clone();
    server.kill9();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        cluster
            .live_jobs()
            .iter()
            .filter(|j| j.1.starts_with("tli-task-"))
            .count(),
        2,
        "the workers outlive their host"
    );
    let (key, conf) = cluster.env();
    let server = Server::start_with(
        plugins.path(),
        &state,
        &address,
        SLURM_HOST,
        &[(key, &conf)],
    );
    cluster.wait_until(Duration::from_secs(120), "both tasks complete", || {
        all_in(&server, &job, "completed")
    });
    let log = server.log.lock().unwrap().clone();
    assert_eq!(log.matches("re-adopted Slurm job").count(), 2, "{log}");
    let store = Store::open_read_only(&state).unwrap();
    for (task, _, steps) in tasks(&status(&server, &job)) {
        assert_eq!(steps, 20000);
        assert_eq!(
            store.dispatches_of(task).unwrap().len(),
            1,
            "task {task} went on in its first Slurm job"
        );
        let history = reasons(&state, task);
        assert!(
            !history.iter().any(|r| r.starts_with("interrupted")),
            "{history:#?}"
        );
    }
}

#[test]
fn a_graceful_stop_checkpoints_the_task_and_cancels_its_slurm_job() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (_plugins, state, server) =
        slurm_host(&cluster, work.path(), &[(TEMPLATE, "template")], &[]);
    let spec = long_template_spec(work.path(), 1);
    let job = job_of(&ok_json(
        &server.client(&["train", "start", "--spec", &spec, "-o", "json"]),
    ));
    cluster.wait_until(Duration::from_secs(60), "the task passes step 700", || {
        tasks(&status(&server, &job))[0].2 > 700
    });
    let task = tasks(&status(&server, &job))[0].0;
    let stop = server.client(&["train", "stop", &job]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    cluster.wait_until(Duration::from_secs(60), "the task is cancelled", || {
        all_in(&server, &job, "cancelled")
    });
    let store = Store::open_read_only(&state).unwrap();
    let row = store.task(task).unwrap().unwrap();
    let newest = &store.checkpoints(task).unwrap()[0];
    assert_eq!(newest.step, row.steps_done, "checkpointed where it stopped");
    let slurm_job = store.dispatches_of(task).unwrap()[0]
        .external_id
        .clone()
        .unwrap();
    cluster.wait_until(Duration::from_secs(30), "the Slurm job ends", || {
        !cluster.live_jobs().iter().any(|j| j.0 == slurm_job)
    });
    assert!(
        cluster
            .ended_jobs()
            .iter()
            .any(|(id, _, state)| id == &slurm_job && state.starts_with("CANCELLED")),
        "{:?}",
        cluster.ended_jobs()
    );
}

#[test]
fn gres_requests_follow_the_estimate_and_slurm_refuses_too_many_gpus_with_its_reason() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    // Jobs wait an hour to start: their requests can be read while they pend.
    let (_plugins, state, server) = slurm_host(
        &cluster,
        work.path(),
        &[(TEMPLATE, "template")],
        &["--slurm-sbatch-arg=--begin=now+3600"],
    );
    let spec = |name: &str, device: &str, gpus: u32| {
        write_spec(
            work.path(),
            name,
            &format!(
                r#"{{"name":"{name}","models":[{{"plugin":"template","steps":100,
                    "config":{{"hidden_sizes":[512,512]}}}}],
                    "assets":[{{"synthetic":{{"rows":2000}}}}],"device":"{device}",
                    "slurm":{{"gpus_per_task":{gpus}}}}}"#
            ),
        )
    };
    let mut pending = Vec::new();
    for (name, device, gpus) in [
        ("cpu", "cpu", 1),
        ("one-gpu", "cuda:0", 1),
        ("two-gpus", "cuda:0", 2),
    ] {
        let job = job_of(&ok_json(&server.client(&[
            "train",
            "start",
            "--spec",
            &spec(name, device, gpus),
            "-o",
            "json",
        ])));
        let task = tasks(&status(&server, &job))[0].0;
        let store_path = state.clone();
        let mut slurm_job = String::new();
        cluster.wait_until(Duration::from_secs(30), "the task is submitted", || {
            let store = Store::open_read_only(&store_path).unwrap();
            match store
                .dispatches_of(task)
                .unwrap()
                .first()
                .and_then(|d| d.external_id.clone())
            {
                Some(id) => {
                    slurm_job = id;
                    true
                }
                None => false,
            }
        });
        let store = Store::open_read_only(&state).unwrap();
        let row = store.task(task).unwrap().unwrap();
        let request = store.dispatches_of(task).unwrap()[0]
            .request
            .clone()
            .unwrap();
        let fields = cluster.job_fields(&slurm_job);
        // What Slurm holds is what tli asked for.
        let mem_arg = request
            .split_whitespace()
            .find_map(|a| a.strip_prefix("--mem="))
            .unwrap_or_else(|| panic!("no --mem in {request}"));
        assert_eq!(
            fields.get("MinMemoryNode").map(String::as_str),
            Some(mem_arg),
            "{fields:?}"
        );
        let mem_mib: u64 = mem_arg.trim_end_matches('M').parse().unwrap();
        if device == "cpu" {
            // The estimate with the 10% margin, plus the worker's runtime and data.
            let least = (row.estimate_bytes as f64 * 1.1 / (1 << 20) as f64) as u64;
            assert!(
                mem_mib >= least + 512,
                "{mem_mib} MiB for estimate {} B",
                row.estimate_bytes
            );
            assert!(
                !fields.get("TresPerNode").is_some_and(|t| t.contains("gpu")),
                "{fields:?}"
            );
        } else {
            assert_eq!(
                fields.get("TresPerNode").map(String::as_str),
                Some(format!("gres:gpu:{gpus}").as_str()),
                "{fields:?}"
            );
            assert!(
                mem_mib >= 2048,
                "host memory for a CUDA worker: {mem_mib} MiB"
            );
        }
        assert_eq!(fields.get("JobState").map(String::as_str), Some("PENDING"));
        pending.push(job);
    }
    // Three GPUs on a node with two: Slurm refuses, and says why.
    let job = job_of(&ok_json(&server.client(&[
        "train",
        "start",
        "--spec",
        &spec("three-gpus", "cuda:0", 3),
        "-o",
        "json",
    ])));
    cluster.wait_until(Duration::from_secs(30), "the task fails", || {
        all_in(&server, &job, "failed")
    });
    let failed = status(&server, &job);
    let error = failed["progress"]["tasks"][0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("Slurm refused the job")
            && error.contains("Requested node configuration is not available"),
        "{error}"
    );
    // Stopping a task whose Slurm job pends cancels the Slurm job.
    for job in &pending {
        let stop = server.client(&["train", "stop", job]);
        assert!(stop.status.success(), "{}", stderr(&stop));
        assert!(all_in(&server, job, "cancelled"));
    }
    // Defect seen here: a scheduling round between the Slurm job's cancel and
    // the task's cancelled state submitted the task again.
    std::thread::sleep(Duration::from_millis(500));
    let store = Store::open_read_only(&state).unwrap();
    for job in &pending {
        let task = tasks(&status(&server, job))[0].0;
        let dispatches = store.dispatches_of(task).unwrap();
        assert_eq!(dispatches.len(), 1, "task {task}: {dispatches:?}");
    }
    cluster.wait_until(
        Duration::from_secs(30),
        "no tli job is left in Slurm",
        || {
            !cluster
                .live_jobs()
                .iter()
                .any(|j| j.1.starts_with("tli-task-"))
        },
    );
}

#[test]
fn a_task_near_its_time_limit_checkpoints_and_goes_on_in_a_new_slurm_job() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    // A one-minute limit, signalled 45 s before it: Slurm's signal comes after
    // about 15 s (its timing is coarse, tens of seconds).
    let (_plugins, state, server) = slurm_host(
        &cluster,
        work.path(),
        &[(TEMPLATE, "template")],
        &["--slurm-signal-seconds", "45"],
    );
    let spec = write_spec(
        work.path(),
        "time-limit",
        &format!(
            r#"{{"name":"time-limit","models":[{{"plugin":"template","steps":400000}}],
                "assets":[{{"data":"{}"}}],"slice_steps":20,
                "checkpoint":{{"every_seconds":3600}},"slurm":{{"time_limit_minutes":1}}}}"#,
            sample("es_proxy_sp500_1d.dbn.zst")
        ),
    );
    let job = job_of(&ok_json(
        &server.client(&["train", "start", "--spec", &spec, "-o", "json"]),
    ));
    let task = tasks(&status(&server, &job))[0].0;
    cluster.wait_until(
        Duration::from_secs(150),
        "a second Slurm job resumes the task",
        || {
            let history = reasons(&state, task);
            history
                .iter()
                .any(|r| r.starts_with("running: resumed from checkpoint step"))
        },
    );
    let history = reasons(&state, task);
    let signalled = history
        .iter()
        .position(|r| r.starts_with("checkpointing: pre-emption"))
        .unwrap_or_else(|| panic!("no pre-emption checkpoint in {history:#?}"));
    assert!(
        history[signalled + 1].starts_with("interrupted: Slurm is ending its job"),
        "{history:#?}"
    );
    let request = Store::open_read_only(&state)
        .unwrap()
        .dispatches_of(task)
        .unwrap()[0]
        .request
        .clone()
        .unwrap();
    assert!(
        request.contains("--time=1") && request.contains("--signal=B:USR1@45"),
        "{request}"
    );
    // No need to wait for the end: stopping cancels the second job.
    let stop = server.client(&["train", "stop", &job]);
    assert!(stop.status.success(), "{}", stderr(&stop));
}

#[test]
fn a_worker_without_the_hosts_plugin_fails_its_task_with_the_reason() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let empty = work.path().join("node-plugins");
    std::fs::create_dir_all(&empty).unwrap();
    let empty_arg = format!("--worker-plugin-dir={}", empty.display());
    let (_plugins, _state, server) = slurm_host(
        &cluster,
        work.path(),
        &[(TEMPLATE, "template")],
        &[&empty_arg],
    );
    let job = start_short_template_job(&server);
    cluster.wait_until(Duration::from_secs(60), "the task fails", || {
        all_in(&server, &job, "failed")
    });
    let failed = status(&server, &job);
    let error = failed["progress"]["tasks"][0]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("plugin template is not in this worker's plugin directory")
            && error.contains("install it on every node"),
        "{error}"
    );
}

#[test]
fn a_forced_stop_and_a_host_shutdown_reach_the_workers() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (plugins, state, mut server) =
        slurm_host(&cluster, work.path(), &[(TEMPLATE, "template")], &[]);
    let spec = long_template_spec(work.path(), 2);
    let job = job_of(&ok_json(
        &server.client(&["train", "start", "--spec", &spec, "-o", "json"]),
    ));
    cluster.wait_until(Duration::from_secs(60), "both tasks run", || {
        tasks(&status(&server, &job)).iter().all(|t| t.2 > 600)
    });
    let ids: Vec<i64> = tasks(&status(&server, &job)).iter().map(|t| t.0).collect();
    // Forced: the plugin returns at once, no checkpoint, the Slurm job is cancelled.
    let stop = server.client(&[
        "train",
        "stop",
        &job,
        "--task",
        &ids[0].to_string(),
        "--force",
        "--deadline-ms",
        "5000",
    ]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    cluster.wait_until(
        Duration::from_secs(30),
        "the forced stop ends the task",
        || tasks(&status(&server, &job))[0].1 == "cancelled",
    );
    // No stop checkpoint. (Counting checkpoint rows instead raced routine
    // checkpoints: a new row is added before the oldest is pruned.)
    let history = reasons(&state, ids[0]);
    assert!(
        !history
            .iter()
            .any(|r| r.contains("stop requested checkpoint")),
        "{history:#?}"
    );
    let store = Store::open_read_only(&state).unwrap();
    let forced_job = store.dispatches_of(ids[0]).unwrap()[0]
        .external_id
        .clone()
        .unwrap();
    drop(store);
    cluster.wait_until(Duration::from_secs(30), "its Slurm job ends", || {
        !cluster.live_jobs().iter().any(|j| j.0 == forced_job)
    });
    // Host shutdown: the other worker checkpoints and its task is interrupted;
    // the next host resumes it in a new Slurm job.
    let address = server.address.clone();
    let took = server.terminate();
    assert!(took < Duration::from_secs(30), "shutdown took {took:?}");
    let history = reasons(&state, ids[1]);
    assert!(
        history
            .last()
            .is_some_and(|r| r.starts_with("interrupted: host shut down at step")),
        "{history:#?}"
    );
    let (key, conf) = cluster.env();
    let server = Server::start_with(
        plugins.path(),
        &state,
        &address,
        SLURM_HOST,
        &[(key, &conf)],
    );
    cluster.wait_until(
        Duration::from_secs(60),
        "a new Slurm job resumes it",
        || {
            reasons(&state, ids[1])
                .iter()
                .any(|r| r.starts_with("running: resumed from checkpoint step"))
        },
    );
    let dispatches = Store::open_read_only(&state)
        .unwrap()
        .dispatches_of(ids[1])
        .unwrap();
    assert_eq!(dispatches.len(), 2, "{dispatches:?}");
    let stop = server.client(&["train", "stop", &job]);
    assert!(stop.status.success(), "{}", stderr(&stop));
}

/// Also: a worker keeps the best checkpoint and stops early by the rules
/// the host sent it, and records both through the worker service.
#[test]
fn plugin_log_lines_of_a_worker_reach_the_watchers() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (_plugins, _state, server) =
        slurm_host(&cluster, work.path(), &[(BEHAVIOUR, "behaviour")], &[]);
    // A line every 20 steps for about 5 s: lines keep coming while the watcher is there.
    // Validations at 100, 200, …: the best at 300, then two without improvement.
    let job = job_of(&ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "--config",
        r#"{"sleep_ms_per_step":10,"log_every":20,"valid_every":100,
            "valid_curve":[5, 4, 3, 3.5, 3.6, 2]}"#,
        "-a",
        "synthetic:300:1",
        "--steps",
        "800",
        "--keep-best",
        "valid_loss",
        "--early-stopping",
        "valid_loss",
        "--patience",
        "2",
        "-o",
        "json",
    ])));
    let watch = std::process::Command::new("timeout")
        .arg("300")
        .arg(tli_e2e_tests::tli_binary())
        .args(["train", "watch", &job, "-o", "json"])
        .args(["--endpoint", &server.endpoint()])
        .env("NO_COLOR", "1")
        .output()
        .expect("run tli train watch");
    assert!(watch.status.success(), "{}", stderr(&watch));
    let lines: Vec<serde_json::Value> = stdout(&watch)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &serde_json::Value| e["event"] == "log")
        .collect();
    assert!(
        lines.iter().any(|l| l["plugin"] == "behaviour"
            && l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("behaviour reached step"))),
        "no worker log line reached the watcher: {lines:?}"
    );
    assert!(all_in(&server, &job, "completed"));
    let task = &status(&server, &job)["progress"]["tasks"][0];
    assert_eq!(task["steps_done"], 500, "{task}");
    assert_eq!(task["best"]["step"], 300, "{task}");
    assert!(
        task["stopped_early"]
            .as_str()
            .is_some_and(|r| r.starts_with("stopped early at step 500")),
        "{task}"
    );
}

/// An ASHA sweep with the Slurm executor: every trial a Slurm job whose
/// worker asks the host for its verdict at each rung (a trial ahead of the
/// ones before it parks, its Slurm job ends, and a new one goes on later);
/// the decisions are those of the local executor (the hand computation of
/// the sweeps tests: at step 10, 5 and 3 go on, 8 stops, 1 goes on).
#[test]
fn an_asha_sweep_runs_its_trials_as_slurm_jobs_with_the_same_decisions() {
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (_plugins, _state, server) =
        slurm_host(&cluster, work.path(), &[(BEHAVIOUR, "behaviour")], &[]);
    let out = server.client(&[
        "sweep",
        "start",
        "-p",
        "behaviour",
        "-a",
        "synthetic:200:1",
        "--config",
        r#"{"valid_every": 10, "sleep_ms_per_step": 5}"#,
        "--space",
        r#"{"valid_curve": {"grid": [[5, 6], [3, 9], [8], [1, 0.5]]}}"#,
        "--max-steps",
        "30",
        "--grace-period",
        "10",
        "--watch",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps: Vec<u64> = results["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["steps_done"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [30, 30, 10, 30], "{results}");
    assert_eq!(results["best"], serde_json::json!([3]), "{results}");
    assert_eq!(results["trials"][3]["final_value"], 0.5, "{results}");
    let status = status(&server, "1");
    assert!(
        status["progress"]["tasks"][2]["stopped_early"]
            .as_str()
            .is_some_and(|r| r.starts_with("stopped early by ASHA at rung 10")),
        "{status}"
    );
    // Each task ran in Slurm.
    assert!(
        status["progress"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["slurm"]["job_id"].as_str().is_some_and(|j| !j.is_empty())),
        "{status}"
    );
}

/// A storm of `scancel`s on a multi-task job: every signalled worker saves
/// its checkpoint, every task resumes from exactly where it stopped (no
/// step redone) and ends with the same checkpoint as a local run. CI runs a
/// small storm; `scripts/scancel-storm.sh` the large one of
/// docs/scale-out.md (TLI_SCANCEL_STORM_CANCELS, _SECONDS, _ASSETS, _STEPS).
#[test]
fn a_scancel_storm_redoes_no_step_and_ends_as_the_local_run() {
    let env = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let cancels = env("TLI_SCANCEL_STORM_CANCELS", 3);
    let seconds = env("TLI_SCANCEL_STORM_SECONDS", 9);
    let assets = env("TLI_SCANCEL_STORM_ASSETS", 1).clamp(1, 3) as usize;
    let steps = env("TLI_SCANCEL_STORM_STEPS", 60_000);
    let Some(cluster) = SlurmCluster::start(2, 4) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (plugins, state, server) =
        slurm_host(&cluster, work.path(), &[(TEMPLATE, "template")], &[]);
    let data: Vec<String> = [
        "es_proxy_sp500_1d.dbn.zst",
        "nq_proxy_nasdaq_1d.dbn.zst",
        "cl_proxy_wti_1d.dbn.zst",
    ][..assets]
        .iter()
        .map(|a| format!(r#"{{"data":"{}"}}"#, sample(a)))
        .collect();
    // Two models per asset, checkpoints far apart: only the signal's checkpoint avoids redoing.
    let spec = write_spec(
        work.path(),
        "storm",
        &format!(
            r#"{{"name":"storm","models":[{{"plugin":"template","steps":{steps}}},
                {{"plugin":"template","steps":{steps},"config":{{"learning_rate":0.003}}}}],
                "assets":[{}],"seed":5,"slice_steps":20,"checkpoint":{{"every_steps":10000}}}}"#,
            data.join(",")
        ),
    );
    let wall = std::time::Instant::now();
    let job = job_of(&ok_json(
        &server.client(&["train", "start", "--spec", &spec, "-o", "json"]),
    ));
    let ids: Vec<i64> = tasks(&status(&server, &job)).iter().map(|t| t.0).collect();
    let names: Vec<String> = ids.iter().map(|t| format!("tli-task-{t}")).collect();
    // The storm: `cancels` scancels evenly over `seconds`, each of a running
    // task job chosen by a fixed sequence.
    let mut pick: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut done = 0;
    let storm = std::time::Instant::now();
    while done < cancels {
        let due = Duration::from_secs_f64(seconds as f64 * done as f64 / cancels as f64);
        if storm.elapsed() < due {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let running: Vec<String> = cluster
            .live_jobs()
            .into_iter()
            .filter(|(_, name, st)| names.contains(name) && st == "RUNNING")
            .map(|(id, _, _)| id)
            .collect();
        if running.is_empty() {
            assert!(
                !all_in(&server, &job, "completed"),
                "the tasks completed after {done} cancels: make them longer"
            );
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        pick = pick
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        cluster.run(
            "scancel",
            &[&running[(pick >> 33) as usize % running.len()]],
        );
        done += 1;
    }
    let storm_seconds = storm.elapsed().as_secs_f64();
    cluster.wait_until(Duration::from_secs(600), "every task completes", || {
        let now = tasks(&status(&server, &job));
        assert!(
            now.iter().all(|t| t.1 != "failed"),
            "{now:?}: {:#?}",
            now.iter().map(|t| reasons(&state, t.0)).collect::<Vec<_>>()
        );
        now.iter().all(|t| t.1 == "completed")
    });
    let slurm_wall = wall.elapsed().as_secs_f64();
    // Steps redone: for every resume, the step its previous attempt reached
    // (the worker's "at step N") less the checkpoint step it resumed from.
    let step_after = |text: &str, prefix: &str| -> Option<u64> {
        let at = text.find(prefix)? + prefix.len();
        text[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let (mut resumes, mut redone, mut unreported, mut jobs) = (0, 0, 0, 0);
    for task in &ids {
        let history = reasons(&state, *task);
        jobs += dispatches(&state, *task).len();
        let mut reached: Option<u64> = None;
        for r in &history {
            if r.starts_with("interrupted: ") {
                reached = step_after(r, " at step ");
                if reached.is_none() {
                    unreported += 1;
                }
            }
            if let Some(from) = step_after(r, "running: resumed from checkpoint step ") {
                resumes += 1;
                if let Some(n) = reached.take() {
                    assert!(n >= from, "task {task}: {history:#?}");
                    redone += n - from;
                }
            }
        }
    }
    drop(server);
    let (local_state, local_wall) = run_locally(plugins.path(), work.path(), &spec);
    let differing = differing_final_checkpoints(&state, &local_state, steps);
    let unequal: std::collections::BTreeSet<&str> = differing
        .iter()
        .filter_map(|d| d.split(" (").next())
        .collect();
    let equal = ids.len() - unequal.len();
    eprintln!(
        "scancel storm: {} tasks, {cancels} cancels in {storm_seconds:.1} s, {jobs} Slurm jobs, \
         {resumes} resumes, {redone} steps redone, {unreported} interruptions unreported, final \
         checkpoints equal to the local run: {equal}/{}; wall {slurm_wall:.0} s on Slurm, \
         {local_wall:.0} s locally (1 thread, one task at a time)",
        ids.len(),
        ids.len()
    );
    assert_eq!(redone, 0, "steps redone");
    assert_eq!(unreported, 0, "interruptions without the worker's report");
    assert!(
        resumes as u64 >= cancels.min(1),
        "no resume after {cancels} cancels"
    );
    assert_eq!(
        equal,
        ids.len(),
        "final checkpoints differ from the local run"
    );
}
