//! The network on random inputs: output shapes, selection weights that sum
//! to one, attention that never looks ahead, and both precisions learning a
//! known-future effect.

use tch::{Device, Kind, Tensor};
use tli_plugin_kit::adam::AdamConfig;
use tli_plugin_kit::counter_rng::CounterRng;
use tli_plugin_kit::flat_adamw::FlatAdamW;
use tli_plugin_kit::int8::{Int8AdamW, Int8Options};
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_tft::{Tft, TftBatch, TftShape};

pub fn shape() -> TftShape {
    TftShape {
        hidden: 16,
        heads: 4,
        lstm_layers: 1,
        dropout: 0.1,
        observed: 3,
        known: 2,
        static_reals: 1,
        assets: 3,
        horizons: 4,
        outputs: 3,
        groups: Default::default(),
    }
}

fn random(shape: &[i64], rng: &mut Rng) -> Tensor {
    let n: i64 = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
    Tensor::from_slice(&v).reshape(shape)
}

pub fn batch(s: &TftShape, b: i64, t: i64, rng: &mut Rng) -> TftBatch {
    let assets: Vec<i64> = (0..b).map(|i| i % s.assets as i64).collect();
    TftBatch {
        past: random(&[b, t, (s.observed + s.known) as i64], rng),
        future: random(&[b, s.horizons as i64, s.known as i64], rng),
        static_reals: random(&[b, s.static_reals as i64], rng),
        asset: Tensor::from_slice(&assets),
    }
}

#[test]
fn forward_gives_forecasts_and_interpretability_outputs() {
    let s = shape();
    let mut rng = Rng::new(1);
    let model = Tft::new(&s, &mut rng, Device::Cpu).unwrap();
    let x = batch(&s, 5, 12, &mut rng);
    let mut dropout = CounterRng::new(2);
    let out = model.forward(&x, Some(&mut dropout)).unwrap();
    assert_eq!(out.forecast.size(), vec![5, 4, 3]);
    assert_eq!(out.static_weights.size(), vec![5, 2]);
    assert_eq!(out.past_weights.size(), vec![5, 12, 6]);
    assert_eq!(out.future_weights.size(), vec![5, 4, 3]);
    assert_eq!(out.attention.size(), vec![5, 4, 4, 16]);
    for w in [
        &out.static_weights,
        &out.past_weights,
        &out.future_weights,
        &out.attention,
    ] {
        let sums = w.sum_dim_intlist([-1i64].as_slice(), false, Kind::Float);
        let err = (sums - 1.0).abs().max().double_value(&[]);
        assert!(err < 1e-5, "weights sum to 1 within {err}");
    }
    // Evaluation (no dropout) is deterministic.
    let a = model.forward(&x, None).unwrap().forecast;
    let b = model.forward(&x, None).unwrap().forecast;
    assert!(a.equal(&b));
    assert!(model.parameter_count() > 10_000);
}

#[test]
fn a_horizon_never_sees_later_future_bars() {
    let s = shape();
    let mut rng = Rng::new(3);
    let model = Tft::new(&s, &mut rng, Device::Cpu).unwrap();
    let x = batch(&s, 2, 10, &mut rng);
    let base = model.forward(&x, None).unwrap();
    // Change the known inputs of future bar 2 (horizon 3): horizons 1 and 2 must not move.
    let changed = TftBatch {
        future: x.future.copy(),
        past: x.past.shallow_clone(),
        static_reals: x.static_reals.shallow_clone(),
        asset: x.asset.shallow_clone(),
    };
    let _ = changed.future.narrow(1, 2, 1).g_add_scalar_(5.0);
    let out = model.forward(&changed, None).unwrap();
    let diff = |h: i64| {
        (out.forecast.narrow(1, h, 1) - base.forecast.narrow(1, h, 1))
            .abs()
            .max()
            .double_value(&[])
    };
    assert_eq!(diff(0), 0.0);
    assert_eq!(diff(1), 0.0);
    assert!(diff(2) > 1e-4, "horizon 3 reads its own bar");
    // Attention weights of decoder bar k on keys after it are zero.
    let after = base.attention.narrow(2, 0, 1).narrow(3, 11, 3);
    assert_eq!(after.abs().max().double_value(&[]), 0.0);
}

/// Targets that depend only on a known-future input of the same bar.
pub fn planted(s: &TftShape, rng: &mut Rng) -> (TftBatch, Tensor) {
    let x = batch(s, 64, 8, rng);
    let y = x.future.narrow(2, 0, 1).squeeze_dim(2) * 0.8;
    (x, y)
}

pub fn pinball(forecast: &Tensor, y: &Tensor) -> Tensor {
    let q = Tensor::from_slice(&[0.1f32, 0.5, 0.9]);
    let e = y.unsqueeze(-1) - forecast;
    let loss = (&e * &q).maximum(&(&e * (q - 1.0)));
    loss.mean(Kind::Float)
}

