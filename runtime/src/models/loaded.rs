//! A model loaded from its bundle: the plugin that can apply it, and a
//! predictor made from its checked weights.

use super::ModelError;
use crate::registry::{LoadedPlugin, PluginRegistry, PredictorHandle};
use crate::services::TaskServices;
use abi_stable::std_types::{RArc, RString};
use std::path::Path;
use std::sync::Arc;
use tli_data::contracts::ContractSpec;
use tli_data::inference::{featurize_with_stats, FeatureRows};
use tli_data::table::BarTable;
use tli_models::{AssetCard, Bundle, ModelCard, PredictionTable};
use tli_plugin_api::{
    task_inputs::column, Column, Dataset, DatasetAnnex, DatasetShape, Device, FeatureRole,
    MemoryBreakdown, Predictions, PredictorSpec, TaskInputs,
};

/// Which bars to write predictions for (UTC ns, inclusive); earlier bars
/// still serve as look-back.
#[derive(Clone, Copy, Debug, Default)]
pub struct PredictWindow {
    pub start: Option<i64>,
    pub end: Option<i64>,
}

impl PredictWindow {
    fn contains(&self, ts: i64) -> bool {
        self.start.is_none_or(|s| ts >= s) && self.end.is_none_or(|e| ts <= e)
    }
}

/// A model ready to predict (see the module docs).
pub struct LoadedModel {
    pub card: ModelCard,
    pub plugin: Arc<LoadedPlugin>,
    /// The card's feature roles, parsed once.
    roles: Vec<FeatureRole>,
    /// The config as the plugin normalized it.
    config: String,
    predictor: PredictorHandle,
    /// Rows streamed since the last reset (stream outputs are numbered so).
    streamed: u64,
    /// libtorch intra-op threads of every call, set on the calling thread:
    /// BLAS results depend on the thread count, so the same model gives the
    /// same bits in `tli predict` and on a host (whose calls come from
    /// whichever thread serves them) only when both use the same count.
    threads: i32,
}

/// The intra-op threads a model uses unless told otherwise: one per CPU
/// this process may run on.
pub fn default_predict_threads() -> i32 {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(1024) as i32)
}

impl LoadedModel {
    /// Loads the model in `bundle` with a plugin of `registry` that accepts
    /// it, on `device`; `model_id` names it in log lines.
    pub fn load(
        registry: &PluginRegistry,
        bundle: &Bundle,
        model_id: &str,
        device: Device,
    ) -> Result<Self, ModelError> {
        let card = bundle.card.clone();
        let plugin = plugin_for(registry, &card)?;
        if let Some(reason) = plugin.train_only_reason() {
            return Err(ModelError::TrainOnly(reason));
        }
        let config = plugin
            .validate_config(&card.config.to_string())
            .map_err(|source| ModelError::Config {
                plugin: plugin.label(),
                source,
            })?;
        let roles = roles(&card)?;
        let spec = predictor_spec(&card, &roles, &config, bundle, model_id, device)?;
        let predictor = plugin
            .create_predictor(spec, TaskServices::new(plugin.name(), model_id))
            .map_err(|source| ModelError::Plugin {
                what: format!("plugin {} cannot load the model", plugin.label()),
                source,
            })?;
        Ok(Self {
            card,
            plugin,
            roles,
            config,
            predictor,
            streamed: 0,
            threads: default_predict_threads(),
        })
    }

    /// Bytes the predictor holds now.
    pub fn memory(&self) -> Result<MemoryBreakdown, ModelError> {
        self.predictor
            .memory()
            .map_err(|source| ModelError::Plugin {
                what: "the predictor's memory".into(),
                source,
            })
    }

    /// Bytes a predictor of this model will need for batches of `rows` rows.
    pub fn estimate_memory(
        &self,
        rows: u64,
        device: Device,
    ) -> Result<MemoryBreakdown, ModelError> {
        let shape = DatasetShape {
            rows,
            features: self.card.inputs.feature_names.len() as u64,
            targets: self.card.inputs.target_names.len() as u64,
        };
        self.plugin
            .estimate_predictor_memory(&self.card.config.to_string(), shape, &device.to_string())
            .map_err(|source| ModelError::Plugin {
                what: "estimating the predictor's memory".into(),
                source,
            })
    }

    /// The asset of the model that `contract` is.
    pub fn asset_for(&self, contract: &ContractSpec) -> Result<&AssetCard, ModelError> {
        self.card
            .asset_for_root(&contract.root)
            .ok_or_else(|| ModelError::OtherContract {
                root: contract.root.clone(),
                known: self.card.roots().join(", "),
            })
    }

