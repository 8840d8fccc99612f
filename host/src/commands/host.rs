//! `tli host run` (the orchestrator in the foreground) and `tli host status`.

use crate::api::convert;
use crate::connections::{ConnectionGate, ConnectionLimits};
use crate::orchestrator::data_root::DataRoots;
use crate::orchestrator::engine::{Orchestrator, OrchestratorConfig};
use crate::orchestrator::executor::ExecutorKind;
use crate::orchestrator::job::JobSpec;
use crate::orchestrator::listing::{job_views, JobView};
use crate::orchestrator::remote_executor::RemoteExecutor;
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::Store;
use crate::slurm::{SlurmConfig, SlurmExecutor};
use crate::tensorboard::TensorBoardLog;
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tli_cli::args::{HostOptions, HostRunArgs, OutputFormat};
use tli_cli::render::print_job;
use tli_cli::view::{HostJobJson, JobJson, WireState};
use tli_cli::{new_table, print_json};

pub(super) static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

pub(super) fn install_signal_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        for signal in super::serve::SHUTDOWN_SIGNALS {
            libc::signal(signal, handler);
        }
    }
}

/// Checks every few seconds that the host's store is still the file it
/// locked; when it is not, asks the host to stop (its tasks checkpoint) and
/// keeps why, for the exit.
pub(super) struct StoreGuard {
    last: Instant,
    lost: Option<String>,
}

impl StoreGuard {
    const EVERY: Duration = Duration::from_secs(2);

    pub(super) fn new() -> Self {
        Self {
            last: Instant::now(),
            lost: None,
        }
    }

    /// Called every scheduling round.
    pub(super) fn check(&mut self, host: &Orchestrator) {
        if self.lost.is_some() || self.last.elapsed() < Self::EVERY {
            return;
        }
        self.last = Instant::now();
        if let Err(e) = host.store().check_lock() {
            tracing::error!("{e}");
            self.lost = Some(e.to_string());
            host.shutdown_flag().store(true, Ordering::SeqCst);
        }
    }

    /// `Err(why)` when the store was lost.
    pub(super) fn outcome(&mut self) -> Result<(), String> {
        self.lost.take().map_or(Ok(()), Err)
    }
}

/// An opened host, and its Slurm settings when it has the Slurm executor.
pub(super) struct OpenHost {
    pub host: Orchestrator,
    pub slurm: Option<SlurmConfig>,
}

/// Opens the orchestrator with the shared host options (`host run`, `host
/// serve`), wiring in the Slurm executor and TensorBoard's event files when
/// asked for; `worker_service` is where its worker service listens (Slurm).
pub(super) fn open_host(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    opts: &HostOptions,
    worker_service: Option<std::net::SocketAddr>,
) -> Result<OpenHost> {
    let slurm = super::executor::slurm_config(opts, plugin_dir, worker_service)?;
    let remote = slurm
        .clone()
        .map(|config| Arc::new(SlurmExecutor::new(config)) as Arc<dyn RemoteExecutor>);
    let strategy = opts.strategy;
    let budget_bytes = opts.memory_budget.map(|b| b.0);
    let cores = opts.cores.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let host = Orchestrator::open_with(
        OrchestratorConfig {
            state_dir: opts.state_dir.clone(),
            plugin_dir: plugin_dir.to_path_buf(),
            contracts: contracts.map(Path::to_path_buf),
            strategy,
            budget_bytes,
            margin: opts.margin,
            device: opts.device,
            cores,
            cpu_auto_limit: None,
            resume_interrupted: !opts.no_resume,
            default_executor: opts.executor.executor,
            data_roots: Some(if opts.data_roots.is_empty() {
                DataRoots::defaults().context("the default data roots")?
            } else {
                DataRoots::new(&opts.data_roots).context("--data-root")?
            }),
            watch_plugins: match opts.watch_plugins {
                None => None,
                Some(s) if s.is_finite() && (0.05..=3600.0).contains(&s) => {
                    Some(std::time::Duration::from_secs_f64(s))
                }
                Some(s) => bail!("--watch-plugins {s}: give seconds between 0.05 and 3600"),
            },
        },
        remote,
    )?;
    // From here on every data file this process opens is checked, by what
    // was opened, to lie under the data roots (the contracts file, named by
    // the operator, was read at open).
    if let Some(roots) = host.data_roots() {
        tli_data::files::confine_to(roots.roots());
    }
    // A fatal signal on a runner thread names its task for the next start.
    crate::orchestrator::crash_blame::install(&opts.state_dir)
        .context("installing the crash handlers")?;
    let budget = host.budget();
    eprintln!(
        "host: state {} · {} plugin(s) · {} budget {} · strategy {}",
        opts.state_dir.display(),
        host.registry().loaded.len(),
        budget.device,
        crate::byte_size::format_bytes(budget.total_bytes),
        opts.strategy
    );
    if let Some(slurm) = &slurm {
        eprintln!(
            "host: executor {} · Slurm workers reach {} · shared dir {}",
            opts.executor.executor,
            slurm.worker_url,
            slurm.shared_dir.display()
        );
    }
    if let Some(tb) = opts.tensorboard_root() {
        eprintln!("host: TensorBoard event files under {}", tb.display());
        // Before the first scheduling round, so every run is in the event files.
        host.observe(Arc::new(TensorBoardLog::new(tb, host.store().clone())));
    }
    Ok(OpenHost { host, slurm })
}

