//! A fleet of simulated Slurm workers against one host (docs/scale-out.md, "How far one host goes"; run
//! with `cargo bench -p tli-host --bench worker_fleet` after
//! `cargo build --release --workspace`; results in docs/benchmarks.md).
//!
//! The real `tli host serve --executor slurm` runs as a child process with
//! fake Slurm commands (`--slurm-bin-dir`: shell scripts in a temp dir;
//! `sbatch` notes each task and dispatch and prints an increasing job id,
//! `squeue` reports every job submitted so far as running). One job of
//! `TLI_FLEET_WORKERS` tasks (default 1,000: 10 template models × 100
//! synthetic assets) is submitted over gRPC; once every task is submitted,
//! as many tokio tasks play its workers over loopback (one HTTP/2 connection
//! per 50 workers): AttachWorker, ListCheckpoints, StepsDone(0) and
//! Running as a real worker starts, all at once, then once a second (start
//! times spread evenly over the first second) a WorkerHeartbeat (steps and 3
//! metrics) and, independently, a RecordTask Progress with one slice of 3
//! metrics — one fsync'd store transaction each. Meanwhile a client calls
//! GetTrainingStatus for the job every `TLI_FLEET_STATUS_MS` (default 200;
//! 0 = no reader) and ListTrainingJobs every fifth round.
//!
//! Over the steady window (`TLI_FLEET_SECONDS`, default 60) it measures the
//! host process's CPU (utime + stime from /proc, as % of one core) and RSS,
//! every call's latency as its caller sees it, the achieved call rates, and
//! what else used the machine's CPU (this load generator and other
//! processes: the figures are only clean when the latter is near 0). Then
//! one caller repeats Progress, heartbeat and GetTrainingStatus on the idle
//! host: each call's cost without queueing.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tli_proto::v1 as pb;
use tli_proto::v1::record_task_request::Record;
use tli_proto::v1::training_service_client::TrainingServiceClient;
use tli_proto::v1::worker_service_client::WorkerServiceClient;
use tli_testkit::measure::{env_number, percentile, ProcessStatus};
use tli_testkit::{artifact, plugin_model, synthetic_asset, PluginDir, ServeProcess, TEMPLATE};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};

/// Simulated workers sharing one HTTP/2 connection.
const WORKERS_PER_CONNECTION: usize = 50;
/// Steps a worker claims per second.
const STEPS_PER_SECOND: u64 = 100;

// ---------------------------------------------------------------- fake Slurm

/// `sbatch`, `squeue`, `scancel` and `sacct` as shell scripts (shell builtins
/// only, so each call costs the host one fork and exec of `/bin/sh`). The
/// host submits from its scheduling thread, one `sbatch` at a time, so the
/// job-id counter needs no lock.
struct FakeSlurm {
    dir: tempfile::TempDir,
}