    /// Predictions for the bars of `table` (one contract) inside `window`:
    /// one row per bar with the model's full look-back.
    pub fn predict_bars(
        &mut self,
        table: &BarTable,
        contract: &ContractSpec,
        window: PredictWindow,
    ) -> Result<PredictionTable, ModelError> {
        let prepared = self.prepare(table, contract, window)?;
        self.predict_prepared(&prepared)
    }

    /// `table` with the model's covariate files joined to it (the bar
    /// file's own columns must come with the bars): as it is when the
    /// model reads no user column or the table has them all.
    pub fn with_columns<'t>(
        &self,
        table: &'t BarTable,
    ) -> Result<std::borrow::Cow<'t, BarTable>, ModelError> {
        let features = &self.card.features;
        let needed = features
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .chain(features.target.column());
        let missing = needed
            .into_iter()
            .any(|name| tli_data::covariates::column(table, name).is_none());
        if !missing {
            return Ok(std::borrow::Cow::Borrowed(table));
        }
        let mut joined = table.clone();
        tli_data::covariates::attach_columns(&mut joined, None, features, None)?;
        Ok(std::borrow::Cow::Owned(joined))
    }

    /// The bars of `table` featurized with the model's statistics, as the
    /// batch its predictor takes (rows before the window are context only).
    pub fn prepare(
        &self,
        table: &BarTable,
        contract: &ContractSpec,
        window: PredictWindow,
    ) -> Result<PreparedBatch, ModelError> {
        let asset = self.asset_for(contract)?.clone();
        let table = self.with_columns(table)?;
        let rows = featurize_with_stats(&table, contract, &self.card.features, &asset.stats)?;
        let from = window
            .start
            .map(|start| rows.timestamps.partition_point(|t| *t < start))
            .unwrap_or(0);
        let batch = batch_of(&self.card, &self.roles, &asset, &rows, contract, from);
        Ok(PreparedBatch {
            asset,
            rows,
            batch,
            window,
        })
    }

    /// [`predict_bars`](Self::predict_bars) of a prepared batch.
    pub fn predict_prepared(
        &mut self,
        prepared: &PreparedBatch,
    ) -> Result<PredictionTable, ModelError> {
        let predictions = self.predict_batch(prepared.batch.clone())?;
        let window = prepared.window;
        let table = to_table(
            &prepared.asset,
            &prepared.rows,
            &predictions,
            window,
            TableRows {
                offset: 0,
                actual: true,
            },
        );
        if table.is_empty() {
            let text = |t: Option<i64>| t.map(tli_data::timefmt::format);
            return Err(ModelError::EmptyWindow {
                start: text(window.start).unwrap_or_else(|| "the start".into()),
                end: text(window.end).unwrap_or_else(|| "the end".into()),
            });
        }
        Ok(table)
    }

    /// Sets the intra-op threads of this model's calls (at least 1).
    pub fn set_threads(&mut self, threads: i32) {
        self.threads = threads.max(1);
    }

    /// The predictor's outputs for `batch`, as the plugin gives them.
    pub fn predict_batch(&mut self, batch: TaskInputs) -> Result<Predictions, ModelError> {
        tch::set_num_threads(self.threads);
        self.predictor
            .predict(batch)
            .map_err(|source| ModelError::Plugin {
                what: format!("plugin {} failed to predict", self.plugin.label()),
                source,
            })
    }

    /// The predictor's outputs for the next rows of a stream.
    pub fn stream_batch(&mut self, bars: TaskInputs) -> Result<Predictions, ModelError> {
        tch::set_num_threads(self.threads);
        self.predictor
            .stream(bars)
            .map_err(|source| ModelError::Plugin {
                what: format!("plugin {} failed to stream", self.plugin.label()),
                source,
            })
    }

    /// Forgets what was streamed.
    pub fn reset_stream(&mut self) -> Result<(), ModelError> {
        self.streamed = 0;
        self.predictor.reset().map_err(|source| ModelError::Plugin {
            what: format!("plugin {} failed to reset", self.plugin.label()),
            source,
        })
    }

    /// Streams the next featurized rows of one asset (the rows after every
    /// row streamed before) and returns the outputs the predictor gave for
    /// them, de-scaled like [`predict_bars`](Self::predict_bars)' but with
    /// no `<target>:actual` columns (a stream does not know the future).
    pub fn stream_rows(
        &mut self,
        rows: &FeatureRows,
        contract: &ContractSpec,
    ) -> Result<PredictionTable, ModelError> {
        let asset = self.asset_for(contract)?.clone();
        let batch = batch_of(&self.card, &self.roles, &asset, rows, contract, 0);
        let predictions = self.stream_batch(batch)?;
        let offset = self.streamed;
        self.streamed += rows.len() as u64;
        Ok(to_table(
            &asset,
            rows,
            &predictions,
            PredictWindow::default(),
            TableRows {
                offset,
                actual: false,
            },
        ))
    }
}

