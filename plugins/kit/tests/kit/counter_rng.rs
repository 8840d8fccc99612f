//! The device-side counter RNG: reproducible from `(seed, counter)`, equal to
//! the SplitMix64 reference stream bit for bit, plausible moments, thread-count
//! independent, and never touching libtorch's global generator.

use tch::{Device, Kind, Tensor};
use tli_plugin_kit::counter_rng::{CounterRng, CounterRngState};
use tli_plugin_kit::rng::Rng;

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

fn values(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
}

fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    if tch::Cuda::is_available() {
        d.push(Device::Cuda(0));
    }
    d
}

#[test]
fn bits_are_the_splitmix64_stream_at_the_counter() {
    for device in devices() {
        let mut r = CounterRng::from_state(CounterRngState {
            seed: 42,
            counter: 1000,
        });
        let base = r.base_state();
        let bits = r.bits(&[3, 7], device).unwrap();
        assert_eq!(bits.size(), [3, 7]);
        let got = Vec::<i64>::try_from(bits.flatten(0, -1).to_device(Device::Cpu)).unwrap();
        let mut reference = Rng::from_state(base.wrapping_add(1000u64.wrapping_mul(GAMMA)));
        for (i, g) in got.iter().enumerate() {
            assert_eq!(*g as u64, reference.next_u64(), "value {i} on {device:?}");
        }
        assert_eq!(r.state().counter, 1021);
    }
}

