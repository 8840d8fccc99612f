//! Global-norm gradient clipping on a flat gradient (see
//! [`flat_params`](crate::flat_params)): one norm, one scale.
//!
//! On the CPU the coefficient is computed on the host from the norm's value
//! (reading a CPU scalar costs no synchronisation), in `f32` in the same
//! order as the device path, so both give the same bits; the gradient is
//! scaled only when clipping bites. Elsewhere it stays a 0-dim tensor (four
//! small kernels) so that nothing waits for the device.

use crate::errors::TchResultExt;
use tch::{Device, Tensor};
use tli_plugin_api::PluginError;

/// Scales `grad` in place so that its L2 norm is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_` does: coefficient
/// `max_norm / (norm + 1e-6)`, clamped to 1. `max_norm ≤ 0` (or not finite)
/// leaves the gradient alone. Returns the norm before clipping as a 0-dim
/// tensor on the gradient's device (no host synchronisation).
///
/// Kernels: the norm, then on the CPU one scale of the gradient when the
/// norm is over `max_norm`; elsewhere four on the 0-dim coefficient and one
/// scale.
pub fn clip_grad_norm(grad: &Tensor, max_norm: f64) -> Result<Tensor, PluginError> {
    let norm = tch::no_grad(|| grad.f_norm()).plugin_err("clipping gradients")?;
    if let Some(coefficient) = clip_coefficient(&norm, max_norm)? {
        coefficient.scale(grad)?;
    }
    Ok(norm)
}

/// The factor a gradient is multiplied by when it is clipped.
pub enum ClipCoefficient {
    /// Computed on the host (the norm lives on the CPU); < 1, or NaN for a NaN norm.
    Host(f32),
    /// A 0-dim tensor on the norm's device, ≤ 1.
    Device(Tensor),
}

impl ClipCoefficient {
    /// Multiplies `grad` (or a piece of it) by the coefficient, in place.
    pub fn scale(&self, grad: &Tensor) -> Result<(), PluginError> {
        tch::no_grad(|| {
            let mut g = grad.shallow_clone();
            match self {
                Self::Host(c) => g.f_mul_scalar_(f64::from(*c)).map(drop),
                Self::Device(c) => g.f_mul_(c).map(drop),
            }
        })
        .plugin_err("clipping gradients")
    }
}

/// The clipping coefficient `min(1, max_norm / (norm + 1e-6))` for a
/// gradient of L2 norm `norm` (a 0-dim `f32` tensor), or `None` when
/// `max_norm` is ≤ 0 or not finite (no clipping), or when the norm is on the
/// CPU and within `max_norm` (nothing to scale). Optimizers that hold the
/// gradient in pieces scale each piece by it.
pub fn clip_coefficient(
    norm: &Tensor,
    max_norm: f64,
) -> Result<Option<ClipCoefficient>, PluginError> {
    if !(max_norm > 0.0 && max_norm.is_finite()) {
        return Ok(None);
    }
    if norm.device() == Device::Cpu {
        let value = norm.f_double_value(&[]).plugin_err("clipping gradients")? as f32;
        return Ok(host_clip_factor(value, max_norm).map(ClipCoefficient::Host));
    }
    tch::no_grad(|| {
        norm.f_add_scalar(1e-6)?
            .f_reciprocal()?
            .f_mul_scalar(max_norm)?
            .f_clamp_max(1.0)
    })
    .map(|c| Some(ClipCoefficient::Device(c)))
    .plugin_err("clipping gradients")
}

/// The clipping factor for a gradient of L2 norm `norm` computed on the
/// host, with the device path's kernels in `f32` (add 1e-6, reciprocal,
/// multiply, clamp to 1), so both give the same bits; `None` when there is
/// nothing to scale (`max_norm` ≤ 0 or not finite, or the norm within it).
/// A NaN norm gives a NaN factor, as on the device.
pub fn host_clip_factor(norm: f32, max_norm: f64) -> Option<f32> {
    if !(max_norm > 0.0 && max_norm.is_finite()) {
        return None;
    }
    let c = (1.0f32 / (norm + 1e-6f32)) * max_norm as f32;
    (c < 1.0 || c.is_nan()).then_some(c)
}
