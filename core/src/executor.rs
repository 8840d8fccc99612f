//! Where a task's runner runs: in the host (`local`: a runner thread, the
//! default) or in a `tli worker` started by Slurm on whichever node Slurm
//! picks (`slurm`). A host has a default executor; a job spec may pin one.
//! What a job may ask of Slurm per task is [`SlurmJobOptions`].

use crate::spec_error::SpecError;
use serde::{Deserialize, Serialize};

/// An executor of tasks.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    /// Runner threads in the host process.
    #[default]
    Local,
    /// One Slurm job per task attempt, running `tli worker`.
    Slurm,
}

impl ExecutorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorKind::Local => "local",
            ExecutorKind::Slurm => "slurm",
        }
    }
}

impl std::fmt::Display for ExecutorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ExecutorKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "local" => Ok(ExecutorKind::Local),
            "slurm" => Ok(ExecutorKind::Slurm),
            other => Err(format!(
                "unknown executor {other:?}: expected \"local\" or \"slurm\""
            )),
        }
    }
}

/// Most GPUs one task may ask for.
pub const MAX_GPUS_PER_TASK: u32 = 64;
/// Longest Slurm time limit a job may set, in minutes (one year).
pub const MAX_TIME_LIMIT_MINUTES: u64 = 525_600;

/// What a job asks of Slurm for each of its tasks (ignored by the local executor).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmJobOptions {
    /// GPUs per task on a CUDA device (default 1). Slurm refuses a request
    /// no node can meet; the task then fails with Slurm's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_task: Option<u32>,
    /// Each task's Slurm time limit in minutes (`--time`). Near it Slurm
    /// signals the worker, which checkpoints; the task then continues in a
    /// new Slurm job. Default: the partition's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_minutes: Option<u64>,
}

impl SlurmJobOptions {
    /// GPUs per task, the default applied.
    pub fn gpus(&self) -> u32 {
        self.gpus_per_task.unwrap_or(1)
    }

    pub fn is_default(&self) -> bool {
        self == &Self::default()
    }

    /// Range checks; errors name the field.
    pub fn check(&self) -> Result<(), SpecError> {
        if let Some(g) = self.gpus_per_task {
            if g == 0 || g > MAX_GPUS_PER_TASK {
                return Err(SpecError::field(
                    "slurm.gpus_per_task",
                    format!("{g} is outside 1..={MAX_GPUS_PER_TASK}"),
                ));
            }
        }
        if let Some(m) = self.time_limit_minutes {
            if m == 0 || m > MAX_TIME_LIMIT_MINUTES {
                return Err(SpecError::field(
                    "slurm.time_limit_minutes",
                    format!("{m} is outside 1..={MAX_TIME_LIMIT_MINUTES}"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executors_parse_and_print() {
        for kind in [ExecutorKind::Local, ExecutorKind::Slurm] {
            assert_eq!(kind.as_str().parse::<ExecutorKind>(), Ok(kind));
        }
        assert_eq!(" Slurm ".parse::<ExecutorKind>(), Ok(ExecutorKind::Slurm));
        assert!("k8s".parse::<ExecutorKind>().unwrap_err().contains("local"));
    }

    #[test]
    fn slurm_options_are_checked() {
        assert!(SlurmJobOptions::default().check().is_ok());
        let zero = SlurmJobOptions {
            gpus_per_task: Some(0),
            ..Default::default()
        };
        assert!(zero
            .check()
            .unwrap_err()
            .to_string()
            .contains("slurm.gpus_per_task"));
        let long = SlurmJobOptions {
            time_limit_minutes: Some(MAX_TIME_LIMIT_MINUTES + 1),
            ..Default::default()
        };
        assert!(long
            .check()
            .unwrap_err()
            .to_string()
            .contains("time_limit_minutes"));
    }
}
