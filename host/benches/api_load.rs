//! Load on the gRPC API (run with `cargo bench -p tli-host --bench api_load`
//! after `cargo build --release --workspace`): 8 template tasks train while a
//! client calls GetTrainingStatus every 20 ms, first alone, then with 50 more
//! clients each holding a WatchTraining stream (interval `WATCH_INTERVAL_MS`, default 100 ms; all streams of
//! a job share one poller, see `server/src/api/watch_hub.rs`), then alone and
//! with the status page open and Prometheus scraping, twice each. "Page open"
//! makes the page's own requests (`server/src/web/assets/app.js`):
//! `/api/status` every second and each task's `/api/series` every 5 s; the
//! scraper GETs `/metrics` every second. Reports the status-call latency
//! percentiles and the training throughput (steps/s summed over tasks) in
//! every phase — the slowdown watching causes. `PHASE_SECONDS` (default 8)
//! and `ROUNDS` (of quiet / watched pairs, default 2) make it longer. TensorBoard event files are
//! written throughout, as `tli host serve` does by default (`TENSORBOARD=0`:
//! not at all). `SLICE_STEPS` sets the job's slice (default 10 steps).
//!
//! The host serves on its own 2-thread runtime, as `tli host serve` does;
//! the status client (current-thread, as `tli` builds it) and the watchers each run on runtimes of their own, as
//! the separate programs they stand for would, so every call crosses threads
//! the way a real one crosses processes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tli_host::api::{ServerConfig, ShutdownSignal};
use tli_host::orchestrator::arbiter::Strategy;
use tli_host::orchestrator::engine::{Orchestrator, OrchestratorConfig};
use tli_host::tensorboard::TensorBoardLog;
use tli_host::web::{self, Serves};
use tli_proto::v1 as pb;
use tli_proto::v1::training_service_client::TrainingServiceClient;
use tli_testkit::measure::{env_number, percentile};
use tli_testkit::{
    http, orchestrator_config, plugin_model, synthetic_asset, ApiServer, PluginDir, TEMPLATE,
};

/// Steps done by the job's tasks (running ones' from memory, as the API sees them).
fn steps_done(orchestrator: &Orchestrator, job: i64) -> u64 {
    orchestrator
        .job_progress(job)
        .ok()
        .flatten()
        .map(|p| p.tasks.iter().map(|t| t.steps_done).sum())
        .unwrap_or(0)
}