impl FakeSlurm {
    fn create() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("tli-fake-slurm-")
            .tempdir()
            .expect("temp dir");
        let d = dir.path().display().to_string();
        assert!(!d.contains('\''), "temp dir path with a quote: {d}");
        std::fs::write(dir.path().join("counter"), "0\n").expect("counter");
        std::fs::write(dir.path().join("submitted"), "").expect("submitted");
        let scripts = [
            (
                "sbatch",
                format!(
                    r#"#!/bin/sh
# The batch script arrives on stdin; its exec line names the task and dispatch.
task=; dispatch=
while IFS= read -r line; do
  case "$line" in
    exec*)
      rest=${{line#* --task }}; task=${{rest%% *}}
      rest=${{line#* --dispatch }}; dispatch=${{rest%% *}} ;;
  esac
done
read n < '{d}/counter'
n=$((n + 1))
echo "$n" > '{d}/counter'
echo "$task $dispatch $n" >> '{d}/submitted'
echo "$n"
"#
                ),
            ),
            (
                "squeue",
                format!(
                    r#"#!/bin/sh
read n < '{d}/counter'
i=1
while [ "$i" -le "$n" ]; do
  echo "$i|RUNNING|None"
  i=$((i + 1))
done
"#
                ),
            ),
            ("scancel", "#!/bin/sh\nexit 0\n".to_string()),
            ("sacct", "#!/bin/sh\nexit 0\n".to_string()),
        ];
        for (name, text) in scripts {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write fake Slurm command");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `(task, dispatch, slurm job)` of every submission so far.
    fn submitted(&self) -> Vec<(i64, i64, String)> {
        std::fs::read_to_string(self.dir.path().join("submitted"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some((
                    f.next()?.parse().ok()?,
                    f.next()?.parse().ok()?,
                    f.next()?.into(),
                ))
            })
            .collect()
    }
}

// ---------------------------------------------------------------- the host

/// `tli host serve` as a child process; SIGKILLed when dropped.
struct Host {
    child: Child,
    address: String,
    log: Arc<Mutex<String>>,
}

impl Host {
    fn start(plugins: &Path, state: &Path, slurm: &Path) -> Self {
        let mut command = Command::new(artifact("tli"));
        command
            .args(["host", "serve", "--listen", "127.0.0.1:0", "--state-dir"])
            .arg(state)
            .args(["--executor", "slurm", "--slurm-bin-dir"])
            .arg(slurm)
            .env("TLI_PLUGIN_DIR", plugins)
            .env_remove("LD_LIBRARY_PATH")
            .env("NO_COLOR", "1");
        // Keep the warnings and errors (info lines are one per task).
        let ServeProcess {
            child,
            address,
            log,
        } = ServeProcess::spawn(command, |line| !line.contains(" INFO "));
        Self {
            child,
            address,
            log,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    fn warnings(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- /proc

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf(3) has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// Fields after the `(comm)` of a /proc stat line, starting with the state (field 3).
fn stat_fields(text: &str) -> Vec<u64> {
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect()
}

/// Clock ticks of a process: its own (utime + stime) and its waited-for
/// children's (cutime + cstime: the Slurm commands it ran).
fn process_ticks(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f = stat_fields(&text);
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    // utime is field 14, stime 15, cutime 16, cstime 17; index 0 is field 3.
    (at(11) + at(12), at(13) + at(14))
}

/// Clock ticks by thread name (threads of one name summed), and the thread count.
fn thread_ticks(pid: u32) -> (BTreeMap<String, u64>, usize) {
    let mut by_name = BTreeMap::new();
    let mut threads = 0;
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (by_name, threads);
    };
    for entry in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let name = text
            .split_once('(')
            .and_then(|(_, r)| r.rsplit_once(')'))
            .map(|(n, _)| n.to_string())
            .unwrap_or_default();
        let f = stat_fields(&text);
        let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
        *by_name.entry(name).or_insert(0) += ticks;
        threads += 1;
    }
    (by_name, threads)
}

/// VmRSS and VmHWM of a process in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let status = ProcessStatus::of(pid);
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    (mib(status.rss_bytes), mib(status.peak_rss_bytes))
}

/// Busy and total jiffies of the whole machine (/proc/stat).
fn machine_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = text.lines().next().unwrap_or("");
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let total: u64 = v.iter().take(8).sum();
    // idle + iowait
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// fsync of a small append on `dir`'s filesystem (what one store commit waits
/// for at least): p50 and p99 in ms over 200 appends.
fn fsync_reference(dir: &Path) -> (f64, f64) {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path).expect("probe file");
    let mut lat = Samples::default();
    for _ in 0..200 {
        let t = Instant::now();
        file.write_all(&[7u8; 4096]).expect("write");
        file.sync_data().expect("fdatasync");
        lat.push(t);
    }
    let _ = std::fs::remove_file(path);
    lat.sort();
    (lat.pct(0.5), lat.pct(0.99))
}

// ---------------------------------------------------------------- figures

/// Latencies in milliseconds.
#[derive(Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn push(&mut self, since: Instant) {
        self.0.push(since.elapsed().as_secs_f64() * 1e3);
    }

    fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    fn sort(&mut self) {
        self.0.sort_by(|a, b| a.total_cmp(b));
    }

    /// Of a sorted set; NaN when empty.
    fn pct(&self, p: f64) -> f64 {
        percentile(&self.0, p)
    }

    fn max(&self) -> f64 {
        self.0.last().copied().unwrap_or(f64::NAN)
    }
}

/// Failed calls of one kind: how many, and the first message.
#[derive(Default)]
struct Errors {
    count: u64,
    first: Option<String>,
}

impl Errors {
    fn note(&mut self, status: &tonic::Status) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(format!("{}: {}", status.code(), status.message()));
        }
    }

