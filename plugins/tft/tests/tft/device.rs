//! INT8 training on the available device (CUDA when present, else the CPU):
//! the tensor-op update (the path CUDA takes) agrees with the fused host
//! kernel, and the TFT trains in INT8 there. `scripts/gpu-check.sh` runs
//! these on a GPU machine.

use tch::{Device, Kind, Tensor};
use tli_plugin_kit::adam::AdamConfig;
use tli_plugin_kit::counter_rng::CounterRng;
use tli_plugin_kit::int8::blockwise_adam::{
    blocks_for, update_host, update_tensors, DeviceMaps, HostState, TensorState, UpdateScalars,
};
use tli_plugin_kit::int8::{low_bit, DynamicMap, Int8AdamW, Int8Options, Int8Weight, StateFormat};
use tli_plugin_kit::rng::Rng;
use tli_plugin_tft::{Tft, TftBatch, TftShape};

fn device() -> Device {
    if tch::Cuda::is_available() {
        Device::Cuda(0)
    } else {
        Device::Cpu
    }
}

fn host<T: tch::kind::Element + Copy + Default>(t: &Tensor) -> Vec<T> {
    let t = t.to_device(Device::Cpu).reshape([-1]);
    let mut out = vec![T::default(); t.numel()];
    t.copy_data(&mut out, t.numel());
    out
}

#[test]
fn the_tensor_update_agrees_with_the_host_kernel_on_the_available_device() {
    let device = device();
    eprintln!("device: {device:?}");
    let (rows, cols) = (96i64, 200i64);
    let n = rows * cols;
    let blocks = blocks_for(n as usize) as i64;
    let mut rng = Rng::new(4);
    let mut normal = |shape: &[i64], scale: f64| {
        let v: Vec<f32> = (0..shape.iter().product::<i64>())
            .map(|_| (rng.normal() * scale) as f32)
            .collect();
        Tensor::from_slice(&v).reshape(shape)
    };
    let start = Int8Weight::quantize_nearest(&normal(&[rows, cols], 0.1)).unwrap();
    let mut on_device = Int8Weight {
        codes: start.codes.to_device(device),
        scales: start.scales.to_device(device),
    };
    let (mut codes, mut scales) = (host::<i8>(&start.codes), host::<f32>(&start.scales));
    let zero_m = DynamicMap::signed().zero_code();
    let zero_v = DynamicMap::unsigned().zero_code();
    let (mut mc, mut vc) = (vec![zero_m; n as usize], vec![zero_v; n as usize]);
    let (mut ma, mut va) = (vec![0f32; blocks as usize], vec![0f32; blocks as usize]);
    let state = |fill: u8, len: i64, kind: Kind| Tensor::full([len], fill as i64, (kind, device));
    let (dm, dv) = (state(zero_m, n, Kind::Uint8), state(zero_v, n, Kind::Uint8));
    let (dma, dva) = (state(0, blocks, Kind::Float), state(0, blocks, Kind::Float));
    let maps = DeviceMaps::new(device).unwrap();
    let (mut host_rng, mut device_rng) = (CounterRng::new(8), CounterRng::new(8));
    for step in 1..=10 {
        let grad = normal(&[rows, cols], 1.0);
        let c = AdamConfig::default();
        let s = UpdateScalars {
            beta1: c.beta1 as f32,
            beta2: c.beta2 as f32,
            eps: c.eps as f32,
            lr: 1e-2,
            weight_decay: 0.01,
            bias1: (1.0 - c.beta1.powi(step)) as f32,
            sqrt_bias2: (1.0 - c.beta2.powi(step)).sqrt() as f32,
            grad_scale: 1.0,
        };
        let mut g = host::<f32>(&grad);
        let state = HostState {
            m_codes: &mut mc,
            v_codes: &mut vc,
            m_absmax: &mut ma,
            v_absmax: &mut va,
        };
        update_host(
            &mut g,
            &mut codes,
            &mut scales,
            cols as usize,
            state,
            &s,
            &mut host_rng,
            2,
        )
        .unwrap();
        let state = TensorState {
            m_codes: &dm,
            v_codes: &dv,
            m_absmax: &dma,
            v_absmax: &dva,
        };
        update_tensors(
            &grad.to_device(device),
            &mut on_device,
            state,
            &maps,
            &s,
            &mut device_rng,
        )
        .unwrap();
    }
    let differ = |a: &[i8], b: &[i8]| a.iter().zip(b).filter(|(x, y)| x != y).count();
    let weight_diff = differ(&codes, &host::<i8>(&on_device.codes));
    let m_diff = mc
        .iter()
        .zip(host::<u8>(&dm))
        .filter(|(x, y)| **x != *y)
        .count();
    eprintln!("codes differing: weights {weight_diff}, m {m_diff} of {n}");
    assert!(
        weight_diff as f64 / (n as f64) < 2e-3,
        "{weight_diff} weight codes differ"
    );
    assert!(
        m_diff as f64 / (n as f64) < 2e-3,
        "{m_diff} first-moment codes differ"
    );
}

