//! The durable job store: one SQLite file, `<state dir>/tli.sqlite3`.
//!
//! # Schema (version 2, kept in `PRAGMA user_version`)
//!
//! ```text
//! jobs         id, name, spec_json, created_ms
//! tasks        id, job_id → jobs, ordinal (position in the job, unique per job),
//!              plugin, asset, config_json, seed, total_steps, priority, device,
//!              estimate_bytes, measured_bytes NULL, cost_weight, state,
//!              steps_done, error NULL, created_ms, updated_ms
//! transitions  id, task_id → tasks, from_state NULL, to_state, reason, at_ms
//! metrics      task_id → tasks, step, name, value NULL (NaN), at_ms
//!              index (task_id, name, step)
//! latest_metrics  task_id → tasks, name, step, value NULL: the value of each
//!              metric at its highest step (kept with `metrics`; version 2)
//! checkpoints  id, task_id → tasks, step, path, checksum, created_ms
//! reservations id, task_id → tasks, device, bytes, reserved_ms, released_ms NULL
//! ```
//!
//! Times are milliseconds since the Unix epoch ([`super::now_ms`]). States are
//! stored as their [`TaskState::as_str`] names (a `CHECK` constraint keeps
//! other text out). Seeds are `u64` stored bit for bit in SQLite's signed
//! 64-bit INTEGER; every other count or size must fit in an `i64` and is
//! refused with [`StoreError::OutOfRange`] otherwise. SQLite stores a NaN
//! REAL as NULL, so a NaN metric (a diverged loss) comes back as NaN.
//!
//! # Durability
//!
//! The database runs in WAL mode with `synchronous=FULL`: a call that
//! returned `Ok` has been fsynced and survives a crash of the host or of the
//! machine. Every write that touches more than one row (a job with its tasks
//! and their first transitions, a state change with its transition row,
//! progress with its metrics, recovery after a restart) is one transaction,
//! so a crash leaves either all of it or none of it. Foreign keys are
//! enforced. A task's state only changes through [`Store::transition`] (or
//! [`Store::recover_after_restart`]), which checks [`TaskState::can_become`]
//! and records the change in `transitions`.
//!
//! # One host per state directory
//!
//! [`Store::open`] takes an exclusive `flock` on `<state dir>/host.lock` and
//! holds it for the life of the [`Store`]; a second host on the same
//! directory is refused with [`StoreError::Locked`]. The kernel drops the lock
//! when the process dies, so a crashed host never leaves a stale lock.
//! [`Store::open_read_only`] takes no lock (for status commands that look at a
//! running host's store) and cannot write.
//!
//! The connection sits behind a [`Mutex`], so a [`Store`] can be shared
//! between runner threads (`Arc<Store>`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::types::Type;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use super::state::TaskState;
use super::{now_ms, JobId, TaskId};

/// The schema version this host creates and understands.
pub const SCHEMA_VERSION: i64 = 2;
/// File name of the database inside the state directory.
pub const DB_FILE: &str = "tli.sqlite3";
/// File name of the host lock inside the state directory.
pub const LOCK_FILE: &str = "host.lock";
/// How long a statement waits for another connection's lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "store {} is locked by another host process{} (lock file {} is held); \
         stop that host or use another state directory",
        db.display(),
        holder.as_ref().map(|p| format!(" (pid {p})")).unwrap_or_default(),
        lock.display()
    )]
    Locked {
        db: PathBuf,
        lock: PathBuf,
        holder: Option<String>,
    },
    #[error("no store at {} (no host has run with this state directory yet)", path.display())]
    Missing { path: PathBuf },
    #[error("store file {} is not an SQLite database (damaged, or some other file)", path.display())]
    NotADatabase { path: PathBuf },
    #[error(
        "store {} has schema version {found}, this host knows up to {known}; \
         use a newer tli or another state directory",
        path.display()
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("store {} has no schema yet (version 0) and was opened read-only", path.display())]
    Uninitialized { path: PathBuf },
    #[error("store {} is in journal mode {mode:?}, not WAL (the filesystem may not support WAL)", path.display())]
    NotWal { path: PathBuf, mode: String },
    #[error("cannot open store {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("no task with id {0} in the store")]
    NoSuchTask(TaskId),
    #[error("no reservation with id {0} in the store")]
    NoSuchReservation(i64),
    #[error("task {task} cannot go from {from} to {to}")]
    IllegalTransition {
        task: TaskId,
        from: TaskState,
        to: TaskState,
    },
    #[error("{what} = {value} is too large for the store (at most {})", i64::MAX)]
    OutOfRange { what: &'static str, value: u64 },
    #[error("store query failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// A task to be created with its job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewTask {
    pub plugin: String,
    pub asset: String,
    pub config_json: String,
    pub seed: u64,
    pub total_steps: u64,
    pub priority: i32,
    pub device: String,
    pub estimate_bytes: u64,
    pub cost_weight: f64,
}

