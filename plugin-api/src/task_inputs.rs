//! Plugin API 1.1: what a task receives beyond the 1.0 [`TaskSpec`](crate::TaskSpec).
//!
//! The 1.0 structs (`Dataset`, `TaskSpec`, `DatasetShape`, `MemoryBreakdown`)
//! are plain `repr(C)` and can never grow within major version 1. So 1.1
//! adds one more fixed struct, [`TaskInputs`], whose extensible part is a
//! **side table of named columns**: later minors add data by adding column
//! *names*, never fields. A reader ignores names it does not know and
//! treats a missing name as "not provided" (each name below says since which
//! minor it exists).
//!
//! Columns of API 1.1 (per dataset unless marked task-wide):
//!
//! | name | values | meaning |
//! |---|---|---|
//! | `feature_role` | text, one per feature | [`FeatureRole`]: `observed_past`, `known_future` or `static` |
//! | `target_horizon` | integers, one per target | bars ahead the target looks (`fwd_logret_5` → 5) |
//! | `target_scale` | numbers, one per target | the raw target was divided by this; raw = value × scale |
//! | `bar_interval_ns` | one integer | the bar length in nanoseconds |
//! | `row_markers` | integers, one per row | bit [`GAP_BEFORE`], bit [`ROLL_BEFORE`] |
//! | `asset_index` | one integer | the asset's stable index in the job (its order in the job's asset list) |
//! | `asset_count` | one integer, task-wide | how many assets the job has |
//!
//! Columns of API 1.4 (per dataset):
//!
//! | name | values | meaning |
//! |---|---|---|
//! | `feature_variable` | integers, one per feature | the input variable the feature belongs to: its own, or its categorical column's (the one-hot columns `NAME=LEVEL` of one column share one, consecutive, so a model can embed them as one input). Missing: each feature its own |
//!
//! Columns of API 1.2 (prediction batches, per dataset):
//!
//! | name | values | meaning |
//! |---|---|---|
//! | `predict_from` | one integer | the first row to act on: rows before it are context only (a window's look-back); an agent starts flat there. Missing: 0 |
//!
//! [`DatasetAnnex`] is the typed view of one dataset's columns, used by both
//! sides: the host writes columns with [`DatasetAnnex::write_columns`], a
//! plugin reads them with [`TaskInputs::annex`].

use crate::types::{Dataset, PluginError};
use abi_stable::{
    std_types::{RArc, RString, RVec},
    StableAbi,
};
use std::fmt;

/// Row marker bit: bars are missing between the previous row and this one
/// (the exchange would normally have traded in between).
pub const GAP_BEFORE: u8 = 1;
/// Row marker bit: the front contract rolled between the previous row and this one.
pub const ROLL_BEFORE: u8 = 2;

/// [`Column::dataset`] of a task-wide column.
pub const TASK_WIDE: u32 = u32::MAX;

/// Column names of API 1.1 (see the module docs for their meaning).
pub mod column {
    pub const FEATURE_ROLE: &str = "feature_role";
    pub const TARGET_HORIZON: &str = "target_horizon";
    pub const TARGET_SCALE: &str = "target_scale";
    pub const BAR_INTERVAL_NS: &str = "bar_interval_ns";
    pub const ROW_MARKERS: &str = "row_markers";
    pub const ASSET_INDEX: &str = "asset_index";
    pub const ASSET_COUNT: &str = "asset_count";
    /// 1.2: the first row of a prediction batch to act on (see the module docs).
    pub const PREDICT_FROM: &str = "predict_from";
    /// 1.4: the input variable of each feature (see the module docs).
    pub const FEATURE_VARIABLE: &str = "feature_variable";
}

/// One named column of the side table. Exactly one of `numbers`, `integers`
/// and `text` carries the values (the others are empty).
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq)]
pub struct Column {
    /// Index into [`TaskInputs::datasets`], or [`TASK_WIDE`].
    pub dataset: u32,
    pub name: RString,
    pub numbers: RVec<f64>,
    pub integers: RVec<i64>,
    pub text: RVec<RString>,
}

/// Everything a 1.1 trainer receives besides its [`TaskSpec`](crate::TaskSpec).
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default)]
pub struct TaskInputs {
    /// The task's datasets: one for a per-asset task (the same as
    /// `TaskSpec::dataset`), one per asset, in the job's asset order, for a
    /// pooled task (`TaskSpec::dataset` is then the first).
    pub datasets: RVec<RArc<Dataset>>,
    /// True when the task trains one model across all of `datasets`.
    pub pooled: bool,
    /// The side table (see the module docs).
    pub columns: RVec<Column>,
}

/// What a feature is, for a forecaster.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FeatureRole {
    /// Known only up to the bar's own time (returns, volatility, volume).
    ObservedPast,
    /// A function of the timestamp alone, so known for future bars too
    /// (calendar, session, days to the next roll).
    KnownFuture,
    /// Constant for the whole series (e.g. the asset).
    Static,
}

