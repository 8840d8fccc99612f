//! Optimizer-step time on one core: `cargo bench -p tli-plugin-kit --bench optimizer_step`.
//!
//! For the default networks of DQN (CartPole and trading), PPO and the
//! template plugin, prints a Markdown table of the median time of
//!
//! * **update**: gradient clipping plus one optimizer update, gradients in
//!   place: the per-tensor `adam::Adam` with DQN's per-tensor clipping (the
//!   code before the fused flat AdamW) against `flat_adamw::FlatAdamW` with
//!   `grad_clip::clip_grad_norm` on the flat gradient;
//! * **train step**: forward, backward, clipping and update on one minibatch,
//!   three ways: per-tensor (`backward()` into `.grad`, per-tensor clip and
//!   Adam), flat with `.grad` fields made views of one flat gradient buffer
//!   (autograd accumulates into it, one `zero_` per step), and flat with
//!   `run_backward` + one `cat` (what the kit does).
//!
//! `TLI_BENCH_THREADS` sets libtorch's intra-op threads (default 1).

use std::hint::black_box;
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::adam::{Adam, AdamConfig};
use tli_plugin_kit::bench_timing::median_seconds_per_call;
use tli_plugin_kit::flat_adamw::FlatAdamW;
use tli_plugin_kit::grad_clip::clip_grad_norm;
use tli_plugin_kit::mlp::Mlp;
use tli_plugin_kit::rng::Rng;

/// Seconds per timed run.
const RUN_SECONDS: f64 = 0.2;
const RUNS: usize = 9;
const MAX_GRAD_NORM: f64 = 10.0;

/// Median seconds per call of `f` (kit `bench_timing`).
fn measure(f: impl FnMut()) -> f64 {
    median_seconds_per_call(RUN_SECONDS, RUNS, f)
}

/// DQN's clipping before the flat optimizer (plugins/dqn, per tensor).
fn clip_per_tensor(params: &[&Tensor], max_norm: f64) -> Tensor {
    tch::no_grad(|| {
        let grads: Vec<Tensor> = params.iter().map(|p| p.grad()).collect();
        let norms: Vec<Tensor> = grads.iter().map(|g| g.norm()).collect();
        let total = Tensor::stack(&norms, 0).norm();
        let coef = (&total + 1e-6)
            .reciprocal()
            .g_mul_scalar(max_norm)
            .clamp_max(1.0);
        for mut g in grads {
            let _ = g.g_mul_(&coef);
        }
        total
    })
}

/// One network: `parts` are MLPs whose outputs are summed into the loss
/// (PPO's actor and critic are two).
struct Net {
    parts: Vec<Mlp>,
    input: Tensor,
}

impl Net {
    fn new(sizes: &[&[usize]], batch: i64, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let parts: Vec<Mlp> = sizes
            .iter()
            .map(|s| Mlp::new(s, &mut rng, Device::Cpu).unwrap())
            .collect();
        let x: Vec<f32> = (0..batch as usize * sizes[0][0])
            .map(|_| rng.normal() as f32)
            .collect();
        let input = Tensor::from_slice(&x).reshape([batch, sizes[0][0] as i64]);
        Self { parts, input }
    }

    fn params(&self) -> Vec<&Tensor> {
        self.parts.iter().flat_map(|m| m.parameters()).collect()
    }

    fn loss(&self) -> Tensor {
        self.parts
            .iter()
            .map(|m| m.forward(&self.input).unwrap().square().mean(Kind::Float))
            .reduce(|a, b| a + b)
            .unwrap()
    }
}

fn config() -> AdamConfig {
    AdamConfig {
        weight_decay: 0.0,
        ..AdamConfig::default()
    }
}

struct Row {
    name: &'static str,
    tensors: usize,
    params: i64,
    old_update: f64,
    fused_update: f64,
    old_train: f64,
    grad_views_train: f64,
    fused_train: f64,
}

