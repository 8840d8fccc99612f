//! One TFT training step in FP32 against INT8, same size, same process:
//! `cargo bench -p tli-plugin-tft --bench step`.
//!
//! The network on the daily features' input counts (6 observed, 7 known,
//! 2 assets, 5 horizons × 3 quantiles); each run times a forward pass, the
//! loss, the backward pass, clipping and one update — FP32 weights with the
//! kit's `FlatAdamW`; INT8 weights with `Int8AdamW` (materialize, forward,
//! backward, fused update with stochastic re-quantization, release) — and
//! the two precisions alternate run by run so that machine noise hits both.
//! Prints the median of `RUNS` after one warm-up step each.
//!
//! Sizes: `TLI_BENCH_HIDDEN` (default 256), `TLI_BENCH_BATCH` (64),
//! `TLI_BENCH_OBSERVED` (6) and `TLI_BENCH_KNOWN` (7) real inputs (a selection
//! network's share of the step: run with fewer),
//! `TLI_BENCH_LOOKBACK` (64); `TLI_BENCH_THREADS` sets libtorch's intra-op
//! threads (default: libtorch's own, one per core); `TLI_BENCH_DEVICE=cuda:N`
//! runs on a GPU (INT8 then uses the tensor-op update; times include a
//! synchronisation per step). The process starts as `tli` does: its malloc
//! policy (freed blocks kept in the heaps, `runtime/src/allocator.rs`;
//! `TLI_MALLOC=glibc` for glibc's defaults) and subnormal floats flushed to
//! zero (`runtime/src/float_env.rs`; `TLI_DENORMALS=keep` to keep them). Also
//! prints each step's minor page faults and the kernel's share of its CPU
//! time (`getrusage`; zeroing freshly faulted pages is kernel time).

use std::time::Instant;
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::adam::AdamConfig;
use tli_plugin_kit::flat_adamw::FlatAdamW;
use tli_plugin_kit::int8::{Int8AdamW, Int8Options};
use tli_plugin_kit::rng::Rng;
use tli_plugin_tft::{Tft, TftBatch, TftShape};

const RUNS: usize = 5;

