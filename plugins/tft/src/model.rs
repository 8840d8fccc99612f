//! The Temporal Fusion Transformer network (Lim et al., IJF 2021, and the
//! components it describes), over one window:
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
use tli_plugin_kit::staged::{Graph, Node, Recording};
use tli_plugin_kit::TchResultExt;

/// Parameters by name.
pub type NamedTensors<'a> = Vec<(String, &'a Tensor)>;

/// Called with each block's parameters as the network is built ([`Tft::build`]).
pub type BlockHook<'h> = dyn FnMut(NamedTensors<'_>) -> Result<(), PluginError> + 'h;

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
    /// Which input columns form one variable (a categorical's one-hot
    /// columns: one embedding, one selection weight).
    pub groups: InputGroups,
}

/// The variable of each input column, numbered from 0 in column order
/// (plugin API 1.4's `feature_variable`, relabelled per input set). Empty:
/// each column its own variable.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InputGroups {
    /// Past inputs: observed, then known (the position not included).
    pub past: Vec<usize>,
    /// Future inputs: known (the position not included).
    pub future: Vec<usize>,
    /// Static reals.
    pub statics: Vec<usize>,
}

/// Variables among `columns` columns grouped by `groups` (empty: one each).
fn variables(groups: &[usize], columns: usize) -> usize {
    groups.iter().max().map_or(columns, |&m| m + 1)
}

/// `groups` (or one per column when empty) with `extra` more variables of
/// their own after them (the position input).
fn with_own(groups: &[usize], columns: usize, extra: usize) -> Vec<usize> {
    let first = variables(groups, columns);
    let mut out: Vec<usize> = if groups.is_empty() {
        (0..columns).collect()
    } else {
        groups.to_vec()
    };
    out.extend(first..first + extra);
    out
}

impl InputGroups {
    /// The variables of the columns `picked` (indices into a dataset's
    /// features, in order) given each feature's variable: relabelled from 0
    /// in order of first appearance.
    pub fn relabel(variables: &[u32], picked: &[usize]) -> Vec<usize> {
        let mut out = Vec::with_capacity(picked.len());
        let mut last: Option<u32> = None;
        let mut next = 0usize;
        for &c in picked {
            let v = variables.get(c).copied().unwrap_or(u32::MAX - c as u32);
            if last == Some(v) {
                out.push(next - 1);
            } else {
                out.push(next);
                next += 1;
                last = Some(v);
            }
        }
        if next == picked.len() {
            Vec::new()
        } else {
            out
        }
    }
}

impl TftShape {
    /// Past-bar input columns: observed, known, position.
    pub fn past_inputs(&self) -> usize {
        self.observed + self.known + 1
    }

    /// Future-bar input columns: known, position.
    pub fn future_inputs(&self) -> usize {
        self.known + 1
    }

    /// Static input columns: the asset and the static reals.
    pub fn static_inputs(&self) -> usize {
        1 + self.static_reals
    }

    /// Past-bar variables (what the past selection weighs): the past
    /// columns grouped, and the position.
    pub fn past_variables(&self) -> usize {
        variables(&self.groups.past, self.observed + self.known) + 1
    }

    /// Future-bar variables: the known columns grouped, and the position.
    pub fn future_variables(&self) -> usize {
        variables(&self.groups.future, self.known) + 1
    }

    /// Static variables: the asset and the static reals grouped.
    pub fn static_variables(&self) -> usize {
        1 + variables(&self.groups.statics, self.static_reals)
    }

    /// Each past input column's variable, the position's included.
    pub fn past_groups(&self) -> Vec<usize> {
        with_own(&self.groups.past, self.observed + self.known, 1)
    }