/// A row of `jobs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    pub id: JobId,
    pub name: String,
    pub spec_json: String,
    pub created_ms: i64,
}

/// A row of `tasks`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    pub id: TaskId,
    pub job_id: JobId,
    /// Position of the task in its job, from 0.
    pub ordinal: u32,
    pub plugin: String,
    pub asset: String,
    pub config_json: String,
    pub seed: u64,
    pub total_steps: u64,
    pub priority: i32,
    pub device: String,
    pub estimate_bytes: u64,
    pub measured_bytes: Option<u64>,
    pub cost_weight: f64,
    pub state: TaskState,
    pub steps_done: u64,
    /// Why the task failed (set on `failed`, cleared on `queued`).
    pub error: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// A row of `transitions`: `from` is `None` for the task's creation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransitionRow {
    pub id: i64,
    pub task_id: TaskId,
    pub from: Option<TaskState>,
    pub to: TaskState,
    pub reason: String,
    pub at_ms: i64,
}

/// A row of `checkpoints`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRow {
    pub id: i64,
    pub task_id: TaskId,
    pub step: u64,
    pub path: String,
    pub checksum: String,
    pub created_ms: i64,
}

/// A row of `reservations`: device memory held by a task; open while
/// `released_ms` is `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReservationRow {
    pub id: i64,
    pub task_id: TaskId,
    pub device: String,
    pub bytes: u64,
    pub reserved_ms: i64,
    pub released_ms: Option<i64>,
}

/// The connection's settings, as SQLite reports them (for checks and `status`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StorePragmas {
    pub journal_mode: String,
    /// 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA.
    pub synchronous: i64,
    pub foreign_keys: bool,
    pub busy_timeout_ms: i64,
    pub user_version: i64,
}

/// The durable job store. See the module documentation.
pub struct Store {
    // Field order matters: the connection closes before the lock is released.
    conn: Mutex<Connection>,
    db_path: PathBuf,
    read_only: bool,
    _lock: Option<File>,
}

