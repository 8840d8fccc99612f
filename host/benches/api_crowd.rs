//! A crowd on the gRPC API (the reliability suite, docs/reliability.md; run with `cargo bench -p
//! tli-host --bench api_crowd` after `cargo build --release --workspace`).
//!
//! A real `tli host serve` (the binary, its own process, strategy
//! `sequential`) is given 1,000 queued template tasks (10 jobs × 100 assets,
//! a billion steps each, so they stay queued while the first trains). Then
//! `CLIENTS` (default 200) clients, each on a connection of its own, call it
//! at once for `SECONDS` (default 30), `ROUNDS` times (default 2), each call
//! picked at random: 45 % GetTrainingStatus of a random job, 25 %
//! ListTrainingJobs (a page of 50, every task of each job), 20 %
//! WatchTraining (the snapshot and one more message, then hang up), 10 %
//! StartTraining (one more 1-task job, which stays queued). The last
//! `STILL_ROUNDS` rounds (default 2) make no StartTraining calls (their share
//! goes to GetTrainingStatus), so the store stays as it is: there the host's
//! memory must level off.
//!
//! Reports every call's outcome by kind (any error is counted and printed;
//! there should be none), latency percentiles, and the host's resident
//! memory (`VmRSS` from `/proc/PID/status`, sampled every 250 ms) before,
//! during and after each round, with its threads and the tasks in the store.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tli_proto::v1 as pb;
use tli_proto::v1::training_service_client::TrainingServiceClient;
use tli_testkit::measure::{env_number, percentile, ProcessStatus};
use tli_testkit::{plugin_model, synthetic_asset, PluginDir, ServeProcess, TEMPLATE};
use tonic::transport::Channel;

const QUEUED_JOBS: u64 = 10;
const TASKS_PER_JOB: u64 = 100;
/// How long a watcher waits for a message before it counts an error (the
/// crowd overloads 2 cores on purpose: calls take seconds at the tail).
const WATCH_PATIENCE: Duration = Duration::from_secs(30);

/// `tli host serve` on a fresh state directory; returns it and its address.
fn start_host(plugins: &std::path::Path, state: &std::path::Path) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tli"));
    command
        .args(["host", "serve", "--listen", "127.0.0.1:0", "--strategy"])
        .args(["sequential", "--no-tensorboard", "--state-dir"])
        .arg(state)
        .env("TLI_PLUGIN_DIR", plugins)
        .env("NO_COLOR", "1");
    let host = ServeProcess::spawn(command, |_| false);
    (host.child, host.address)
}

/// The host's resident memory in bytes and its thread count.
fn host_memory(pid: u32) -> (u64, u64) {
    let status = ProcessStatus::of(pid);
    (status.rss_bytes, status.threads)
}

fn template_job(name: String, assets: Vec<pb::AssetSpec>) -> pb::StartTrainingRequest {
    pb::StartTrainingRequest {
        name,
        model: Some(plugin_model(
            "template",
            1_000_000_000,
            r#"{"hidden_sizes":[16],"batch_size":32}"#,
        )),
        assets,
        ..Default::default()
    }
}

#[derive(Default)]
struct Tally {
    latencies: BTreeMap<&'static str, Vec<f64>>,
    errors: BTreeMap<String, u64>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        for (kind, mut l) in other.latencies {
            self.latencies.entry(kind).or_default().append(&mut l);
        }
        for (e, n) in other.errors {
            *self.errors.entry(e).or_default() += n;
        }
    }
}