    /// Each future input column's variable, the position's included.
    pub fn future_groups(&self) -> Vec<usize> {
        with_own(&self.groups.future, self.known, 1)
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
    /// `[B, static variables]`.
    pub static_weights: Tensor,
    /// `[B, T, past variables]`.
    pub past_weights: Tensor,
    /// `[B, H, future variables]`.
    pub future_weights: Tensor,
    /// `[B, heads, H, T + H]`.
    pub attention: Tensor,
}

/// The nodes of a staged forward pass that make up a [`TftOutput`].
pub struct OutputNodes {
    pub forecast: Node,
    pub static_weights: Node,
    pub past_weights: Node,
    pub future_weights: Node,
    pub attention: Node,
}

impl OutputNodes {
    pub fn tensors(&self, recording: &Recording<'_>) -> TftOutput {
        let get = |n: Node| recording.value(n).shallow_clone();
        TftOutput {
            forecast: get(self.forecast),
            static_weights: get(self.static_weights),
            past_weights: get(self.past_weights),
            future_weights: get(self.future_weights),
            attention: get(self.attention),
        }
    }
}

/// Names of the static context encoders: c_s, c_e, c_h, c_c.
const CONTEXT_NAMES: [&str; 4] = [
    "context_selection",
    "context_enrichment",
    "context_h",
    "context_c",
];

/// `x [B, len, k]` with the relative position `(start + i)/scale` of each
/// bar appended as one more input → `[B, len, k + 1]`.
fn with_position(x: &Tensor, start: i64, scale: i64) -> Result<Tensor, PluginError> {
    let ctx = "TFT position input";
    let len = x.size()[1];
    // Broadcast over a `[B, len, 1]` of zeros shaped by `x` itself, not by a
    // batch size read into a number: a traced module (TorchScript export)
    // then takes any batch size.
    let zeros = x
        .f_sum_dim_intlist(Some(&[2i64][..]), true, Kind::Float)
        .and_then(|z| z.f_zeros_like())
        .plugin_err(ctx)?;
    let position = Tensor::f_arange_start(start, start + len, (Kind::Float, x.device()))
        .and_then(|p| p.f_div_scalar(scale as f64))
        .and_then(|p| p.f_view([1, len, 1]))
        .and_then(|p| zeros.f_add(&p))
        .plugin_err(ctx)?;
    Tensor::f_cat(&[x.shallow_clone(), position], 2).plugin_err(ctx)
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
        Self::build(shape, rng, device, &mut |_| Ok(()))
    }

