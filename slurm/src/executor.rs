//! Slurm behind the engine's [`RemoteExecutor`] seam: a task becomes an
//! `sbatch` job sized from its estimate (see [`request`](super::request)),
//! `squeue` says which jobs still live, `sacct` how one ended, `scancel`
//! gives one up. The engine keeps the leases, the re-queues and the limits.

use super::commands::{Slurm, SlurmError};
use super::request::{batch_script, sbatch_args, TaskRequest};
use super::SlurmConfig;
use tli_runtime::orchestrator::executor::ExecutorKind;
use tli_runtime::orchestrator::remote_executor::{
    DispatchRequest, Dispatched, EndedJob, ExecutorError, RemoteExecutor, WorkerSetup,
};
use tli_runtime::orchestrator::TaskId;

/// The host's Slurm executor.
pub struct SlurmExecutor {
    pub config: SlurmConfig,
    commands: Slurm,
}

impl SlurmExecutor {
    pub fn new(config: SlurmConfig) -> Self {
        let commands = Slurm {
            bin_dir: config.commands_dir.clone(),
        };
        Self { config, commands }
    }
}

fn unavailable(e: SlurmError) -> ExecutorError {
    match e {
        SlurmError::Refused { message, .. } if is_transient(&message) => ExecutorError::Transient {
            executor: "Slurm",
            message,
        },
        SlurmError::Refused { message, .. } => ExecutorError::Refused {
            executor: "Slurm",
            message,
        },
        e @ SlurmError::Timeout { .. } => ExecutorError::Transient {
            executor: "Slurm",
            message: e.to_string(),
        },
        other => ExecutorError::Unavailable(Box::new(other)),
    }
}

/// Whether Slurm's refusal says it could not be reached now (a controller
/// restarting or overloaded), not that the request is wrong.
pub fn is_transient(message: &str) -> bool {
    const SIGNS: [&str; 8] = [
        "unable to contact slurm controller",
        "socket timed out",
        "connection refused",
        "communication connection failure",
        "zero bytes were transmitted or received",
        "temporarily unavailable",
        "not responding",
        "try again",
    ];
    let message = message.to_lowercase();
    SIGNS.iter().any(|sign| message.contains(sign))
}

/// The output directory could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot create {dir} for the Slurm job's output: {source}")]
struct OutputDirError {
    dir: String,
    source: std::io::Error,
}

impl RemoteExecutor for SlurmExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Slurm
    }

    fn name(&self) -> &'static str {
        "Slurm"
    }

    fn capacity(&self) -> usize {
        self.config.max_jobs
    }

    fn dispatch(&self, request: &DispatchRequest<'_>) -> Result<Dispatched, ExecutorError> {
        let task = TaskRequest {
            task: request.task,
            dispatch: request.dispatch,
            device: request.device,
            estimate_bytes: request.reserved_bytes,
            data_bytes: tli_wire::worker_inputs::data_bytes(request.inputs),
            gpus: request.spec.slurm.gpus(),
            time_limit_minutes: request.spec.slurm.time_limit_minutes,
        };
        let dir = self.config.output_dir();
        std::fs::create_dir_all(&dir).map_err(|source| {
            ExecutorError::Unavailable(Box::new(OutputDirError {
                dir: dir.display().to_string(),
                source,
            }))
        })?;
        let args = sbatch_args(&self.config, &task);
        let external_id = self
            .commands
            .submit(&args, &batch_script(&self.config, &task))
            .map_err(unavailable)?;
        Ok(Dispatched {
            external_id,
            request: args.join(" "),
        })
    }

    fn poll(&self, jobs: &[String]) -> Result<Vec<EndedJob>, ExecutorError> {
        let live = self.commands.live_jobs().map_err(unavailable)?;
        Ok(jobs
            .iter()
            .filter(|job| !live.get(*job).is_some_and(|s| s.is_alive()))
            .map(|job| {
                let end = self.commands.final_state(job);
                EndedJob {
                    external_id: job.clone(),
                    started: end.as_ref().and_then(|e| e.started),
                    state: end.map_or_else(|| "state unknown".into(), |e| e.state),
                }
            })
            .collect())
    }

    fn cancel(&self, external_id: &str) -> Result<(), ExecutorError> {
        self.commands.cancel(external_id).map_err(unavailable)
    }

    fn adopt(&self, jobs: &[String]) -> Result<Vec<String>, ExecutorError> {
        let live = self.commands.live_jobs().map_err(unavailable)?;
        Ok(jobs
            .iter()
            .filter(|job| live.get(*job).is_some_and(|s| s.is_alive()))
            .cloned()
            .collect())
    }

    fn worker_setup(&self, task: TaskId) -> WorkerSetup {
        WorkerSetup {
            checkpoint_dir: self
                .config
                .shared_dir
                .join("checkpoints")
                .join(format!("task-{task}")),
            threads: self.config.cpus_per_task.max(1),
        }
    }

    fn lost_job_output(&self, task: TaskId, dispatch: i64) -> String {
        let path = self
            .config
            .output_dir()
            .join(format!("task-{task}-dispatch-{dispatch}.out"));
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().rev().take(5).collect();
                let tail: Vec<&str> = lines.into_iter().rev().collect();
                format!("; {} ends: {}", path.display(), tail.join(" | "))
            }
            Err(_) => format!("; no output at {}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_transient;

    #[test]
    fn a_controller_outage_is_transient_and_a_bad_request_is_not() {
        assert!(is_transient(
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller \
             (connect failure)"
        ));
        assert!(is_transient(
            "sbatch: error: Socket timed out on send/recv operation"
        ));
        assert!(!is_transient(
            "sbatch: error: Batch job submission failed: Requested node configuration is not \
             available"
        ));
        assert!(!is_transient(
            "sbatch: error: invalid partition specified: gpu"
        ));
    }
}
