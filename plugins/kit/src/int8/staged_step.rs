//! The staged INT8 training step: [`Int8AdamW`] as the
//! [`StageWeights`] of a [`staged`](crate::staged) forward pass, so that a
//! step holds the f32 copy and the gradient of one stage's quantized
//! weights at a time instead of the whole model's.
//!
//! ```text
//! let mut step = optimizer.staged_step();
//! let mut graph = Graph::staged(&mut step, dropout);
//! … the model's forward pass and loss as stages …
//! let recording = graph.finish();
//! let norm = step.backward_update(&recording, loss, lr, max_grad_norm)?;
//! ```
//!
//! With global-norm clipping the norm must be known before any weight
//! changes, so [`StagedStep::backward_update`] sweeps twice: the first
//! sweep only sums squared gradient norms, the second applies each
//! quantized weight's update as soon as its last stage has given its
//! gradient (then frees it). The small f32 tensors' gradients are kept for
//! the whole sweep and applied together at its end by the dense AdamW. The
//! update of every tensor draws its stochastic rounding from a position
//! fixed by the tensor's place in the layout, and the moments see the
//! same gradients, so a staged step equals the one-pass
//! [`backward_step`](Int8AdamW::backward_step) up to floating-point
//! summation order.

use super::Int8AdamW;
use crate::errors::TchResultExt;
use crate::staged::{under_prefix, Recording, StageWeights};
use crate::tensor_bytes;
use tch::{Kind, Tensor};
use tli_plugin_api::PluginError;

/// What a sweep does with a finished gradient.
#[derive(Clone, Copy)]
enum Sweep {
    /// Adds its squared norm to `sum_sq`.
    Measure,
    /// Applies the update (quantized) or keeps it for the dense update.
    Apply {
        lr: f64,
        grad_scale: f64,
        first_draw: u64,
    },
}

/// One staged step of an [`Int8AdamW`] (see the module docs). Leaf ids are
/// quantized tensors first (their layout index), then the f32 tensors.
pub struct StagedStep<'o> {
    optimizer: &'o mut Int8AdamW,
    /// Stages (of the planned recording) that use each leaf.
    uses: Vec<u32>,
    remaining: Vec<u32>,
    pending: Vec<Option<Tensor>>,
    /// How many stages currently hold each quantized weight materialized.
    entered: Vec<u32>,
    sweep: Sweep,
    sum_sq: f64,
    live_bytes: u64,
    peak_bytes: u64,
}

impl Int8AdamW {
    /// Starts a staged step (see the module docs): the f32 copies of the
    /// weights are dropped; stages make their own.
    pub fn staged_step(&mut self) -> Result<StagedStep<'_>, PluginError> {
        self.release()?;
        let leaves = self.quantized.len() + self.dense.len();
        Ok(StagedStep {
            uses: vec![0; leaves],
            remaining: vec![0; leaves],
            pending: (0..leaves).map(|_| None).collect(),
            entered: vec![0; self.quantized.len()],
            sweep: Sweep::Measure,
            sum_sq: 0.0,
            live_bytes: 0,
            peak_bytes: 0,
            optimizer: self,
        })
    }

    fn leaf_name(&self, id: usize) -> &str {
        match id.checked_sub(self.quantized.len()) {
            None => &self.quantized[id].name,
            Some(d) => &self.dense[d].0,
        }
    }

    fn leaf(&self, id: usize) -> &Tensor {
        match id.checked_sub(self.quantized.len()) {
            None => &self.quantized[id].leaf,
            Some(d) => &self.dense[d].1,
        }
    }

    fn leaves_under(&self, prefixes: &[&str]) -> Vec<usize> {
        (0..self.quantized.len() + self.dense.len())
            .filter(|&id| {
                let name = self.leaf_name(id);
                prefixes.iter().any(|p| under_prefix(name, p))
            })
            .collect()
    }
}

