//! Row ids of jobs and tasks, and the store's time unit.

/// Row id of a job in the store.
pub type JobId = i64;
/// Row id of a task in the store.
pub type TaskId = i64;

/// Milliseconds since the Unix epoch (the store's time unit).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
