//! Task states and the transitions allowed between them.
//!
//! ```text
//! queued ──▶ running ──▶ checkpointing ──▶ running … ──▶ completed
//!    │          │               │
//!    │          ├──▶ failed     ├──▶ failed / cancelled / interrupted / completed
//!    │          ├──▶ cancelled  │
//!    │          ├──▶ interrupted (host died; found so at start-up)
//!    │          └──▶ queued (out of memory: re-queued)
//!    └──▶ cancelled / failed (refused before it ran)
//! interrupted, cancelled, failed ──▶ queued (resume from the last checkpoint)
//! ```
//! `completed` is final.

use serde::{Deserialize, Serialize};

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Queued,
    Running,
    Checkpointing,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

impl TaskState {
    pub const ALL: [TaskState; 7] = [
        Self::Queued,
        Self::Running,
        Self::Checkpointing,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
        Self::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Checkpointing => "checkpointing",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// A task in this state holds (or is about to hold) a runner thread.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Running | Self::Checkpointing)
    }

    /// Nothing more happens to the task unless someone resumes it.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// A stop request applies: the task is queued or running (a stop of
    /// anything else is refused, by the API and the orchestrator alike).
    pub fn is_stoppable(self) -> bool {
        matches!(self, Self::Queued | Self::Running | Self::Checkpointing)
    }

    /// A resume re-queues it (from its last good checkpoint).
    pub fn is_resumable(self) -> bool {
        matches!(self, Self::Cancelled | Self::Failed | Self::Interrupted)
    }

    pub fn can_become(self, to: TaskState) -> bool {
        use TaskState::*;
        matches!(
            (self, to),
            (Queued, Running | Cancelled | Failed)
                | (
                    Running,
                    Checkpointing | Completed | Failed | Cancelled | Interrupted | Queued
                )
                | (
                    Checkpointing,
                    Running | Completed | Failed | Cancelled | Interrupted | Queued
                )
                | (Interrupted | Cancelled | Failed, Queued)
                | (Interrupted, Cancelled)
        )
    }
}

impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_completed_is_final() {
        for s in TaskState::ALL {
            assert_eq!(TaskState::parse(s.as_str()), Some(s));
            assert!(!TaskState::Completed.can_become(s));
        }
        assert!(TaskState::Interrupted.can_become(TaskState::Queued));
        assert!(!TaskState::Queued.can_become(TaskState::Completed));
    }
}
