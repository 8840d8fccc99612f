//! `tli-plugin-tft`: the Temporal Fusion Transformer forecaster,
//! quantile forecasts of returns 1..H bars ahead from observed-past,
//! known-future and static inputs, with FP32 or INT8 weights and optimizer
//! state (the kit's [`int8`](tli_plugin_kit::int8)).
//!
//! * [`config`]: the plugin's config keys (`precision: "fp32" | "int8"`,
//!   sizes, horizons, quantiles, optimisation), checks and JSON Schema.
//! * [`batches`]: the task's rows split by feature role (observed, known,
//!   static) and batches of windows with per-bar targets.
//! * [`memory`]: parameter shapes and bytes per precision from the shape
//!   alone (the memory estimate).
//! * [`vsn`]: per-input transforms and the variable selection network.
//! * [`model`]: the network — static covariate encoders, LSTM
//!   encoder–decoder, static enrichment, interpretable multi-head attention,
//!   gated skip connections, quantile head — returning forecasts with the
//!   selection and attention weights.
//!
//! * [`precision`]: FP32 or INT8 weights and optimizer state behind one interface.
//! * [`trainer`]: epochs, masked pinball loss, AdamW (either precision),
//!   cancellation, exact checkpoints; [`evaluation`]: q-risk, coverage and
//!   the interpretability readouts (selection weights, attention lags).
//! * [`predictor`] (plugin API 1.2): the trained network applied to new
//!   bars (INT8 weights kept as int8 codes and scales), whole batches or a
//!   rolling window per streamed dataset.
//!
//! Built from the kit's blocks ([`tli_plugin_kit::nn`]); parameters are
//! plain leaf tensors from the kit's seeded RNG under stable names.

pub mod batches;
pub mod config;
pub mod evaluation;
pub mod memory;
pub mod model;
pub mod precision;
pub mod predictor;
pub mod trainer;
pub mod vsn;

pub use model::{InputGroups, Tft, TftBatch, TftOutput, TftShape};

use config::TftConfig;
use std::path::Path;
use tli_plugin_api::{
    capability, export_plugin, DatasetShape, Host, Manifest, MemoryBreakdown, Plugin, PluginError,
    Predictor, PredictorSpec, TaskInputs, TaskSpec,
};
use tli_plugin_kit::device::parse_device_name;
use trainer::TftTrainer;

pub struct TftPlugin;

export_plugin!(TftPlugin);

/// The network shape `estimate_memory` assumes: the dataset shape gives only
/// a feature count, so half the features (rounded up) are taken as known in
/// advance (they enter both selection networks) and the rest as observed;
/// one asset, no static reals. The trainer's `memory()` reports the real shape.
pub fn assumed_shape(config: &TftConfig, features: usize) -> TftShape {
    let known = features.div_ceil(2);
    TftShape {
        hidden: config.hidden_size,
        heads: config.attention_heads,
        lstm_layers: config.lstm_layers,
        dropout: config.dropout,
        observed: features - known,
        known,
        static_reals: 0,
        assets: 1,
        horizons: config.horizons,
        outputs: config.quantiles.len(),
        groups: Default::default(),
    }
}

impl Plugin for TftPlugin {
    type Trainer = TftTrainer;

    fn manifest() -> Manifest {
        Manifest {
            name: "tft".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            family: "transformer".into(),
            description: "Temporal Fusion Transformer: quantile forecasts of multi-horizon \
                          returns from observed, known-future and static inputs; fp32 or int8 \
                          weights and optimizer state"
                .into(),
            default_config: tli_plugin_kit::config::default_json(&TftConfig::default()),
            config_schema: TftConfig::schema().to_string(),
        }
    }

    fn validate_config(config_json: &str) -> Result<String, PluginError> {
        let config = TftConfig::parse(config_json)?;
        tli_plugin_kit::config::to_json(&config)
    }

    fn estimate_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let config = TftConfig::parse(config_json)?;
        parse_device_name(device)?;
        let assumed = assumed_shape(&config, shape.features as usize);
        let bytes = memory::breakdown(&config, &assumed);
        Ok(MemoryBreakdown {
            parameters: bytes.parameters,
            gradients: bytes.gradients,
            optimizer_state: bytes.optimizer_state,
            activations: tli_plugin_kit::task_rows::data_bytes(
                shape.rows,
                shape.features,
                config.horizons as u64,
            ) + bytes.activations,
        })
    }

    fn create_trainer(spec: TaskSpec, host: Host) -> Result<TftTrainer, PluginError> {
        TftTrainer::new(spec, None, host)
    }

    fn capabilities() -> Vec<String> {
        vec![
            capability::POOLED.to_string(),
            capability::PREDICT.to_string(),
        ]
    }

    /// Compared by: validation P50 quantile risk and skill, Sharpe of trading, loss.
    fn headline_metrics() -> Vec<String> {
        tli_plugin_kit::headline::forecaster("valid_qrisk_p50")
    }

    /// Reads the dataset annex (feature roles, row markers) for every task;
    /// a pooled task trains across every asset with the asset as a static
    /// covariate.
    fn create_trainer_with_inputs(
        spec: TaskSpec,
        inputs: TaskInputs,
        host: Host,
    ) -> Result<TftTrainer, PluginError> {
        TftTrainer::new(spec, Some(&inputs), host)
    }

    /// The network's weights as the checkpoint stores them (INT8: int8
    /// codes and row scales of the large matrices, f32 for the rest),
    /// without the optimizer's moments or any counter.
    fn export_weights(
        config_json: &str,
        checkpoint_dir: &Path,
        weights_path: &Path,
    ) -> Result<(), PluginError> {
        TftConfig::parse(config_json)?;
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
        let config = TftConfig::parse(config_json)?;
        parse_device_name(device)?;
        Ok(predictor::estimate_memory(&config, shape))
    }

    fn create_predictor(
        spec: PredictorSpec,
        host: Host,
    ) -> Result<Box<dyn Predictor>, PluginError> {
        Ok(Box::new(predictor::TftPredictor::new(spec, host)?))
    }

    fn export_torchscript(
        spec: PredictorSpec,
        example: &TaskInputs,
        out_dir: &std::path::Path,
        host: Host,
    ) -> Result<String, PluginError> {
        predictor::TftPredictor::new(spec, host)?.export_torchscript(example, out_dir)
    }
}