    fn merge(&mut self, other: Errors) {
        self.count += other.count;
        if self.first.is_none() {
            self.first = other.first;
        }
    }
}

// ---------------------------------------------------------------- workers

type Client = WorkerServiceClient<Channel>;

/// One simulated `tli worker`.
#[derive(Clone)]
struct Worker {
    client: Client,
    lease: pb::WorkerLease,
    slurm_job: String,
    auth: MetadataValue<Ascii>,
}

impl Worker {
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert("authorization", self.auth.clone());
        request
    }

    fn record(&self, record: Record) -> tonic::Request<pb::RecordTaskRequest> {
        self.request(pb::RecordTaskRequest {
            lease: Some(self.lease),
            record: Some(record),
        })
    }

    /// What a real worker does before its first slice: attach (timed
    /// alone), list checkpoints, record the start step and `running`.
    async fn start(&mut self) -> Result<f64, tonic::Status> {
        let t = Instant::now();
        let attached = self
            .client
            .attach_worker(self.request(pb::AttachWorkerRequest {
                lease: Some(self.lease),
                node: "fake-node".into(),
                slurm_job_id: self.slurm_job.clone(),
            }))
            .await?
            .into_inner();
        let attach_ms = t.elapsed().as_secs_f64() * 1e3;
        assert!(
            attached.inputs.is_some_and(|i| !i.datasets.is_empty()),
            "the attach carries the dataset"
        );
        let list = self.record(Record::ListCheckpoints(pb::ListCheckpoints {}));
        self.client.record_task(list).await?;
        let steps = self.record(Record::StepsDone(0));
        self.client.record_task(steps).await?;
        let running = self.record(Record::Transition(pb::TaskTransition {
            to: pb::TaskState::Running as i32,
            reason: "started".into(),
        }));
        self.client.record_task(running).await?;
        Ok(attach_ms)
    }
}

fn metrics(step: u64, task: i64) -> Vec<pb::Metric> {
    let x = step as f64 + task as f64 * 1e-3;
    vec![
        pb::Metric {
            name: "loss".into(),
            value: 1.0 / (1.0 + x),
        },
        pb::Metric {
            name: "valid_loss".into(),
            value: 1.1 / (1.0 + x),
        },
        pb::Metric {
            name: "grad_norm".into(),
            value: 0.5 + (x * 0.01).sin().abs(),
        },
    ]
}

/// What one worker's steady state measured.
#[derive(Default)]
struct Tally {
    progress: Samples,
    heartbeat: Samples,
    progress_errors: Errors,
    heartbeat_errors: Errors,
}

/// When a once-a-second call that was due at `due` and began at `began`
/// is next due: a second later, or at once when the call took longer (as
/// a real worker's loop does).
fn next_due(due: tokio::time::Instant, began: tokio::time::Instant) -> tokio::time::Instant {
    (due + Duration::from_secs(1)).max(began.max(tokio::time::Instant::now()))
}

/// RecordTask Progress once a second from `first` while it starts before `end`.
async fn progress_loop(
    worker: &Worker,
    first: tokio::time::Instant,
    end: tokio::time::Instant,
) -> (Samples, Errors) {
    let mut client = worker.client.clone();
    let mut lat = Samples::default();
    let mut errors = Errors::default();
    let (mut due, mut k) = (first, 1);
    while due < end {
        tokio::time::sleep_until(due).await;
        let began = tokio::time::Instant::now();
        let steps = k * STEPS_PER_SECOND;
        let request = worker.record(Record::Progress(pb::ProgressBatch {
            steps_done: steps,
            slices: vec![pb::SliceMetrics {
                at_unix_ms: tli_host::orchestrator::now_ms(),
                step: steps,
                metrics: metrics(steps, worker.lease.task_id),
            }],
        }));
        let t = Instant::now();
        match client.record_task(request).await {
            Ok(_) => lat.push(t),
            Err(e) => errors.note(&e),
        }
        k += 1;
        due = next_due(due, began);
    }
    (lat, errors)
}

