//! The checkpoints recorded for each task: adding, listing (newest first)
//! and forgetting them.

use rusqlite::params;

use super::jobs::task_exists;
use super::{int, CheckpointRow, Store, StoreError};
use tli_core::{now_ms, TaskId};

impl Store {
    /// Records a checkpoint written for a task; returns its id.
    pub fn add_checkpoint(
        &self,
        task: TaskId,
        step: u64,
        path: &str,
        checksum: &str,
    ) -> Result<i64, StoreError> {
        let step = int("checkpoint step", step)?;
        let c = self.conn();
        task_exists(&c, task)?;
        c.execute(
            "INSERT INTO checkpoints (task_id, step, path, checksum, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![task, step, path, checksum, now_ms()],
        )?;
        Ok(c.last_insert_rowid())
    }

    /// A task's checkpoints, newest (highest step, then latest) first.
    pub fn checkpoints(&self, task: TaskId) -> Result<Vec<CheckpointRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(
            "SELECT id, task_id, step, path, checksum, created_ms FROM checkpoints
             WHERE task_id = ?1 ORDER BY step DESC, id DESC",
        )?;
        let rows = st.query_map([task], |r| {
            Ok(CheckpointRow {
                id: r.get(0)?,
                task_id: r.get(1)?,
                step: r.get(2)?,
                path: r.get(3)?,
                checksum: r.get(4)?,
                created_ms: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Forgets a checkpoint; returns whether there was one with that id.
    pub fn remove_checkpoint(&self, id: i64) -> Result<bool, StoreError> {
        let c = self.conn();
        Ok(c.execute("DELETE FROM checkpoints WHERE id = ?1", [id])? > 0)
    }
}