fn bench(name: &'static str, sizes: &[&[usize]], batch: i64) -> Row {
    // Per-tensor: gradients from one backward pass, kept in `.grad`.
    let old = Net::new(sizes, batch, 1);
    let params = old.params();
    let mut adam = Adam::new(config(), &params).unwrap();
    old.loss().backward();
    let old_update = measure(|| {
        let _ = black_box(clip_per_tensor(&params, MAX_GRAD_NORM));
        adam.apply(&params, 1e-6).unwrap();
    });
    let old_train = measure(|| {
        old.loss().backward();
        let _ = black_box(clip_per_tensor(&params, MAX_GRAD_NORM));
        adam.apply(&params, 1e-6).unwrap();
    });

    // Flat, gradients by run_backward + cat.
    let fused = Net::new(sizes, batch, 1);
    let mut flat = FlatAdamW::new(config(), &fused.params()).unwrap();
    let grad = flat.gradients(&fused.loss()).unwrap();
    let fused_update = measure(|| {
        let _ = black_box(clip_grad_norm(&grad, MAX_GRAD_NORM).unwrap());
        flat.apply(&grad, 1e-6).unwrap();
    });
    let fused_train = measure(|| {
        let _ = black_box(
            flat.backward_step(&fused.loss(), 1e-6, MAX_GRAD_NORM)
                .unwrap(),
        );
    });

    // Flat, `.grad` fields as views of one flat gradient buffer.
    let views = Net::new(sizes, batch, 1);
    let mut flat_v = FlatAdamW::new(config(), &views.params()).unwrap();
    let gbuf = flat_v.params().values().zeros_like();
    views.loss().backward();
    for (i, p) in views.params().iter().enumerate() {
        let mut g = p.grad();
        g.set_data(&flat_v.params().view_of(&gbuf, i).unwrap());
    }
    let grad_views_train = measure(|| {
        views.loss().backward();
        let _ = black_box(clip_grad_norm(&gbuf, MAX_GRAD_NORM).unwrap());
        flat_v.apply(&gbuf, 1e-6).unwrap();
        let _ = tch::no_grad(|| gbuf.shallow_clone().zero_());
    });
    Row {
        name,
        tensors: params.len(),
        params: flat.params().numel(),
        old_update,
        fused_update,
        old_train,
        grad_views_train,
        fused_train,
    }
}

fn main() {
    let threads = std::env::var("TLI_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    tch::set_num_threads(threads);
    // (window 4 × 8 features + position), hidden [64, 64], 3 actions.
    let trading_obs = 4 * 8 + 1;
    let rows = [
        bench(
            "DQN CartPole [4, 256, 256, 2], batch 64",
            &[&[4, 256, 256, 2]],
            64,
        ),
        bench(
            "DQN trading [33, 64, 64, 3], batch 64",
            &[&[trading_obs, 64, 64, 3]],
            64,
        ),
        bench(
            "PPO CartPole actor [4, 64, 64, 2] + critic [4, 64, 64, 1], minibatch 128",
            &[&[4, 64, 64, 2], &[4, 64, 64, 1]],
            128,
        ),
        bench(
            "template [8, 64, 64, 1], batch 256",
            &[&[8, 64, 64, 1]],
            256,
        ),
    ];
    let us = |s: f64| format!("{:.1}", s * 1e6);
    println!("libtorch intra-op threads: {threads}\n");
    println!(
        "| network | tensors | parameters | update, per-tensor (µs) | update, fused (µs) | \
         speed-up | train step, per-tensor (µs) | train step, flat + `.grad` views (µs) | \
         train step, flat + run_backward/cat (µs) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.1}× | {} | {} | {} |",
            r.name,
            r.tensors,
            r.params,
            us(r.old_update),
            us(r.fused_update),
            r.old_update / r.fused_update,
            us(r.old_train),
            us(r.grad_views_train),
            us(r.fused_train),
        );
    }
}