impl LoadedModel {
    /// The model (from `bundle`, the one it was loaded from) traced into a
    /// TorchScript module in `out_dir` by its plugin, on the windows of
    /// `prepared` (plugin API 1.3); the plugin's signature as JSON.
    pub fn export_torchscript(
        &self,
        bundle: &Bundle,
        prepared: &PreparedBatch,
        out_dir: &Path,
        device: Device,
    ) -> Result<String, ModelError> {
        let spec = predictor_spec(
            &self.card,
            &self.roles,
            &self.config,
            bundle,
            &self.card.plugin.name,
            device,
        )?;
        let services = TaskServices::new(self.plugin.name(), &self.card.plugin.name);
        self.plugin
            .export_torchscript(spec, prepared.batch.clone(), out_dir, services)
            .map_err(|source| ModelError::Plugin {
                what: format!("plugin {} cannot export TorchScript", self.plugin.label()),
                source,
            })
    }
}

/// What a predictor is made with: the checked weights (through the
/// bundle's open descriptor) and the training inputs without rows.
fn predictor_spec(
    card: &ModelCard,
    roles: &[FeatureRole],
    config: &str,
    bundle: &Bundle,
    model_id: &str,
    device: Device,
) -> Result<PredictorSpec, ModelError> {
    Ok(PredictorSpec {
        model_id: model_id.into(),
        config_json: config.into(),
        device: device.to_string().into(),
        weights_path: RString::from(bundle.weights_path().to_string_lossy().as_ref()),
        schema: schema(card, roles)?,
    })
}

/// What a table of outputs holds: output rows are numbered from `offset`
/// (a stream's rows so far), and with `actual` each target's realized value.
#[derive(Clone, Copy)]
struct TableRows {
    offset: u64,
    actual: bool,
}

/// Bytes a predictor of the model in `card` needs on `device` for batches
/// of `rows` rows, from the plugin that would load it (before loading it).
pub fn estimate_for(
    registry: &PluginRegistry,
    card: &ModelCard,
    rows: u64,
    device: Device,
) -> Result<MemoryBreakdown, ModelError> {
    let plugin = plugin_for(registry, card)?;
    let shape = DatasetShape {
        rows,
        features: card.inputs.feature_names.len() as u64,
        targets: card.inputs.target_names.len() as u64,
    };
    plugin
        .estimate_predictor_memory(&card.config.to_string(), shape, &device.to_string())
        .map_err(|source| ModelError::Plugin {
            what: "estimating the predictor's memory".into(),
            source,
        })
}

/// New bars of one asset, featurized and packed for the predictor.
pub struct PreparedBatch {
    pub asset: AssetCard,
    pub rows: FeatureRows,
    pub batch: TaskInputs,
    pub window: PredictWindow,
}

