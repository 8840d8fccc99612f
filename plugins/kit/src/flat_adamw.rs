//! AdamW (Loshchilov & Hutter 2019) over flat parameters: the parameters are
//! views into one buffer ([`FlatParams`]), the gradient and both moments are
//! flat tensors in the same layout, so one update is a fixed handful of
//! kernels however many tensors the model has (the per-tensor
//! [`Adam`](crate::adam::Adam) runs 14–16 per tensor).
//!
//! One update on the flat tensors `p, g, m, v` (`b1 = 1 − β1ᵗ`,
//! `b2 = 1 − β2ᵗ`, learning rate `lr`):
//!
//! ```text
//! m.lerp_(g, 1 − β1)                    m ← β1·m + (1 − β1)·g
//! g2 = g²;  v.lerp_(g2, 1 − β2)         v ← β2·v + (1 − β2)·g²
//! d = √v;  d.mul_(−b1/(lr·√b2));  d.sub_(ε·b1/lr)
//!                                       d = −(√v̂ + ε)·b1/lr   (v̂ = v/b2)
//! λ = 0:  p.addcdiv_(m, d)              p ← p − lr·m̂/(√v̂ + ε)  (m̂ = m/b1)
//! λ ≠ 0:  u = p·(−lr·λ);  u.addcdiv_(m, d);  p.add_(u)
//!                                       p ← p − lr·(m̂/(√v̂ + ε) + λ·p)
//! ```
//!
//! seven kernels, nine with weight decay (decoupled: the decay term is added
//! to the step, not to the gradient; `p` is rounded once per update, as in the
//! per-tensor reference, where `p.mul_(1 − lr·λ)` first would round it twice
//! and drift from it by up to ~1e-6 in 100 steps); bias corrections and scalars are
//! computed on the host from the step counter, so nothing waits for the
//! device. The update runs in pieces of [`PIECE`] elements, so its
//! temporaries (`g²`, `d`, `u`) are a piece, not a model, in size;
//! [`FlatAdamW::backward_step`] also takes the backward pass's gradients
//! per parameter (no flat copy), clips by their global norm (one norm per
//! piece) and frees each once applied.
//!
//! Weight decay can spare some parameters (biases, norms, a state-space
//! model's `A_log`, `dt_bias` and `D`): [`FlatAdamW::with_decay_groups`]
//! lays the decayed parameters out first, and the decay term is applied to
//! that prefix of the flat buffer only (no mask tensor, two more kernels).
//!
//! On the CPU, [`FlatAdamW::apply_on_cpu`] (`flat_adamw/cpu.rs`) does the
//! clipping and the update in two plain-Rust passes instead of a dozen
//! kernels (small models, where each kernel's dispatch is most of its cost).
//!
//! Checkpoint state: the tensors `adamw.m` and `adamw.v` (1-D, one element
//! per scalar parameter, in the layout's order) from
//! [`named_state`](FlatAdamW::named_state); the step counter travels in the
//! caller's JSON state. A checkpoint of the per-tensor optimizer
//! (`adam.m.<i>`, `adam.v.<i>`) is refused with an error that says so.

mod cpu;

use crate::adam::AdamConfig;
use crate::errors::TchResultExt;
use crate::flat_params::FlatParams;
use crate::grad_clip::clip_coefficient;
use crate::mlp::{copy_checked, find};
use tch::Tensor;
use tli_plugin_api::PluginError;

/// Checkpoint names of the moments.
pub const FIRST_MOMENT: &str = "adamw.m";
pub const SECOND_MOMENT: &str = "adamw.v";

pub struct FlatAdamW {
    pub config: AdamConfig,
    /// Updates applied so far (for bias correction).
    pub step: u64,
    params: FlatParams,
    first_moment: Tensor,
    second_moment: Tensor,
    /// Scalars at the front of the layout that weight decay applies to (all of them for
    /// [`new`](Self::new)).
    decayed_numel: i64,
}

