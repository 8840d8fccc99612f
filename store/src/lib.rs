//! `tli-store`: what a host keeps on disk: the SQLite job store (this page)
//! and atomic, verifiable checkpoint directories ([`checkpoint`]).
//!
//! It builds on `tli-core` only: never on tch, tonic, clap or the runtime, so
//! the client binary can read a state directory (`tli plot`) without libtorch
//! (the layer rule is checked by `scripts/check-layers.sh`).
//!
//! The durable job store: one SQLite file, `<state dir>/tli.sqlite3`.
//!
//! # Schema (version 10, kept in `PRAGMA user_version`)
//!
//! ```text
//! jobs         id, name, spec_json, created_ms
//! tasks        id, job_id → jobs, ordinal (position in the job, unique per job),
//!              plugin, asset, config_json, seed, total_steps, priority, device,
//!              estimate_bytes, measured_bytes NULL, cost_weight, state,
//!              steps_done, error NULL, created_ms, updated_ms,
//!              oom_requeues (times re-queued after running out of memory; version 3),
//!              measured_parameters, _gradients, _optimizer_state, _activations,
//!              measured_source NULL (the measurement by component; version 4),
//!              plugin_version NULL, plugin_checksum NULL (the library that runs it; version 7)
//! transitions  id, task_id → tasks, from_state NULL, to_state, reason, at_ms
//! metrics      task_id → tasks, step, name, value NULL (NaN), at_ms
//!              index (task_id, name, step)
//! latest_metrics  task_id → tasks, name, step, value NULL: the value of each
//!              metric at its highest step (kept with `metrics`; version 2)
//! checkpoints  id, task_id → tasks, step, path, checksum, created_ms,
//!              best_metric NULL, best_value NULL, best_mode NULL (a best checkpoint; version 9)
//! model_cards  task_id → tasks, card (JSON; version 8)
//! reservations id, task_id → tasks, device, bytes, reserved_ms, released_ms NULL
//! dispatches   id (a worker's lease), task_id → tasks, executor, external_id NULL (the
//!              Slurm job id), request NULL (the sbatch options), node NULL,
//!              submitted_ms, ended_ms NULL, end_reason NULL (version 5)
//! device_budgets id, device, bytes, at_ms: a device's memory budget from
//!              `at_ms` on (a row per change, written when a host opens; version 6)
//! store_session  one row: open (a host has the store open), pid NULL, changed_ms
//!              (version 10; see "Whole in one file" below)
//! ```
//!
//! Times are milliseconds since the Unix epoch ([`tli_core::now_ms`]). States are
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
//! [`Store::open`] takes an exclusive `flock` on `<state dir>/host.lock` (which
//! names the holder's pid) and an OFD write lock on one byte of `tli.sqlite3`
//! itself, far beyond SQLite's lock bytes, and holds both for the life of the
//! [`Store`]; a second host on the same directory is refused with
//! [`StoreError::Locked`] or, when `host.lock` was deleted,
//! [`StoreError::DatabaseLocked`]. The kernel drops both locks when the
//! process dies, so a crashed host never leaves a stale lock.
//! [`Store::check_lock`] tells a running host whether the file at its path is
//! still the one it locked.
//!
//! # Whole in one file
//!
//! Opening marks the store open and closing ([`Store::close_cleanly`], also
//! on drop) marks it closed, each followed by a TRUNCATE checkpoint, so the
//! database file itself says whether part of the store may be in the
//! `-wal` log. After a clean close the file alone is the whole store; a file
//! marked open without its log beside it is refused before SQLite touches it
//! ([`StoreError::WalMissing`]).
//! [`Store::open_read_only`] takes no lock (for status commands that look at a
//! running host's store) and cannot write.
//!
//! Writes go through one connection behind a [`Mutex`], so a [`Store`] can
//! be shared between runner threads (`Arc<Store>`). Reads use a few
//! read-only connections of their own (`readers.rs`): in WAL mode they never
//! wait for a write's fsync.
//!
//! # Files
//!
//! * this file: [`Store`], [`StoreError`], opening the store and the host lock;
//! * `schema.rs`: the SQL schema and its migrations;
//! * `rows.rs`: the row types and how rows are read;
//! * `jobs.rs`: jobs, tasks, state transitions and recovery after a restart;
//! * `progress.rs`: steps done, metrics and measured memory;
//! * `checkpoints.rs`: the checkpoints recorded per task;
//! * `readers.rs`: the read connections;
//! * `reservations.rs`: device memory reservations;
//! * `dispatches.rs`: tasks handed to Slurm, one row per attempt (the worker's lease);
//! * `history.rs`: a job's history for charts (metric series thinned to a
//!   number of points, reservation spans, device budgets over time).

