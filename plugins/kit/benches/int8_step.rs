//! INT8 against f32 training-step time on the CPU:
//! `cargo bench -p tli-plugin-kit --bench int8_step`.
//!
//! A stack of `LAYERS` square linear layers (`WIDTH × WIDTH`, GELU between,
//! biases), `TOKENS` rows per step, mean-square loss. Prints the median time
//! of one full step (forward, backward, clipping, update) with
//!
//! * f32 weights and [`FlatAdamW`] (the kit's f32 optimizer), and
//! * INT8 weights and 8-bit state ([`Int8AdamW`]: materialize, forward,
//!   backward, fused host update with stochastic re-quantization, release),
//!
//! and of the optimizer part alone for each, plus the bytes of parameters
//! and optimizer state; then the fused host update alone on one weight, per
//! element, with 8-bit, 4-bit and factored state (`TLI_BENCH_UPDATE_ONLY=1`:
//! only that). `TLI_BENCH_THREADS` sets libtorch's intra-op
//! threads (default 1; the fused host update uses as many); `TLI_BENCH_WIDTH`,
//! `TLI_BENCH_LAYERS`, `TLI_BENCH_TOKENS` change the size (defaults 2048, 4, 256:
//! 16.8 M parameters, the size of the published 8-bit optimizer measurements
//! of Dettmers et al., ICLR 2022).

use std::time::Instant;
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::adam::AdamConfig;
use tli_plugin_kit::counter_rng::CounterRng;
use tli_plugin_kit::flat_adamw::FlatAdamW;
use tli_plugin_kit::int8::blockwise_adam::{blocks_for, update_host, HostState, UpdateScalars};
use tli_plugin_kit::int8::{low_bit, Int8AdamW, Int8Options, StateFormat};
use tli_plugin_kit::rng::Rng;

const RUNS: usize = 7;

/// Parameters by name.
type Named<'a> = Vec<(String, &'a Tensor)>;

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

struct Stack {
    weights: Vec<Tensor>,
    biases: Vec<Tensor>,
    input: Tensor,
}

impl Stack {
    fn new(width: i64, layers: i64, tokens: i64, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut normal = |n: i64, scale: f64| -> Tensor {
            let v: Vec<f32> = (0..n).map(|_| (rng.normal() * scale) as f32).collect();
            Tensor::from_slice(&v)
        };
        let bound = 1.0 / (width as f64).sqrt();
        let weights = (0..layers)
            .map(|_| {
                normal(width * width, bound)
                    .reshape([width, width])
                    .set_requires_grad(true)
            })
            .collect();
        let biases = (0..layers)
            .map(|_| Tensor::zeros([width], (Kind::Float, Device::Cpu)).set_requires_grad(true))
            .collect();
        let input = normal(tokens * width, 1.0).reshape([tokens, width]);
        Self {
            weights,
            biases,
            input,
        }
    }

    fn loss(&self) -> Tensor {
        let mut x = self.input.shallow_clone();
        for (w, b) in self.weights.iter().zip(&self.biases) {
            x = x.linear(w, Some(b)).gelu("none");
        }
        x.square().mean(Kind::Float)
    }

    fn named(&self) -> (Named<'_>, Named<'_>) {
        let w = self
            .weights
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("w{i}"), t));
        let b = self
            .biases
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("b{i}"), t));
        (w.collect(), b.collect())
    }
}

