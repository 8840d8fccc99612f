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

use crate::metrics::Stat;
use crate::minibatch::MinibatchTensors;
use crate::qnet::QNet;
use tch::{Device, Kind, Reduction, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::{flat_adamw::FlatAdamW, grad_clip::clip_grad_norm, TchResultExt};

/// What one update reports (0-dim tensors on the device, read once per call).
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
        let pairs = |ts: Vec<Tensor>| -> Vec<(Tensor, Tensor)> {
            let mut it = ts.into_iter();
            let mut out = Vec::new();
            while let (Some(w), Some(b)) = (it.next(), it.next()) {
                out.push((w, b));
            }
            out
        };
        let views = |of: &Tensor| -> Result<Vec<Tensor>, PluginError> {
            (0..shapes.len()).map(|i| flat.view_of(of, i)).collect()
        };
        let online_layers = pairs(views(flat.values())?)
            .into_iter()
            .map(|(w, b)| Layer::new(w, b))
            .collect::<Result<Vec<_>, _>>()?;
        let grad_views = pairs(views(&grad)?);
        let target_layers = pairs(
            target
                .parameters()
                .into_iter()
                .map(|t| t.detach())
                .collect(),
        )
        .into_iter()
        .map(|(w, b)| Layer::new(w, b))
        .collect::<Result<Vec<_>, _>>()?;

        let (b, device) = (batch.batch() as i64, flat.device());
        let zeros =
            |shape: &[i64], kind: Kind| Tensor::f_zeros(shape, (kind, device)).plugin_err(ctx);
        let widths: Vec<i64> = online_layers.iter().map(|l| l.bias.size()[0]).collect();
        let mut online_out = Vec::new();
        let mut online_obs_out = Vec::new();
        let mut target_out = Vec::new();
        let mut delta = Vec::new();
        let mut delta_t = Vec::new();
        for &w in &widths {
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
            let grad = unsafe { cpu_slice::<f32>(&self.grad)? };
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

    /// The gradient pass on the CPU: libtorch for the matrix products (11
    /// operations), plain Rust on the buffers' memory for the rest — ReLUs,
    /// the TD target, the loss and its gradient, bias gradients, ReLU
    /// backward — each a few hundred values, where a libtorch operation's
    /// dispatch would cost more than its arithmetic.
    fn gradient_on_cpu(&mut self, batch: &MinibatchTensors) -> Result<(Stat, Stat), PluginError> {
        let ctx = "the hand-written TD update";
        forward(&self.online, &batch.both_obs, &mut self.online_out, true)?;
        forward(&self.target, &batch.next_obs, &mut self.target_out, true)?;
        let last = self.online.len() - 1;
        let rows = batch.batch();
        let actions_n = self.online[last].bias.size()[0] as usize;
        let (loss, q_sum) = {
            // SAFETY: each slice in this function is one of this struct's or
            // the minibatch's own contiguous CPU buffers (checked by
            // `cpu_slice`), distinct from every other slice alive with it,
            // and no libtorch operation runs while it lives.
            let online_q = unsafe { cpu_slice::<f32>(&self.online_out[last])? };
            // SAFETY: as above.
            let target_q = unsafe { cpu_slice::<f32>(&self.target_out[last])? };
            // SAFETY: as above.
            let returns = unsafe { cpu_slice::<f32>(&batch.returns)? };
            // SAFETY: as above.
            let discounts = unsafe { cpu_slice::<f32>(&batch.discounts)? };
            // SAFETY: as above.
            let actions = unsafe { cpu_slice::<i64>(&batch.actions)? };
            // SAFETY: as above (the only slice of `delta[last]`).
            let d_q = unsafe { cpu_slice_mut::<f32>(&self.delta[last])? };
            let (q_obs, q_next) = online_q.split_at(rows * actions_n);
            td_loss_and_gradient(
                TdRows {
                    q_obs,
                    q_next,
                    target_q,
                    returns,
                    discounts,
                    actions,
                    actions_n,
                },
                self.double_q,
                self.huber_delta as f32,
                d_q,
            )?
        };
        for l in (0..=last).rev() {
            let input = self.layer_input(batch, l);
            let (d_weight, d_bias) = &self.grad_views[l];
            tch::no_grad(|| self.delta_t[l].f_mm_out(d_weight, input).map(drop)).plugin_err(ctx)?;
            {
                // SAFETY: as above.
                let delta = unsafe { cpu_slice::<f32>(&self.delta[l])? };
                // SAFETY: as above (a view of the flat gradient no other slice covers).
                let d_bias = unsafe { cpu_slice_mut::<f32>(d_bias)? };
                column_sums(delta, d_bias);
            }
            if l > 0 {
                let (below, here) = self.delta.split_at(l);
                tch::no_grad(|| {
                    here[0]
                        .f_mm_out(&below[l - 1], &self.online[l].weight)
                        .map(drop)
                })
                .plugin_err(ctx)?;
                // SAFETY: as above.
                let d_input = unsafe { cpu_slice_mut::<f32>(&below[l - 1])? };
                // SAFETY: as above.
                let output = unsafe { cpu_slice::<f32>(&self.online_obs_out[l - 1])? };
                // ReLU backward: the gradient passes where the output is > 0.
                // (A select written back unconditionally vectorizes; a
                // conditional store is a branch per value, mispredicted half
                // the time.)
                for (g, h) in d_input.iter_mut().zip(output) {
                    *g = if *h <= 0.0 { 0.0 } else { *g };
                }
            }
        }
        Ok((Stat::Host(loss), Stat::Host(q_sum / rows as f64)))
    }
}

/// One minibatch's rows for the TD target and loss (row-major `[rows, actions]`
/// Q-values; `q_next` are the online network's, for Double DQN's argmax).
struct TdRows<'a> {
    q_obs: &'a [f32],
    q_next: &'a [f32],
    target_q: &'a [f32],
    returns: &'a [f32],
    discounts: &'a [f32],
    actions: &'a [i64],
    actions_n: usize,
}

