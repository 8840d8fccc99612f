//! The gated residual network of Lim et al. (2021, eqs. 2–4), the TFT's
//! basic block, and its closing "gate, add & norm" step:
//!
//! ```text
//! η₂ = ELU(W₂ a + b₂ + W₃ c)        (W₃ c only with a context vector c)
//! η₁ = W₁ η₂ + b₁
//! GRN(a, c) = LayerNorm(skip(a) + GLU(η₁))
//! ```
//!
//! `skip(a)` is `a` when input and output sizes agree and a dense
//! projection otherwise (as in the paper's code); the GLU applies dropout
//! to its input when training.

use super::{check_last_dim, check_sizes, join, Glu, LayerNorm, Linear, Parameters};
use crate::counter_rng::CounterRng;
use crate::errors::TchResultExt;
use crate::rng::Rng;
use tch::{Device, Tensor};
use tli_plugin_api::PluginError;

/// `LayerNorm(GLU(x) + skip)`.
pub struct GateAddNorm {
    pub glu: Glu,
    pub norm: LayerNorm,
}

impl GateAddNorm {
    pub fn new(
        input: usize,
        output: usize,
        dropout: f64,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        Ok(Self {
            glu: Glu::new(input, output, dropout, rng, device)?,
            norm: LayerNorm::new(output, 1e-5, device)?,
        })
    }

    /// `x [..., in]`, `skip [..., out]` → `[..., out]`.
    pub fn forward(
        &self,
        x: &Tensor,
        skip: &Tensor,
        rng: Option<&mut CounterRng>,
    ) -> Result<Tensor, PluginError> {
        let gated = self.glu.forward(x, rng)?;
        let sum = gated.f_add(skip).plugin_err("gate, add & norm")?;
        self.norm.forward(&sum)
    }
}

impl Parameters for GateAddNorm {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let mut out = self.glu.named_parameters(&join(prefix, "glu"));
        out.extend(self.norm.named_parameters(&join(prefix, "norm")));
        out
    }
}

pub struct Grn {
    /// `W₂, b₂`: input → hidden.
    pub fc1: Linear,
    /// `W₃` (no bias): context → hidden.
    pub context: Option<Linear>,
    /// `W₁, b₁`: hidden → hidden.
    pub fc2: Linear,
    /// Input → output projection of the residual, when the sizes differ.
    pub skip: Option<Linear>,
    /// GLU (hidden → output), add the residual, layer norm.
    pub gate: GateAddNorm,
}

impl Grn {
    /// `context`: the size of the optional context vector.
    pub fn new(
        input: usize,
        hidden: usize,
        output: usize,
        context: Option<usize>,
        dropout: f64,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        check_sizes(
            &[("input", input), ("hidden", hidden), ("output", output)],
            "gated residual network",
        )?;
        let fc1 = Linear::new(input, hidden, true, rng, device)?;
        let context = match context {
            Some(c) => Some(Linear::new(c, hidden, false, rng, device)?),
            None => None,
        };
        let fc2 = Linear::new(hidden, hidden, true, rng, device)?;
        let skip = match input != output {
            true => Some(Linear::new(input, output, true, rng, device)?),
            false => None,
        };
        let gate = GateAddNorm::new(hidden, output, dropout, rng, device)?;
        Ok(Self {
            fc1,
            context,
            fc2,
            skip,
            gate,
        })
    }

    /// `a [..., in]` with the context `c` (required exactly when the network
    /// was built with one): `c [..., context]` of `a`'s shape, or with one
    /// dimension fewer (a static context `[batch, context]` for
    /// `a [batch, time, in]`), broadcast over time → `[..., out]`.
    pub fn forward(
        &self,
        a: &Tensor,
        c: Option<&Tensor>,
        rng: Option<&mut CounterRng>,
    ) -> Result<Tensor, PluginError> {
        let eta2 = self.project_input(a)?;
        self.finish(&eta2, a, c, rng)
    }

    /// The first part of [`forward`](Self::forward): `fc1(a)` (the input
    /// projection, the largest matrix when the input is wide).
    pub fn project_input(&self, a: &Tensor) -> Result<Tensor, PluginError> {
        check_last_dim(a, self.fc1.input_size(), "gated residual network")?;
        self.fc1.forward(a)
    }

    /// The rest of [`forward`](Self::forward) from `projected = fc1(a)`:
    /// context, ELU, `fc2`, the residual of `a` and the gate. A staged
    /// pass runs the two parts as separate stages, so that the input
    /// projection's weights are never live beside the others'.
    pub fn finish(
        &self,
        projected: &Tensor,
        a: &Tensor,
        c: Option<&Tensor>,
        rng: Option<&mut CounterRng>,
    ) -> Result<Tensor, PluginError> {
        let residual = match &self.skip {
            Some(p) => p.forward(a)?,
            None => a.shallow_clone(),
        };
        self.finish_with_residual(projected, &residual, c, rng)
    }

    /// [`finish`](Self::finish) from `projected = fc1(a)` and the residual
    /// (`a` itself, or `skip(a)` when the sizes differ) computed by the
    /// caller: a caller that knows `a` as a linear map of something smaller
    /// computes both without forming `a` (the TFT's input embeddings).
    pub fn finish_with_residual(
        &self,
        projected: &Tensor,
        residual: &Tensor,
        c: Option<&Tensor>,
        rng: Option<&mut CounterRng>,
    ) -> Result<Tensor, PluginError> {
        let ctx = "gated residual network forward";
        let mut eta2 = projected.shallow_clone();
        match (&self.context, c) {
            (Some(w3), Some(c)) => {
                let mut projected = w3.forward(c)?;
                if projected.dim() + 1 == eta2.dim() {
                    projected = projected.f_unsqueeze(-2).plugin_err(ctx)?;
                }
                eta2 = eta2.f_add(&projected).plugin_err(ctx)?;
            }
            (None, None) => {}
            (Some(_), None) => {
                return Err(PluginError::invalid_data(
                    "this gated residual network needs a context vector",
                ))
            }
            (None, Some(_)) => {
                return Err(PluginError::invalid_data(
                    "this gated residual network was built without a context input",
                ))
            }
        }
        let eta2 = eta2.f_elu().plugin_err(ctx)?;
        let eta1 = self.fc2.forward(&eta2)?;
        self.gate.forward(&eta1, residual, rng)
    }
}

impl Parameters for Grn {
    /// `fc1.*`, `context.weight`, `fc2.*`, `skip.*`, `gate.glu.*`, `gate.norm.*`.
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let mut out = self.fc1.named_parameters(&join(prefix, "fc1"));
        if let Some(c) = &self.context {
            out.extend(c.named_parameters(&join(prefix, "context")));
        }
        out.extend(self.fc2.named_parameters(&join(prefix, "fc2")));
        if let Some(s) = &self.skip {
            out.extend(s.named_parameters(&join(prefix, "skip")));
        }
        out.extend(self.gate.named_parameters(&join(prefix, "gate")));
        out
    }
}
