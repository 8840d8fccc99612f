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
    /// Each variable's input columns, in order.
    columns: Vec<Vec<usize>>,
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
            columns: (0..count).map(|j| vec![j]).collect(),
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
        let mut columns = vec![Vec::new(); variables];
        for (j, &v) in groups.iter().enumerate() {
            columns[v].push(j);
        }
        if let Some(v) = columns.iter().position(Vec::is_empty) {
            return Err(PluginError::invalid_data(format!(
                "input groups name variables 0..{variables} but no input belongs to variable {v}"
            )));
        }
        self.columns = columns;
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
        self.check_inputs(x)?;
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

    /// The number of variables these inputs form.
    pub fn variables(&self) -> usize {
        self.columns.len()
    }

    /// Checks that `x` is `[..., n]`.
    fn check_inputs(&self, x: &Tensor) -> Result<(), PluginError> {
        let n = self.weight.size()[0];
        if x.size().last() == Some(&n) {
            Ok(())
        } else {
            Err(PluginError::invalid_data(format!(
                "input transform expects [..., {n}] values, got shape {:?}",
                x.size()
            )))
        }
    }

    /// Variable `v`'s input columns of `x [..., n]` → `[..., m]`, and its
    /// rows of `t [n, …]` → `[m, …]`.
    fn columns_of(&self, v: usize, x: &Tensor, dim: i64) -> Result<Tensor, PluginError> {
        let columns = &self.columns[v];
        let first = columns[0];
        let contiguous = columns.iter().enumerate().all(|(i, &c)| c == first + i);
        let ctx = "selecting a variable's inputs";
        if contiguous {
            x.f_narrow(dim, first as i64, columns.len() as i64)
                .plugin_err(ctx)
        } else {
            let index: Vec<i64> = columns.iter().map(|&c| c as i64).collect();
            Tensor::f_from_slice(&index)
                .and_then(|i| i.f_to_device(x.device()))
                .and_then(|i| x.f_index_select(dim, &i))
                .plugin_err(ctx)
        }
    }

    /// `x_v [..., m]` through the affine map `x_v·a + c` (`a [m, out]`, `c [out]`).
    fn affine(x_v: &Tensor, a: &Tensor, c: &Tensor) -> Result<Tensor, PluginError> {
        let ctx = "input transform";
        if a.size()[0] == 1 {
            // One input: an outer product, no matrix product of depth 1.
            c.f_addcmul(x_v, &a.f_squeeze_dim(0).plugin_err(ctx)?)
                .plugin_err(ctx)
        } else {
            x_v.f_matmul(a).and_then(|y| y.f_add(c)).plugin_err(ctx)
        }
    }

    /// Variable `v`'s vector `ξ_v` from `x [..., n]` → `[..., d]` (the
    /// `v`-th row of [`forward`](Self::forward)'s output).
    pub fn variable(&self, x: &Tensor, v: usize) -> Result<Tensor, PluginError> {
        self.check_inputs(x)?;
        let (w, b) = self.variable_map(v)?;
        Self::affine(&self.columns_of(v, x, -1)?, &w, &b)
    }

    /// Variable `v`'s transform as `ξ_v = x_v·w + b`: its inputs' rows of the
    /// weights (`w [m, d]`) and their biases summed (`b [d]`).
    fn variable_map(&self, v: usize) -> Result<(Tensor, Tensor), PluginError> {
        let w = self.columns_of(v, &self.weight, 0)?;
        let b = self
            .columns_of(v, &self.bias, 0)?
            .f_sum_dim_intlist([0i64].as_slice(), false, Kind::Float)
            .plugin_err("input transform")?;
        Ok((w, b))
    }

    /// A linear map of variable `v`'s vector, `ξ_v·Wᵀ + bias` (`weight
    /// [out, d]`), computed from `x [..., n]` as `x_v·(w_v·Wᵀ) + (b_v·Wᵀ +
    /// bias)`: the same map through the variable's few inputs, without the
    /// `d × d` product per row.
    pub fn variable_linear(
        &self,
        x: &Tensor,
        v: usize,
        weight: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Tensor, PluginError> {
        self.check_inputs(x)?;
        let ctx = "folding a linear map into the input transform";
        let (w, b) = self.variable_map(v)?;
        // [m, d] @ [d, out] and [d] @ [d, out].
        let a = w
            .f_matmul(&weight.f_transpose(0, 1).plugin_err(ctx)?)
            .plugin_err(ctx)?;
        let mut c = weight.f_mv(&b).plugin_err(ctx)?;
        if let Some(bias) = bias {
            c = c.f_add(bias).plugin_err(ctx)?;
        }
        Self::affine(&self.columns_of(v, x, -1)?, &a, &c)
    }

    /// A linear map of all variables' vectors flattened, `[ξ_1 … ξ_V]·Wᵀ +
    /// bias` (`weight [out, V·d]`), computed from `x [..., n]` as `x·U + c`
    /// with `U [n, out]`: row `j` is `w_j` through input `j`'s variable's
    /// block of `W`, `c` gathers the biases the same way.
    pub fn flat_linear(
        &self,
        x: &Tensor,
        weight: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Tensor, PluginError> {
        self.check_inputs(x)?;
        let ctx = "folding a linear map into the input transform";
        let d = self.weight.size()[1];
        let variables = self.variables() as i64;
        if weight.size()[1] != variables * d {
            return Err(PluginError::invalid_data(format!(
                "a map of {variables} flattened {d}-vectors needs {} inputs, its matrix has {}",
                variables * d,
                weight.size()[1]
            )));
        }
        // D [V·d, n + 1]: column j < n holds w_j in the rows of input j's
        // variable (zeros elsewhere), column n each variable's summed biases;
        // then [U | c] = W·D, one product, no temporary the size of W (the
        // model's largest matrix).
        let n = self.weight.size()[0];
        let groups = match &self.groups {
            Some(g) => g.shallow_clone(),
            None => Tensor::f_eye(n, (Kind::Float, self.weight.device())).plugin_err(ctx)?,
        };
        let columns = groups
            .f_unsqueeze(1)
            .and_then(|g| g.f_mul(&self.weight.f_transpose(0, 1)?.f_unsqueeze(0)?)) // [V, d, n]
            .plugin_err(ctx)?;
        let biases = groups
            .f_matmul(&self.bias)
            .and_then(|b| b.f_unsqueeze(-1)) // [V, d, 1]
            .plugin_err(ctx)?;
        let both = Tensor::f_cat(&[columns, biases], -1)
            .and_then(|m| m.f_reshape([variables * d, n + 1]))
            .and_then(|m| weight.f_matmul(&m)) // [out, n + 1]
            .plugin_err(ctx)?;
        let u = both.f_narrow(1, 0, n).plugin_err(ctx)?;
        let mut c = both.f_select(1, n).plugin_err(ctx)?;
        if let Some(bias) = bias {
            c = c.f_add(bias).plugin_err(ctx)?;
        }
        x.f_linear(&u, Some(&c)).plugin_err(ctx)
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
        let mut transformed = Vec::with_capacity(self.count());
        for ((j, grn), variable) in self.transforms.iter().enumerate().zip(variables) {
            let prefix = join(name, &format!("var{j}"));
            let [out] = graph.stage(&[&prefix], &[variable], move |xs, rng| {
                Ok(vec![grn.forward(&xs[0], None, rng)?])
            })?;
            transformed.push(out);
        }
        Ok((combine(graph, weights, transformed)?, weights))
    }

    /// [`forward_graph`](Self::forward_graph) over real inputs given as
    /// `x [..., n]` with their transform `reals` (parameters named
    /// `reals_name`) rather than as the vectors `ξ = reals(x)`. The same
    /// function, computed more cheaply: every map the network applies
    /// to `ξ` first is linear (the selector's input projection and skip,
    /// each variable's input projection) and `ξ` is itself affine in the
    /// few inputs `x`, so each such map runs as one through the inputs
    /// ([`RealInputs::flat_linear`], [`RealInputs::variable_linear`]):
    /// `n` columns instead of `n·d` for the selector, an outer product
    /// instead of a `d × d` product for each variable. Only each
    /// variable's residual forms its `ξ_v`. The sums run in another order
    /// than the plain pass's, so results agree to rounding, not bitwise.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_reals_graph<'a>(
        &'a self,
        graph: &mut Graph<'a, '_>,
        name: &str,
        reals: &'a RealInputs,
        reals_name: &str,
        x: Node,
        context: Option<Node>,
    ) -> Result<(Node, Node), PluginError> {
        let ctx = "variable selection";
        if reals.variables() != self.count() {
            return Err(PluginError::invalid_data(format!(
                "variable selection over {} inputs got {} input variables",
                self.count(),
                reals.variables()
            )));
        }
        let selector = join(name, "selector");
        let fc1 = join(&selector, "fc1");
        // As in `forward_graph`: the input projection a stage of its own.
        let [projected] = graph.stage(&[&fc1, reals_name], &[x], move |xs, _| {
            let fc1 = &self.selector.fc1;
            Ok(vec![reals.flat_linear(
                &xs[0],
                &fc1.weight,
                fc1.bias.as_ref(),
            )?])
        })?;
        let mut rest: Vec<String> = ["context", "fc2", "skip", "gate"]
            .iter()
            .map(|part| join(&selector, part))
            .collect();
        rest.push(reals_name.to_string());
        let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
        let mut args = vec![projected, x];
        args.extend(context);
        let [weights] = graph.stage(&rest, &args, move |xs, rng| {
            let residual =
                match &self.selector.skip {
                    Some(skip) => reals.flat_linear(&xs[1], &skip.weight, skip.bias.as_ref())?,
                    // A selector's output (one weight per variable) never has
                    // the width of its input (a vector per variable).
                    None => return Err(PluginError::invalid_data(
                        "a variable selector maps n·d inputs to n weights, so it has a skip map",
                    )),
                };
            let logits = self
                .selector
                .finish_with_residual(&xs[0], &residual, xs.get(2), rng)?;
            Ok(vec![logits.f_softmax(-1, Kind::Float).plugin_err(ctx)?])
        })?;
        let mut transformed = Vec::with_capacity(self.count());
        for (v, grn) in self.transforms.iter().enumerate() {
            let prefix = join(name, &format!("var{v}"));
            let [out] = graph.stage(&[&prefix, reals_name], &[x], move |xs, rng| {
                let fc1 = &grn.fc1;
                let projected = reals.variable_linear(&xs[0], v, &fc1.weight, fc1.bias.as_ref())?;
                let residual = match &grn.skip {
                    Some(skip) => {
                        reals.variable_linear(&xs[0], v, &skip.weight, skip.bias.as_ref())?
                    }
                    None => reals.variable(&xs[0], v)?,
                };
                Ok(vec![
                    grn.finish_with_residual(&projected, &residual, None, rng)?
                ])
            })?;
            transformed.push(out);
        }
        Ok((combine(graph, weights, transformed)?, weights))
    }
}

