//! A forward pass written as **stages**, run either directly (one autograd
//! graph, as plain tensor code would) or **staged**: weights made usable one
//! stage at a time and gradients computed stage by stage, so that a step
//! never holds more than one stage's f32 weights and gradients.
//!
//! A model writes its forward pass once against a [`Graph`]:
//!
//! ```text
//! let x = graph.input(batch_tensor);                      // data: no gradient
//! let [h] = graph.stage(&["encoder"], &[x], |xs, rng| …)?; // parameters named "encoder.*"
//! ```
//!
//! Each stage names the parameter prefixes it uses and maps input tensors
//! to output tensors (`Fn`, so it can run again). In **direct** mode
//! ([`Graph::direct`]) a stage simply runs: the outputs carry autograd
//! history and the caller back-propagates from the loss as usual.
//!
//! In **staged** mode ([`Graph::staged`]) the forward pass runs without
//! autograd. Before a stage runs, the [`StageWeights`] provider makes its
//! parameters usable (an INT8 optimizer dequantizes them) and afterwards
//! releases them; the stage's inputs, outputs and dropout-stream position
//! are kept. [`Recording::backward`] (after [`Graph::finish`]) then walks the stages last to first: it
//! makes the stage's weights usable again, re-runs the stage with autograd
//! on detached copies of its inputs (same dropout masks: the stream is
//! rewound to the saved position), back-propagates the gradient its outputs
//! received, adds the input gradients to the producing stages' outputs,
//! hands the parameter gradients to the provider and releases the weights.
//! The cost is one more forward pass per backward sweep (gradient
//! checkpointing at stage granularity); the gain is that the f32 transient
//! of a step is the largest stage's, not the model's.
//!
//! The gradients are those of the direct graph: each stage's backward pass
//! is seeded with `Σ outputs · their gradients`, whose gradient with
//! respect to each output is exactly that output's gradient.

use crate::counter_rng::{CounterRng, CounterRngState};
use crate::errors::TchResultExt;
use tch::{Kind, Tensor};
use tli_plugin_api::PluginError;

/// A value in a [`Graph`]: a data input or a stage output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node(usize);

/// What a stage computes: input tensors (and the dropout stream when
/// training) → output tensors. It must be deterministic given both.
pub type StageFn<'a> =
    Box<dyn Fn(&[Tensor], Option<&mut CounterRng>) -> Result<Vec<Tensor>, PluginError> + 'a>;

/// The parameters of a staged pass, named by prefix (`"encoder"` covers
/// `"encoder"` and `"encoder.*"`).
pub trait StageWeights {
    /// Makes the parameters under `prefixes` usable for a forward pass and
    /// returns the leaves gradients are wanted for, each with an id of the
    /// provider's choosing.
    fn enter(&mut self, prefixes: &[&str]) -> Result<Vec<(usize, Tensor)>, PluginError>;

    /// Releases what [`enter`](Self::enter) made usable.
    fn leave(&mut self, prefixes: &[&str]) -> Result<(), PluginError>;

    /// One stage's gradient of leaf `id` (`None`: the stage's outputs did
    /// not depend on it). Called once per stage that entered the leaf, in
    /// backward order.
    fn gradient(&mut self, id: usize, gradient: Option<Tensor>) -> Result<(), PluginError>;
}

/// Does parameter `name` fall under `prefix`?
pub fn under_prefix(name: &str, prefix: &str) -> bool {
    !prefix.is_empty()
        && name.starts_with(prefix)
        && (name.len() == prefix.len() || name.as_bytes()[prefix.len()] == b'.')
}

struct Stage<'a> {
    prefixes: Vec<String>,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
    /// The dropout stream's position before the stage ran.
    rng: Option<CounterRngState>,
    run: StageFn<'a>,
}

/// A forward pass in stages (see the module docs).
pub struct Graph<'a, 'w> {
    /// `Some` in staged mode.
    weights: Option<&'w mut dyn StageWeights>,
    rng: Option<&'w mut CounterRng>,
    values: Vec<Tensor>,
    /// Data inputs: no gradient flows to them.
    constant: Vec<bool>,
    stages: Vec<Stage<'a>>,
}