/// The newest loaded version of the card's plugin that accepts the model:
/// the same version or a later one semver calls compatible (`^version`).
fn plugin_for(
    registry: &PluginRegistry,
    card: &ModelCard,
) -> Result<Arc<LoadedPlugin>, ModelError> {
    let name = &card.plugin.name;
    let available = registry.versions(name);
    if available.is_empty() {
        return Err(ModelError::PluginMissing {
            plugin: card.plugin.label(),
            loaded: registry.names().join(", "),
        });
    }
    let wanted = format!("^{}", card.plugin.version);
    let requirement = semver::VersionReq::parse(&wanted)
        .map_err(|e| ModelError::Card(format!("plugin version {:?}: {e}", card.plugin.version)))?;
    available
        .iter()
        .rev()
        .filter_map(|v| registry.get_version(name, v))
        .find(|p| requirement.matches(&p.version))
        .cloned()
        .ok_or_else(|| ModelError::PluginVersion {
            plugin: card.plugin.label(),
            wanted,
            available: available
                .iter()
                .map(|v| format!("{name}@{v}"))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn roles(card: &ModelCard) -> Result<Vec<FeatureRole>, ModelError> {
    card.inputs
        .feature_roles
        .iter()
        .map(|r| {
            FeatureRole::parse(r)
                .ok_or_else(|| ModelError::Card(format!("unknown feature role {r:?}")))
        })
        .collect()
}

/// The training inputs without rows (what a predictor is made with).
fn schema(card: &ModelCard, roles: &[FeatureRole]) -> Result<TaskInputs, ModelError> {
    let datasets = card
        .assets
        .iter()
        .map(|asset| {
            let dataset = Dataset {
                symbol: asset.symbol.as_str().into(),
                feature_names: card
                    .inputs
                    .feature_names
                    .iter()
                    .map(|s| s.as_str().into())
                    .collect(),
                target_names: card
                    .inputs
                    .target_names
                    .iter()
                    .map(|s| s.as_str().into())
                    .collect(),
                contract: tli_plugin_api::ContractTerms {
                    root: asset.contract.root.as_str().into(),
                    tick_size: asset.contract.tick_size,
                    point_value: asset.contract.point_value,
                    currency: asset.contract.currency.as_str().into(),
                },
                periods_per_year: card.inputs.periods_per_year,
                ..Dataset::default()
            };
            let annex = DatasetAnnex {
                feature_roles: roles.to_vec(),
                feature_variables: card.inputs.feature_variables.clone(),
                target_horizons: card.inputs.target_horizons.clone(),
                target_scales: asset.stats.target_scales.clone(),
                bar_interval_ns: card.inputs.bar_interval_ns,
                row_markers: Vec::new(),
                asset_index: asset.asset_index,
            };
            (RArc::new(dataset), annex)
        })
        .collect();
    Ok(TaskInputs::new(datasets, card.pooled, card.assets.len()))
}

/// New rows of one asset as a batch: features and markers, no targets;
/// rows before `from` are context only.
fn batch_of(
    card: &ModelCard,
    roles: &[FeatureRole],
    asset: &AssetCard,
    rows: &FeatureRows,
    contract: &ContractSpec,
    from: usize,
) -> TaskInputs {
    let dataset = Dataset {
        symbol: rows.symbol.as_str().into(),
        timestamps: rows.timestamps.clone().into(),
        features: rows.features.clone().into(),
        feature_names: rows
            .feature_names
            .iter()
            .map(|s| s.as_str().into())
            .collect(),
        close: rows.close.clone().into(),
        contract: contract.terms(),
        periods_per_year: card.inputs.periods_per_year,
        ..Dataset::default()
    };
    let annex = DatasetAnnex {
        feature_roles: roles.to_vec(),
        feature_variables: card.inputs.feature_variables.clone(),
        target_horizons: Vec::new(),
        target_scales: Vec::new(),
        bar_interval_ns: card.inputs.bar_interval_ns,
        row_markers: rows.row_markers.clone(),
        asset_index: asset.asset_index,
    };
    let mut batch = TaskInputs::new(
        vec![(RArc::new(dataset), annex)],
        card.pooled,
        card.assets.len(),
    );
    batch.columns.push(Column {
        dataset: 0,
        name: column::PREDICT_FROM.into(),
        integers: vec![from as i64].into(),
        ..Column::default()
    });
    batch
}

/// The predictor's outputs as a table: forecasts of a target (`<target>:…`)
/// multiplied back by its scale (so they are log returns), other outputs as
/// they are, then each target's realized value (`<target>:actual`).
fn to_table(
    asset: &AssetCard,
    rows: &FeatureRows,
    predictions: &Predictions,
    window: PredictWindow,
    numbering: TableRows,
) -> PredictionTable {
    let scales: Vec<f64> = predictions
        .columns
        .iter()
        .map(|c| {
            let target = c.as_str().split_once(':').map(|(t, _)| t);
            target
                .and_then(|t| asset.stats.target_names.iter().position(|n| n == t))
                .map(|i| asset.stats.target_scales[i])
                .unwrap_or(1.0)
        })
        .collect();
    let mut columns: Vec<String> = predictions.columns.iter().map(|c| c.to_string()).collect();
    if numbering.actual {
        columns.extend(rows.target_names.iter().map(|t| format!("{t}:actual")));
    }
    let n_targets = rows.target_names.len();
    let mut table = PredictionTable::new(columns);
    let mut values = Vec::with_capacity(table.columns.len());
    for i in 0..predictions.len() {
        // Rows outside this batch (a plugin numbering a stream wrongly) are not ours to write.
        let Some(r) = predictions.rows[i]
            .checked_sub(numbering.offset)
            .map(|r| r as usize)
            .filter(|&r| r < rows.len())
        else {
            continue;
        };
        let ts = rows.timestamps[r];
        if !window.contains(ts) {
            continue;
        }
        values.clear();
        values.extend(predictions.row(i).iter().zip(&scales).map(|(v, s)| v * s));
        if numbering.actual {
            values.extend_from_slice(&rows.realized[r * n_targets..(r + 1) * n_targets]);
        }
        table.push(ts, &rows.symbol, &values);
    }
    table
}