pub mod checkpoint;
mod checkpoints;
mod dispatches;
mod history;
mod jobs;
mod progress;
mod read_only_media;
mod readers;
mod reservations;
mod rows;
mod schema;
mod summary;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde::{Deserialize, Serialize};

use readers::{Readers, READ_CONNECTIONS};
use schema::{migrate, read_version};
use tli_core::state::TaskState;
use tli_core::TaskId;

pub use dispatches::{DispatchRow, DispatchUsage};
pub use history::{
    thin_indices, BudgetChange, DeviceHistory, HistoryQuery, JobHistory, MetricSeries,
    ReservationSpan, TaskHistory, DEFAULT_MAX_POINTS,
};
pub use rows::{
    BestMark, CheckpointRow, JobRow, MeasuredMemory, MemorySource, NewTask, PluginVersionUse,
    ReservationRow, SliceMetrics, TaskRow, TransitionRow,
};
pub use summary::JOB_STATES;

/// The schema version this host creates and understands.
pub const SCHEMA_VERSION: i64 = 11;
/// File name of the database inside the state directory.
pub const DB_FILE: &str = "tli.sqlite3";
/// File name of the host lock inside the state directory.
pub const LOCK_FILE: &str = "host.lock";
/// How long a statement waits for another connection's lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {action} {}: {source}{}", path.display(), unwritable_hint(source))]
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
    #[error(
        "store {} is locked by another host process{}; stop that host or use another state \
         directory",
        db.display(),
        holder.as_ref().map(|p| format!(" (pid {p}, from {LOCK_FILE})")).unwrap_or_default()
    )]
    DatabaseLocked { db: PathBuf, holder: Option<String> },
    #[error(
        "store {} is no longer the file this host opened and locked ({why}): another process \
         may be using this state directory; this host stops so that two hosts never train the \
         same tasks",
        db.display()
    )]
    LockLost { db: PathBuf, why: String },
    #[error("no store at {} (no host has run with this state directory yet)", path.display())]
    Missing { path: PathBuf },
    #[error(
        "store {} was not closed cleanly (a host had it open{}) and its write-ahead log {} is \
         missing: what the host wrote since it opened the store is in that file. Copy or move \
         the store together with that file; a store closed cleanly (the host stopped with \
         SIGTERM or Ctrl-C) is whole in the database file alone",
        db.display(),
        pid.map(|p| format!(", process {p}")).unwrap_or_default(),
        wal.display()
    )]
    WalMissing {
        db: PathBuf,
        wal: PathBuf,
        pid: Option<i64>,
    },
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

/// Advice for a state directory a host cannot write.
fn unwritable_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied => {
            "; a host needs a state directory it can write: choose one with --state-dir (`tli \
             host status --state-dir DIR` only reads one)"
        }
        _ => "",
    }
}

/// Why the store could not be written, when the cause is the disk rather
/// than the request: the API answers these as RESOURCE_EXHAUSTED and
/// FAILED_PRECONDITION with what to do, not as an internal error.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StorageFault {
    /// SQLITE_FULL: the disk (or a file-size limit) is full.
    Full,
    /// SQLITE_READONLY: the state directory cannot be written.
    ReadOnly,
}

