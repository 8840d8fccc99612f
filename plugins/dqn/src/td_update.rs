//! DQN's TD update: for a plain (not dueling) Q-network, with the gradient
//! written out by hand ([`ManualTd`]); with a dueling head, through autograd
//! ([`autograd_update`]).
//!
//! On CartPole's `[4, 128, 128, 2]` network a gradient step is about 5
//! MFLOP; through autograd it was some 80 dispatched operations plus the
//! graph's bookkeeping, so libtorch's per-operation cost, not arithmetic, set
//! DQN's speed (docs/benchmarks.md, "RL speed"). Here one step is a fixed
//! list of about 45 operations with no graph, and nearly all of them write
//! into buffers allocated once:
//!
//! ```text
//! forward   online net on [obs; next_obs] (one pass, 2·batch rows): addmm_out, relu_ per layer
//!           target net on next_obs:                                    addmm_out, relu_ per layer
//! target    y = r + γᵏ·Q_target(s', argmax_a Q_online(s', a))   (double; plain: max_a Q_target)
//! loss      q = gather(Q_online(s), a);  L = mean huber_δ(q − y)
//! backward  dL/dq = clamp(q − y, −δ, δ) / batch  (huber_loss_backward_out), scattered into dQ
//!           per layer, last first: dW = dZᵀ·X, db = Σ_rows dZ (written into the flat
//!           gradient's views), dX = dZ·W, then through the ReLU: dZ_prev = dX where X > 0
//! update    global-norm clipping and one fused AdamW step on the flat gradient (on the
//!           CPU in plain Rust: `FlatAdamW::apply_on_cpu`)
//! ```
//!
//! The parameters are views: the online network's into the optimizer's flat
//! buffer, the target network's detached aliases of its own tensors, so
//! target updates, checkpoint loads and optimizer steps (all in place) are
//! seen without copying. The unit tests check the gradient against
//! autograd's on the same minibatch.

mod cpu;

