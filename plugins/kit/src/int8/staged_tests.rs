//! The staged INT8 step equals the one-pass step: a two-layer network
//! whose matrices are quantized (and whose biases are not), trained a few
//! steps each way from the same start with clipping active, ends with the
//! same int8 codes, 8-bit moments and f32 biases (up to the rare code a
//! last-bit difference in a gradient moves across a rounding boundary).

use super::*;
use crate::adam::AdamConfig;
use crate::counter_rng::CounterRng;
use crate::rng::Rng;
use crate::staged::{Graph, Node};
use tch::{Kind, Tensor};

struct TwoLayer {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl TwoLayer {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut make = |shape: &[i64], scale: f64| {
            let n: i64 = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|_| (rng.normal() * scale) as f32).collect();
            Tensor::from_slice(&v)
                .reshape(shape)
                .set_requires_grad(true)
        };
        Self {
            w1: make(&[96, 48], 0.15),
            b1: make(&[96], 0.1),
            w2: make(&[64, 96], 0.1),
            b2: make(&[64], 0.1),
        }
    }

    fn optimizer(&self) -> Int8AdamW {
        let decayed = vec![
            ("l1.weight".to_string(), &self.w1),
            ("l2.weight".to_string(), &self.w2),
        ];
        let rest = vec![
            ("l1.bias".to_string(), &self.b1),
            ("l2.bias".to_string(), &self.b2),
        ];
        let config = AdamConfig {
            learning_rate: 1e-2,
            weight_decay: 0.01,
            ..AdamConfig::default()
        };
        let options = Int8Options {
            min_numel: 4096,
            seed: 9,
            ..Int8Options::default()
        };
        Int8AdamW::new(config, &decayed, &rest, options).unwrap()
    }

    fn forward(&self, graph: &mut Graph<'_, '_>, x: &Tensor, y: &Tensor) -> Node {
        let (xn, yn) = (
            graph.input(x.shallow_clone()),
            graph.input(y.shallow_clone()),
        );
        let (w1, b1) = (self.w1.shallow_clone(), self.b1.shallow_clone());
        let [h] = graph
            .stage(&["l1"], &[xn], move |xs, rng| {
                let h = xs[0].linear(&w1, Some(&b1)).gelu("none");
                Ok(vec![rng.expect("dropout stream").dropout(&h, 0.2, true)?])
            })
            .unwrap();
        let (w2, b2) = (self.w2.shallow_clone(), self.b2.shallow_clone());
        let [out] = graph
            .stage(&["l2"], &[h], move |xs, _| {
                Ok(vec![xs[0].linear(&w2, Some(&b2))])
            })
            .unwrap();
        let [loss] = graph
            .stage(&[], &[out, yn], |xs, _| {
                Ok(vec![(&xs[0] - &xs[1]).square().mean(Kind::Float)])
            })
            .unwrap();
        loss
    }
}

fn data(seed: u64) -> (Tensor, Tensor) {
    let mut rng = Rng::new(seed);
    let mut make = |shape: &[i64]| {
        let n: i64 = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
        Tensor::from_slice(&v).reshape(shape)
    };
    (make(&[32, 48]), make(&[32, 64]))
}

fn equal_share(a: &Tensor, b: &Tensor) -> f64 {
    a.eq_tensor(b)
        .to_kind(Kind::Double)
        .mean(Kind::Double)
        .double_value(&[])
}

#[test]
fn the_staged_step_equals_the_one_pass_step() {
    let (x, y) = data(3);
    let one_pass = TwoLayer::new(1);
    let staged = TwoLayer::new(1);
    let mut opt_a = one_pass.optimizer();
    let mut opt_b = staged.optimizer();
    let (mut rng_a, mut rng_b) = (CounterRng::new(4), CounterRng::new(4));
    for step in 0..4 {
        // Large lr early so that clipping binds on some steps.
        let (lr, clip) = if step < 2 { (5e-2, 0.5) } else { (1e-2, 0.0) };
        opt_a.materialize().unwrap();
        let mut graph = Graph::direct(Some(&mut rng_a));
        let loss = one_pass.forward(&mut graph, &x, &y);
        let recording = graph.finish();
        let loss_a = recording.value(loss).double_value(&[]);
        let norm_a = opt_a
            .backward_step(recording.value(loss), lr, clip)
            .unwrap();

        let mut step_b = opt_b.staged_step().unwrap();
        let mut graph = Graph::staged(&mut step_b, Some(&mut rng_b));
        let loss = staged.forward(&mut graph, &x, &y);
        let recording = graph.finish();
        assert_eq!(
            staged.w1.numel(),
            0,
            "weights are released after each stage"
        );
        let loss_b = recording.value(loss).double_value(&[]);
        let norm_b = step_b.backward_update(&recording, loss, lr, clip).unwrap();
        let peak = step_b.peak_bytes();
        // One matrix and its gradient at a time (the larger: 64×96), never both layers'.
        assert!(peak >= 2 * 4 * 64 * 96, "peak {peak}");
        assert!(peak < 4 * (96 * 48 + 64 * 96) + 4 * 64 * 96, "peak {peak}");
        assert!(
            (loss_a - loss_b).abs() < 1e-5 * loss_a.abs(),
            "step {step}: loss {loss_a} vs {loss_b}"
        );
        assert!(
            (norm_a - norm_b).abs() < 1e-4 * norm_a,
            "step {step}: norm {norm_a} vs {norm_b}"
        );
        assert_eq!(rng_a.state(), rng_b.state());
    }
    assert_eq!(opt_a.state(), opt_b.state());
    assert!(opt_b.last_staged_transient_bytes() > 0);
    let (ta, tb) = (opt_a.named_tensors(), opt_b.named_tensors());
    for ((name, a), (_, b)) in ta.iter().zip(&tb) {
        if a.kind() == Kind::Float {
            let diff = (a - b).abs().max().double_value(&[]);
            assert!(diff < 1e-4, "{name} differs by {diff}");
        } else {
            let share = equal_share(a, b);
            assert!(share > 0.995, "{name}: only {share} of the codes agree");
        }
    }
}

#[test]
fn a_parameter_no_stage_names_is_refused() {
    let (x, y) = data(3);
    let model = TwoLayer::new(1);
    let mut opt = model.optimizer();
    let mut step = opt.staged_step().unwrap();
    let mut rng = CounterRng::new(4);
    let mut graph = Graph::staged(&mut step, Some(&mut rng));
    let xn = graph.input(x.shallow_clone());
    let w1 = model.w1.shallow_clone();
    let b1 = model.b1.shallow_clone();
    // Uses l1 but names no prefix: the weights are never made usable, nor trained.
    let [h] = graph
        .stage(&["l1.bias"], &[xn], move |xs, _| {
            Ok(vec![
                (xs[0].matmul(&xs[0].transpose(0, 1)).sum(Kind::Float) + b1.sum(Kind::Float)) * 1.0
                    + 0.0 * w1.numel() as f64,
            ])
        })
        .unwrap();
    let recording = graph.finish();
    let _ = y;
    let err = step.backward_update(&recording, h, 1e-2, 1.0).unwrap_err();
    assert!(err.to_string().contains("used by no stage"), "{err}");
}
