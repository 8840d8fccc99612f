//! `tli-slurm`: tli beyond one machine. Slurm as the engine's remote executor, and
//! `tli worker`, the process that trains one task inside a Slurm job.
//!
//! * [`commands`]: `sbatch`, `squeue`, `scancel` and `sacct`, each with a
//!   timeout (Slurm's clients block while slurmctld is down).
//! * [`request`]: a task's Slurm request from its plugin's memory estimate
//!   (GPUs or GPU shards plus host memory for CUDA tasks, `--mem` for CPU
//!   tasks), its time limit and the signal that makes a worker checkpoint
//!   before the limit; and the batch script that starts `tli worker`.
//! * [`executor`]: [`SlurmExecutor`], Slurm behind the engine's
//!   `RemoteExecutor` seam (dispatch, poll, cancel, adopt).
//! * [`worker`]: `tli worker`, one task in a Slurm job, recording through the
//!   host's worker service.
//!
//! The engine's side (leases, re-queues after lost jobs, re-adoption after a
//! restart) is tli-runtime's `orchestrator::engine::dispatch`.
//!
//! Never depends on the server (`tli-server`) or on clap: the engine reaches
//! this crate only through `RemoteExecutor`, and a worker talks to the host
//! over gRPC with `tli-wire`'s messages (checked by `scripts/check-layers.sh`).

pub mod commands;
pub mod executor;
pub mod request;
pub mod worker;

use std::path::PathBuf;

pub use commands::{FinalState, JobState, Slurm, SlurmError};
pub use executor::SlurmExecutor;
pub use request::{GpuRequest, TaskRequest};

/// File name of the worker token inside the shared directory.
pub const WORKER_TOKEN_FILE: &str = "worker-token";

/// How the host runs tasks on Slurm (from `tli host serve|run --executor slurm`).
#[derive(Clone, Debug)]
pub struct SlurmConfig {
    /// `--partition`, when set.
    pub partition: Option<String>,
    /// `--account`, when set.
    pub account: Option<String>,
    /// More `sbatch` options, passed as given after tli's own (so they win).
    pub extra_args: Vec<String>,
    /// A directory every node sees at the same path: checkpoints, the
    /// worker token, batch scripts' output.
    pub shared_dir: PathBuf,
    /// The URL workers dial to reach the host's worker service.
    pub worker_url: String,
    /// The `tli` binary on the nodes.
    pub worker_binary: PathBuf,
    /// The plugin directory on the nodes.
    pub worker_plugin_dir: PathBuf,
    /// Where Slurm's client commands are; `None` = `PATH`.
    pub commands_dir: Option<PathBuf>,
    /// Whole GPUs or GPU shards for CUDA tasks.
    pub gpus: GpuRequest,
    /// CPUs per task (`--cpus-per-task`; also the worker's libtorch threads).
    pub cpus_per_task: u32,
    /// Slurm jobs of this host at most at once (queued in Slurm or running).
    pub max_jobs: usize,
    /// Seconds before the time limit at which Slurm signals the worker to
    /// checkpoint (`--signal=B:USR1@N`).
    pub signal_seconds: u32,
    /// How long a running job's worker may take to reach the host before
    /// the job is given up (cancelled and counted lost).
    pub attach_timeout: std::time::Duration,
}

impl SlurmConfig {
    /// The worker token's file.
    pub fn token_file(&self) -> PathBuf {
        self.shared_dir.join(WORKER_TOKEN_FILE)
    }

    /// Where batch scripts' output goes.
    pub fn output_dir(&self) -> PathBuf {
        self.shared_dir.join("slurm")
    }
}

/// Reads the worker token from `shared_dir`, or makes one (32 random bytes
/// as hex, file mode 0600) when there is none. A restarted host finds the
/// same token, so the workers it re-adopts are still accepted.
pub fn worker_token(config: &SlurmConfig) -> std::io::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = config.token_file();
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(&config.shared_dir)?;
    let mut bytes = [0u8; 32];
    let mut urandom = std::fs::File::open("/dev/urandom")?;
    std::io::Read::read_exact(&mut urandom, &mut bytes)?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(token.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(token)
}

/// This machine's host name ("" when it cannot be read).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    if !ok {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
