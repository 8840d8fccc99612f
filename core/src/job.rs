//! Job specifications: what a user submits. One job = models × assets; each
//! (model, asset) pair becomes one task with its own config, seed and step
//! budget.
//!
//! ```json
//! {
//!   "name": "es-nq-sweep",
//!   "models": [
//!     {"plugin": "template", "steps": 2000, "config": {"hidden_sizes": [64, 64]}},
//!     {"plugin": "template", "steps": 2000, "config": {"hidden_sizes": [256]}, "priority": 1}
//!   ],
//!   "assets": [
//!     {"data": "data/samples/es_proxy_sp500_1d.dbn.zst"},
//!     {"data": "data/samples/nq_proxy_nasdaq_1d.dbn.zst"},
//!     {"data": "data/samples/es_proxy_sp500_1d.csv", "symbol": "ES"},
//!     {"synthetic": {"rows": 20000}}
//!   ],
//!   "seed": 7,
//!   "device": "cpu",
//!   "features": {"return_horizons": [1, 5, 20]},
//!   "checkpoint": {"every_steps": 500, "every_seconds": 300, "keep": 3},
//!   "slice_steps": 10,
//!   "executor": "slurm",
//!   "slurm": {"gpus_per_task": 1, "time_limit_minutes": 120}
//! }
//! ```
//! Task seeds are `seed + task ordinal`, so every task differs and a job is
//! reproducible. Left out: `seed` 1, `device` cpu, `slice_steps` 10, features
//! the pipeline's defaults, `checkpoint` every 300 s keeping 3. In
//! `checkpoint`, an `every_steps`/`every_seconds` of 0 or `null` means never
//! (as in the API). `executor` (`local` or `slurm`) pins where the tasks run;
//! left out, the host's default. `slurm` applies to the Slurm executor only.
//! A `data` asset may give `symbol` (the bars' symbol, which names the asset
//! and chooses its contract; see `tli_data::bar_source` for how it meets a
//! symbol the file states) and `tz` (the IANA zone of timestamps written
//! without one).

use crate::executor::{ExecutorKind, SlurmJobOptions};
use crate::selection::{EarlyStopping, KeepBest, Selection};
pub use crate::spec_error::{SpecError, MAX_MESSAGE_CHARS};
use crate::sweep::SweepSpec;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use tli_data::bar_source::check_symbol;
use tli_data::features::FeatureConfig;
use tli_data::timefmt::UtcTime;
pub use tli_data::walk_forward::{FoldDates, WalkForward};
use tli_data::zones::LocalZone;
use tli_data::BarSource;
use tli_plugin_api::Device;

pub const MAX_STEPS: u64 = 1_000_000_000;
pub const MAX_TASKS: usize = 1024;

/// The job seed when none is given (the API's 0 means this too), and the
/// seed of `tli train local` and `tli profile memory` without `--seed`.
pub const DEFAULT_SEED: u64 = 1;
/// Optimisation steps per task when the command line gives none (`tli train
/// start` and `tli train local` alike).
pub const DEFAULT_STEPS: u64 = 1000;
/// Steps per call into the plugin when none is given (the API's 0 means this too).
pub const DEFAULT_SLICE_STEPS: u64 = 10;
/// Checkpoints kept per task when none is given (the API's 0 means this too).
pub const DEFAULT_CHECKPOINT_KEEP: usize = 3;
/// Routine checkpoints are time-based by default: one every five minutes,
/// plus one at every stop and at the end. A step-based default made fast
/// agents write one (DQN's with its replay buffer) about every second.
pub const DEFAULT_CHECKPOINT_SECONDS: f64 = 300.0;
/// Rows of a synthetic asset, inclusive.
pub const SYNTHETIC_ROWS: std::ops::RangeInclusive<usize> = 64..=10_000_000;
/// Steps per slice, inclusive.
pub const SLICE_STEPS: std::ops::RangeInclusive<u64> = 1..=1_000_000;

/// A job: what [`JobSpec::from_json`] and the API's conversion produce. Its
/// JSON form is the job-spec file format (and what the store keeps).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "JobSpecFile", into = "JobSpecFile")]
pub struct JobSpec {
    pub name: String,
    pub models: Vec<ModelSpec>,
    pub assets: Vec<AssetSpec>,
    pub seed: u64,
    pub device: Device,
    pub features: FeatureConfig,
    pub checkpoint: CheckpointPolicy,
    /// Steps per call into the plugin; progress, cancellation and checkpoints
    /// happen between calls.
    pub slice_steps: u64,
    /// Where the tasks run; `None` = the host's default executor.
    pub executor: Option<ExecutorKind>,
    /// What each task asks of Slurm (the Slurm executor only).
    pub slurm: SlurmJobOptions,
    /// Walk-forward evaluation: every (model, asset) trained once per fold,
    /// each fold a task (tli_data::walk_forward).
    pub walk_forward: Option<WalkForward>,
    /// A hyperparameter sweep (tli_core::sweep): `models` are its trials,
    /// one per trial in trial order, derived from it (a spec file gives
    /// `sweep` instead of `models`).
    pub sweep: Option<SweepSpec>,
    /// Every data file the job reads (bar and covariate files) as it was
    /// when the job was submitted; recorded by the host, which refuses to
    /// start a task on a file that has changed since. Empty for a spec
    /// that was never submitted (anything a client sends here is replaced).
    pub inputs: Vec<InputFile>,
}

