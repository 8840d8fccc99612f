//! The Mamba-2 trainer: epochs over the training windows in a seeded
//! shuffled order (the *data cursor* is `(epoch, position)`), AdamW with
//! weight decay on weights only, warm-up then a constant or cosine learning
//! rate, global-norm clipping; evaluation on every validation and test
//! window, and on the validation windows every `valid_every` steps during
//! training (the kit's [`validation`](tli_plugin_kit::validation) contract);
//! exact checkpoints.
//!
//! Everything random is seeded from the task seed and saved: the window
//! order (regenerated from `(seed, epoch)`), the dropout stream (a kit
//! [`CounterRng`], whose state is `(seed, counter)`), and the cursor. A
//! resumed trainer therefore continues bit for bit.
//!
//! Cancellation is checked before each batch and again between a batch's
//! forward and backward passes (the long part of a step at long lookbacks),
//! so a cancelled task stops within one forward pass.

use crate::config::ForecasterConfig;
use crate::evaluation;
use crate::memory;
use crate::model::Forecaster;
use serde::{Deserialize, Serialize};
use std::path::Path;
use tch::{Device, Tensor};
use tli_plugin_api::{
    EvalReport, Host, MemoryBreakdown, PluginError, StepReport, TaskInputs, TaskSpec, Trainer,
};
use tli_plugin_kit::counter_rng::{CounterRng, CounterRngState};
use tli_plugin_kit::data::Split;
use tli_plugin_kit::device::parse_device;
use tli_plugin_kit::epochs::{run_steps, DataCursor, EpochSampler};
use tli_plugin_kit::flat_adamw::FlatAdamW;
use tli_plugin_kit::forecast_loss::masked_loss;
use tli_plugin_kit::grad_clip::clip_grad_norm;
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::schedule::learning_rate_at;
use tli_plugin_kit::task_rows::{TargetKind, TaskData, TaskLayout, WindowEnd};
use tli_plugin_kit::validation::validation_due;
use tli_plugin_kit::windows::{select_rows, window_batch};
use tli_plugin_kit::{checkpoint, TchResultExt};

/// What `state.json` holds besides the tensors.
#[derive(Serialize, Deserialize)]
struct SavedState {
    config: ForecasterConfig,
    steps: u64,
    optimizer_steps: u64,
    cursor: DataCursor,
    dropout_rng: CounterRngState,
    /// Inputs per bar and training windows: the checkpoint belongs to this data.
    width: usize,
    train_windows: usize,
}

pub struct Mamba2Trainer {
    config: ForecasterConfig,
    host: Host,
    device: Device,
    max_steps: u64,
    steps: u64,
    model: Forecaster,
    optimizer: FlatAdamW,
    dropout_rng: CounterRng,
    data: TaskData,
    /// Epochs over `data.train` (the data cursor).
    sampler: EpochSampler,
}

impl Mamba2Trainer {
    pub fn new(
        spec: TaskSpec,
        inputs: Option<&TaskInputs>,
        host: Host,
    ) -> Result<Self, PluginError> {
        let config = ForecasterConfig::parse(&spec.config_json)?;
        let device = parse_device(&spec.device)?;
        let layout = TaskLayout {
            lookback: config.lookback,
            horizons: config.horizons,
            target_index: config.target_index,
            target_kind: TargetKind::Cumulative,
            one_hot_assets: true,
        };
        let data = TaskData::build(&spec.dataset, inputs, layout, device)?;
        if data.train.is_empty() {
            return Err(PluginError::invalid_data(format!(
                "no training window of lookback {} (+{} bar(s) ahead) fits in the training \
                 split of {}: lower lookback or use more data",
                config.lookback,
                config.horizons,
                symbols(&data)
            )));
        }
        if config.valid_every > 0 && data.valid.is_empty() {
            host.warn(&format!(
                "the validation split of {} has no complete window of lookback {} (+{} bar(s) \
                 ahead): no validation during training",
                symbols(&data),
                config.lookback,
                config.horizons
            ));
        }
        let mut init_rng = Rng::new(spec.seed).fork(1);
        let model = Forecaster::new(&config, data.width, &mut init_rng, device)?;
        let optimizer = model.optimizer(&config)?;
        host.info(&format!(
            "task {}: Mamba-2 {} layers × d_model {} ({} parameters) on {}, lookback {}, \
             {} horizon(s), {} training / {} validation / {} test windows of {}",
            spec.task_id,
            config.layers,
            config.d_model,
            model.parameter_count(),
            spec.device,
            config.lookback,
            config.horizons,
            data.train.len(),
            data.valid.len(),
            data.test.len(),
            symbols(&data),
        ));
        Ok(Self {
            max_steps: spec.max_steps.max(1),
            steps: 0,
            dropout_rng: CounterRng::new(Rng::new(spec.seed).fork(2).next_u64()),
            sampler: EpochSampler::new(spec.seed, data.train.len()),
            config,
            host,
            device,
            model,
            optimizer,
            data,
        })
    }

