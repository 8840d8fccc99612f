//! The Temporal Fusion Transformer network (Lim et al., IJF 2021; component
//! list in `shared/reference/models.md` §4.1), over one window:
//!
//! ```text
//! static:  asset embedding + static reals ─ VSN ─ 4 GRNs → c_s, c_e, c_h, c_c
//! past:    T bars of observed + known inputs ─ VSN(c_s) ─ LSTM encoder (init c_h, c_c)
//! future:  H bars of known inputs ─ VSN(c_s) ─ LSTM decoder (init: encoder state)
//! φ  = GateAddNorm(LSTM out, skip = VSN out)                  [B, T+H, d]
//! θ  = GRN(φ, c_e)                                            static enrichment
//! δ  = GateAddNorm(InterpretableMHA(θ_future, θ, causal), skip = θ_future)
//! ψ  = GRN(δ);  out = GateAddNorm(ψ, skip = φ_future)
//! ŷ  = Linear(out) → [B, H, quantiles]
//! ```
//!
//! Every past and future bar also carries its relative position
//! (`(t − T)/T`, a known input the paper's models add as a time index), so
//! the decoder has an input even for data without known-future features.
//! The forward pass returns the interpretability outputs with the
//! forecasts: the three sets of selection weights and the attention weights.

use crate::vsn::{RealInputs, VariableSelection};
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::counter_rng::CounterRng;
use tli_plugin_kit::nn::{
    join, AttentionKind, Embedding, GateAddNorm, Grn, Linear, Lstm, LstmState, MultiHeadAttention,
    Parameters,
};
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::TchResultExt;

/// Parameters by name.
pub type NamedTensors<'a> = Vec<(String, &'a Tensor)>;

/// The sizes that fix the network's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct TftShape {
    /// `d`: width of every hidden layer.
    pub hidden: usize,
    pub heads: usize,
    pub lstm_layers: usize,
    pub dropout: f64,
    /// Real inputs seen on past bars only (observed), before the position input.
    pub observed: usize,
    /// Real inputs known ahead (calendar, session), seen on past and future bars.
    pub known: usize,
    /// Real inputs constant per window (taken from its last bar).
    pub static_reals: usize,
    /// Categories of the asset (1 for a per-asset task).
    pub assets: usize,
    /// `H`: decoder bars (horizons 1..H).
    pub horizons: usize,
    /// Outputs per horizon (quantiles).
    pub outputs: usize,
}

impl TftShape {
    /// Past-bar inputs: observed, known, position.
    pub fn past_inputs(&self) -> usize {
        self.observed + self.known + 1
    }

    /// Future-bar inputs: known, position.
    pub fn future_inputs(&self) -> usize {
        self.known + 1
    }

    /// Static variables: the asset and the static reals.
    pub fn static_inputs(&self) -> usize {
        1 + self.static_reals
    }
}

/// One batch of windows.
pub struct TftBatch {
    /// `[B, T, observed + known]`.
    pub past: Tensor,
    /// `[B, H, known]` (may have zero columns).
    pub future: Tensor,
    /// `[B, static_reals]` (may have zero columns).
    pub static_reals: Tensor,
    /// `[B]` int64 asset indices.
    pub asset: Tensor,
}

/// What a forward pass gives.
pub struct TftOutput {
    /// `[B, H, outputs]`.
    pub forecast: Tensor,
    /// `[B, static inputs]`.
    pub static_weights: Tensor,
    /// `[B, T, past inputs]`.
    pub past_weights: Tensor,
    /// `[B, H, future inputs]`.
    pub future_weights: Tensor,
    /// `[B, heads, H, T + H]`.
    pub attention: Tensor,
}

pub struct Tft {
    pub shape: TftShape,
    asset_embedding: Embedding,
    static_reals: Option<RealInputs>,
    past_reals: RealInputs,
    future_reals: RealInputs,
    static_selection: VariableSelection,
    past_selection: VariableSelection,
    future_selection: VariableSelection,
    /// c_s, c_e, c_h, c_c.
    static_encoders: [Grn; 4],
    encoder: Lstm,
    decoder: Lstm,
    post_lstm: GateAddNorm,
    enrichment: Grn,
    attention: MultiHeadAttention,
    post_attention: GateAddNorm,
    positionwise: Grn,
    pre_output: GateAddNorm,
    output: Linear,
}