/// WorkerHeartbeat once a second from `first` while it starts before `end`.
async fn heartbeat_loop(
    worker: &Worker,
    first: tokio::time::Instant,
    end: tokio::time::Instant,
) -> (Samples, Errors) {
    let mut client = worker.client.clone();
    let mut lat = Samples::default();
    let mut errors = Errors::default();
    let (mut due, mut k) = (first, 1);
    while due < end {
        tokio::time::sleep_until(due).await;
        let began = tokio::time::Instant::now();
        let steps = k * STEPS_PER_SECOND;
        let request = worker.request(pb::WorkerHeartbeatRequest {
            lease: Some(worker.lease),
            steps_done: steps,
            metrics: metrics(steps, worker.lease.task_id),
            logs: Vec::new(),
        });
        let t = Instant::now();
        match client.worker_heartbeat(request).await {
            Ok(_) => lat.push(t),
            Err(e) => errors.note(&e),
        }
        k += 1;
        due = next_due(due, began);
    }
    (lat, errors)
}

/// Heartbeats and progress records, independently (as a worker's heartbeat
/// thread and its runner thread send them), once a second from `first`
/// until `end`.
async fn steady(worker: Worker, first: tokio::time::Instant, end: tokio::time::Instant) -> Tally {
    let ((progress, progress_errors), (heartbeat, heartbeat_errors)) = tokio::join!(
        progress_loop(&worker, first, end),
        heartbeat_loop(&worker, first, end)
    );
    Tally {
        progress,
        heartbeat,
        progress_errors,
        heartbeat_errors,
    }
}

/// Latencies of one caller on an idle host: (Progress, heartbeat, GetTrainingStatus).
async fn idle_costs(
    worker: &Worker,
    control: &mut TrainingServiceClient<Channel>,
    job: u64,
    from_step: u64,
) -> (Samples, Samples, Samples) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut client = worker.client.clone();
    let (mut progress, mut heartbeat, mut status) =
        (Samples::default(), Samples::default(), Samples::default());
    for k in 0..100 {
        let steps = from_step + k;
        let request = worker.record(Record::Progress(pb::ProgressBatch {
            steps_done: steps,
            slices: vec![pb::SliceMetrics {
                at_unix_ms: tli_host::orchestrator::now_ms(),
                step: steps,
                metrics: metrics(steps, worker.lease.task_id),
            }],
        }));
        let t = Instant::now();
        client.record_task(request).await.expect("idle progress");
        progress.push(t);
        let request = worker.request(pb::WorkerHeartbeatRequest {
            lease: Some(worker.lease),
            steps_done: steps,
            metrics: metrics(steps, worker.lease.task_id),
            logs: Vec::new(),
        });
        let t = Instant::now();
        client
            .worker_heartbeat(request)
            .await
            .expect("idle heartbeat");
        heartbeat.push(t);
    }
    for _ in 0..10 {
        let t = Instant::now();
        control
            .get_training_status(pb::GetTrainingStatusRequest { job_id: job })
            .await
            .expect("idle status");
        status.push(t);
    }
    progress.sort();
    heartbeat.sort();
    status.sort();
    (progress, heartbeat, status)
}

/// GetTrainingStatus every `interval` and ListTrainingJobs every fifth
/// round until `end` (a call that takes longer pushes the next one back).
async fn status_reader(
    endpoint: String,
    job: u64,
    interval: Duration,
    end: tokio::time::Instant,
) -> (Samples, Samples, Errors) {
    let mut client = TrainingServiceClient::connect(endpoint)
        .await
        .expect("connect the status reader")
        .max_decoding_message_size(usize::MAX);
    let mut status = Samples::default();
    let mut list = Samples::default();
    let mut errors = Errors::default();
    let mut next = tokio::time::Instant::now();
    let mut round = 0u64;
    while next < end {
        tokio::time::sleep_until(next).await;
        let t = Instant::now();
        match client
            .get_training_status(pb::GetTrainingStatusRequest { job_id: job })
            .await
        {
            Ok(_) => status.push(t),
            Err(e) => errors.note(&e),
        }
        if round.is_multiple_of(5) {
            let t = Instant::now();
            match client
                .list_training_jobs(pb::ListTrainingJobsRequest::default())
                .await
            {
                Ok(_) => list.push(t),
                Err(e) => errors.note(&e),
            }
        }
        round += 1;
        next = (next + interval).max(tokio::time::Instant::now());
    }
    (status, list, errors)
}

// ---------------------------------------------------------------- the run

