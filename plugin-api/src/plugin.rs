//! The safe side of the contract: the traits a plugin author implements, the
//! [`export_plugin!`](crate::export_plugin) macro, and the adapters that turn
//! them into the FFI types of [`crate::abi`] with every call guarded against
//! panics.

use crate::abi::{
    AbiPredictor, AbiPredictor_TO, AbiTrainer, AbiTrainer_TO, HostServices, PluginModule,
    PluginModuleRef,
};
use crate::guard::{guarded, install_panic_hook};
use crate::predict::{Predictions, PredictorSpec};
use crate::task_inputs::TaskInputs;
use crate::types::{
    DatasetShape, ErrorCode, EvalReport, LogLevel, MemoryBreakdown, PluginError, PluginManifest,
    StepReport, TaskSpec,
};
use abi_stable::{
    prefix_type::PrefixTypeTrait,
    sabi_trait::TD_Opaque,
    std_types::{RResult, RStr, RString, RVec},
};
use std::mem::ManuallyDrop;
use std::path::Path;
use std::sync::OnceLock;

/// What a plugin says about itself (the plugin-API version is added for you).
#[derive(Clone, Debug)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub family: String,
    pub description: String,
    /// JSON object.
    pub default_config: String,
    /// JSON Schema of the config.
    pub config_schema: String,
}

/// A model family. Implement this on a unit struct and pass it to
/// [`export_plugin!`](crate::export_plugin). Functions, not methods: a plugin
/// holds no global state of its own; trainers hold the state.
pub trait Plugin: 'static {
    type Trainer: Trainer;

    fn manifest() -> Manifest;
    /// Parses and checks a config; returns it normalized with defaults filled in.
    fn validate_config(config_json: &str) -> Result<String, PluginError>;
    /// Bytes a trainer will need for this config, dataset shape and device.
    fn estimate_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError>;
    fn create_trainer(spec: TaskSpec, host: Host) -> Result<Self::Trainer, PluginError>;

    /// 1.1: what this plugin can do beyond 1.0, as [`crate::capability`]
    /// names. A host only sends pooled tasks to a plugin that declares
    /// [`capability::POOLED`](crate::capability::POOLED).
    fn capabilities() -> Vec<String> {
        Vec::new()
    }

    /// 1.1: creates a trainer with the [`TaskInputs`] as well: every dataset
    /// of a pooled task and the side table (feature roles, horizons, scales,
    /// markers). The default ignores them and calls
    /// [`create_trainer`](Self::create_trainer), refusing pooled tasks.
    fn create_trainer_with_inputs(
        spec: TaskSpec,
        inputs: TaskInputs,
        host: Host,
    ) -> Result<Self::Trainer, PluginError> {
        if inputs.pooled {
            return Err(PluginError::invalid_config(
                "this plugin does not train pooled (multi-asset) tasks; train one task per asset",
            ));
        }
        Self::create_trainer(spec, host)
    }

    /// 1.2: writes the weights of a checkpoint (written by this plugin's
    /// trainer for `config_json`) to `weights_path`, without optimizer
    /// state or training cursor. Declare
    /// [`capability::PREDICT`](crate::capability::PREDICT) when implemented.
    fn export_weights(
        config_json: &str,
        checkpoint_dir: &Path,
        weights_path: &Path,
    ) -> Result<(), PluginError> {
        let _ = (config_json, checkpoint_dir, weights_path);
        Err(train_only())
    }

    /// 1.2: bytes a predictor for this config holds for a batch of
    /// `shape.rows` rows on `device`.
    fn estimate_predictor_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let _ = (config_json, shape, device);
        Err(train_only())
    }

    /// 1.2: a predictor from the weights [`export_weights`](Self::export_weights) wrote.
    fn create_predictor(
        spec: PredictorSpec,
        host: Host,
    ) -> Result<Box<dyn Predictor>, PluginError> {
        let _ = (spec, host);
        Err(train_only())
    }

    /// 1.3: traces the model of `spec` on the windows of `example` (rows
    /// from its `predict_from` on, as `predict` would forecast them) into a
    /// TorchScript module, and writes into `out_dir` (which exists) the file
    /// `model.pt` and one file per input, `input<i>.bin` (little-endian,
    /// row-major). Returns the signature as JSON: `{"inputs": [{"name",
    /// "file", "dtype" ("float32" | "int64"), "shape"}], "columns": [..],
    /// "rows": [[dataset, row], ..]}`, one output row per window, in the
    /// target's trained units like `predict`'s. The default refuses
    /// (`UNSUPPORTED`): say why in a plugin that cannot.
    fn export_torchscript(
        spec: PredictorSpec,
        example: &TaskInputs,
        out_dir: &Path,
        host: Host,
    ) -> Result<String, PluginError> {
        let _ = (spec, example, out_dir, host);
        Err(PluginError::unsupported(
            "this plugin cannot export its models to TorchScript",
        ))
    }

    /// 1.5: the few metrics a person compares this plugin's tasks by, most
    /// telling first (e.g. `valid_sharpe`, `valid_total_pnl`, `train_loss`):
    /// tables show these before any other (`tli train status`, `train
    /// local`). Names are the ones `step`/`evaluate` report; the host keeps
    /// at most [`MAX_HEADLINE_METRICS`] well-formed ones. The default: none,
    /// and tables fall back to losses, skills and trading results.
    fn headline_metrics() -> Vec<String> {
        Vec::new()
    }
}