#[test]
fn fp32_and_int8_both_learn_a_known_future_effect() {
    let mut s = shape();
    s.hidden = 32; // 32×64 GLU matrices and larger: INT8 applies to them
    s.dropout = 0.0;
    let mut data_rng = Rng::new(5);
    let (x, y) = planted(&s, &mut data_rng);
    let config = AdamConfig {
        learning_rate: 3e-3,
        ..AdamConfig::default()
    };
    let steps = 150;

    let fp32 = Tft::new(&s, &mut Rng::new(7), Device::Cpu).unwrap();
    let initial = pinball(&fp32.forward(&x, None).unwrap().forecast, &y).double_value(&[]);
    let (decayed, rest) = fp32.decay_groups();
    let d: Vec<&Tensor> = decayed.iter().map(|(_, t)| *t).collect();
    let r: Vec<&Tensor> = rest.iter().map(|(_, t)| *t).collect();
    let mut opt = FlatAdamW::with_decay_groups(config, &d, &r).unwrap();
    for _ in 0..steps {
        let loss = pinball(&fp32.forward(&x, None).unwrap().forecast, &y);
        let _ = opt.backward_step(&loss, 3e-3, 1.0).unwrap();
    }
    let fp32_loss = pinball(&fp32.forward(&x, None).unwrap().forecast, &y).double_value(&[]);

    let int8 = Tft::new(&s, &mut Rng::new(7), Device::Cpu).unwrap();
    let (decayed, rest) = int8.decay_groups();
    let options = Int8Options {
        min_numel: 1024,
        seed: 11,
        ..Int8Options::default()
    };
    let mut opt = Int8AdamW::new(config, &decayed, &rest, options).unwrap();
    assert!(
        opt.quantized_names().len() > 20,
        "{:?}",
        opt.quantized_names()
    );
    for _ in 0..steps {
        opt.materialize().unwrap();
        let loss = pinball(&int8.forward(&x, None).unwrap().forecast, &y);
        opt.backward_step(&loss, 3e-3, 1.0).unwrap();
    }
    opt.materialize().unwrap();
    let int8_loss = pinball(&int8.forward(&x, None).unwrap().forecast, &y).double_value(&[]);
    eprintln!("pinball: start {initial:.4}, fp32 {fp32_loss:.4}, int8 {int8_loss:.4}");
    assert!(fp32_loss < 0.5 * initial, "fp32 {fp32_loss} from {initial}");
    assert!(int8_loss < 0.5 * initial, "int8 {int8_loss} from {initial}");
    // Both fit the effect to a few percent of the start; INT8's floor is the
    // quantization noise (a few thousandths here).
    assert!(
        int8_loss < 0.05 * initial,
        "int8 {int8_loss} vs fp32 {fp32_loss}"
    );
}

#[test]
fn the_analytic_shapes_are_the_models() {
    for (static_reals, heads, layers, known) in [(0, 1, 1, 0), (2, 4, 2, 3)] {
        let s = TftShape {
            static_reals,
            heads,
            lstm_layers: layers,
            known,
            ..shape()
        };
        let model = Tft::new(&s, &mut Rng::new(1), Device::Cpu).unwrap();
        let built: Vec<Vec<i64>> = model.parameters().iter().map(|t| t.size()).collect();
        assert_eq!(built, tli_plugin_tft::memory::tensor_shapes(&s));
        assert_eq!(
            model.parameter_count(),
            tli_plugin_tft::memory::parameter_count(&s)
        );
    }
}

/// A categorical input's one-hot columns are one variable: one selection
/// weight, and its vector is the sum of its columns' (an embedding).
#[test]
fn grouped_one_hot_columns_are_one_variable() {
    use tli_plugin_tft::InputGroups;
    // Past: 3 observed + 2 known columns; the last two observed and both
    // known columns are one categorical each. Future: the known pair is one.
    let s = TftShape {
        groups: InputGroups {
            past: vec![0, 1, 1, 2, 2],
            future: vec![0, 0],
            statics: Vec::new(),
        },
        ..shape()
    };
    assert_eq!((s.past_variables(), s.future_variables()), (4, 2));
    let model = Tft::new(&s, &mut Rng::new(3), Device::Cpu).unwrap();
    let built: Vec<Vec<i64>> = model.parameters().iter().map(|t| t.size()).collect();
    assert_eq!(built, tli_plugin_tft::memory::tensor_shapes(&s));
    let mut rng = Rng::new(9);
    let batch = TftBatch {
        past: random(&[2, 6, 5], &mut rng),
        future: random(&[2, 4, 2], &mut rng),
        static_reals: random(&[2, 1], &mut rng),
        asset: Tensor::from_slice(&[0i64, 2]),
    };
    let out = model.forward(&batch, None).unwrap();
    assert_eq!(out.past_weights.size(), vec![2, 6, 4]);
    assert_eq!(out.future_weights.size(), vec![2, 4, 2]);
    // The weights of each bar still add up to 1 over the variables.
    let sums = out
        .past_weights
        .sum_dim_intlist([-1i64].as_slice(), false, tch::Kind::Float);
    assert!((sums - 1.0).abs().max().double_value(&[]) < 1e-5);
}
