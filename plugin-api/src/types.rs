//! Plain data that crosses the host ↔ plugin boundary.
//!
//! Everything here is `#[repr(C)]` + `StableAbi` and built only from abi_stable's
//! std types, so abi_stable can check its layout when a plugin is loaded. No
//! `tch::Tensor`, no Rust std collections, no file paths for data.

use abi_stable::{
    std_types::{RString, RVec},
    StableAbi,
};
use std::fmt;

/// Why a plugin call failed. A newtype over `u32` rather than an enum so that
/// later API minors can add codes without breaking the layout: an unknown code
/// reads as [`ErrorCode::OTHER`]-like and is still printable.
#[repr(transparent)]
#[derive(StableAbi, Copy, Clone, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// Anything not covered below.
    pub const OTHER: Self = Self(0);
    /// The JSON config was malformed or a value was out of range.
    pub const INVALID_CONFIG: Self = Self(1);
    /// The dataset does not fit what the plugin needs (too few rows, no features…).
    pub const INVALID_DATA: Self = Self(2);
    /// The plugin panicked; the panic was caught at the ABI boundary.
    pub const PANIC: Self = Self(3);
    /// Reading or writing a checkpoint failed.
    pub const IO: Self = Self(4);
    /// The device ran out of memory.
    pub const OUT_OF_MEMORY: Self = Self(5);
    /// The requested device is not available or not supported by this plugin.
    pub const UNSUPPORTED_DEVICE: Self = Self(6);
    /// The trainer refuses further calls because an earlier call panicked.
    pub const POISONED: Self = Self(7);
    /// The host asked the plugin to stop.
    pub const CANCELLED: Self = Self(8);
    /// The plugin does not do what was asked (1.2: e.g. a train-only plugin
    /// asked for a predictor).
    pub const UNSUPPORTED: Self = Self(9);

    /// A short stable name for logs and JSON output.
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "invalid_config",
            2 => "invalid_data",
            3 => "panic",
            4 => "io",
            5 => "out_of_memory",
            6 => "unsupported_device",
            7 => "poisoned",
            8 => "cancelled",
            9 => "unsupported",
            _ => "other",
        }
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// The error every plugin entry point returns instead of unwinding.
#[repr(C)]
#[derive(StableAbi, Clone, PartialEq, Eq)]
pub struct PluginError {
    pub code: ErrorCode,
    pub message: RString,
}

impl PluginError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: RString::from(message.into()),
        }
    }
    pub fn invalid_config(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INVALID_CONFIG, message)
    }
    pub fn invalid_data(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INVALID_DATA, message)
    }
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::IO, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::UNSUPPORTED, message)
    }
    pub fn other(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::OTHER, message)
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.name(), self.message)
    }
}

impl fmt::Debug for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for PluginError {}

/// What a plugin says about itself. `api_version` is filled in by
/// [`export_plugin!`](crate::export_plugin) with the plugin-API version the
/// plugin was compiled against; plugin authors do not set it.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct PluginManifest {
    /// Unique plugin name, e.g. `template`. Lower-case, `[a-z0-9_-]`.
    pub name: RString,
    /// The plugin's own semver.
    pub version: RString,
    /// The plugin-API semver it was built against.
    pub api_version: RString,
    /// Model family, e.g. `mlp`, `dqn`, `ppo`, `mamba2`, `tft`.
    pub family: RString,
    /// One line for humans.
    pub description: RString,
    /// The config used when the user gives none (JSON object).
    pub default_config: RString,
    /// JSON Schema of the config (draft 2020-12).
    pub config_schema: RString,
}

/// A named scalar reported by a trainer.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct Metric {
    pub name: RString,
    pub value: f64,
}

impl Metric {
    pub fn new(name: &str, value: f64) -> Self {
        Self {
            name: name.into(),
            value,
        }
    }
}

/// Result of `Trainer::step(n)`.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default)]
pub struct StepReport {
    /// Steps actually done by this call (≤ n; fewer only when cancelled).
    pub steps_done: u64,
    pub metrics: RVec<Metric>,
}

/// Result of `Trainer::evaluate()`: metrics on the validation split.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default)]
pub struct EvalReport {
    pub metrics: RVec<Metric>,
}

/// Bytes of device memory, by what holds them. Used both for estimates
/// (before a trainer exists) and for measurements (of a live trainer).
#[repr(C)]
#[derive(StableAbi, Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryBreakdown {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    /// Activations, replay buffers, batches: everything else the trainer holds
    /// at its peak.
    pub activations: u64,
}

impl MemoryBreakdown {
    pub fn total(&self) -> u64 {
        self.parameters + self.gradients + self.optimizer_state + self.activations
    }
}