/// The same for the sub-8-bit formats: the tensor-op update (CUDA's path)
/// against the host kernel on one weight, 10 steps.
#[test]
fn sub_8_bit_tensor_updates_agree_with_the_host_kernel_on_the_available_device() {
    let device = device();
    let (rows, cols) = (96i64, 201i64);
    let n = rows * cols;
    for format in [StateFormat::Bits4, StateFormat::Factored] {
        let mut rng = Rng::new(4);
        let mut normal = |shape: &[i64], scale: f64| {
            let v: Vec<f32> = (0..shape.iter().product::<i64>())
                .map(|_| (rng.normal() * scale) as f32)
                .collect();
            Tensor::from_slice(&v).reshape(shape)
        };
        let start = Int8Weight::quantize_nearest(&normal(&[rows, cols], 0.1)).unwrap();
        let mut on_device = Int8Weight {
            codes: start.codes.to_device(device),
            scales: start.scales.to_device(device),
        };
        let (mut codes, mut scales) = (host::<i8>(&start.codes), host::<f32>(&start.scales));
        let half = (n as usize).div_ceil(2);
        let zero_m = low_bit::packed_fill(low_bit::Map16::signed().zero_code());
        let mut mc = vec![zero_m; half];
        let mut ma = vec![0f32; (n as usize).div_ceil(low_bit::BLOCK4)];
        let mut vc = vec![
            0u8;
            if format == StateFormat::Bits4 {
                half
            } else {
                0
            }
        ];
        let (mut vr, mut vcol) = (vec![0f32; rows as usize], vec![0f32; cols as usize]);
        let on = |v: &Tensor| v.to_device(device);
        let (dm, dma, dvc, dvr, dvcol) = (
            on(&Tensor::from_slice(&mc)),
            on(&Tensor::from_slice(&ma)),
            on(&Tensor::from_slice(&vc)),
            on(&Tensor::from_slice(&vr)),
            on(&Tensor::from_slice(&vcol)),
        );
        let maps = low_bit::device_maps(device).unwrap();
        let (mut host_rng, mut device_rng) = (CounterRng::new(8), CounterRng::new(8));
        for step in 1..=10 {
            let grad = normal(&[rows, cols], 1.0);
            let c = AdamConfig::default();
            let s = UpdateScalars {
                beta1: c.beta1 as f32,
                beta2: c.beta2 as f32,
                eps: c.eps as f32,
                lr: 1e-2,
                weight_decay: 0.01,
                bias1: (1.0 - c.beta1.powi(step)) as f32,
                sqrt_bias2: (1.0 - c.beta2.powi(step)).sqrt() as f32,
                grad_scale: 1.0,
            };
            let mut g = host::<f32>(&grad);
            low_bit::update_host(
                format,
                &mut g,
                &mut codes,
                &mut scales,
                cols as usize,
                low_bit::HostState {
                    m_codes: &mut mc,
                    m_absmax: &mut ma,
                    v_codes: &mut vc,
                    v_rows: &mut vr,
                    v_cols: &mut vcol,
                },
                &s,
                &mut host_rng,
                2,
            )
            .unwrap();
            low_bit::update_tensors(
                format,
                &grad.to_device(device),
                &mut on_device,
                low_bit::TensorState {
                    m_codes: &dm,
                    m_absmax: &dma,
                    v_codes: &dvc,
                    v_rows: &dvr,
                    v_cols: &dvcol,
                },
                &maps,
                &s,
                &mut device_rng,
            )
            .unwrap();
        }
        let differ = |a: &[i8], b: &[i8]| a.iter().zip(b).filter(|(x, y)| x != y).count();
        let weight_diff = differ(&codes, &host::<i8>(&on_device.codes));
        let unpacked =
            |t: &Tensor| host::<i64>(&low_bit::unpack(&t.to_device(Device::Cpu), n).unwrap());
        let m_host = unpacked(&Tensor::from_slice(&mc));
        let m_diff = m_host
            .iter()
            .zip(unpacked(&dm))
            .filter(|(x, y)| **x != *y)
            .count();
        eprintln!("{format:?}: codes differing: weights {weight_diff}, m {m_diff} of {n}");
        assert!(
            (weight_diff as f64) / (n as f64) < 2e-3,
            "{format:?}: {weight_diff} weight codes differ"
        );
        assert!(
            (m_diff as f64) / (n as f64) < 2e-3,
            "{format:?}: {m_diff} first-moment codes differ"
        );
        let rel = |a: &[f32], b: &Tensor| {
            a.iter()
                .zip(host::<f32>(b))
                .map(|(x, y)| ((x - y) / y.abs().max(1e-30)).abs())
                .fold(0f32, f32::max)
        };
        assert!(
            rel(&vr, &dvr) < 1e-4 && rel(&vcol, &dvcol) < 1e-4,
            "{format:?}: second-moment statistics differ"
        );
    }
}