pub(super) fn run(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    args: &HostRunArgs,
    output: OutputFormat,
) -> Result<()> {
    let specs = args
        .submit
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read job spec {}", path.display()))?;
            JobSpec::from_json(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    // A Slurm host serves its workers while it runs.
    let worker_service = match args.host.executor.executor {
        ExecutorKind::Slurm => Some(WorkerService::bind(&args.host.executor.worker_listen)?),
        ExecutorKind::Local => None,
    };
    let OpenHost { host, slurm } = open_host(
        plugin_dir,
        contracts,
        &args.host,
        worker_service.as_ref().map(|w| w.local),
    )?;
    let host = Arc::new(host);
    let _serving = match (worker_service, &slurm) {
        (Some(service), Some(slurm)) => {
            let token = super::executor::worker_token(slurm)?;
            Some(service.serve(host.clone(), &token)?)
        }
        _ => None,
    };
    for spec in &specs {
        let job = host.submit(spec)?;
        eprintln!(
            "submitted job {job} ({}): {} task(s)",
            spec.name,
            spec.task_plan().len()
        );
    }
    if args.plan {
        let jobs = shown_jobs(host.all_job_views()?);
        return if output == OutputFormat::Json {
            print_host_json(&jobs)
        } else {
            print_plan(&jobs)
        };
    }
    install_signal_handlers();
    let shutdown = host.shutdown_flag();
    let mut last_print = Instant::now();
    let mut last_lines = Vec::new();
    let mut guard = StoreGuard::new();
    host.run_until_idle(Duration::from_millis(50), |h| {
        if SIGNALLED.load(Ordering::SeqCst) {
            shutdown.store(true, Ordering::SeqCst);
        }
        guard.check(h);
        if last_print.elapsed() >= Duration::from_secs(2) {
            last_print = Instant::now();
            print_progress_lines(h, &mut last_lines);
        }
    })?;
    // The store file alone is then the whole store (a copy of it is a backup).
    if let Err(e) = host.store().close_cleanly() {
        eprintln!("tli host run: closing the store: {e}");
    }
    let jobs = shown_jobs(host.all_job_views()?);
    if output == OutputFormat::Json {
        print_host_json(&jobs)?;
    } else {
        print_status(&jobs);
    }
    let failed: usize = jobs
        .iter()
        .flat_map(|j| &j.progress.tasks)
        .filter(|t| t.state == WireState::Known(TaskState::Failed))
        .count();
    guard.outcome().map_err(|e| anyhow::anyhow!(e))?;
    if SIGNALLED.load(Ordering::SeqCst) {
        eprintln!("host stopped by signal; running tasks were checkpointed and resume at the next `tli host run`");
    } else if failed > 0 {
        bail!("{failed} task(s) failed");
    }
    Ok(())
}

/// Jobs as the client shows them (one conversion for `host` and `train`
/// commands: the same task table and the same task JSON).
fn shown_jobs(views: Vec<JobView>) -> Vec<JobJson> {
    views
        .iter()
        .map(|v| JobJson::from(&convert::job_view(v)))
        .collect()
}

/// `host run|status -o json`: a list of jobs whose tasks have the shape of
/// `tli train status -o json`'s.
fn print_host_json(jobs: &[JobJson]) -> Result<()> {
    print_json(&jobs.iter().map(HostJobJson::from).collect::<Vec<_>>())
}

fn print_plan(jobs: &[JobJson]) -> Result<()> {
    let mut table = new_table(vec![
        "JOB",
        "TASK",
        "PLUGIN",
        "ASSET",
        "STEPS",
        "MEMORY ESTIMATE",
    ]);
    for job in jobs {
        for t in &job.progress.tasks {
            table.add_row(vec![
                job.job_id.to_string(),
                t.task_id.to_string(),
                t.plugin.clone(),
                t.asset.clone(),
                t.total_steps.to_string(),
                crate::byte_size::format_bytes(t.estimate_bytes),
            ]);
        }
    }
    tli_cli::outln!("{table}");
    Ok(())
}

/// One line per unfinished job, printed only when some line differs from
/// the last printed ones (a queued job, a stalled task: no repeated lines).
fn print_progress_lines(host: &Orchestrator, last: &mut Vec<String>) {
    let Ok(jobs) = host.all_job_views() else {
        return;
    };
    let lines = progress_lines(&jobs);
    if lines != *last {
        for line in &lines {
            eprintln!("{line}");
        }
        *last = lines;
    }
}

fn progress_lines(jobs: &[JobView]) -> Vec<String> {
    let mut lines = Vec::new();
    for job in jobs
        .iter()
        .map(|j| &j.progress)
        .filter(|j| !j.is_finished())
    {
        let running: Vec<String> = job
            .tasks
            .iter()
            .filter(|t| t.state.is_active())
            .map(|t| {
                format!(
                    "task {} {} {}/{}",
                    t.task, t.plugin, t.steps_done, t.total_steps
                )
            })
            .collect();
        lines.push(format!(
            "job {} {}: {:.1}% · {}",
            job.job,
            job.name,
            100.0 * job.weighted_fraction,
            running.join(" · ")
        ));
    }
    lines
}

/// `tli host status`: reads a state directory without a host (read-only,
/// safe while one runs).
pub(super) fn status(state_dir: &Path, job: Option<i64>, output: OutputFormat) -> Result<()> {
    let store = Store::open_read_only(state_dir)?;
    let views = job_views(&store, None, job)?;
    if let Some(j) = job {
        if views.is_empty() {
            bail!("no job {j} in this state directory");
        }
    }
    let jobs = shown_jobs(views);
    if output == OutputFormat::Json {
        return print_host_json(&jobs);
    }
    if jobs.is_empty() {
        tli_cli::outln!("no jobs in {}", state_dir.display());
    }
    print_status(&jobs);
    Ok(())
}

fn print_status(jobs: &[JobJson]) {
    for job in jobs {
        print_job(job);
    }
}

/// The worker service of `tli host run --executor slurm`, bound before the
/// host opens (so the workers' URL names the real port).
struct WorkerService {
    listener: std::net::TcpListener,
    local: std::net::SocketAddr,
}

/// The worker service's runtime; dropping it stops serving.
struct ServingWorkers(Option<tokio::runtime::Runtime>);

impl Drop for ServingWorkers {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
        }
    }
}

impl WorkerService {
    fn bind(listen: &str) -> Result<Self> {
        let listener = std::net::TcpListener::bind(listen)
            .with_context(|| format!("--worker-listen {listen}: cannot listen"))?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        Ok(Self { listener, local })
    }

    fn serve(self, host: Arc<Orchestrator>, token: &str) -> Result<ServingWorkers> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tli-workers")
            .enable_all()
            .build()
            .context("cannot start the worker service's runtime")?;
        let router = crate::api::worker_router(host, token);
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(self.listener)?
        };
        let gate = ConnectionGate::new(ConnectionLimits::for_this_process());
        runtime.spawn(router.serve_with_incoming(crate::api::incoming(listener, &gate, false)));
        eprintln!("host: worker service listening on {}", self.local);
        Ok(ServingWorkers(Some(runtime)))
    }
}