/// A data file as a job saw it: where its path led and what it held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputFile {
    /// The path as the job names it.
    pub path: PathBuf,
    /// The file it led to (every symbolic link and `..` followed).
    pub resolved: PathBuf,
    /// Bytes.
    pub size: u64,
    /// Last modification, nanoseconds since the Unix epoch.
    pub modified_ns: i64,
    /// SHA-256 of its bytes, lower-case hex.
    pub sha256: String,
}

impl InputFile {
    /// What differs between the file as recorded (`self`) and as it is now,
    /// for a message ("size 120 → 180 bytes, sha256 1a2b3c4d… → 5e6f7a8b…");
    /// `None` when it is the same file with the same bytes.
    pub fn change_from(&self, now: &InputFile) -> Option<String> {
        let mut changes = Vec::new();
        if self.resolved != now.resolved {
            changes.push(format!(
                "it now leads to {} instead of {}",
                now.resolved.display(),
                self.resolved.display()
            ));
        }
        if self.size != now.size {
            changes.push(format!("size {} → {} bytes", self.size, now.size));
        }
        if self.sha256 != now.sha256 {
            let short = |h: &str| h.get(..8).unwrap_or(h).to_string();
            changes.push(format!(
                "sha256 {}… → {}…",
                short(&self.sha256),
                short(&now.sha256)
            ));
        } else if self.modified_ns != now.modified_ns && changes.is_empty() {
            // Touched but the same bytes: the same input.
            return None;
        }
        (!changes.is_empty()).then(|| changes.join(", "))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub plugin: String,
    pub steps: u64,
    /// Plugin config (a JSON object); defaults to the plugin's default config.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// Higher runs first when memory is short.
    #[serde(default)]
    pub priority: i32,
    /// One task trained across every asset of the job (the asset index is a
    /// static covariate) instead of one task per asset. Needs a plugin with
    /// the `pooled` capability (plugin API 1.1).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pooled: bool,
    /// Keep the best checkpoints by a validation metric; the task's model is the best.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_best: Option<KeepBest>,
    /// Stop a task whose validation metric stopped improving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stopping: Option<EarlyStopping>,
}

impl ModelSpec {
    /// Its `keep_best` and `early_stopping` together.
    pub fn selection(&self) -> Selection {
        Selection {
            keep_best: self.keep_best.clone(),
            early_stopping: self.early_stopping.clone(),
        }
    }
}

/// Where an asset's bars come from: exactly one source.
#[derive(Clone, Debug, PartialEq)]
pub enum AssetSpec {
    /// A bar file (DBN, Parquet, CSV), with the symbol and time zone the
    /// user gave, if any.
    Data(BarSource),
    /// The synthetic AR(1) dataset (for tests and demos).
    Synthetic(SyntheticAsset),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticAsset {
    pub rows: usize,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// σ of the AR(1) innovations (the series' scale); default 0.01.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma: Option<f64>,
    /// Instead of the AR(1) series: one asset of the planted seasonal set
    /// (`tli_data::synthetic_seasonal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seasonal: Option<SeasonalPick>,
}

/// Asset `asset` of a planted seasonal set of `assets` (the same calendar,
/// an amplitude by asset index, independent noise and flow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeasonalPick {
    pub asset: usize,
    pub assets: usize,
}

/// Most assets a planted seasonal set may have.
pub const MAX_SEASONAL_ASSETS: usize = 64;

/// When a running task writes routine checkpoints (besides the ones at a
/// stop, at a host shutdown and at the end, which are always written).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointPolicy {
    /// Checkpoint whenever this many steps have passed since the last one.
    pub every_steps: Option<u64>,
    /// … or this many seconds.
    pub every_seconds: Option<f64>,
    /// Checkpoints kept per task (the newest ones).
    pub keep: usize,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        Self {
            every_steps: None,
            every_seconds: Some(DEFAULT_CHECKPOINT_SECONDS),
            keep: DEFAULT_CHECKPOINT_KEEP,
        }
    }
}

