//! The staged backward pass gives the direct graph's gradients: a small
//! network with a shared input, a view between stages, a parameter used by
//! two stages, dropout and an integer input.

use super::*;
use crate::rng::Rng;
use tch::Device;

struct Params {
    names: Vec<String>,
    tensors: Vec<Tensor>,
    grads: Vec<Option<Tensor>>,
    entered: usize,
}

impl Params {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut make = |shape: &[i64]| {
            let n: i64 = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|_| (rng.uniform() - 0.5) as f32).collect();
            Tensor::from_slice(&v)
                .reshape(shape)
                .set_requires_grad(true)
        };
        let names = ["a.weight", "a.bias", "b.weight", "shared"];
        let tensors = vec![make(&[6, 4]), make(&[6]), make(&[3, 6]), make(&[3])];
        Self {
            names: names.iter().map(|s| s.to_string()).collect(),
            grads: (0..tensors.len()).map(|_| None).collect(),
            tensors,
            entered: 0,
        }
    }

    fn get(&self, name: &str) -> Tensor {
        let i = self.names.iter().position(|n| n == name).unwrap();
        self.tensors[i].shallow_clone()
    }
}

impl StageWeights for Params {
    fn enter(&mut self, prefixes: &[&str]) -> Result<Vec<(usize, Tensor)>, PluginError> {
        self.entered += 1;
        Ok(self
            .names
            .iter()
            .enumerate()
            .filter(|(_, n)| prefixes.iter().any(|p| under_prefix(n, p)))
            .map(|(i, _)| (i, self.tensors[i].shallow_clone()))
            .collect())
    }

    fn leave(&mut self, _: &[&str]) -> Result<(), PluginError> {
        Ok(())
    }

    fn gradient(&mut self, id: usize, gradient: Option<Tensor>) -> Result<(), PluginError> {
        if let Some(g) = gradient {
            self.grads[id] = Some(match self.grads[id].take() {
                None => g,
                Some(s) => s + g,
            });
        }
        Ok(())
    }
}

/// x → a (linear, dropout) → narrow → b (linear) + shared; the loss also
/// uses x and `shared` directly.
fn forward(
    graph: &mut Graph<'_, '_>,
    p: &Params,
    x: &Tensor,
    index: &Tensor,
) -> Result<Node, PluginError> {
    let xn = graph.input(x.shallow_clone());
    let ix = graph.input(index.shallow_clone());
    let (wa, ba) = (p.get("a.weight"), p.get("a.bias"));
    let [h] = graph.stage(&["a"], &[xn], move |xs, rng| {
        let h = xs[0].linear(&wa, Some(&ba)).tanh();
        Ok(vec![match rng {
            Some(r) => r.dropout(&h, 0.3, true)?,
            None => h,
        }])
    })?;
    let [wide, narrow] = graph.stage(&[], &[h], |xs, _| {
        Ok(vec![xs[0].shallow_clone(), xs[0].narrow(1, 0, 6)])
    })?;
    let (wb, shared) = (p.get("b.weight"), p.get("shared"));
    let [y] = graph.stage(&["b", "shared"], &[narrow, ix], move |xs, _| {
        let y = xs[0].linear::<Tensor>(&wb, None) + &shared;
        Ok(vec![y.index_select(0, &xs[1])])
    })?;
    let shared = p.get("shared");
    let [loss] = graph.stage(&["shared"], &[y, wide, xn], move |xs, _| {
        Ok(vec![
            xs[0].square().sum(Kind::Float)
                + xs[1].sin().sum(Kind::Float)
                + (&shared * xs[2].narrow(1, 0, 3)).sum(Kind::Float),
        ])
    })?;
    Ok(loss)
}

#[test]
fn staged_gradients_equal_the_direct_graphs() {
    let x = Tensor::from_slice(&(0..20).map(|i| i as f32 / 7.0 - 1.0).collect::<Vec<_>>())
        .reshape([5, 4]);
    let index = Tensor::from_slice(&[4i64, 0, 2, 2]);
    // Direct.
    let direct = Params::new(7);
    let mut rng = CounterRng::new(11);
    let mut graph = Graph::direct(Some(&mut rng));
    let loss = forward(&mut graph, &direct, &x, &index).unwrap();
    let recording = graph.finish();
    let direct_loss = recording.value(loss).double_value(&[]);
    let leaves: Vec<&Tensor> = direct.tensors.iter().collect();
    let direct_grads =
        Tensor::f_run_backward(&[recording.value(loss)], &leaves, false, false).unwrap();
    assert!(recording.stage_prefixes().is_empty());
    // Staged, twice (the second sweep must give the same again).
    let mut staged = Params::new(7);
    let weights = Params::new(7);
    let mut rng = CounterRng::new(11);
    let mut graph = Graph::staged(&mut staged, Some(&mut rng));
    let loss = forward(&mut graph, &weights, &x, &index).unwrap();
    let recording = graph.finish();
    assert_eq!(
        rng.state().counter,
        CounterRng::new(11).state().counter + 30
    );
    assert!(!recording.value(loss).requires_grad());
    assert!((recording.value(loss).double_value(&[]) - direct_loss).abs() < 1e-6);
    assert_eq!(recording.stage_prefixes().len(), 4);
    // The provider's leaves are `weights`' tensors, so gradients go to `staged`.
    let mut provider = Params::new(7);
    provider.tensors = weights.tensors.iter().map(|t| t.shallow_clone()).collect();
    for sweep in 0..2 {
        provider.grads = (0..4).map(|_| None).collect();
        recording.backward(loss, &mut provider).unwrap();
        for (i, g) in direct_grads.iter().enumerate() {
            let s = provider.grads[i]
                .as_ref()
                .expect("a gradient for every parameter");
            let diff = (s - g).abs().max().double_value(&[]);
            assert!(
                diff < 1e-5,
                "sweep {sweep}: {} differs by {diff}",
                provider.names[i]
            );
        }
    }
    assert_eq!(staged.entered, 4);
}

#[test]
fn a_direct_recording_refuses_a_staged_backward_pass() {
    let p = Params::new(1);
    let mut graph = Graph::direct(None);
    let x = Tensor::ones([5, 4], (Kind::Float, Device::Cpu));
    let loss = forward(&mut graph, &p, &x, &Tensor::from_slice(&[0i64])).unwrap();
    let recording = graph.finish();
    let mut provider = Params::new(1);
    let err = recording.backward(loss, &mut provider).unwrap_err();
    assert!(err.to_string().contains("no stage"), "{err}");
}

#[test]
fn prefixes_match_whole_path_segments() {
    assert!(under_prefix("encoder.weight", "encoder"));
    assert!(under_prefix("encoder", "encoder"));
    assert!(!under_prefix("encoder2.weight", "encoder"));
    assert!(!under_prefix("x", ""));
}
