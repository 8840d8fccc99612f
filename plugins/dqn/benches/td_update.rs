//! One DQN gradient step on one core, by way of the two TD updates:
//! `cargo bench -p tli-plugin-dqn --bench td_update`.
//!
//! For DQN's default networks (CartPole `[4, 128, 128, 2]` and trading
//! `[33, 64, 64, 3]`, batch 64, Double DQN, Huber δ 1, clipping at 10) it
//! prints a Markdown table of the median time of
//!
//! * **fill**: drawing a minibatch from a full replay buffer into the
//!   preallocated tensors;
//! * **autograd**: fill, then the loss through autograd, `backward`, clipping
//!   and the fused AdamW step (what DQN did before, and still does for a
//!   dueling head);
//! * **hand-written**: fill, then the same update with the gradient written
//!   out (`td_update::ManualTd`).
//!
//! `TLI_BENCH_THREADS` sets libtorch's intra-op threads (default 1).

use std::hint::black_box;
use tch::Device;
use tli_plugin_dqn::bench_api::{
    autograd_update, layout, ManualTd, MinibatchTensors, QNet, Replay,
};
use tli_plugin_kit::adam::AdamConfig;
use tli_plugin_kit::bench_timing::median_seconds_per_call;
use tli_plugin_kit::flat_adamw::FlatAdamW;
use tli_plugin_kit::rng::Rng;

const RUN_SECONDS: f64 = 0.3;
const RUNS: usize = 9;
const LR: f64 = 1e-6;
const MAX_GRAD_NORM: f64 = 10.0;

/// Median seconds per call of `f` (kit `bench_timing`).
fn measure(f: impl FnMut()) -> f64 {
    median_seconds_per_call(RUN_SECONDS, RUNS, f)
}

struct Setup {
    online: QNet,
    target: QNet,
    optimizer: FlatAdamW,
    replay: Replay,
    batch: MinibatchTensors,
    rng: Rng,
}

fn setup(obs: usize, hidden: &[usize], actions: usize, batch: usize) -> Setup {
    let net_layout = layout(obs, hidden, actions, false);
    let mut rng = Rng::new(7);
    let online = QNet::new(&net_layout, &mut rng.fork(1), Device::Cpu).unwrap();
    let target = QNet::new(&net_layout, &mut rng.fork(2), Device::Cpu).unwrap();
    let optimizer = FlatAdamW::new(
        AdamConfig {
            learning_rate: LR,
            ..AdamConfig::default()
        },
        &online.parameters(),
    )
    .unwrap();
    let capacity = 100_000;
    let mut replay = Replay::new(capacity, obs);
    let mut o = vec![0f32; obs];
    let mut n = vec![0f32; obs];
    for i in 0..capacity {
        o.iter_mut().for_each(|x| *x = rng.normal() as f32);
        n.iter_mut().for_each(|x| *x = rng.normal() as f32);
        let discount = if i % 50 == 0 { 0.0 } else { 0.95 };
        replay.push(&o, (i % actions) as u32, rng.normal() as f32, &n, discount);
    }
    let batch = MinibatchTensors::new(batch, obs, Device::Cpu).unwrap();
    Setup {
        online,
        target,
        optimizer,
        replay,
        batch,
        rng,
    }
}

fn main() {
    let threads = std::env::var("TLI_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    tch::set_num_threads(threads);
    println!("| network | batch | fill µs | autograd µs | hand-written µs | speed-up |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, obs, hidden, actions) in [
        ("CartPole [4, 128, 128, 2]", 4, vec![128, 128], 2),
        ("trading [33, 64, 64, 3]", 33, vec![64, 64], 3),
    ] {
        let batch_size = 64;
        let mut s = setup(obs, &hidden, actions, batch_size);
        let only_manual = std::env::var_os("TLI_BENCH_ONLY_HAND_WRITTEN").is_some();
        let fill = measure(|| s.batch.fill(&s.replay, &mut s.rng).unwrap());
        let autograd = if only_manual {
            f64::NAN
        } else {
            measure(|| {
                s.batch.fill(&s.replay, &mut s.rng).unwrap();
                let stats = autograd_update(
                    &s.online,
                    &s.target,
                    &mut s.optimizer,
                    &s.batch,
                    true,
                    1.0,
                    LR,
                    MAX_GRAD_NORM,
                )
                .unwrap();
                drop(black_box(stats.loss));
            })
        };
        let mut manual = ManualTd::new(&s.online, &s.target, &s.optimizer, &s.batch, true, 1.0)
            .unwrap()
            .unwrap();
        let hand = measure(|| {
            s.batch.fill(&s.replay, &mut s.rng).unwrap();
            let stats = manual
                .update(&s.batch, &mut s.optimizer, LR, MAX_GRAD_NORM)
                .unwrap();
            drop(black_box(stats.loss));
        });
        println!(
            "| {name} | {batch_size} | {:.1} | {:.1} | {:.1} | {:.2}× |",
            fill * 1e6,
            autograd * 1e6,
            hand * 1e6,
            autograd / hand
        );
    }
}