impl FeatureRole {
    pub fn name(self) -> &'static str {
        match self {
            Self::ObservedPast => "observed_past",
            Self::KnownFuture => "known_future",
            Self::Static => "static",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "observed_past" => Some(Self::ObservedPast),
            "known_future" => Some(Self::KnownFuture),
            "static" => Some(Self::Static),
            _ => None,
        }
    }
}

impl fmt::Display for FeatureRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The typed view of one dataset's 1.1 columns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DatasetAnnex {
    /// One per feature.
    pub feature_roles: Vec<FeatureRole>,
    /// One per feature: its input variable (empty: each feature its own;
    /// see [`DatasetAnnex::variables`]).
    pub feature_variables: Vec<u32>,
    /// One per target: bars ahead.
    pub target_horizons: Vec<u32>,
    /// One per target: what the raw target was divided by.
    pub target_scales: Vec<f64>,
    /// Bar length in nanoseconds (0 when unknown).
    pub bar_interval_ns: i64,
    /// One per row: [`GAP_BEFORE`] | [`ROLL_BEFORE`] bits.
    pub row_markers: Vec<u8>,
    /// The asset's index in its job.
    pub asset_index: u32,
}

impl DatasetAnnex {
    /// The annex that says nothing beyond 1.0: every feature observed-past,
    /// horizon 1 and scale 1 for every target, interval unknown, no markers.
    pub fn plain(dataset: &Dataset) -> Self {
        Self {
            feature_roles: vec![FeatureRole::ObservedPast; dataset.feature_names.len()],
            feature_variables: Vec::new(),
            target_horizons: vec![1; dataset.target_names.len()],
            target_scales: vec![1.0; dataset.target_names.len()],
            bar_interval_ns: 0,
            row_markers: vec![0; dataset.rows()],
            asset_index: 0,
        }
    }

    /// Checks the annex against the dataset it describes.
    pub fn check_against(&self, dataset: &Dataset) -> Result<(), PluginError> {
        let symbol = dataset.symbol.as_str();
        let checks = [
            (
                "feature roles",
                self.feature_roles.len(),
                dataset.feature_names.len(),
            ),
            (
                "target horizons",
                self.target_horizons.len(),
                dataset.target_names.len(),
            ),
            (
                "target scales",
                self.target_scales.len(),
                dataset.target_names.len(),
            ),
            ("row markers", self.row_markers.len(), dataset.rows()),
        ];
        for (what, got, want) in checks {
            if got != want {
                return Err(PluginError::invalid_data(format!(
                    "{symbol}: {got} {what} for {want} entries"
                )));
            }
        }
        if !self.feature_variables.is_empty() {
            if self.feature_variables.len() != dataset.feature_names.len() {
                return Err(PluginError::invalid_data(format!(
                    "{symbol}: {} feature variables for {} features",
                    self.feature_variables.len(),
                    dataset.feature_names.len()
                )));
            }
            // Numbered from 0 in order, each variable's features consecutive.
            let mut next = 0u32;
            for (j, &v) in self.feature_variables.iter().enumerate() {
                let same = j > 0 && v == self.feature_variables[j - 1];
                if !same && v != next {
                    return Err(PluginError::invalid_data(format!(
                        "{symbol}: feature {j} belongs to variable {v}; variables must be \
                         numbered from 0 in order, each one's features consecutive"
                    )));
                }
                if !same {
                    next += 1;
                }
            }
            // The features of one variable share a role.
            if let Some(j) = (1..self.feature_variables.len()).find(|&j| {
                self.feature_variables[j] == self.feature_variables[j - 1]
                    && self.feature_roles.get(j) != self.feature_roles.get(j - 1)
            }) {
                return Err(PluginError::invalid_data(format!(
                    "{symbol}: feature {j} has another role than the rest of its variable"
                )));
            }
        }
        if let Some(s) = self
            .target_scales
            .iter()
            .find(|s| !(s.is_finite() && **s > 0.0))
        {
            return Err(PluginError::invalid_data(format!(
                "{symbol}: target scale {s} is not a positive number"
            )));
        }
        Ok(())
    }

    /// Each feature's input variable: [`Self::feature_variables`], or each
    /// feature its own when empty.
    pub fn variables(&self) -> Vec<u32> {
        if self.feature_variables.is_empty() {
            (0..self.feature_roles.len() as u32).collect()
        } else {
            self.feature_variables.clone()
        }
    }