impl StagedStep<'_> {
    /// The most f32 bytes of weight copies and gradients this step has
    /// held at once.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes
    }

    fn grow(&mut self, bytes: u64) {
        self.live_bytes += bytes;
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
    }

    fn shrink(&mut self, bytes: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
    }

    /// Counts each leaf's stages; every parameter must belong to one.
    fn plan(&mut self, recording: &Recording<'_>) -> Result<(), PluginError> {
        self.uses.iter_mut().for_each(|u| *u = 0);
        for prefixes in recording.stage_prefixes() {
            let refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
            for id in self.optimizer.leaves_under(&refs) {
                self.uses[id] += 1;
            }
        }
        if let Some(id) = self.uses.iter().position(|&u| u == 0) {
            return Err(PluginError::other(format!(
                "staged step: parameter {:?} is used by no stage of the forward pass (name its \
                 prefix in the stage that uses it)",
                self.optimizer.leaf_name(id)
            )));
        }
        Ok(())
    }

    /// Backward sweep(s) and the update at `lr` with global-norm clipping
    /// at `max_grad_norm` (≤ 0: none); returns the gradient norm before
    /// clipping. `loss` is the recording's scalar loss node.
    pub fn backward_update(
        &mut self,
        recording: &Recording<'_>,
        loss: crate::staged::Node,
        lr: f64,
        max_grad_norm: f64,
    ) -> Result<f64, PluginError> {
        self.plan(recording)?;
        let clip = max_grad_norm > 0.0 && max_grad_norm.is_finite();
        let mut norm = None;
        if clip {
            self.run_sweep(recording, loss, Sweep::Measure)?;
            norm = Some(self.sum_sq.sqrt());
        }
        let grad_scale = match norm {
            Some(n) => (max_grad_norm / (n + 1e-6)).min(1.0),
            None => 1.0,
        };
        self.optimizer.step += 1;
        let first_draw = self.optimizer.rng.state().counter;
        self.run_sweep(
            recording,
            loss,
            Sweep::Apply {
                lr,
                grad_scale,
                first_draw,
            },
        )?;
        self.optimizer.finish_draws(first_draw);
        self.apply_dense(lr, grad_scale)?;
        self.optimizer.last_step_transient = self.peak_bytes;
        Ok(norm.unwrap_or_else(|| self.sum_sq.sqrt()))
    }

    fn run_sweep(
        &mut self,
        recording: &Recording<'_>,
        loss: crate::staged::Node,
        sweep: Sweep,
    ) -> Result<(), PluginError> {
        self.sweep = sweep;
        self.sum_sq = 0.0;
        self.remaining.clone_from(&self.uses);
        recording.backward(loss, self)?;
        if let Some(id) = self.remaining.iter().position(|&r| r != 0) {
            return Err(PluginError::other(format!(
                "staged step: parameter {:?} got no gradient from some stage",
                self.optimizer.leaf_name(id)
            )));
        }
        Ok(())
    }

    /// The dense AdamW update from the kept f32 gradients.
    fn apply_dense(&mut self, lr: f64, grad_scale: f64) -> Result<(), PluginError> {
        let ctx = "staged step: dense update";
        let q = self.optimizer.quantized.len();
        let mut flat = Vec::with_capacity(self.optimizer.dense.len());
        for (d, (_, leaf)) in self.optimizer.dense.iter().enumerate() {
            let g = match self.pending[q + d].take() {
                Some(g) => g,
                None => leaf.f_zeros_like().plugin_err(ctx)?,
            };
            flat.push(g.f_reshape([-1]).plugin_err(ctx)?);
        }
        self.shrink(self.live_bytes);
        if let Some(dense) = &mut self.optimizer.dense_optimizer {
            let flat = Tensor::f_cat(&flat, 0)
                .and_then(|g| g.f_mul_scalar(grad_scale))
                .plugin_err(ctx)?;
            dense.apply(&flat, lr)?;
        }
        Ok(())
    }

    /// A leaf's gradient is complete: measure it or apply it.
    fn finish_leaf(&mut self, id: usize) -> Result<(), PluginError> {
        let ctx = "staged step";
        let q = self.optimizer.quantized.len();
        let grad = self.pending[id].take();
        match self.sweep {
            Sweep::Measure => {
                if let Some(g) = &grad {
                    self.sum_sq += squared_norm(g)?;
                    self.shrink(tensor_bytes(g));
                }
            }
            Sweep::Apply {
                lr,
                grad_scale,
                first_draw,
            } => {
                if id >= q {
                    // Dense: kept for the update at the end of the sweep.
                    if let Some(g) = &grad {
                        self.sum_sq += squared_norm(g)?;
                    }
                    self.pending[id] = grad;
                    return Ok(());
                }
                let grad = match grad {
                    Some(g) => g,
                    None => Tensor::f_zeros(
                        self.optimizer.quantized[id].weight.shape(),
                        (Kind::Float, self.optimizer.device),
                    )
                    .plugin_err(ctx)?,
                };
                self.sum_sq += squared_norm(&grad)?;
                self.optimizer
                    .update_quantized(id, &grad, lr, grad_scale, first_draw)?;
                self.shrink(tensor_bytes(&grad));
            }
        }
        Ok(())
    }
}