impl Tft {
    pub fn new(shape: &TftShape, rng: &mut Rng, device: Device) -> Result<Self, PluginError> {
        let (d, p) = (shape.hidden, shape.dropout);
        let grn =
            |rng: &mut Rng, context: Option<usize>| Grn::new(d, d, d, context, p, rng, device);
        let static_reals = match shape.static_reals {
            0 => None,
            n => Some(RealInputs::new(n, d, rng, device)?),
        };
        Ok(Self {
            asset_embedding: Embedding::new(shape.assets, d, rng, device)?,
            static_reals,
            past_reals: RealInputs::new(shape.past_inputs(), d, rng, device)?,
            future_reals: RealInputs::new(shape.future_inputs(), d, rng, device)?,
            static_selection: VariableSelection::new(
                shape.static_inputs(),
                d,
                None,
                p,
                rng,
                device,
            )?,
            past_selection: VariableSelection::new(
                shape.past_inputs(),
                d,
                Some(d),
                p,
                rng,
                device,
            )?,
            future_selection: VariableSelection::new(
                shape.future_inputs(),
                d,
                Some(d),
                p,
                rng,
                device,
            )?,
            static_encoders: [
                grn(rng, None)?,
                grn(rng, None)?,
                grn(rng, None)?,
                grn(rng, None)?,
            ],
            encoder: Lstm::new(d, d, shape.lstm_layers, p, rng, device)?,
            decoder: Lstm::new(d, d, shape.lstm_layers, p, rng, device)?,
            post_lstm: GateAddNorm::new(d, d, p, rng, device)?,
            enrichment: grn(rng, Some(d))?,
            attention: MultiHeadAttention::new(
                d,
                shape.heads,
                AttentionKind::Interpretable,
                p,
                rng,
                device,
            )?,
            post_attention: GateAddNorm::new(d, d, p, rng, device)?,
            positionwise: grn(rng, None)?,
            pre_output: GateAddNorm::new(d, d, p, rng, device)?,
            output: Linear::new(d, shape.outputs, true, rng, device)?,
            shape: shape.clone(),
        })
    }