/// Headline metrics a host keeps of a plugin's list (the rest are ignored).
pub const MAX_HEADLINE_METRICS: usize = 6;

fn train_only() -> PluginError {
    PluginError::unsupported("this plugin trains models but cannot apply them (no predictor)")
}

/// A trained model applied to rows (1.2). Called from one host thread at a
/// time; see [`crate::predict`] for the output columns.
pub trait Predictor: Send + 'static {
    /// Outputs for every row of `batch` that has the context the model
    /// needs; no state is kept between calls.
    fn predict(&mut self, batch: &TaskInputs) -> Result<Predictions, PluginError>;
    /// Measured bytes held by the predictor's tensors.
    fn memory(&self) -> Result<MemoryBreakdown, PluginError>;
    /// The next rows of each dataset; outputs for them, numbered by rows
    /// streamed so far. Stateful models keep their state here (a recurrent
    /// state, an agent's position). The default refuses.
    fn stream(&mut self, bars: &TaskInputs) -> Result<Predictions, PluginError> {
        let _ = bars;
        Err(PluginError::unsupported(
            "this predictor does not stream; send whole windows to predict",
        ))
    }
    /// Forgets everything streamed.
    fn reset(&mut self) -> Result<(), PluginError> {
        Ok(())
    }
}

/// One training run. Called from a single host thread at a time.
pub trait Trainer: Send + 'static {
    fn step(&mut self, n: u64) -> Result<StepReport, PluginError>;
    fn evaluate(&mut self) -> Result<EvalReport, PluginError>;
    fn save_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError>;
    fn load_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError>;
    fn memory(&self) -> Result<MemoryBreakdown, PluginError>;
    fn total_steps(&self) -> u64;
}

/// The host's services as a plugin sees them.
pub struct Host {
    services: HostServices,
}

impl Host {
    pub fn new(services: HostServices) -> Self {
        Self { services }
    }
    pub fn log(&self, level: LogLevel, message: &str) {
        self.services.log(level, RStr::from(message));
    }
    pub fn error(&self, message: &str) {
        self.log(LogLevel::ERROR, message)
    }
    pub fn warn(&self, message: &str) {
        self.log(LogLevel::WARN, message)
    }
    pub fn info(&self, message: &str) {
        self.log(LogLevel::INFO, message)
    }
    pub fn debug(&self, message: &str) {
        self.log(LogLevel::DEBUG, message)
    }
    /// True once the host wants the current `step` call to return early.
    pub fn is_cancelled(&self) -> bool {
        self.services.is_cancelled()
    }
}

/// The plugin-API version this plugin declared (set once by `root_module`).
static DECLARED_API_VERSION: OnceLock<&'static str> = OnceLock::new();

/// Builds the root module for `P`. Called by [`export_plugin!`](crate::export_plugin).
#[doc(hidden)]
pub fn root_module<P: Plugin>(api_version: &'static str) -> PluginModuleRef {
    install_panic_hook();
    let _ = DECLARED_API_VERSION.set(api_version);
    PluginModule {
        manifest: manifest_shim::<P>,
        validate_config: validate_config_shim::<P>,
        estimate_memory: estimate_memory_shim::<P>,
        create_trainer: create_trainer_shim::<P>,
        capabilities: capabilities_shim::<P>,
        create_trainer_with_inputs: create_trainer_with_inputs_shim::<P>,
        export_weights: export_weights_shim::<P>,
        estimate_predictor_memory: estimate_predictor_memory_shim::<P>,
        create_predictor: create_predictor_shim::<P>,
        export_torchscript: export_torchscript_shim::<P>,
        headline_metrics: headline_metrics_shim::<P>,
    }
    .leak_into_prefix()
}

extern "C" fn manifest_shim<P: Plugin>() -> RResult<PluginManifest, PluginError> {
    guarded("manifest", || {
        let m = P::manifest();
        let api_version = DECLARED_API_VERSION
            .get()
            .copied()
            .unwrap_or(crate::PLUGIN_API_VERSION);
        Ok(PluginManifest {
            name: m.name.into(),
            version: m.version.into(),
            api_version: api_version.into(),
            family: m.family.into(),
            description: m.description.into(),
            default_config: m.default_config.into(),
            config_schema: m.config_schema.into(),
        })
    })
}