/// The TD target `y = r + γᵏ·Q_target(s', a*)`, the mean Huber loss of
/// `q(s, a) − y` and its gradient with respect to the Q-values (written to
/// `d_q`, zero except at the taken actions); returns the loss and the sum of
/// the taken actions' Q. The same arithmetic as libtorch's `argmax` (first
/// maximum), `gather`, `addcmul`, `huber_loss` and `huber_loss_backward`.
fn td_loss_and_gradient(
    r: TdRows<'_>,
    double_q: bool,
    delta: f32,
    d_q: &mut [f32],
) -> Result<(f64, f64), PluginError> {
    let n = r.actions_n;
    let rows = r.returns.len();
    let norm = (1.0 / rows as f64) as f32;
    let (mut loss, mut q_sum) = (0f64, 0f64);
    d_q.fill(0.0);
    for i in 0..rows {
        let row = i * n..(i + 1) * n;
        let target_row = &r.target_q[row.clone()];
        let next_value = if double_q {
            target_row[first_argmax(&r.q_next[row])]
        } else {
            target_row[first_argmax(target_row)]
        };
        let y = r.returns[i] + next_value * r.discounts[i];
        let a = usize::try_from(r.actions[i])
            .ok()
            .filter(|a| *a < n)
            .ok_or_else(|| {
                PluginError::other(format!(
                    "replay holds action {} for a network of {n} actions",
                    r.actions[i]
                ))
            })?;
        let q = r.q_obs[i * n + a];
        let x = q - y;
        let ax = x.abs();
        loss += f64::from(if ax < delta {
            0.5 * x * x
        } else {
            delta * (ax - 0.5 * delta)
        });
        q_sum += f64::from(q);
        d_q[i * n + a] = norm * x.clamp(-delta, delta);
    }
    Ok((loss / rows as f64, q_sum))
}

/// The index of the first largest value (libtorch's `argmax`; a NaN counts
/// as the largest).
fn first_argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (j, v) in row.iter().enumerate().skip(1) {
        let b = row[best];
        if !b.is_nan() && (v.is_nan() || *v > b) {
            best = j;
        }
    }
    best
}