const SCHEMA_V1: &str = "
CREATE TABLE jobs (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL,
    spec_json   TEXT    NOT NULL,
    created_ms  INTEGER NOT NULL
);
CREATE TABLE tasks (
    id              INTEGER PRIMARY KEY,
    job_id          INTEGER NOT NULL REFERENCES jobs(id),
    ordinal         INTEGER NOT NULL,
    plugin          TEXT    NOT NULL,
    asset           TEXT    NOT NULL,
    config_json     TEXT    NOT NULL,
    seed            INTEGER NOT NULL,
    total_steps     INTEGER NOT NULL,
    priority        INTEGER NOT NULL,
    device          TEXT    NOT NULL,
    estimate_bytes  INTEGER NOT NULL,
    measured_bytes  INTEGER,
    cost_weight     REAL    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('queued', 'running',
                        'checkpointing', 'completed', 'failed', 'cancelled', 'interrupted')),
    steps_done      INTEGER NOT NULL DEFAULT 0,
    error           TEXT,
    created_ms      INTEGER NOT NULL,
    updated_ms      INTEGER NOT NULL,
    UNIQUE (job_id, ordinal)
);
CREATE INDEX tasks_by_state ON tasks(state);
CREATE TABLE transitions (
    id          INTEGER PRIMARY KEY,
    task_id     INTEGER NOT NULL REFERENCES tasks(id),
    from_state  TEXT,
    to_state    TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    at_ms       INTEGER NOT NULL
);
CREATE INDEX transitions_by_task ON transitions(task_id, id);
CREATE TABLE metrics (
    task_id  INTEGER NOT NULL REFERENCES tasks(id),
    step     INTEGER NOT NULL,
    name     TEXT    NOT NULL,
    value    REAL,
    at_ms    INTEGER NOT NULL
);
CREATE INDEX metrics_by_task_name_step ON metrics(task_id, name, step);
CREATE TABLE checkpoints (
    id          INTEGER PRIMARY KEY,
    task_id     INTEGER NOT NULL REFERENCES tasks(id),
    step        INTEGER NOT NULL,
    path        TEXT    NOT NULL,
    checksum    TEXT    NOT NULL,
    created_ms  INTEGER NOT NULL
);
CREATE INDEX checkpoints_by_task ON checkpoints(task_id, step);
CREATE TABLE reservations (
    id           INTEGER PRIMARY KEY,
    task_id      INTEGER NOT NULL REFERENCES tasks(id),
    device       TEXT    NOT NULL,
    bytes        INTEGER NOT NULL,
    reserved_ms  INTEGER NOT NULL,
    released_ms  INTEGER
);
CREATE INDEX reservations_by_release ON reservations(released_ms);
";

/// Version 2: the latest value of each metric per task, so reading a task's
/// current metrics does not scan its whole history (that took 45 ms for 8
/// tasks × 2000 slices and grew with every slice).
const SCHEMA_V2: &str = "
CREATE TABLE latest_metrics (
    task_id  INTEGER NOT NULL REFERENCES tasks(id),
    name     TEXT    NOT NULL,
    step     INTEGER NOT NULL,
    value    REAL,
    PRIMARY KEY (task_id, name)
) WITHOUT ROWID;
INSERT INTO latest_metrics (task_id, name, step, value)
    SELECT m.task_id, m.name, m.step, m.value FROM metrics m
    WHERE m.rowid = (SELECT rowid FROM metrics
                     WHERE task_id = m.task_id AND name = m.name
                     ORDER BY step DESC, rowid DESC LIMIT 1);
";

/// Rebuilds one task's `latest_metrics` rows from its history.
const REBUILD_LATEST_METRICS: &str = "
INSERT INTO latest_metrics (task_id, name, step, value)
    SELECT m.task_id, m.name, m.step, m.value FROM metrics m
    WHERE m.task_id = ?1 AND m.rowid = (SELECT rowid FROM metrics
                     WHERE task_id = m.task_id AND name = m.name
                     ORDER BY step DESC, rowid DESC LIMIT 1)";

const TASK_COLUMNS: &str = "id, job_id, ordinal, plugin, asset, config_json, seed, total_steps, \
     priority, device, estimate_bytes, measured_bytes, cost_weight, state, steps_done, error, \
     created_ms, updated_ms";

const RESERVATION_COLUMNS: &str = "id, task_id, device, bytes, reserved_ms, released_ms";

/// Converts a count or size to SQLite's INTEGER, refusing what does not fit.
fn int(what: &'static str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::OutOfRange { what, value })
}

fn transition_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TransitionRow> {
    Ok(TransitionRow {
        id: r.get(0)?,
        task_id: r.get(1)?,
        from: opt_state_at(r, 2)?,
        to: state_at(r, 3)?,
        reason: r.get(4)?,
        at_ms: r.get(5)?,
    })
}

fn state_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<TaskState> {
    let text: String = row.get(idx)?;
    TaskState::parse(&text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            idx,
            Type::Text,
            format!("unknown task state {text:?}").into(),
        )
    })
}