    /// The next batch's windows, advancing the data cursor.
    fn next_batch(&mut self) -> Vec<WindowEnd> {
        self.sampler
            .next_batch(self.config.batch_size)
            .into_iter()
            .map(|i| self.data.train[i])
            .collect()
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
    /// the backward pass (nothing is updated then, the batch is not counted
    /// and the cursor is rewound).
    fn train_one_batch(&mut self) -> Result<Option<f64>, PluginError> {
        if self.host.is_cancelled() {
            return Ok(None);
        }
        let cursor = self.sampler.cursor();
        let dropout_before = self.dropout_rng.state();
        let batch = self.next_batch();
        let k = self.config.loss_positions;
        let ends: Vec<usize> = batch.iter().map(|w| w.row as usize).collect();
        let x = window_batch(&self.data.features, self.config.lookback, &ends)?;
        let target_rows: Vec<usize> = ends.iter().flat_map(|&e| e + 1 - k..=e).collect();
        let shape = [batch.len() as i64, k as i64, self.config.horizons as i64];
        let y = select_rows(&self.data.targets, &target_rows)?
            .f_reshape(shape)
            .plugin_err("shaping targets")?;
        let valid = select_rows(&self.data.target_valid, &target_rows)?
            .f_reshape(shape)
            .plugin_err("shaping targets")?;
        let dropout = (self.config.dropout > 0.0).then_some(&mut self.dropout_rng);
        let forecast = self.model.forward(&x, k, dropout)?;
        if self.host.is_cancelled() {
            // Undo the batch: the next call draws the same windows and masks.
            self.sampler.restore(cursor);
            self.dropout_rng = CounterRng::from_state(dropout_before);
            return Ok(None);
        }
        let loss = masked_loss(&forecast, &y, &valid, &self.config.quantiles)?;
        let grad = self.optimizer.gradients(&loss)?;
        let _norm = clip_grad_norm(&grad, self.config.max_grad_norm)?;
        let lr = self.learning_rate();
        self.optimizer.apply(&grad, lr)?;
        self.steps += 1;
        loss.f_double_value(&[])
            .map(Some)
            .plugin_err("reading the loss")
    }

    fn named_tensors(&self) -> Vec<(String, &Tensor)> {
        let mut all = self.model.named_parameters("");
        all.extend(self.optimizer.named_state());
        all
    }
}

fn symbols(data: &TaskData) -> String {
    data.assets
        .iter()
        .map(|a| a.symbol.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Trainer for Mamba2Trainer {
    /// Trains `n` batches; then, when the call crossed a multiple of
    /// `valid_every` and was not cancelled, reports the validation split's
    /// metrics (the finite ones) for the model as it is now.
    fn step(&mut self, n: u64) -> Result<StepReport, PluginError> {
        let before = self.steps;
        let run = run_steps(n, || self.train_one_batch())?;
        let mut report = run.report(self.learning_rate(), self.sampler.cursor().epoch);
        if run.done == n
            && !self.data.valid.is_empty()
            && validation_due(before, self.steps, self.config.valid_every)
        {
            let valid = evaluation::split_metrics(
                &self.model,
                &self.config,
                &self.data,
                Split::Validation,
            )?;
            report
                .metrics
                .extend(valid.into_iter().filter(|m| m.value.is_finite()));
        }
        Ok(report)
    }

    fn evaluate(&mut self) -> Result<EvalReport, PluginError> {
        if self.data.valid.is_empty() {
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
            metrics.extend(evaluation::split_metrics(
                &self.model,
                &self.config,
                &self.data,
                split,
            )?);
        }
        Ok(EvalReport {
            metrics: metrics.into(),
        })
    }

    fn save_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        let state = SavedState {
            config: self.config.clone(),
            steps: self.steps,
            optimizer_steps: self.optimizer.step,
            cursor: self.sampler.cursor(),
            dropout_rng: self.dropout_rng.state(),
            width: self.data.width,
            train_windows: self.data.train.len(),
        };
        checkpoint::save(dir, &self.named_tensors(), &state)
    }

    fn load_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        let (tensors, state): (_, SavedState) = checkpoint::load(dir, self.device)?;
        let mut differing = architecture_differences(&state.config, &self.config);
        if state.width != self.data.width {
            differing.push(format!(
                "inputs per bar (checkpoint {}, this task {})",
                state.width, self.data.width
            ));
        }
        if state.train_windows != self.data.train.len() {
            differing.push(format!(
                "training windows (checkpoint {}, this task {}): other data or lookback",
                state.train_windows,
                self.data.train.len()
            ));
        }
        checkpoint::refuse_mismatch(dir, "model or data", &differing)?;
        self.optimizer.check_named(&tensors)?;
        self.model.load_named("", &tensors)?;
        self.optimizer.load_named(&tensors, state.optimizer_steps)?;
        self.steps = state.steps;
        self.sampler.restore(state.cursor);
        self.dropout_rng = CounterRng::from_state(state.dropout_rng);
        Ok(())
    }

    fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        Ok(MemoryBreakdown {
            // Every parameter lives in the optimizer's flat buffer.
            parameters: self.optimizer.params().bytes(),
            gradients: self.optimizer.gradient_bytes(),
            optimizer_state: self.optimizer.state_bytes(),
            activations: self.data.bytes()
                + memory::activation_bytes(&self.config, self.data.width as u64),
        })
    }

    fn total_steps(&self) -> u64 {
        self.steps
    }
}

/// The architecture keys in which a checkpoint's config differs.
fn architecture_differences(saved: &ForecasterConfig, current: &ForecasterConfig) -> Vec<String> {
    const ARCHITECTURE: [&str; 9] = [
        "d_model",
        "layers",
        "d_state",
        "headdim",
        "expand",
        "d_conv",
        "ngroups",
        "horizons",
        "quantiles",
    ];
    tli_plugin_kit::config::differing_keys(saved, current)
        .into_iter()
        .filter(|k| ARCHITECTURE.iter().any(|a| k.starts_with(&format!("{a} "))))
        .collect()
}