/// `out[j] = Σ_i m[i, j]` of a row-major matrix with `out.len()` columns.
fn column_sums(m: &[f32], out: &mut [f32]) {
    out.fill(0.0);
    for row in m.chunks_exact(out.len()) {
        for (o, v) in out.iter_mut().zip(row) {
            *o += v;
        }
    }
}

/// The elements of a contiguous CPU tensor of element type `T`.
///
/// # Safety
/// Nothing may write the tensor's elements while the slice lives.
unsafe fn cpu_slice<T: CpuElement>(t: &Tensor) -> Result<&[T], PluginError> {
    check_cpu::<T>(t)?;
    // SAFETY: a contiguous CPU tensor of `numel` elements of `T` (checked).
    Ok(unsafe { std::slice::from_raw_parts(t.data_ptr() as *const T, t.numel()) })
}

/// The elements of a contiguous CPU tensor of element type `T`, writable.
///
/// # Safety
/// Nothing else may read or write the tensor's elements while the slice lives.
#[allow(clippy::mut_from_ref)]
unsafe fn cpu_slice_mut<T: CpuElement>(t: &Tensor) -> Result<&mut [T], PluginError> {
    check_cpu::<T>(t)?;
    // SAFETY: as above; exclusivity is the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut T, t.numel()) })
}

/// Element types read through [`cpu_slice`].
trait CpuElement {
    const KIND: Kind;
}
impl CpuElement for f32 {
    const KIND: Kind = Kind::Float;
}
impl CpuElement for i64 {
    const KIND: Kind = Kind::Int64;
}

