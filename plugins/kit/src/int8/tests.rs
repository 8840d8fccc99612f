//! Tests of the INT8 training pieces working together: the host and tensor
//! updates agree, INT8 training tracks f32 training, tiny updates survive
//! stochastic rounding, checkpoints resume exactly, and the bytes shrink.

use super::blockwise_adam::{
    blocks_for, update_host, update_tensors, DeviceMaps, HostState, TensorState, UpdateScalars,
};
use super::*;
use crate::adam::AdamConfig;
use crate::counter_rng::CounterRng;
use crate::flat_adamw::FlatAdamW;
use crate::rng::Rng;
use tch::{Device, Kind, Tensor};

pub(super) fn random(shape: &[i64], scale: f64, rng: &mut Rng) -> Tensor {
    let n: i64 = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| (rng.normal() * scale) as f32).collect();
    Tensor::from_slice(&v).reshape(shape)
}

pub(super) fn scalars(step: i32, grad_scale: f32) -> UpdateScalars {
    let c = AdamConfig::default();
    UpdateScalars {
        beta1: c.beta1 as f32,
        beta2: c.beta2 as f32,
        eps: c.eps as f32,
        lr: 1e-2,
        weight_decay: 0.01,
        bias1: (1.0 - c.beta1.powi(step)) as f32,
        sqrt_bias2: (1.0 - c.beta2.powi(step)).sqrt() as f32,
        grad_scale,
    }
}

pub(super) fn to_vec<T: tch::kind::Element + Copy + Default>(t: &Tensor) -> Vec<T> {
    let mut out = vec![T::default(); t.numel()];
    t.reshape([-1]).copy_data(&mut out, t.numel());
    out
}

#[test]
fn host_and_tensor_updates_agree() {
    // 37 × 300 = 11100 elements: rows and blocks do not line up, the last block is short.
    let (rows, cols) = (37i64, 300i64);
    let n = rows * cols;
    let blocks = blocks_for(n as usize) as i64;
    let mut rng = Rng::new(1);
    let start = Int8Weight::quantize_nearest(&random(&[rows, cols], 0.1, &mut rng)).unwrap();
    let zero_m = DynamicMap::signed().zero_code() as i64;
    let zero_v = DynamicMap::unsigned().zero_code() as i64;
    let state = || {
        (
            Tensor::full([n], zero_m, (Kind::Uint8, Device::Cpu)),
            Tensor::full([n], zero_v, (Kind::Uint8, Device::Cpu)),
            Tensor::zeros([blocks], (Kind::Float, Device::Cpu)),
            Tensor::zeros([blocks], (Kind::Float, Device::Cpu)),
        )
    };
    let (hm, hv, hma, hva) = state();
    let (tm, tv, tma, tva) = state();
    let mut host_w = Int8Weight {
        codes: start.codes.copy(),
        scales: start.scales.copy(),
    };
    let mut tensor_w = Int8Weight {
        codes: start.codes.copy(),
        scales: start.scales.copy(),
    };
    let (mut host_rng, mut tensor_rng) = (CounterRng::new(9), CounterRng::new(9));
    let maps = DeviceMaps::new(Device::Cpu).unwrap();
    for step in 1..=20 {
        let grad = random(&[rows, cols], 1.0, &mut rng);
        let s = scalars(step, 0.5);
        let mut g = to_vec::<f32>(&grad);
        let mut codes = to_vec::<i8>(&host_w.codes);
        let mut scales = to_vec::<f32>(&host_w.scales);
        let (mut mc, mut vc) = (to_vec::<u8>(&hm), to_vec::<u8>(&hv));
        let (mut ma, mut va) = (to_vec::<f32>(&hma), to_vec::<f32>(&hva));
        let state = HostState {
            m_codes: &mut mc,
            v_codes: &mut vc,
            m_absmax: &mut ma,
            v_absmax: &mut va,
        };
        // Three threads: the split falls inside rows and inside the block range.
        update_host(
            &mut g,
            &mut codes,
            &mut scales,
            cols as usize,
            state,
            &s,
            &mut host_rng,
            3,
        )
        .unwrap();
        host_w.codes = Tensor::from_slice(&codes).reshape([rows, cols]);
        host_w.scales = Tensor::from_slice(&scales);
        hm.shallow_clone().copy_(&Tensor::from_slice(&mc));
        hv.shallow_clone().copy_(&Tensor::from_slice(&vc));
        hma.shallow_clone().copy_(&Tensor::from_slice(&ma));
        hva.shallow_clone().copy_(&Tensor::from_slice(&va));
        let state = TensorState {
            m_codes: &tm,
            v_codes: &tv,
            m_absmax: &tma,
            v_absmax: &tva,
        };
        update_tensors(&grad, &mut tensor_w, state, &maps, &s, &mut tensor_rng).unwrap();
    }
    assert_eq!(host_rng.state(), tensor_rng.state());
    let mismatch = |a: &Tensor, b: &Tensor| {
        a.ne_tensor(b)
            .to_kind(Kind::Double)
            .mean(Kind::Double)
            .double_value(&[])
    };
    // Rounding differences between the vectorised kernels and the scalar loop can flip
    // an encoding or a stochastic rounding now and then, never more.
    for (what, a, b) in [
        ("weight codes", &host_w.codes, &tensor_w.codes),
        ("m codes", &hm, &tm),
        ("v codes", &hv, &tv),
    ] {
        let m = mismatch(a, b);
        assert!(m < 1e-3, "{what}: {m} of the codes differ");
    }
    let diff = (host_w.dequantize().unwrap() - tensor_w.dequantize().unwrap())
        .abs()
        .max()
        .double_value(&[]);
    let step = host_w.scales.max().double_value(&[]);
    assert!(
        diff <= step * 1.01,
        "weights differ by {diff}, a code step is {step}"
    );
    let absmax_rel = ((&hma - &tma).abs() / (tma.abs() + 1e-30))
        .max()
        .double_value(&[]);
    assert!(absmax_rel < 1e-5, "m absmax differ by {absmax_rel}");
}

