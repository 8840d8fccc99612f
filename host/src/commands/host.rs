//! `tli host run` (the orchestrator in the foreground) and `tli host status`.

use super::render::print_job;
use super::view::{HostJobJson, JobJson, WireState};
use super::{new_table, print_json};
use crate::api::convert;
use crate::cli::{HostOptions, HostRunArgs, OutputFormat};
use crate::orchestrator::engine::{Orchestrator, OrchestratorConfig};
use crate::orchestrator::job::JobSpec;
use crate::orchestrator::listing::{job_views, JobView};
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::Store;
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(super) static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

pub(super) fn install_signal_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Opens the orchestrator with the shared host options (`host run`, `host serve`).
pub(super) fn open_host(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    opts: &HostOptions,
) -> Result<Orchestrator> {
    let strategy = opts
        .strategy
        .parse()
        .map_err(|e| anyhow!("--strategy: {e}"))?;
    let budget_bytes = opts
        .memory_budget
        .as_deref()
        .map(|t| crate::byte_size::parse_bytes(t).map_err(|e| anyhow!(e)))
        .transpose()
        .context("--memory-budget")?;
    if !(0.0..=10.0).contains(&opts.margin) {
        bail!("--margin {} must be between 0 and 10", opts.margin);
    }
    let cores = opts.cores.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let host = Orchestrator::open(OrchestratorConfig {
        state_dir: opts.state_dir.clone(),
        plugin_dir: plugin_dir.to_path_buf(),
        contracts: contracts.map(Path::to_path_buf),
        strategy,
        budget_bytes,
        margin: opts.margin,
        device: opts.device,
        cores,
        resume_interrupted: !opts.no_resume,
    })?;
    let budget = host.budget();
    eprintln!(
        "host: state {} · {} plugin(s) · {} budget {} · strategy {}",
        opts.state_dir.display(),
        host.registry().loaded.len(),
        budget.device,
        crate::byte_size::format_bytes(budget.total_bytes),
        opts.strategy
    );
    Ok(host)
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
    let host = open_host(plugin_dir, contracts, &args.host)?;
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
    host.run_until_idle(Duration::from_millis(50), |h| {
        if SIGNALLED.load(Ordering::SeqCst) {
            shutdown.store(true, Ordering::SeqCst);
        }
        if last_print.elapsed() >= Duration::from_secs(2) {
            last_print = Instant::now();
            print_progress_lines(h);
        }
    })?;
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
    crate::outln!("{table}");
    Ok(())
}

fn print_progress_lines(host: &Orchestrator) {
    let Ok(jobs) = host.all_job_views() else {
        return;
    };
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
        eprintln!(
            "job {} {}: {:.1}% · {}",
            job.job,
            job.name,
            100.0 * job.weighted_fraction,
            running.join(" · ")
        );
    }
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
        crate::outln!("no jobs in {}", state_dir.display());
    }
    print_status(&jobs);
    Ok(())
}

fn print_status(jobs: &[JobJson]) {
    for job in jobs {
        print_job(job);
    }
}
