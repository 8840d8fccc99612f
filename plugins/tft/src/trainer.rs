//! The TFT trainer: seeded epochs over the training windows (the kit's
//! [`EpochSampler`], whose cursor is `(epoch, position)`), the masked
//! pinball loss over the quantile levels, AdamW in FP32 or INT8
//! ([`Weights`]), warm-up then a constant or cosine learning rate,
//! global-norm clipping; evaluation on every validation and test window, and
//! on the validation windows every `valid_every` steps during training (the
//! kit's [`validation`](tli_plugin_kit::validation) contract); exact
//! checkpoints in both precisions.
//!
//! Everything random is seeded from the task seed and saved: the window
//! order, the dropout stream and (INT8) the stochastic-rounding stream, both
//! kit [`CounterRng`]s. A resumed trainer continues bit for bit.
//!
//! Cancellation is checked before each batch and again between a batch's
//! forward and backward passes; a batch cut there is undone (cursor and
//! dropout stream rewound) so training later continues exactly.

use crate::batches::TftData;
use crate::config::TftConfig;
use crate::evaluation;
use crate::memory;
use crate::model::{Tft, TftBatch};
use crate::precision::{Weights, WeightsState};
use serde::{Deserialize, Serialize};
use std::path::Path;
use tch::Device;
use tli_plugin_api::{
    EvalReport, Host, MemoryBreakdown, Metric, PluginError, StepReport, TaskInputs, TaskSpec,
    Trainer,
};
use tli_plugin_kit::checkpoint;
use tli_plugin_kit::counter_rng::{CounterRng, CounterRngState};
use tli_plugin_kit::data::Split;
use tli_plugin_kit::device::parse_device;
use tli_plugin_kit::epochs::{run_steps, DataCursor, EpochSampler};
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::schedule::learning_rate_at;
use tli_plugin_kit::validation::validation_due;

/// What `state.json` holds besides the tensors.
#[derive(Serialize, Deserialize)]
struct SavedState {
    config: TftConfig,
    steps: u64,
    weights: WeightsState,
    cursor: DataCursor,
    dropout_rng: CounterRngState,
    /// The data the checkpoint belongs to: inputs by role, training windows.
    inputs: [usize; 3],
    /// Their grouping into variables (past, future, static; empty: none).
    #[serde(default, skip_serializing_if = "no_groups")]
    groups: [Vec<usize>; 3],
    train_windows: usize,
}

fn no_groups(groups: &[Vec<usize>; 3]) -> bool {
    groups.iter().all(Vec::is_empty)
}

pub struct TftTrainer {
    config: TftConfig,
    host: Host,
    device: Device,
    max_steps: u64,
    steps: u64,
    model: Tft,
    weights: Weights,
    dropout_rng: CounterRng,
    data: TftData,
    sampler: EpochSampler,
}

impl TftTrainer {
    pub fn new(
        spec: TaskSpec,
        inputs: Option<&TaskInputs>,
        host: Host,
    ) -> Result<Self, PluginError> {
        let config = TftConfig::parse(&spec.config_json)?;
        let device = parse_device(&spec.device)?;
        let data = TftData::build(&spec.dataset, inputs, &config, device)?;
        if data.rows.train.is_empty() {
            return Err(PluginError::invalid_data(format!(
                "no training window of lookback {} (+{} bar(s) ahead) fits in the training \
                 split of {}: lower lookback or use more data",
                config.lookback,
                config.horizons,
                symbols(&data)
            )));
        }
        if config.valid_every > 0 && data.rows.valid.is_empty() {
            host.warn(&format!(
                "the validation split of {} has no complete window of lookback {} (+{} bar(s) \
                 ahead): no validation during training",
                symbols(&data),
                config.lookback,
                config.horizons
            ));
        }
        let shape = data.shape(&config);
        let (model, weights) = Weights::build(
            &shape,
            &config,
            &mut Rng::new(spec.seed).fork(1),
            Rng::new(spec.seed).fork(3).next_u64(),
            device,
        )?;
        report_int8(&host, &spec.task_id, &config, &weights);
        host.info(&format!(
            "task {}: TFT hidden {} × {} heads, {} precision ({} parameters) on {}, lookback {}, \
             {} horizon(s), inputs {} observed / {} known / {} static, {} training / {} \
             validation / {} test windows of {}",
            spec.task_id,
            config.hidden_size,
            config.attention_heads,
            match config.precision {
                crate::config::Precision::Fp32 => "fp32",
                crate::config::Precision::Int8 => "int8",
            },
            memory::parameter_count(&shape),
            spec.device,
            config.lookback,
            config.horizons,
            data.observed_names.len(),
            data.known_names.len(),
            data.static_names.len(),
            data.rows.train.len(),
            data.rows.valid.len(),
            data.rows.test.len(),
            symbols(&data),
        ));
        Ok(Self {
            max_steps: spec.max_steps.max(1),
            steps: 0,
            dropout_rng: CounterRng::new(Rng::new(spec.seed).fork(2).next_u64()),
            sampler: EpochSampler::new(spec.seed, data.rows.train.len()),
            config,
            host,
            device,
            model,
            weights,
            data,
        })
    }