impl CheckpointPolicy {
    /// The one rule for intervals, in spec files and in the API alike: 0 (or
    /// `null` in a file) means never.
    pub fn with_intervals(
        every_steps: Option<u64>,
        every_seconds: Option<f64>,
        keep: usize,
    ) -> Self {
        Self {
            every_steps: every_steps.filter(|&n| n != 0),
            every_seconds: every_seconds.filter(|&s| s != 0.0),
            keep,
        }
    }
}

fn default_seed() -> u64 {
    DEFAULT_SEED
}

impl AssetSpec {
    /// A short label for tables and the store.
    pub fn label(&self) -> String {
        match self {
            // `ES=path` when the symbol is given (as on the command line).
            AssetSpec::Data(source) => source.arg(),
            AssetSpec::Synthetic(s) => match (s.seasonal, s.sigma) {
                (Some(p), _) => format!(
                    "synthetic-seasonal:{}:{}:{}/{}",
                    s.rows, s.seed, p.asset, p.assets
                ),
                (None, None) => format!("synthetic-ar1:{}:{}", s.rows, s.seed),
                (None, Some(sigma)) => format!("synthetic-ar1:{}:{}:{sigma}", s.rows, s.seed),
            },
        }
    }
}

/// The assets of one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskAssets {
    /// `assets[i]` alone.
    One(usize),
    /// Every asset of the job, with its index as a static covariate.
    Pooled,
}

/// One planned task: `models[model]` on `assets`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedTask {
    pub model: usize,
    pub assets: TaskAssets,
}

impl JobSpec {
    /// Every task of the job, in ordinal order: one per (model, asset), one per
    /// pooled model. A pure function of the spec, so a stored task's ordinal
    /// finds its assets again after a restart.
    /// A walk-forward job's tasks are one per (model, asset, fold), in that
    /// order: `TaskAssets::One(asset × folds + fold)` (the datasets of
    /// [`JobSpec::folds`] are laid out so).
    pub fn task_plan(&self) -> Vec<PlannedTask> {
        let spec = self;
        let units = spec.assets.len() * self.folds();
        let mut plan = Vec::new();
        for (model, m) in spec.models.iter().enumerate() {
            if m.pooled {
                plan.push(PlannedTask {
                    model,
                    assets: TaskAssets::Pooled,
                });
            } else {
                plan.extend((0..units).map(|a| PlannedTask {
                    model,
                    assets: TaskAssets::One(a),
                }));
            }
        }
        plan
    }

    /// The feature config of dataset `unit`: a walk-forward fold's has the
    /// fold's split dates (once planned).
    pub fn unit_features(&self, unit: usize) -> FeatureConfig {
        let (asset, fold) = self.unit(unit);
        let planned = fold.and_then(|k| {
            let w = self.walk_forward.as_ref()?;
            w.plan.get(asset)?.get(k).copied()
        });
        match planned {
            Some(f) => f.features(&self.features),
            None => self.features.clone(),
        }
    }

    /// The `keep_best` and `early_stopping` of the task at `ordinal` (its
    /// model's; none for an ordinal outside the plan).
    pub fn selection_of(&self, ordinal: usize) -> Selection {
        self.task_plan()
            .get(ordinal)
            .and_then(|t| self.models.get(t.model))
            .map(ModelSpec::selection)
            .unwrap_or_default()
    }

    /// A sweep's decision rungs (every trial's; empty without a sweep or
    /// with "run all").
    pub fn decision_rungs(&self) -> Vec<u64> {
        self.sweep
            .as_ref()
            .map(SweepSpec::decision_rungs)
            .unwrap_or_default()
    }

    /// Folds per asset: 1 without walk-forward.
    pub fn folds(&self) -> usize {
        self.walk_forward
            .as_ref()
            .map_or(1, |w| w.fold_count().max(1))
    }

    /// Dataset `unit` of the job (an index of [`TaskAssets::One`]): its
    /// asset and, in a walk-forward job, its fold (0-based).
    pub fn unit(&self, unit: usize) -> (usize, Option<usize>) {
        match &self.walk_forward {
            Some(w) => (
                unit / w.fold_count().max(1),
                Some(unit % w.fold_count().max(1)),
            ),
            None => (unit, None),
        }
    }

    /// The asset label of a task as stored and shown (`pooled[a,b,c]` for a
    /// pooled task, `… fold 2/5` for a walk-forward fold).
    pub fn assets_label(&self, assets: TaskAssets) -> String {
        let spec = self;
        match assets {
            TaskAssets::One(unit) => match spec.unit(unit) {
                (a, Some(k)) => {
                    format!("{} fold {}/{}", spec.assets[a].label(), k + 1, spec.folds())
                }
                (a, None) => spec.assets[a].label(),
            },
            TaskAssets::Pooled => {
                let labels: Vec<String> = spec.assets.iter().map(AssetSpec::label).collect();
                format!("pooled[{}]", labels.join(","))
            }
        }
    }
}

