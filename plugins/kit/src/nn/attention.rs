//! Multi-head scaled dot-product attention (Vaswani et al. 2017) with an
//! optional causal mask, in two kinds:
//!
//! * [`AttentionKind::Standard`]: per-head Q, K and V projections, head
//!   outputs concatenated, then the output projection.
//! * [`AttentionKind::Interpretable`] (Lim et al. 2021): per-head
//!   Q and K, **one** value projection shared by all heads, head outputs
//!   averaged, then the output projection — so the mean of the heads'
//!   weights describes the whole layer.
//!
//! For head `h`: `A_h = softmax(Q_h K_hᵀ / √d_k + M)`, `d_k = d_model / heads`,
//! where `M` is `−∞` at masked pairs. Queries are aligned with the *last*
//! `Tq` of the `Tk` key positions (self-attention: `Tq = Tk`; the TFT's
//! decoder queries over encoder + decoder keys), and the causal mask lets
//! query `i` see keys `j ≤ Tk − Tq + i`. Dropout (training only) acts on the
//! attention weights; the weights returned are those before dropout.

use super::{check_dropout, check_sizes, dropout, join, Linear, Parameters};
use crate::counter_rng::CounterRng;
use crate::errors::TchResultExt;
use crate::rng::Rng;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    Standard,
    Interpretable,
}

pub struct MultiHeadAttention {
    pub kind: AttentionKind,
    pub heads: usize,
    /// `d_model → heads·d_k`.
    pub query: Linear,
    /// `d_model → heads·d_k`.
    pub key: Linear,
    /// `d_model → heads·d_k` (standard) or `d_model → d_k` (interpretable).
    pub value: Linear,
    /// `heads·d_k → d_model` (standard) or `d_k → d_model` (interpretable).
    pub output: Linear,
    /// Dropout on the attention weights when training.
    pub dropout: f64,
}

impl MultiHeadAttention {
    /// `d_model` must be a multiple of `heads`.
    pub fn new(
        d_model: usize,
        heads: usize,
        kind: AttentionKind,
        dropout: f64,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        check_sizes(&[("d_model", d_model), ("heads", heads)], "attention")?;
        check_dropout(dropout, "attention")?;
        if !d_model.is_multiple_of(heads) {
            return Err(PluginError::invalid_config(format!(
                "attention d_model {d_model} is not a multiple of its {heads} heads"
            )));
        }
        let d_k = d_model / heads;
        let values = match kind {
            AttentionKind::Standard => d_model,
            AttentionKind::Interpretable => d_k,
        };
        Ok(Self {
            kind,
            heads,
            query: Linear::xavier(d_model, d_model, true, rng, device)?,
            key: Linear::xavier(d_model, d_model, true, rng, device)?,
            value: Linear::xavier(d_model, values, true, rng, device)?,
            output: Linear::xavier(values, d_model, true, rng, device)?,
            dropout,
        })
    }

    pub fn d_model(&self) -> usize {
        self.query.input_size()
    }

    pub fn d_k(&self) -> usize {
        self.d_model() / self.heads
    }

    /// `query [B, Tq, d_model]` attending over `memory [B, Tk, d_model]`
    /// (pass the same tensor for self-attention) → (output `[B, Tq, d_model]`,
    /// attention weights `[B, heads, Tq, Tk]`). `causal` needs `Tq ≤ Tk`.
    pub fn forward(
        &self,
        query: &Tensor,
        memory: &Tensor,
        causal: bool,
        rng: Option<&mut CounterRng>,
    ) -> Result<(Tensor, Tensor), PluginError> {
        let ctx = "attention forward";
        let (qs, ks) = (query.size(), memory.size());
        let d = self.d_model() as i64;
        if qs.len() != 3 || ks.len() != 3 || qs[0] != ks[0] || qs[2] != d || ks[2] != d {
            return Err(PluginError::invalid_data(format!(
                "attention expects query [B, Tq, {d}] and memory [B, Tk, {d}], \
                 got {qs:?} and {ks:?}"
            )));
        }
        let (tq, tk) = (qs[1], ks[1]);
        if causal && tq > tk {
            return Err(PluginError::invalid_data(format!(
                "a causal mask needs no more queries ({tq}) than keys ({tk})"
            )));
        }
        let (h, dk) = (self.heads as i64, self.d_k() as i64);
        // [B, T, h·dk] → [B, h, T, dk]; B as -1, never read into a number,
        // so a traced module (TorchScript export) takes any batch size.
        let split_heads = |x: Tensor, t: i64| {
            x.f_reshape([-1, t, h, dk])
                .and_then(|x| x.f_transpose(1, 2))
                .plugin_err(ctx)
        };
        let q = split_heads(self.query.forward(query)?, tq)?;
        let k = split_heads(self.key.forward(memory)?, tk)?;
        let mut scores = q
            .f_matmul(&k.f_transpose(-2, -1).plugin_err(ctx)?)
            .and_then(|s| s.f_mul_scalar(1.0 / (dk as f64).sqrt()))
            .plugin_err(ctx)?;
        if causal {
            let mask = causal_mask(tq, tk, query.device())?;
            scores = scores
                .f_masked_fill(&mask, f64::NEG_INFINITY)
                .plugin_err(ctx)?;
        }
        let weights = scores.f_softmax(-1, Kind::Float).plugin_err(ctx)?;
        let attn = dropout(&weights, self.dropout, rng)?;
        let mixed = match self.kind {
            AttentionKind::Standard => {
                let v = split_heads(self.value.forward(memory)?, tk)?;
                attn.f_matmul(&v)
                    .and_then(|o| o.f_transpose(1, 2))
                    .and_then(|o| o.f_reshape([-1, tq, h * dk]))
                    .plugin_err(ctx)?
            }
            AttentionKind::Interpretable => {
                // One value projection [B, 1, Tk, dk] for every head; mean over heads.
                let v = self.value.forward(memory)?.f_unsqueeze(1).plugin_err(ctx)?;
                attn.f_matmul(&v)
                    .and_then(|o| o.f_mean_dim([1i64].as_slice(), false, Kind::Float))
                    .plugin_err(ctx)?
            }
        };
        Ok((self.output.forward(&mixed)?, weights))
    }
}

/// `[tq, tk]` booleans, true where query `i` must not see key `j`
/// (`j > tk − tq + i`).
pub fn causal_mask(tq: i64, tk: i64, device: Device) -> Result<Tensor, PluginError> {
    Tensor::f_ones([tq, tk], (Kind::Bool, device))
        .and_then(|m| m.f_triu(tk - tq + 1))
        .plugin_err("building a causal mask")
}

impl Parameters for MultiHeadAttention {
    /// `query.*`, `key.*`, `value.*`, `output.*`.
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let mut out = self.query.named_parameters(&join(prefix, "query"));
        out.extend(self.key.named_parameters(&join(prefix, "key")));
        out.extend(self.value.named_parameters(&join(prefix, "value")));
        out.extend(self.output.named_parameters(&join(prefix, "output")));
        out
    }
}