/// One client: random calls until `stop`.
async fn client(
    endpoint: String,
    seed: u64,
    stop: Arc<AtomicBool>,
    jobs: Arc<AtomicU64>,
    started: Arc<AtomicU64>,
    starts: bool,
) -> Tally {
    let mut tally = Tally::default();
    let mut c: TrainingServiceClient<Channel> = match TrainingServiceClient::connect(endpoint).await
    {
        Ok(c) => c,
        Err(e) => {
            tally.errors.insert(format!("connect: {e}"), 1);
            return tally;
        }
    };
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    while !stop.load(Ordering::Relaxed) {
        let pick = match next(100) {
            90.. if !starts => 0,
            p => p,
        };
        let job = 1 + next(jobs.load(Ordering::Relaxed));
        let t = Instant::now();
        let (kind, result): (&'static str, Result<(), tonic::Status>) = match pick {
            0..45 => (
                "status",
                c.get_training_status(pb::GetTrainingStatusRequest { job_id: job })
                    .await
                    .map(|_| ()),
            ),
            45..70 => (
                "list",
                c.list_training_jobs(pb::ListTrainingJobsRequest {
                    page_size: 50,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
            ),
            70..90 => ("watch", watch_briefly(&mut c, job).await),
            _ => {
                let n = started.fetch_add(1, Ordering::Relaxed);
                let request = template_job(format!("crowd-{n}"), vec![synthetic_asset(500, n)]);
                let result = c.start_training(request).await.map(|response| {
                    // The host's id for it: the jobs up to it may be asked about now
                    // (a counter of starts would name jobs still being created).
                    if let Some(job) = response.into_inner().job {
                        jobs.fetch_max(job.job_id, Ordering::Relaxed);
                    }
                });
                ("start", result)
            }
        };
        match result {
            Ok(()) => tally
                .latencies
                .entry(kind)
                .or_default()
                .push(t.elapsed().as_secs_f64() * 1e3),
            Err(e) => {
                *tally
                    .errors
                    .entry(format!("{kind}: {:?} {}", e.code(), e.message()))
                    .or_default() += 1
            }
        }
    }
    tally
}

/// Opens a watch, reads the snapshot and one more message, hangs up.
async fn watch_briefly(
    c: &mut TrainingServiceClient<Channel>,
    job: u64,
) -> Result<(), tonic::Status> {
    let mut stream = c
        .watch_training(pb::WatchTrainingRequest {
            job_id: job,
            interval_ms: 200,
        })
        .await?
        .into_inner();
    for _ in 0..2 {
        match tokio::time::timeout(WATCH_PATIENCE, stream.message()).await {
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => break,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(tonic::Status::deadline_exceeded(format!(
                    "no watch message in {WATCH_PATIENCE:?}"
                )))
            }
        }
    }
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let clients = env_number("CLIENTS", 200);
    let seconds = env_number("SECONDS", 30);
    let mixed_rounds = env_number("ROUNDS", 2);
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::tempdir().expect("temp dir");
    let (mut host, address) = start_host(plugins.path(), state.path());
    let pid = host.id();
    let endpoint = format!("http://{address}");
    let (rss_idle, threads_idle) = host_memory(pid);

    let mut c = TrainingServiceClient::connect(endpoint.clone())
        .await
        .expect("connect");
    for j in 0..QUEUED_JOBS {
        let assets = (0..TASKS_PER_JOB)
            .map(|a| synthetic_asset(500, j * TASKS_PER_JOB + a + 1))
            .collect();
        c.start_training(template_job(format!("queued-{j}"), assets))
            .await
            .expect("queue a job");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_queued, threads_queued) = host_memory(pid);
    println!(
        "host pid {pid}: {:.1} MiB, {threads_idle} threads idle; {:.1} MiB, {threads_queued} \
         threads with {} tasks queued (one training)",
        mib(rss_idle),
        mib(rss_queued),
        QUEUED_JOBS * TASKS_PER_JOB
    );
    println!();
    println!("| round | tasks in store | calls | errors | status p50 / p99 | list p50 / p99 | watch p50 / p99 | start p50 / p99 | host RSS before → peak → after | threads peak |");
    println!("|---|---:|---:|---:|---|---|---|---|---|---:|");

    let jobs = Arc::new(AtomicU64::new(QUEUED_JOBS));
    let started = Arc::new(AtomicU64::new(0));
    let mut all_errors = BTreeMap::new();
    let still_rounds = env_number("STILL_ROUNDS", 2);
    for round in 1..=mixed_rounds + still_rounds {
        let starts = round <= mixed_rounds;
        let tasks_before = QUEUED_JOBS * TASKS_PER_JOB + started.load(Ordering::Relaxed);
        let (before, _) = host_memory(pid);
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(Mutex::new((before, 0u64)));
        let sampler = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (rss, threads) = host_memory(pid);
                    if let Ok(mut p) = peak.lock() {
                        p.0 = p.0.max(rss);
                        p.1 = p.1.max(threads);
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            })
        };
        let handles: Vec<_> = (0..clients)
            .map(|i| {
                tokio::spawn(client(
                    endpoint.clone(),
                    round * 1_000_003 + i,
                    stop.clone(),
                    jobs.clone(),
                    started.clone(),
                    starts,
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let mut tally = Tally::default();
        for h in handles {
            tally.merge(h.await.expect("client"));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = sampler.join();
        let (after, _) = host_memory(pid);
        let (peak_rss, peak_threads) = *peak.lock().expect("peak");
        let calls: usize = tally.latencies.values().map(Vec::len).sum();
        let errors: u64 = tally.errors.values().sum();
        let mut cells = Vec::new();
        for kind in ["status", "list", "watch", "start"] {
            let cell = match tally.latencies.get_mut(kind) {
                Some(l) if !l.is_empty() => {
                    l.sort_by(|a, b| a.total_cmp(b));
                    format!(
                        "{:.1} / {:.1} ms ({})",
                        percentile(l, 0.5),
                        percentile(l, 0.99),
                        l.len()
                    )
                }
                _ => "—".to_string(),
            };
            cells.push(cell);
        }
        let tasks_after = QUEUED_JOBS * TASKS_PER_JOB + started.load(Ordering::Relaxed);
        let label = if starts {
            format!("{round}")
        } else {
            format!("{round} (no starts)")
        };
        println!(
            "| {label} | {tasks_before} → {tasks_after} | {calls} | {errors} | {} | {:.1} → {:.1} → {:.1} MiB | {peak_threads} |",
            cells.join(" | "),
            mib(before),
            mib(peak_rss),
            mib(after),
        );
        for (e, n) in tally.errors {
            *all_errors.entry(e).or_insert(0) += n;
        }
    }
    println!();
    println!(
        "{} jobs started by the crowd; host still running: {}",
        started.load(Ordering::Relaxed),
        host.try_wait().ok().flatten().is_none()
    );
    for (e, n) in &all_errors {
        println!("error ×{n}: {e}");
    }
    // SIGTERM: the host checkpoints its one running task and exits.
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = host.wait();
    if !all_errors.is_empty() {
        std::process::exit(1);
    }
}
