//! Counts over the whole store, for dashboards and metrics: tasks by state
//! and jobs by their overall state. Two aggregate queries, no rows copied.

use super::{Store, StoreError};

/// What a job is as a whole, from its tasks' states: `active` while any task
/// is queued, running or checkpointing; otherwise `failed`, `interrupted` or
/// `cancelled` if any task is (in that order of precedence), else `completed`.
pub const JOB_STATES: [&str; 5] = ["active", "completed", "failed", "interrupted", "cancelled"];

const JOB_STATE_SQL: &str = "
SELECT s, COUNT(*) FROM (
    SELECT CASE
        WHEN SUM(state IN ('queued', 'running', 'checkpointing')) > 0 THEN 'active'
        WHEN SUM(state = 'failed') > 0 THEN 'failed'
        WHEN SUM(state = 'interrupted') > 0 THEN 'interrupted'
        WHEN SUM(state = 'cancelled') > 0 THEN 'cancelled'
        ELSE 'completed' END AS s
    FROM tasks GROUP BY job_id)
GROUP BY s";

impl Store {
    /// How many tasks are in each state (states without tasks are absent).
    pub fn task_state_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.counts("SELECT state, COUNT(*) FROM tasks GROUP BY state")
    }

    /// How many jobs are in each overall state (see [`JOB_STATES`]).
    pub fn job_state_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.counts(JOB_STATE_SQL)
    }

    fn counts(&self, sql: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare_cached(sql)?;
        let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        let mut counts = Vec::new();
        for row in rows {
            let (state, n) = row?;
            counts.push((state, u64::try_from(n).unwrap_or(0)));
        }
        Ok(counts)
    }
}
