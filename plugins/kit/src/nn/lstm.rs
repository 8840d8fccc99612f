//! A batch-first LSTM of one or more layers (Hochreiter & Schmidhuber 1997,
//! with a forget gate), laid out as PyTorch's `nn.LSTM`: per layer
//! `w_ih [4H, in]`, `w_hh [4H, H]`, `b_ih [4H]`, `b_hh [4H]`, gates in the
//! order input, forget, cell, output:
//!
//! ```text
//! i, f, g, o = split(x_t w_ihᵀ + b_ih + h_{t−1} w_hhᵀ + b_hh)
//! c_t = σ(f) ⊙ c_{t−1} + σ(i) ⊙ tanh(g);   h_t = σ(o) ⊙ tanh(c_t)
//! ```
//!
//! Each layer runs as libtorch's fused `lstm` op (cuDNN on CUDA); the
//! dropout between layers is applied here with the caller's [`CounterRng`],
//! so libtorch's global generator is never used. The initial state may be
//! given (the TFT starts its encoder from static context).

use super::{check_dropout, check_sizes, dropout, join, uniform_param, Parameters};
use crate::counter_rng::CounterRng;
use crate::errors::TchResultExt;
use crate::rng::Rng;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

/// One layer's weights, as PyTorch names them (`weight_ih_l{k}` …).
pub struct LstmLayer {
    pub w_ih: Tensor,
    pub w_hh: Tensor,
    pub b_ih: Tensor,
    pub b_hh: Tensor,
}

/// Hidden and cell state, each `[layers, batch, hidden]`.
pub struct LstmState {
    pub h: Tensor,
    pub c: Tensor,
}

pub struct Lstm {
    input: usize,
    hidden: usize,
    /// Probability of dropping an output of every layer but the last.
    dropout: f64,
    layers: Vec<LstmLayer>,
}

impl Lstm {
    /// Every weight and bias starts uniform in `±1/√hidden` (PyTorch's default).
    pub fn new(
        input: usize,
        hidden: usize,
        num_layers: usize,
        dropout: f64,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        check_sizes(
            &[("input", input), ("hidden", hidden), ("layers", num_layers)],
            "LSTM",
        )?;
        check_dropout(dropout, "LSTM inter-layer")?;
        let bound = 1.0 / (hidden as f64).sqrt();
        let (h4, h) = (4 * hidden as i64, hidden as i64);
        let mut layers = Vec::with_capacity(num_layers);
        for l in 0..num_layers {
            let fan_in = if l == 0 { input } else { hidden } as i64;
            layers.push(LstmLayer {
                w_ih: uniform_param(&[h4, fan_in], bound, rng, device)?,
                w_hh: uniform_param(&[h4, h], bound, rng, device)?,
                b_ih: uniform_param(&[h4], bound, rng, device)?,
                b_hh: uniform_param(&[h4], bound, rng, device)?,
            });
        }
        Ok(Self {
            input,
            hidden,
            dropout,
            layers,
        })
    }

    pub fn input_size(&self) -> usize {
        self.input
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    pub fn layers(&self) -> &[LstmLayer] {
        &self.layers
    }

    /// A zero state for `batch` sequences.
    pub fn zero_state(&self, batch: usize, device: Device) -> Result<LstmState, PluginError> {
        let shape = [self.layers.len() as i64, batch as i64, self.hidden as i64];
        let zeros = || Tensor::f_zeros(shape, (Kind::Float, device)).plugin_err("LSTM state");
        Ok(LstmState {
            h: zeros()?,
            c: zeros()?,
        })
    }

    /// `x [batch, time, input]` from `state` (zeros when `None`) →
    /// (outputs of the last layer `[batch, time, hidden]`, final state).
    /// `rng` is `Some` when training: then the outputs of every layer but
    /// the last pass through dropout.
    pub fn forward(
        &self,
        x: &Tensor,
        state: Option<&LstmState>,
        mut rng: Option<&mut CounterRng>,
    ) -> Result<(Tensor, LstmState), PluginError> {
        let size = x.size();
        if size.len() != 3 || size[2] != self.input as i64 {
            return Err(PluginError::invalid_data(format!(
                "LSTM expects inputs [batch, time, {}], got shape {size:?}",
                self.input
            )));
        }
        let batch = size[0] as usize;
        let zero;
        let state = match state {
            Some(s) => {
                let want = [self.layers.len() as i64, batch as i64, self.hidden as i64];
                if s.h.size() != want || s.c.size() != want {
                    return Err(PluginError::invalid_data(format!(
                        "LSTM initial state must be [layers, batch, hidden] = {want:?}, \
                         got h {:?} and c {:?}",
                        s.h.size(),
                        s.c.size()
                    )));
                }
                s
            }
            None => {
                zero = self.zero_state(batch, x.device())?;
                &zero
            }
        };
        let ctx = "LSTM forward";
        let mut out = x.shallow_clone();
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        for (l, layer) in self.layers.iter().enumerate() {
            if l > 0 {
                out = dropout(&out, self.dropout, rng.as_deref_mut())?;
            }
            let h0 = state.h.f_narrow(0, l as i64, 1).plugin_err(ctx)?;
            let c0 = state.c.f_narrow(0, l as i64, 1).plugin_err(ctx)?;
            let params = [&layer.w_ih, &layer.w_hh, &layer.b_ih, &layer.b_hh];
            // One layer, no libtorch dropout; `train` true so that cuDNN
            // keeps what its backward pass needs.
            let (o, h, c) = out
                .f_lstm(&[&h0, &c0], &params, true, 1, 0.0, true, false, true)
                .plugin_err(ctx)?;
            out = o;
            hs.push(h);
            cs.push(c);
        }
        let h = Tensor::f_cat(&hs, 0).plugin_err(ctx)?;
        let c = Tensor::f_cat(&cs, 0).plugin_err(ctx)?;
        Ok((out, LstmState { h, c }))
    }
}

impl Parameters for Lstm {
    /// `layer{k}.w_ih`, `layer{k}.w_hh`, `layer{k}.b_ih`, `layer{k}.b_hh`.
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(k, l)| {
                let p = join(prefix, &format!("layer{k}"));
                [
                    (join(&p, "w_ih"), &l.w_ih),
                    (join(&p, "w_hh"), &l.w_hh),
                    (join(&p, "b_ih"), &l.b_ih),
                    (join(&p, "b_hh"), &l.b_hh),
                ]
            })
            .collect()
    }
}
