//! Tests of the sub-8-bit optimizer state: the host kernel agrees with the
//! tensor ops and does not depend on the thread count, training with it
//! tracks f32, checkpoints resume exactly and refuse another format, the
//! bytes shrink as documented, and a second moment never rounds to zero.

use super::low_bit::{self, packed_fill, HostState, Map16, TensorState, BLOCK4};
use super::tests::{f32_reference_loss, random, regression_data, scalars, to_vec, Regression};
use super::*;
use crate::adam::AdamConfig;
use crate::counter_rng::CounterRng;
use crate::rng::Rng;
use tch::{Device, Kind, Tensor};

const FORMATS: [StateFormat; 2] = [StateFormat::Bits4, StateFormat::Factored];

/// One tensor's state as host vectors.
#[derive(Clone, PartialEq, Debug)]
struct HostVecs {
    m_codes: Vec<u8>,
    m_absmax: Vec<f32>,
    v_codes: Vec<u8>,
    v_rows: Vec<f32>,
    v_cols: Vec<f32>,
}

impl HostVecs {
    fn new(format: StateFormat, rows: usize, cols: usize) -> Self {
        let n = rows * cols;
        Self {
            m_codes: vec![packed_fill(Map16::signed().zero_code()); n.div_ceil(2)],
            m_absmax: vec![0.0; n.div_ceil(BLOCK4)],
            v_codes: vec![
                0;
                if format == StateFormat::Bits4 {
                    n.div_ceil(2)
                } else {
                    0
                }
            ],
            v_rows: vec![0.0; rows],
            v_cols: vec![0.0; cols],
        }
    }

    fn state(&mut self) -> HostState<'_> {
        HostState {
            m_codes: &mut self.m_codes,
            m_absmax: &mut self.m_absmax,
            v_codes: &mut self.v_codes,
            v_rows: &mut self.v_rows,
            v_cols: &mut self.v_cols,
        }
    }

    fn tensors(&self) -> [Tensor; 5] {
        [
            Tensor::from_slice(&self.m_codes),
            Tensor::from_slice(&self.m_absmax),
            Tensor::from_slice(&self.v_codes),
            Tensor::from_slice(&self.v_rows),
            Tensor::from_slice(&self.v_cols),
        ]
    }
}

/// `steps` host updates of a `[rows, cols]` weight on `threads` threads:
/// the weight's codes and scales and the state after them.
fn host_run(
    format: StateFormat,
    rows: i64,
    cols: i64,
    steps: i32,
    threads: usize,
) -> (Vec<i8>, Vec<f32>, HostVecs) {
    let mut rng = Rng::new(1);
    let start = Int8Weight::quantize_nearest(&random(&[rows, cols], 0.1, &mut rng)).unwrap();
    let (mut codes, mut scales) = (to_vec::<i8>(&start.codes), to_vec::<f32>(&start.scales));
    let mut state = HostVecs::new(format, rows as usize, cols as usize);
    let mut draw = CounterRng::new(9);
    for step in 1..=steps {
        let mut g = to_vec::<f32>(&random(&[rows, cols], 1.0, &mut rng));
        low_bit::update_host(
            format,
            &mut g,
            &mut codes,
            &mut scales,
            cols as usize,
            state.state(),
            &scalars(step, 0.5),
            &mut draw,
            threads,
        )
        .unwrap();
    }
    (codes, scales, state)
}

#[test]
fn the_host_kernel_gives_the_same_bits_on_any_number_of_threads() {
    // 37 × 301: odd element count, rows and blocks do not line up.
    for format in FORMATS {
        let one = host_run(format, 37, 301, 6, 1);
        for threads in [2, 3, 5] {
            assert!(
                host_run(format, 37, 301, 6, threads) == one,
                "{format:?}: {threads} threads differ from one"
            );
        }
    }
}