extern "C" fn validate_config_shim<P: Plugin>(
    config_json: RStr<'_>,
) -> RResult<RString, PluginError> {
    guarded("validate_config", || {
        P::validate_config(config_json.as_str()).map(RString::from)
    })
}

extern "C" fn estimate_memory_shim<P: Plugin>(
    config_json: RStr<'_>,
    shape: DatasetShape,
    device: RStr<'_>,
) -> RResult<MemoryBreakdown, PluginError> {
    guarded("estimate_memory", || {
        P::estimate_memory(config_json.as_str(), shape, device.as_str())
    })
}

extern "C" fn create_trainer_shim<P: Plugin>(
    spec: TaskSpec,
    host: HostServices,
) -> RResult<crate::abi::TrainerBox, PluginError> {
    guarded("create_trainer", || {
        spec.dataset.check_consistent()?;
        let trainer = P::create_trainer(spec, Host::new(host))?;
        Ok(box_trainer(trainer))
    })
}

extern "C" fn capabilities_shim<P: Plugin>() -> RResult<RVec<RString>, PluginError> {
    guarded("capabilities", || {
        Ok(P::capabilities().into_iter().map(RString::from).collect())
    })
}

extern "C" fn create_trainer_with_inputs_shim<P: Plugin>(
    spec: TaskSpec,
    inputs: TaskInputs,
    host: HostServices,
) -> RResult<crate::abi::TrainerBox, PluginError> {
    guarded("create_trainer_with_inputs", || {
        spec.dataset.check_consistent()?;
        for dataset in inputs.datasets.iter() {
            dataset.check_consistent()?;
        }
        if inputs.datasets.is_empty() {
            return Err(PluginError::invalid_data("the task inputs hold no dataset"));
        }
        let trainer = P::create_trainer_with_inputs(spec, inputs, Host::new(host))?;
        Ok(box_trainer(trainer))
    })
}

extern "C" fn export_weights_shim<P: Plugin>(
    config_json: RStr<'_>,
    checkpoint_dir: RStr<'_>,
    weights_path: RStr<'_>,
) -> RResult<(), PluginError> {
    guarded("export_weights", || {
        P::export_weights(
            config_json.as_str(),
            Path::new(checkpoint_dir.as_str()),
            Path::new(weights_path.as_str()),
        )
    })
}

extern "C" fn estimate_predictor_memory_shim<P: Plugin>(
    config_json: RStr<'_>,
    shape: DatasetShape,
    device: RStr<'_>,
) -> RResult<MemoryBreakdown, PluginError> {
    guarded("estimate_predictor_memory", || {
        P::estimate_predictor_memory(config_json.as_str(), shape, device.as_str())
    })
}

extern "C" fn create_predictor_shim<P: Plugin>(
    spec: PredictorSpec,
    host: HostServices,
) -> RResult<crate::abi::PredictorBox, PluginError> {
    guarded("create_predictor", || {
        for dataset in spec.schema.datasets.iter() {
            dataset.check_consistent()?;
        }
        if spec.schema.datasets.is_empty() {
            return Err(PluginError::invalid_data(
                "the predictor's schema holds no dataset",
            ));
        }
        let predictor = P::create_predictor(spec, Host::new(host))?;
        Ok(AbiPredictor_TO::from_value(
            Guarded::new(predictor, "predictor"),
            TD_Opaque,
        ))
    })
}

extern "C" fn headline_metrics_shim<P: Plugin>() -> RResult<RVec<RString>, PluginError> {
    guarded("headline_metrics", || {
        Ok(P::headline_metrics()
            .into_iter()
            .map(RString::from)
            .collect())
    })
}

extern "C" fn export_torchscript_shim<P: Plugin>(
    spec: PredictorSpec,
    example: TaskInputs,
    out_dir: RStr<'_>,
    host: HostServices,
) -> RResult<RString, PluginError> {
    guarded("export_torchscript", || {
        for dataset in spec.schema.datasets.iter().chain(example.datasets.iter()) {
            dataset.check_consistent()?;
        }
        if spec.schema.datasets.is_empty() || example.datasets.is_empty() {
            return Err(PluginError::invalid_data(
                "a TorchScript export needs the model's schema and example rows",
            ));
        }
        P::export_torchscript(spec, &example, Path::new(out_dir.as_str()), Host::new(host))
            .map(RString::from)
    })
}

fn box_trainer<T: Trainer>(trainer: T) -> crate::abi::TrainerBox {
    AbiTrainer_TO::from_value(Guarded::new(trainer, "trainer"), TD_Opaque)
}

