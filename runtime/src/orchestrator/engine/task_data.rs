//! The data each task receives: the dataset cache builds each asset's
//! dataset and plugin API 1.1 annex once per (asset, feature config), and
//! [`JobData`] holds a job's datasets at submission (shapes, model cards);
//! [`Orchestrator::task_inputs`] builds a stored task's first dataset and
//! [`TaskInputs`] from its own assets only ([`TaskAssets`], from
//! `JobSpec::task_plan`).

use super::super::job::{AssetSpec, InputFile, JobSpec, SyntheticAsset, TaskAssets};
use super::super::store::TaskRow;
use super::{lock, Orchestrator};
use abi_stable::std_types::RArc;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tli_data::contracts::ContractBook;
use tli_data::features::{AnnotatedDataset, FeatureConfig, FeatureStats};
use tli_data::synthetic_ar::{synthetic_ar_annotated, SyntheticArSpec};
use tli_data::synthetic_seasonal::{planted_seasonal, SeasonalSpec};
use tli_models::card::DataFile;
use tli_plugin_api::{Dataset, DatasetAnnex, DatasetShape, TaskInputs};

/// One asset's dataset and annex.
#[derive(Clone)]
pub struct AssetData {
    pub dataset: RArc<Dataset>,
    pub annex: DatasetAnnex,
    /// What the pipeline fitted on the training split and the files it
    /// read, the bar file first, then each covariate file (`None` for
    /// synthetic data): what a model card keeps.
    pub fitted: Option<Arc<(FeatureStats, Vec<DataFile>)>>,
    /// The files it was built from, as they were (the bar file first, then
    /// each covariate file; none for synthetic data).
    pub inputs: Vec<InputFile>,
    /// What a person should know about its bars (outlier prices), each
    /// naming the file.
    pub warnings: Vec<String>,
}

/// The datasets of every asset of a job, in asset order.
pub struct JobData(pub Vec<AssetData>);

impl JobData {
    /// What the job's datasets warn of, each once.
    pub fn warnings(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for warning in self.0.iter().flat_map(|d| &d.warnings) {
            if !all.contains(warning) {
                all.push(warning.clone());
            }
        }
        all
    }

    /// Every file the job's datasets were built from, each once.
    pub fn inputs(&self) -> Vec<InputFile> {
        let mut all: Vec<InputFile> = Vec::new();
        for file in self.0.iter().flat_map(|d| &d.inputs) {
            if !all.iter().any(|f| f.path == file.path) {
                all.push(file.clone());
            }
        }
        all
    }

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

    /// The model card of a task trained by `plugin` with `config` on
    /// `assets` (no metrics or steps yet), as JSON; `None` when an asset is
    /// synthetic (nothing to featurize new bars with).
    pub fn model_card(
        &self,
        plugin: &crate::registry::ParsedManifest,
        config: &str,
        features: &FeatureConfig,
        assets: TaskAssets,
        training: tli_models::card::TrainingRecord,
    ) -> Option<String> {
        let indices: Vec<usize> = match assets {
            TaskAssets::One(a) => vec![a],
            TaskAssets::Pooled => (0..self.0.len()).collect(),
        };
        let annexes: Vec<DatasetAnnex> = indices
            .iter()
            .map(|&a| {
                let mut annex = self.0[a].annex.clone();
                annex.asset_index = a as u32;
                annex
            })
            .collect();
        let mut trained = Vec::new();
        let mut files = Vec::new();
        for (&a, annex) in indices.iter().zip(&annexes) {
            let fitted = self.0[a].fitted.as_ref()?;
            files.extend(fitted.1.iter().cloned());
            trained.push(crate::models::card::TrainedAsset {
                dataset: &self.0[a].dataset,
                annex,
                stats: &fitted.0,
            });
        }
        let training = tli_models::card::TrainingRecord {
            data: files,
            ..training
        };
        let pooled = matches!(assets, TaskAssets::Pooled);
        let card = crate::models::card::card_for(
            plugin,
            config,
            features,
            pooled,
            &trained,
            &Default::default(),
            training,
        )
        .ok()?;
        serde_json::to_string(&card).ok()
    }
}