use crate::metrics::Stat;
use crate::minibatch::MinibatchTensors;
use crate::qnet::QNet;
use tch::{Device, Kind, Reduction, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::host_slice::{host_slice, host_slice_mut};
use tli_plugin_kit::{flat_adamw::FlatAdamW, grad_clip::clip_grad_norm, TchResultExt};

/// What one update reports: host values on the CPU path, else 0-dim tensors on
/// the device (read once per call).
pub struct TdStats {
    pub loss: Stat,
    pub q_mean: Stat,
    /// Gradient norm before clipping.
    pub grad_norm: Stat,
}

/// One linear layer's parameters: `weight [out, in]`, its transpose (a view)
/// and `bias [out]`.
struct Layer {
    weight: Tensor,
    weight_t: Tensor,
    bias: Tensor,
}

/// Consecutive `(weight, bias)` parameters as layers.
fn layers(params: &[Tensor]) -> Result<Vec<Layer>, PluginError> {
    params
        .chunks_exact(2)
        .map(|wb| Layer::new(wb[0].shallow_clone(), wb[1].shallow_clone()))
        .collect()
}

impl Layer {
    fn new(weight: Tensor, bias: Tensor) -> Result<Self, PluginError> {
        let weight_t = weight.f_transpose(0, 1).plugin_err("viewing a weight")?;
        Ok(Self {
            weight,
            weight_t,
            bias,
        })
    }
}

pub struct ManualTd {
    online: Vec<Layer>,
    target: Vec<Layer>,
    /// The flat gradient (the optimizer's layout) and its per-layer views
    /// `(dW [out, in], db [out])`.
    grad: Tensor,
    grad_views: Vec<(Tensor, Tensor)>,
    /// Online layer outputs over `[obs; next_obs]`, `[2·batch, width]`, and
    /// their obs halves `[batch, width]`.
    online_out: Vec<Tensor>,
    online_obs_out: Vec<Tensor>,
    /// The online Q-values of the next observations (a view).
    online_next_q: Tensor,
    target_out: Vec<Tensor>,
    /// Per layer, d loss / d (layer output), `[batch, width]`, and its transpose.
    delta: Vec<Tensor>,
    delta_t: Vec<Tensor>,
    best_next: Tensor,
    next_value: Tensor,
    td_target: Tensor,
    taken_q: Tensor,
    taken_q_grad: Tensor,
    /// A 0-dim 1.0: d loss / d loss.
    one: Tensor,
    double_q: bool,
    huber_delta: f64,
    /// Everything between the matrix products in plain Rust (the buffers
    /// live on the CPU) rather than as libtorch operations.
    on_cpu: bool,
}

impl ManualTd {
    /// `None` when the network has a dueling head (autograd serves it).
    /// `optimizer` must be the one made over `online.parameters()`.
    pub fn new(
        online: &QNet,
        target: &QNet,
        optimizer: &FlatAdamW,
        batch: &MinibatchTensors,
        double_q: bool,
        huber_delta: f64,
    ) -> Result<Option<Self>, PluginError> {
        if online.is_dueling() {
            return Ok(None);
        }
        let ctx = "preparing the hand-written TD update";
        let flat = optimizer.params();
        let shapes: Vec<Vec<i64>> = online.parameters().iter().map(|t| t.size()).collect();
        if flat.slots().len() != shapes.len()
            || flat.slots().iter().zip(&shapes).any(|(s, t)| &s.shape != t)
        {
            return Err(PluginError::other(format!(
                "{ctx}: the optimizer's parameters do not match the online network's"
            )));
        }
        let grad = flat.values().f_zeros_like().plugin_err(ctx)?;
        let views = |of: &Tensor| -> Result<Vec<Tensor>, PluginError> {
            (0..shapes.len()).map(|i| flat.view_of(of, i)).collect()
        };
        let online_layers = layers(&views(flat.values())?)?;
        let grad_views = views(&grad)?
            .chunks_exact(2)
            .map(|wb| (wb[0].shallow_clone(), wb[1].shallow_clone()))
            .collect();
        let target_params: Vec<Tensor> = target.parameters().iter().map(|t| t.detach()).collect();
        let target_layers = layers(&target_params)?;

        let (b, device) = (batch.batch() as i64, flat.device());
        let zeros =
            |shape: &[i64], kind: Kind| Tensor::f_zeros(shape, (kind, device)).plugin_err(ctx);
        let mut online_out = Vec::new();
        let mut online_obs_out = Vec::new();
        let mut target_out = Vec::new();
        let mut delta = Vec::new();
        let mut delta_t = Vec::new();
        for layer in &online_layers {
            let w = layer.bias.size()[0];
            let both = zeros(&[2 * b, w], Kind::Float)?;
            online_obs_out.push(both.f_narrow(0, 0, b).plugin_err(ctx)?);
            online_out.push(both);
            target_out.push(zeros(&[b, w], Kind::Float)?);
            let d = zeros(&[b, w], Kind::Float)?;
            delta_t.push(d.f_transpose(0, 1).plugin_err(ctx)?);
            delta.push(d);
        }
        let online_next_q = online_out
            .last()
            .ok_or_else(|| PluginError::other(format!("{ctx}: the network has no layers")))?
            .f_narrow(0, b, b)
            .plugin_err(ctx)?;
        Ok(Some(Self {
            online: online_layers,
            target: target_layers,
            grad,
            grad_views,
            online_out,
            online_obs_out,
            online_next_q,
            target_out,
            delta,
            delta_t,
            best_next: zeros(&[b, 1], Kind::Int64)?,
            next_value: zeros(&[b, 1], Kind::Float)?,
            td_target: zeros(&[b, 1], Kind::Float)?,
            taken_q: zeros(&[b, 1], Kind::Float)?,
            taken_q_grad: zeros(&[b, 1], Kind::Float)?,
            one: Tensor::f_ones([], (Kind::Float, device)).plugin_err(ctx)?,
            double_q,
            huber_delta,
            on_cpu: device == Device::Cpu,
        }))
    }

    /// One update: the gradient of the minibatch's mean Huber TD loss,
    /// clipped to a global norm of `max_grad_norm` (≤ 0: no clipping), then
    /// one optimizer step at learning rate `lr`.
    pub fn update(
        &mut self,
        batch: &MinibatchTensors,
        optimizer: &mut FlatAdamW,
        lr: f64,
        max_grad_norm: f64,
    ) -> Result<TdStats, PluginError> {
        let (loss, q_mean) = self.gradient(batch)?;
        let grad_norm = if self.on_cpu {
            // SAFETY: `grad` is this struct's own contiguous CPU f32 buffer;
            // the gradient pass has finished writing it, and nothing writes
            // it while the optimizer reads the slice.
            let grad = unsafe { host_slice::<f32>(&self.grad)? };
            Stat::Host(f64::from(optimizer.apply_on_cpu(
                grad,
                lr,
                max_grad_norm,
            )?))
        } else {
            let norm = clip_grad_norm(&self.grad, max_grad_norm)?;
            optimizer.apply(&self.grad, lr)?;
            Stat::Device(norm)
        };
        Ok(TdStats {
            loss,
            q_mean,
            grad_norm,
        })
    }

    /// Fills the flat gradient with d(mean Huber TD loss)/d(online
    /// parameters) on `batch`; returns the loss and the mean Q of the taken
    /// actions.
    pub fn gradient(&mut self, batch: &MinibatchTensors) -> Result<(Stat, Stat), PluginError> {
        let ctx = "the hand-written TD update";
        if self.on_cpu {
            return self.gradient_on_cpu(batch);
        }
        forward(&self.online, &batch.both_obs, &mut self.online_out, false)?;
        forward(&self.target, &batch.next_obs, &mut self.target_out, false)?;
        tch::no_grad(|| self.gradient_ops(batch)).plugin_err(ctx)
    }

    #[cfg(test)]
    /// The flat gradient the last [`gradient`](Self::gradient) call wrote.
    pub fn flat_gradient(&self) -> &Tensor {
        &self.grad
    }

    #[cfg(test)]
    /// Runs everything as libtorch operations, as on a GPU.
    pub fn with_libtorch_ops(mut self) -> Self {
        self.on_cpu = false;
        self
    }

    /// What online layer `l` read in the obs half of the forward pass.
    fn layer_input<'a>(&'a self, batch: &'a MinibatchTensors, l: usize) -> &'a Tensor {
        match l {
            0 => &batch.obs,
            _ => &self.online_obs_out[l - 1],
        }
    }

    /// The gradient pass after the forward passes, as libtorch operations
    /// (any device).
    fn gradient_ops(&mut self, batch: &MinibatchTensors) -> Result<(Stat, Stat), tch::TchError> {
        let target_q = self.target_out.last().expect("layers checked in new");
        if self.double_q {
            self.online_next_q
                .f_argmax_out(&self.best_next, 1, true)
                .map(drop)?;
            target_q
                .f_gather_out(&self.next_value, 1, &self.best_next, false)
                .map(drop)?;
        } else {
            target_q
                .f_max_dim_max(&self.next_value, &self.best_next, 1, true)
                .map(drop)?;
        }
        batch
            .returns
            .f_addcmul_out(&self.td_target, &self.next_value, &batch.discounts)
            .map(drop)?;
        let last = self.online.len() - 1;
        self.online_obs_out[last]
            .f_gather_out(&self.taken_q, 1, &batch.actions, false)
            .map(drop)?;
        let loss = self
            .taken_q
            .f_huber_loss(&self.td_target, Reduction::Mean, self.huber_delta)?;
        let q_mean = self.taken_q.f_mean(Kind::Float)?;
        self.taken_q
            .f_huber_loss_backward_out(
                &self.taken_q_grad,
                &self.one,
                &self.td_target,
                Reduction::Mean,
                self.huber_delta,
            )
            .map(drop)?;
        self.delta[last].f_zero_().map(drop)?;
        self.delta[last]
            .f_scatter_(1, &batch.actions, &self.taken_q_grad)
            .map(drop)?;
        for l in (0..=last).rev() {
            let input = self.layer_input(batch, l);
            let (d_weight, d_bias) = &self.grad_views[l];
            self.delta_t[l].f_mm_out(d_weight, input).map(drop)?;
            self.delta[l]
                .f_sum_intlist_out(d_bias, [0i64].as_slice(), false, Kind::Float)
                .map(drop)?;
            if l > 0 {
                let (below, here) = self.delta.split_at(l);
                here[0]
                    .f_mm_out(&below[l - 1], &self.online[l].weight)
                    .map(drop)?;
                // ReLU backward: the gradient passes where the output is > 0.
                self.online_obs_out[l - 1]
                    .f_threshold_backward_grad_input(&below[l - 1], &below[l - 1], 0.0)
                    .map(drop)?;
            }
        }
        Ok((Stat::Device(loss), Stat::Device(q_mean)))
    }
}

/// `outputs[l] = relu(outputs[l-1] · Wₗᵀ + bₗ)` (no ReLU after the last
/// layer); with `rust_relu` the ReLU runs on the CPU buffer's memory.
fn forward(
    layers: &[Layer],
    input: &Tensor,
    outputs: &mut [Tensor],
    rust_relu: bool,
) -> Result<(), PluginError> {
    let ctx = "the hand-written TD update";
    let last = layers.len() - 1;
    for (l, layer) in layers.iter().enumerate() {
        let (before, rest) = outputs.split_at_mut(l);
        let x = if l == 0 { input } else { &before[l - 1] };
        tch::no_grad(|| {
            layer
                .bias
                .f_addmm_out(&rest[0], x, &layer.weight_t)
                .map(drop)
        })
        .plugin_err(ctx)?;
        if l == last {
            break;
        }
        if rust_relu {
            // SAFETY: this struct's own contiguous CPU buffer, written above;
            // nothing else touches it while the slice lives.
            for v in unsafe { host_slice_mut::<f32>(&rest[0])? } {
                // Not `max`, which would turn a NaN into 0 (libtorch's ReLU
                // keeps it); a select, not a conditional store, so that it
                // vectorizes.
                *v = if *v < 0.0 { 0.0 } else { *v };
            }
        } else {
            tch::no_grad(|| rest[0].f_relu_().map(drop)).plugin_err(ctx)?;
        }
    }
    Ok(())
}

/// The update through autograd (any Q-network, the dueling one included):
/// the same loss, clipping and optimizer step as [`ManualTd::update`].
#[allow(clippy::too_many_arguments)]
pub fn autograd_update(
    online: &QNet,
    target: &QNet,
    optimizer: &mut FlatAdamW,
    batch: &MinibatchTensors,
    double_q: bool,
    huber_delta: f64,
    lr: f64,
    max_grad_norm: f64,
) -> Result<TdStats, PluginError> {
    let (loss, q) = autograd_loss(online, target, batch, double_q, huber_delta)?;
    let grad_norm = optimizer.backward_step(&loss, lr, max_grad_norm)?;
    let q_mean = tch::no_grad(|| q.f_mean(Kind::Float)).plugin_err("computing the loss")?;
    Ok(TdStats {
        loss: Stat::Device(loss.detach()),
        q_mean: Stat::Device(q_mean),
        grad_norm: Stat::Device(grad_norm),
    })
}

/// The mean Huber TD loss (with its graph) and the taken actions' Q-values.
fn autograd_loss(
    online: &QNet,
    target: &QNet,
    batch: &MinibatchTensors,
    double_q: bool,
    huber_delta: f64,
) -> Result<(Tensor, Tensor), PluginError> {
    let ctx = "computing the TD target";
    let td_target = tch::no_grad(|| -> Result<Tensor, PluginError> {
        let q_target = target.forward(&batch.next_obs)?;
        let next_value = if double_q {
            let best = online
                .forward(&batch.next_obs)?
                .f_argmax(1, true)
                .plugin_err(ctx)?;
            q_target.f_gather(1, &best, false).plugin_err(ctx)?
        } else {
            q_target.f_max_dim(1, true).plugin_err(ctx)?.0
        };
        // returns + discounts · next_value, all [batch, 1].
        batch
            .returns
            .f_addcmul(&next_value, &batch.discounts)
            .plugin_err(ctx)
    })?;
    let ctx = "computing the loss";
    let q = online
        .forward(&batch.obs)?
        .f_gather(1, &batch.actions, false)
        .plugin_err(ctx)?;
    let loss = q
        .f_huber_loss(&td_target, Reduction::Mean, huber_delta)
        .plugin_err(ctx)?;
    Ok((loss, q))
}

#[cfg(test)]
mod tests;