    /// Appends this annex as the columns of dataset `dataset`.
    pub fn write_columns(&self, dataset: u32, columns: &mut Vec<Column>) {
        let col = |name: &str| Column {
            dataset,
            name: name.into(),
            ..Column::default()
        };
        columns.push(Column {
            text: self
                .feature_roles
                .iter()
                .map(|r| RString::from(r.name()))
                .collect(),
            ..col(column::FEATURE_ROLE)
        });
        if !self.feature_variables.is_empty() {
            columns.push(Column {
                integers: self.feature_variables.iter().map(|&v| v as i64).collect(),
                ..col(column::FEATURE_VARIABLE)
            });
        }
        columns.push(Column {
            integers: self.target_horizons.iter().map(|&h| h as i64).collect(),
            ..col(column::TARGET_HORIZON)
        });
        columns.push(Column {
            numbers: self.target_scales.iter().copied().collect(),
            ..col(column::TARGET_SCALE)
        });
        columns.push(Column {
            integers: vec![self.bar_interval_ns].into(),
            ..col(column::BAR_INTERVAL_NS)
        });
        columns.push(Column {
            integers: self.row_markers.iter().map(|&m| m as i64).collect(),
            ..col(column::ROW_MARKERS)
        });
        columns.push(Column {
            integers: vec![self.asset_index as i64].into(),
            ..col(column::ASSET_INDEX)
        });
    }
}

impl TaskInputs {
    /// Inputs over `datasets` with their annexes: one for a per-asset task,
    /// every asset's for a `pooled` one; `asset_count` is the job's number of
    /// assets (task-wide column).
    pub fn new(
        datasets: Vec<(RArc<Dataset>, DatasetAnnex)>,
        pooled: bool,
        asset_count: usize,
    ) -> Self {
        let mut columns = Vec::new();
        for (i, (_, annex)) in datasets.iter().enumerate() {
            annex.write_columns(i as u32, &mut columns);
        }
        columns.push(Column {
            dataset: TASK_WIDE,
            name: column::ASSET_COUNT.into(),
            integers: vec![asset_count as i64].into(),
            ..Column::default()
        });
        Self {
            datasets: datasets.into_iter().map(|(d, _)| d).collect(),
            pooled,
            columns: columns.into(),
        }
    }

    /// The column `name` of dataset `dataset` (or [`TASK_WIDE`]), if provided.
    pub fn column(&self, dataset: u32, name: &str) -> Option<&Column> {
        self.columns
            .iter()
            .find(|c| c.dataset == dataset && c.name.as_str() == name)
    }

    /// The typed 1.1 annex of dataset `index`, checked against the dataset.
    /// Missing columns read as their defaults: every feature observed-past,
    /// horizon 1 and scale 1 for every target, no markers.
    pub fn annex(&self, index: usize) -> Result<DatasetAnnex, PluginError> {
        let dataset = self.datasets.get(index).ok_or_else(|| {
            PluginError::invalid_data(format!(
                "dataset {index} requested, the task has {}",
                self.datasets.len()
            ))
        })?;
        let d = index as u32;
        let ints = |name: &str| self.column(d, name).map(|c| c.integers.as_slice());
        let to_u32 = |v: i64, what: &str| {
            u32::try_from(v)
                .map_err(|_| PluginError::invalid_data(format!("{what} {v} is out of range")))
        };
        // Start from what says nothing beyond 1.0; each column present overrides its part.
        let mut annex = DatasetAnnex::plain(dataset);
        annex.asset_index = index as u32;
        if let Some(c) = self.column(d, column::FEATURE_ROLE) {
            annex.feature_roles = c
                .text
                .iter()
                .map(|t| {
                    FeatureRole::parse(t.as_str()).ok_or_else(|| {
                        PluginError::invalid_data(format!("unknown feature role {t:?}"))
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(v) = ints(column::FEATURE_VARIABLE) {
            annex.feature_variables = v
                .iter()
                .map(|&x| to_u32(x, "feature variable"))
                .collect::<Result<_, _>>()?;
        }
        if let Some(v) = ints(column::TARGET_HORIZON) {
            annex.target_horizons = v
                .iter()
                .map(|&h| to_u32(h, "target horizon"))
                .collect::<Result<_, _>>()?;
        }
        if let Some(c) = self.column(d, column::TARGET_SCALE) {
            annex.target_scales = c.numbers.to_vec();
        }
        if let Some(&ns) = ints(column::BAR_INTERVAL_NS).and_then(|v| v.first()) {
            annex.bar_interval_ns = ns;
        }
        if let Some(v) = ints(column::ROW_MARKERS) {
            annex.row_markers = v.iter().map(|&m| (m & 0xff) as u8).collect();
        }
        if let Some(&i) = ints(column::ASSET_INDEX).and_then(|v| v.first()) {
            annex.asset_index = to_u32(i, "asset index")?;
        }
        annex.check_against(dataset)?;
        Ok(annex)
    }

    /// 1.2: the first row of dataset `index` of a prediction batch to act
    /// on (column `predict_from`; 0 when missing).
    pub fn predict_from(&self, index: usize) -> usize {
        self.column(index as u32, column::PREDICT_FROM)
            .and_then(|c| c.integers.first().copied())
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0)
    }

    /// The number of assets of the job (task-wide column; defaults to the
    /// number of datasets).
    pub fn asset_count(&self) -> usize {
        self.column(TASK_WIDE, column::ASSET_COUNT)
            .and_then(|c| c.integers.first().copied())
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(self.datasets.len())
    }
}
