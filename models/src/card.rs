//! `model.json`: everything about a model but its weights.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tli_data::features::{FeatureConfig, FeatureStats};

/// The value of [`ModelCard::format`].
pub const FORMAT: &str = "tli-model";
/// The bundle format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The contents of `model.json` (docs/models.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] when written by this build.
    pub format_version: u32,
    pub plugin: PluginRef,
    /// The validated config the model was trained with.
    pub config: serde_json::Value,
    /// The feature pipeline that made its inputs.
    pub features: FeatureConfig,
    /// One model across several assets.
    pub pooled: bool,
    pub inputs: InputSchema,
    /// Each asset the model was trained on, in the job's asset order.
    pub assets: Vec<AssetCard>,
    /// The final evaluation (validation and test metrics), finite values only.
    pub metrics: BTreeMap<String, f64>,
    pub training: TrainingRecord,
}

/// The plugin that trained the model and can apply it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRef {
    pub name: String,
    pub version: String,
    pub api_version: String,
    pub family: String,
}

impl PluginRef {
    /// `name@version`.
    pub fn label(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

/// What each input row holds and what the model forecasts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSchema {
    pub feature_names: Vec<String>,
    /// `observed_past`, `known_future` or `static`, one per feature.
    pub feature_roles: Vec<String>,
    /// The input variable of each feature (a categorical column's one-hot
    /// columns share one); empty: each feature its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feature_variables: Vec<u32>,
    pub target_names: Vec<String>,
    /// Bars ahead, one per target.
    pub target_horizons: Vec<u32>,
    pub bar_interval_ns: i64,
    pub periods_per_year: f64,
}

/// One asset the model was trained on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssetCard {
    pub symbol: String,
    /// Its index in the job (a pooled model's static input).
    pub asset_index: u32,
    pub contract: ContractCard,
    /// The normalization fitted on this asset's training split: new bars
    /// are scaled with these, never with their own.
    pub stats: FeatureStats,
    pub splits: SplitTimes,
}

/// A futures contract's terms, as the model was trained with them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractCard {
    pub root: String,
    pub tick_size: f64,
    pub point_value: f64,
    pub currency: String,
}

/// The first and last bar (UTC ns, inclusive) of each split of an asset's
/// training data; `None` for an empty split.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitTimes {
    pub train: Option<[i64; 2]>,
    pub valid: Option<[i64; 2]>,
    pub test: Option<[i64; 2]>,
}

/// How the model was trained.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingRecord {
    /// The task (or `train local` run) that trained it.
    pub task: String,
    pub seed: u64,
    pub steps: u64,
    pub device: String,
    /// The bar files, by name and SHA-256 (empty for generated data).
    pub data: Vec<DataFile>,
    /// When the bundle was written, Unix ms.
    pub saved_at_ms: i64,
}

/// A file the model was trained on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataFile {
    pub name: String,
    pub sha256: String,
}

impl ModelCard {
    /// The asset whose contract root is `root` (case-insensitive).
    pub fn asset_for_root(&self, root: &str) -> Option<&AssetCard> {
        self.assets
            .iter()
            .find(|a| a.contract.root.eq_ignore_ascii_case(root))
    }

    /// The contract roots the model knows, for messages.
    pub fn roots(&self) -> Vec<&str> {
        self.assets
            .iter()
            .map(|a| a.contract.root.as_str())
            .collect()
    }
}

/// Keeps only finite metrics (JSON has no NaN or infinity).
pub fn finite_metrics(metrics: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    metrics
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}