impl FlatAdamW {
    /// Adopts `params` into a flat buffer (see [`FlatParams::adopt`]: their
    /// values are unchanged, their data becomes views) and zeroes the moments.
    pub fn new(config: AdamConfig, params: &[&Tensor]) -> Result<Self, PluginError> {
        Self::with_decay_groups(config, params, &[])
    }

    /// As [`new`](Self::new), but `config.weight_decay` applies to `decayed`
    /// only; `not_decayed` follow them in the flat layout (and in the
    /// moments' checkpoint order).
    pub fn with_decay_groups(
        config: AdamConfig,
        decayed: &[&Tensor],
        not_decayed: &[&Tensor],
    ) -> Result<Self, PluginError> {
        let all: Vec<&Tensor> = decayed.iter().chain(not_decayed).copied().collect();
        let params = FlatParams::adopt(&all)?;
        let decayed_numel = decayed.iter().map(|t| t.numel() as i64).sum();
        let zeros = || {
            params
                .values()
                .f_zeros_like()
                .plugin_err("allocating optimizer state")
        };
        Ok(Self {
            config,
            step: 0,
            first_moment: zeros()?,
            second_moment: zeros()?,
            params,
            decayed_numel,
        })
    }

    pub fn params(&self) -> &FlatParams {
        &self.params
    }

    /// The flat gradient of `loss` (see [`FlatParams::gradients`]).
    pub fn gradients(&self, loss: &Tensor) -> Result<Tensor, PluginError> {
        self.params.gradients(loss)
    }

    /// Backward pass, global-norm clipping at `max_grad_norm` (≤ 0: none) and
    /// one update at learning rate `lr`. Returns the gradient norm before
    /// clipping, a 0-dim tensor on the device.
    ///
    /// Memory: the backward pass's per-parameter gradients and pieces of at
    /// most [`PIECE`] elements of temporaries — no flat copy of the gradient
    /// (small parameters' gradients are concatenated a piece at a time), and
    /// each gradient is freed once its last piece is applied.
    pub fn backward_step(
        &mut self,
        loss: &Tensor,
        lr: f64,
        max_grad_norm: f64,
    ) -> Result<Tensor, PluginError> {
        let grads = self.params.tensor_gradients(loss)?;
        let pieces = pieces_of(grads).plugin_err("splitting the gradient")?;
        let norm = tch::no_grad(|| -> Result<Tensor, tch::TchError> {
            let norms = pieces
                .iter()
                .map(|(_, g)| g.f_norm())
                .collect::<Result<Vec<_>, _>>()?;
            Tensor::f_stack(&norms, 0)?.f_norm()
        })
        .plugin_err("the gradient norm")?;
        let coefficient = clip_coefficient(&norm, max_grad_norm)?;
        let scalars = self.next_step(lr);
        for (offset, grad) in pieces {
            if let Some(c) = &coefficient {
                c.scale(&grad)?;
            }
            self.apply_range(offset, &grad, &scalars)?;
        }
        Ok(norm)
    }

    /// One update at learning rate `lr` from `grad`, a flat gradient in this
    /// optimizer's layout (it is read, not modified). A zero learning rate
    /// advances the moments and the step counter but leaves the parameters.
    /// Runs in pieces of [`PIECE`] elements (temporaries of that size).
    pub fn apply(&mut self, grad: &Tensor, lr: f64) -> Result<(), PluginError> {
        let total = self.params.numel();
        if grad.size() != self.params.values().size() {
            return Err(PluginError::other(format!(
                "optimizer update: gradient of shape {:?}, the parameters have {total}",
                grad.size(),
            )));
        }
        let scalars = self.next_step(lr);
        for offset in (0..total).step_by(PIECE as usize) {
            let piece = whole_or_narrow(grad, offset, PIECE.min(total - offset))
                .plugin_err("optimizer update")?;
            self.apply_range(offset, &piece, &scalars)?;
        }
        Ok(())
    }

    /// Advances the step counter; the scalars of its update.
    fn next_step(&mut self, lr: f64) -> StepScalars {
        self.step += 1;
        let c = self.config;
        StepScalars {
            lr,
            bias1: 1.0 - c.beta1.powi(self.step as i32),
            bias2: 1.0 - c.beta2.powi(self.step as i32),
        }
    }

