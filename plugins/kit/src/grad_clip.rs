//! Global-norm gradient clipping on a flat gradient (see
//! [`flat_params`](crate::flat_params)): one norm, one scale.

use crate::errors::TchResultExt;
use tch::Tensor;
use tli_plugin_api::PluginError;

/// Scales `grad` in place so that its L2 norm is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_` does: coefficient
/// `max_norm / (norm + 1e-6)`, clamped to 1. `max_norm ≤ 0` (or not finite)
/// leaves the gradient alone. Returns the norm before clipping as a 0-dim
/// tensor on the gradient's device (no host synchronisation).
///
/// Kernels: the norm, then (when clipping) four on the 0-dim coefficient and
/// one scale of the gradient.
pub fn clip_grad_norm(grad: &Tensor, max_norm: f64) -> Result<Tensor, PluginError> {
    let norm = tch::no_grad(|| grad.f_norm()).plugin_err("clipping gradients")?;
    if let Some(coefficient) = clip_coefficient(&norm, max_norm)? {
        tch::no_grad(|| grad.shallow_clone().f_mul_(&coefficient).map(drop))
            .plugin_err("clipping gradients")?;
    }
    Ok(norm)
}

/// The clipping coefficient `min(1, max_norm / (norm + 1e-6))` for a
/// gradient of L2 norm `norm` (a 0-dim tensor), or `None` when `max_norm`
/// is ≤ 0 or not finite (no clipping). Optimizers that hold the gradient in
/// pieces scale each piece by it.
pub fn clip_coefficient(norm: &Tensor, max_norm: f64) -> Result<Option<Tensor>, PluginError> {
    if !(max_norm > 0.0 && max_norm.is_finite()) {
        return Ok(None);
    }
    tch::no_grad(|| {
        norm.f_add_scalar(1e-6)?
            .f_reciprocal()?
            .f_mul_scalar(max_norm)?
            .f_clamp_max(1.0)
    })
    .map(Some)
    .plugin_err("clipping gradients")
}
