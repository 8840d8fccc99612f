//! The SQL schema of the store, version by version, and the migration that
//! brings an older file up to [`SCHEMA_VERSION`]; also the column lists and
//! statements that other parts of the store share.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::{classify, StoreError, SCHEMA_VERSION};

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

/// Version 3: the out-of-memory re-queue count as a number (it was read by
/// matching transition reasons), counted from the history once.
const SCHEMA_V3: &str = "
ALTER TABLE tasks ADD COLUMN oom_requeues INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET oom_requeues = (SELECT COUNT(*) FROM transitions t
    WHERE t.task_id = tasks.id AND t.to_state = 'queued' AND t.reason LIKE 'out of memory%');
";

/// Version 4: the measured memory by component and where its activations
/// figure comes from (NULL until measured, and for rows of older hosts).
const SCHEMA_V4: &str = "
ALTER TABLE tasks ADD COLUMN measured_parameters INTEGER;
ALTER TABLE tasks ADD COLUMN measured_gradients INTEGER;
ALTER TABLE tasks ADD COLUMN measured_optimizer_state INTEGER;
ALTER TABLE tasks ADD COLUMN measured_activations INTEGER;
ALTER TABLE tasks ADD COLUMN measured_source TEXT
    CHECK (measured_source IN ('plugin_count', 'cuda_allocator'));
";

/// Version 5: dispatches of tasks to an executor beyond the host (a Slurm
/// job per attempt). The row id is the lease a worker acts under; an open
/// row (`ended_ms` NULL) is re-adopted by a restarted host while its Slurm
/// job lives.
const SCHEMA_V5: &str = "
CREATE TABLE dispatches (
    id            INTEGER PRIMARY KEY,
    task_id       INTEGER NOT NULL REFERENCES tasks(id),
    executor      TEXT    NOT NULL,
    external_id   TEXT,
    request       TEXT,
    node          TEXT,
    submitted_ms  INTEGER NOT NULL,
    ended_ms      INTEGER,
    end_reason    TEXT
);
CREATE INDEX dispatches_by_task ON dispatches(task_id, id);
CREATE INDEX dispatches_open ON dispatches(ended_ms);
";

/// Version 6: the memory budget of each device over time (the arbiter's
/// budget, recorded when a host opens the store with a budget that differs
/// from the last one), for the memory timeline of `tli train plot`.
const SCHEMA_V6: &str = "
CREATE TABLE device_budgets (
    id      INTEGER PRIMARY KEY,
    device  TEXT    NOT NULL,
    bytes   INTEGER NOT NULL,
    at_ms   INTEGER NOT NULL
);
CREATE INDEX device_budgets_by_device ON device_budgets(device, at_ms);
";

/// Version 7: the plugin version each task was submitted with (or resumed
/// on, after the one it was submitted with was gone) and the SHA-256 of
/// that library; NULL for rows of older hosts.
const SCHEMA_V7: &str = "
ALTER TABLE tasks ADD COLUMN plugin_version TEXT;
ALTER TABLE tasks ADD COLUMN plugin_checksum TEXT;
";

/// Version 8: each task's model card (what `tli models export` writes as
/// `model.json`, without weights, metrics or steps), recorded at submission
/// for tasks trained on bar files.
const SCHEMA_V8: &str = "
CREATE TABLE model_cards (
    task_id INTEGER PRIMARY KEY REFERENCES tasks(id),
    card TEXT NOT NULL
);
";

/// Version 9: best checkpoints (`keep_best`), kept apart from the newest
/// ones: the metric, its value at the checkpoint and which way is better.
/// NULL for the newest-kept (routine) checkpoints.
const SCHEMA_V9: &str = "
ALTER TABLE checkpoints ADD COLUMN best_metric TEXT;
ALTER TABLE checkpoints ADD COLUMN best_value REAL;
ALTER TABLE checkpoints ADD COLUMN best_mode TEXT;
";

/// Whether a host has the store open: set when one opens it, cleared when it
/// closes it cleanly, each time folded into the database file itself (see
/// `Store::open`), so a copy of the file alone tells whether it is whole.
const SCHEMA_V10: &str = "
CREATE TABLE store_session (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    open INTEGER NOT NULL,
    pid INTEGER,
    changed_ms INTEGER NOT NULL
);
INSERT INTO store_session (id, open, pid, changed_ms) VALUES (1, 0, NULL, 0);
";

/// What each ended dispatch's job used, from the executor's accounting
/// (Slurm's `sacct`): NULL until known.
const SCHEMA_V11: &str = "
ALTER TABLE dispatches ADD COLUMN usage_elapsed_s REAL;
ALTER TABLE dispatches ADD COLUMN usage_cpus INTEGER;
ALTER TABLE dispatches ADD COLUMN usage_gpus REAL;
";

/// Rebuilds one task's `latest_metrics` rows from its history.
pub(super) const REBUILD_LATEST_METRICS: &str = "
INSERT INTO latest_metrics (task_id, name, step, value)
    SELECT m.task_id, m.name, m.step, m.value FROM metrics m
    WHERE m.task_id = ?1 AND m.rowid = (SELECT rowid FROM metrics
                     WHERE task_id = m.task_id AND name = m.name
                     ORDER BY step DESC, rowid DESC LIMIT 1)";

pub(super) const TASK_COLUMNS: &str =
    "id, job_id, ordinal, plugin, asset, config_json, seed, total_steps, \
     priority, device, estimate_bytes, measured_bytes, cost_weight, state, steps_done, error, \
     created_ms, updated_ms, oom_requeues, measured_parameters, measured_gradients, \
     measured_optimizer_state, measured_activations, measured_source, plugin_version, \
     plugin_checksum";

pub(super) const RESERVATION_COLUMNS: &str = "id, task_id, device, bytes, reserved_ms, released_ms";

/// Reads `user_version`, refusing a schema newer than this host's.
pub(super) fn read_version(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
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
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
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
    if version < 3 {
        tx.execute_batch(SCHEMA_V3).map_err(open_err)?;
    }
    if version < 4 {
        tx.execute_batch(SCHEMA_V4).map_err(open_err)?;
    }
    if version < 5 {
        tx.execute_batch(SCHEMA_V5).map_err(open_err)?;
    }
    if version < 6 {
        tx.execute_batch(SCHEMA_V6).map_err(open_err)?;
    }
    if version < 7 {
        tx.execute_batch(SCHEMA_V7).map_err(open_err)?;
    }
    if version < 8 {
        tx.execute_batch(SCHEMA_V8).map_err(open_err)?;
    }
    if version < 9 {
        tx.execute_batch(SCHEMA_V9).map_err(open_err)?;
    }
    if version < 10 {
        tx.execute_batch(SCHEMA_V10).map_err(open_err)?;
    }
    if version < 11 {
        tx.execute_batch(SCHEMA_V11).map_err(open_err)?;
    }
    // Later versions: `if version < 12 { ... }` here.
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(open_err)?;
    tx.commit().map_err(open_err)
}