    /// The update of elements `[offset, offset + grad.numel())`, split where
    /// the decayed prefix ends.
    fn apply_range(
        &mut self,
        offset: i64,
        grad: &Tensor,
        s: &StepScalars,
    ) -> Result<(), PluginError> {
        let len = grad.numel() as i64;
        let n = self.decayed_numel;
        let decay = self.config.weight_decay != 0.0;
        let split = (n - offset).clamp(0, len);
        let ctx = "optimizer update";
        if decay && split > 0 && split < len {
            let head = grad.f_narrow(0, 0, split).plugin_err(ctx)?;
            let tail = grad.f_narrow(0, split, len - split).plugin_err(ctx)?;
            self.apply_piece(offset, &head, true, s)?;
            return self.apply_piece(offset + split, &tail, false, s);
        }
        self.apply_piece(offset, grad, decay && split > 0, s)
    }

    /// The seven (nine with `decayed`) kernels of one update on one piece.
    fn apply_piece(
        &mut self,
        offset: i64,
        grad: &Tensor,
        decayed: bool,
        s: &StepScalars,
    ) -> Result<(), PluginError> {
        let c = self.config;
        let len = grad.numel() as i64;
        tch::no_grad(|| -> Result<(), tch::TchError> {
            let piece = |t: &Tensor| whole_or_narrow(t, offset, len);
            let (mut m, mut v) = (piece(&self.first_moment)?, piece(&self.second_moment)?);
            // In-place ops return their target again; `drop` discards that alias.
            m.f_lerp_(grad, 1.0 - c.beta1).map(drop)?;
            v.f_lerp_(&grad.f_square()?, 1.0 - c.beta2).map(drop)?;
            if s.lr == 0.0 {
                return Ok(());
            }
            // √v of a v clamped to the smallest normal f32: MKL's vector
            // sqrt takes a slow path for zeros and subnormals, which v holds
            // wherever a gradient stays zero (a dead ReLU's weights), up to
            // 5× the time of the whole piece. The clamped value's root
            // (1.1e-19) vanishes against ε in the sum below.
            let mut denom = v.f_clamp_min(f32::MIN_POSITIVE as f64)?;
            denom.f_sqrt_().map(drop)?;
            denom
                .f_mul_scalar_(-s.bias1 / (s.lr * s.bias2.sqrt()))
                .map(drop)?;
            denom.f_sub_scalar_(c.eps * s.bias1 / s.lr).map(drop)?;
            let mut p = piece(self.params.values())?;
            if !decayed {
                return p.f_addcdiv_(&m, &denom).map(drop);
            }
            // The decay joins the Adam step before it touches p, so p is
            // rounded once per update (as in the per-tensor reference).
            let mut step = p.f_mul_scalar(-s.lr * c.weight_decay)?;
            step.f_addcdiv_(&m, &denom).map(drop)?;
            p.f_add_(&step).map(drop)
        })
        .plugin_err("optimizer update")
    }

    /// Bytes of optimizer state (both moments).
    pub fn state_bytes(&self) -> u64 {
        crate::tensor_bytes(&self.first_moment) + crate::tensor_bytes(&self.second_moment)
    }

    /// Bytes of one flat gradient (what a step holds while it runs).
    pub fn gradient_bytes(&self) -> u64 {
        self.params.bytes()
    }

    /// The moments under their checkpoint names ([`FIRST_MOMENT`],
    /// [`SECOND_MOMENT`]).
    pub fn named_state(&self) -> Vec<(String, &Tensor)> {
        vec![
            (FIRST_MOMENT.to_string(), &self.first_moment),
            (SECOND_MOMENT.to_string(), &self.second_moment),
        ]
    }

