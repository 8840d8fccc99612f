//! Adam with decoupled weight decay (AdamW; Loshchilov & Hutter 2019) whose
//! moment estimates are ordinary tensors, so they can be checkpointed and a
//! resumed run continues bit-for-bit (tch's built-in optimizers keep their
//! state inside libtorch where it cannot be saved).

use crate::errors::TchResultExt;
use crate::mlp::{copy_checked, find};
use tch::Tensor;
use tli_plugin_api::PluginError;

#[derive(Clone, Copy, Debug)]
pub struct AdamConfig {
    pub learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamConfig {
    fn default() -> Self {
        Self {
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

pub struct Adam {
    pub config: AdamConfig,
    /// Updates applied so far (for bias correction).
    pub step: u64,
    first_moment: Vec<Tensor>,
    second_moment: Vec<Tensor>,
}

impl Adam {
    pub fn new(config: AdamConfig, params: &[&Tensor]) -> Result<Self, PluginError> {
        let zeros = |p: &&Tensor| p.f_zeros_like().plugin_err("allocating optimizer state");
        Ok(Self {
            config,
            step: 0,
            first_moment: params.iter().map(zeros).collect::<Result<_, _>>()?,
            second_moment: params.iter().map(zeros).collect::<Result<_, _>>()?,
        })
    }

    /// One update at learning rate `lr` from the gradients currently in
    /// `params`; then zeroes those gradients.
    pub fn apply(&mut self, params: &[&Tensor], lr: f64) -> Result<(), PluginError> {
        self.step += 1;
        let c = self.config;
        let bias1 = 1.0 - c.beta1.powi(self.step as i32);
        let bias2 = 1.0 - c.beta2.powi(self.step as i32);
        tch::no_grad(|| -> Result<(), PluginError> {
            for ((p, m), v) in params
                .iter()
                .zip(self.first_moment.iter_mut())
                .zip(self.second_moment.iter_mut())
            {
                let g = p.grad();
                if !g.defined() {
                    continue;
                }
                let ctx = "optimizer update";
                // m ← β1·m + (1−β1)·g ;  v ← β2·v + (1−β2)·g²
                in_place(m.f_mul_scalar_(c.beta1), ctx)?;
                in_place(
                    m.f_add_(&g.f_mul_scalar(1.0 - c.beta1).plugin_err(ctx)?),
                    ctx,
                )?;
                in_place(v.f_mul_scalar_(c.beta2), ctx)?;
                in_place(
                    v.f_addcmul_(&g, &g.f_mul_scalar(1.0 - c.beta2).plugin_err(ctx)?),
                    ctx,
                )?;
                // p ← p − lr·( m̂ / (√v̂ + ε) + λ·p )
                let denom = v
                    .f_div_scalar(bias2)
                    .and_then(|t| t.f_sqrt())
                    .and_then(|t| t.f_add_scalar(c.eps))
                    .plugin_err(ctx)?;
                let mut update = m
                    .f_div_scalar(bias1)
                    .and_then(|t| t.f_div(&denom))
                    .plugin_err(ctx)?;
                if c.weight_decay != 0.0 {
                    update = update
                        .f_add(&p.f_mul_scalar(c.weight_decay).plugin_err(ctx)?)
                        .plugin_err(ctx)?;
                }
                let mut target = p.shallow_clone();
                in_place(
                    target.f_sub_(&update.f_mul_scalar(lr).plugin_err(ctx)?),
                    ctx,
                )?;
                let mut grad = g;
                in_place(grad.f_zero_(), ctx)?;
            }
            Ok(())
        })
    }

    /// Bytes of optimizer state.
    pub fn state_bytes(&self) -> u64 {
        self.first_moment
            .iter()
            .chain(&self.second_moment)
            .map(crate::tensor_bytes)
            .sum()
    }

    /// Moment tensors with stable names (`adam.m.<i>`, `adam.v.<i>`).
    pub fn named_state(&self) -> Vec<(String, &Tensor)> {
        let m = self
            .first_moment
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("adam.m.{i}"), t));
        let v = self
            .second_moment
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("adam.v.{i}"), t));
        m.chain(v).collect()
    }

    /// Restores moments written by [`named_state`](Self::named_state); the step
    /// counter travels in the caller's JSON state.
    pub fn load_named(
        &mut self,
        tensors: &[(String, Tensor)],
        step: u64,
    ) -> Result<(), PluginError> {
        for (name, t) in self.named_state() {
            copy_checked(t, find(tensors, &name)?, &name)?;
        }
        self.step = step;
        Ok(())
    }
}

/// Discards the tensor an in-place op returns (it aliases its target).
fn in_place(result: Result<Tensor, tch::TchError>, context: &str) -> Result<(), PluginError> {
    result.map(drop).plugin_err(context)
}