impl<'a, 'w> Graph<'a, 'w> {
    /// Stages run at once with autograd; `rng` is the dropout stream (`None`: no dropout).
    pub fn direct(rng: Option<&'w mut CounterRng>) -> Self {
        Self {
            weights: None,
            rng,
            values: Vec::new(),
            constant: Vec::new(),
            stages: Vec::new(),
        }
    }

    /// Stages run without autograd, weights made usable one stage at a time
    /// by `weights`; [`backward`](Self::backward) computes the gradients.
    pub fn staged(weights: &'w mut dyn StageWeights, rng: Option<&'w mut CounterRng>) -> Self {
        Self {
            weights: Some(weights),
            ..Self::direct(rng)
        }
    }

    pub fn is_staged(&self) -> bool {
        self.weights.is_some()
    }

    /// A data input (no gradient is computed for it).
    pub fn input(&mut self, value: Tensor) -> Node {
        self.values.push(value);
        self.constant.push(true);
        Node(self.values.len() - 1)
    }

    /// The tensor of `node` (in staged mode, without autograd history).
    pub fn value(&self, node: Node) -> &Tensor {
        &self.values[node.0]
    }

    /// Runs a stage using the parameters under `prefixes` on `inputs`;
    /// returns its `N` outputs.
    pub fn stage<const N: usize>(
        &mut self,
        prefixes: &[&str],
        inputs: &[Node],
        run: impl Fn(&[Tensor], Option<&mut CounterRng>) -> Result<Vec<Tensor>, PluginError> + 'a,
    ) -> Result<[Node; N], PluginError> {
        let first = self.stage_outputs(prefixes, inputs, N, run)?;
        Ok(std::array::from_fn(|i| Node(first + i)))
    }

    /// As [`stage`](Self::stage), for a number of outputs known only at run
    /// time (`count`), e.g. one per input variable.
    pub fn stage_n(
        &mut self,
        prefixes: &[&str],
        inputs: &[Node],
        count: usize,
        run: impl Fn(&[Tensor], Option<&mut CounterRng>) -> Result<Vec<Tensor>, PluginError> + 'a,
    ) -> Result<Vec<Node>, PluginError> {
        let first = self.stage_outputs(prefixes, inputs, count, run)?;
        Ok((first..first + count).map(Node).collect())
    }

    /// Runs a stage that must return `count` outputs; the index of its first.
    fn stage_outputs(
        &mut self,
        prefixes: &[&str],
        inputs: &[Node],
        count: usize,
        run: impl Fn(&[Tensor], Option<&mut CounterRng>) -> Result<Vec<Tensor>, PluginError> + 'a,
    ) -> Result<usize, PluginError> {
        let args: Vec<Tensor> = inputs
            .iter()
            .map(|n| self.values[n.0].shallow_clone())
            .collect();
        let rng_before = self.rng.as_ref().map(|r| r.state());
        let outputs = match self.weights.as_deref_mut() {
            None => run(&args, self.rng.as_deref_mut())?,
            Some(weights) => {
                weights.enter(prefixes)?;
                let result = tch::no_grad(|| run(&args, self.rng.as_deref_mut()));
                weights.leave(prefixes)?;
                result?
            }
        };
        if outputs.len() != count {
            return Err(PluginError::other(format!(
                "stage {prefixes:?} returned {} output(s), {count} expected",
                outputs.len()
            )));
        }
        let first = self.values.len();
        for t in outputs {
            self.values.push(t);
            self.constant.push(false);
        }
        if self.is_staged() {
            self.stages.push(Stage {
                prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
                inputs: inputs.iter().map(|n| n.0).collect(),
                outputs: (first..first + count).collect(),
                rng: rng_before,
                run: Box::new(run),
            });
        }
        Ok(first)
    }

    /// Ends the forward pass: what a staged backward pass needs (the
    /// provider and the dropout stream are free again).
    pub fn finish(self) -> Recording<'a> {
        Recording {
            values: self.values,
            constant: self.constant,
            stages: self.stages,
        }
    }
}

/// A finished forward pass: its values and (staged mode) its stages.
pub struct Recording<'a> {
    values: Vec<Tensor>,
    constant: Vec<bool>,
    stages: Vec<Stage<'a>>,
}

