//! Models kept resident to answer prediction requests, beside training.
//!
//! * **Loading** a model ([`Orchestrator::load_model`]) finds it in the
//!   catalog (a task's model is exported from its checkpoint into scratch
//!   space first), asks its plugin for the predictor's estimate at
//!   [`ESTIMATE_ROWS`] rows, and **holds** estimate + margin on the host's
//!   device through the arbiter *before* the predictor allocates anything;
//!   a model that does not fit now is refused, not queued. Once loaded, the
//!   hold becomes the larger of the estimate and the measured bytes, plus
//!   the margin. Loads are serialised; loading a resident model returns it.
//! * **Predicting** locks the model's predictor for one call (a predictor is
//!   called by one thread at a time); requests queue on that lock.
//! * **A stream** ([`Orchestrator::open_stream`]) gets a predictor of its
//!   own, made from the resident model's open bundle and held like a load,
//!   so streams never share state; it keeps the last bars the features need
//!   and featurizes only the new ones.
//! * **Unloading** forgets the model; its hold is released when the last
//!   request or stream using it ends (the memory is freed then, not
//!   before). Released memory is offered to queued tasks at the next tick.
//!
//! Resident models are not recorded in the store: a host restart starts
//! with none loaded.

use super::{lock, Orchestrator};
use crate::models::backtest::{Backtest, BacktestOptions};
use crate::models::catalog::{Catalog, CatalogError, ModelEntry};
use crate::models::{estimate_for, LoadedModel, ModelError, PredictWindow};
use crate::orchestrator::arbiter::{Arbiter, HoldId, NoRoom, Remeasure};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tli_data::contracts::ContractSpec;
use tli_data::inference::featurize_with_stats;
use tli_data::table::BarTable;
use tli_models::{AssetCard, Bundle, PredictionTable};
use tli_plugin_api::Device;

/// Rows a predictor's estimate is asked for: what one request may carry
/// before its activations outgrow the hold.
pub const ESTIMATE_ROWS: u64 = 4096;

/// Why a model could not be served. One line each.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("model {model} does not fit: {source}")]
    NoRoom {
        model: String,
        #[source]
        source: NoRoom,
    },
    #[error("model {0} is not loaded; load it first (`tli models load {0}`)")]
    NotLoaded(String),
    #[error("{0}")]
    BadBars(String),
    #[error("the host is shutting down")]
    ShuttingDown,
}

/// A hold on the arbiter and its holder's name, both released when dropped.
struct HoldGuard {
    arbiter: Arc<Mutex<Arbiter>>,
    holders: Arc<Mutex<HashMap<HoldId, String>>>,
    id: HoldId,
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        lock(&self.arbiter).release_hold(self.id);
        lock(&self.holders).remove(&self.id);
    }
}

/// The resident models of a host, and what each hold is for.
#[derive(Default)]
pub(crate) struct Serving {
    models: Mutex<HashMap<String, Arc<Resident>>>,
    /// Who holds each hold ("es-tft", "es-tft (stream 3)"), for resources.
    holders: Arc<Mutex<HashMap<HoldId, String>>>,
    next_hold: AtomicU64,
    /// One load at a time (two loads of one model must not both load it).
    loading: Mutex<()>,
}

/// A model kept resident (see the module docs).
pub struct Resident {
    pub entry: ModelEntry,
    pub device: Device,
    pub loaded_ms: i64,
    /// Estimate (at [`ESTIMATE_ROWS`]) and measurement after loading.
    pub estimated_bytes: u64,
    pub measured_bytes: u64,
    /// What the arbiter holds for it: the larger of both, plus the margin.
    pub reserved_bytes: u64,
    /// "plugin@version" serving it.
    pub served_by: String,
    pub predictions: AtomicU64,
    pub streams: AtomicU64,
    pub open_streams: AtomicU32,
    model: Mutex<LoadedModel>,
    /// Keeps the checked weights open for the predictors of streams.
    bundle: Bundle,
    _hold: HoldGuard,
}

impl Resident {
    pub fn id(&self) -> &str {
        &self.entry.id
    }

    /// The model applied to `table`'s bars inside `window`.
    pub fn predict(
        &self,
        table: &BarTable,
        contract: &ContractSpec,
        window: PredictWindow,
    ) -> Result<PredictionTable, ServeError> {
        let mut model = lock(&self.model);
        let table = model.predict_bars(table, contract, window)?;
        self.predictions.fetch_add(1, Ordering::Relaxed);
        Ok(table)
    }

    /// The model's outputs on `table`'s bars traded as `options` say
    /// ([`LoadedModel::backtest`]).
    pub fn backtest(
        &self,
        table: &BarTable,
        contract: &ContractSpec,
        options: BacktestOptions,
    ) -> Result<Backtest, ServeError> {
        let mut model = lock(&self.model);
        let outcome = model.backtest(table, contract, options)?;
        self.predictions.fetch_add(1, Ordering::Relaxed);
        Ok(outcome)
    }
}

