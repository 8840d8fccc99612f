//! `tli-plugin-mamba2`: the Mamba-2 forecaster plugin
//! (`libtli_plugin_mamba2.so`): a selective state-space model over windows
//! of bars that forecasts returns 1..H bars ahead (point or quantiles), per
//! asset or pooled across a job's assets.
//!
//! * [`ssd`]: the selective state-space layer (SSD), chunked (training) and
//!   as the plain recurrence (ground truth, streaming), with the stable
//!   segment sum.
//! * [`block`]: the Mamba-2 mixer block (in-projection, causal depthwise
//!   convolution, SSD with the `D` skip, gated RMSNorm, out-projection) with
//!   seeded initialisation, a chunked forward, a sequential forward and an
//!   O(1)-per-bar streaming `step`.
//! * [`stack`]: layers of pre-norm residual blocks and a final norm, with the
//!   same three paths.
//! * [`norm`]: RMSNorm, plain and gated.
//! * [`config`]: the plugin's config keys, checks and JSON Schema.
//! * [`model`]: input projection → stack → multi-horizon head.
//! * [`trainer`]: the training loop, evaluation driver and checkpoints;
//!   [`evaluation`]: the metrics of a split; [`memory`]: the memory model.
//! * [`predictor`] (plugin API 1.2): the trained model applied to new bars,
//!   whole windows (`predict`) or bar by bar with the recurrent step
//!   (`stream`).
//!
//! Parameters are plain leaf tensors initialised from the kit's seeded
//! [`Rng`](tli_plugin_kit::rng::Rng) (never libtorch's global generator),
//! listed under stable names through the kit's
//! [`Parameters`](tli_plugin_kit::nn::Parameters) trait.

pub mod block;
pub mod config;
pub mod evaluation;
pub mod memory;
pub mod model;
pub mod norm;
pub mod predictor;
pub mod ssd;
pub mod stack;
pub mod trainer;

pub use block::{Mamba2Block, Mamba2Config, State};
pub use norm::RmsNorm;
pub use stack::{Mamba2Stack, StackState};

use config::ForecasterConfig;
use model::Forecaster;
use std::path::Path;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::{
    capability, export_plugin, DatasetShape, Host, Manifest, MemoryBreakdown, Plugin, PluginError,
    Predictor, PredictorSpec, TaskInputs, TaskSpec,
};
use tli_plugin_kit::device::parse_device_name;
use tli_plugin_kit::TchResultExt;
use trainer::Mamba2Trainer;

pub struct Mamba2Plugin;

export_plugin!(Mamba2Plugin);

impl Plugin for Mamba2Plugin {
    type Trainer = Mamba2Trainer;

    fn manifest() -> Manifest {
        Manifest {
            name: "mamba2".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            family: "ssm".into(),
            description: "Mamba-2 selective state-space forecaster of multi-horizon returns \
                          (long lookbacks, linear cost)"
                .into(),
            default_config: tli_plugin_kit::config::default_json(&ForecasterConfig::default()),
            config_schema: ForecasterConfig::schema().to_string(),
        }
    }

    fn validate_config(config_json: &str) -> Result<String, PluginError> {
        let config = ForecasterConfig::parse(config_json)?;
        tli_plugin_kit::config::to_json(&config)
    }

    fn estimate_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let config = ForecasterConfig::parse(config_json)?;
        parse_device_name(device)?;
        let params = Forecaster::parameter_count_for(&config, shape.features as usize) * 4;
        Ok(MemoryBreakdown {
            parameters: params,
            gradients: params,
            optimizer_state: 2 * params,
            activations: tli_plugin_kit::task_rows::data_bytes(
                shape.rows,
                shape.features,
                config.horizons as u64,
            ) + memory::activation_bytes(&config, shape.features),
        })
    }

    fn create_trainer(spec: TaskSpec, host: Host) -> Result<Mamba2Trainer, PluginError> {
        Mamba2Trainer::new(spec, None, host)
    }

    fn capabilities() -> Vec<String> {
        vec![
            capability::POOLED.to_string(),
            capability::PREDICT.to_string(),
        ]
    }

    /// Compared by: validation loss and skill, Sharpe of trading it, loss.
    fn headline_metrics() -> Vec<String> {
        tli_plugin_kit::headline::forecaster("valid_loss")
    }

    /// Reads the dataset annex (row markers: windows never span a gap or a
    /// roll) for every task; a pooled task trains across every asset.
    fn create_trainer_with_inputs(
        spec: TaskSpec,
        inputs: TaskInputs,
        host: Host,
    ) -> Result<Mamba2Trainer, PluginError> {
        Mamba2Trainer::new(spec, Some(&inputs), host)
    }

    /// The model's weights (`input.*`, `backbone.*`, `head.*`) without the
    /// AdamW moments or any counter.
    fn export_weights(
        config_json: &str,
        checkpoint_dir: &Path,
        weights_path: &Path,
    ) -> Result<(), PluginError> {
        ForecasterConfig::parse(config_json)?;
        tli_plugin_kit::weights::export_from_checkpoint(
            checkpoint_dir,
            weights_path,
            predictor::is_weight,
        )
    }

    fn estimate_predictor_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let config = ForecasterConfig::parse(config_json)?;
        parse_device_name(device)?;
        Ok(predictor::estimate_memory(&config, shape))
    }

    fn create_predictor(
        spec: PredictorSpec,
        host: Host,
    ) -> Result<Box<dyn Predictor>, PluginError> {
        Ok(Box::new(predictor::Mamba2Predictor::new(spec, host)?))
    }

    fn export_torchscript(
        spec: PredictorSpec,
        example: &TaskInputs,
        out_dir: &std::path::Path,
        host: Host,
    ) -> Result<String, PluginError> {
        predictor::Mamba2Predictor::new(spec, host)?.export_torchscript(example, out_dir)
    }
}

/// A float32 leaf parameter of `shape` holding `values`.
pub(crate) fn leaf(values: &[f64], shape: &[i64], device: Device) -> Result<Tensor, PluginError> {
    let values: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    tli_plugin_kit::nn::leaf_from_values(&values, shape, device)
}

/// A leaf parameter of `shape` uniform in `[−bound, bound)`.
pub(crate) fn uniform_leaf(
    shape: &[i64],
    bound: f64,
    rng: &mut tli_plugin_kit::rng::Rng,
    device: Device,
) -> Result<Tensor, PluginError> {
    let n: i64 = shape.iter().product();
    let values: Vec<f64> = (0..n)
        .map(|_| (rng.uniform() * 2.0 - 1.0) * bound)
        .collect();
    leaf(&values, shape, device)
}

/// A new leaf parameter holding `t`'s values as `kind` (no graph link to `t`).
pub(crate) fn cast(t: &Tensor, kind: Kind) -> Result<Tensor, PluginError> {
    Ok(t.f_detach()
        .and_then(|t| t.f_to_dtype(kind, false, true))
        .plugin_err("converting parameters")?
        .set_requires_grad(true))
}
