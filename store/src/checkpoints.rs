//! The checkpoints recorded for each task: adding, listing (newest first)
//! and forgetting them.

use rusqlite::params;

use super::jobs::task_exists;
use super::{int, BestMark, CheckpointRow, Store, StoreError};
use tli_core::selection::Mode;
use tli_core::{now_ms, TaskId};

impl Store {
    /// Records a checkpoint written for a task (`best`: one of its best,
    /// kept apart from the newest); returns its id.
    pub fn add_checkpoint(
        &self,
        task: TaskId,
        step: u64,
        path: &str,
        checksum: &str,
        best: Option<&BestMark>,
    ) -> Result<i64, StoreError> {
        let step = int("checkpoint step", step)?;
        let c = self.conn();
        task_exists(&c, task)?;
        c.execute(
            "INSERT INTO checkpoints (task_id, step, path, checksum, created_ms, best_metric,
                                      best_value, best_mode)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                task,
                step,
                path,
                checksum,
                now_ms(),
                best.map(|b| b.metric.as_str()),
                best.map(|b| b.value),
                best.map(|b| b.mode.as_str())
            ],
        )?;
        Ok(c.last_insert_rowid())
    }

    /// A task's checkpoints, newest (highest step, then latest) first: the
    /// newest-kept ones and the best ones alike ([`CheckpointRow::best`]).
    pub fn checkpoints(&self, task: TaskId) -> Result<Vec<CheckpointRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(
            "SELECT id, task_id, step, path, checksum, created_ms, best_metric, best_value,
                    best_mode FROM checkpoints
             WHERE task_id = ?1 ORDER BY step DESC, id DESC",
        )?;
        let rows = st.query_map([task], |r| {
            let metric: Option<String> = r.get(6)?;
            let value: Option<f64> = r.get(7)?;
            let mode: Option<String> = r.get(8)?;
            Ok(CheckpointRow {
                id: r.get(0)?,
                task_id: r.get(1)?,
                step: r.get(2)?,
                path: r.get(3)?,
                checksum: r.get(4)?,
                created_ms: r.get(5)?,
                best: match (metric, value) {
                    (Some(metric), Some(value)) => Some(BestMark {
                        mode: mode
                            .and_then(|m| m.parse().ok())
                            .unwrap_or_else(|| Mode::for_metric(&metric)),
                        metric,
                        value,
                    }),
                    _ => None,
                },
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The task's best checkpoints (`keep_best`), best first (ties: the
    /// earlier step first).
    pub fn best_checkpoints(&self, task: TaskId) -> Result<Vec<CheckpointRow>, StoreError> {
        let mut best: Vec<CheckpointRow> = self
            .checkpoints(task)?
            .into_iter()
            .filter(|r| r.best.is_some())
            .collect();
        best.sort_by(|a, b| match (&a.best, &b.best) {
            (Some(x), Some(y)) => x.mode.order(x.value, y.value).then(a.step.cmp(&b.step)),
            _ => std::cmp::Ordering::Equal,
        });
        Ok(best)
    }

    /// The task's best checkpoint (by its `keep_best` metric), if it keeps any.
    pub fn best_checkpoint(&self, task: TaskId) -> Result<Option<CheckpointRow>, StoreError> {
        Ok(self.best_checkpoints(task)?.into_iter().next())
    }

    /// Forgets a checkpoint; returns whether there was one with that id.
    pub fn remove_checkpoint(&self, id: i64) -> Result<bool, StoreError> {
        let c = self.conn();
        Ok(c.execute("DELETE FROM checkpoints WHERE id = ?1", [id])? > 0)
    }
}
