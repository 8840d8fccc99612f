//! The two ways the TFT keeps its weights and optimizer state, behind one
//! interface for the trainer: FP32 (the kit's [`FlatAdamW`]) or INT8 (the
//! kit's [`Int8AdamW`]: int8 matrices with per-row scales, 8-bit moments,
//! no f32 master copy).
//!
//! INT8 weights hold no f32 values between steps: [`Weights::ready`] makes
//! them usable for a forward pass (training or evaluation) and
//! [`Weights::rest`] drops the f32 copies after evaluation (a training step
//! drops them itself). With `step_memory: "staged"` neither is used: the
//! forward pass runs as the model's stages and each makes only its own
//! weights usable while it runs ([`Weights::train_step`],
//! [`Weights::evaluate`]; the kit's `staged` module and `StagedStep`).

use crate::batches::WindowBatch;
use crate::config::{Precision, StepMemory, TftConfig};
use crate::model::{Tft, TftBatch, TftOutput, TftShape};
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::adam::AdamConfig;
use tli_plugin_kit::counter_rng::CounterRng;
use tli_plugin_kit::flat_adamw::FlatAdamW;
use tli_plugin_kit::forecast_loss::masked_loss;
use tli_plugin_kit::int8::{Int8AdamW, Int8AdamWState, Int8Options, Prequantized};
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::staged::Graph;
use tli_plugin_kit::TchResultExt;

pub enum Weights {
    Fp32(FlatAdamW),
    Int8(Box<Int8AdamW>),
}

/// The optimizer's part of a checkpoint's JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightsState {
    Fp32 { step: u64 },
    Int8(Int8AdamWState),
}

impl Weights {
    /// Builds the network and takes over its parameters (see the kit
    /// optimizers). INT8 quantizes each block's matrices as soon as the
    /// block exists, so the model is never whole in f32.
    pub fn build(
        shape: &TftShape,
        config: &TftConfig,
        model_rng: &mut Rng,
        rounding_seed: u64,
        device: Device,
    ) -> Result<(Tft, Self), PluginError> {
        let adam = AdamConfig {
            learning_rate: config.learning_rate,
            weight_decay: config.weight_decay,
            ..AdamConfig::default()
        };
        match config.precision {
            Precision::Fp32 => {
                let model = Tft::new(shape, model_rng, device)?;
                let (decayed, rest) = model.decay_groups();
                let d: Vec<&Tensor> = decayed.iter().map(|(_, t)| *t).collect();
                let r: Vec<&Tensor> = rest.iter().map(|(_, t)| *t).collect();
                let weights = Weights::Fp32(FlatAdamW::with_decay_groups(adam, &d, &r)?);
                Ok((model, weights))
            }
            Precision::Int8 => {
                let mut prequantized = Prequantized::new(Int8Options {
                    min_numel: config.int8_min_elements,
                    seed: rounding_seed,
                    state: config.optimizer_state,
                });
                let model = Tft::build(shape, model_rng, device, &mut |block| {
                    prequantized.take(block)
                })?;
                let (decayed, rest) = model.decay_groups();
                let optimizer = Int8AdamW::with_prequantized(adam, &decayed, &rest, prequantized)?;
                Ok((model, Weights::Int8(Box::new(optimizer))))
            }
        }
    }

    /// Makes the weights usable for a forward pass.
    pub fn ready(&mut self) -> Result<(), PluginError> {
        match self {
            Weights::Fp32(_) => Ok(()),
            Weights::Int8(opt) => opt.materialize(),
        }
    }

    /// Drops transient f32 copies (after evaluation).
    pub fn rest(&mut self) -> Result<(), PluginError> {
        match self {
            Weights::Fp32(_) => Ok(()),
            Weights::Int8(opt) => opt.release(),
        }
    }

    /// A forward pass without autograd (evaluation). Staged: each block's
    /// weights are made usable only while it runs.
    pub fn evaluate(
        &mut self,
        model: &Tft,
        batch: &TftBatch,
        step_memory: StepMemory,
    ) -> Result<TftOutput, PluginError> {
        match self {
            Weights::Int8(opt) if step_memory == StepMemory::Staged => {
                let mut step = opt.staged_step()?;
                let mut graph = Graph::staged(&mut step, None);
                let nodes = model.forward_graph(&mut graph, batch)?;
                Ok(nodes.tensors(&graph.finish()))
            }
            _ => {
                self.ready()?;
                tch::no_grad(|| model.forward(batch, None))
            }
        }
    }