fn main() {
    let threads = env_or("TLI_BENCH_THREADS", 1);
    tch::set_num_threads(threads as i32);
    let (width, layers, tokens) = (
        env_or("TLI_BENCH_WIDTH", 2048),
        env_or("TLI_BENCH_LAYERS", 4),
        env_or("TLI_BENCH_TOKENS", 256),
    );
    let config = AdamConfig {
        weight_decay: 0.01,
        ..AdamConfig::default()
    };
    let params = layers * width * (width + 1);
    if env_or("TLI_BENCH_UPDATE_ONLY", 0) != 0 {
        host_update_alone(width, threads as usize);
        return;
    }

    let f32_model = Stack::new(width, layers, tokens, 1);
    let all: Vec<&Tensor> = f32_model.weights.iter().chain(&f32_model.biases).collect();
    let mut f32_opt = FlatAdamW::new(config, &all).unwrap();
    let int8_model = Stack::new(width, layers, tokens, 1);
    let (decayed, rest) = int8_model.named();
    let options = Int8Options {
        seed: 3,
        ..Int8Options::default()
    };
    let mut int8_opt = Int8AdamW::new(config, &decayed, &rest, options).unwrap();

    // Per run: forward (with INT8: materialize + forward) and backward_step
    // (backward, clipping, update; with INT8 also the re-quantization and release).
    let mut f32_times = (vec![], vec![]);
    let mut int8_times = (vec![], vec![]);
    for run in 0..RUNS + 1 {
        let t0 = Instant::now();
        let loss = f32_model.loss();
        let t1 = Instant::now();
        let _ = f32_opt.backward_step(&loss, 1e-3, 1.0).unwrap();
        let t2 = Instant::now();
        int8_opt.materialize().unwrap();
        let loss = int8_model.loss();
        let t3 = Instant::now();
        let _ = int8_opt.backward_step(&loss, 1e-3, 1.0).unwrap();
        let t4 = Instant::now();
        if run > 0 {
            f32_times.0.push((t1 - t0).as_secs_f64());
            f32_times.1.push((t2 - t1).as_secs_f64());
            int8_times.0.push((t3 - t2).as_secs_f64());
            int8_times.1.push((t4 - t3).as_secs_f64());
        }
    }
    let row = |times: (Vec<f64>, Vec<f64>)| {
        let total: Vec<f64> = times.0.iter().zip(&times.1).map(|(a, b)| a + b).collect();
        (median(times.0), median(times.1), median(total))
    };
    let (f_fwd, f_bwd, f_total) = row(f32_times);
    let (i_fwd, i_bwd, i_total) = row(int8_times);
    let f32_bytes = (3 * 4 * params) as f64;
    let int8_bytes = (int8_opt.parameter_bytes() + int8_opt.state_bytes()) as f64;
    println!(
        "{layers} × {width}² linear layers ({:.1} M parameters), {tokens} tokens, {threads} \
         thread(s), median of {RUNS} steps",
        params as f64 / 1e6
    );
    println!(
        "| precision | forward (ms) | backward + update (ms) | step (ms) | parameters + \
         optimizer state (MB) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (name, fwd, bwd, total, bytes) in [
        ("f32 (FlatAdamW)", f_fwd, f_bwd, f_total, f32_bytes),
        ("int8 (Int8AdamW)", i_fwd, i_bwd, i_total, int8_bytes),
    ] {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.1} |",
            fwd * 1e3,
            bwd * 1e3,
            total * 1e3,
            bytes / 1e6
        );
    }
    println!(
        "int8 / f32: step {:.2}×, parameters + optimizer state {:.3}×",
        i_total / f_total,
        int8_bytes / f32_bytes
    );
    host_update_alone(width, threads as usize);
}

/// The fused host update by itself on one `width × width` weight: nanoseconds
/// per element (wall time, `threads` threads), median of `RUNS`.
fn host_update_alone(width: i64, threads: usize) {
    let n = (width * width) as usize;
    let mut rng = Rng::new(9);
    let grad_init: Vec<f32> = (0..n).map(|_| rng.normal() as f32 * 1e-3).collect();
    let mut codes: Vec<i8> = (0..n).map(|i| (i % 255) as i8).collect();
    let mut scales = vec![1e-3f32; width as usize];
    let (mut mc, mut vc) = (vec![128u8; n], vec![100u8; n]);
    let blocks = blocks_for(n);
    let (mut ma, mut va) = (vec![1e-4f32; blocks], vec![1e-8f32; blocks]);
    let mut counter = CounterRng::new(1);
    let s = UpdateScalars {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        lr: 1e-3,
        weight_decay: 0.01,
        bias1: 0.5,
        sqrt_bias2: 0.1,
        grad_scale: 1.0,
    };
    let mut times = vec![];
    for _ in 0..RUNS {
        let mut grad = grad_init.clone();
        let t = Instant::now();
        let state = HostState {
            m_codes: &mut mc,
            v_codes: &mut vc,
            m_absmax: &mut ma,
            v_absmax: &mut va,
        };
        update_host(
            &mut grad,
            &mut codes,
            &mut scales,
            width as usize,
            state,
            &s,
            &mut counter,
            threads,
        )
        .unwrap();
        times.push(t.elapsed().as_secs_f64());
    }
    println!(
        "fused host update alone ({width}² elements, {threads} thread(s)): {:.2} ns per element \
         (8bit)",
        median(times) * 1e9 / n as f64
    );
    for format in [StateFormat::Bits4, StateFormat::Factored] {
        let half = n.div_ceil(2);
        let mut mc = vec![0x77u8; half];
        let mut ma = vec![1e-4f32; n.div_ceil(low_bit::BLOCK4)];
        let mut vc = vec![
            0x55u8;
            if format == StateFormat::Bits4 {
                half
            } else {
                0
            }
        ];
        let (mut rows, mut cols) = (vec![1e-8f32; width as usize], vec![1e-8f32; width as usize]);
        let mut times = vec![];
        for _ in 0..RUNS {
            let mut grad = grad_init.clone();
            let t = Instant::now();
            low_bit::update_host(
                format,
                &mut grad,
                &mut codes,
                &mut scales,
                width as usize,
                low_bit::HostState {
                    m_codes: &mut mc,
                    m_absmax: &mut ma,
                    v_codes: &mut vc,
                    v_rows: &mut rows,
                    v_cols: &mut cols,
                },
                &s,
                &mut counter,
                threads,
            )
            .unwrap();
            times.push(t.elapsed().as_secs_f64());
        }
        println!(
            "fused host update alone ({width}² elements, {threads} thread(s)): {:.2} ns per \
             element ({})",
            median(times) * 1e9 / n as f64,
            format.name()
        );
    }
}
