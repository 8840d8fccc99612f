//! Layer normalisation over the last dimension (Ba et al. 2016):
//! `(x − mean) / √(var + eps) · weight + bias`, with the biased variance.

use super::{check_last_dim, check_sizes, full_param, join, Parameters};
use crate::errors::TchResultExt;
use tch::{Device, Tensor};
use tli_plugin_api::PluginError;

pub struct LayerNorm {
    /// `[dim]`, starts at 1.
    pub weight: Tensor,
    /// `[dim]`, starts at 0.
    pub bias: Tensor,
    pub eps: f64,
}

impl LayerNorm {
    /// PyTorch's default `eps` is `1e-5`.
    pub fn new(dim: usize, eps: f64, device: Device) -> Result<Self, PluginError> {
        check_sizes(&[("dimension", dim)], "layer norm")?;
        if eps.is_nan() || eps <= 0.0 {
            return Err(PluginError::invalid_config(format!(
                "layer norm eps {eps} must be positive"
            )));
        }
        Ok(Self {
            weight: full_param(&[dim as i64], 1.0, device)?,
            bias: full_param(&[dim as i64], 0.0, device)?,
            eps,
        })
    }

    pub fn dim(&self) -> usize {
        self.weight.size()[0] as usize
    }

    /// `x [..., dim]` → same shape.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, PluginError> {
        check_last_dim(x, self.dim(), "layer norm")?;
        x.f_layer_norm(
            [self.dim() as i64],
            Some(&self.weight),
            Some(&self.bias),
            self.eps,
            true,
        )
        .plugin_err("layer norm forward")
    }
}

impl Parameters for LayerNorm {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        vec![
            (join(prefix, "weight"), &self.weight),
            (join(prefix, "bias"), &self.bias),
        ]
    }
}