#[test]
fn host_and_tensor_updates_agree() {
    for format in FORMATS {
        let (rows, cols) = (37i64, 301i64);
        let n = rows * cols;
        let mut rng = Rng::new(1);
        let start = Int8Weight::quantize_nearest(&random(&[rows, cols], 0.1, &mut rng)).unwrap();
        let mut host_w = Int8Weight {
            codes: start.codes.copy(),
            scales: start.scales.copy(),
        };
        let mut tensor_w = Int8Weight {
            codes: start.codes.copy(),
            scales: start.scales.copy(),
        };
        let mut host = HostVecs::new(format, rows as usize, cols as usize);
        let device_state = host.tensors();
        let (mut host_rng, mut tensor_rng) = (CounterRng::new(9), CounterRng::new(9));
        let maps = low_bit::device_maps(Device::Cpu).unwrap();
        for step in 1..=20 {
            let grad = random(&[rows, cols], 1.0, &mut rng);
            let s = scalars(step, 0.5);
            let mut g = to_vec::<f32>(&grad);
            let mut codes = to_vec::<i8>(&host_w.codes);
            let mut scales = to_vec::<f32>(&host_w.scales);
            low_bit::update_host(
                format,
                &mut g,
                &mut codes,
                &mut scales,
                cols as usize,
                host.state(),
                &s,
                &mut host_rng,
                3,
            )
            .unwrap();
            host_w.codes = Tensor::from_slice(&codes).reshape([rows, cols]);
            host_w.scales = Tensor::from_slice(&scales);
            let [mc, ma, vc, vr, vcol] = &device_state;
            let state = TensorState {
                m_codes: mc,
                m_absmax: ma,
                v_codes: vc,
                v_rows: vr,
                v_cols: vcol,
            };
            low_bit::update_tensors(
                format,
                &grad,
                &mut tensor_w,
                state,
                &maps,
                &s,
                &mut tensor_rng,
            )
            .unwrap();
        }
        assert_eq!(host_rng.state(), tensor_rng.state());
        let host_state = host.tensors();
        let codes_mismatch = |a: &Tensor, b: &Tensor| {
            let (a, b) = (
                low_bit::unpack(a, n).unwrap(),
                low_bit::unpack(b, n).unwrap(),
            );
            a.ne_tensor(&b)
                .to_kind(Kind::Double)
                .mean(Kind::Double)
                .double_value(&[])
        };
        let m = codes_mismatch(&host_state[0], &device_state[0]);
        assert!(m < 2e-3, "{format:?}: {m} of the m codes differ");
        if format == StateFormat::Bits4 {
            let m = codes_mismatch(&host_state[2], &device_state[2]);
            assert!(m < 2e-3, "{format:?}: {m} of the v codes differ");
        }
        let relative =
            |a: &Tensor, b: &Tensor| ((a - b).abs() / (b.abs() + 1e-30)).max().double_value(&[]);
        for (what, k) in [("m absmax", 1), ("v rows", 3), ("v columns", 4)] {
            let r = relative(&host_state[k], &device_state[k]);
            assert!(r < 1e-4, "{format:?}: {what} differ by {r}");
        }
        let w_codes = host_w
            .codes
            .ne_tensor(&tensor_w.codes)
            .to_kind(Kind::Double)
            .mean(Kind::Double)
            .double_value(&[]);
        assert!(
            w_codes < 2e-3,
            "{format:?}: {w_codes} of the weight codes differ"
        );
        let diff = (host_w.dequantize().unwrap() - tensor_w.dequantize().unwrap())
            .abs()
            .max()
            .double_value(&[]);
        let step = host_w.scales.max().double_value(&[]);
        assert!(diff <= step * 1.01, "{format:?}: weights differ by {diff}");
    }
}

fn optimizer(model: &Regression, format: StateFormat) -> Int8AdamW {
    let (decayed, rest) = model.named();
    let config = AdamConfig {
        learning_rate: 1e-2,
        ..AdamConfig::default()
    };
    let options = Int8Options {
        seed: 5,
        state: format,
        ..Int8Options::default()
    };
    Int8AdamW::new(config, &decayed, &rest, options).unwrap()
}