    /// The forward pass; `rng` is `Some` when training (dropout).
    pub fn forward(
        &self,
        batch: &TftBatch,
        mut rng: Option<&mut CounterRng>,
    ) -> Result<TftOutput, PluginError> {
        let ctx = "TFT forward";
        let s = &self.shape;
        let past_size = batch.past.size();
        if past_size.len() != 3 || past_size[2] != (s.observed + s.known) as i64 {
            return Err(PluginError::invalid_data(format!(
                "TFT past inputs must be [batch, lookback, {}], got {past_size:?}",
                s.observed + s.known
            )));
        }
        let (b, t, h) = (past_size[0], past_size[1], s.horizons as i64);
        let device = batch.past.device();

        // Static covariates → the four context vectors.
        let mut statics = vec![self
            .asset_embedding
            .forward(&batch.asset)?
            .f_unsqueeze(1)
            .plugin_err(ctx)?];
        if let Some(reals) = &self.static_reals {
            statics.push(reals.forward(&batch.static_reals)?);
        }
        let statics = Tensor::f_cat(&statics, 1).plugin_err(ctx)?;
        let (static_emb, static_weights) =
            self.static_selection
                .forward(&statics, None, rng.as_deref_mut())?;
        let mut contexts = Vec::with_capacity(4);
        for encoder in &self.static_encoders {
            contexts.push(encoder.forward(&static_emb, None, rng.as_deref_mut())?);
        }
        let [c_s, c_e, c_h, c_c]: [Tensor; 4] = contexts
            .try_into()
            .map_err(|_| PluginError::other("TFT: four static contexts"))?;

        // Past and future inputs, each bar with its relative position.
        let position = |start: i64, len: i64| -> Result<Tensor, PluginError> {
            Tensor::f_arange_start(start, start + len, (Kind::Float, device))
                .and_then(|p| p.f_div_scalar(t as f64))
                .and_then(|p| p.f_view([1, len, 1]))
                .and_then(|p| p.f_expand([b, len, 1], false))
                .plugin_err(ctx)
        };
        let past =
            Tensor::f_cat(&[batch.past.shallow_clone(), position(-t, t)?], 2).plugin_err(ctx)?;
        let future =
            Tensor::f_cat(&[batch.future.shallow_clone(), position(0, h)?], 2).plugin_err(ctx)?;
        let (past_emb, past_weights) = self.past_selection.forward(
            &self.past_reals.forward(&past)?,
            Some(&c_s),
            rng.as_deref_mut(),
        )?;
        let (future_emb, future_weights) = self.future_selection.forward(
            &self.future_reals.forward(&future)?,
            Some(&c_s),
            rng.as_deref_mut(),
        )?;

        // LSTM encoder–decoder from the static state.
        let layers = s.lstm_layers as i64;
        let init = |c: &Tensor| {
            c.f_unsqueeze(0)
                .and_then(|c| c.f_expand([layers, b, s.hidden as i64], false))
                .and_then(|c| c.f_contiguous())
                .plugin_err(ctx)
        };
        let state = LstmState {
            h: init(&c_h)?,
            c: init(&c_c)?,
        };
        let (encoded, state) = self
            .encoder
            .forward(&past_emb, Some(&state), rng.as_deref_mut())?;
        let (decoded, _) = self
            .decoder
            .forward(&future_emb, Some(&state), rng.as_deref_mut())?;
        let lstm_out = Tensor::f_cat(&[encoded, decoded], 1).plugin_err(ctx)?;
        let embedded = Tensor::f_cat(&[past_emb, future_emb], 1).plugin_err(ctx)?;
        let phi = self
            .post_lstm
            .forward(&lstm_out, &embedded, rng.as_deref_mut())?;

        // Static enrichment, then attention from the future bars over everything before them.
        let theta = self
            .enrichment
            .forward(&phi, Some(&c_e), rng.as_deref_mut())?;
        let future_of = |x: &Tensor| x.f_narrow(1, t, h).plugin_err(ctx);
        let theta_future = future_of(&theta)?;
        let (attended, attention) =
            self.attention
                .forward(&theta_future, &theta, true, rng.as_deref_mut())?;
        let delta = self
            .post_attention
            .forward(&attended, &theta_future, rng.as_deref_mut())?;
        let psi = self
            .positionwise
            .forward(&delta, None, rng.as_deref_mut())?;
        let out = self.pre_output.forward(&psi, &future_of(&phi)?, rng)?;
        Ok(TftOutput {
            forecast: self.output.forward(&out)?,
            static_weights,
            past_weights,
            future_weights,
            attention,
        })
    }

    /// Parameters split for weight decay: weight matrices decay; biases,
    /// norms, the per-input transforms and the asset embedding do not.
    pub fn decay_groups(&self) -> (NamedTensors<'_>, NamedTensors<'_>) {
        self.named_parameters("")
            .into_iter()
            .partition(|(name, t)| {
                t.dim() == 2 && !name.starts_with("inputs.") && !name.starts_with("asset_embedding")
            })
    }
}

impl Parameters for Tft {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let p = |name: &str| join(prefix, name);
        let mut out = self.asset_embedding.named_parameters(&p("asset_embedding"));
        if let Some(reals) = &self.static_reals {
            out.extend(reals.named_parameters(&p("inputs.static")));
        }
        out.extend(self.past_reals.named_parameters(&p("inputs.past")));
        out.extend(self.future_reals.named_parameters(&p("inputs.future")));
        out.extend(
            self.static_selection
                .named_parameters(&p("static_selection")),
        );
        out.extend(self.past_selection.named_parameters(&p("past_selection")));
        out.extend(
            self.future_selection
                .named_parameters(&p("future_selection")),
        );
        for (name, grn) in [
            "context_selection",
            "context_enrichment",
            "context_h",
            "context_c",
        ]
        .iter()
        .zip(&self.static_encoders)
        {
            out.extend(grn.named_parameters(&p(name)));
        }
        out.extend(self.encoder.named_parameters(&p("encoder")));
        out.extend(self.decoder.named_parameters(&p("decoder")));
        out.extend(self.post_lstm.named_parameters(&p("post_lstm")));
        out.extend(self.enrichment.named_parameters(&p("enrichment")));
        out.extend(self.attention.named_parameters(&p("attention")));
        out.extend(self.post_attention.named_parameters(&p("post_attention")));
        out.extend(self.positionwise.named_parameters(&p("positionwise")));
        out.extend(self.pre_output.named_parameters(&p("pre_output")));
        out.extend(self.output.named_parameters(&p("output")));
        out
    }
}