/// The shape of a dataset, enough to estimate memory before creating a trainer.
#[repr(C)]
#[derive(StableAbi, Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DatasetShape {
    pub rows: u64,
    pub features: u64,
    pub targets: u64,
}

/// Chronological split points, as row indices: train = `[0, train_end)`,
/// validation = `[valid_start, valid_end)`, test = `[test_start, rows)`.
/// The gaps between them are the embargo.
#[repr(C)]
#[derive(StableAbi, Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SplitBounds {
    pub train_end: u64,
    pub valid_start: u64,
    pub valid_end: u64,
    pub test_start: u64,
}

/// What a plugin needs to turn positions into money for one futures contract.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq)]
pub struct ContractTerms {
    /// Contract root, e.g. `ES`.
    pub root: RString,
    /// Minimum price increment, in price units (ES: 0.25).
    pub tick_size: f64,
    /// Currency per 1.0 move of the price, per contract (ES: 50.0, so a tick is 12.50).
    pub point_value: f64,
    /// ISO currency code of `point_value`, e.g. `USD`.
    pub currency: RString,
}

impl ContractTerms {
    /// Currency value of one tick for one contract.
    pub fn tick_value(&self) -> f64 {
        self.tick_size * self.point_value
    }
}

/// Features and targets for one symbol, as row-major `f32` matrices.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default)]
pub struct Dataset {
    /// e.g. `ES.FUT`.
    pub symbol: RString,
    /// Bar timestamps, UTC nanoseconds since the Unix epoch, one per row.
    pub timestamps: RVec<i64>,
    /// `rows × feature_names.len()`, row-major, already normalized.
    pub features: RVec<f32>,
    pub feature_names: RVec<RString>,
    /// `rows × target_names.len()`, row-major (e.g. forward returns).
    pub targets: RVec<f32>,
    pub target_names: RVec<RString>,
    pub splits: SplitBounds,
    /// Raw (not normalized) close price of each row's bar, in price units:
    /// what trading environments mark positions to.
    pub close: RVec<f64>,
    pub contract: ContractTerms,
    /// Bars per year, for annualizing Sharpe and Sortino (252 for daily bars).
    pub periods_per_year: f64,
}

impl Dataset {
    pub fn rows(&self) -> usize {
        self.timestamps.len()
    }
    pub fn shape(&self) -> DatasetShape {
        DatasetShape {
            rows: self.rows() as u64,
            features: self.feature_names.len() as u64,
            targets: self.target_names.len() as u64,
        }
    }
    /// Checks that the matrices agree with the names and row count.
    pub fn check_consistent(&self) -> Result<(), PluginError> {
        let rows = self.rows();
        let (nf, nt) = (self.feature_names.len(), self.target_names.len());
        if self.features.len() != rows * nf {
            return Err(PluginError::invalid_data(format!(
                "features hold {} values, expected rows {rows} × {nf} features",
                self.features.len()
            )));
        }
        if self.targets.len() != rows * nt {
            return Err(PluginError::invalid_data(format!(
                "targets hold {} values, expected rows {rows} × {nt} targets",
                self.targets.len()
            )));
        }
        if self.close.len() != rows {
            return Err(PluginError::invalid_data(format!(
                "close holds {} prices for {rows} rows",
                self.close.len()
            )));
        }
        let s = self.splits;
        if !(s.train_end <= s.valid_start
            && s.valid_start <= s.valid_end
            && s.valid_end <= s.test_start
            && s.test_start <= rows as u64)
        {
            return Err(PluginError::invalid_data(format!(
                "split bounds {s:?} are not ordered within {rows} rows"
            )));
        }
        Ok(())
    }
}

/// Everything a plugin needs to create one trainer.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct TaskSpec {
    /// Host-assigned id, for log lines and checkpoint names.
    pub task_id: RString,
    /// Validated config JSON (the output of `validate_config`).
    pub config_json: RString,
    /// `cpu` or `cuda:N`.
    pub device: RString,
    pub seed: u64,
    /// The step budget of the task; trainers may use it for schedules.
    pub max_steps: u64,
    pub dataset: abi_stable::std_types::RArc<Dataset>,
}

/// Severity of a plugin log line. A newtype, so later minors may add levels.
#[repr(transparent)]
#[derive(StableAbi, Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct LogLevel(pub u8);

impl LogLevel {
    pub const ERROR: Self = Self(1);
    pub const WARN: Self = Self(2);
    pub const INFO: Self = Self(3);
    pub const DEBUG: Self = Self(4);
    pub const TRACE: Self = Self(5);
}