impl JobSpec {
    /// Parses a job-spec file (JSON) and checks it; errors name the field
    /// (`job spec: models[0].steps: invalid type: …`) and quote at most
    /// [`MAX_MESSAGE_CHARS`] characters of it (a refused value can be huge).
    pub fn from_json(text: &str) -> Result<Self, SpecError> {
        let mut json = serde_json::Deserializer::from_str(text);
        let spec: Self = serde_path_to_error::deserialize(&mut json)
            .map_err(|e| {
                let path = e.path().to_string();
                SpecError::parse((path != ".").then_some(path), e.inner().to_string())
            })
            .and_then(|spec| {
                json.end()
                    .map(|()| spec)
                    .map_err(|e| SpecError::parse(None, e.to_string()))
            })?;
        spec.check()?;
        Ok(spec)
    }

    /// Shape checks that need no plugin or data (those come at submission).
    pub fn check(&self) -> Result<(), SpecError> {
        if self.name.trim().is_empty() {
            return Err(SpecError::field("name", "must not be empty"));
        }
        if let Some(sweep) = &self.sweep {
            sweep
                .check_shape()
                .map_err(|e| SpecError::field("sweep", e.to_string()))?;
            if self.models != sweep.models() {
                return Err(SpecError::field(
                    "models",
                    "a sweep's models are its trials; leave \"models\" out",
                ));
            }
            if self.walk_forward.is_some() {
                return Err(SpecError::field(
                    "sweep",
                    "trials are ranked on one validation split; drop \"walk_forward\"",
                ));
            }
        }
        if self.models.is_empty() {
            return Err(SpecError::field("models", "at least one model is needed"));
        }
        if self.assets.is_empty() {
            return Err(SpecError::field("assets", "at least one asset is needed"));
        }
        // Counted, not planned: models × assets can be billions.
        let pooled = self.models.iter().filter(|m| m.pooled).count();
        let tasks = (self.models.len() - pooled)
            .saturating_mul(self.assets.len())
            .saturating_add(pooled);
        if tasks > MAX_TASKS {
            return Err(SpecError::TooManyTasks { tasks });
        }
        for (i, m) in self.models.iter().enumerate() {
            if m.steps == 0 || m.steps > MAX_STEPS {
                return Err(SpecError::field(
                    format!("models[{i}].steps"),
                    format!("{} is outside 1..={MAX_STEPS}", m.steps),
                ));
            }
            m.selection()
                .check()
                .map_err(|e| SpecError::field(format!("models[{i}]"), e.to_string()))?;
            if m.config.as_ref().is_some_and(|c| !c.is_object()) {
                return Err(SpecError::field(
                    format!("models[{i}].config"),
                    "must be a JSON object",
                ));
            }
        }
        self.features
            .check()
            .map_err(|e| SpecError::field("features", e))?;
        let own_inputs = !self.features.columns.is_empty()
            || !self.features.builtin
            || !self.features.target.is_default();
        if own_inputs {
            if let Some(i) = self
                .assets
                .iter()
                .position(|a| matches!(a, AssetSpec::Synthetic(_)))
            {
                return Err(SpecError::field(
                    format!("assets[{i}]"),
                    "a synthetic asset has no columns and its own targets: features.columns, \
                     builtin and target apply to bar files only; give a bar file",
                ));
            }
        }
        if let Some(w) = &self.walk_forward {
            w.check().map_err(|e| SpecError::field("walk_forward", e))?;
            if self.models.iter().any(|m| m.pooled) {
                return Err(SpecError::field(
                    "walk_forward",
                    "pooled models train across assets, not per fold; drop \"pooled\"",
                ));
            }
            if self.features.valid_start.is_some() || self.features.test_start.is_some() {
                return Err(SpecError::field(
                    "walk_forward",
                    "the folds set the split dates; drop features.valid_start and test_start",
                ));
            }
            if self
                .assets
                .iter()
                .any(|a| matches!(a, AssetSpec::Synthetic(_)))
            {
                return Err(SpecError::field(
                    "walk_forward",
                    "folds are cut by date from bar files; synthetic assets have none",
                ));
            }
            let planned = w.plan.is_empty()
                || (w.plan.len() == self.assets.len()
                    && w.plan.iter().all(|p| p.len() == w.fold_count()));
            if !planned {
                return Err(SpecError::field(
                    "walk_forward.plan",
                    "is made when the job is submitted; leave it out",
                ));
            }
        }
        for (i, a) in self.assets.iter().enumerate() {
            if let AssetSpec::Data(source) = a {
                if let (Some(start), Some(end)) = (source.start, source.end) {
                    if start > end {
                        return Err(SpecError::field(
                            format!("assets[{i}].start"),
                            format!(
                                "{} is after end {}",
                                tli_data::timefmt::format(start),
                                tli_data::timefmt::format(end)
                            ),
                        ));
                    }
                }
                if source.path.as_os_str().is_empty() {
                    return Err(SpecError::field(
                        format!("assets[{i}].data"),
                        "must not be empty",
                    ));
                }
                if let Some(symbol) = &source.symbol {
                    check_symbol(symbol).map_err(|e| {
                        SpecError::field(format!("assets[{i}].symbol"), e.to_string())
                    })?;
                }
                if let Some(tz) = &source.tz {
                    LocalZone::parse(tz)
                        .map_err(|e| SpecError::field(format!("assets[{i}].tz"), e.to_string()))?;
                }
            }
            if let AssetSpec::Synthetic(s) = a {
                if let Some(p) = s.seasonal {
                    if s.sigma.is_some() {
                        return Err(SpecError::field(
                            format!("assets[{i}].synthetic"),
                            "\"sigma\" scales the AR(1) series; a seasonal asset has its own scale",
                        ));
                    }
                    if !(1..=MAX_SEASONAL_ASSETS).contains(&p.assets) || p.asset >= p.assets {
                        return Err(SpecError::field(
                            format!("assets[{i}].synthetic.seasonal"),
                            format!(
                                "asset {} of {}: give 1..={MAX_SEASONAL_ASSETS} assets and an \
                                 asset index below it",
                                p.asset, p.assets
                            ),
                        ));
                    }
                }
                if let Some(sigma) = s.sigma {
                    if !(sigma.is_finite() && sigma > 0.0 && sigma < 1.0) {
                        return Err(SpecError::field(
                            format!("assets[{i}].synthetic.sigma"),
                            format!("{sigma} must be in (0, 1)"),
                        ));
                    }
                }
                if !SYNTHETIC_ROWS.contains(&s.rows) {
                    return Err(SpecError::field(
                        format!("assets[{i}].synthetic.rows"),
                        format!(
                            "{} is outside {}..={}",
                            s.rows,
                            SYNTHETIC_ROWS.start(),
                            SYNTHETIC_ROWS.end()
                        ),
                    ));
                }
            }
        }
        if !SLICE_STEPS.contains(&self.slice_steps) {
            return Err(SpecError::field(
                "slice_steps",
                format!(
                    "{} is outside {}..={}",
                    self.slice_steps,
                    SLICE_STEPS.start(),
                    SLICE_STEPS.end()
                ),
            ));
        }
        self.slurm.check()?;
        let c = &self.checkpoint;
        if c.keep == 0 {
            return Err(SpecError::field("checkpoint.keep", "must keep at least 1"));
        }
        if c.every_seconds.is_some_and(|s| s.is_nan() || s < 0.0) {
            return Err(SpecError::field(
                "checkpoint.every_seconds",
                "must be a positive number of seconds (0 = never)",
            ));
        }
        Ok(())
    }
}

