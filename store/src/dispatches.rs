//! Dispatches: a task handed to an executor beyond the host (a Slurm job
//! per attempt). The row id is the lease its worker acts under; the row is
//! open until the attempt ends, and a restarted host re-adopts the open rows
//! whose Slurm job still lives.

use rusqlite::{params, OptionalExtension};

use super::jobs::task_exists;
use super::{Store, StoreError};
use tli_core::{now_ms, TaskId};

/// A row of `dispatches`.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchRow {
    pub id: i64,
    pub task_id: TaskId,
    /// `slurm`.
    pub executor: String,
    /// The Slurm job id, once submitted.
    pub external_id: Option<String>,
    /// What was asked of the executor (the sbatch options, space-separated).
    pub request: Option<String>,
    /// Where the worker said it runs.
    pub node: Option<String>,
    pub submitted_ms: i64,
    pub ended_ms: Option<i64>,
    pub end_reason: Option<String>,
    /// What its job used, once the executor's accounting said.
    pub usage: Option<DispatchUsage>,
}

/// What a dispatch's job used, from the executor's accounting.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DispatchUsage {
    pub elapsed_seconds: f64,
    pub cpus: u32,
    /// Whole GPUs, or a fraction of one for GPU shards.
    pub gpus: f64,
}

impl DispatchUsage {
    pub fn cpu_seconds(&self) -> f64 {
        self.elapsed_seconds * f64::from(self.cpus)
    }

    pub fn gpu_seconds(&self) -> f64 {
        self.elapsed_seconds * self.gpus
    }
}

const COLUMNS: &str = "id, task_id, executor, external_id, request, node, submitted_ms, ended_ms, \
                       end_reason, usage_elapsed_s, usage_cpus, usage_gpus";

fn dispatch_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DispatchRow> {
    Ok(DispatchRow {
        id: r.get(0)?,
        task_id: r.get(1)?,
        executor: r.get(2)?,
        external_id: r.get(3)?,
        request: r.get(4)?,
        node: r.get(5)?,
        submitted_ms: r.get(6)?,
        ended_ms: r.get(7)?,
        end_reason: r.get(8)?,
        usage: match (r.get::<_, Option<f64>>(9)?, r.get::<_, Option<u32>>(10)?) {
            (Some(elapsed_seconds), Some(cpus)) => Some(DispatchUsage {
                elapsed_seconds,
                cpus,
                gpus: r.get::<_, Option<f64>>(11)?.unwrap_or(0.0),
            }),
            _ => None,
        },
    })
}

impl Store {
    /// Opens a dispatch of `task` to `executor`; returns its id (the lease).
    pub fn open_dispatch(&self, task: TaskId, executor: &str) -> Result<i64, StoreError> {
        let c = self.conn();
        task_exists(&c, task)?;
        c.execute(
            "INSERT INTO dispatches (task_id, executor, submitted_ms) VALUES (?1, ?2, ?3)",
            params![task, executor, now_ms()],
        )?;
        Ok(c.last_insert_rowid())
    }

    /// Records a submitted dispatch: the executor's id (the Slurm job id)
    /// and what was asked of it.
    pub fn set_dispatch_submitted(
        &self,
        id: i64,
        external: &str,
        request: &str,
    ) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE dispatches SET external_id = ?2, request = ?3 WHERE id = ?1",
            params![id, external, request],
        )?;
        Ok(())
    }

    /// Records the node a dispatch's worker runs on.
    pub fn set_dispatch_node(&self, id: i64, node: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE dispatches SET node = ?2 WHERE id = ?1",
            params![id, node],
        )?;
        Ok(())
    }

    /// Closes a dispatch (no-op when it is already closed).
    pub fn end_dispatch(&self, id: i64, reason: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE dispatches SET ended_ms = ?2, end_reason = ?3
             WHERE id = ?1 AND ended_ms IS NULL",
            params![id, now_ms(), reason],
        )?;
        Ok(())
    }

    /// Records what a dispatch's job used.
    pub fn set_dispatch_usage(&self, id: i64, usage: &DispatchUsage) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE dispatches SET usage_elapsed_s = ?2, usage_cpus = ?3, usage_gpus = ?4
             WHERE id = ?1",
            params![id, usage.elapsed_seconds, usage.cpus, usage.gpus],
        )?;
        Ok(())
    }

    /// Submitted dispatches that ended at or after `since_ms` and whose usage
    /// is not known yet, oldest first (at most 200).
    pub fn dispatches_awaiting_usage(&self, since_ms: i64) -> Result<Vec<DispatchRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(&format!(
            "SELECT {COLUMNS} FROM dispatches
             WHERE ended_ms >= ?1 AND external_id IS NOT NULL AND usage_elapsed_s IS NULL
             ORDER BY id LIMIT 200"
        ))?;
        let rows = st.query_map([since_ms], dispatch_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One dispatch by id.
    pub fn dispatch(&self, id: i64) -> Result<Option<DispatchRow>, StoreError> {
        let c = self.reader();
        Ok(c.query_row(
            &format!("SELECT {COLUMNS} FROM dispatches WHERE id = ?1"),
            [id],
            dispatch_from_row,
        )
        .optional()?)
    }

    /// Every open dispatch, oldest first.
    pub fn open_dispatches(&self) -> Result<Vec<DispatchRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(&format!(
            "SELECT {COLUMNS} FROM dispatches WHERE ended_ms IS NULL ORDER BY id"
        ))?;
        let rows = st.query_map([], dispatch_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A task's dispatches, oldest first.
    pub fn dispatches_of(&self, task: TaskId) -> Result<Vec<DispatchRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(&format!(
            "SELECT {COLUMNS} FROM dispatches WHERE task_id = ?1 ORDER BY id"
        ))?;
        let rows = st.query_map([task], dispatch_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