/// `models × assets = workers`: 10 models where the count allows.
fn job_shape(workers: usize) -> (usize, usize) {
    let models = if workers >= 10 && workers.is_multiple_of(10) {
        10
    } else {
        1
    };
    (models, workers / models)
}

fn ms(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let workers = env_number("TLI_FLEET_WORKERS", 1000) as usize;
    let seconds = env_number("TLI_FLEET_SECONDS", 60);
    // 0: no status reader (to see what the reads cost).
    let status_ms = env_number("TLI_FLEET_STATUS_MS", 200);
    assert!(
        (1..=1024).contains(&workers),
        "TLI_FLEET_WORKERS: 1 ..= 1024 (tasks of one job)"
    );
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::Builder::new()
        .prefix("tli-fleet-state-")
        .tempdir()
        .expect("temp dir");
    let slurm = FakeSlurm::create();
    let (fsync_p50, fsync_p99) = fsync_reference(state.path());

    let host = Host::start(plugins.path(), state.path(), slurm.path());
    let pid = host.pid();
    let token = std::fs::read_to_string(state.path().join("worker-token"))
        .expect("the host wrote its worker token")
        .trim()
        .to_string();
    let auth: MetadataValue<Ascii> = format!("Bearer {token}").parse().expect("token header");

    // One job of `workers` tasks on the Slurm executor.
    let (models, assets) = job_shape(workers);
    let mut control = TrainingServiceClient::connect(host.endpoint())
        .await
        .expect("connect")
        .max_decoding_message_size(usize::MAX);
    let submit_started = Instant::now();
    let job = control
        .start_training(pb::StartTrainingRequest {
            name: "worker-fleet".into(),
            models: (0..models)
                .map(|m| {
                    plugin_model(
                        "template",
                        1_000_000,
                        &format!(r#"{{"hidden_sizes":[{}],"batch_size":64}}"#, 16 + 8 * m),
                    )
                })
                .collect(),
            assets: (0..assets)
                .map(|a| synthetic_asset(200, 1000 + a as u64))
                .collect(),
            checkpoint: Some(pb::CheckpointPolicy {
                every_steps: 0,
                every_seconds: 0.0,
                keep: 1,
            }),
            executor: pb::Executor::Slurm as i32,
            ..Default::default()
        })
        .await
        .expect("start training")
        .into_inner()
        .job
        .expect("job")
        .job_id;
    let submit_time = submit_started.elapsed();

    // Every task through sbatch.
    let submissions = loop {
        let s = slurm.submitted();
        if s.len() >= workers {
            break s;
        }
        assert!(
            submit_started.elapsed() < Duration::from_secs(600),
            "only {} of {workers} tasks reached sbatch in 10 minutes; the host said:\n{}",
            s.len(),
            host.warnings()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let dispatch_time = submit_started.elapsed();

    // Workers: one connection per WORKERS_PER_CONNECTION.
    let mut channels = Vec::new();
    for _ in 0..workers.div_ceil(WORKERS_PER_CONNECTION) {
        let channel = Endpoint::from_shared(host.endpoint())
            .expect("endpoint")
            .tcp_nodelay(true)
            .timeout(Duration::from_secs(120))
            .connect()
            .await
            .expect("connect a worker channel");
        channels.push(channel);
    }
    let attach_started = Instant::now();
    let starts: Vec<_> = submissions
        .iter()
        .enumerate()
        .map(|(i, (task, dispatch, slurm_job))| {
            let mut worker = Worker {
                client: WorkerServiceClient::new(channels[i / WORKERS_PER_CONNECTION].clone())
                    .max_decoding_message_size(usize::MAX),
                lease: pb::WorkerLease {
                    task_id: *task,
                    dispatch_id: *dispatch,
                },
                slurm_job: slurm_job.clone(),
                auth: auth.clone(),
            };
            tokio::spawn(async move {
                let attach = worker.start().await;
                (worker, attach)
            })
        })
        .collect();
    let mut fleet = Vec::new();
    let mut attach_lat = Samples::default();
    let mut attach_errors = Errors::default();
    for start in starts {
        let (worker, attach) = start.await.expect("worker start");
        match attach {
            Ok(ms) => {
                attach_lat.0.push(ms);
                fleet.push(worker);
            }
            Err(e) => attach_errors.note(&e),
        }
    }
    let attach_time = attach_started.elapsed();
    attach_lat.sort();

    // Steady state: everyone once a second, spread over the first second.
    let t0 = tokio::time::Instant::now() + Duration::from_millis(500);
    let end = t0 + Duration::from_secs(seconds);
    let attached = fleet.len();
    let probe = fleet
        .first()
        .cloned()
        .expect("at least one worker attached");
    let tasks: Vec<_> = fleet
        .into_iter()
        .enumerate()
        .map(|(i, worker)| {
            let offset = Duration::from_secs_f64(i as f64 / attached as f64);
            tokio::spawn(steady(worker, t0 + offset, end))
        })
        .collect();
    let reader = (status_ms > 0).then(|| {
        tokio::spawn(status_reader(
            host.endpoint(),
            job,
            Duration::from_millis(status_ms),
            end,
        ))
    });
    tokio::time::sleep_until(t0).await;
    let window_started = Instant::now();
    let (host0, children0) = process_ticks(pid);
    let (names0, threads0) = thread_ticks(pid);
    let machine0 = machine_ticks();
    let me0 = process_ticks(std::process::id()).0;
    let mut rss_peak = 0f64;
    while tokio::time::Instant::now() < end {
        rss_peak = rss_peak.max(rss_mib(pid).0);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let window = window_started.elapsed().as_secs_f64();
    let (host1, children1) = process_ticks(pid);
    let (names1, threads1) = thread_ticks(pid);
    let machine1 = machine_ticks();
    let me1 = process_ticks(std::process::id()).0;
    let (rss_end, hwm) = rss_mib(pid);

    let mut tally = Tally::default();
    for t in tasks {
        let one = t.await.expect("worker");
        tally.progress.extend(one.progress);
        tally.heartbeat.extend(one.heartbeat);
        tally.progress_errors.merge(one.progress_errors);
        tally.heartbeat_errors.merge(one.heartbeat_errors);
    }
    let calls_time = window_started.elapsed().as_secs_f64();
    let (mut status, mut list, status_errors) = match reader {
        Some(r) => r.await.expect("status reader"),
        None => Default::default(),
    };

    // The same calls one at a time on the otherwise idle host: what each
    // costs without queueing behind the others.
    let idle = idle_costs(&probe, &mut control, job, (seconds + 2) * STEPS_PER_SECOND).await;

    // What the host says at the end.
    let last = control
        .get_training_status(pb::GetTrainingStatusRequest { job_id: job })
        .await
        .expect("final status")
        .into_inner();
    let tasks_view = last.job.and_then(|j| j.progress).map(|p| p.tasks);
    let running = tasks_view.as_ref().map_or(0, |t| {
        t.iter()
            .filter(|t| t.state == pb::TaskState::Running as i32)
            .count()
    });

    let tck = clock_ticks_per_second();
    let host_cpu = 100.0 * (host1 - host0) as f64 / tck / window;
    let children_cpu = 100.0 * (children1 - children0) as f64 / tck / window;
    let my_cpu = 100.0 * (me1 - me0) as f64 / tck / window;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // In % of one core, like the rest; `others` is what neither the host nor this process used.
    let machine_busy =
        100.0 * cores as f64 * (machine1.0 - machine0.0) as f64 / (machine1.1 - machine0.1) as f64;
    let others = (machine_busy - host_cpu - children_cpu - my_cpu).max(0.0);
    let progress_ok = tally.progress.0.len();
    let heartbeat_ok = tally.heartbeat.0.len();
    tally.progress.sort();
    tally.heartbeat.sort();
    status.sort();
    list.sort();
    let errors = attach_errors.count
        + tally.progress_errors.count
        + tally.heartbeat_errors.count
        + status_errors.count;

    println!(
        "worker fleet: {workers} workers ({models} models × {assets} synthetic assets of 200 \
         rows), {seconds} s steady state, status every {status_ms} ms (0: none), {cores} cores"
    );
    println!();
    println!("| figure | value |");
    println!("|---|---:|");
    println!("| simulated workers (attached) | {attached} of {workers} |");
    println!(
        "| StartTraining ({workers} tasks) | {:.2} s |",
        submit_time.as_secs_f64()
    );
    println!(
        "| dispatch: StartTraining to the {workers}th sbatch | {:.2} s |",
        dispatch_time.as_secs_f64()
    );
    println!(
        "| attach + ListCheckpoints + StepsDone(0) + Running, all {workers} at once | {:.2} s \
         (attach p50 {}, p99 {}) |",
        attach_time.as_secs_f64(),
        ms(attach_lat.pct(0.5)),
        ms(attach_lat.pct(0.99))
    );
    println!("| host CPU (% of one core) | {host_cpu:.0}% |");
    println!("| host's Slurm commands (squeue) CPU | {children_cpu:.1}% |");
    println!(
        "| host RSS at the end / peak sampled / VmHWM | {rss_end:.0} / {rss_peak:.0} / \
         {hwm:.0} MiB |"
    );
    println!(
        "| Progress record p50 / p95 / p99 / max | {} / {} / {} / {} |",
        ms(tally.progress.pct(0.5)),
        ms(tally.progress.pct(0.95)),
        ms(tally.progress.pct(0.99)),
        ms(tally.progress.max())
    );
    println!(
        "| heartbeat p50 / p99 / max | {} / {} / {} |",
        ms(tally.heartbeat.pct(0.5)),
        ms(tally.heartbeat.pct(0.99)),
        ms(tally.heartbeat.max())
    );
    println!(
        "| GetTrainingStatus ({} calls) p50 / p99 / max | {} / {} / {} |",
        status.0.len(),
        ms(status.pct(0.5)),
        ms(status.pct(0.99)),
        ms(status.max())
    );
    println!(
        "| ListTrainingJobs ({} calls) p50 / p99 / max | {} / {} / {} |",
        list.0.len(),
        ms(list.pct(0.5)),
        ms(list.pct(0.99)),
        ms(list.max())
    );
    println!(
        "| achieved Progress records/s (asked {attached}/s) | {:.0} |",
        progress_ok as f64 / calls_time.max(seconds as f64)
    );
    println!(
        "| achieved heartbeats/s (asked {attached}/s) | {:.0} |",
        heartbeat_ok as f64 / calls_time.max(seconds as f64)
    );
    println!(
        "| errors (attach / progress / heartbeat / status) | {} / {} / {} / {} |",
        attach_errors.count,
        tally.progress_errors.count,
        tally.heartbeat_errors.count,
        status_errors.count
    );
    println!("| tasks running at the end (GetTrainingStatus) | {running} |");
    println!(
        "| one caller on the idle host afterwards: Progress / heartbeat / GetTrainingStatus p50 \
         | {} / {} / {} |",
        ms(idle.0.pct(0.5)),
        ms(idle.1.pct(0.5)),
        ms(idle.2.pct(0.5))
    );
    println!(
        "| fsync of a 4 KiB append on the state dir, p50 / p99 | {} / {} |",
        ms(fsync_p50),
        ms(fsync_p99)
    );
    println!(
        "| CPU of this load generator / of other processes (% of one core) | {my_cpu:.0}% / \
         {others:.0}% |"
    );
    println!();
    println!(
        "host threads: {threads0} at the start of the window, {threads1} at the end; CPU by \
         thread name over the window (% of one core):"
    );
    // Threads that ended during the window are missing from the end's sums.
    let mut by_name: Vec<(String, f64)> = names1
        .iter()
        .map(|(name, t)| {
            let before = names0.get(name).copied().unwrap_or(0);
            (
                name.clone(),
                100.0 * t.saturating_sub(before) as f64 / tck / window,
            )
        })
        .collect();
    by_name.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, cpu) in by_name.iter().take(6) {
        println!("  {name}: {cpu:.1}%");
    }
    for (what, e) in [
        ("attach", &attach_errors),
        ("progress", &tally.progress_errors),
        ("heartbeat", &tally.heartbeat_errors),
        ("status", &status_errors),
    ] {
        if let Some(first) = &e.first {
            println!("first {what} error ({} in all): {first}", e.count);
        }
    }
    let warnings = host.warnings();
    if !warnings.is_empty() {
        let lines: Vec<&str> = warnings.lines().collect();
        println!(
            "the host's log but INFO lines ({} lines; the last 5):",
            lines.len()
        );
        for l in lines.iter().rev().take(5).rev() {
            println!("  {l}");
        }
    }
    if errors > 0 {
        println!("{errors} failed calls");
    }
    drop(host);
}