fn env_or(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn random(shape: &[i64], rng: &mut Rng) -> Tensor {
    let n: i64 = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
    Tensor::from_slice(&v).reshape(shape)
}

/// `cpu` (default) or `cuda:N` from `TLI_BENCH_DEVICE`.
fn device() -> Device {
    match std::env::var("TLI_BENCH_DEVICE") {
        Ok(d) if d.starts_with("cuda") => Device::Cuda(
            d.trim_start_matches("cuda")
                .trim_start_matches(':')
                .parse()
                .unwrap_or(0),
        ),
        _ => Device::Cpu,
    }
}

/// What the kernel spent on this process so far: minor page faults and
/// system CPU seconds, and user CPU seconds (all threads).
fn usage() -> (i64, f64, f64) {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (u.ru_minflt, secs(u.ru_stime), secs(u.ru_utime))
}

fn main() {
    // As the `tli` binary starts: its malloc policy and subnormals flushed to
    // zero (`TLI_MALLOC=glibc`, `TLI_DENORMALS=keep` leave glibc's and the CPU's).
    let _ = tli_runtime::allocator::configure_from_env();
    let _ = tli_runtime::float_env::flush_denormals();
    let dev = device();
    if let Some(t) = std::env::var("TLI_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tch::set_num_threads(t);
    }
    let (hidden, batch, lookback) = (
        env_or("TLI_BENCH_HIDDEN", 256),
        env_or("TLI_BENCH_BATCH", 64),
        env_or("TLI_BENCH_LOOKBACK", 64),
    );
    let s = TftShape {
        hidden: hidden as usize,
        heads: 4,
        lstm_layers: 1,
        dropout: 0.0,
        observed: env_or("TLI_BENCH_OBSERVED", 6) as usize,
        known: env_or("TLI_BENCH_KNOWN", 7) as usize,
        static_reals: 0,
        assets: 2,
        horizons: 5,
        outputs: 15,
        groups: Default::default(),
    };
    let mut rng = Rng::new(3);
    let x = TftBatch {
        past: random(&[batch, lookback, (s.observed + s.known) as i64], &mut rng).to_device(dev),
        future: random(&[batch, 5, s.known as i64], &mut rng).to_device(dev),
        static_reals: Tensor::zeros([batch, 0], (Kind::Float, dev)),
        asset: Tensor::from_slice(&(0..batch).map(|i| i % 2).collect::<Vec<i64>>()).to_device(dev),
    };
    let y = random(&[batch, 5, 15], &mut rng).to_device(dev);
    let sync = || {
        if let Device::Cuda(i) = dev {
            tch::Cuda::synchronize(i as i64);
        }
    };
    let loss = |m: &Tft| {
        (m.forward(&x, None).unwrap().forecast - &y)
            .square()
            .mean(Kind::Float)
    };
    let config = AdamConfig {
        learning_rate: 1e-3,
        ..AdamConfig::default()
    };

    let fp32 = Tft::new(&s, &mut Rng::new(7), dev).unwrap();
    let params = tli_plugin_tft::memory::parameter_count(&s);
    let (decayed, rest) = fp32.decay_groups();
    let d: Vec<&Tensor> = decayed.iter().map(|(_, t)| *t).collect();
    let r: Vec<&Tensor> = rest.iter().map(|(_, t)| *t).collect();
    let mut fp32_opt = FlatAdamW::with_decay_groups(config, &d, &r).unwrap();
    let int8 = Tft::new(&s, &mut Rng::new(7), dev).unwrap();
    let (decayed, rest) = int8.decay_groups();
    let mut int8_opt = Int8AdamW::new(config, &decayed, &rest, Int8Options::default()).unwrap();

    // Per run: FP32 forward, FP32 backward + update; INT8 materialize, forward, backward + update.
    let mut times: [Vec<f64>; 5] = Default::default();
    // Per precision: (minor faults, system CPU share) of each step.
    let mut kernel: [Vec<(f64, f64)>; 2] = Default::default();
    let delta = |a: (i64, f64, f64), b: (i64, f64, f64)| {
        let (sys, user) = (b.1 - a.1, b.2 - a.2);
        ((b.0 - a.0) as f64, sys / (sys + user).max(1e-9))
    };
    for run in 0..=RUNS {
        let u0 = usage();
        let t0 = Instant::now();
        let l = loss(&fp32);
        sync();
        let t1 = Instant::now();
        let _ = fp32_opt.backward_step(&l, 1e-3, 1.0).unwrap();
        sync();
        let t2 = Instant::now();
        let u2 = usage();
        int8_opt.materialize().unwrap();
        sync();
        let t3 = Instant::now();
        let l = loss(&int8);
        sync();
        let t4 = Instant::now();
        int8_opt.backward_step(&l, 1e-3, 1.0).unwrap();
        sync();
        let t5 = Instant::now();
        let u5 = usage();
        if run > 0 {
            kernel[0].push(delta(u0, u2));
            kernel[1].push(delta(u2, u5));
            for (k, (a, b)) in [(t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5)]
                .into_iter()
                .enumerate()
            {
                times[k].push((b - a).as_secs_f64());
            }
        }
    }
    let f: Vec<f64> = (0..RUNS).map(|r| times[0][r] + times[1][r]).collect();
    let i: Vec<f64> = (0..RUNS)
        .map(|r| times[2][r] + times[3][r] + times[4][r])
        .collect();
    let (f, i) = (median(f), median(i));
    let ms = |k: usize| median(times[k].clone()) * 1e3;
    println!(
        "TFT hidden {hidden} ({:.1} M parameters), batch {batch} × lookback {lookback} + 5, \
         {dev:?}, {} thread(s), median of {RUNS} steps: FP32 {:.1} ms, INT8 {:.1} ms, INT8 / FP32 \
         {:.3}×",
        params as f64 / 1e6,
        tch::get_num_threads(),
        f * 1e3,
        i * 1e3,
        i / f
    );
    println!(
        "  FP32: forward {:.1} ms, backward + update {:.1} ms; INT8: materialize {:.1} ms, \
         forward {:.1} ms, backward + update {:.1} ms",
        ms(0),
        ms(1),
        ms(2),
        ms(3),
        ms(4)
    );
    // For scripts/bench-vs-reference.sh tft.
    println!(
        "{{\"impl\": \"tli\", \"hidden\": {hidden}, \"batch\": {batch}, \"parameters\": {params}, \
         \"step_ms\": {:.2}, \"int8_step_ms\": {:.2}}}",
        f * 1e3,
        i * 1e3
    );
    let faults = |k: usize| median(kernel[k].iter().map(|x| x.0).collect());
    let share = |k: usize| median(kernel[k].iter().map(|x| x.1).collect()) * 100.0;
    println!(
        "  minor page faults per step (median): FP32 {:.0}, INT8 {:.0}; kernel (system) share of \
         the step's CPU time: FP32 {:.1} %, INT8 {:.1} %",
        faults(0),
        faults(1),
        share(0),
        share(1)
    );
}
