//! The executor options of `tli host run|serve` → the orchestrator's
//! executor settings (and, for Slurm, the worker token and URL).

use crate::orchestrator::executor::ExecutorKind;
use crate::slurm::{GpuRequest, SlurmConfig};
use anyhow::{anyhow, bail, Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tli_cli::args::HostOptions;

/// An absolute form of `path` (relative to the working directory): every
/// node must find it at the same place.
fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path)
        .with_context(|| format!("{}: cannot make it absolute", path.display()))
}

/// The URL workers dial when `--worker-url` is not given: the listening
/// address, with this machine's name for an unspecified address (0.0.0.0).
pub(super) fn default_worker_url(listening: SocketAddr) -> String {
    if listening.ip().is_unspecified() {
        let name = crate::slurm::host_name();
        let name = if name.is_empty() {
            "localhost".into()
        } else {
            name
        };
        format!("http://{name}:{}", listening.port())
    } else {
        format!("http://{listening}")
    }
}

/// The Slurm settings when the host's executor is `slurm` (`None` for
/// `local`). `listening` is where the worker service will be served.
pub(super) fn slurm_config(
    opts: &HostOptions,
    plugin_dir: &Path,
    listening: Option<SocketAddr>,
) -> Result<Option<SlurmConfig>> {
    let e = &opts.executor;
    if e.executor != ExecutorKind::Slurm {
        return Ok(None);
    }
    let shared_dir = absolute(e.shared_dir.as_deref().unwrap_or(&opts.state_dir))?;
    let worker_url = match (&e.worker_url, listening) {
        (Some(url), _) => url.clone(),
        (None, Some(addr)) => default_worker_url(addr),
        (None, None) => bail!("--worker-url: required (how workers reach this host)"),
    };
    if !(worker_url.starts_with("http://") || worker_url.starts_with("https://")) {
        bail!("--worker-url {worker_url}: expected http://HOST:PORT");
    }
    let worker_binary = match &e.worker_binary {
        Some(path) => absolute(path)?,
        None => std::env::current_exe().context("cannot find this tli binary for the workers")?,
    };
    let gpus = match e.slurm_gpu_shards {
        None => GpuRequest::Whole,
        Some(0) => bail!("--slurm-gpu-shards: must be at least 1"),
        Some(per_gpu) => {
            let text = e
                .slurm_gpu_memory
                .as_deref()
                .ok_or_else(|| anyhow!("--slurm-gpu-shards needs --slurm-gpu-memory"))?;
            let gpu_bytes = crate::byte_size::parse_bytes(text)
                .map_err(|m| anyhow!("--slurm-gpu-memory {text}: {m}"))?;
            GpuRequest::Shards { per_gpu, gpu_bytes }
        }
    };
    if e.slurm_cpus_per_task == 0 {
        bail!("--slurm-cpus-per-task: must be at least 1");
    }
    if e.slurm_attach_timeout == 0 {
        bail!("--slurm-attach-timeout: must be at least 1 second");
    }
    if e.slurm_max_jobs == 0 {
        bail!("--slurm-max-jobs: must be at least 1");
    }
    Ok(Some(SlurmConfig {
        partition: e.slurm_partition.clone(),
        account: e.slurm_account.clone(),
        extra_args: e.slurm_sbatch_args.clone(),
        shared_dir,
        worker_url,
        worker_binary,
        worker_plugin_dir: absolute(e.worker_plugin_dir.as_deref().unwrap_or(plugin_dir))?,
        commands_dir: e.slurm_bin_dir.clone(),
        gpus,
        cpus_per_task: e.slurm_cpus_per_task,
        max_jobs: e.slurm_max_jobs,
        signal_seconds: e.slurm_signal_seconds,
        attach_timeout: std::time::Duration::from_secs(e.slurm_attach_timeout),
    }))
}

/// The worker token of a Slurm host (made on first use).
pub(super) fn worker_token(config: &SlurmConfig) -> Result<String> {
    crate::slurm::worker_token(config).with_context(|| {
        format!(
            "worker token {}: cannot read or create it (the shared directory must be writable)",
            config.token_file().display()
        )
    })
}