#[test]
fn the_tft_trains_in_int8_on_the_available_device() {
    let device = device();
    let s = TftShape {
        hidden: 32,
        heads: 4,
        lstm_layers: 1,
        dropout: 0.0,
        observed: 2,
        known: 1,
        static_reals: 0,
        assets: 1,
        horizons: 3,
        outputs: 3,
        groups: Default::default(),
    };
    let mut rng = Rng::new(6);
    let mut normal = |shape: &[i64]| {
        let v: Vec<f32> = (0..shape.iter().product::<i64>())
            .map(|_| rng.normal() as f32)
            .collect();
        Tensor::from_slice(&v).reshape(shape).to_device(device)
    };
    let batch = TftBatch {
        past: normal(&[32, 12, 3]),
        future: normal(&[32, 3, 1]),
        static_reals: Tensor::zeros([32, 0], (Kind::Float, device)),
        asset: Tensor::zeros([32], (Kind::Int64, device)),
    };
    let y = batch.future.select(2, 0) * 0.8;
    for state in [StateFormat::Bits8, StateFormat::Factored] {
        let model = Tft::new(&s, &mut Rng::new(1), device).unwrap();
        let (decayed, rest) = model.decay_groups();
        let options = Int8Options {
            min_numel: 1024,
            seed: 2,
            state,
        };
        let mut opt = Int8AdamW::new(AdamConfig::default(), &decayed, &rest, options).unwrap();
        let q = Tensor::from_slice(&[0.1f32, 0.5, 0.9]).to_device(device);
        let loss_at = |opt: &mut Int8AdamW, train: bool| {
            opt.materialize().unwrap();
            let e = y.unsqueeze(-1) - model.forward(&batch, None).unwrap().forecast;
            let loss = (&e * &q).maximum(&(&e * (&q - 1.0))).mean(Kind::Float);
            let value = loss.double_value(&[]);
            if train {
                opt.backward_step(&loss, 3e-3, 1.0).unwrap();
            }
            value
        };
        let first = loss_at(&mut opt, false);
        for _ in 0..60 {
            loss_at(&mut opt, true);
        }
        let last = loss_at(&mut opt, false);
        eprintln!("{device:?}, {state:?} state: pinball {first:.4} → {last:.4}");
        assert!(last < 0.6 * first, "{state:?}: {first} → {last}");
    }
}
