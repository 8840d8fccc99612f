//! The engine's errors: why a job was not accepted ([`SubmitError`]), and
//! a failure of the orchestrator itself or a request it refuses
//! ([`OrchestratorError`]). Each variant carries what its message needs;
//! the API maps them to status codes (tli-server's `api::convert`).

use crate::orchestrator::executor::ExecutorKind;
use crate::orchestrator::remote_executor::ExecutorError;
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::StoreError;
use crate::orchestrator::{JobId, TaskId};
use std::path::PathBuf;
use tli_core::config_schema;
use tli_plugin_api::Device;

/// Why a job was not accepted. Nothing is stored when submission fails.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("invalid job spec: {0}")]
    Spec(#[from] tli_core::job::SpecError),
    /// The job asks for the Slurm executor and this host has none.
    #[error(
        "executor: this host has no Slurm executor; start it with --executor slurm \
         (see docs/scale-out.md) or leave \"executor\" out"
    )]
    NoSlurmExecutor,
    /// A model's config breaks the JSON Schema its plugin declares.
    #[error("models[{model}] ({plugin}): {violation}")]
    Config {
        model: usize,
        plugin: String,
        violation: config_schema::SchemaViolation,
    },
    /// The checked spec could not be encoded for the store (a host defect).
    #[error("the job spec could not be encoded for the store: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("models[{model}] ({plugin}): {message}")]
    Model {
        model: usize,
        plugin: String,
        message: String,
    },
    #[error("assets[{asset}] ({label}): {message}")]
    Asset {
        asset: usize,
        label: String,
        message: String,
    },
    #[error("task {plugin} × {asset} is too big: {message}")]
    TooBig {
        plugin: String,
        asset: String,
        message: String,
    },
    /// A local task on another device than the host's (a Slurm task may
    /// ask for any: the node Slurm picks has it).
    #[error("device: this host runs tasks on {host}, not {asked}")]
    WrongDevice { host: Device, asked: Device },
    /// A bar file outside the host's data roots (or one it cannot resolve).
    #[error("assets[{asset}]: {error}")]
    DataRoot {
        asset: usize,
        error: crate::orchestrator::data_root::DataRootError,
    },
    /// A covariate file outside the host's data roots (or one it cannot resolve).
    #[error("features: column {column}: file {error}")]
    CovariateRoot {
        column: String,
        error: crate::orchestrator::data_root::DataRootError,
    },
    /// A sweep its plugin refuses: a key it lacks, a value outside its
    /// schema, rungs its validation cadence misses.
    #[error("sweep: {0}")]
    Sweep(#[from] tli_core::sweep::SweepError),
    #[error(
        "sweep: trial {trial} validates every {every} steps, which does not divide the rung at \
         step {rung}; choose grace_period and max_steps as multiples of it, or set \
         config.valid_every (or valid_metrics_interval) to a divisor of them"
    )]
    RungsMissValidation { trial: usize, every: u64, rung: u64 },
    #[error("job store: {0}")]
    Store(#[from] StoreError),
}

/// A failure of the orchestrator itself (not of one task), or a request it
/// refuses (an unknown job or task, a task that cannot be stopped).
#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    #[error("job store: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    #[error("job {0} not found")]
    NoSuchJob(JobId),
    #[error(transparent)]
    List(#[from] crate::orchestrator::listing::ListError),
    #[error("task {task} not found in job {job}")]
    NoSuchTask { job: JobId, task: TaskId },
    /// A stop of a task that is not queued or running.
    #[error("task {task} of job {job} is {state}; only queued or running tasks can be stopped")]
    TaskNotStoppable {
        job: JobId,
        task: TaskId,
        state: TaskState,
    },
    /// A stop of a job none of whose tasks is queued or running; `states`
    /// counts its tasks by state (`2 completed, 1 failed`).
    #[error("job {job} has no queued or running task to stop ({states})")]
    NothingToStop { job: JobId, states: String },
    /// A task id the store does not know.
    #[error("no task {0}")]
    UnknownTask(TaskId),
    /// At start-up the remote executor could not say which of the jobs a
    /// previous host left still run.
    #[error("cannot ask {executor} whether this host's {open} job(s) still run: {source}")]
    Executor {
        executor: ExecutorKind,
        open: usize,
        source: ExecutorError,
    },
    /// The crash record a previous host left could not be read.
    #[error("{}: {source}", path.display())]
    CrashRecord {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Accepting a job's changed inputs needs each file readable now.
    #[error("job {job}: cannot accept its inputs as they are now: {message}")]
    Inputs { job: JobId, message: String },
    #[error("cannot start the plugin watch: {0}")]
    PluginWatch(#[source] std::io::Error),
    /// The contract file (`--contracts`) could not be loaded.
    #[error(transparent)]
    Contracts(#[from] tli_data::DataError),
    /// The CPU budget could not be computed from the machine's memory.
    #[error(transparent)]
    CpuBudget(#[from] crate::orchestrator::arbiter::MeminfoError),
    /// The device's memory could not be read from CUDA.
    #[error("{device}: {source}")]
    DeviceMemory {
        device: Device,
        source: crate::orchestrator::cuda::CudaError,
    },
}