impl StoreError {
    /// The storage fault behind this error, if it is one.
    pub fn storage_fault(&self) -> Option<StorageFault> {
        let (StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
        | StoreError::Open {
            source: rusqlite::Error::SqliteFailure(e, _),
            ..
        }) = self
        else {
            return None;
        };
        match e.code {
            ErrorCode::DiskFull => Some(StorageFault::Full),
            ErrorCode::ReadOnly => Some(StorageFault::ReadOnly),
            _ => None,
        }
    }
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
    // Field order matters: the connections close before the lock is released.
    /// The writer (for a read-only store, one more reader).
    conn: Mutex<Connection>,
    readers: Readers,
    db_path: PathBuf,
    read_only: bool,
    _lock: Option<HostLocks>,
}

/// What keeps a second host off a store: the flock on `host.lock` (it names
/// the holder's pid) and a lock on the database file itself (an OFD lock,
/// which deleting `host.lock` cannot lift). Dropped after the connections:
/// closing the database file's descriptor earlier would also drop SQLite's
/// own POSIX locks on it.
struct HostLocks {
    _flock: File,
    database: File,
}

/// Converts a count or size to SQLite's INTEGER, refusing what does not fit.
fn int(what: &'static str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::OutOfRange { what, value })
}

/// True when SQLite says the file is not a database.
fn is_not_a_database(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::NotADatabase)
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
        let flock = take_host_lock(state_dir, &db_path)?;
        let lock = HostLocks {
            database: lock_database(&db_path)?,
            _flock: flock,
        };
        // Before SQLite touches the file (opening a WAL database creates its
        // log): a store a host had open keeps part of itself in the log,
        // which must be beside it.
        refuse_without_wal(&db_path)?;

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
        mark_session(&conn, true).map_err(open_err)?;
        // After the migration, so that readers find the schema in place.
        let readers = Readers::open(READ_CONNECTIONS, || {
            let reader = Connection::open_with_flags(
                &db_path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(open_err)?;
            reader.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
            Ok(reader)
        })?;
        Ok(Store {
            conn: Mutex::new(conn),
            readers,
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
        let connect = |conn: rusqlite::Result<Connection>| {
            let conn = conn.map_err(open_err)?;
            conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
            let version = read_version(&conn, &db_path)?;
            Ok::<_, StoreError>((conn, version))
        };
        let plain = || {
            Connection::open_with_flags(
                &db_path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
        };
        let (conn, version, immutable) = match connect(plain()) {
            Err(_) if read_only_media::on_read_only_filesystem(state_dir) => {
                let (conn, version) = connect(read_only_media::open_immutable(&db_path))?;
                (conn, version, true)
            }
            other => {
                let (conn, version) = other?;
                (conn, version, false)
            }
        };
        if version < SCHEMA_VERSION {
            return Err(StoreError::Uninitialized { path: db_path });
        }
        // `tli host status` and friends read a few rows: one more connection
        // is plenty.
        let readers = Readers::open(1, || {
            let reader = if immutable {
                read_only_media::open_immutable(&db_path)
            } else {
                plain()
            };
            Ok(connect(reader)?.0)
        })?;
        Ok(Store {
            conn: Mutex::new(conn),
            readers,
            db_path,
            read_only: true,
            _lock: None,
        })
    }

    /// Closes the store cleanly for a host's shutdown: marks it closed and
    /// folds the write-ahead log into the database file (a TRUNCATE
    /// checkpoint), so that the file alone is the whole store — a copy of it
    /// is a backup. A write after this goes to the log again (and the store
    /// is marked closed only by the next call or the store's drop). Nothing
    /// for a read-only store.
    pub fn close_cleanly(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        let conn = self.conn();
        mark_session(&conn, false)?;
        Ok(())
    }

    /// Whether the database file at the store's path is still the one this
    /// host opened and locked (not deleted, moved or replaced). A host
    /// checks it every few seconds and stops when it is not. Always `Ok`
    /// for a read-only store.
    pub fn check_lock(&self) -> Result<(), StoreError> {
        let Some(locks) = &self._lock else {
            return Ok(());
        };
        let lost = |why: String| StoreError::LockLost {
            db: self.db_path.clone(),
            why,
        };
        let held = locks
            .database
            .metadata()
            .map_err(|e| lost(format!("cannot read the locked file: {e}")))?;
        match std::fs::symlink_metadata(&self.db_path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(lost("it was deleted or moved".into()))
            }
            Err(e) => Err(lost(format!("cannot read it: {e}"))),
            Ok(now) if (now.dev(), now.ino()) != (held.dev(), held.ino()) => {
                Err(lost("another file took its place".into()))
            }
            Ok(_) => Ok(()),
        }
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

    /// A read connection: for statements that only read, outside any write
    /// transaction. It never waits for a write in progress (see `readers.rs`).
    fn reader(&self) -> MutexGuard<'_, Connection> {
        self.readers.get()
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
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.db_path)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Runs before the fields drop: the writer is still open here.
        if let Err(e) = self.close_cleanly() {
            tracing::warn!("closing the store {}: {e}", self.db_path.display());
        }
    }
}

