//! The forecaster: bar features → input projection → Mamba-2 stack →
//! multi-horizon head (one output per horizon, or one per horizon and
//! quantile). Causal: the forecast at bar `t` reads bars `≤ t` only.
//!
//! Two ways to run it: [`Forecaster::forward`] over whole windows (chunked
//! SSD, training and evaluation) and [`Forecaster::step`] one bar at a time
//! over a carried [`StackState`] (the O(1)-per-bar path for new bars).

use crate::config::ForecasterConfig;
use crate::stack::{Mamba2Stack, StackState};
use tch::{Device, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::adam::AdamConfig;
use tli_plugin_kit::counter_rng::CounterRng;
use tli_plugin_kit::flat_adamw::FlatAdamW;
use tli_plugin_kit::nn::{join, Linear, Parameters};
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::TchResultExt;

pub struct Forecaster {
    /// `features → d_model`, with bias.
    pub input: Linear,
    pub stack: Mamba2Stack,
    /// `d_model → horizons · outputs_per_horizon`, with bias.
    pub head: Linear,
    pub horizons: usize,
    /// 1 (point forecast) or the number of quantiles.
    pub outputs: usize,
    pub chunk_size: usize,
    pub dropout: f64,
}

impl Forecaster {
    /// A forecaster over `features` input columns, drawn from `rng`.
    pub fn new(
        config: &ForecasterConfig,
        features: usize,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        let outputs = config.outputs_per_horizon();
        Ok(Self {
            input: Linear::new(features, config.d_model, true, rng, device)?,
            stack: Mamba2Stack::new(&config.block(), config.layers, rng, device)?,
            head: Linear::new(config.d_model, config.horizons * outputs, true, rng, device)?,
            horizons: config.horizons,
            outputs,
            chunk_size: config.chunk_size,
            dropout: config.dropout,
        })
    }

    /// Windows `x (B, L, F)` → forecasts `(B, positions, horizons, outputs)`
    /// for the last `positions` bars of each window. `dropout`: `Some` while
    /// training (masks drawn from it), `None` to evaluate.
    pub fn forward(
        &self,
        x: &Tensor,
        positions: usize,
        mut dropout: Option<&mut CounterRng>,
    ) -> Result<Tensor, PluginError> {
        let size = x.size();
        let (batch, length) = (size[0], size[1]);
        let positions = (positions as i64).clamp(1, length);
        let mut h = self.input.forward(x)?;
        if let Some(rng) = dropout.as_deref_mut() {
            h = rng.dropout(&h, self.dropout, true)?;
        }
        // A chunk longer than the window would only pad it.
        let chunk = self.chunk_size.min(length as usize).max(1);
        let h = self.stack.forward(&h, chunk)?;
        let mut last = h
            .f_narrow(1, length - positions, positions)
            .plugin_err("taking the forecast positions")?;
        if let Some(rng) = dropout {
            last = rng.dropout(&last, self.dropout, true)?;
        }
        self.head
            .forward(&last)?
            .f_reshape([batch, positions, self.horizons as i64, self.outputs as i64])
            .plugin_err("shaping forecasts")
    }

    /// One new bar `x_t (B, F)` → forecasts `(B, horizons, outputs)`,
    /// advancing `state` (start from [`StackState::zeros`]).
    pub fn step(&self, x_t: &Tensor, state: &mut StackState) -> Result<Tensor, PluginError> {
        let batch = x_t.size()[0];
        let h = self.stack.step(&self.input.forward(x_t)?, state)?;
        self.head
            .forward(&h)?
            .f_reshape([batch, self.horizons as i64, self.outputs as i64])
            .plugin_err("shaping forecasts")
    }

    /// Parameters split for the optimizer: `(decayed, not decayed)`. Weight
    /// decay applies to projection and convolution weights only; biases,
    /// norms and the SSM's `dt_bias`, `A_log` and `D` are spared.
    pub fn decay_groups(&self) -> (Vec<&Tensor>, Vec<&Tensor>) {
        let (decayed, plain): (Vec<_>, Vec<_>) = self
            .named_parameters("")
            .into_iter()
            .partition(|(name, _)| is_decayed(name));
        (
            decayed.into_iter().map(|(_, t)| t).collect(),
            plain.into_iter().map(|(_, t)| t).collect(),
        )
    }

    /// The trainer's optimizer over this model (its parameters adopted into
    /// one flat buffer): AdamW at `config`'s learning rate, weight decay on
    /// the [`decay_groups`](Self::decay_groups) that take it.
    pub fn optimizer(&self, config: &ForecasterConfig) -> Result<FlatAdamW, PluginError> {
        let (decayed, plain) = self.decay_groups();
        FlatAdamW::with_decay_groups(
            AdamConfig {
                learning_rate: config.learning_rate,
                weight_decay: config.weight_decay,
                ..AdamConfig::default()
            },
            &decayed,
            &plain,
        )
    }

    /// Parameter count of a forecaster of `config` over `features` inputs.
    pub fn parameter_count_for(config: &ForecasterConfig, features: usize) -> u64 {
        let c = config.block();
        let (d, di, h) = (c.d_model, c.d_inner(), c.nheads());
        let in_proj = d * (2 * di + 2 * c.ngroups * c.d_state + h);
        let conv = c.conv_dim() * (c.d_conv + 1);
        let block = d + in_proj + conv + 3 * h + di + di * d;
        let head = config.horizons * config.outputs_per_horizon();
        (features * d + d + config.layers * block + d + d * head + head) as u64
    }
}

/// Whether weight decay applies to the parameter `name`.
pub fn is_decayed(name: &str) -> bool {
    name.ends_with(".weight") && !name.ends_with("norm.weight") && !name.contains("norm_f")
}

impl Parameters for Forecaster {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let mut all = self.input.named_parameters(&join(prefix, "input"));
        all.extend(self.stack.named_parameters(&join(prefix, "backbone")));
        all.extend(self.head.named_parameters(&join(prefix, "head")));
        all
    }
}