/// The units (assets, or walk-forward folds) a task of `assets` reads, of `total`.
fn wanted_units(assets: TaskAssets, total: usize) -> Vec<usize> {
    match assets {
        TaskAssets::One(a) => vec![a],
        TaskAssets::Pooled => (0..total).collect(),
    }
}

/// A task's first dataset and inputs from the units it reads (each with its
/// index among the job's `total`).
fn inputs_of(
    picked: Vec<(usize, &AssetData)>,
    pooled: bool,
    total: usize,
) -> (RArc<Dataset>, TaskInputs) {
    let datasets: Vec<_> = picked
        .into_iter()
        .map(|(a, data)| {
            let mut annex = data.annex.clone();
            annex.asset_index = a as u32;
            (data.dataset.clone(), annex)
        })
        .collect();
    let first = datasets[0].0.clone();
    (first, TaskInputs::new(datasets, pooled, total))
}

/// A unit to build: the asset's index in the spec, the asset, its features.
type Unit = (usize, AssetSpec, FeatureConfig);

/// What each unit of `spec` is built from, in unit order: the asset's index
/// in the spec, the asset (cut to its fold for walk-forward) and the
/// features (a fold's own for walk-forward: [`JobSpec::unit`]).
fn units_of(spec: &JobSpec) -> Result<Vec<Unit>, (usize, String)> {
    let Some(walk) = &spec.walk_forward else {
        return Ok(spec
            .assets
            .iter()
            .enumerate()
            .map(|(i, asset)| (i, asset.clone(), spec.features.clone()))
            .collect());
    };
    let mut units = Vec::new();
    for (i, asset) in spec.assets.iter().enumerate() {
        let folds = walk
            .plan
            .get(i)
            .ok_or_else(|| (i, "its walk-forward folds were not planned".to_string()))?;
        for fold in folds {
            let cut = match asset {
                AssetSpec::Data(source) => AssetSpec::Data(tli_data::BarSource {
                    start: fold.start.map(|t| t.0).or(source.start),
                    end: Some(fold.end.0),
                    ..source.clone()
                }),
                AssetSpec::Synthetic(_) => asset.clone(),
            };
            units.push((i, cut, fold.features(&spec.features)));
        }
    }
    Ok(units)
}

/// Datasets built once per (asset, feature config, version of each file
/// read) and shared by tasks: a file rewritten on disk is a new key, never
/// served from memory as it was. Entries no task holds any more (finished
/// jobs, refused submissions) are kept for reuse only up to
/// [`UNHELD_KEPT`], the least recently used going first, so a long-lived
/// host's memory follows its live tasks.
#[derive(Default)]
pub struct DatasetCache {
    built: Mutex<CacheEntries>,
    /// SHA-256 of each file version hashed so far (at most [`HASHES_KEPT`]).
    hashes: Mutex<HashMap<FileVersion, String>>,
}

/// Datasets no task holds that the cache keeps at most.
pub const UNHELD_KEPT: usize = 8;

/// File versions whose hash the cache remembers at most.
const HASHES_KEPT: usize = 4096;

/// One version of a file, told without reading it: new content changes the
/// size, the modification time or the change time (which no user can set back).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct FileVersion {
    device: u64,
    inode: u64,
    size: u64,
    modified_ns: i64,
    changed_ns: i64,
}

impl FileVersion {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.size(),
            modified_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            changed_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
        }
    }
}

#[derive(Default)]
struct CacheEntries {
    /// Key → (data, when last used).
    map: HashMap<String, (AssetData, u64)>,
    clock: u64,
}

impl CacheEntries {
    fn get(&mut self, key: &str) -> Option<AssetData> {
        self.clock += 1;
        let now = self.clock;
        self.map.get_mut(key).map(|(data, used)| {
            *used = now;
            data.clone()
        })
    }