fn check_cpu<T: CpuElement>(t: &Tensor) -> Result<(), PluginError> {
    if t.device() == Device::Cpu && t.kind() == T::KIND && t.is_contiguous() {
        return Ok(());
    }
    Err(PluginError::other(format!(
        "the hand-written TD update: a {:?} buffer on {:?} (contiguous: {}) where a contiguous \
         CPU {:?} one was expected",
        t.kind(),
        t.device(),
        t.is_contiguous(),
        T::KIND
    )))
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
            for v in unsafe { cpu_slice_mut::<f32>(&rest[0])? } {
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
mod tests {
    use super::*;
    use crate::{qnet, replay::Replay};
    use tli_plugin_kit::{adam::AdamConfig, rng::Rng};

    struct Case {
        online: QNet,
        target: QNet,
        optimizer: FlatAdamW,
        batch: MinibatchTensors,
    }

    /// Two networks with different weights, a replay of random transitions
    /// (some terminal, rewards large enough that some TD errors pass δ) and
    /// one minibatch drawn from it.
    fn case(hidden: &[usize], dueling: bool, seed: u64) -> Case {
        let (obs, actions, batch_size) = (5, 3, 16);
        let layout = qnet::layout(obs, hidden, actions, dueling);
        let mut rng = Rng::new(seed);
        let online = QNet::new(&layout, &mut rng.fork(1), Device::Cpu).unwrap();
        let target = QNet::new(&layout, &mut rng.fork(2), Device::Cpu).unwrap();
        let optimizer = FlatAdamW::new(AdamConfig::default(), &online.parameters()).unwrap();
        let mut replay = Replay::new(64, obs);
        let mut draw = |scale: f64| (rng.uniform() * 2.0 - 1.0) as f32 * scale as f32;
        for i in 0..40 {
            let o: Vec<f32> = (0..obs).map(|_| draw(2.0)).collect();
            let n: Vec<f32> = (0..obs).map(|_| draw(2.0)).collect();
            let discount = if i % 7 == 0 { 0.0 } else { 0.95 };
            replay.push(&o, (i % actions) as u32, draw(3.0), &n, discount);
        }
        let mut batch = MinibatchTensors::new(batch_size, obs, Device::Cpu).unwrap();
        batch.fill(&replay, &mut Rng::new(seed + 100)).unwrap();
        Case {
            online,
            target,
            optimizer,
            batch,
        }
    }

    fn values(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
    }

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-3);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * scale.max(1.0),
                "{what}[{i}]: hand-written {g}, autograd {w}"
            );
        }
    }

    fn stat(s: &Stat) -> Vec<f32> {
        match s {
            Stat::Host(v) => vec![*v as f32],
            Stat::Device(t) => values(t),
        }
    }

    /// A hand-written update on `hidden`, on the CPU path (plain Rust between
    /// the matrix products) or as libtorch operations throughout (as on a GPU).
    fn check_against_autograd(libtorch_ops: bool) {
        for (hidden, double_q, delta, seed) in [
            (vec![8, 6], true, 1.0, 1),
            (vec![8, 6], false, 1.0, 2),
            (vec![7], true, 0.3, 3),
            (vec![9, 4, 6], true, 2.0, 4),
        ] {
            let mut c = case(&hidden, false, seed);
            let mut manual = ManualTd::new(
                &c.online,
                &c.target,
                &c.optimizer,
                &c.batch,
                double_q,
                delta,
            )
            .unwrap()
            .expect("a plain network");
            if libtorch_ops {
                manual = manual.with_libtorch_ops();
            }
            let (loss, q_mean) = manual.gradient(&c.batch).unwrap();
            let (want_loss, want_q) =
                autograd_loss(&c.online, &c.target, &c.batch, double_q, delta).unwrap();
            let want_grad = c.optimizer.gradients(&want_loss).unwrap();
            let what =
                format!("hidden {hidden:?}, double {double_q}, δ {delta}, libtorch {libtorch_ops}");
            assert_close(&values(manual.flat_gradient()), &values(&want_grad), &what);
            assert_close(&stat(&loss), &values(&want_loss), "loss");
            assert_close(&stat(&q_mean), &values(&want_q.mean(Kind::Float)), "mean Q");
            // The same update through both paths moves the parameters alike.
            let before = c.optimizer.params().values().copy();
            let stats = manual
                .update(&c.batch, &mut c.optimizer, 0.01, 0.5)
                .unwrap();
            let after_manual = c.optimizer.params().values().copy();
            let mut reference = case(&hidden, false, seed);
            let want = autograd_update(
                &reference.online,
                &reference.target,
                &mut reference.optimizer,
                &reference.batch,
                double_q,
                delta,
                0.01,
                0.5,
            )
            .unwrap();
            assert_close(&stat(&stats.grad_norm), &stat(&want.grad_norm), "norm");
            assert_close(
                &values(&after_manual),
                &values(reference.optimizer.params().values()),
                "parameters after one update",
            );
            assert!(values(&(&after_manual - &before)).iter().any(|d| *d != 0.0));
        }
    }

    #[test]
    fn the_hand_written_gradient_is_autograds() {
        check_against_autograd(false);
    }

    #[test]
    fn as_libtorch_operations_it_is_autograds_too() {
        check_against_autograd(true);
    }

    #[test]
    fn argmax_takes_the_first_maximum_and_nan_as_largest() {
        assert_eq!(first_argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(first_argmax(&[5.0]), 0);
        assert_eq!(first_argmax(&[1.0, f32::NAN, 9.0]), 1);
        let t = Tensor::from_slice(&[1.0f32, 3.0, 3.0, 2.0]);
        assert_eq!(t.argmax(0, false).int64_value(&[]), 1);
    }

    #[test]
    fn the_target_network_is_read_through_its_views() {
        let c = case(&[8], false, 5);
        let mut manual = ManualTd::new(&c.online, &c.target, &c.optimizer, &c.batch, true, 1.0)
            .unwrap()
            .unwrap();
        c.target.update_from(&c.online, 1.0).unwrap();
        let (_loss, _q) = manual.gradient(&c.batch).unwrap();
        let (want_loss, _) = autograd_loss(&c.online, &c.target, &c.batch, true, 1.0).unwrap();
        let want_grad = c.optimizer.gradients(&want_loss).unwrap();
        assert_close(
            &values(manual.flat_gradient()),
            &values(&want_grad),
            "after a target copy",
        );
    }

    #[test]
    fn a_dueling_network_takes_the_autograd_path() {
        let c = case(&[8], true, 6);
        let manual =
            ManualTd::new(&c.online, &c.target, &c.optimizer, &c.batch, true, 1.0).unwrap();
        assert!(manual.is_none());
    }
}
