//! [`ManualTd`]'s gradient pass on the CPU: libtorch runs only the matrix
//! products; the ReLUs, the TD target, the Huber loss and its gradient, bias
//! gradients and ReLU backward are plain Rust on the buffers' memory.

use super::{forward, ManualTd};
use crate::metrics::Stat;
use crate::minibatch::MinibatchTensors;
use tli_plugin_api::PluginError;
use tli_plugin_kit::host_slice::{host_slice, host_slice_mut};
use tli_plugin_kit::TchResultExt;

impl ManualTd {
    /// The gradient pass on the CPU: libtorch for the matrix products (11
    /// operations), plain Rust on the buffers' memory for the rest — ReLUs,
    /// the TD target, the loss and its gradient, bias gradients, ReLU
    /// backward — each a few hundred values, where a libtorch operation's
    /// dispatch would cost more than its arithmetic.
    pub(super) fn gradient_on_cpu(
        &mut self,
        batch: &MinibatchTensors,
    ) -> Result<(Stat, Stat), PluginError> {
        let ctx = "the hand-written TD update";
        forward(&self.online, &batch.both_obs, &mut self.online_out, true)?;
        forward(&self.target, &batch.next_obs, &mut self.target_out, true)?;
        let last = self.online.len() - 1;
        let rows = batch.batch();
        let actions_n = self.online[last].bias.size()[0] as usize;
        let (loss, q_sum) = {
            // SAFETY: each slice in this function is one of this struct's or
            // the minibatch's own contiguous CPU buffers (checked by
            // `host_slice`), distinct from every other slice alive with it,
            // and no libtorch operation runs while it lives.
            let online_q = unsafe { host_slice::<f32>(&self.online_out[last])? };
            // SAFETY: as above.
            let target_q = unsafe { host_slice::<f32>(&self.target_out[last])? };
            // SAFETY: as above.
            let returns = unsafe { host_slice::<f32>(&batch.returns)? };
            // SAFETY: as above.
            let discounts = unsafe { host_slice::<f32>(&batch.discounts)? };
            // SAFETY: as above.
            let actions = unsafe { host_slice::<i64>(&batch.actions)? };
            // SAFETY: as above (the only slice of `delta[last]`).
            let d_q = unsafe { host_slice_mut::<f32>(&self.delta[last])? };
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
                let delta = unsafe { host_slice::<f32>(&self.delta[l])? };
                // SAFETY: as above (a view of the flat gradient no other slice covers).
                let d_bias = unsafe { host_slice_mut::<f32>(d_bias)? };
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
                let d_input = unsafe { host_slice_mut::<f32>(&below[l - 1])? };
                // SAFETY: as above.
                let output = unsafe { host_slice::<f32>(&self.online_obs_out[l - 1])? };
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
pub(super) fn first_argmax(row: &[f32]) -> usize {
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