// ----- the file format ------------------------------------------------------

/// The job-spec file as written: defaults for what is left out, assets as
/// objects with one source key. [`JobSpec`] reads and writes through it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobSpecFile {
    name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    models: Vec<ModelSpec>,
    assets: Vec<AssetFile>,
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default)]
    device: Device,
    #[serde(default)]
    features: FeatureConfig,
    #[serde(default)]
    checkpoint: CheckpointFile,
    #[serde(default = "default_slice")]
    slice_steps: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    executor: Option<ExecutorKind>,
    #[serde(default, skip_serializing_if = "SlurmJobOptions::is_default")]
    slurm: SlurmJobOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    walk_forward: Option<WalkForward>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sweep: Option<SweepSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<InputFile>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AssetFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    synthetic: Option<SyntheticAsset>,
    /// With `data`: the bars' symbol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    symbol: Option<String>,
    /// With `data`: the IANA zone of timestamps written without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tz: Option<String>,
    /// With `data`: only the bars at or after this time (a date, an RFC 3339
    /// time or UTC nanoseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<UtcTime>,
    /// With `data`: only the bars at or before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    end: Option<UtcTime>,
}

/// `every_steps` left out = never, `every_seconds` left out = the default;
/// `null` or 0 = never for both.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckpointFile {
    #[serde(default)]
    every_steps: Option<u64>,
    #[serde(default = "default_every_seconds")]
    every_seconds: Option<f64>,
    #[serde(default = "default_keep")]
    keep: usize,
}

impl Default for CheckpointFile {
    fn default() -> Self {
        CheckpointPolicy::default().into()
    }
}

fn default_every_seconds() -> Option<f64> {
    Some(DEFAULT_CHECKPOINT_SECONDS)
}
fn default_keep() -> usize {
    DEFAULT_CHECKPOINT_KEEP
}
fn default_slice() -> u64 {
    DEFAULT_SLICE_STEPS
}

impl From<CheckpointPolicy> for CheckpointFile {
    fn from(c: CheckpointPolicy) -> Self {
        Self {
            every_steps: c.every_steps,
            every_seconds: c.every_seconds,
            keep: c.keep,
        }
    }
}