    fn learning_rate(&self) -> f64 {
        let c = &self.config;
        learning_rate_at(
            c.learning_rate,
            c.lr_schedule,
            c.warmup_steps,
            self.steps,
            self.max_steps,
        )
    }

    /// One optimisation step; `None` when cancelled between the forward and
    /// the backward pass (nothing is updated, the batch is not counted, the
    /// cursor and dropout stream are rewound).
    fn train_one_batch(&mut self) -> Result<Option<f64>, PluginError> {
        if self.host.is_cancelled() {
            return Ok(None);
        }
        let cursor = self.sampler.cursor();
        let dropout_before = self.dropout_rng.state();
        let ends: Vec<_> = self
            .sampler
            .next_batch(self.config.batch_size)
            .into_iter()
            .map(|i| self.data.rows.train[i])
            .collect();
        let batch = self
            .data
            .batch(&ends, self.config.lookback, self.config.horizons)?;
        let lr = self.learning_rate();
        let dropout = (self.config.dropout > 0.0).then_some(&mut self.dropout_rng);
        let host = &self.host;
        let outcome =
            self.weights
                .train_step(&self.model, &batch, dropout, &self.config, lr, &|| {
                    host.is_cancelled()
                })?;
        let Some(value) = outcome else {
            self.sampler.restore(cursor);
            self.dropout_rng = CounterRng::from_state(dropout_before);
            return Ok(None);
        };
        self.steps += 1;
        Ok(Some(value))
    }

    /// The metrics of `split` (none when it has no window); the weights are
    /// put back to rest afterwards (INT8: no f32 copies), also on an error.
    fn split_metrics(&mut self, split: Split) -> Result<Vec<Metric>, PluginError> {
        let (model, weights, step_memory) =
            (&self.model, &mut self.weights, self.config.step_memory);
        let mut forward = |batch: &TftBatch| weights.evaluate(model, batch, step_memory);
        let pass = memory::evaluation_windows(&self.config, &self.data.shape(&self.config));
        let part = evaluation::split_metrics(&mut forward, &self.config, &self.data, split, pass);
        let rested = self.weights.rest();
        let metrics = part?;
        rested?;
        Ok(metrics)
    }
}

/// Step metrics of an INT8 task: the fraction of parameters held as int8,
/// and of those whose AdamW moments are below 8 bits.
pub const INT8_FRACTION: &str = "int8_fraction";
pub const LOW_BIT_STATE_FRACTION: &str = "low_bit_state_fraction";

/// Below this fraction of int8 parameters an INT8 task is warned that it
/// trains mostly in f32.
const FEW_INT8: f64 = 0.5;

/// Says (and warns when it is little or nothing) how much of an INT8
/// model is held as int8: with the default `int8_min_elements` a small
/// model may quantize no matrix at all and train exactly as FP32.
fn report_int8(host: &Host, task: &str, config: &TftConfig, weights: &Weights) {
    let Some((int8, low_bit)) = weights.int8_fractions() else {
        return;
    };
    let state = if low_bit > 0.0 {
        format!("moments {}", config.optimizer_state.name())
    } else {
        "8-bit moments".to_string()
    };
    let message = format!(
        "task {task}: {:.1}% of the parameters are held as int8 ({state}; matrices of at least \
         int8_min_elements = {} elements), the rest in f32",
        100.0 * int8,
        config.int8_min_elements
    );
    if int8 == 0.0 {
        host.warn(&format!(
            "{message}: no matrix is quantized, so this task trains exactly as fp32 — lower \
             int8_min_elements (e.g. to hidden_size²) or use precision \"fp32\""
        ));
    } else if int8 < FEW_INT8 {
        host.warn(&format!(
            "{message}: most of the model stays f32 — lower int8_min_elements to quantize more"
        ));
    } else {
        host.info(&message);
    }
}

