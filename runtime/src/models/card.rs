//! A model card ([`ModelCard`]) from what a training run had: the plugin,
//! its config, the feature pipeline and, for each asset, the dataset, its
//! annex and the statistics fitted on its training split.

use super::ModelError;
use crate::registry::ParsedManifest;
use std::collections::BTreeMap;
use tli_data::features::{FeatureConfig, FeatureStats};
use tli_models::card::{finite_metrics, TrainingRecord, FORMAT, FORMAT_VERSION};
use tli_models::{AssetCard, ContractCard, InputSchema, ModelCard, PluginRef, SplitTimes};
use tli_plugin_api::{Dataset, DatasetAnnex};

/// One asset of a training run.
pub struct TrainedAsset<'a> {
    pub dataset: &'a Dataset,
    pub annex: &'a DatasetAnnex,
    pub stats: &'a FeatureStats,
}

/// The card of a model trained by `plugin` with `config_json` on `assets`
/// (in the job's asset order), whose final evaluation gave `metrics`.
pub fn card_for(
    plugin: &ParsedManifest,
    config_json: &str,
    features: &FeatureConfig,
    pooled: bool,
    assets: &[TrainedAsset<'_>],
    metrics: &BTreeMap<String, f64>,
    training: TrainingRecord,
) -> Result<ModelCard, ModelError> {
    let first = assets
        .first()
        .ok_or_else(|| ModelError::Card("a model needs at least one asset".into()))?;
    let config = serde_json::from_str(config_json)
        .map_err(|e| ModelError::Card(format!("the config is not JSON: {e}")))?;
    let inputs = InputSchema {
        feature_names: first.stats.feature_names.clone(),
        feature_roles: first
            .annex
            .feature_roles
            .iter()
            .map(|r| r.name().to_string())
            .collect(),
        feature_variables: first.annex.feature_variables.clone(),
        target_names: first.stats.target_names.clone(),
        target_horizons: first.annex.target_horizons.clone(),
        bar_interval_ns: first.annex.bar_interval_ns,
        periods_per_year: first.dataset.periods_per_year,
    };
    Ok(ModelCard {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        plugin: PluginRef {
            name: plugin.name.clone(),
            version: plugin.version.clone(),
            api_version: plugin.api_version.clone(),
            family: plugin.family.clone(),
        },
        config,
        features: features.clone(),
        pooled,
        inputs,
        assets: assets.iter().map(asset_card).collect(),
        metrics: finite_metrics(metrics),
        training,
    })
}

fn asset_card(asset: &TrainedAsset<'_>) -> AssetCard {
    let d = asset.dataset;
    let c = &d.contract;
    let span = |rows: std::ops::Range<u64>| {
        (rows.start < rows.end).then(|| {
            [
                d.timestamps[rows.start as usize],
                d.timestamps[rows.end as usize - 1],
            ]
        })
    };
    let s = d.splits;
    AssetCard {
        symbol: d.symbol.to_string(),
        asset_index: asset.annex.asset_index,
        contract: ContractCard {
            root: c.root.to_string(),
            tick_size: c.tick_size,
            point_value: c.point_value,
            currency: c.currency.to_string(),
        },
        stats: asset.stats.clone(),
        splits: SplitTimes {
            train: span(0..s.train_end),
            valid: span(s.valid_start..s.valid_end),
            test: span(s.test_start..d.rows() as u64),
        },
    }
}