impl Recording<'_> {
    /// The tensor of `node`.
    pub fn value(&self, node: Node) -> &Tensor {
        &self.values[node.0]
    }

    /// Every stage's parameter prefixes, in forward order (empty when the
    /// graph ran directly).
    pub fn stage_prefixes(&self) -> Vec<Vec<String>> {
        self.stages.iter().map(|s| s.prefixes.clone()).collect()
    }

    /// One backward sweep from the scalar `loss` of a staged pass: every
    /// parameter gradient goes to `weights`'s
    /// [`gradient`](StageWeights::gradient). May run more than once (each
    /// sweep recomputes the stages; the forward values are kept).
    pub fn backward(&self, loss: Node, weights: &mut dyn StageWeights) -> Result<(), PluginError> {
        let ctx = "staged backward pass";
        if self.stages.is_empty() {
            return Err(PluginError::other(
                "staged backward pass over no stage (a direct graph? call backward on its loss)",
            ));
        }
        if self.values[loss.0].numel() != 1 {
            return Err(PluginError::other(format!(
                "staged backward pass: the loss has shape {:?}, a scalar is needed",
                self.values[loss.0].size()
            )));
        }
        let mut grads: Vec<Option<Tensor>> = (0..self.values.len()).map(|_| None).collect();
        grads[loss.0] = Some(self.values[loss.0].f_ones_like().plugin_err(ctx)?);
        for stage in self.stages.iter().rev() {
            let prefixes: Vec<&str> = stage.prefixes.iter().map(String::as_str).collect();
            let leaves = weights.enter(&prefixes)?;
            let seeded: Vec<(usize, Tensor)> = stage
                .outputs
                .iter()
                .enumerate()
                .filter_map(|(k, &v)| grads[v].take().map(|g| (k, g)))
                .collect();
            if seeded.is_empty() {
                for (id, _) in &leaves {
                    weights.gradient(*id, None)?;
                }
                weights.leave(&prefixes)?;
                continue;
            }
            // Inputs that gradients flow to become leaves of this stage's graph.
            let mut wanted: Vec<usize> = Vec::new();
            let args: Vec<Tensor> = stage
                .inputs
                .iter()
                .map(|&v| {
                    let value = &self.values[v];
                    if self.constant[v] || !is_floating(value.kind()) {
                        value.shallow_clone()
                    } else {
                        wanted.push(v);
                        value.detach().set_requires_grad(true)
                    }
                })
                .collect();
            let differentiable: Vec<&Tensor> = stage
                .inputs
                .iter()
                .zip(&args)
                .filter(|(v, _)| wanted.contains(v))
                .map(|(_, t)| t)
                .collect();
            let mut rng = stage.rng.map(CounterRng::from_state);
            let outputs = tch::with_grad(|| (stage.run)(&args, rng.as_mut()))?;
            let mut surrogate: Option<Tensor> = None;
            for (k, grad) in &seeded {
                let out = &outputs[*k];
                if !out.requires_grad() {
                    continue;
                }
                let term = out
                    .f_mul(grad)
                    .and_then(|t| t.f_sum(Kind::Float))
                    .plugin_err(ctx)?;
                surrogate = Some(match surrogate {
                    None => term,
                    Some(s) => s.f_add(&term).plugin_err(ctx)?,
                });
            }
            drop(seeded);
            let mut targets: Vec<&Tensor> = differentiable.clone();
            targets.extend(leaves.iter().map(|(_, t)| t));
            let results = match (&surrogate, targets.is_empty()) {
                (Some(s), false) => {
                    Tensor::f_run_backward(&[s], &targets, false, false).plugin_err(ctx)?
                }
                _ => Vec::new(),
            };
            drop(outputs);
            drop(surrogate);
            let mut results = results.into_iter().map(|g| g.defined().then_some(g));
            for (v, _) in stage.inputs.iter().zip(&args) {
                if !wanted.contains(v) {
                    continue;
                }
                // One gradient per distinct differentiable input position.
                if let Some(Some(g)) = results.next() {
                    grads[*v] = Some(match grads[*v].take() {
                        None => g,
                        Some(sum) => sum.f_add(&g).plugin_err(ctx)?,
                    });
                }
            }
            for (id, _) in &leaves {
                weights.gradient(*id, results.next().flatten())?;
            }
            weights.leave(&prefixes)?;
        }
        Ok(())
    }
}

fn is_floating(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16
    )
}

#[cfg(test)]
#[path = "staged_tests.rs"]
mod tests;