/// `Σ_v weights_v · transformed_v` (`weights [..., n]`, each transformed
/// `[..., d]`) → `[..., d]`, as a stage of `graph`. The variables are
/// stacked first (`[n, ..., d]`), so that the backward pass hands each
/// variable's network a contiguous gradient (stacked last, every layer norm
/// behind it copied its strided slice first).
fn combine(
    graph: &mut Graph<'_, '_>,
    weights: Node,
    transformed: Vec<Node>,
) -> Result<Node, PluginError> {
    let ctx = "variable selection";
    let mut args = vec![weights];
    args.extend(transformed);
    let [combined] = graph.stage(&[], &args, move |xs, _| {
        let stacked = Tensor::f_stack(&xs[1..], 0).plugin_err(ctx)?;
        // [..., n] → [n, ..., 1], contiguous like `stacked`.
        let weights = xs[0]
            .f_movedim([-1i64], [0i64])
            .and_then(|w| w.f_contiguous())
            .and_then(|w| w.f_unsqueeze(-1))
            .plugin_err(ctx)?;
        Ok(vec![stacked
            .f_mul(&weights)
            .and_then(|t| t.f_sum_dim_intlist([0i64].as_slice(), false, Kind::Float))
            .plugin_err(ctx)?])
    })?;
    Ok(combined)
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

#[cfg(test)]
mod tests {
    use super::*;
    use tli_plugin_kit::counter_rng::CounterRng;

    /// The selection run through the inputs (`forward_reals_graph`) against
    /// the plain one over `ξ = reals(x)` (`forward_graph`): outputs and
    /// every parameter's gradient, with one variable of non-adjacent
    /// columns, one of two adjacent columns, one of a single column.
    #[test]
    fn selection_through_the_inputs_equals_the_plain_selection() {
        let (d, groups) = (8, [0usize, 1, 1, 2, 0]);
        let mut rng = Rng::new(4);
        let reals = RealInputs::new(groups.len(), d, &mut rng, Device::Cpu)
            .unwrap()
            .grouped(&groups)
            .unwrap();
        // Non-zero biases, so that folding them is exercised.
        tch::no_grad(|| {
            let _ = reals.bias.shallow_clone().uniform_(-0.5, 0.5);
        });
        let vsn = VariableSelection::build(
            3,
            d,
            Some(d),
            0.1,
            &mut rng,
            Device::Cpu,
            "vsn",
            &mut |_| Ok(()),
        )
        .unwrap();
        let x = Tensor::randn([4, 6, groups.len() as i64], (Kind::Float, Device::Cpu));
        let context = Tensor::randn([4, d as i64], (Kind::Float, Device::Cpu));
        let probe = Tensor::randn([4, 6, d as i64], (Kind::Float, Device::Cpu));
        let mut params: Vec<&Tensor> = vsn
            .named_parameters("")
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        params.extend([&reals.weight, &reals.bias]);
        let run = |through_inputs: bool| {
            let mut dropout = CounterRng::new(9);
            let mut graph = Graph::direct(Some(&mut dropout));
            let c = graph.input(context.shallow_clone());
            let (out, weights) = if through_inputs {
                let x = graph.input(x.shallow_clone());
                vsn.forward_reals_graph(&mut graph, "vsn", &reals, "inputs", x, Some(c))
            } else {
                let xi = reals.forward(&x).unwrap();
                let xi = graph.input(xi);
                vsn.forward_graph(&mut graph, "vsn", xi, Some(c))
            }
            .unwrap();
            let recording = graph.finish();
            let (out, weights) = (
                recording.value(out).shallow_clone(),
                recording.value(weights).shallow_clone(),
            );
            let grads =
                Tensor::run_backward(&[(&out * &probe).sum(Kind::Float)], &params, false, false);
            (out, weights, grads)
        };
        let (a, wa, ga) = run(false);
        let (b, wb, gb) = run(true);
        let close = |a: &Tensor, b: &Tensor, what: &str| {
            let diff = (a - b).abs().max().double_value(&[]);
            let scale = a.abs().max().double_value(&[]).max(1e-3);
            assert!(
                diff <= 1e-5 * scale,
                "{what}: differs by {diff} (scale {scale})"
            );
        };
        close(&a, &b, "output");
        close(&wa, &wb, "selection weights");
        for (i, (ga, gb)) in ga.iter().zip(&gb).enumerate() {
            close(ga, gb, &format!("gradient of parameter {i}"));
        }
    }
}
