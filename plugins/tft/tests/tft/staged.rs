//! The TFT's staged INT8 step (every block a stage, weights usable one
//! block at a time) equals its one-pass INT8 step, with dropout and
//! clipping on, and holds a fraction of the one-pass step's f32 transient.
//! Each step starts from the one-pass model's state: stochastic rounding
//! amplifies the rare code that a last-bit gradient difference flips, so
//! two independent trajectories drift apart within a few steps.

use crate::network::{pinball, planted, shape};
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::adam::AdamConfig;
use tli_plugin_kit::counter_rng::CounterRng;
use tli_plugin_kit::int8::{Int8AdamW, Int8Options, Prequantized};
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::staged::Graph;
use tli_plugin_tft::Tft;

fn optimizer(model: &Tft) -> Int8AdamW {
    let (decayed, rest) = model.decay_groups();
    let config = AdamConfig {
        learning_rate: 3e-3,
        weight_decay: 0.01,
        ..AdamConfig::default()
    };
    let options = Int8Options {
        min_numel: 1024,
        seed: 11,
        ..Int8Options::default()
    };
    Int8AdamW::new(config, &decayed, &rest, options).unwrap()
}

#[test]
fn the_staged_tft_step_equals_the_one_pass_step() {
    let mut s = shape();
    s.hidden = 32;
    let (x, y) = planted(&s, &mut Rng::new(5));
    let one_pass = Tft::new(&s, &mut Rng::new(7), Device::Cpu).unwrap();
    let staged = Tft::new(&s, &mut Rng::new(7), Device::Cpu).unwrap();
    let (mut opt_a, mut opt_b) = (optimizer(&one_pass), optimizer(&staged));
    let mut drop_a = CounterRng::new(3);
    let mut peak = 0;
    for step in 0..5 {
        let clip = if step % 2 == 0 { 0.05 } else { 0.0 };
        // Each step starts from the one-pass model's state, so that rare
        // rounding flips cannot compound into a different trajectory.
        let tensors: Vec<(String, Tensor)> = opt_a.named_tensors();
        opt_b.load(&tensors, opt_a.state()).unwrap();
        let mut drop_b = drop_a.clone();
        opt_a.materialize().unwrap();
        let out = one_pass.forward(&x, Some(&mut drop_a)).unwrap();
        let loss_a = pinball(&out.forecast, &y);
        let value_a = loss_a.double_value(&[]);
        let norm_a = opt_a.backward_step(&loss_a, 3e-3, clip).unwrap();

        let mut step_b = opt_b.staged_step().unwrap();
        let mut graph = Graph::staged(&mut step_b, Some(&mut drop_b));
        let out = staged.forward_graph(&mut graph, &x).unwrap();
        let target = graph.input(y.shallow_clone());
        let [loss] = graph
            .stage(&[], &[out.forecast, target], |xs, _| {
                Ok(vec![pinball(&xs[0], &xs[1])])
            })
            .unwrap();
        let recording = graph.finish();
        let value_b = recording.value(loss).double_value(&[]);
        let norm_b = step_b
            .backward_update(&recording, loss, 3e-3, clip)
            .unwrap();
        peak = peak.max(step_b.peak_bytes());
        let mut worst: f64 = 1.0;
        for ((_, a), (_, b)) in opt_a.named_tensors().iter().zip(&opt_b.named_tensors()) {
            if a.kind() != Kind::Float {
                worst = worst.min(
                    a.eq_tensor(b)
                        .to_kind(Kind::Double)
                        .mean(Kind::Double)
                        .double_value(&[]),
                );
            }
        }
        assert!(
            worst > 0.999,
            "step {step}: only {worst} of some tensor's codes agree"
        );
        assert!(
            (value_a - value_b).abs() <= 1e-6 * value_a.abs(),
            "step {step}: loss {value_a} vs {value_b}"
        );
        assert!(
            (norm_a - norm_b).abs() <= 1e-6 * norm_a,
            "step {step}: norm {norm_a} vs {norm_b}"
        );
        assert_eq!(drop_a.state(), drop_b.state());
    }
    assert_eq!(opt_a.state(), opt_b.state());
    // The one-pass transient holds every quantized weight twice (copy and
    // gradient); the staged peak holds one block's.
    let one_pass_transient = opt_a.transient_bytes();
    assert!(
        peak * 3 < one_pass_transient,
        "staged peak {peak} vs one-pass transient {one_pass_transient}"
    );
    // Both models now forecast alike.
    opt_a.materialize().unwrap();
    let mut step_b = opt_b.staged_step().unwrap();
    let mut graph = Graph::staged(&mut step_b, None);
    let out_b = staged.forward_graph(&mut graph, &x).unwrap();
    let forecast_b = graph.finish().value(out_b.forecast).shallow_clone();
    let forecast_a = tch::no_grad(|| one_pass.forward(&x, None).unwrap().forecast);
    let diff = (&forecast_a - &forecast_b).abs().max().double_value(&[]);
    let scale = forecast_a.abs().max().double_value(&[]);
    assert!(
        diff < 0.02 * scale,
        "forecasts differ by {diff} (scale {scale})"
    );
}

#[test]
fn quantizing_while_building_equals_quantizing_after() {
    let mut s = shape();
    s.hidden = 32;
    let options = Int8Options {
        min_numel: 1024,
        seed: 11,
        ..Int8Options::default()
    };
    let after = Tft::new(&s, &mut Rng::new(7), Device::Cpu).unwrap();
    let opt_after = optimizer(&after);
    let mut prequantized = Prequantized::new(options);
    let mut blocks = 0;
    let built = Tft::build(&s, &mut Rng::new(7), Device::Cpu, &mut |block| {
        blocks += 1;
        prequantized.take(block)
    })
    .unwrap();
    assert!(blocks > 20, "{blocks} blocks");
    let (decayed, rest) = built.decay_groups();
    let config = AdamConfig {
        learning_rate: 3e-3,
        weight_decay: 0.01,
        ..AdamConfig::default()
    };
    let opt_built = Int8AdamW::with_prequantized(config, &decayed, &rest, prequantized).unwrap();
    assert_eq!(opt_after.quantized_names(), opt_built.quantized_names());
    for ((name, a), (other, b)) in opt_after
        .named_tensors()
        .iter()
        .zip(&opt_built.named_tensors())
    {
        assert_eq!(name, other);
        assert!(a.equal(b), "{name} differs");
    }
    // A block handed over twice is refused.
    let mut twice = Prequantized::new(options);
    let model = Tft::new(&s, &mut Rng::new(7), Device::Cpu).unwrap();
    let (decayed, _) = model.decay_groups();
    let first: Vec<(String, &Tensor)> = decayed.iter().take(1).cloned().collect();
    twice.take(first.clone()).unwrap();
    let err = twice.take(first).unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
}