    /// Inserts, then drops the least recently used entries that only the
    /// cache holds, beyond the newest [`UNHELD_KEPT`].
    fn insert(&mut self, key: String, data: AssetData) {
        self.clock += 1;
        self.map.insert(key, (data, self.clock));
        let mut unheld: Vec<(u64, String)> = self
            .map
            .iter()
            .filter(|(_, (d, _))| RArc::strong_count(&d.dataset) == 1)
            .map(|(k, (_, used))| (*used, k.clone()))
            .collect();
        if unheld.len() > UNHELD_KEPT {
            unheld.sort_unstable();
            for (_, key) in &unheld[..unheld.len() - UNHELD_KEPT] {
                self.map.remove(key);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// A file as a model card names it: by name and SHA-256.
fn data_file(input: &InputFile) -> DataFile {
    DataFile {
        name: input
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        sha256: input.sha256.clone(),
    }
}

/// The bar file and covariate files a unit reads, each once.
fn files_of<'a>(asset: &'a AssetSpec, features: &'a FeatureConfig) -> Vec<&'a Path> {
    let AssetSpec::Data(source) = asset else {
        return Vec::new();
    };
    let mut covariates: Vec<&Path> = features
        .columns
        .iter()
        .filter_map(|c| c.file.as_deref())
        .collect();
    covariates.sort_unstable();
    covariates.dedup();
    let mut files = vec![source.path.as_path()];
    files.extend(covariates.into_iter().filter(|&c| c != source.path));
    files
}

impl DatasetCache {
    /// The dataset of `asset`, built on first use.
    pub fn get(
        &self,
        asset: &AssetSpec,
        features: &FeatureConfig,
        contracts: &ContractBook,
    ) -> Result<AssetData, String> {
        // Everything that changes the dataset: the file and the version of
        // each file read, symbol, zone and cut.
        let inputs = files_of(asset, features)
            .into_iter()
            .map(|path| self.fingerprint(path))
            .collect::<Result<Vec<_>, _>>()?;
        let source = match asset {
            AssetSpec::Data(source) => format!(
                "{}|{:?}|{:?}",
                source.tz.as_deref().unwrap_or_default(),
                source.start,
                source.end
            ),
            AssetSpec::Synthetic(_) => String::new(),
        };
        let versions: Vec<String> = inputs
            .iter()
            .map(|(input, version)| format!("{}@{version:?}", input.resolved.display()))
            .collect();
        let key = format!(
            "{}|{source}|{}|{}",
            asset.label(),
            serde_json::to_string(features).unwrap_or_default(),
            versions.join(";")
        );
        let inputs: Vec<InputFile> = inputs.into_iter().map(|(input, _)| input).collect();
        if let Some(d) = lock(&self.built).get(&key) {
            return Ok(d);
        }
        let mut warnings = Vec::new();
        let (AnnotatedDataset { dataset, annex }, fitted) = match asset {
            AssetSpec::Data(source) => {
                let (table, notes) = source
                    .read_for(contracts, features)
                    .map_err(|e| e.to_string())?;
                if let Some(outliers) = tli_data::inspect::outlier_warning(&table) {
                    warnings.push(format!("{}: {outliers}", source.path.display()));
                }
                let contract = source
                    .contract(&table, &notes, contracts)
                    .map_err(|e| e.to_string())?;
                let (built, stats) =
                    tli_data::features::build_with_stats(&table, contract, features)
                        .map_err(|e| e.to_string())?;
                let files = inputs.iter().map(data_file).collect();
                (built, Some(Arc::new((stats, files))))
            }
            AssetSpec::Synthetic(SyntheticAsset {
                rows,
                seed,
                seasonal: Some(pick),
                ..
            }) => {
                let mut set = planted_seasonal(SeasonalSpec {
                    rows: *rows,
                    assets: pick.assets,
                    seed: *seed,
                    ..SeasonalSpec::default()
                });
                if pick.asset >= set.len() {
                    return Err(format!(
                        "seasonal asset {} of a set of {}",
                        pick.asset, pick.assets
                    ));
                }
                let mut built = set.swap_remove(pick.asset).data;
                built.dataset.symbol = asset.label().into();
                (built, None)
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
                (built, None)
            }
        };
        let data = AssetData {
            dataset: RArc::new(dataset),
            annex,
            fitted,
            inputs,
            warnings,
        };
        lock(&self.built).insert(key, data.clone());
        Ok(data)
    }

    /// `path` as it is now: opened (by the host's rules for data files),
    /// where it led, its size, time and SHA-256 (hashed once per version).
    fn fingerprint(&self, path: &Path) -> Result<(InputFile, FileVersion), String> {
        let file = tli_data::files::open_data_file(path).map_err(|e| e.to_string())?;
        let meta = file
            .metadata()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let version = FileVersion::of(&meta);
        let resolved = tli_data::files::opened_path(&file).unwrap_or_else(|_| path.to_path_buf());
        let known = lock(&self.hashes).get(&version).cloned();
        let sha256 = match known {
            Some(hash) => hash,
            None => {
                let (hash, _) = tli_core::digest::sha256_stream(&file, None)
                    .map_err(|e| format!("{}: cannot be read: {e}", path.display()))?;
                let mut hashes = lock(&self.hashes);
                if hashes.len() >= HASHES_KEPT {
                    hashes.clear();
                }
                hashes.insert(version, hash.clone());
                hash
            }
        };
        Ok((
            InputFile {
                path: path.to_path_buf(),
                resolved,
                size: version.size,
                modified_ns: version.modified_ns,
                sha256,
            },
            version,
        ))
    }

    /// The files of `asset` that differ from what `recorded` says they
    /// were, each with what changed; files `recorded` does not list (jobs
    /// of hosts that did not record them) are not checked.
    pub fn changed_inputs(
        &self,
        asset: &AssetSpec,
        features: &FeatureConfig,
        recorded: &[InputFile],
    ) -> Result<Vec<(PathBuf, String)>, String> {
        let mut changed = Vec::new();
        for path in files_of(asset, features) {
            let Some(then) = recorded.iter().find(|f| f.path == path) else {
                continue;
            };
            let (now, _) = self.fingerprint(path)?;
            if let Some(change) = then.change_from(&now) {
                changed.push((path.to_path_buf(), change));
            }
        }
        Ok(changed)
    }

    /// Every file `spec` reads as it is now (for accepting changed inputs).
    pub fn inputs_now(&self, spec: &JobSpec) -> Result<Vec<InputFile>, String> {
        let units = units_of(spec).map_err(|(i, m)| format!("assets[{i}]: {m}"))?;
        let mut all: Vec<InputFile> = Vec::new();
        for (_, asset, features) in &units {
            for path in files_of(asset, features) {
                if !all.iter().any(|f| f.path == path) {
                    all.push(self.fingerprint(path)?.0);
                }
            }
        }
        Ok(all)
    }

    /// Every asset of `spec` (of a walk-forward job, every fold of every
    /// asset, asset by asset: [`JobSpec::unit`]), or the index of the asset
    /// and the message of the first that fails.
    pub fn job(
        &self,
        spec: &JobSpec,
        contracts: &ContractBook,
    ) -> Result<JobData, (usize, String)> {
        units_of(spec)?
            .iter()
            .map(|(i, asset, features)| self.get(asset, features, contracts).map_err(|m| (*i, m)))
            .collect::<Result<Vec<_>, _>>()
            .map(JobData)
    }

    /// `spec` with its walk-forward folds planned on each asset's bars (as
    /// it is, without walk-forward or when planned already).
    pub fn plan_folds(
        spec: &JobSpec,
        contracts: &ContractBook,
    ) -> Result<JobSpec, (usize, String)> {
        let Some(walk) = spec.walk_forward.as_ref().filter(|w| w.plan.is_empty()) else {
            return Ok(spec.clone());
        };
        let mut plan = Vec::new();
        for (i, asset) in spec.assets.iter().enumerate() {
            let AssetSpec::Data(source) = asset else {
                return Err((i, "walk-forward folds need a bar file".into()));
            };
            let (table, _) = source.read(contracts).map_err(|e| (i, e.to_string()))?;
            plan.push(
                walk.folds(&table, &spec.features)
                    .map_err(|m| (i, format!("walk_forward: {m}")))?,
            );
        }
        let mut planned = spec.clone();
        if let Some(w) = planned.walk_forward.as_mut() {
            w.plan = plan;
        }
        Ok(planned)
    }
}

impl Orchestrator {
    /// The job spec, first dataset and inputs a stored task needs to run.
    pub(super) fn task_inputs(
        &self,
        task: &TaskRow,
    ) -> Result<(JobSpec, RArc<Dataset>, TaskInputs), String> {
        let job = self
            .store
            .job(task.job_id)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("job {} of task {} is missing", task.job_id, task.id))?;
        let spec: JobSpec =
            serde_json::from_str(&job.spec_json).map_err(|e| format!("stored job spec: {e}"))?;
        let planned = spec
            .task_plan()
            .get(task.ordinal as usize)
            .copied()
            .ok_or_else(|| format!("task {} has no place in its job spec", task.id))?;
        // Only the task's own assets: a file another task of the job reads
        // may be gone without stopping this one.
        let units = units_of(&spec).map_err(|(i, m)| format!("assets[{i}]: {m}"))?;
        let mut built = Vec::new();
        for a in wanted_units(planned.assets, units.len()) {
            let (i, asset, features) = units
                .get(a)
                .ok_or_else(|| format!("task {} reads asset {a} of {}", task.id, units.len()))?;
            // The data roots are checked again each time: the stored path
            // may lead elsewhere now, and the roots may have changed.
            if let Some(roots) = self.data_roots() {
                for path in files_of(asset, features) {
                    roots.check(path).map_err(|e| format!("assets[{i}]: {e}"))?;
                }
            }
            let changed = self
                .datasets
                .changed_inputs(asset, features, &spec.inputs)
                .map_err(|m| format!("assets[{i}]: {m}"))?;
            if !changed.is_empty() {
                let list: Vec<String> = changed
                    .iter()
                    .map(|(path, change)| format!("{} ({change})", path.display()))
                    .collect();
                return Err(format!(
                    "assets[{i}]: changed since the job was submitted: {}; put the file back as \
                     it was, or run `tli train resume {} --accept-changed-inputs` to train on it \
                     as it is now",
                    list.join("; "),
                    task.job_id
                ));
            }
            let data = self
                .datasets
                .get(asset, features, &self.contracts)
                .map_err(|m| format!("assets[{i}]: {m}"))?;
            built.push((a, data));
        }
        let picked = built.iter().map(|(a, d)| (*a, d)).collect();
        let pooled = matches!(planned.assets, TaskAssets::Pooled);
        let (dataset, inputs) = inputs_of(picked, pooled, units.len());
        Ok((spec, dataset, inputs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(seed: u64) -> AssetSpec {
        AssetSpec::Synthetic(SyntheticAsset {
            rows: 300,
            seed,
            sigma: None,
            seasonal: None,
        })
    }

    #[test]
    fn datasets_nobody_holds_are_evicted_beyond_a_few_and_held_ones_never() {
        let cache = DatasetCache::default();
        let (features, contracts) = (FeatureConfig::default(), ContractBook::builtin());
        let held = cache.get(&synthetic(0), &features, &contracts).unwrap();
        for seed in 1..=3 * UNHELD_KEPT as u64 {
            cache.get(&synthetic(seed), &features, &contracts).unwrap();
        }
        // The held one, UNHELD_KEPT unheld ones and the newest (still held
        // by its caller while it was inserted).
        assert_eq!(lock(&cache.built).len(), UNHELD_KEPT + 2);
        let again = cache.get(&synthetic(0), &features, &contracts).unwrap();
        assert!(
            std::ptr::eq(&*held.dataset, &*again.dataset),
            "a held dataset is shared"
        );
    }
}