/// A prediction stream (see the module docs).
pub struct PredictStream {
    pub resident: Arc<Resident>,
    model: LoadedModel,
    contract: ContractSpec,
    asset: AssetCard,
    /// The last bars the features need (their look-back), or fewer.
    tail: BarTable,
    lookback: usize,
    pub bars_seen: u64,
    _hold: HoldGuard,
}

impl PredictStream {
    /// The symbol the stream was opened for.
    pub fn symbol(&self) -> &str {
        &self.tail.symbol
    }

    /// The bar interval of the stream.
    pub fn interval(&self) -> tli_data::table::BarInterval {
        self.tail.interval
    }

    /// The outputs for the next bars of the stream (`bars`, checked, after
    /// every bar sent before): none while the look-back is filling.
    pub fn push(&mut self, bars: &BarTable) -> Result<PredictionTable, ServeError> {
        if let (Some(&last), Some(&first)) = (self.tail.ts.last(), bars.ts.first()) {
            if first <= last {
                return Err(ServeError::BadBars(format!(
                    "bar at {} does not come after the stream's last bar ({}); send bars oldest \
                     first, each once",
                    tli_data::timefmt::format(first),
                    tli_data::timefmt::format(last)
                )));
            }
        }
        let mut combined = self.tail.clone();
        combined
            .append(bars)
            .map_err(|e| ServeError::BadBars(e.to_string()))?;
        self.bars_seen += bars.len() as u64;
        let outputs = if combined.len() > self.lookback {
            let joined = self.model.with_columns(&combined)?;
            let rows = featurize_with_stats(
                &joined,
                &self.contract,
                &self.model.card.features,
                &self.asset.stats,
            )
            .map_err(ModelError::from)?;
            self.model.stream_rows(&rows, &self.contract)?
        } else {
            PredictionTable::new(Vec::new())
        };
        let keep = combined.len().saturating_sub(self.lookback);
        self.tail = tail_of(&combined, keep);
        Ok(outputs)
    }
}

/// `table` without its first `skip` bars (with their columns).
fn tail_of(table: &BarTable, skip: usize) -> BarTable {
    match table.ts.get(skip) {
        Some(&first) => table.between(Some(first), None),
        None => {
            let mut empty = table.between(Some(i64::MAX), None);
            empty.rolls.clear();
            empty
        }
    }
}