/// Parameters by name.
pub(super) type Named<'a> = Vec<(String, &'a Tensor)>;

/// A linear regression `y = x·Wᵀ` with a 64×128 weight (8192 elements: quantized) and a bias.
pub(super) struct Regression {
    pub(super) weight: Tensor,
    pub(super) bias: Tensor,
}

impl Regression {
    pub(super) fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        Self {
            weight: (random(&[64, 128], 0.05, &mut rng)).set_requires_grad(true),
            bias: Tensor::zeros([64], (Kind::Float, Device::Cpu)).set_requires_grad(true),
        }
    }

    pub(super) fn loss(&self, x: &Tensor, y: &Tensor) -> Tensor {
        (x.linear(&self.weight, Some(&self.bias)) - y)
            .square()
            .mean(Kind::Float)
    }

    pub(super) fn named(&self) -> (Named<'_>, Named<'_>) {
        (
            vec![("weight".to_string(), &self.weight)],
            vec![("bias".to_string(), &self.bias)],
        )
    }
}

/// The loss after `steps` f32 AdamW steps (lr 1e-2) of `Regression::new(4)`.
pub(super) fn f32_reference_loss(data: &(Tensor, Tensor), steps: usize) -> f64 {
    let reference = Regression::new(4);
    let config = AdamConfig {
        learning_rate: 1e-2,
        ..AdamConfig::default()
    };
    let mut f32_opt =
        FlatAdamW::with_decay_groups(config, &[&reference.weight], &[&reference.bias]).unwrap();
    let mut f32_loss = 0.0;
    for _ in 0..steps {
        let loss = reference.loss(&data.0, &data.1);
        f32_loss = loss.double_value(&[]);
        let _ = f32_opt.backward_step(&loss, 1e-2, 1.0).unwrap();
    }
    f32_loss
}

pub(super) fn regression_data(seed: u64) -> (Tensor, Tensor) {
    let mut rng = Rng::new(seed);
    let target = random(&[64, 128], 0.2, &mut rng);
    let x = random(&[256, 128], 1.0, &mut rng);
    let y = x.linear(&target, None::<Tensor>);
    (x, y)
}

fn int8_optimizer(model: &Regression) -> Int8AdamW {
    let (decayed, rest) = model.named();
    let config = AdamConfig {
        learning_rate: 1e-2,
        ..AdamConfig::default()
    };
    let options = Int8Options {
        min_numel: 4096,
        seed: 5,
        ..Int8Options::default()
    };
    Int8AdamW::new(config, &decayed, &rest, options).unwrap()
}

fn int8_train(
    model: &Regression,
    opt: &mut Int8AdamW,
    data: &(Tensor, Tensor),
    steps: usize,
) -> f64 {
    let mut last = 0.0;
    for _ in 0..steps {
        opt.materialize().unwrap();
        let loss = model.loss(&data.0, &data.1);
        last = loss.double_value(&[]);
        opt.backward_step(&loss, 1e-2, 1.0).unwrap();
    }
    last
}

#[test]
fn int8_training_tracks_f32_training() {
    let data = regression_data(3);
    let model = Regression::new(4);
    let mut opt = int8_optimizer(&model);
    assert_eq!(opt.quantized_names(), vec!["weight"]);
    assert_eq!(
        model.weight.numel(),
        0,
        "the f32 weight is released between steps"
    );
    let int8_loss = int8_train(&model, &mut opt, &data, 300);

    let f32_loss = f32_reference_loss(&data, 300);
    let start = Regression::new(4);
    let initial = start.loss(&data.0, &data.1).double_value(&[]);
    assert!(f32_loss < initial * 0.01, "f32 {f32_loss} from {initial}");
    assert!(
        int8_loss < initial * 1e-3,
        "int8 loss {int8_loss} (f32 {f32_loss}, start {initial})"
    );
}