async fn phase(
    client: &mut TrainingServiceClient<tonic::transport::Channel>,
    orchestrator: &Orchestrator,
    job: i64,
    seconds: f64,
) -> (Vec<f64>, f64) {
    let mut latencies = Vec::new();
    let start_steps = steps_done(orchestrator, job);
    let started = Instant::now();
    while started.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        client
            .get_training_status(pb::GetTrainingStatusRequest { job_id: job as u64 })
            .await
            .expect("status");
        latencies.push(t.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate =
        (steps_done(orchestrator, job) - start_steps) as f64 / started.elapsed().as_secs_f64();
    latencies.sort_by(|a, b| a.total_cmp(b));
    (latencies, rate)
}

/// A browser with the status page open and a Prometheus scraping, until
/// `stop`: what they request, when they request it.
fn observers(
    page: String,
    tasks: Vec<i64>,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<u64>> {
    let page_stop = stop.clone();
    let page_address = page.clone();
    let browser = std::thread::spawn(move || {
        let mut requests = 0;
        let mut polls = 0u64;
        while !page_stop.load(Ordering::Relaxed) {
            let ok = http::get(&page_address, "/api/status", None).map(|r| r.status == 200);
            assert!(matches!(ok, Ok(true)), "/api/status: {ok:?}");
            requests += 1;
            if polls.is_multiple_of(5) {
                for task in &tasks {
                    let path = format!("/api/series?task={task}&points=60");
                    let ok = http::get(&page_address, &path, None).map(|r| r.status == 200);
                    assert!(matches!(ok, Ok(true)), "{path}: {ok:?}");
                    requests += 1;
                }
            }
            polls += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
        requests
    });
    let scraper = std::thread::spawn(move || {
        let mut scrapes = 0;
        while !stop.load(Ordering::Relaxed) {
            let ok = http::get(&page, "/metrics", None).map(|r| r.status == 200);
            assert!(matches!(ok, Ok(true)), "/metrics: {ok:?}");
            scrapes += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
        scrapes
    });
    vec![browser, scraper]
}

fn main() {
    // The host's own runtime, as `tli host serve` builds it (commands/serve.rs).
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tli-grpc")
        .enable_all()
        .build()
        .expect("server runtime");
    // The status client's runtime: a thread of its own, as a separate
    // process would be, and a current-thread one, as `tli`'s own CLI builds
    // (commands/remote/connection.rs), so a call makes no thread hand-off
    // inside the client.
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    // The watchers' runtime: other programs again.
    let watcher_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("watcher runtime");
    client_runtime.block_on(run(
        server_runtime.handle().clone(),
        watcher_runtime.handle().clone(),
    ));
}

async fn run(host: tokio::runtime::Handle, watching: tokio::runtime::Handle) {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::tempdir().expect("temp dir");
    let orchestrator = Arc::new(
        Orchestrator::open(OrchestratorConfig {
            resume_interrupted: false,
            default_executor: Default::default(),
            // All 8 at once (`auto` would run one task per core on the CPU).
            ..orchestrator_config(state.path(), plugins.path(), Strategy::Parallel(8), 1 << 32)
        })
        .expect("open host"),
    );
    // TensorBoard files as `tli host serve` writes them by default; TENSORBOARD=0: none.
    if std::env::var("TENSORBOARD").as_deref() != Ok("0") {
        orchestrator.observe(Arc::new(TensorBoardLog::new(
            state.path().join("tb"),
            orchestrator.store().clone(),
        )));
    }
    let serving = orchestrator.clone();
    let mut server = host
        .spawn(async move {
            ApiServer::start(
                serving,
                Duration::from_millis(20),
                &ServerConfig {
                    token: None,
                    tls: None,
                    worker_token: None,
                    ..Default::default()
                },
            )
            .await
        })
        .await
        .expect("server starts");
    let endpoint = server.endpoint();
    let mut client = TrainingServiceClient::connect(endpoint.clone())
        .await
        .expect("connect");
    let assets = (1..=8).map(|seed| synthetic_asset(4000, seed)).collect();
    let job = client
        .start_training(pb::StartTrainingRequest {
            name: "load".into(),
            model: Some(plugin_model(
                "template",
                1_000_000,
                r#"{"hidden_sizes":[64,64],"batch_size":256}"#,
            )),
            assets,
            // 0: the default (10).
            slice_steps: env_number("SLICE_STEPS", 0),
            checkpoint: Some(pb::CheckpointPolicy {
                every_steps: 0,
                every_seconds: 0.0,
                keep: 1,
            }),
            ..Default::default()
        })
        .await
        .expect("start")
        .into_inner()
        .job
        .expect("job")
        .job_id as i64;
    // Let all 8 runners start.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seconds = env_number("PHASE_SECONDS", 8) as f64;
    let rounds = env_number("ROUNDS", 2) as usize;
    let (alone, rate_alone) = phase(&mut client, &orchestrator, job, seconds).await;

    let interval_ms: u32 = std::env::var("WATCH_INTERVAL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let mut watchers = Vec::new();
    for _ in 0..50 {
        let endpoint = endpoint.clone();
        watchers.push(watching.spawn(async move {
            let mut c = TrainingServiceClient::connect(endpoint)
                .await
                .expect("connect");
            let mut stream = c
                .watch_training(pb::WatchTrainingRequest {
                    job_id: job as u64,
                    interval_ms,
                })
                .await
                .expect("watch")
                .into_inner();
            let mut events = 0u64;
            while let Ok(Some(_)) = stream.message().await {
                events += 1;
            }
            events
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (watched, rate_watched) = phase(&mut client, &orchestrator, job, seconds).await;

    // The watchers hang up (the host keeps training).
    for w in &watchers {
        w.abort();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The status page open and Prometheus scraping every second.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let page = listener.local_addr().expect("address").to_string();
    let routes = web::router(
        orchestrator.clone(),
        ShutdownSignal::new(),
        tli_host::api::auth::Auth::none(),
        Serves::PageAndMetrics,
        Default::default(),
    );
    let gate = tli_host::connections::ConnectionGate::new(
        tli_host::connections::ConnectionLimits::for_this_process(),
    );
    host.spawn(async move { web::serve(listener, &gate, routes, std::future::pending()).await });
    let tasks: Vec<i64> = orchestrator
        .job_progress(job)
        .ok()
        .flatten()
        .map(|p| p.tasks.iter().map(|t| t.task).collect())
        .unwrap_or_default();
    let mut rows = vec![
        ("no watchers".to_string(), alone, rate_alone),
        (
            format!("50 watchers ({interval_ms} ms)"),
            watched,
            rate_watched,
        ),
    ];
    for round in 1..=rounds {
        let (quiet, rate_quiet) = phase(&mut client, &orchestrator, job, seconds).await;
        rows.push((format!("nobody watching ({round})"), quiet, rate_quiet));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = observers(page.clone(), tasks.clone(), stop.clone());
        let (seen, rate_seen) = phase(&mut client, &orchestrator, job, seconds).await;
        stop.store(true, Ordering::Relaxed);
        let requests: u64 = threads
            .into_iter()
            .map(|t| t.join().expect("observer"))
            .sum();
        rows.push((
            format!("page open + scrape every 1 s ({round}; {requests} HTTP requests)"),
            seen,
            rate_seen,
        ));
    }

    println!("| phase | status calls | p50 | p99 | max | training steps/s (8 tasks) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, lat, rate) in &rows {
        println!(
            "| {name} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {rate:.0} |",
            lat.len(),
            percentile(lat, 0.5),
            percentile(lat, 0.99),
            lat[lat.len() - 1]
        );
    }
    println!();
    let slowdown = |watched: f64, alone: f64| 100.0 * (1.0 - watched / alone.max(1e-9));
    println!(
        "slowdown from the watchers: {:.1}%",
        slowdown(rows[1].2, rows[0].2)
    );
    let mut slowdowns = Vec::new();
    for round in 0..rounds {
        let (quiet, seen) = (&rows[2 + 2 * round], &rows[3 + 2 * round]);
        slowdowns.push(slowdown(seen.2, quiet.2));
        println!(
            "slowdown from the page and the scraper ({}): {:.1}%",
            round + 1,
            slowdowns[round]
        );
    }
    let (quiet_sum, seen_sum) = (0..rounds).fold((0.0, 0.0), |(q, w), r| {
        (q + rows[2 + 2 * r].2, w + rows[3 + 2 * r].2)
    });
    println!(
        "over {rounds} rounds: {:.0} steps/s nobody watching, {:.0} watched: {:.1}% slower",
        quiet_sum / rounds as f64,
        seen_sum / rounds as f64,
        slowdown(seen_sum, quiet_sum)
    );
    server.stop();
}