impl TryFrom<JobSpecFile> for JobSpec {
    type Error = String;

    fn try_from(f: JobSpecFile) -> Result<Self, String> {
        let assets = f
            .assets
            .into_iter()
            .enumerate()
            .map(|(i, a)| match (a.data, a.synthetic) {
                (Some(path), None) => Ok(AssetSpec::Data(BarSource {
                    path,
                    symbol: a.symbol,
                    tz: a.tz,
                    start: a.start.map(|t| t.0),
                    end: a.end.map(|t| t.0),
                })),
                (None, Some(_))
                    if a.symbol.is_some()
                        || a.tz.is_some()
                        || a.start.is_some()
                        || a.end.is_some() =>
                {
                    Err(format!(
                        "assets[{i}]: \"symbol\", \"tz\", \"start\" and \"end\" go with a \
                         \"data\" file, not \"synthetic\""
                    ))
                }
                (None, Some(s)) => Ok(AssetSpec::Synthetic(s)),
                _ => Err(format!(
                    "assets[{i}]: give exactly one of \"data\" or \"synthetic\""
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let c = f.checkpoint;
        let models = match &f.sweep {
            None => f.models,
            Some(_) if !f.models.is_empty() => {
                return Err(
                    "give \"models\" or \"sweep\" (whose trials are the models), \
                            not both"
                        .into(),
                )
            }
            Some(sweep) => {
                // Before expanding: a grid can multiply to billions of trials.
                sweep.check_shape().map_err(|e| format!("sweep: {e}"))?;
                sweep.models()
            }
        };
        Ok(JobSpec {
            name: f.name,
            models,
            assets,
            seed: f.seed,
            device: f.device,
            features: f.features,
            checkpoint: CheckpointPolicy::with_intervals(c.every_steps, c.every_seconds, c.keep),
            slice_steps: f.slice_steps,
            executor: f.executor,
            slurm: f.slurm,
            walk_forward: f.walk_forward,
            sweep: f.sweep,
            inputs: f.inputs,
        })
    }
}

impl From<JobSpec> for JobSpecFile {
    fn from(s: JobSpec) -> Self {
        JobSpecFile {
            name: s.name,
            // A sweep's models are derived from it.
            models: if s.sweep.is_some() {
                Vec::new()
            } else {
                s.models
            },
            assets: s
                .assets
                .into_iter()
                .map(|a| match a {
                    AssetSpec::Data(source) => AssetFile {
                        data: Some(source.path),
                        synthetic: None,
                        symbol: source.symbol,
                        tz: source.tz,
                        start: source.start.map(UtcTime),
                        end: source.end.map(UtcTime),
                    },
                    AssetSpec::Synthetic(s) => AssetFile {
                        data: None,
                        synthetic: Some(s),
                        symbol: None,
                        tz: None,
                        start: None,
                        end: None,
                    },
                })
                .collect(),
            seed: s.seed,
            device: s.device,
            features: s.features,
            checkpoint: s.checkpoint.into(),
            slice_steps: s.slice_steps,
            executor: s.executor,
            slurm: s.slurm,
            walk_forward: s.walk_forward,
            sweep: s.sweep,
            inputs: s.inputs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_is_changed_by_its_bytes_or_where_it_leads_not_by_a_touch() {
        let then = InputFile {
            path: "bars.csv".into(),
            resolved: "/data/bars.csv".into(),
            size: 120,
            modified_ns: 1,
            sha256: "1a2b3c4d5e6f".into(),
        };
        let touched = InputFile {
            modified_ns: 2,
            ..then.clone()
        };
        assert_eq!(then.change_from(&touched), None);
        let rewritten = InputFile {
            size: 180,
            sha256: "99887766aabb".into(),
            ..touched.clone()
        };
        assert_eq!(
            then.change_from(&rewritten).as_deref(),
            Some("size 120 → 180 bytes, sha256 1a2b3c4d… → 99887766…")
        );
        let elsewhere = InputFile {
            resolved: "/data/other.csv".into(),
            ..then.clone()
        };
        assert_eq!(
            then.change_from(&elsewhere).as_deref(),
            Some("it now leads to /data/other.csv instead of /data/bars.csv")
        );
    }

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("job.rs");
        let start = doc.find("//! {").unwrap();
        let end = doc[start..].find("//! ```").unwrap() + start;
        let json: String = doc[start..end]
            .lines()
            .map(|l| l.trim_start_matches("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let spec = JobSpec::from_json(&json).unwrap();
        assert_eq!(spec.models.len() * spec.assets.len(), 8);
        assert_eq!(spec.checkpoint.keep, 3);
    }

    #[test]
    fn bad_specs_name_the_field() {
        let base = r#"{"name":"x","models":[{"plugin":"template","steps":10}],"assets":[{"synthetic":{"rows":100}}]}"#;
        assert!(JobSpec::from_json(base).is_ok());
        let cases = [
            (
                base.replace("\"steps\":10", "\"steps\":0"),
                "models[0].steps",
            ),
            (
                base.replace("{\"synthetic\":{\"rows\":100}}", "{}"),
                "assets[0]",
            ),
            (base.replace("\"name\":\"x\"", "\"name\":\" \""), "name"),
            (
                base.replace("}]}", "}],\"checkpoint\":{\"keep\":0}}"),
                "checkpoint.keep",
            ),
            (
                base.replace("\"steps\":10", "\"steps\":10,\"colour\":1"),
                "unknown field",
            ),
        ];
        for (json, field) in cases {
            let e = JobSpec::from_json(&json).unwrap_err();
            assert!(e.to_string().contains(field), "{json}: {e}");
        }
    }

    /// Defect found in use: a spec file with `every_steps`/`every_seconds` 0 was
    /// refused ("must be positive") while the API took 0 as never.
    #[test]
    fn zero_or_null_checkpoint_intervals_mean_never_in_a_file_too() {
        let base = r#"{"name":"x","models":[{"plugin":"template","steps":10}],"assets":[{"synthetic":{"rows":100}}]"#;
        for checkpoint in [
            r#"{"every_steps": 0, "every_seconds": 0}"#,
            r#"{"every_steps": null, "every_seconds": null}"#,
            r#"{"every_seconds": 0.0, "keep": 3}"#,
        ] {
            let spec = JobSpec::from_json(&format!("{base},\"checkpoint\":{checkpoint}}}"))
                .unwrap_or_else(|e| panic!("{checkpoint}: {e}"));
            assert_eq!(spec.checkpoint.every_steps, None, "{checkpoint}");
            assert_eq!(spec.checkpoint.every_seconds, None, "{checkpoint}");
            assert_eq!(spec.checkpoint.keep, DEFAULT_CHECKPOINT_KEEP);
            // What the store keeps reads back the same.
            let again: JobSpec =
                serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
            assert_eq!(again, spec);
        }
        let defaults = JobSpec::from_json(&format!("{base}}}")).unwrap();
        assert_eq!(defaults.checkpoint, CheckpointPolicy::default());
        assert_eq!(
            defaults.checkpoint.every_steps, None,
            "time-based by default"
        );
        let negative =
            JobSpec::from_json(&format!("{base},\"checkpoint\":{{\"every_seconds\":-1}}}}"));
        assert!(negative
            .unwrap_err()
            .to_string()
            .contains("checkpoint.every_seconds"));
    }

    /// Bars users bring: a file asset names its symbol and time zone; both are checked.
    #[test]
    fn a_data_asset_gives_its_symbol_and_time_zone() {
        let spec = |asset: &str| {
            JobSpec::from_json(&format!(
                r#"{{"name":"x","models":[{{"plugin":"t","steps":1}}],"assets":[{asset}]}}"#
            ))
        };
        let ok = spec(r#"{"data":"p.csv","symbol":"ES","tz":"America/New_York"}"#).unwrap();
        let AssetSpec::Data(source) = &ok.assets[0] else {
            panic!("{:?}", ok.assets[0])
        };
        assert_eq!(
            (source.symbol.as_deref(), source.tz.as_deref()),
            (Some("ES"), Some("America/New_York"))
        );
        assert_eq!(ok.assets[0].label(), "ES=p.csv");
        let again: JobSpec = serde_json::from_str(&serde_json::to_string(&ok).unwrap()).unwrap();
        assert_eq!(again, ok);
        for (asset, field) in [
            (r#"{"data":"p.csv","symbol":"E S"}"#, "assets[0].symbol"),
            (
                r#"{"data":"p.csv","tz":"New York"}"#,
                "assets[0].tz: unknown time zone",
            ),
            (
                r#"{"synthetic":{"rows":100},"symbol":"ES"}"#,
                "go with a \"data\" file",
            ),
            (
                r#"{"synthetic":{"rows":100},"start":"2010-01-01"}"#,
                "go with a \"data\" file",
            ),
            (
                r#"{"data":"p.csv","start":"2012-01-01","end":"2011-01-01"}"#,
                "assets[0].start: 2012-01-01",
            ),
            (r#"{"data":"p.csv","end":"yesterday"}"#, "yesterday"),
        ] {
            let e = spec(asset).unwrap_err();
            assert!(e.to_string().contains(field), "{asset}: {e}");
        }
    }

    #[test]
    fn an_asset_may_be_cut_by_time_and_the_splits_given_as_dates() {
        let text = r#"{"name":"x","models":[{"plugin":"t","steps":1}],
            "assets":[{"data":"p.csv","start":"2005-01-03","end":1514505600000000000}],
            "features":{"valid_start":"2014-01-02","test_start":"2016-01-04T00:00:00Z"}}"#;
        let spec = JobSpec::from_json(text).unwrap();
        let AssetSpec::Data(source) = &spec.assets[0] else {
            panic!("{:?}", spec.assets[0])
        };
        let day = |y, m, d| tli_data::timefmt::days_from_civil(y, m, d) * 86_400_000_000_000;
        assert_eq!(source.start, Some(day(2005, 1, 3)));
        assert_eq!(source.end, Some(day(2017, 12, 29)));
        assert_eq!(spec.features.valid_start, Some(UtcTime(day(2014, 1, 2))));
        assert_eq!(spec.features.test_start, Some(UtcTime(day(2016, 1, 4))));
        // Stored and read back: the same spec.
        let again: JobSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(again, spec);
        // Split dates out of order are refused when the spec is read, not when a task runs.
        let swapped = text.replace("2014-01-02", "2017-01-02");
        let e = JobSpec::from_json(&swapped).unwrap_err().to_string();
        assert!(
            e.contains("features") && e.contains("is not before test_start"),
            "{e}"
        );
    }

    /// A spec's own columns and target read back as given; on a synthetic
    /// asset (no columns) they are refused, as are bad columns.
    #[test]
    fn own_columns_and_targets_are_part_of_the_spec_and_need_bar_files() {
        let text = r#"{"name":"x","models":[{"plugin":"t","steps":1}],"assets":[{"data":"p.csv"}],
            "features":{"columns":[{"name":"ofi","role":"observed_past","fill":"ffill:2"},
                                   {"name":"vix","role":"observed_past","file":"vix.csv"}],
                        "target":{"column":"basis"},"builtin":false}}"#;
        let spec = JobSpec::from_json(text).unwrap();
        assert_eq!(spec.features.columns.len(), 2);
        assert!(!spec.features.builtin);
        let again: JobSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(again, spec);
        let synthetic = text.replace(r#"{"data":"p.csv"}"#, r#"{"synthetic":{"rows":100}}"#);
        let e = JobSpec::from_json(&synthetic).unwrap_err().to_string();
        assert!(
            e.contains("assets[0]") && e.contains("apply to bar files only"),
            "{e}"
        );
        let bad = text.replace("ffill:2", "sometimes");
        let e = JobSpec::from_json(&bad).unwrap_err().to_string();
        assert!(e.contains("use refuse, zero, ffill or ffill:N"), "{e}");
    }

    /// Specs stored by earlier hosts (assets with `"synthetic": null`) still read.
    #[test]
    fn stored_specs_of_earlier_hosts_still_read() {
        let old = r#"{"name":"j","models":[{"plugin":"dqn","steps":5,"config":null,"priority":0}],
            "assets":[{"data":"a.csv","synthetic":null},{"data":null,"synthetic":{"rows":100,"seed":2}}],
            "seed":1,"device":"cpu","features":{},"checkpoint":{"every_steps":1000,"every_seconds":300.0,"keep":3},"slice_steps":10}"#;
        let spec: JobSpec = serde_json::from_str(old).unwrap();
        assert_eq!(spec.assets[0], AssetSpec::Data(BarSource::file("a.csv")));
        assert_eq!(
            spec.assets[1],
            AssetSpec::Synthetic(SyntheticAsset {
                rows: 100,
                seed: 2,
                sigma: None,
                seasonal: None,
            })
        );
        assert_eq!(spec.checkpoint.every_steps, Some(1000));
        assert_eq!(spec.device, Device::Cpu);
    }

    #[test]
    fn a_seasonal_synthetic_asset_is_one_of_a_set_and_bad_picks_are_refused() {
        let spec = |asset: &str| {
            JobSpec::from_json(&format!(
                r#"{{"name":"x","models":[{{"plugin":"tft","steps":10}}],"assets":[{asset}]}}"#
            ))
        };
        let ok = spec(r#"{"synthetic":{"rows":3000,"seed":21,"seasonal":{"asset":2,"assets":3}}}"#)
            .unwrap();
        assert_eq!(ok.assets[0].label(), "synthetic-seasonal:3000:21:2/3");
        for (bad, field) in [
            (
                r#"{"synthetic":{"rows":300,"seasonal":{"asset":3,"assets":3}}}"#,
                "seasonal",
            ),
            (
                r#"{"synthetic":{"rows":300,"seasonal":{"asset":0,"assets":0}}}"#,
                "seasonal",
            ),
            (
                r#"{"synthetic":{"rows":300,"sigma":0.1,"seasonal":{"asset":0,"assets":1}}}"#,
                "sigma",
            ),
        ] {
            let e = spec(bad).unwrap_err().to_string();
            assert!(e.contains(field), "{bad}: {e}");
        }
    }
}