/// The write-ahead log's path beside `db`.
fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push("-wal");
    PathBuf::from(name)
}

/// Refuses a store whose database file says a host had it open while its
/// write-ahead log is not beside it (a copy or a move of the file alone).
/// Reads the file as it is (SQLite's `immutable`: no log, no lock, nothing
/// created); anything it cannot read is left to the normal open to report.
fn refuse_without_wal(db: &Path) -> Result<(), StoreError> {
    let wal = wal_path(db);
    // `symlink_metadata`: whatever is at either name counts as present.
    if std::fs::symlink_metadata(db).is_err() || std::fs::symlink_metadata(&wal).is_ok() {
        return Ok(());
    }
    let Ok(conn) = read_only_media::open_immutable(db) else {
        return Ok(());
    };
    let session = conn
        .pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))
        .ok()
        .filter(|&version| version >= 10)
        .and_then(|_| {
            conn.query_row(
                "SELECT open, pid FROM store_session WHERE id = 1",
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<i64>>(1)?)),
            )
            .ok()
        });
    match session {
        Some((open, pid)) if open != 0 => Err(StoreError::WalMissing {
            db: db.to_path_buf(),
            wal,
            pid,
        }),
        _ => Ok(()),
    }
}

/// Records whether a host has the store open, then folds the log into the
/// database file (TRUNCATE checkpoint) so the file itself says so.
fn mark_session(conn: &Connection, open: bool) -> Result<(), rusqlite::Error> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let pid = open.then(|| i64::from(std::process::id()));
    conn.execute(
        "UPDATE store_session SET open = ?1, pid = ?2, changed_ms = ?3 WHERE id = 1",
        rusqlite::params![open as i64, pid, now],
    )?;
    // (busy, log frames, checkpointed frames): busy = 1 when a reader kept
    // the checkpoint from finishing; the log then still holds the rest.
    let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
    if busy != 0 {
        tracing::warn!(
            "the store's write-ahead log could not be folded in completely (a reader was busy)"
        );
    }
    Ok(())
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

/// Where on the database file the host's lock sits: one byte far beyond
/// any range SQLite locks (its lock bytes start at 1 GiB) or any size the
/// file reaches.
const DATABASE_LOCK_OFFSET: libc::off_t = 1 << 50;

