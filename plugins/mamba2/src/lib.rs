//! `tli-plugin-mamba2`: the Mamba-2 forecaster. So far its numerical core:
//!
//! * [`ssd`]: the selective state-space layer (SSD), chunked (training) and
//!   as the plain recurrence (ground truth, streaming), with the stable
//!   segment sum.
//! * [`block`]: the Mamba-2 mixer block (in-projection, causal depthwise
//!   convolution, SSD with the `D` skip, gated RMSNorm, out-projection) with
//!   seeded initialisation, a chunked forward, a sequential forward and an
//!   O(1)-per-bar streaming `step`.
//! * [`stack`]: layers of pre-norm residual blocks and a final norm, with the
//!   same three paths.
//! * [`norm`]: RMSNorm, plain and gated.
//!
//! Parameters are plain leaf tensors initialised from the kit's seeded
//! [`Rng`](tli_plugin_kit::rng::Rng) (never libtorch's global generator),
//! listed under stable names through the kit's
//! [`Parameters`](tli_plugin_kit::nn::Parameters) trait.

pub mod block;
pub mod norm;
pub mod ssd;
pub mod stack;

pub use block::{Mamba2Block, Mamba2Config, State};
pub use norm::RmsNorm;
pub use stack::{Mamba2Stack, StackState};

use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::TchResultExt;

/// A float32 leaf parameter of `shape` holding `values`.
pub(crate) fn leaf(values: &[f64], shape: &[i64], device: Device) -> Result<Tensor, PluginError> {
    let values: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    Ok(Tensor::f_from_slice(&values)
        .and_then(|t| t.f_reshape(shape))
        .and_then(|t| t.f_to_device(device))
        .plugin_err("allocating parameters")?
        .set_requires_grad(true))
}

/// A leaf parameter of `shape` uniform in `[−bound, bound)`.
pub(crate) fn uniform_leaf(
    shape: &[i64],
    bound: f64,
    rng: &mut tli_plugin_kit::rng::Rng,
    device: Device,
) -> Result<Tensor, PluginError> {
    let n: i64 = shape.iter().product();
    let values: Vec<f64> = (0..n)
        .map(|_| (rng.uniform() * 2.0 - 1.0) * bound)
        .collect();
    leaf(&values, shape, device)
}

/// A new leaf parameter holding `t`'s values as `kind` (no graph link to `t`).
pub(crate) fn cast(t: &Tensor, kind: Kind) -> Result<Tensor, PluginError> {
    Ok(t.f_detach()
        .and_then(|t| t.f_to_dtype(kind, false, true))
        .plugin_err("converting parameters")?
        .set_requires_grad(true))
}
