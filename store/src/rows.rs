//! The store's row types (what goes in and what comes out of its tables) and
//! the readers that turn an SQLite row into them.

use rusqlite::types::Type;
use serde::{Deserialize, Serialize};
use tli_plugin_api::Device;

use tli_core::state::TaskState;
use tli_core::{JobId, TaskId};

/// A task to be created with its job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewTask {
    pub plugin: String,
    pub asset: String,
    pub config_json: String,
    pub seed: u64,
    pub total_steps: u64,
    pub priority: i32,
    pub device: Device,
    pub estimate_bytes: u64,
    pub cost_weight: f64,
    /// The version of the plugin library chosen at submission, and its SHA-256.
    pub plugin_version: Option<String>,
    pub plugin_checksum: Option<String>,
    /// What the task's model keeps of its inputs (a `model.json` card without
    /// weights, metrics or steps), for tasks trained on bar files.
    pub model_card: Option<String>,
}

/// One slice's metrics: the step they were measured at, and when (Unix ms;
/// a runner batches several slices into one store write, and each metric
/// row keeps its own slice's time).
#[derive(Clone, Debug, PartialEq)]
pub struct SliceMetrics {
    pub step: u64,
    pub at_ms: i64,
    pub metrics: Vec<(String, f64)>,
}

impl SliceMetrics {
    /// Metrics measured now.
    pub fn now(step: u64, metrics: Vec<(String, f64)>) -> Self {
        Self {
            step,
            at_ms: tli_core::now_ms(),
            metrics,
        }
    }
}

/// How many tasks one plugin version has ([`super::Store::plugin_version_use`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginVersionUse {
    pub plugin: String,
    pub version: String,
    /// Queued, running, checkpointing or interrupted.
    pub active_tasks: u64,
    pub tasks: u64,
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
    pub device: Device,
    pub estimate_bytes: u64,
    pub measured_bytes: Option<u64>,
    pub cost_weight: f64,
    pub state: TaskState,
    pub steps_done: u64,
    /// Why the task failed (set on `failed`, cleared on `queued`).
    pub error: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// How often it was re-queued after running out of memory.
    pub oom_requeues: u32,
    /// `measured_bytes` by component (version 4; `None` for older rows).
    pub measured_memory: Option<MeasuredMemory>,
    /// The plugin version that runs (or last ran) the task and the SHA-256
    /// of its library (version 7; `None` for older rows).
    pub plugin_version: Option<String>,
    pub plugin_checksum: Option<String>,
}

/// What a task measured after its first slice, by component. The parts sum
/// to the task's `measured_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasuredMemory {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    /// Everything else at the slice's peak (activations, batches, buffers).
    pub activations: u64,
    pub source: MemorySource,
}

impl MeasuredMemory {
    pub fn total(&self) -> u64 {
        self.parameters
            .saturating_add(self.gradients)
            .saturating_add(self.optimizer_state)
            .saturating_add(self.activations)
    }
}

/// Where a measurement's activations come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// The plugin's own count of its tensors (the CPU, or a CUDA task that
    /// was not alone on its device).
    PluginCount,
    /// libtorch's CUDA caching allocator: its peak while the task was alone.
    CudaAllocator,
}

impl MemorySource {
    pub fn as_str(self) -> &'static str {
        match self {
            MemorySource::PluginCount => "plugin_count",
            MemorySource::CudaAllocator => "cuda_allocator",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [MemorySource::PluginCount, MemorySource::CudaAllocator]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
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
    /// Set for a best checkpoint (`keep_best`), kept apart from the newest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best: Option<BestMark>,
}

/// What made a checkpoint one of a task's best.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BestMark {
    pub metric: String,
    pub value: f64,
    pub mode: tli_core::selection::Mode,
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

pub(super) fn transition_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TransitionRow> {
    Ok(TransitionRow {
        id: r.get(0)?,
        task_id: r.get(1)?,
        from: opt_state_at(r, 2)?,
        to: state_at(r, 3)?,
        reason: r.get(4)?,
        at_ms: r.get(5)?,
    })
}

pub(super) fn device_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Device> {
    let text: String = row.get(idx)?;
    text.parse().map_err(|e: tli_plugin_api::DeviceParseError| {
        rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, e.into())
    })
}

pub(super) fn state_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<TaskState> {
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

/// Columns `idx..idx + 5`: parameters, gradients, optimizer state,
/// activations, source; `None` while the source is NULL.
fn measured_memory_at(
    row: &rusqlite::Row<'_>,
    idx: usize,
) -> rusqlite::Result<Option<MeasuredMemory>> {
    let Some(source) = row.get::<_, Option<String>>(idx + 4)? else {
        return Ok(None);
    };
    let source = MemorySource::parse(&source).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            idx + 4,
            Type::Text,
            format!("unknown memory source {source:?}").into(),
        )
    })?;
    Ok(Some(MeasuredMemory {
        parameters: row.get(idx)?,
        gradients: row.get(idx + 1)?,
        optimizer_state: row.get(idx + 2)?,
        activations: row.get(idx + 3)?,
        source,
    }))
}

pub(super) fn task_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRow> {
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
        device: device_at(row, 9)?,
        estimate_bytes: row.get(10)?,
        measured_bytes: row.get(11)?,
        cost_weight: row.get(12)?,
        state: state_at(row, 13)?,
        steps_done: row.get(14)?,
        error: row.get(15)?,
        created_ms: row.get(16)?,
        updated_ms: row.get(17)?,
        oom_requeues: row.get(18)?,
        measured_memory: measured_memory_at(row, 19)?,
        plugin_version: row.get(24)?,
        plugin_checksum: row.get(25)?,
    })
}

pub(super) fn reservation_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ReservationRow> {
    Ok(ReservationRow {
        id: row.get(0)?,
        task_id: row.get(1)?,
        device: row.get(2)?,
        bytes: row.get(3)?,
        reserved_ms: row.get(4)?,
        released_ms: row.get(5)?,
    })
}
