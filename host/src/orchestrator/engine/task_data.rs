//! The data each task receives: the dataset cache builds each asset's
//! dataset and plugin API 1.1 annex once per (asset, feature config), and
//! [`JobData`] turns a task's assets ([`TaskAssets`], from
//! `JobSpec::task_plan`) into its first dataset and [`TaskInputs`].

use super::super::job::{AssetSpec, JobSpec, TaskAssets};
use super::lock;
use abi_stable::std_types::RArc;
use std::collections::HashMap;
use std::sync::Mutex;
use tli_data::contracts::ContractBook;
use tli_data::features::{AnnotatedDataset, FeatureConfig};
use tli_data::synthetic_ar::{synthetic_ar_annotated, SyntheticArSpec};
use tli_plugin_api::{Dataset, DatasetAnnex, DatasetShape, TaskInputs};

/// One asset's dataset and annex.
#[derive(Clone)]
pub struct AssetData {
    pub dataset: RArc<Dataset>,
    pub annex: DatasetAnnex,
}

/// The datasets of every asset of a job, in asset order.
pub struct JobData(pub Vec<AssetData>);

impl JobData {
    /// The shape a task's memory is estimated for: one asset's, or for a
    /// pooled task every asset's rows added up (features and targets of the first).
    pub fn shape(&self, assets: TaskAssets) -> DatasetShape {
        match assets {
            TaskAssets::One(a) => self.0[a].dataset.shape(),
            TaskAssets::Pooled => {
                let mut shape = self.0[0].dataset.shape();
                shape.rows = self.0.iter().map(|d| d.dataset.rows() as u64).sum();
                shape
            }
        }
    }

    /// The first dataset of the task (its `TaskSpec::dataset`) and its inputs.
    pub fn inputs(&self, assets: TaskAssets) -> (RArc<Dataset>, TaskInputs) {
        let with_index = |a: usize| {
            let mut annex = self.0[a].annex.clone();
            annex.asset_index = a as u32;
            (self.0[a].dataset.clone(), annex)
        };
        let (datasets, pooled) = match assets {
            TaskAssets::One(a) => (vec![with_index(a)], false),
            TaskAssets::Pooled => ((0..self.0.len()).map(with_index).collect(), true),
        };
        let first = datasets[0].0.clone();
        (first, TaskInputs::new(datasets, pooled, self.0.len()))
    }
}

/// Datasets built once per (asset, feature config) and shared by tasks.
#[derive(Default)]
pub struct DatasetCache {
    built: Mutex<HashMap<String, AssetData>>,
}

impl DatasetCache {
    /// The dataset of `asset`, built on first use.
    pub fn get(
        &self,
        asset: &AssetSpec,
        features: &FeatureConfig,
        contracts: &ContractBook,
    ) -> Result<AssetData, String> {
        let key = format!(
            "{}|{}",
            asset.label(),
            serde_json::to_string(features).unwrap_or_default()
        );
        if let Some(d) = lock(&self.built).get(&key) {
            return Ok(d.clone());
        }
        let AnnotatedDataset { dataset, annex } = match asset {
            AssetSpec::Data(path) => {
                let table = tli_data::read_bars(path).map_err(|e| e.to_string())?;
                let contract = contracts.lookup(&table.symbol).map_err(|e| e.to_string())?;
                tli_data::features::build_annotated_dataset(&table, contract, features)
                    .map_err(|e| e.to_string())?
            }
            AssetSpec::Synthetic(s) => {
                let mut built = synthetic_ar_annotated(SyntheticArSpec {
                    rows: s.rows,
                    seed: s.seed,
                    sigma: s.sigma.unwrap_or(SyntheticArSpec::default().sigma),
                    ..SyntheticArSpec::default()
                });
                // Distinct synthetic assets get distinct symbols (per-asset metrics use them).
                built.dataset.symbol = asset.label().into();
                built
            }
        };
        let data = AssetData {
            dataset: RArc::new(dataset),
            annex,
        };
        lock(&self.built).insert(key, data.clone());
        Ok(data)
    }

    /// Every asset of `spec`, or the index and message of the first that fails.
    pub fn job(
        &self,
        spec: &JobSpec,
        contracts: &ContractBook,
    ) -> Result<JobData, (usize, String)> {
        spec.assets
            .iter()
            .enumerate()
            .map(|(i, asset)| {
                self.get(asset, &spec.features, contracts)
                    .map_err(|m| (i, m))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(JobData)
    }
}