/// A CPU step leaves each quantized leaf holding its new codes
/// dequantized, bit for bit; training on from there is the same, bit for
/// bit, as releasing and materializing again between steps — for every
/// state format.
#[test]
fn a_cpu_step_keeps_the_weights_materialized_as_their_codes() {
    let data = regression_data(11);
    for state in [
        StateFormat::Bits8,
        StateFormat::Bits4,
        StateFormat::Factored,
    ] {
        let run = |release_between: bool| {
            let model = Regression::new(12);
            let (decayed, rest) = model.named();
            let options = Int8Options {
                min_numel: 4096,
                seed: 5,
                state,
            };
            let mut opt = Int8AdamW::new(AdamConfig::default(), &decayed, &rest, options).unwrap();
            let mut losses = Vec::new();
            for _ in 0..6 {
                opt.materialize().unwrap();
                let loss = model.loss(&data.0, &data.1);
                losses.push(loss.double_value(&[]).to_bits());
                opt.backward_step(&loss, 1e-2, 1.0).unwrap();
                let named = opt.named_tensors();
                let find = |n: &str| &named.iter().find(|(k, _)| k == n).unwrap().1;
                let expected =
                    find("weight.int8").to_kind(Kind::Float) * find("weight.scale").unsqueeze(1);
                assert_eq!(model.weight.size(), vec![64, 128], "{state:?}: kept");
                assert!(
                    model.weight.equal(&expected),
                    "{state:?}: the kept weight is not its codes dequantized"
                );
                if release_between {
                    opt.release().unwrap();
                    assert_eq!(model.weight.numel(), 0);
                }
            }
            let tensors: Vec<Tensor> = opt.named_tensors().into_iter().map(|(_, t)| t).collect();
            (losses, tensors)
        };
        let (kept, released) = (run(false), run(true));
        assert_eq!(kept.0, released.0, "{state:?}: losses differ");
        for (a, b) in kept.1.iter().zip(&released.1) {
            assert!(a.equal(b), "{state:?}: the state differs");
        }
    }
}

#[test]
fn tiny_updates_move_the_weight_in_expectation() {
    // Δ = 0.1 of a code step per update: nearest rounding would never move.
    let cols = 10_000i64;
    let mut row = vec![0f32; cols as usize];
    row[0] = 1.0; // fixes the scale at 1/127
    let mut w = Int8Weight::quantize_nearest(&Tensor::from_slice(&row).reshape([1, cols])).unwrap();
    let step = 1.0 / 127.0;
    let delta = 0.1 * step;
    let mut rng = CounterRng::new(17);
    for _ in 0..1000 {
        let f = w.dequantize().unwrap();
        let _ = f.narrow(1, 1, cols - 1).g_add_scalar_(delta);
        w = Int8Weight::quantize_stochastic(&f, &mut rng).unwrap();
    }
    let moved = w
        .dequantize()
        .unwrap()
        .narrow(1, 1, cols - 1)
        .mean(Kind::Double)
        .double_value(&[]);
    let want = 1000.0 * delta;
    assert!(
        (moved - want).abs() < 0.05 * want,
        "moved {moved}, want {want}"
    );
}

#[test]
fn checkpoints_resume_exactly() {
    let data = regression_data(6);
    let model = Regression::new(7);
    let mut opt = int8_optimizer(&model);
    int8_train(&model, &mut opt, &data, 10);
    let saved: Vec<(String, Tensor)> = opt
        .named_tensors()
        .into_iter()
        .map(|(n, t)| (n, t.copy()))
        .collect();
    let state = opt.state();
    let straight = int8_train(&model, &mut opt, &data, 15);

    let resumed_model = Regression::new(99);
    let mut resumed = int8_optimizer(&resumed_model);
    resumed.load(&saved, state).unwrap();
    let again = int8_train(&resumed_model, &mut resumed, &data, 15);
    assert_eq!(straight, again);
    for ((n, a), (_, b)) in opt
        .named_tensors()
        .iter()
        .zip(resumed.named_tensors().iter())
    {
        assert!(a.equal(b), "{n} differs after resuming");
    }
    // A checkpoint without the int8 tensors is refused, naming what is missing.
    let f32_only: Vec<(String, Tensor)> = saved
        .into_iter()
        .filter(|(n, _)| !n.ends_with(".int8"))
        .collect();
    let err = resumed.load(&f32_only, state).unwrap_err().to_string();
    assert!(err.contains("weight.int8"), "{err}");
}

#[test]
fn parameters_and_state_take_about_a_quarter_of_f32() {
    let mut rng = Rng::new(2);
    let w = random(&[1024, 1024], 0.02, &mut rng).set_requires_grad(true);
    let b = Tensor::zeros([1024], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let f32_bytes = (12 * (w.numel() + b.numel())) as f64; // weights + m + v
    let opt = Int8AdamW::new(
        AdamConfig::default(),
        &[("w".to_string(), &w)],
        &[("b".to_string(), &b)],
        Int8Options::default(),
    )
    .unwrap();
    let ratio = (opt.parameter_bytes() + opt.state_bytes()) as f64 / f32_bytes;
    assert!((0.25..0.27).contains(&ratio), "ratio {ratio}");
}