fn opt_state_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Option<TaskState>> {
    match row.get_ref(idx)? {
        rusqlite::types::ValueRef::Null => Ok(None),
        _ => state_at(row, idx).map(Some),
    }
}

fn task_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok(TaskRow {
        id: row.get(0)?,
        job_id: row.get(1)?,
        ordinal: row.get(2)?,
        plugin: row.get(3)?,
        asset: row.get(4)?,
        config_json: row.get(5)?,
        seed: row.get::<_, i64>(6)? as u64,
        total_steps: row.get(7)?,
        priority: row.get(8)?,
        device: row.get(9)?,
        estimate_bytes: row.get(10)?,
        measured_bytes: row.get(11)?,
        cost_weight: row.get(12)?,
        state: state_at(row, 13)?,
        steps_done: row.get(14)?,
        error: row.get(15)?,
        created_ms: row.get(16)?,
        updated_ms: row.get(17)?,
    })
}

fn reservation_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ReservationRow> {
    Ok(ReservationRow {
        id: row.get(0)?,
        task_id: row.get(1)?,
        device: row.get(2)?,
        bytes: row.get(3)?,
        reserved_ms: row.get(4)?,
        released_ms: row.get(5)?,
    })
}

/// NULL (SQLite's spelling of a NaN REAL) reads back as NaN.
fn metric_value(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

/// True when SQLite says the file is not a database.
fn is_not_a_database(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::NotADatabase)
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

fn task_exists(conn: &Connection, task: TaskId) -> Result<(), StoreError> {
    conn.query_row("SELECT 1 FROM tasks WHERE id = ?1", [task], |_| Ok(()))
        .optional()?
        .ok_or(StoreError::NoSuchTask(task))
}

impl Store {
    /// Opens (creating if needed) the store in `state_dir` for this host:
    /// takes the host lock, sets WAL / `synchronous=FULL` / foreign keys, and
    /// creates or migrates the schema.
    pub fn open(state_dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(state_dir).map_err(|source| StoreError::Io {
            action: "create state directory",
            path: state_dir.to_path_buf(),
            source,
        })?;
        let db_path = state_dir.join(DB_FILE);
        let lock = take_host_lock(state_dir, &db_path)?;

        let open_err = |source| StoreError::Open {
            path: db_path.clone(),
            source,
        };
        let conn = Connection::open(&db_path).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        // The first statement that reads the file: it tells garbage and
        // newer schemas apart before anything is written to the file.
        let version = read_version(&conn, &db_path)?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(|e| classify(e, &db_path))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NotWal {
                path: db_path.clone(),
                mode,
            });
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_err)?;

        let mut conn = conn;
        if version < SCHEMA_VERSION {
            migrate(&mut conn, &db_path)?;
        }
        Ok(Store {
            conn: Mutex::new(conn),
            db_path,
            read_only: false,
            _lock: Some(lock),
        })
    }

    /// Opens an existing store read-only, without the host lock (a running
    /// host may hold it). Every write through this store fails.
    pub fn open_read_only(state_dir: &Path) -> Result<Store, StoreError> {
        let db_path = state_dir.join(DB_FILE);
        if !db_path.is_file() {
            return Err(StoreError::Missing { path: db_path });
        }
        let open_err = |source| StoreError::Open {
            path: db_path.clone(),
            source,
        };
        let conn = Connection::open_with_flags(
            &db_path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        let version = read_version(&conn, &db_path)?;
        if version < SCHEMA_VERSION {
            return Err(StoreError::Uninitialized { path: db_path });
        }
        Ok(Store {
            conn: Mutex::new(conn),
            db_path,
            read_only: true,
            _lock: None,
        })
    }

    /// Path of the SQLite file.
    pub fn path(&self) -> &Path {
        &self.db_path
    }

    /// Whether this store was opened with [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The connection, also after a thread panicked while holding it (an
    /// unfinished transaction was rolled back when it was dropped).
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The connection's journal mode, synchronous level, foreign keys, busy
    /// timeout and schema version.
    pub fn pragmas(&self) -> Result<StorePragmas, StoreError> {
        let c = self.conn();
        Ok(StorePragmas {
            journal_mode: c.pragma_query_value(None, "journal_mode", |r| r.get(0))?,
            synchronous: c.pragma_query_value(None, "synchronous", |r| r.get(0))?,
            foreign_keys: c.pragma_query_value(None, "foreign_keys", |r| r.get::<_, i64>(0))? != 0,
            busy_timeout_ms: c.pragma_query_value(None, "busy_timeout", |r| r.get(0))?,
            user_version: c.pragma_query_value(None, "user_version", |r| r.get(0))?,
        })
    }

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
                     steps_done, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, ?13, ?13)",
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
                    t.device,
                    int("estimate_bytes", t.estimate_bytes)?,
                    t.cost_weight,
                    TaskState::Queued.as_str(),
                    now,
                ])?;
                let task = tx.last_insert_rowid();
                insert_transition.execute(params![task, TaskState::Queued.as_str(), now])?;
                ids.push(task);
            }
        }
        tx.commit()?;
        Ok((job, ids))
    }

    /// One job, if it exists.
    pub fn job(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        let c = self.conn();
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
        let c = self.conn();
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
        let c = self.conn();
        let mut st = c.prepare(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE job_id = ?1 ORDER BY ordinal"
        ))?;
        let rows = st.query_map([job], task_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One task, if it exists.
    pub fn task(&self, id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let c = self.conn();
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
        let c = self.conn();
        let marks = vec!["?"; states.len()].join(", ");
        let mut st = c.prepare(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE state IN ({marks}) ORDER BY id"
        ))?;
        let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        let rows = st.query_map(rusqlite::params_from_iter(names), task_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    // ----- states ---------------------------------------------------------

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

    /// A task's transitions in the order they happened.
    pub fn transitions(&self, task: TaskId) -> Result<Vec<TransitionRow>, StoreError> {
        let c = self.conn();
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
        let c = self.conn();
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
    /// (no process holds device memory any more). One transaction; returns
    /// the interrupted tasks' ids, lowest first.
    pub fn recover_after_restart(&self, reason: &str) -> Result<Vec<TaskId>, StoreError> {
        let mut c = self.conn();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let ids: Vec<TaskId> = {
            let mut st = tx.prepare(
                "SELECT id FROM tasks WHERE state IN ('running', 'checkpointing') ORDER BY id",
            )?;
            let rows = st.query_map([], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
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

    // ----- progress and metrics -------------------------------------------

    /// Records that a task has done `steps_done` steps, with the metrics
    /// measured at that step, in one transaction.
    pub fn record_progress(
        &self,
        task: TaskId,
        steps_done: u64,
        metrics: &[(String, f64)],
    ) -> Result<(), StoreError> {
        self.record_progress_batch(task, steps_done, &[(steps_done, metrics.to_vec())])
    }

    /// Records that a task has done `steps_done` steps and the metrics
    /// measured at several earlier steps (`(step, metrics)`), in one
    /// transaction.
    pub fn record_progress_batch(
        &self,
        task: TaskId,
        steps_done: u64,
        metrics_by_step: &[(u64, Vec<(String, f64)>)],
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
            for (at_step, metrics) in metrics_by_step {
                let at_step = int("metric step", *at_step)?;
                for (name, value) in metrics {
                    let value = (!value.is_nan()).then_some(*value);
                    insert.execute(params![task, at_step, name, value, now])?;
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
        let c = self.conn();
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
        let c = self.conn();
        let mut st = c.prepare_cached(
            "SELECT name, value FROM latest_metrics WHERE task_id = ?1 ORDER BY name",
        )?;
        let rows = st.query_map([task], |r| Ok((r.get(0)?, metric_value(r.get(1)?))))?;
        Ok(rows.collect::<Result<_, _>>()?)
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

    // ----- checkpoints ----------------------------------------------------

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
        let c = self.conn();
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

    // ----- device memory reservations -------------------------------------

    /// Records that a task holds `bytes` of `device` memory; returns the
    /// reservation id.
    pub fn reserve(&self, task: TaskId, device: &str, bytes: u64) -> Result<i64, StoreError> {
        let bytes = int("reserved bytes", bytes)?;
        let c = self.conn();
        task_exists(&c, task)?;
        c.execute(
            "INSERT INTO reservations (task_id, device, bytes, reserved_ms) VALUES (?1, ?2, ?3, ?4)",
            params![task, device, bytes, now_ms()],
        )?;
        Ok(c.last_insert_rowid())
    }

    /// Closes a reservation. Releasing one that is already closed does
    /// nothing (its first release time stays); an unknown id is an error.
    pub fn release(&self, reservation: i64) -> Result<(), StoreError> {
        let c = self.conn();
        let changed = c.execute(
            "UPDATE reservations SET released_ms = ?2 WHERE id = ?1 AND released_ms IS NULL",
            params![reservation, now_ms()],
        )?;
        if changed == 0 {
            c.query_row(
                "SELECT 1 FROM reservations WHERE id = ?1",
                [reservation],
                |_| Ok(()),
            )
            .optional()?
            .ok_or(StoreError::NoSuchReservation(reservation))?;
        }
        Ok(())
    }

    /// The reservations not yet released, by id.
    pub fn open_reservations(&self) -> Result<Vec<ReservationRow>, StoreError> {
        let c = self.conn();
        let mut st = c.prepare(&format!(
            "SELECT {RESERVATION_COLUMNS} FROM reservations WHERE released_ms IS NULL ORDER BY id"
        ))?;
        let rows = st.query_map([], reservation_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every reservation ever made, by id.
    pub fn reservation_timeline(&self) -> Result<Vec<ReservationRow>, StoreError> {
        let c = self.conn();
        let mut st = c.prepare(&format!(
            "SELECT {RESERVATION_COLUMNS} FROM reservations ORDER BY id"
        ))?;
        let rows = st.query_map([], reservation_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.db_path)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// Maps "file is not a database" to its own error, anything else to `Open`.
fn classify(err: rusqlite::Error, path: &Path) -> StoreError {
    if is_not_a_database(&err) {
        StoreError::NotADatabase {
            path: path.to_path_buf(),
        }
    } else {
        StoreError::Open {
            path: path.to_path_buf(),
            source: err,
        }
    }
}

/// Reads `user_version`, refusing a schema newer than this host's.
fn read_version(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| classify(e, path))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found: version,
            known: SCHEMA_VERSION,
        });
    }
    Ok(version)
}

/// Brings the schema up to [`SCHEMA_VERSION`] in one transaction.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let open_err = |source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(open_err)?;
    // Read again under the write lock (another opener may have migrated).
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(open_err)?;
    if version < 1 {
        tx.execute_batch(SCHEMA_V1).map_err(open_err)?;
    }
    if version < 2 {
        tx.execute_batch(SCHEMA_V2).map_err(open_err)?;
    }
    // Later versions: `if version < 3 { ... }` here.
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(open_err)?;
    tx.commit().map_err(open_err)
}

/// Takes the exclusive host lock on `<state dir>/host.lock` and writes this
/// process's id into it.
fn take_host_lock(state_dir: &Path, db_path: &Path) -> Result<File, StoreError> {
    let lock_path = state_dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|source| StoreError::Io {
            action: "open lock file",
            path: lock_path.clone(),
            source,
        })?;
    // SAFETY: flock on a file descriptor that `file` owns and keeps open.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let holder = std::fs::read_to_string(&lock_path)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty());
            return Err(StoreError::Locked {
                db: db_path.to_path_buf(),
                lock: lock_path,
                holder,
            });
        }
        return Err(StoreError::Io {
            action: "lock",
            path: lock_path,
            source: err,
        });
    }
    // Who holds it, for the error a second host shows; only informative.
    let _ = file
        .set_len(0)
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    Ok(file)
}
