//! The gated linear unit (Dauphin et al. 2017) as the TFT uses it:
//! dropout, then `a ⊙ σ(b)` where `[a, b] = x W + c` splits a dense layer's
//! `2·out` outputs in halves.

use super::{check_dropout, dropout, Linear, Parameters};
use crate::counter_rng::CounterRng;
use crate::errors::TchResultExt;
use crate::rng::Rng;
use tch::{Device, Tensor};
use tli_plugin_api::PluginError;

pub struct Glu {
    /// `in → 2·out`, Xavier-initialised; outputs `[a | b]`.
    pub linear: Linear,
    /// Dropout applied to the input when training.
    pub dropout: f64,
}

impl Glu {
    pub fn new(
        input: usize,
        output: usize,
        dropout: f64,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        check_dropout(dropout, "GLU")?;
        Ok(Self {
            linear: Linear::xavier(input, 2 * output, true, rng, device)?,
            dropout,
        })
    }

    pub fn output_size(&self) -> usize {
        self.linear.output_size() / 2
    }

    /// `x [..., in]` → `[..., out]`.
    pub fn forward(&self, x: &Tensor, rng: Option<&mut CounterRng>) -> Result<Tensor, PluginError> {
        let x = dropout(x, self.dropout, rng)?;
        self.linear.forward(&x)?.f_glu(-1).plugin_err("GLU forward")
    }
}

impl Parameters for Glu {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        self.linear.named_parameters(prefix)
    }
}