fn train(model: &Regression, opt: &mut Int8AdamW, data: &(Tensor, Tensor), steps: usize) -> f64 {
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
fn training_with_sub_8_bit_state_tracks_f32() {
    let data = regression_data(3);
    let initial = Regression::new(4).loss(&data.0, &data.1).double_value(&[]);
    let f32_loss = f32_reference_loss(&data, 300);
    for format in FORMATS {
        let model = Regression::new(4);
        let mut opt = optimizer(&model, format);
        assert_eq!(opt.state_format(), format);
        let loss = train(&model, &mut opt, &data, 300);
        assert!(
            loss < initial * 1e-3,
            "{format:?}: loss {loss} (f32 {f32_loss}, start {initial})"
        );
    }
}

#[test]
fn checkpoints_resume_exactly_and_refuse_another_format() {
    let data = regression_data(6);
    for format in FORMATS {
        let model = Regression::new(7);
        let mut opt = optimizer(&model, format);
        train(&model, &mut opt, &data, 10);
        let saved: Vec<(String, Tensor)> = opt
            .named_tensors()
            .into_iter()
            .map(|(n, t)| (n, t.copy()))
            .collect();
        let state = opt.state();
        assert_eq!(state.state_format, format);
        let json = serde_json::to_string(&state).unwrap();
        assert!(json.contains(format.name()), "{json}");
        let straight = train(&model, &mut opt, &data, 15);

        let resumed_model = Regression::new(99);
        let mut resumed = optimizer(&resumed_model, format);
        resumed
            .load(&saved, serde_json::from_str(&json).unwrap())
            .unwrap();
        let again = train(&resumed_model, &mut resumed, &data, 15);
        assert_eq!(straight, again, "{format:?}");
        for ((n, a), (_, b)) in opt
            .named_tensors()
            .iter()
            .zip(resumed.named_tensors().iter())
        {
            assert!(a.equal(b), "{format:?}: {n} differs after resuming");
        }
        // The other formats refuse it before anything changes.
        for other in [
            StateFormat::Bits8,
            StateFormat::Bits4,
            StateFormat::Factored,
        ] {
            if other == format {
                continue;
            }
            let other_model = Regression::new(8);
            let mut wrong = optimizer(&other_model, other);
            let before: Vec<Tensor> = wrong
                .named_tensors()
                .iter()
                .map(|(_, t)| t.copy())
                .collect();
            let err = wrong.load(&saved, state).unwrap_err().to_string();
            assert!(
                err.contains(format.name()) && err.contains(other.name()),
                "{err}"
            );
            for ((n, t), b) in wrong.named_tensors().iter().zip(&before) {
                assert!(t.equal(b), "{n} changed by a refused load");
            }
        }
    }
    // A checkpoint written before the format was recorded reads as 8-bit.
    let old: Int8AdamWState =
        serde_json::from_str(r#"{"step": 3, "rounding_rng": {"seed": 1, "counter": 2}}"#).unwrap();
    assert_eq!(old.state_format, StateFormat::Bits8);
}

#[test]
fn parameters_and_state_shrink_below_8_bit_state() {
    let mut rng = Rng::new(2);
    let w = random(&[1024, 1024], 0.02, &mut rng);
    let b = Tensor::zeros([1024], (Kind::Float, Device::Cpu));
    let f32_bytes = (12 * (w.numel() + b.numel())) as f64; // weights + m + v
    let ratio = |format: StateFormat| {
        let (w, b) = (
            w.copy().set_requires_grad(true),
            b.copy().set_requires_grad(true),
        );
        let opt = Int8AdamW::new(
            AdamConfig::default(),
            &[("w".to_string(), &w)],
            &[("b".to_string(), &b)],
            Int8Options {
                state: format,
                ..Int8Options::default()
            },
        )
        .unwrap();
        assert_eq!(opt.parameter_counts(), (1 << 20, (1 << 20) + 1024));
        (opt.parameter_bytes() + opt.state_bytes()) as f64 / f32_bytes
    };
    // int8 weights 1 B; 4-bit: 0.5 + 0.5 + 4/128; factored: 0.5 + 4/128 (of 12 B).
    let (r8, r4, rf) = (
        ratio(StateFormat::Bits8),
        ratio(StateFormat::Bits4),
        ratio(StateFormat::Factored),
    );
    assert!((0.25..0.26).contains(&r8), "8-bit {r8}");
    assert!((0.17..0.175).contains(&r4), "4-bit {r4}");
    assert!((0.127..0.132).contains(&rf), "factored {rf}");
}

#[test]
fn a_small_second_moment_never_rounds_to_zero() {
    // Gradients of fixed sign whose magnitudes span six decades: most
    // elements' second moments are tiny next to their row's and column's
    // maxima. A map with zero would store them as 0 and divide by ε alone;
    // the linear map without zero keeps every Adam update within a few
    // learning rates (|m̂| ≤ √v̂ for a steady gradient).
    let (rows, cols) = (16usize, 512usize);
    let n = rows * cols;
    let mut rng = Rng::new(12);
    let magnitudes: Vec<f32> = (0..n)
        .map(|_| 10f64.powf(-6.0 * rng.uniform()) as f32)
        .collect();
    let mut codes = vec![0i8; n];
    let mut scales = vec![1.0f32 / 127.0; rows];
    let mut state = HostVecs::new(StateFormat::Bits4, rows, cols);
    let mut draw = CounterRng::new(1);
    let mut s = scalars(1, 1.0);
    s.weight_decay = 0.0;
    for step in 1..=30 {
        let mut g = magnitudes.clone();
        s.bias1 = 1.0 - 0.9f32.powi(step);
        s.sqrt_bias2 = (1.0 - 0.999f32.powi(step)).sqrt();
        let before: Vec<f32> = codes
            .iter()
            .enumerate()
            .map(|(e, &q)| q as f32 * scales[e / cols])
            .collect();
        low_bit::update_host(
            StateFormat::Bits4,
            &mut g,
            &mut codes,
            &mut scales,
            cols,
            state.state(),
            &s,
            &mut draw,
            1,
        )
        .unwrap();
        // `g` now holds the f32 weights after the update.
        let largest = g
            .iter()
            .zip(&before)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            largest <= 2.0 * s.lr,
            "step {step}: an update of {largest} (lr {})",
            s.lr
        );
    }
}