impl Orchestrator {
    fn catalog(&self) -> Catalog<'_> {
        Catalog {
            store: &self.store,
            state_dir: &self.config.state_dir,
        }
    }

    /// Every model of the host (tasks with a card and a checkpoint, and
    /// imported bundles).
    pub fn models(&self) -> Result<Vec<ModelEntry>, CatalogError> {
        self.catalog().list()
    }

    /// One model.
    pub fn model(&self, id: &str) -> Result<ModelEntry, CatalogError> {
        self.catalog().get(id)
    }

    /// The model `id` as a checked bundle (a task's exported into scratch
    /// space first); see [`Catalog::open`].
    pub fn open_model_bundle(&self, id: &str) -> Result<(ModelEntry, Bundle), CatalogError> {
        self.catalog()
            .open(&self.registry(), id, &self.scratch_dir())
    }

    /// Where imported bundles are staged and task models exported for a load.
    pub fn scratch_dir(&self) -> std::path::PathBuf {
        self.config.state_dir.join("tmp").join("models")
    }

    /// Where an imported model of this name goes.
    pub fn imported_model_path(&self, name: &str) -> Result<std::path::PathBuf, CatalogError> {
        let path = self.catalog().imported_path(name)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| CatalogError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        if path.symlink_metadata().is_ok() {
            return Err(CatalogError::Exists(name.into()));
        }
        Ok(path)
    }

    /// The resident models, by id.
    pub fn resident_models(&self) -> Vec<Arc<Resident>> {
        let mut models: Vec<_> = lock(&self.serving.models).values().cloned().collect();
        models.sort_by(|a, b| a.entry.id.cmp(&b.entry.id));
        models
    }

    /// A resident model, or `NotLoaded`.
    pub fn resident_model(&self, id: &str) -> Result<Arc<Resident>, ServeError> {
        let key = canonical(id);
        lock(&self.serving.models)
            .get(&key)
            .cloned()
            .ok_or(ServeError::NotLoaded(key))
    }

    /// Who holds each arbiter hold now (see [`Resources`](super::Resources)).
    pub fn hold_names(&self) -> HashMap<HoldId, String> {
        lock(&self.serving.holders).clone()
    }

    fn take_hold(&self, name: String, bytes: u64) -> Result<HoldGuard, ServeError> {
        let id = HoldId(self.serving.next_hold.fetch_add(1, Ordering::Relaxed));
        lock(&self.arbiter)
            .hold(id, bytes)
            .map_err(|source| ServeError::NoRoom {
                model: name.clone(),
                source,
            })?;
        lock(&self.serving.holders).insert(id, name);
        Ok(HoldGuard {
            arbiter: self.arbiter.clone(),
            holders: self.serving.holders.clone(),
            id,
        })
    }

    /// Makes model `id` resident (see the module docs); `false` with the
    /// model when it already was.
    pub fn load_model(&self, id: &str) -> Result<(Arc<Resident>, bool), ServeError> {
        if self.shutdown.load(Ordering::Relaxed) {
            return Err(ServeError::ShuttingDown);
        }
        let _one_at_a_time = lock(&self.serving.loading);
        if let Ok(resident) = self.resident_model(id) {
            return Ok((resident, false));
        }
        let (entry, bundle) = self.open_model_bundle(id)?;
        let device = self.config.device;
        let registry = self.registry();
        let estimate = estimate_for(&registry, &entry.card, ESTIMATE_ROWS, device)?.total();
        let bytes = lock(&self.arbiter).with_margin(estimate);
        let hold = self.take_hold(entry.id.clone(), bytes)?;
        let model = LoadedModel::load(&registry, &bundle, &entry.id, device)?;
        let measured = model.memory()?.total();
        let (remeasured, reserved) = {
            let mut arbiter = lock(&self.arbiter);
            let remeasured = arbiter.update_hold(hold.id, measured.max(estimate));
            (remeasured, arbiter.with_margin(measured.max(estimate)))
        };
        if let Remeasure::OverBudget { over_by, .. } = remeasured {
            tracing::warn!(
                model = %entry.id,
                "the loaded model measured more than estimated; the device is {over_by} bytes \
                 over its budget until something is released"
            );
        }
        let resident = Arc::new(Resident {
            served_by: model.plugin.label(),
            device,
            loaded_ms: tli_core::ids::now_ms(),
            estimated_bytes: estimate,
            measured_bytes: measured,
            reserved_bytes: reserved,
            predictions: AtomicU64::new(0),
            streams: AtomicU64::new(0),
            open_streams: AtomicU32::new(0),
            model: Mutex::new(model),
            bundle,
            _hold: hold,
            entry,
        });
        tracing::info!(
            model = %resident.entry.id,
            "model loaded by {} ({} bytes measured, {} estimated)",
            resident.served_by,
            measured,
            estimate
        );
        lock(&self.serving.models).insert(resident.entry.id.clone(), resident.clone());
        Ok((resident, true))
    }

    /// Forgets resident model `id` (its memory is freed once the requests
    /// and streams using it end); `false` when it was not loaded.
    pub fn unload_model(&self, id: &str) -> bool {
        let removed = lock(&self.serving.models).remove(&canonical(id));
        if let Some(resident) = &removed {
            tracing::info!(model = %resident.entry.id, "model unloaded");
        }
        removed.is_some()
    }

    /// Opens a prediction stream on resident model `id` for `symbol`'s
    /// bars at `interval` (`None`: the model's).
    pub fn open_stream(
        &self,
        id: &str,
        symbol: &str,
        interval: Option<tli_data::table::BarInterval>,
    ) -> Result<PredictStream, ServeError> {
        if self.shutdown.load(Ordering::Relaxed) {
            return Err(ServeError::ShuttingDown);
        }
        let resident = self.resident_model(id)?;
        let contract = self
            .contracts
            .lookup(symbol)
            .map_err(|e| ServeError::BadBars(e.to_string()))?
            .clone();
        let number = resident.streams.fetch_add(1, Ordering::Relaxed) + 1;
        let name = format!("{} (stream {number})", resident.entry.id);
        let hold = self.take_hold(name.clone(), resident.reserved_bytes)?;
        let model = LoadedModel::load(&self.registry(), &resident.bundle, &name, resident.device)?;
        let asset = model.asset_for(&contract)?.clone();
        let interval = match interval {
            Some(i) => i,
            None => interval_of(&model.card)?,
        };
        let lookback = model.card.features.lookback();
        resident.open_streams.fetch_add(1, Ordering::Relaxed);
        Ok(PredictStream {
            resident,
            model,
            contract,
            asset,
            tail: BarTable::new(symbol, interval),
            lookback,
            bars_seen: 0,
            _hold: hold,
        })
    }

    /// The contract of `symbol` (as for a bar file of that symbol).
    pub fn contract_of(&self, symbol: &str) -> Result<ContractSpec, ServeError> {
        self.contracts
            .lookup(symbol)
            .cloned()
            .map_err(|e| ServeError::BadBars(e.to_string()))
    }
}

impl Drop for PredictStream {
    fn drop(&mut self) {
        self.resident.open_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The bar interval the model was trained on.
fn interval_of(card: &tli_models::ModelCard) -> Result<tli_data::table::BarInterval, ServeError> {
    let ns = card.inputs.bar_interval_ns;
    tli_data::table::BarInterval::from_nanos(ns)
    .ok_or_else(|| {
        ServeError::BadBars(format!(
            "the model's bar interval ({ns} ns) is not one tli reads; say the interval when opening the stream"
        ))
    })
}

/// Ids as the catalog spells them (`" 12 "` is task 12's model).
fn canonical(id: &str) -> String {
    id.trim().to_string()
}