/// Opens (creating it empty if needed: SQLite takes an empty file as an
/// empty database) and write-locks the database file with an open file
/// description lock, which belongs to this descriptor: it goes away only
/// when the host's descriptor closes, whatever happens to `host.lock`.
fn lock_database(db: &Path) -> Result<File, StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(db)
        .map_err(|source| StoreError::Io {
            action: "open",
            path: db.to_path_buf(),
            source,
        })?;
    // SAFETY: an all-zero `flock` is a valid value of this plain C struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = DATABASE_LOCK_OFFSET;
    lock.l_len = 1;
    // SAFETY: fcntl(F_OFD_SETLK) on a descriptor `file` owns, with a valid `flock`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) {
            let holder = db
                .parent()
                .and_then(|dir| std::fs::read_to_string(dir.join(LOCK_FILE)).ok())
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty());
            return Err(StoreError::DatabaseLocked {
                db: db.to_path_buf(),
                holder,
            });
        }
        return Err(StoreError::Io {
            action: "lock",
            path: db.to_path_buf(),
            source: err,
        });
    }
    Ok(file)
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

#[cfg(test)]
mod session_tests {
    use super::*;

    fn copy_db_alone(from: &Path) -> tempfile::TempDir {
        let to = tempfile::tempdir().unwrap();
        std::fs::copy(from.join(DB_FILE), to.path().join(DB_FILE)).unwrap();
        to
    }

    #[test]
    fn deleting_host_lock_does_not_let_a_second_host_in() {
        let dir = tempfile::tempdir().unwrap();
        let first = Store::open(dir.path()).unwrap();
        std::fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::DatabaseLocked { .. }), "{err}");
        assert!(err.to_string().contains("another host"), "{err}");
        first.check_lock().unwrap();
        drop(first);
        // Released with the first host: a new one gets in.
        Store::open(dir.path()).unwrap();
    }

    #[test]
    fn a_host_notices_when_its_database_file_is_moved_or_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.check_lock().unwrap();
        let db = dir.path().join(DB_FILE);
        let aside = dir.path().join("moved.sqlite3");
        std::fs::rename(&db, &aside).unwrap();
        let err = store.check_lock().unwrap_err();
        assert!(err.to_string().contains("deleted or moved"), "{err}");
        std::fs::write(&db, b"").unwrap();
        let err = store.check_lock().unwrap_err();
        assert!(
            err.to_string().contains("another file took its place"),
            "{err}"
        );
        std::fs::remove_file(&db).unwrap();
        std::fs::rename(&aside, &db).unwrap();
        store.check_lock().unwrap();
    }

    #[test]
    fn a_store_closed_cleanly_is_whole_in_its_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (job, _) = store.create_job("kept", "{}", &[]).unwrap();
        store.close_cleanly().unwrap();
        // Still open (a process that exits now never drops it): the file alone holds the job.
        let copy = copy_db_alone(dir.path());
        let reopened = Store::open(copy.path()).unwrap();
        assert!(
            reopened.job(job).unwrap().is_some(),
            "the job is in the copy"
        );
        drop(store);
    }

    #[test]
    fn the_database_file_of_an_open_store_alone_is_refused_with_what_to_copy() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.create_job("in the log", "{}", &[]).unwrap();
        let copy = copy_db_alone(dir.path());
        let err = Store::open(copy.path()).unwrap_err();
        assert!(matches!(err, StoreError::WalMissing { .. }), "{err}");
        let message = err.to_string();
        assert!(
            message.contains("tli.sqlite3-wal") && message.contains("together with"),
            "{message}"
        );
        // Nothing was written to the refused copy: it is refused again, the same way.
        assert!(matches!(
            Store::open(copy.path()).unwrap_err(),
            StoreError::WalMissing { .. }
        ));
        // With its log beside it, the same copy opens and holds the job.
        drop(store);
        let dir2 = tempfile::tempdir().unwrap();
        let store = Store::open(dir2.path()).unwrap();
        let (job, _) = store.create_job("in the log", "{}", &[]).unwrap();
        let copy = copy_db_alone(dir2.path());
        std::fs::copy(
            wal_path(&dir2.path().join(DB_FILE)),
            wal_path(&copy.path().join(DB_FILE)),
        )
        .unwrap();
        let reopened = Store::open(copy.path()).unwrap();
        assert!(reopened.job(job).unwrap().is_some());
        drop(store);
    }
}
