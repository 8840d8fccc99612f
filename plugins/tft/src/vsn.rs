//! The TFT's variable selection network (Lim et al. 2021, §4.2) and the
//! per-variable input transform in front of it.
//!
//! Each real input `x_j` is first turned into a `d`-vector by its own
//! linear map (`ξ_j = x_j·w_j + b_j`, [`RealInputs`]; categorical inputs
//! arrive as embeddings). The network then
//!
//! ```text
//! v = softmax(GRN_v(Ξ, c))           Ξ = [ξ_1 … ξ_n] flattened, c the static context
//! ξ̃_j = GRN_j(ξ_j)                   one GRN per variable, weights not shared
//! out = Σ_j v_j ξ̃_j
//! ```
//!
//! and returns the weights `v` with the output: their mean over a split is
//! the TFT's variable-importance readout.

use crate::model::BlockHook;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::nn::{join, leaf_from_values, Grn, Parameters};
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::staged::{Graph, Node};
use tli_plugin_kit::TchResultExt;

/// `n` real inputs → `n` vectors of size `d`, one affine map per input;
/// grouped, the vectors of each group's inputs are added into one per
/// variable. A categorical column's one-hot inputs so become one embedding:
/// with one level set, the sum is that level's row (plus the group's
/// biases), exactly an embedding lookup.
pub struct RealInputs {
    /// `[n, d]`.
    pub weight: Tensor,
    /// `[n, d]`.
    pub bias: Tensor,
    /// `[variables, n]` 0/1: which inputs each variable adds (`None`: one
    /// variable per input). Not a parameter.
    groups: Option<Tensor>,
}

impl RealInputs {
    /// Weights uniform in `±1` (PyTorch's `Linear(1, d)` default for one input), zero bias.
    pub fn new(
        count: usize,
        dim: usize,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        let n = count * dim;
        let values: Vec<f32> = (0..n).map(|_| (rng.uniform() * 2.0 - 1.0) as f32).collect();
        let shape = [count as i64, dim as i64];
        let ctx = "allocating input transforms";
        let weight = leaf_from_values(&values, &shape, device)?;
        let bias = Tensor::f_zeros(shape, (Kind::Float, device))
            .plugin_err(ctx)?
            .set_requires_grad(true);
        Ok(Self {
            weight,
            bias,
            groups: None,
        })
    }

    /// These inputs grouped into variables: `groups[j]` is input `j`'s
    /// variable, numbered from 0 in order (empty, or one per input: no
    /// grouping).
    pub fn grouped(mut self, groups: &[usize]) -> Result<Self, PluginError> {
        let n = self.weight.size()[0] as usize;
        let variables = groups.iter().max().map_or(0, |m| m + 1);
        if groups.is_empty() || variables == n {
            return Ok(self);
        }
        if groups.len() != n {
            return Err(PluginError::invalid_data(format!(
                "{} input groups for {n} inputs",
                groups.len()
            )));
        }
        let mut matrix = vec![0f32; variables * n];
        for (j, &v) in groups.iter().enumerate() {
            matrix[v * n + j] = 1.0;
        }
        let device = self.weight.device();
        self.groups = Some(
            Tensor::f_from_slice(&matrix)
                .and_then(|m| m.f_view([variables as i64, n as i64]))
                .and_then(|m| m.f_to_device(device))
                .plugin_err("grouping inputs")?,
        );
        Ok(self)
    }

    /// `x [..., n]` → `[..., n, d]` (grouped: `[..., variables, d]`).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, PluginError> {
        let n = self.weight.size()[0];
        if x.size().last() != Some(&n) {
            return Err(PluginError::invalid_data(format!(
                "input transform expects [..., {n}] values, got shape {:?}",
                x.size()
            )));
        }
        let each = x
            .f_unsqueeze(-1)
            .and_then(|x| x.f_mul(&self.weight))
            .and_then(|x| x.f_add(&self.bias))
            .plugin_err("input transform")?;
        match &self.groups {
            // [V, n] @ [..., n, d] → [..., V, d].
            Some(groups) => groups.f_matmul(&each).plugin_err("input groups"),
            None => Ok(each),
        }
    }
}

impl Parameters for RealInputs {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        vec![
            (join(prefix, "weight"), &self.weight),
            (join(prefix, "bias"), &self.bias),
        ]
    }
}

/// Variable selection over `n` inputs of size `d`.
pub struct VariableSelection {
    /// `n·d → n` selection weights (with the static context when built with one).
    pub selector: Grn,
    /// One `d → d` GRN per variable.
    pub transforms: Vec<Grn>,
}

