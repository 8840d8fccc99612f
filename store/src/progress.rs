//! A task's progress: steps done, the metrics measured along the way (their
//! history and their latest values) and the device memory it was measured
//! to use.

use rusqlite::{params, TransactionBehavior};

use super::schema::REBUILD_LATEST_METRICS;
use super::{int, MeasuredMemory, SliceMetrics, Store, StoreError};
use tli_core::{now_ms, TaskId};

impl Store {
    /// Records that a task has done `steps_done` steps, with the metrics
    /// measured at that step, in one transaction.
    pub fn record_progress(
        &self,
        task: TaskId,
        steps_done: u64,
        metrics: &[(String, f64)],
    ) -> Result<(), StoreError> {
        self.record_progress_batch(
            task,
            steps_done,
            &[SliceMetrics::now(steps_done, metrics.to_vec())],
        )
    }

    /// Records that a task has done `steps_done` steps and the metrics
    /// measured at several earlier slices (each row keeps its slice's time),
    /// in one transaction.
    pub fn record_progress_batch(
        &self,
        task: TaskId,
        steps_done: u64,
        slices: &[SliceMetrics],
    ) -> Result<(), StoreError> {
        let step = int("steps_done", steps_done)?;
        let mut c = self.conn();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let changed = tx.execute(
            "UPDATE tasks SET steps_done = ?2, updated_ms = ?3 WHERE id = ?1",
            params![task, step, now],
        )?;
        if changed == 0 {
            return Err(StoreError::NoSuchTask(task));
        }
        {
            let mut insert = tx.prepare(
                "INSERT INTO metrics (task_id, step, name, value, at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            // Later rows of the same step win, as in the history's order.
            let mut latest = tx.prepare(
                "INSERT INTO latest_metrics (task_id, name, step, value) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (task_id, name) DO UPDATE SET step = excluded.step, value = excluded.value
                 WHERE excluded.step >= latest_metrics.step",
            )?;
            for slice in slices {
                let at_step = int("metric step", slice.step)?;
                for (name, value) in &slice.metrics {
                    let value = (!value.is_nan()).then_some(*value);
                    insert.execute(params![task, at_step, name, value, slice.at_ms])?;
                    latest.execute(params![task, name, at_step, value])?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Sets a task's step count, e.g. when a resumed task restarts from a
    /// checkpoint older than its last progress. Metrics recorded after
    /// `steps` are deleted in the same transaction: those steps are redone,
    /// and the history then describes the run that the model comes from.
    pub fn set_steps_done(&self, task: TaskId, steps: u64) -> Result<(), StoreError> {
        let step = int("steps_done", steps)?;
        let mut c = self.conn();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let changed = tx.execute(
            "UPDATE tasks SET steps_done = ?2, updated_ms = ?3 WHERE id = ?1",
            params![task, step, now_ms()],
        )?;
        if changed == 0 {
            return Err(StoreError::NoSuchTask(task));
        }
        let removed = tx.execute(
            "DELETE FROM metrics WHERE task_id = ?1 AND step > ?2",
            params![task, step],
        )?;
        if removed > 0 {
            tx.execute("DELETE FROM latest_metrics WHERE task_id = ?1", [task])?;
            tx.execute(REBUILD_LATEST_METRICS, [task])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// One metric of a task as (step, value), by step.
    pub fn metric_history(&self, task: TaskId, name: &str) -> Result<Vec<(u64, f64)>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(
            "SELECT step, value FROM metrics WHERE task_id = ?1 AND name = ?2 ORDER BY step, rowid",
        )?;
        let rows = st.query_map(params![task, name], |r| {
            Ok((r.get::<_, u64>(0)?, metric_value(r.get(1)?)))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The last recorded value (highest step) of each of a task's metrics,
    /// by name.
    pub fn latest_metrics(&self, task: TaskId) -> Result<Vec<(String, f64)>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare_cached(
            "SELECT name, value FROM latest_metrics WHERE task_id = ?1 ORDER BY name",
        )?;
        let rows = st.query_map([task], |r| Ok((r.get(0)?, metric_value(r.get(1)?))))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records what a task measured, by component; its `measured_bytes`
    /// becomes the parts' sum, in the same statement.
    pub fn set_measured_memory(
        &self,
        task: TaskId,
        memory: &MeasuredMemory,
    ) -> Result<(), StoreError> {
        let c = self.conn();
        let changed = c.execute(
            "UPDATE tasks SET measured_bytes = ?2, measured_parameters = ?3,
                 measured_gradients = ?4, measured_optimizer_state = ?5,
                 measured_activations = ?6, measured_source = ?7, updated_ms = ?8
             WHERE id = ?1",
            params![
                task,
                int("measured_bytes", memory.total())?,
                int("measured parameters", memory.parameters)?,
                int("measured gradients", memory.gradients)?,
                int("measured optimizer state", memory.optimizer_state)?,
                int("measured activations", memory.activations)?,
                memory.source.as_str(),
                now_ms()
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NoSuchTask(task));
        }
        Ok(())
    }

    /// Records the device memory a task was measured to use.
    pub fn set_measured_bytes(&self, task: TaskId, bytes: u64) -> Result<(), StoreError> {
        let bytes = int("measured_bytes", bytes)?;
        let c = self.conn();
        let changed = c.execute(
            "UPDATE tasks SET measured_bytes = ?2, updated_ms = ?3 WHERE id = ?1",
            params![task, bytes, now_ms()],
        )?;
        if changed == 0 {
            return Err(StoreError::NoSuchTask(task));
        }
        Ok(())
    }
}

/// NULL (SQLite's spelling of a NaN REAL) reads back as NaN.
fn metric_value(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}
