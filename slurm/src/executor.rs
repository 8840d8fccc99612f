//! Slurm behind the engine's [`RemoteExecutor`] seam: a task becomes an
//! `sbatch` job sized from its estimate (see [`request`](super::request)),
//! `squeue` says which jobs still live, `sacct` how one ended and what it
//! used, `scancel` gives one up. The engine keeps the leases, the re-queues
//! and the limits.

use super::commands::{Slurm, SlurmError};
use super::request::{batch_script, sbatch_args, TaskRequest};
use super::{GpuRequest, SlurmConfig};
use std::time::Duration;
use tli_runtime::orchestrator::executor::ExecutorKind;
use tli_runtime::orchestrator::remote_executor::{
    DispatchRequest, Dispatched, EndedJob, ExecutorError, LiveJob, PollReport, RemoteExecutor,
    WorkerSetup,
};
use tli_runtime::orchestrator::store::DispatchUsage;
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

/// `shards` GPU shards in GPUs, on a cluster that splits each GPU as `gpus`
/// says (a shard counts as a GPU where the split is unknown).
fn shards_as_gpus(shards: u32, gpus: &GpuRequest) -> f64 {
    match gpus {
        GpuRequest::Shards { per_gpu, .. } => f64::from(shards) / f64::from((*per_gpu).max(1)),
        GpuRequest::Whole => f64::from(shards),
    }
}

/// The GPUs a job's sbatch options asked for (`--gres=gpu:N`, or
/// `--gres=shard:K` as a fraction of a GPU split per `gpus`); 0 for none.
pub fn requested_gpus(request: &str, gpus: &GpuRequest) -> f64 {
    let count = |prefix: &str| {
        request
            .split_whitespace()
            .find_map(|a| a.strip_prefix(prefix))
            .and_then(|n| n.rsplit(':').next())
            .and_then(|n| n.parse::<u32>().ok())
    };
    if let Some(n) = count("--gres=gpu:") {
        return f64::from(n);
    }
    count("--gres=shard:").map_or(0.0, |k| shards_as_gpus(k, gpus))
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

    fn attach_timeout(&self) -> Duration {
        self.config.attach_timeout
    }

    fn poll(&self, jobs: &[String]) -> Result<PollReport, ExecutorError> {
        let states = self.commands.live_jobs().map_err(unavailable)?;
        let mut report = PollReport::default();
        for job in jobs {
            match states.get(job).filter(|s| s.is_alive()) {
                Some(s) => report.live.push(LiveJob {
                    external_id: job.clone(),
                    running: s.state == "RUNNING",
                    state: s.state.clone(),
                    reason: s.reason.clone(),
                }),
                None => {
                    let end = self.commands.final_state(job);
                    report.ended.push(EndedJob {
                        external_id: job.clone(),
                        started: end.as_ref().and_then(|e| e.started),
                        cancelled: end.as_ref().is_some_and(|e| {
                            e.state.starts_with("CANCELLED") || e.state.starts_with("PREEMPTED")
                        }),
                        state: end.map_or_else(|| "state unknown".into(), |e| e.state),
                    });
                }
            }
        }
        Ok(report)
    }

    fn usage(
        &self,
        jobs: &[(String, String)],
    ) -> Result<Vec<(String, DispatchUsage)>, ExecutorError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = jobs.iter().map(|(id, _)| id.clone()).collect();
        let accounted = self.commands.accounting(&ids).map_err(unavailable)?;
        Ok(jobs
            .iter()
            .filter_map(|(id, request)| {
                let a = accounted.get(id)?;
                // Accounting without GPU TRES (no AccountingStorageTRES=gres/gpu, or the
                // job-completion log): the GPUs the job asked for, which Slurm granted.
                let gpus = a
                    .gpus
                    .or(a.shards.map(|k| shards_as_gpus(k, &self.config.gpus)))
                    .unwrap_or_else(|| requested_gpus(request, &self.config.gpus));
                Some((
                    id.clone(),
                    DispatchUsage {
                        elapsed_seconds: a.elapsed_seconds as f64,
                        cpus: a.cpus,
                        gpus,
                    },
                ))
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
    use super::{is_transient, requested_gpus, GpuRequest};

    #[test]
    fn gpus_are_read_from_the_request_when_accounting_has_none() {
        let whole = GpuRequest::Whole;
        assert_eq!(
            requested_gpus("--job-name=tli-1 --gres=gpu:2 --mem=1G", &whole),
            2.0
        );
        assert_eq!(requested_gpus("--job-name=tli-1 --mem=1G", &whole), 0.0);
        let shards = GpuRequest::Shards {
            per_gpu: 4,
            gpu_bytes: 1 << 30,
        };
        assert_eq!(requested_gpus("--gres=shard:3", &shards), 0.75);
    }

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