impl VariableSelection {
    /// Builds the selector, then each variable's GRN, handing each one's
    /// parameters (named under `name`) to `after_block` as soon as it
    /// exists (see `Tft::build`).
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        count: usize,
        dim: usize,
        context: Option<usize>,
        dropout: f64,
        rng: &mut Rng,
        device: Device,
        name: &str,
        after_block: &mut BlockHook<'_>,
    ) -> Result<Self, PluginError> {
        if count == 0 {
            return Err(PluginError::invalid_config(
                "a variable selection network needs at least one input",
            ));
        }
        let selector = Grn::new(count * dim, dim, count, context, dropout, rng, device)?;
        after_block(selector.named_parameters(&join(name, "selector")))?;
        let mut transforms = Vec::with_capacity(count);
        for j in 0..count {
            let grn = Grn::new(dim, dim, dim, None, dropout, rng, device)?;
            after_block(grn.named_parameters(&join(name, &format!("var{j}"))))?;
            transforms.push(grn);
        }
        Ok(Self {
            selector,
            transforms,
        })
    }

    pub fn count(&self) -> usize {
        self.transforms.len()
    }

    /// `inputs [..., n, d]` (with `context [batch, c]` when built with one)
    /// → (combined `[..., d]`, selection weights `[..., n]`), as stages of
    /// `graph`: the selector, each variable's GRN, the weighted sum. `name`
    /// is this network's parameter prefix.
    pub fn forward_graph<'a>(
        &'a self,
        graph: &mut Graph<'a, '_>,
        name: &str,
        inputs: Node,
        context: Option<Node>,
    ) -> Result<(Node, Node), PluginError> {
        let ctx = "variable selection";
        let size = graph.value(inputs).size();
        let n = self.count() as i64;
        if size.len() < 2 || size[size.len() - 2] != n {
            return Err(PluginError::invalid_data(format!(
                "variable selection over {n} inputs got shape {size:?}"
            )));
        }
        // The selector's input projection reads every variable's embedding
        // (its matrix is the model's largest): a stage of its own, so that
        // a staged step never holds it beside another matrix.
        let selector = join(name, "selector");
        let fc1 = join(&selector, "fc1");
        let rest: Vec<String> = ["context", "fc2", "skip", "gate"]
            .iter()
            .map(|part| join(&selector, part))
            .collect();
        let [projected] = graph.stage(&[&fc1], &[inputs], move |xs, _| {
            let flat = xs[0].f_flatten(-2, -1).plugin_err(ctx)?;
            Ok(vec![self.selector.project_input(&flat)?])
        })?;
        let mut args = vec![projected, inputs];
        args.extend(context);
        let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
        let [weights] = graph.stage(&rest, &args, move |xs, rng| {
            let flat = xs[1].f_flatten(-2, -1).plugin_err(ctx)?;
            let logits = self.selector.finish(&xs[0], &flat, xs.get(2), rng)?;
            Ok(vec![logits.f_softmax(-1, Kind::Float).plugin_err(ctx)?])
        })?;
        // Each variable's slice as a value of its own: one `unbind` whose
        // backward pass stacks the slices' gradients once, where a `select`
        // per variable made each backward pass fill and add a zero tensor
        // of the whole input (13 of them in a default encoder).
        let variables = graph.stage_n(&[], &[inputs], self.count(), move |xs, _| {
            xs[0].f_unbind(-2).plugin_err(ctx)
        })?;
        let mut combine = vec![weights];
        for ((j, grn), variable) in self.transforms.iter().enumerate().zip(variables) {
            let prefix = join(name, &format!("var{j}"));
            let [transformed] = graph.stage(&[&prefix], &[variable], move |xs, rng| {
                Ok(vec![grn.forward(&xs[0], None, rng)?])
            })?;
            combine.push(transformed);
        }
        let [combined] = graph.stage(&[], &combine, move |xs, _| {
            let stacked = Tensor::f_stack(&xs[1..], -2).plugin_err(ctx)?;
            Ok(vec![stacked
                .f_mul(&xs[0].f_unsqueeze(-1).plugin_err(ctx)?)
                .and_then(|t| t.f_sum_dim_intlist([-2i64].as_slice(), false, Kind::Float))
                .plugin_err(ctx)?])
        })?;
        Ok((combined, weights))
    }
}

impl Parameters for VariableSelection {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let mut out = self.selector.named_parameters(&join(prefix, "selector"));
        for (j, grn) in self.transforms.iter().enumerate() {
            out.extend(grn.named_parameters(&join(prefix, &format!("var{j}"))));
        }
        out
    }
}
