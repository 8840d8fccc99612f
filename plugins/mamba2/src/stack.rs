//! A stack of Mamba-2 blocks, as `mamba_ssm`'s `MixerModel` without the
//! embedding: per layer `h = h + mixer(RMSNorm(h))` (pre-norm residual),
//! then a final RMSNorm. Same three paths as the block.

use crate::block::{Mamba2Block, Mamba2Config, State};
use crate::norm::{RmsNorm, RMS_EPS};
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::nn::{join, Parameters};
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::TchResultExt;

pub struct Layer {
    pub norm: RmsNorm,
    pub mixer: Mamba2Block,
}

pub struct Mamba2Stack {
    pub layers: Vec<Layer>,
    pub norm_f: RmsNorm,
}

/// One [`State`] per layer.
pub struct StackState {
    pub layers: Vec<State>,
}

impl StackState {
    pub fn zeros(stack: &Mamba2Stack, batch: usize) -> Result<Self, PluginError> {
        let layers = stack
            .layers
            .iter()
            .map(|l| State::zeros(&l.mixer, batch))
            .collect::<Result<_, _>>()?;
        Ok(Self { layers })
    }
}

impl Mamba2Stack {
    /// `n_layer` blocks drawn from `rng` in order (each `out_proj` scaled by
    /// `1/√n_layer`).
    pub fn new(
        config: &Mamba2Config,
        n_layer: usize,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        if n_layer == 0 {
            return Err(PluginError::invalid_config(
                "Mamba-2: n_layer must be at least 1",
            ));
        }
        let layers = (0..n_layer)
            .map(|_| {
                Ok(Layer {
                    norm: RmsNorm::new(config.d_model, RMS_EPS, device)?,
                    mixer: Mamba2Block::new(config, n_layer, rng, device)?,
                })
            })
            .collect::<Result<_, PluginError>>()?;
        Ok(Self {
            layers,
            norm_f: RmsNorm::new(config.d_model, RMS_EPS, device)?,
        })
    }

    /// A copy with parameters of `kind`.
    pub fn to_kind(&self, kind: Kind) -> Result<Self, PluginError> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(Layer {
                    norm: l.norm.to_kind(kind)?,
                    mixer: l.mixer.to_kind(kind)?,
                })
            })
            .collect::<Result<_, PluginError>>()?;
        Ok(Self {
            layers,
            norm_f: self.norm_f.to_kind(kind)?,
        })
    }

    /// `u (B, L, d_model)` → `(B, L, d_model)`, chunked SSD.
    pub fn forward(&self, u: &Tensor, chunk_size: usize) -> Result<Tensor, PluginError> {
        self.run(u, |m, h| m.forward(h, chunk_size))
    }

    /// The chunked forward continuing from `state` (`None`: from zeros), and
    /// the state after the last position (see
    /// [`Mamba2Block::forward_with_state`]).
    pub fn forward_with_state(
        &self,
        u: &Tensor,
        chunk_size: usize,
        state: Option<&StackState>,
    ) -> Result<(Tensor, StackState), PluginError> {
        if let Some(s) = state {
            self.check_state(s)?;
        }
        let mut h = u.shallow_clone();
        let mut states = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let start = state.map(|s| &s.layers[i]);
            let (m, next) =
                layer
                    .mixer
                    .forward_with_state(&layer.norm.forward(&h)?, chunk_size, start)?;
            h = h.f_add(&m).plugin_err("Mamba-2 residual")?;
            states.push(next);
        }
        Ok((self.norm_f.forward(&h)?, StackState { layers: states }))
    }

    /// `u (B, L, d_model)` → `(B, L, d_model)`, sequential recurrence.
    pub fn forward_sequential(&self, u: &Tensor) -> Result<Tensor, PluginError> {
        self.run(u, |m, h| m.forward_sequential(h))
    }

    /// One bar: `u (B, d_model)` → `(B, d_model)`, advancing `state`.
    pub fn step(&self, u: &Tensor, state: &mut StackState) -> Result<Tensor, PluginError> {
        self.check_state(state)?;
        let mut h = u.shallow_clone();
        for (layer, s) in self.layers.iter().zip(state.layers.iter_mut()) {
            let m = layer.mixer.step(&layer.norm.forward(&h)?, s)?;
            h = h.f_add(&m).plugin_err("Mamba-2 residual")?;
        }
        self.norm_f.forward(&h)
    }

    fn check_state(&self, state: &StackState) -> Result<(), PluginError> {
        if state.layers.len() != self.layers.len() {
            return Err(PluginError::invalid_data(format!(
                "Mamba-2 stack of {} layers given a state of {}",
                self.layers.len(),
                state.layers.len()
            )));
        }
        Ok(())
    }

    fn run(
        &self,
        u: &Tensor,
        mixer: impl Fn(&Mamba2Block, &Tensor) -> Result<Tensor, PluginError>,
    ) -> Result<Tensor, PluginError> {
        let mut h = u.shallow_clone();
        for layer in &self.layers {
            let m = mixer(&layer.mixer, &layer.norm.forward(&h)?)?;
            h = h.f_add(&m).plugin_err("Mamba-2 residual")?;
        }
        self.norm_f.forward(&h)
    }
}

impl Parameters for Mamba2Stack {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            let p = join(prefix, &format!("layers.{i}"));
            out.extend(layer.norm.named_parameters(&join(&p, "norm")));
            out.extend(layer.mixer.named_parameters(&join(&p, "mixer")));
        }
        out.extend(self.norm_f.named_parameters(&join(prefix, "norm_f")));
        out
    }
}