/// `‖g‖²`, read on the host.
fn squared_norm(g: &Tensor) -> Result<f64, PluginError> {
    let n = g
        .f_norm()
        .and_then(|n| n.f_double_value(&[]))
        .plugin_err("staged step: gradient norm")?;
    Ok(n * n)
}

impl StageWeights for StagedStep<'_> {
    fn enter(&mut self, prefixes: &[&str]) -> Result<Vec<(usize, Tensor)>, PluginError> {
        let ids = self.optimizer.leaves_under(prefixes);
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if id < self.optimizer.quantized.len() {
                if self.entered[id] == 0 {
                    let w = self.optimizer.quantized[id].weight.dequantize()?;
                    self.grow(tensor_bytes(&w));
                    let leaf = &mut self.optimizer.quantized[id].leaf;
                    tch::no_grad(|| leaf.f_set_data(&w))
                        .plugin_err("materializing a stage's int8 weights")?;
                }
                self.entered[id] += 1;
            }
            out.push((id, self.optimizer.leaf(id).shallow_clone()));
        }
        Ok(out)
    }

    fn leave(&mut self, prefixes: &[&str]) -> Result<(), PluginError> {
        let ctx = "releasing a stage's int8 weights";
        for id in self.optimizer.leaves_under(prefixes) {
            if id >= self.optimizer.quantized.len() {
                continue;
            }
            self.entered[id] = self.entered[id].saturating_sub(1);
            if self.entered[id] == 0 {
                self.shrink(4 * self.optimizer.quantized[id].weight.numel() as u64);
                let empty =
                    Tensor::f_empty([0], (Kind::Float, self.optimizer.device)).plugin_err(ctx)?;
                let leaf = &mut self.optimizer.quantized[id].leaf;
                tch::no_grad(|| leaf.f_set_data(&empty)).plugin_err(ctx)?;
            }
        }
        Ok(())
    }

    fn gradient(&mut self, id: usize, gradient: Option<Tensor>) -> Result<(), PluginError> {
        if let Some(g) = gradient {
            self.grow(tensor_bytes(&g));
            self.pending[id] = Some(match self.pending[id].take() {
                None => g,
                Some(sum) => {
                    self.shrink(tensor_bytes(&sum));
                    sum.f_add(&g).plugin_err("staged step: adding gradients")?
                }
            });
        }
        self.remaining[id] = self.remaining[id].checked_sub(1).ok_or_else(|| {
            PluginError::other(format!(
                "staged step: parameter {:?} got more gradients than it has stages",
                self.optimizer.leaf_name(id)
            ))
        })?;
        if self.remaining[id] == 0 {
            self.finish_leaf(id)?;
        }
        Ok(())
    }
}
