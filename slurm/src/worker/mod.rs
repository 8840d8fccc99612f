//! `tli worker`: one task, started by Slurm, trained by the same runner
//! code as the host's own threads ([`tli_runtime::orchestrator::runner`]).
//!
//! The worker connects back to its host's worker service with the worker
//! token, claims its task under its lease (the dispatch id on its command
//! line), receives the task's config and every dataset, loads the plugin
//! from its own plugin directory (refusing one whose version differs from
//! the host's), and trains in slices. Everything it records goes through the
//! host ([`record::RemoteRecord`]): the host stays the only writer of its
//! store. Checkpoints are written to the shared directory the host names.
//!
//! Stops: a heartbeat every [`HEARTBEAT_INTERVAL`] carries live progress and
//! plugin log lines and brings back the host's stop request (graceful,
//! forced, host shutdown). Slurm's signals (SIGTERM from `scancel`, SIGUSR1
//! before the time limit, SIGINT) make the task checkpoint and end
//! `interrupted`; the host re-queues it in a new Slurm job.
//!
//! * [`client`]: the gRPC connection, with retries while the host is away.
//! * [`record`]: the worker's task record.
//! * [`run`]: the worker's life: attach, check, heartbeat, train.

pub mod client;
pub mod record;
pub mod run;

use std::time::Duration;

/// How often a worker reports live progress and asks for stop requests.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// Why a worker could not run its task.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("{0}")]
    Setup(String),
    /// The host no longer lists this worker's lease: the task was stopped,
    /// re-queued or given to another Slurm job.
    #[error("the host refused this worker's lease: {0}")]
    LeaseLost(String),
    #[error("{call} at {url}: {code:?}: {message}")]
    Host {
        call: String,
        url: String,
        code: tonic::Code,
        message: String,
    },
    #[error(transparent)]
    Wire(#[from] tli_wire::worker_inputs::WireError),
    #[error(transparent)]
    Registry(#[from] tli_runtime::registry::RegistryError),
}
