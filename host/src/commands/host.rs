//! `tli host run` (the orchestrator in the foreground) and `tli host status`.

use super::{new_table, print_json};
use crate::cli::{HostOptions, HostRunArgs, OutputFormat};
use crate::orchestrator::engine::{HostConfig, Orchestrator};
use crate::orchestrator::job::JobSpec;
use crate::orchestrator::progress::{job_progress, JobProgress};
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
        .map(|t| crate::units::parse_bytes(t).map_err(|e| anyhow!(e)))
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
    let host = Orchestrator::open(HostConfig {
        state_dir: opts.state_dir.clone(),
        plugin_dir: plugin_dir.to_path_buf(),
        contracts: contracts.map(Path::to_path_buf),
        strategy,
        budget_bytes,
        margin: opts.margin,
        device: opts.device.clone(),
        cores,
        resume_interrupted: !opts.no_resume,
    })?;
    let budget = host.budget();
    eprintln!(
        "host: state {} · {} plugin(s) · {} budget {} · strategy {}",
        opts.state_dir.display(),
        host.registry().loaded.len(),
        budget.device,
        crate::units::format_bytes(budget.total_bytes),
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
            spec.models.len() * spec.assets.len()
        );
    }
    if args.plan {
        let jobs = all_progress(host.store(), None)?;
        return if output == OutputFormat::Json {
            print_json(&jobs)
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
            print_progress_lines(h.store());
        }
    })?;
    let jobs = all_progress(host.store(), None)?;
    if output == OutputFormat::Json {
        print_json(&jobs)?;
    } else {
        print_status(&jobs);
    }
    let failed: usize = jobs
        .iter()
        .flat_map(|j| &j.tasks)
        .filter(|t| t.state == TaskState::Failed)
        .count();
    if SIGNALLED.load(Ordering::SeqCst) {
        eprintln!("host stopped by signal; running tasks were checkpointed and resume at the next `tli host run`");
    } else if failed > 0 {
        bail!("{failed} task(s) failed");
    }
    Ok(())
}

fn print_plan(jobs: &[JobProgress]) -> Result<()> {
    let mut table = new_table(vec![
        "JOB",
        "TASK",
        "PLUGIN",
        "ASSET",
        "STEPS",
        "MEMORY ESTIMATE",
    ]);
    for job in jobs {
        for t in &job.tasks {
            table.add_row(vec![
                job.job.to_string(),
                t.task.to_string(),
                t.plugin.clone(),
                t.asset.clone(),
                t.total_steps.to_string(),
                crate::units::format_bytes(t.estimate_bytes),
            ]);
        }
    }
    println!("{table}");
    Ok(())
}

fn print_progress_lines(store: &Store) {
    let Ok(jobs) = all_progress(store, None) else {
        return;
    };
    for job in jobs.iter().filter(|j| !j.is_finished()) {
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

fn all_progress(store: &Store, only: Option<i64>) -> Result<Vec<JobProgress>> {
    let mut out = Vec::new();
    for job in store.jobs()? {
        if only.is_some_and(|j| j != job.id) {
            continue;
        }
        if let Some(p) = job_progress(store, job.id)? {
            out.push(p);
        }
    }
    if let Some(j) = only {
        if out.is_empty() {
            bail!("no job {j} in this state directory");
        }
    }
    Ok(out)
}

pub(super) fn status(state_dir: &Path, job: Option<i64>, output: OutputFormat) -> Result<()> {
    let store = Store::open_read_only(state_dir)?;
    let jobs = all_progress(&store, job)?;
    if output == OutputFormat::Json {
        return print_json(&jobs);
    }
    if jobs.is_empty() {
        println!("no jobs in {}", state_dir.display());
    }
    print_status(&jobs);
    Ok(())
}

fn print_status(jobs: &[JobProgress]) {
    for job in jobs {
        println!(
            "job {} {} — {:.1}% (cost-weighted)",
            job.job,
            job.name,
            100.0 * job.weighted_fraction
        );
        let mut table = new_table(vec![
            "TASK",
            "PLUGIN",
            "ASSET",
            "STATE",
            "STEPS",
            "STEPS/S",
            "ETA",
            "LATEST METRICS",
        ]);
        for t in &job.tasks {
            let metrics = t
                .metrics
                .iter()
                .take(4)
                .map(|(k, v)| format!("{k}={v:.4}"))
                .collect::<Vec<_>>()
                .join(" ");
            let state = match &t.error {
                Some(e) if t.state == TaskState::Failed => format!("failed: {e}"),
                _ => t.state.to_string(),
            };
            table.add_row(vec![
                t.task.to_string(),
                t.plugin.clone(),
                t.asset.clone(),
                state,
                format!("{}/{}", t.steps_done, t.total_steps),
                if t.steps_per_second > 0.0 {
                    format!("{:.0}", t.steps_per_second)
                } else {
                    "-".into()
                },
                t.eta_seconds
                    .map(|s| format!("{s:.0}s"))
                    .unwrap_or_else(|| "-".into()),
                metrics,
            ]);
        }
        println!("{table}");
    }
}
