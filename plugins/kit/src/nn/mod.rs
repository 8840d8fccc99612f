//! Neural-network building blocks for the forecasting plugins (Mamba-2,
//! TFT), in the kit's style: parameters are plain leaf tensors
//! (`requires_grad`) initialised from the kit's seeded [`Rng`], listed in a
//! fixed order under stable names ([`Parameters`]) for checkpoints and
//! optimizers; dropout draws from the plugin's own [`CounterRng`], never
//! libtorch's global generator.
//!
//! * [`linear`]: a dense layer (`x Wᵀ + b`).
//! * [`layer_norm`]: layer normalisation over the last dimension.
//! * [`embedding`]: a lookup table for categorical inputs.
//! * [`lstm`]: a batch-first, multi-layer LSTM with an optional initial state.
//! * [`glu`]: the gated linear unit, and [`grn`]: the gated residual network
//!   of Lim et al. (with its "gate, add & norm" step).
//! * [`attention`]: multi-head attention with a causal mask, standard or the
//!   TFT's interpretable variant (one value projection shared by all heads).
//!
//! Forward passes take `rng: Option<&mut CounterRng>`: `Some` means training
//! (dropout is applied with masks drawn from it), `None` evaluation.

pub mod attention;
pub mod embedding;
pub mod glu;
pub mod grn;
pub mod layer_norm;
pub mod linear;
pub mod lstm;

pub use attention::{AttentionKind, MultiHeadAttention};
pub use embedding::Embedding;
pub use glu::Glu;
pub use grn::{GateAddNorm, Grn};
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use lstm::{Lstm, LstmState};

use crate::counter_rng::CounterRng;
use crate::errors::TchResultExt;
use crate::mlp::{copy_checked, find};
use crate::rng::Rng;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

/// A module's parameters, in a fixed order under stable names.
pub trait Parameters {
    /// `(prefix.name, tensor)` for every parameter; `prefix` may be empty.
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)>;

    fn parameters(&self) -> Vec<&Tensor> {
        self.named_parameters("")
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Number of scalar parameters.
    fn parameter_count(&self) -> u64 {
        self.parameters().iter().map(|t| t.numel() as u64).sum()
    }

    /// Copies the tensors named `prefix.name` into the parameters (loading a
    /// checkpoint), refusing a missing tensor or a shape mismatch.
    fn load_named(&self, prefix: &str, tensors: &[(String, Tensor)]) -> Result<(), PluginError> {
        for (name, param) in self.named_parameters(prefix) {
            copy_checked(param, find(tensors, &name)?, &name)?;
        }
        Ok(())
    }
}

/// `prefix.name`, or `name` alone when `prefix` is empty.
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// A leaf parameter of `shape` with values uniform in `[−bound, bound)`.
pub(crate) fn uniform_param(
    shape: &[i64],
    bound: f64,
    rng: &mut Rng,
    device: Device,
) -> Result<Tensor, PluginError> {
    let n: i64 = shape.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32)
        .collect();
    host_param(&values, shape, device)
}

/// A leaf parameter of `shape` with standard normal values.
pub(crate) fn normal_param(
    shape: &[i64],
    rng: &mut Rng,
    device: Device,
) -> Result<Tensor, PluginError> {
    let n: i64 = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
    host_param(&values, shape, device)
}

/// A leaf parameter of `shape` filled with `value`.
pub(crate) fn full_param(shape: &[i64], value: f64, device: Device) -> Result<Tensor, PluginError> {
    Ok(Tensor::f_full(shape, value, (Kind::Float, device))
        .plugin_err("allocating parameters")?
        .set_requires_grad(true))
}

fn host_param(values: &[f32], shape: &[i64], device: Device) -> Result<Tensor, PluginError> {
    leaf_from_values(values, shape, device)
}

/// A leaf parameter of `shape` on `device` holding `values`, in storage of
/// its own.
///
/// Not a view: a reshaped view keeps its base tensor alive for autograd,
/// so an optimizer that later gives the parameter new storage (`set_data`:
/// the flat FP32 layout, INT8 release) would leave the original f32 values
/// allocated for the model's lifetime (on CPU, where `to_device` is a no-op).
pub fn leaf_from_values(
    values: &[f32],
    shape: &[i64],
    device: Device,
) -> Result<Tensor, PluginError> {
    let ctx = "allocating parameters";
    let flat = Tensor::f_from_slice(values).plugin_err(ctx)?;
    let mut owned = Tensor::f_empty(shape, (Kind::Float, device)).plugin_err(ctx)?;
    tch::no_grad(|| owned.f_copy_(&flat.f_view(shape)?)).plugin_err(ctx)?;
    Ok(owned.set_requires_grad(true))
}

/// Dropout with probability `p` when training (`rng` is `Some`).
pub(crate) fn dropout(
    x: &Tensor,
    p: f64,
    rng: Option<&mut CounterRng>,
) -> Result<Tensor, PluginError> {
    match rng {
        Some(rng) => rng.dropout(x, p, true),
        None => Ok(x.shallow_clone()),
    }
}

/// Refuses a dropout probability outside `[0, 1)`.
pub(crate) fn check_dropout(p: f64, what: &str) -> Result<(), PluginError> {
    if (0.0..1.0).contains(&p) {
        Ok(())
    } else {
        Err(PluginError::invalid_config(format!(
            "{what} dropout {p} must be in [0, 1)"
        )))
    }
}

/// Refuses a zero size.
pub(crate) fn check_sizes(sizes: &[(&str, usize)], what: &str) -> Result<(), PluginError> {
    match sizes.iter().find(|(_, n)| *n == 0) {
        Some((name, _)) => Err(PluginError::invalid_config(format!(
            "{what}: {name} must be at least 1"
        ))),
        None => Ok(()),
    }
}

/// Refuses an input whose last dimension is not `expected`.
pub(crate) fn check_last_dim(x: &Tensor, expected: usize, what: &str) -> Result<(), PluginError> {
    match x.size().last() {
        Some(&n) if n == expected as i64 => Ok(()),
        _ => Err(PluginError::invalid_data(format!(
            "{what} expects inputs [..., {expected}], got shape {:?}",
            x.size()
        ))),
    }
}