fn symbols(data: &TftData) -> String {
    data.rows
        .assets
        .iter()
        .map(|a| a.symbol.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Trainer for TftTrainer {
    /// Trains `n` batches; then, when the call crossed a multiple of
    /// `valid_every` and was not cancelled, reports the validation split's
    /// metrics (the finite ones) for the model as it is now.
    fn step(&mut self, n: u64) -> Result<StepReport, PluginError> {
        let before = self.steps;
        let run = run_steps(n, || self.train_one_batch())?;
        let mut report = run.report(self.learning_rate(), self.sampler.cursor().epoch);
        if let Some((int8, low_bit)) = self.weights.int8_fractions() {
            report.metrics.push(Metric::new(INT8_FRACTION, int8));
            report
                .metrics
                .push(Metric::new(LOW_BIT_STATE_FRACTION, low_bit));
        }
        if run.done == n
            && !self.data.rows.valid.is_empty()
            && validation_due(before, self.steps, self.config.valid_every)
        {
            let valid = self.split_metrics(Split::Validation)?;
            report
                .metrics
                .extend(valid.into_iter().filter(|m| m.value.is_finite()));
        }
        Ok(report)
    }

    fn evaluate(&mut self) -> Result<EvalReport, PluginError> {
        if self.data.rows.valid.is_empty() {
            return Err(PluginError::invalid_data(format!(
                "the validation split of {} has no complete window of lookback {} \
                 (+{} bar(s) ahead): lower lookback or enlarge the validation split",
                symbols(&self.data),
                self.config.lookback,
                self.config.horizons
            )));
        }
        let mut metrics = Vec::new();
        for split in [Split::Validation, Split::Test] {
            metrics.extend(self.split_metrics(split)?);
        }
        Ok(EvalReport {
            metrics: metrics.into(),
        })
    }

    fn save_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        let state = SavedState {
            config: self.config.clone(),
            steps: self.steps,
            weights: self.weights.state(),
            cursor: self.sampler.cursor(),
            dropout_rng: self.dropout_rng.state(),
            inputs: input_counts(&self.data),
            groups: input_groups(&self.data),
            train_windows: self.data.rows.train.len(),
        };
        let tensors = self.weights.named_tensors(&self.model);
        let refs: Vec<(String, &tch::Tensor)> =
            tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
        checkpoint::save(dir, &refs, &state)
    }

    fn load_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        let (tensors, state): (_, SavedState) = checkpoint::load(dir, self.device)?;
        let mut differing = architecture_differences(&state.config, &self.config);
        if state.inputs != input_counts(&self.data) {
            differing.push(format!(
                "inputs observed/known/static (checkpoint {:?}, this task {:?})",
                state.inputs,
                input_counts(&self.data)
            ));
        }
        if state.groups != input_groups(&self.data) {
            differing.push(format!(
                "categorical inputs (checkpoint {:?}, this task {:?})",
                state.groups,
                input_groups(&self.data)
            ));
        }
        if state.train_windows != self.data.rows.train.len() {
            differing.push(format!(
                "training windows (checkpoint {}, this task {}): other data or lookback",
                state.train_windows,
                self.data.rows.train.len()
            ));
        }
        checkpoint::refuse_mismatch(dir, "model or data", &differing)?;
        self.weights.load(&self.model, &tensors, state.weights)?;
        self.steps = state.steps;
        self.sampler.restore(state.cursor);
        self.dropout_rng = CounterRng::from_state(state.dropout_rng);
        Ok(())
    }

    fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        let estimate = memory::breakdown(&self.config, &self.data.shape(&self.config));
        let (parameters, optimizer_state, transient) = self
            .weights
            .bytes(self.config.step_memory, estimate.gradients);
        Ok(MemoryBreakdown {
            parameters,
            gradients: transient,
            optimizer_state,
            activations: self.data.rows.bytes() + estimate.activations,
        })
    }

    fn total_steps(&self) -> u64 {
        self.steps
    }
}

fn input_counts(data: &TftData) -> [usize; 3] {
    [
        data.observed_names.len(),
        data.known_names.len(),
        data.static_names.len(),
    ]
}

/// The inputs' grouping into variables, as a checkpoint records it.
fn input_groups(data: &TftData) -> [Vec<usize>; 3] {
    [
        data.groups.past.clone(),
        data.groups.future.clone(),
        data.groups.statics.clone(),
    ]
}

/// The architecture keys in which a checkpoint's config differs.
fn architecture_differences(saved: &TftConfig, current: &TftConfig) -> Vec<String> {
    const ARCHITECTURE: [&str; 7] = [
        "precision",
        "hidden_size",
        "attention_heads",
        "lstm_layers",
        "horizons",
        "quantiles",
        "int8_min_elements",
    ];
    tli_plugin_kit::config::differing_keys(saved, current)
        .into_iter()
        .filter(|k| ARCHITECTURE.iter().any(|a| k.starts_with(&format!("{a} "))))
        .collect()
}
