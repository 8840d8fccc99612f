//! Jobs, their tasks and the tasks' state transitions: creating a job,
//! reading jobs and tasks, moving a task between states (also after running
//! out of memory) and recovering after a restart.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::rows::{state_at, task_from_row, transition_row};
use super::schema::TASK_COLUMNS;
use super::{int, JobRow, NewTask, PluginVersionUse, Store, StoreError, TaskRow, TransitionRow};
use tli_core::state::TaskState;
use tli_core::{now_ms, JobId, TaskId};

impl Store {
    // ----- jobs and tasks -------------------------------------------------

    /// Creates a job and its tasks (queued, each with a `submitted`
    /// transition) in one transaction. Task ids come back in `tasks` order.
    pub fn create_job(
        &self,
        name: &str,
        spec_json: &str,
        tasks: &[NewTask],
    ) -> Result<(JobId, Vec<TaskId>), StoreError> {
        let mut c = self.conn();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        tx.execute(
            "INSERT INTO jobs (name, spec_json, created_ms) VALUES (?1, ?2, ?3)",
            params![name, spec_json, now],
        )?;
        let job = tx.last_insert_rowid();
        let mut ids = Vec::with_capacity(tasks.len());
        {
            let mut insert_task = tx.prepare(
                "INSERT INTO tasks (job_id, ordinal, plugin, asset, config_json, seed,
                     total_steps, priority, device, estimate_bytes, cost_weight, state,
                     steps_done, created_ms, updated_ms, plugin_version, plugin_checksum)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, ?13, ?13, ?14, ?15)",
            )?;
            let mut insert_transition = tx.prepare(
                "INSERT INTO transitions (task_id, from_state, to_state, reason, at_ms)
                 VALUES (?1, NULL, ?2, 'submitted', ?3)",
            )?;
            for (ordinal, t) in tasks.iter().enumerate() {
                insert_task.execute(params![
                    job,
                    ordinal as i64,
                    t.plugin,
                    t.asset,
                    t.config_json,
                    t.seed as i64,
                    int("total_steps", t.total_steps)?,
                    t.priority,
                    t.device.to_string(),
                    int("estimate_bytes", t.estimate_bytes)?,
                    t.cost_weight,
                    TaskState::Queued.as_str(),
                    now,
                    t.plugin_version,
                    t.plugin_checksum,
                ])?;
                let task = tx.last_insert_rowid();
                insert_transition.execute(params![task, TaskState::Queued.as_str(), now])?;
                if let Some(card) = &t.model_card {
                    tx.execute(
                        "INSERT INTO model_cards (task_id, card) VALUES (?1, ?2)",
                        params![task, card],
                    )?;
                }
                ids.push(task);
            }
        }
        tx.commit()?;
        Ok((job, ids))
    }

    /// The model card recorded for `task` at submission, if any.
    pub fn model_card(&self, task: TaskId) -> Result<Option<String>, StoreError> {
        let c = self.reader();
        Ok(c.query_row(
            "SELECT card FROM model_cards WHERE task_id = ?1",
            [task],
            |r| r.get(0),
        )
        .optional()?)
    }

    /// One job, if it exists.
    pub fn job(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        let c = self.reader();
        Ok(c.query_row(
            "SELECT id, name, spec_json, created_ms FROM jobs WHERE id = ?1",
            [id],
            |r| {
                Ok(JobRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    spec_json: r.get(2)?,
                    created_ms: r.get(3)?,
                })
            },
        )
        .optional()?)
    }

    /// All jobs, newest first.
    pub fn jobs(&self) -> Result<Vec<JobRow>, StoreError> {
        let c = self.reader();
        let mut st =
            c.prepare("SELECT id, name, spec_json, created_ms FROM jobs ORDER BY id DESC")?;
        let rows = st.query_map([], |r| {
            Ok(JobRow {
                id: r.get(0)?,
                name: r.get(1)?,
                spec_json: r.get(2)?,
                created_ms: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The tasks of a job, by ordinal (empty for an unknown job).
    pub fn tasks_of(&self, job: JobId) -> Result<Vec<TaskRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE job_id = ?1 ORDER BY ordinal"
        ))?;
        let rows = st.query_map([job], task_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One task, if it exists.
    pub fn task(&self, id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let c = self.reader();
        Ok(c.query_row(
            &format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"),
            [id],
            task_from_row,
        )
        .optional()?)
    }

    /// The tasks in any of `states`, oldest (lowest id) first.
    pub fn tasks_in(&self, states: &[TaskState]) -> Result<Vec<TaskRow>, StoreError> {
        if states.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.reader();
        let marks = vec!["?"; states.len()].join(", ");
        let mut st = c.prepare(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE state IN ({marks}) ORDER BY id"
        ))?;
        let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        let rows = st.query_map(rusqlite::params_from_iter(names), task_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records the plugin version (and library checksum) a task runs on,
    /// when it is not the one it was submitted with.
    pub fn set_task_plugin(
        &self,
        task: TaskId,
        version: &str,
        checksum: &str,
    ) -> Result<(), StoreError> {
        let changed = self.conn().execute(
            "UPDATE tasks SET plugin_version = ?2, plugin_checksum = ?3, updated_ms = ?4
             WHERE id = ?1",
            params![task, version, checksum, now_ms()],
        )?;
        if changed == 0 {
            return Err(StoreError::NoSuchTask(task));
        }
        Ok(())
    }

    /// How many tasks each plugin version has: (plugin, version, tasks not
    /// yet ended, all tasks). Rows of older hosts (no version) are left out.
    pub fn plugin_version_use(&self) -> Result<Vec<PluginVersionUse>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(
            "SELECT plugin, plugin_version,
                    SUM(state IN ('queued', 'running', 'checkpointing', 'interrupted')), COUNT(*)
             FROM tasks WHERE plugin_version IS NOT NULL
             GROUP BY plugin, plugin_version",
        )?;
        let rows = st.query_map([], |row| {
            Ok(PluginVersionUse {
                plugin: row.get(0)?,
                version: row.get(1)?,
                active_tasks: row.get(2)?,
                tasks: row.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    // ----- states ---------------------------------------------------------

    /// Replaces a job's stored spec (JSON), e.g. with its inputs recorded
    /// anew when a user accepts changed files.
    pub fn set_job_spec(&self, job: JobId, spec_json: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE jobs SET spec_json = ?2 WHERE id = ?1",
            params![job, spec_json],
        )?;
        Ok(())
    }

    /// Moves a task to `to` if its current state allows it, recording the
    /// transition; returns the previous state. Going to `failed` stores
    /// `reason` as the task's error; going to `queued` clears it.
    pub fn transition(
        &self,
        task: TaskId,
        to: TaskState,
        reason: &str,
    ) -> Result<TaskState, StoreError> {
        let mut c = self.conn();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = transition_in(&tx, task, to, reason, now_ms())?;
        tx.commit()?;
        Ok(from)
    }

    /// Gives a task `more` steps beyond those it has done and queues it
    /// again: the one way a completed task runs again (it resumes from its
    /// final checkpoint). A cancelled, failed or interrupted task is
    /// re-queued the same way; a queued or running one is refused. Returns
    /// the new total.
    pub fn extend_task(&self, task: TaskId, more: u64) -> Result<u64, StoreError> {
        let mut c = self.conn();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (from, done): (TaskState, i64) = tx
            .query_row(
                "SELECT state, steps_done FROM tasks WHERE id = ?1",
                [task],
                |r| Ok((state_at(r, 0)?, r.get(1)?)),
            )
            .optional()?
            .ok_or(StoreError::NoSuchTask(task))?;
        if from != TaskState::Completed && !from.is_resumable() {
            return Err(StoreError::IllegalTransition {
                task,
                from,
                to: TaskState::Queued,
            });
        }
        let total = (done.max(0) as u64).saturating_add(more);
        let now = now_ms();
        tx.execute(
            "UPDATE tasks SET total_steps = ?2, state = 'queued', updated_ms = ?3, error = NULL
             WHERE id = ?1",
            params![task, int("total steps", total)?, now],
        )?;
        tx.execute(
            "INSERT INTO transitions (task_id, from_state, to_state, reason, at_ms)
             VALUES (?1, ?2, 'queued', ?3, ?4)",
            params![
                task,
                from.as_str(),
                format!("extended by {more} steps to {total}"),
                now
            ],
        )?;
        tx.commit()?;
        Ok(total)
    }

    /// Re-queues a task that ran out of memory, counting it in
    /// `oom_requeues`, in one transaction.
    pub fn requeue_after_oom(&self, task: TaskId, reason: &str) -> Result<(), StoreError> {
        let mut c = self.conn();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        transition_in(&tx, task, TaskState::Queued, reason, now_ms())?;
        tx.execute(
            "UPDATE tasks SET oom_requeues = oom_requeues + 1 WHERE id = ?1",
            [task],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// A task's transitions in the order they happened.
    pub fn transitions(&self, task: TaskId) -> Result<Vec<TransitionRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(
            "SELECT id, task_id, from_state, to_state, reason, at_ms FROM transitions
             WHERE task_id = ?1 ORDER BY id",
        )?;
        let rows = st.query_map([task], transition_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The state changes of all of a job's tasks with an id above `after`
    /// (ids grow with time across tasks), oldest first.
    pub fn job_transitions_after(
        &self,
        job: JobId,
        after: i64,
    ) -> Result<Vec<TransitionRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(
            "SELECT t.id, t.task_id, t.from_state, t.to_state, t.reason, t.at_ms
             FROM transitions t JOIN tasks k ON k.id = t.task_id
             WHERE k.job_id = ?1 AND t.id > ?2 ORDER BY t.id",
        )?;
        let rows = st.query_map(params![job, after], transition_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// After a restart: every `running` or `checkpointing` task becomes
    /// `interrupted` (with `reason`), and every open reservation is closed
    /// (no process holds device memory any more), except the tasks in
    /// `adopted` (their workers run on elsewhere, under Slurm). One
    /// transaction; returns the interrupted tasks' ids, lowest first.
    pub fn recover_after_restart(
        &self,
        reason: &str,
        adopted: &[TaskId],
    ) -> Result<Vec<TaskId>, StoreError> {
        let mut c = self.conn();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let ids: Vec<TaskId> = {
            let mut st = tx.prepare(
                "SELECT id FROM tasks WHERE state IN ('running', 'checkpointing') ORDER BY id",
            )?;
            let rows = st.query_map([], |r| r.get(0))?;
            rows.collect::<Result<Vec<TaskId>, _>>()?
                .into_iter()
                .filter(|id| !adopted.contains(id))
                .collect()
        };
        for &task in &ids {
            transition_in(&tx, task, TaskState::Interrupted, reason, now)?;
        }
        tx.execute(
            "UPDATE reservations SET released_ms = ?1 WHERE released_ms IS NULL",
            [now],
        )?;
        tx.commit()?;
        Ok(ids)
    }
}

/// Changes a task's state inside `tx`; returns the previous state.
fn transition_in(
    tx: &rusqlite::Transaction<'_>,
    task: TaskId,
    to: TaskState,
    reason: &str,
    now: i64,
) -> Result<TaskState, StoreError> {
    let from = tx
        .query_row("SELECT state FROM tasks WHERE id = ?1", [task], |r| {
            state_at(r, 0)
        })
        .optional()?
        .ok_or(StoreError::NoSuchTask(task))?;
    if !from.can_become(to) {
        return Err(StoreError::IllegalTransition { task, from, to });
    }
    match to {
        TaskState::Failed => tx.execute(
            "UPDATE tasks SET state = ?2, updated_ms = ?3, error = ?4 WHERE id = ?1",
            params![task, to.as_str(), now, reason],
        )?,
        TaskState::Queued => tx.execute(
            "UPDATE tasks SET state = ?2, updated_ms = ?3, error = NULL WHERE id = ?1",
            params![task, to.as_str(), now],
        )?,
        _ => tx.execute(
            "UPDATE tasks SET state = ?2, updated_ms = ?3 WHERE id = ?1",
            params![task, to.as_str(), now],
        )?,
    };
    tx.execute(
        "INSERT INTO transitions (task_id, from_state, to_state, reason, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![task, from.as_str(), to.as_str(), reason, now],
    )?;
    Ok(from)
}

pub(super) fn task_exists(conn: &Connection, task: TaskId) -> Result<(), StoreError> {
    conn.query_row("SELECT 1 FROM tasks WHERE id = ?1", [task], |_| Ok(()))
        .optional()?
        .ok_or(StoreError::NoSuchTask(task))
}