    /// One training step on `batch`: forward pass, loss, then (unless
    /// `cancelled()` says otherwise once the forward pass is done) backward
    /// pass, clipping and the update. Returns the loss, `None` when
    /// cancelled (nothing updated; the dropout stream has advanced).
    pub fn train_step(
        &mut self,
        model: &Tft,
        batch: &WindowBatch,
        dropout: Option<&mut CounterRng>,
        config: &TftConfig,
        lr: f64,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<f64>, PluginError> {
        let quantiles = config.quantiles.clone();
        let read = |t: &Tensor| t.f_double_value(&[]).plugin_err("reading the loss");
        match self {
            Weights::Int8(opt) if config.step_memory == StepMemory::Staged => {
                let mut step = opt.staged_step()?;
                let mut graph = Graph::staged(&mut step, dropout);
                let out = model.forward_graph(&mut graph, &batch.inputs)?;
                let targets = graph.input(batch.targets.shallow_clone());
                let valid = graph.input(batch.valid.shallow_clone());
                let [loss] = graph.stage(&[], &[out.forecast, targets, valid], move |xs, _| {
                    Ok(vec![masked_loss(&xs[0], &xs[1], &xs[2], &quantiles)?])
                })?;
                let recording = graph.finish();
                if cancelled() {
                    return Ok(None);
                }
                let value = read(recording.value(loss))?;
                step.backward_update(&recording, loss, lr, config.max_grad_norm)?;
                Ok(Some(value))
            }
            _ => {
                self.ready()?;
                let out = model.forward(&batch.inputs, dropout)?;
                if cancelled() {
                    self.rest()?;
                    return Ok(None);
                }
                let loss = masked_loss(&out.forecast, &batch.targets, &batch.valid, &quantiles)?;
                let value = read(&loss)?;
                match self {
                    Weights::Fp32(opt) => {
                        // The norm stays on the device: reading it would wait for the step.
                        let _norm = opt.backward_step(&loss, lr, config.max_grad_norm)?;
                    }
                    Weights::Int8(opt) => {
                        opt.backward_step(&loss, lr, config.max_grad_norm)?;
                    }
                }
                Ok(Some(value))
            }
        }
    }

    /// With INT8: the fraction of parameters held as int8, and of those
    /// whose moments are kept below 8 bits (`None` in FP32).
    pub fn int8_fractions(&self) -> Option<(f64, f64)> {
        match self {
            Weights::Fp32(_) => None,
            Weights::Int8(opt) => {
                let (quantized, all) = opt.parameter_counts();
                let fraction = quantized as f64 / all.max(1) as f64;
                let low_bit = if opt.state_format().is_low_bit() {
                    fraction
                } else {
                    0.0
                };
                Some((fraction, low_bit))
            }
        }
    }

    /// Every tensor a checkpoint holds, by name.
    pub fn named_tensors(&self, model: &Tft) -> Vec<(String, Tensor)> {
        match self {
            Weights::Fp32(opt) => {
                let mut out: Vec<(String, Tensor)> = model
                    .named_parameters("")
                    .into_iter()
                    .map(|(n, t)| (n, t.shallow_clone()))
                    .collect();
                out.extend(
                    opt.named_state()
                        .into_iter()
                        .map(|(n, t)| (n, t.shallow_clone())),
                );
                out
            }
            Weights::Int8(opt) => opt.named_tensors(),
        }
    }

    pub fn state(&self) -> WeightsState {
        match self {
            Weights::Fp32(opt) => WeightsState::Fp32 { step: opt.step },
            Weights::Int8(opt) => WeightsState::Int8(opt.state()),
        }
    }

    /// Restores a checkpoint of the same precision; all checks run before
    /// anything changes.
    pub fn load(
        &mut self,
        model: &Tft,
        tensors: &[(String, Tensor)],
        state: WeightsState,
    ) -> Result<(), PluginError> {
        match (self, state) {
            (Weights::Fp32(opt), WeightsState::Fp32 { step }) => {
                opt.check_named(tensors)?;
                model.load_named("", tensors)?;
                opt.load_named(tensors, step)
            }
            (Weights::Int8(opt), WeightsState::Int8(state)) => opt.load(tensors, state),
            (_, saved) => Err(PluginError::io(format!(
                "the checkpoint was written in {} precision, this task trains in the other: \
                 resume with the checkpoint's precision or start again",
                match saved {
                    WeightsState::Fp32 { .. } => "fp32",
                    WeightsState::Int8(_) => "int8",
                }
            ))),
        }
    }

    /// (weights, optimizer state, transient bytes of a step) as held now;
    /// staged, the transient is the last step's measured peak (the planned
    /// figure before a step has run).
    pub fn bytes(&self, step_memory: StepMemory, planned_transient: u64) -> (u64, u64, u64) {
        if let (Weights::Int8(opt), StepMemory::Staged) = (self, step_memory) {
            let measured = opt.last_staged_transient_bytes();
            return (
                opt.parameter_bytes(),
                opt.state_bytes(),
                if measured > 0 {
                    measured
                } else {
                    planned_transient
                },
            );
        }
        match self {
            Weights::Fp32(opt) => (
                opt.params().bytes(),
                opt.state_bytes(),
                opt.gradient_bytes(),
            ),
            Weights::Int8(opt) => (
                opt.parameter_bytes(),
                opt.state_bytes(),
                opt.transient_bytes(),
            ),
        }
    }
}