/// Wraps a [`Trainer`] or [`Predictor`] so that a panic in any method
/// becomes a [`PluginError`] with code `PANIC`, after which it is poisoned
/// (every later call fails with `POISONED`): its state may be half-updated.
struct Guarded<T: Send + 'static> {
    inner: ManuallyDrop<T>,
    poisoned: OnceLock<String>,
    /// `trainer` or `predictor`, for messages.
    what: &'static str,
}

impl<T: Send + 'static> Guarded<T> {
    fn new(inner: T, what: &'static str) -> Self {
        Self {
            inner: ManuallyDrop::new(inner),
            poisoned: OnceLock::new(),
            what,
        }
    }

    fn check_poisoned(&self) -> Result<(), PluginError> {
        match self.poisoned.get() {
            Some(why) => Err(PluginError::new(
                ErrorCode::POISONED,
                format!(
                    "{} unusable after an earlier panic ({why}); create a new one",
                    self.what
                ),
            )),
            None => Ok(()),
        }
    }
    fn call_mut<R>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut T) -> Result<R, PluginError>,
    ) -> RResult<R, PluginError> {
        if let Err(e) = self.check_poisoned() {
            return RResult::RErr(e);
        }
        let inner = &mut *self.inner;
        let result = guarded(what, || f(inner));
        self.poison_on_panic(result)
    }
    fn call_ref<R>(
        &self,
        what: &str,
        f: impl FnOnce(&T) -> Result<R, PluginError>,
    ) -> RResult<R, PluginError> {
        if let Err(e) = self.check_poisoned() {
            return RResult::RErr(e);
        }
        let result = guarded(what, || f(&self.inner));
        self.poison_on_panic(result)
    }
    fn poison_on_panic<R>(&self, result: RResult<R, PluginError>) -> RResult<R, PluginError> {
        if let RResult::RErr(e) = &result {
            if e.code == ErrorCode::PANIC {
                let _ = self.poisoned.set(e.message.to_string());
            }
        }
        result
    }
}

impl<T: Trainer> AbiTrainer for Guarded<T> {
    fn step(&mut self, n: u64) -> RResult<StepReport, PluginError> {
        self.call_mut("step", |t| t.step(n))
    }
    fn evaluate(&mut self) -> RResult<EvalReport, PluginError> {
        self.call_mut("evaluate", |t| t.evaluate())
    }
    fn save_checkpoint(&mut self, dir: RStr<'_>) -> RResult<(), PluginError> {
        self.call_mut("save_checkpoint", |t| {
            t.save_checkpoint(Path::new(dir.as_str()))
        })
    }
    fn load_checkpoint(&mut self, dir: RStr<'_>) -> RResult<(), PluginError> {
        self.call_mut("load_checkpoint", |t| {
            t.load_checkpoint(Path::new(dir.as_str()))
        })
    }
    fn memory(&self) -> RResult<MemoryBreakdown, PluginError> {
        self.call_ref("memory", |t| t.memory())
    }
    fn total_steps(&self) -> RResult<u64, PluginError> {
        self.call_ref("total_steps", |t| Ok(t.total_steps()))
    }
}

impl AbiPredictor for Guarded<Box<dyn Predictor>> {
    fn predict(&mut self, batch: TaskInputs) -> RResult<Predictions, PluginError> {
        self.call_mut("predict", |p| {
            check_batch(&batch)?;
            let out = p.predict(&batch)?;
            out.check_against(&batch)?;
            Ok(out)
        })
    }
    fn memory(&self) -> RResult<MemoryBreakdown, PluginError> {
        self.call_ref("memory", |p| p.memory())
    }
    fn stream(&mut self, bars: TaskInputs) -> RResult<Predictions, PluginError> {
        self.call_mut("stream", |p| {
            check_batch(&bars)?;
            p.stream(&bars)
        })
    }
    fn reset(&mut self) -> RResult<(), PluginError> {
        self.call_mut("reset", |p| p.reset())
    }
}

/// A batch of rows to predict: every dataset consistent, at least one.
fn check_batch(batch: &TaskInputs) -> Result<(), PluginError> {
    if batch.datasets.is_empty() {
        return Err(PluginError::invalid_data("the batch holds no dataset"));
    }
    for dataset in batch.datasets.iter() {
        dataset.check_consistent()?;
    }
    Ok(())
}

impl<T: Send + 'static> Drop for Guarded<T> {
    fn drop(&mut self) {
        // SAFETY: `inner` is never used again after this point.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        // A panic while dropping must not unwind through the FFI drop shim.
        let _ = guarded("drop", move || {
            drop(inner);
            Ok(())
        });
    }
}