    /// Builds the network block by block, handing each block's parameters
    /// (by name) to `after_block` as soon as it exists: an INT8 optimizer
    /// quantizes them there, so the whole model never exists in f32.
    /// The parameters and their random draws are those of [`new`](Self::new).
    pub fn build(
        shape: &TftShape,
        rng: &mut Rng,
        device: Device,
        after_block: &mut BlockHook<'_>,
    ) -> Result<Self, PluginError> {
        let (d, p) = (shape.hidden, shape.dropout);
        fn done<T: Parameters>(
            block: T,
            name: &str,
            hook: &mut BlockHook<'_>,
        ) -> Result<T, PluginError> {
            hook(block.named_parameters(name))?;
            Ok(block)
        }
        let grn = |rng: &mut Rng, context: Option<usize>, name: &str, hook: &mut BlockHook<'_>| {
            done(Grn::new(d, d, d, context, p, rng, device)?, name, hook)
        };
        let asset_embedding = done(
            Embedding::new(shape.assets, d, rng, device)?,
            "asset_embedding",
            after_block,
        )?;
        let static_reals = match shape.static_reals {
            0 => None,
            n => Some(done(
                RealInputs::new(n, d, rng, device)?.grouped(&shape.groups.statics)?,
                "inputs.static",
                after_block,
            )?),
        };
        let past_reals = done(
            RealInputs::new(shape.past_inputs(), d, rng, device)?.grouped(&shape.past_groups())?,
            "inputs.past",
            after_block,
        )?;
        let future_reals = done(
            RealInputs::new(shape.future_inputs(), d, rng, device)?
                .grouped(&shape.future_groups())?,
            "inputs.future",
            after_block,
        )?;
        let mut selection = |count: usize, context: Option<usize>, name: &str| {
            VariableSelection::build(count, d, context, p, rng, device, name, after_block)
        };
        let static_selection = selection(shape.static_variables(), None, "static_selection")?;
        let past_selection = selection(shape.past_variables(), Some(d), "past_selection")?;
        let future_selection = selection(shape.future_variables(), Some(d), "future_selection")?;
        let static_encoders = [
            grn(rng, None, CONTEXT_NAMES[0], after_block)?,
            grn(rng, None, CONTEXT_NAMES[1], after_block)?,
            grn(rng, None, CONTEXT_NAMES[2], after_block)?,
            grn(rng, None, CONTEXT_NAMES[3], after_block)?,
        ];
        let lstm = |rng: &mut Rng, name: &str, hook: &mut BlockHook<'_>| {
            done(
                Lstm::new(d, d, shape.lstm_layers, p, rng, device)?,
                name,
                hook,
            )
        };
        let encoder = lstm(rng, "encoder", after_block)?;
        let decoder = lstm(rng, "decoder", after_block)?;
        let gate = |rng: &mut Rng, name: &str, hook: &mut BlockHook<'_>| {
            done(GateAddNorm::new(d, d, p, rng, device)?, name, hook)
        };
        let post_lstm = gate(rng, "post_lstm", after_block)?;
        let enrichment = grn(rng, Some(d), "enrichment", after_block)?;
        let attention = done(
            MultiHeadAttention::new(d, shape.heads, AttentionKind::Interpretable, p, rng, device)?,
            "attention",
            after_block,
        )?;
        let post_attention = gate(rng, "post_attention", after_block)?;
        let positionwise = grn(rng, None, "positionwise", after_block)?;
        let pre_output = gate(rng, "pre_output", after_block)?;
        let output = done(
            Linear::new(d, shape.outputs, true, rng, device)?,
            "output",
            after_block,
        )?;
        Ok(Self {
            asset_embedding,
            static_reals,
            past_reals,
            future_reals,
            static_selection,
            past_selection,
            future_selection,
            static_encoders,
            encoder,
            decoder,
            post_lstm,
            enrichment,
            attention,
            post_attention,
            positionwise,
            pre_output,
            output,
            shape: shape.clone(),
        })
    }

    /// The forward pass run directly (one autograd graph); `rng` is `Some`
    /// when training (dropout).
    pub fn forward(
        &self,
        batch: &TftBatch,
        rng: Option<&mut CounterRng>,
    ) -> Result<TftOutput, PluginError> {
        let mut graph = Graph::direct(rng);
        let nodes = self.forward_graph(&mut graph, batch)?;
        Ok(nodes.tensors(&graph.finish()))
    }

    /// The forward pass as stages of `graph` (run directly or staged, see
    /// the kit's [`staged`](tli_plugin_kit::staged)): one stage per named
    /// block (each GRN, LSTM, the attention…), each naming its parameters.
    pub fn forward_graph<'a>(
        &'a self,
        graph: &mut Graph<'a, '_>,
        batch: &TftBatch,
    ) -> Result<OutputNodes, PluginError> {
        let ctx = "TFT forward";
        let s = &self.shape;
        let past_size = batch.past.size();
        if past_size.len() != 3 || past_size[2] != (s.observed + s.known) as i64 {
            return Err(PluginError::invalid_data(format!(
                "TFT past inputs must be [batch, lookback, {}], got {past_size:?}",
                s.observed + s.known
            )));
        }
        let (t, h) = (past_size[1], s.horizons as i64);

        // Static covariates → the four context vectors.
        let asset = graph.input(batch.asset.shallow_clone());
        let static_reals = graph.input(batch.static_reals.shallow_clone());
        let [statics] = graph.stage(
            &["asset_embedding", "inputs.static"],
            &[asset, static_reals],
            move |xs, _| {
                let mut parts = vec![self
                    .asset_embedding
                    .forward(&xs[0])?
                    .f_unsqueeze(1)
                    .plugin_err(ctx)?];
                if let Some(reals) = &self.static_reals {
                    parts.push(reals.forward(&xs[1])?);
                }
                Ok(vec![Tensor::f_cat(&parts, 1).plugin_err(ctx)?])
            },
        )?;
        let (static_emb, static_weights) =
            self.static_selection
                .forward_graph(graph, "static_selection", statics, None)?;
        let mut contexts = Vec::with_capacity(4);
        for (name, encoder) in CONTEXT_NAMES.iter().zip(&self.static_encoders) {
            let [c] = graph.stage(&[name], &[static_emb], move |xs, rng| {
                Ok(vec![encoder.forward(&xs[0], None, rng)?])
            })?;
            contexts.push(c);
        }
        let [c_s, c_e, c_h, c_c] = [contexts[0], contexts[1], contexts[2], contexts[3]];

        // Past and future inputs, each bar with its relative position.
        // The selection networks read each bar's inputs through their
        // transforms (`forward_reals_graph`), never forming a `d`-vector per input.
        let past = graph.input(with_position(&batch.past, -t, t)?);
        let future = graph.input(with_position(&batch.future, 0, t)?);
        let (past_emb, past_weights) = self.past_selection.forward_reals_graph(
            graph,
            "past_selection",
            &self.past_reals,
            "inputs.past",
            past,
            Some(c_s),
        )?;
        let (future_emb, future_weights) = self.future_selection.forward_reals_graph(
            graph,
            "future_selection",
            &self.future_reals,
            "inputs.future",
            future,
            Some(c_s),
        )?;

        // LSTM encoder–decoder from the static state.
        let layers = s.lstm_layers as i64;
        let hidden = s.hidden as i64;
        let [encoded, state_h, state_c] =
            graph.stage(&["encoder"], &[past_emb, c_h, c_c], move |xs, rng| {
                // -1 keeps the batch size free (see `with_position`).
                let init = |c: &Tensor| {
                    c.f_unsqueeze(0)
                        .and_then(|c| c.f_expand([layers, -1, hidden], false))
                        .and_then(|c| c.f_contiguous())
                        .plugin_err(ctx)
                };
                let state = LstmState {
                    h: init(&xs[1])?,
                    c: init(&xs[2])?,
                };
                let (encoded, state) = self.encoder.forward(&xs[0], Some(&state), rng)?;
                Ok(vec![encoded, state.h, state.c])
            })?;
        let [decoded] = graph.stage(
            &["decoder"],
            &[future_emb, state_h, state_c],
            move |xs, rng| {
                let state = LstmState {
                    h: xs[1].shallow_clone(),
                    c: xs[2].shallow_clone(),
                };
                Ok(vec![self.decoder.forward(&xs[0], Some(&state), rng)?.0])
            },
        )?;
        let [phi] = graph.stage(
            &["post_lstm"],
            &[encoded, decoded, past_emb, future_emb],
            move |xs, rng| {
                let lstm_out = Tensor::f_cat(&[&xs[0], &xs[1]], 1).plugin_err(ctx)?;
                let embedded = Tensor::f_cat(&[&xs[2], &xs[3]], 1).plugin_err(ctx)?;
                Ok(vec![self.post_lstm.forward(&lstm_out, &embedded, rng)?])
            },
        )?;

        // Static enrichment, then attention from the future bars over everything before them.
        let [theta] = graph.stage(&["enrichment"], &[phi, c_e], move |xs, rng| {
            Ok(vec![self.enrichment.forward(&xs[0], Some(&xs[1]), rng)?])
        })?;
        let future_of = move |x: &Tensor| x.f_narrow(1, t, h).plugin_err(ctx);
        let [attended, attention] = graph.stage(&["attention"], &[theta], move |xs, rng| {
            let (attended, weights) =
                self.attention
                    .forward(&future_of(&xs[0])?, &xs[0], true, rng)?;
            Ok(vec![attended, weights])
        })?;
        let [delta] = graph.stage(&["post_attention"], &[attended, theta], move |xs, rng| {
            Ok(vec![self.post_attention.forward(
                &xs[0],
                &future_of(&xs[1])?,
                rng,
            )?])
        })?;
        let [psi] = graph.stage(&["positionwise"], &[delta], move |xs, rng| {
            Ok(vec![self.positionwise.forward(&xs[0], None, rng)?])
        })?;
        let [forecast] = graph.stage(&["pre_output", "output"], &[psi, phi], move |xs, rng| {
            let out = self.pre_output.forward(&xs[0], &future_of(&xs[1])?, rng)?;
            Ok(vec![self.output.forward(&out)?])
        })?;
        Ok(OutputNodes {
            forecast,
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
        for (name, grn) in CONTEXT_NAMES.iter().zip(&self.static_encoders) {
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
