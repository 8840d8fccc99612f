//! A dense layer `y = x Wᵀ + b` with seeded initialisation.

use super::{check_sizes, full_param, join, uniform_param, Parameters};
use crate::errors::TchResultExt;
use crate::rng::Rng;
use tch::{Device, Tensor};
use tli_plugin_api::PluginError;

pub struct Linear {
    /// `[out, in]`.
    pub weight: Tensor,
    /// `[out]`, when the layer has a bias.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// PyTorch's default initialisation: weight and bias uniform in
    /// `±1/√in`.
    pub fn new(
        input: usize,
        output: usize,
        bias: bool,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        check_sizes(&[("input", input), ("output", output)], "linear layer")?;
        let bound = 1.0 / (input as f64).sqrt();
        let weight = uniform_param(&[output as i64, input as i64], bound, rng, device)?;
        let bias = match bias {
            true => Some(uniform_param(&[output as i64], bound, rng, device)?),
            false => None,
        };
        Ok(Self { weight, bias })
    }

    /// Xavier/Glorot-uniform weights (`±√(6 / (in + out))`), zero bias.
    pub fn xavier(
        input: usize,
        output: usize,
        bias: bool,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        check_sizes(&[("input", input), ("output", output)], "linear layer")?;
        let bound = (6.0 / (input + output) as f64).sqrt();
        let weight = uniform_param(&[output as i64, input as i64], bound, rng, device)?;
        let bias = match bias {
            true => Some(full_param(&[output as i64], 0.0, device)?),
            false => None,
        };
        Ok(Self { weight, bias })
    }

    pub fn input_size(&self) -> usize {
        self.weight.size()[1] as usize
    }

    pub fn output_size(&self) -> usize {
        self.weight.size()[0] as usize
    }

    /// `x [..., in]` → `[..., out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, PluginError> {
        super::check_last_dim(x, self.input_size(), "linear layer")?;
        x.f_linear(&self.weight, self.bias.as_ref())
            .plugin_err("linear layer forward")
    }
}

impl Parameters for Linear {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let mut out = vec![(join(prefix, "weight"), &self.weight)];
        if let Some(b) = &self.bias {
            out.push((join(prefix, "bias"), b));
        }
        out
    }
}
