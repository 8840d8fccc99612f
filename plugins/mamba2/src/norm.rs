//! RMSNorm (Zhang & Sennrich 2019), `x · rsqrt(mean(x²) + eps) · weight`
//! over the last dimension, and Mamba-2's gated variant.

use crate::cast;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::nn::{join, Parameters};
use tli_plugin_kit::TchResultExt;

/// Mamba's default `eps`.
pub const RMS_EPS: f64 = 1e-5;

pub struct RmsNorm {
    /// `[dim]`, starts at 1.
    pub weight: Tensor,
    pub eps: f64,
}

impl RmsNorm {
    pub fn new(dim: usize, eps: f64, device: Device) -> Result<Self, PluginError> {
        if dim == 0 || eps.is_nan() || eps <= 0.0 {
            return Err(PluginError::invalid_config(format!(
                "RMSNorm needs a dimension ≥ 1 and a positive eps (got {dim}, {eps})"
            )));
        }
        let weight = crate::leaf(&vec![1.0; dim], &[dim as i64], device)?;
        Ok(Self { weight, eps })
    }

    /// A copy with parameters of `kind` (e.g. `Double` for exactness tests).
    pub fn to_kind(&self, kind: Kind) -> Result<Self, PluginError> {
        Ok(Self {
            weight: cast(&self.weight, kind)?,
            eps: self.eps,
        })
    }

    /// `x [..., dim]` → same shape.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, PluginError> {
        rms(x, self.eps)
            .and_then(|n| n.f_mul(&self.weight))
            .plugin_err("RMSNorm forward")
    }
}

impl Parameters for RmsNorm {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        vec![(join(prefix, "weight"), &self.weight)]
    }
}

/// `x · rsqrt(mean(x², last) + eps)`.
fn rms(x: &Tensor, eps: f64) -> Result<Tensor, tch::TchError> {
    let ms = x.f_square()?.f_mean_dim(-1, true, None::<Kind>)?;
    x.f_mul(&ms.f_add_scalar(eps)?.f_rsqrt()?)
}

/// Mamba-2's gated RMSNorm with `norm_before_gate = false`:
/// `g = y · SiLU(z)`, then each group of `dim / groups` channels is
/// RMS-normalised, then scaled by `weight [dim]`.
pub fn gated_rms_norm(
    y: &Tensor,
    z: &Tensor,
    weight: &Tensor,
    groups: usize,
    eps: f64,
) -> Result<Tensor, PluginError> {
    (|| {
        let g = y.f_mul(&z.f_silu()?)?;
        let size = g.size();
        let dim = *size.last().unwrap_or(&0);
        let mut grouped = size[..size.len() - 1].to_vec();
        grouped.extend([groups as i64, dim / groups as i64]);
        rms(&g.f_reshape(&grouped)?, eps)?
            .f_reshape(&size)?
            .f_mul(weight)
    })()
    .plugin_err("gated RMSNorm")
}