    /// Checks that `tensors` hold this optimizer's state, changing nothing:
    /// a checkpoint written by the per-tensor optimizer, one without the
    /// moments, or one for a model of another size is refused. Plugins call it
    /// before restoring anything, so a refused checkpoint leaves them as they were.
    pub fn check_named(&self, tensors: &[(String, Tensor)]) -> Result<(), PluginError> {
        let has = |name: &str| tensors.iter().any(|(n, _)| n == name);
        if !has(FIRST_MOMENT) && tensors.iter().any(|(n, _)| n.starts_with("adam.m.")) {
            return Err(PluginError::io(
                "the checkpoint holds per-tensor Adam state (adam.m.<i>, adam.v.<i>), written \
                 before the optimizer became the flat AdamW (adamw.m, adamw.v); this version \
                 cannot resume it: start the task again from step 0",
            ));
        }
        for (name, own) in self.named_state() {
            let saved = find(tensors, &name)?;
            if saved.size() != own.size() {
                return Err(PluginError::io(format!(
                    "checkpoint tensor {name:?} has shape {:?}, this model's optimizer expects \
                     {:?} (different config?)",
                    saved.size(),
                    own.size()
                )));
            }
        }
        Ok(())
    }

    /// Restores moments written by [`named_state`](Self::named_state) and the
    /// step counter (from the caller's JSON state), after
    /// [`check_named`](Self::check_named).
    pub fn load_named(
        &mut self,
        tensors: &[(String, Tensor)],
        step: u64,
    ) -> Result<(), PluginError> {
        self.check_named(tensors)?;
        copy_checked(
            &self.first_moment,
            find(tensors, FIRST_MOMENT)?,
            FIRST_MOMENT,
        )?;
        copy_checked(
            &self.second_moment,
            find(tensors, SECOND_MOMENT)?,
            SECOND_MOMENT,
        )?;
        self.step = step;
        Ok(())
    }
}

/// Elements per piece of an update: its temporaries are this size (4 MiB of
/// f32), not the model's, and a piece stays in cache between kernels.
pub const PIECE: i64 = 1 << 20;

/// `t[offset..offset + len]` of a 1-D tensor, without a `narrow` (one more
/// dispatched operation) when that is all of `t`.
fn whole_or_narrow(t: &Tensor, offset: i64, len: i64) -> Result<Tensor, tch::TchError> {
    match offset == 0 && t.size() == [len] {
        true => Ok(t.shallow_clone()),
        false => t.f_narrow(0, offset, len),
    }
}

/// The scalars of one update.
struct StepScalars {
    lr: f64,
    /// `1 − β1ᵗ`.
    bias1: f64,
    /// `1 − β2ᵗ`.
    bias2: f64,
}

/// Per-parameter 1-D gradients (layout order) as `(offset, piece)`: runs of
/// small gradients concatenated up to [`PIECE`] elements, large ones as
/// views of at most [`PIECE`]. Together they cover the layout in order.
fn pieces_of(grads: Vec<Tensor>) -> Result<Vec<(i64, Tensor)>, tch::TchError> {
    let mut pieces = Vec::new();
    let mut pending: Vec<Tensor> = Vec::new();
    let (mut offset, mut pending_len) = (0i64, 0i64);
    let flush = |pending: &mut Vec<Tensor>, pieces: &mut Vec<(i64, Tensor)>, start: i64| {
        let piece = match pending.len() {
            0 => return Ok(()),
            1 => pending.remove(0),
            _ => Tensor::f_cat(pending, 0)?,
        };
        pending.clear();
        pieces.push((start, piece));
        Ok::<(), tch::TchError>(())
    };
    for g in grads {
        let len = g.numel() as i64;
        if len >= PIECE {
            flush(&mut pending, &mut pieces, offset - pending_len)?;
            pending_len = 0;
            for start in (0..len).step_by(PIECE as usize) {
                pieces.push((
                    offset + start,
                    g.f_narrow(0, start, PIECE.min(len - start))?,
                ));
            }
        } else {
            if pending_len + len > PIECE {
                flush(&mut pending, &mut pieces, offset - pending_len)?;
                pending_len = 0;
            }
            pending.push(g);
            pending_len += len;
        }
        offset += len;
    }
    flush(&mut pending, &mut pieces, offset - pending_len)?;
    Ok(pieces)
}