#[test]
fn uniform_is_the_top_24_bits_and_devices_agree() {
    let mut r = CounterRng::new(5);
    let base = r.base_state();
    let u = values(&r.uniform(&[64], Device::Cpu).unwrap());
    let mut reference = Rng::from_state(base);
    for x in &u {
        let want = (reference.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        assert_eq!(*x, want);
        assert!((0.0..1.0).contains(x));
    }
    if tch::Cuda::is_available() {
        let mut g = CounterRng::new(5);
        let on_gpu = g.uniform(&[64], Device::Cuda(0)).unwrap();
        assert_eq!(values(&on_gpu.to_device(Device::Cpu)), u);
    }
}

#[test]
fn same_state_same_values_and_restore_mid_stream() {
    let mut a = CounterRng::new(9);
    let mut b = CounterRng::new(9);
    let x = a.uniform(&[100], Device::Cpu).unwrap();
    let y = b.uniform(&[100], Device::Cpu).unwrap();
    assert!(x.equal(&y));

    // Save after one draw, continue, then restore from the saved state.
    let saved = a.state();
    let json = serde_json::to_string(&saved).unwrap();
    let next = a.uniform(&[4, 5], Device::Cpu).unwrap();
    let mask = a.bernoulli_mask(&[50], 0.3, Device::Cpu).unwrap();
    let mut c = CounterRng::from_state(serde_json::from_str(&json).unwrap());
    assert_eq!(c.state(), saved);
    assert!(c.uniform(&[4, 5], Device::Cpu).unwrap().equal(&next));
    assert!(c
        .bernoulli_mask(&[50], 0.3, Device::Cpu)
        .unwrap()
        .equal(&mask));
    assert_eq!(c.state(), a.state());
    assert_eq!(a.state().counter, 100 + 20 + 50);

    // One draw of 30 = three draws of 10: only the counter matters.
    let mut one = CounterRng::new(3);
    let mut three = CounterRng::new(3);
    let whole = values(&one.uniform(&[30], Device::Cpu).unwrap());
    let parts: Vec<f32> = (0..3)
        .flat_map(|_| values(&three.uniform(&[10], Device::Cpu).unwrap()))
        .collect();
    assert_eq!(whole, parts);
}

#[test]
fn different_seeds_differ() {
    let draws: Vec<Vec<f32>> = (0..4)
        .map(|s| values(&CounterRng::new(s).uniform(&[256], Device::Cpu).unwrap()))
        .collect();
    for i in 0..draws.len() {
        for j in i + 1..draws.len() {
            let same = draws[i]
                .iter()
                .zip(&draws[j])
                .filter(|(a, b)| a == b)
                .count();
            assert!(same < 3, "seeds {i} and {j} share {same} of 256 values");
        }
    }
}

#[test]
fn a_million_uniforms_have_mean_half_and_variance_one_twelfth() {
    let mut r = CounterRng::new(2024);
    let u = r
        .uniform(&[1_000_000], Device::Cpu)
        .unwrap()
        .to_kind(Kind::Double);
    let mean = u.mean(Kind::Double).double_value(&[]);
    let var = u.var(false).double_value(&[]);
    // Standard errors: mean 0.00029, variance 0.00009.
    assert!((mean - 0.5).abs() < 0.0015, "mean {mean}");
    assert!((var - 1.0 / 12.0).abs() < 0.0005, "variance {var}");
    let min = u.min().double_value(&[]);
    let max = u.max().double_value(&[]);
    assert!(min >= 0.0 && max < 1.0, "range [{min}, {max}]");
    // Ten equal bins each hold 10% ± 0.5%.
    let bins = (u * 10.0)
        .floor()
        .to_kind(Kind::Int64)
        .bincount::<Tensor>(None, 10);
    for (i, n) in Vec::<i64>::try_from(bins).unwrap().iter().enumerate() {
        assert!((*n - 100_000).abs() < 5_000, "bin {i} holds {n}");
    }
}

#[test]
fn values_do_not_depend_on_the_cpu_thread_count() {
    let before = tch::get_num_threads();
    tch::set_num_threads(1);
    let one = CounterRng::new(77)
        .uniform(&[300_000], Device::Cpu)
        .unwrap();
    tch::set_num_threads(2.max(before));
    let many = CounterRng::new(77)
        .uniform(&[300_000], Device::Cpu)
        .unwrap();
    tch::set_num_threads(before);
    assert!(one.equal(&many));
}

#[test]
fn the_global_generator_is_neither_used_nor_advanced() {
    tch::manual_seed(123);
    let a1 = Tensor::rand([8], (Kind::Float, Device::Cpu));
    let a2 = Tensor::rand([8], (Kind::Float, Device::Cpu));

    tch::manual_seed(123);
    let b1 = Tensor::rand([8], (Kind::Float, Device::Cpu));
    let mut r = CounterRng::new(1);
    let x = Tensor::ones([1000], (Kind::Float, Device::Cpu));
    let _ = r.uniform(&[1000], Device::Cpu).unwrap();
    let _ = r.dropout(&x, 0.5, true).unwrap();
    let b2 = Tensor::rand([8], (Kind::Float, Device::Cpu));
    assert!(a1.equal(&b1));
    assert!(
        a2.equal(&b2),
        "the counter RNG advanced libtorch's generator"
    );

    // And the global generator does not perturb it.
    tch::manual_seed(999);
    let y = CounterRng::new(1).uniform(&[1000], Device::Cpu).unwrap();
    tch::manual_seed(1);
    let z = CounterRng::new(1).uniform(&[1000], Device::Cpu).unwrap();
    assert!(y.equal(&z));
}

#[test]
fn masks_and_dropout() {
    let mut r = CounterRng::new(4);
    let mask = r.bernoulli_mask(&[100_000], 0.8, Device::Cpu).unwrap();
    assert_eq!(mask.kind(), Kind::Bool);
    let kept = mask
        .to_kind(Kind::Double)
        .mean(Kind::Double)
        .double_value(&[]);
    assert!((kept - 0.8).abs() < 0.01, "kept {kept}");
    assert!(r.bernoulli_mask(&[3], 1.5, Device::Cpu).is_err());

    let x = Tensor::ones([200, 50], (Kind::Float, Device::Cpu));
    let before = r.state();
    let same = r.dropout(&x, 0.3, false).unwrap();
    assert!(same.equal(&x));
    assert_eq!(r.state(), before, "evaluation draws nothing");

    let mut replay = CounterRng::from_state(before);
    let y = r.dropout(&x, 0.25, true).unwrap();
    let keep = replay
        .bernoulli_mask(&[200, 50], 0.75, Device::Cpu)
        .unwrap();
    let want = keep.to_kind(Kind::Float) / 0.75;
    assert!(y.allclose(&want, 1e-6, 1e-6, false));
    let mean = y.mean(Kind::Double).double_value(&[]);
    assert!(
        (mean - 1.0).abs() < 0.03,
        "inverted dropout keeps the mean: {mean}"
    );
    assert_eq!(r.state().counter, before.counter + 10_000);

    let zero = r.dropout(&x, 1.0, true).unwrap();
    assert_eq!(zero.abs().sum(Kind::Double).double_value(&[]), 0.0);
    assert!(r.dropout(&x, -0.1, true).is_err());

    // Gradients flow through dropout to the input.
    let w = Tensor::ones([10], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let y = r.dropout(&w, 0.5, true).unwrap();
    y.sum(Kind::Float).backward();
    let g = values(&w.grad());
    assert!(g.iter().all(|&v| v == 0.0 || v == 2.0));
}
