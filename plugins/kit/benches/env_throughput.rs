//! Environment throughput on one core: `cargo bench -p tli-plugin-kit --bench env_throughput`.
//!
//! Prints a Markdown table of env-steps per second (median of several timed
//! runs after a warm-up) for the vectorized trading environment (window 32 ×
//! 8 features over ~100k synthetic rows), with and without writing
//! observations, and for the vectorized CartPole.

use std::hint::black_box;
use std::time::Instant;
use tli_plugin_api::ContractTerms;
use tli_plugin_kit::env::{TradingConfig, VecCartPole, VecTradingEnv};
use tli_plugin_kit::rng::Rng;

const ROWS: usize = 100_000;
const FEATURES: usize = 8;
/// Seconds per timed run.
const RUN_SECONDS: f64 = 0.1;
const RUNS: usize = 9;
/// Distinct action rows cycled through (pre-drawn, so the RNG is not timed).
const ACTION_ROWS: usize = 1024;

/// Median steps/s of `RUNS` timed runs of `f`, each about `RUN_SECONDS` long
/// (the call count is calibrated by an untimed warm-up).
fn measure(steps_per_call: usize, mut f: impl FnMut(usize)) -> f64 {
    let mut timed = |calls: usize| {
        let t0 = Instant::now();
        for k in 0..calls {
            f(k);
        }
        t0.elapsed().as_secs_f64()
    };
    let mut calls = 1000;
    loop {
        let secs = timed(calls);
        if secs > 0.02 {
            calls = ((calls as f64) * RUN_SECONDS / secs).ceil() as usize;
            break;
        }
        calls *= 4;
    }
    let mut rates: Vec<f64> = (0..RUNS)
        .map(|_| (calls * steps_per_call) as f64 / timed(calls))
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[RUNS / 2]
}

fn actions(n: usize, num_actions: u64, rng: &mut Rng) -> Vec<u32> {
    (0..ACTION_ROWS * n)
        .map(|_| rng.below(num_actions) as u32)
        .collect()
}

fn fmt_rate(x: f64) -> String {
    format!("{:.2} M", x / 1e6)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut rng = Rng::new(2024);
    let features: Vec<f32> = (0..ROWS * FEATURES).map(|_| rng.normal() as f32).collect();
    let mut price = 4000.0f64;
    let close: Vec<f64> = (0..ROWS)
        .map(|_| {
            price = (price + 0.25 * (rng.normal() * 8.0).round()).max(100.0);
            price
        })
        .collect();
    let terms = ContractTerms {
        tick_size: 0.25,
        point_value: 50.0,
        ..ContractTerms::default()
    };

    println!("| environment | N | observations | env-steps/s | observation bytes/s |");
    println!("|---|---:|---|---:|---:|");
    for vol_scaled in [false, true] {
        for n in [1usize, 16, 64, 256] {
            let config = TradingConfig {
                vol_scaled,
                ..TradingConfig::default()
            };
            let mut env =
                VecTradingEnv::from_slices(&features, FEATURES, &close, &terms, config, n, 7)?;
            let obs_dim = env.obs_dim();
            let acts = actions(n, env.num_actions() as u64, &mut rng);
            let mut obs = vec![0f32; n * obs_dim];
            let mut rewards = vec![0f32; n];
            let mut dones = vec![false; n];
            let name = if vol_scaled {
                "trading (vol_scaled)"
            } else {
                "trading"
            };
            let with_obs = measure(n, |k| {
                let a = &acts[(k % ACTION_ROWS) * n..][..n];
                let r = env.step(a, &mut obs, &mut rewards, &mut dones);
                black_box((&r, &obs, &rewards, &dones));
            });
            let obs_bytes = with_obs * (obs_dim * 4) as f64;
            println!(
                "| {name} 32×{FEATURES} | {n} | written | {} | {:.2} GB/s |",
                fmt_rate(with_obs),
                obs_bytes / 1e9
            );
            let without = measure(n, |k| {
                let a = &acts[(k % ACTION_ROWS) * n..][..n];
                let r = env.step_without_observations(a, &mut rewards, &mut dones);
                black_box((&r, &rewards, &dones));
            });
            println!(
                "| {name} 32×{FEATURES} | {n} | not written | {} | – |",
                fmt_rate(without)
            );
        }
    }
    for n in [1usize, 16, 256] {
        let mut env = VecCartPole::new(n, 7)?;
        let acts = actions(n, 2, &mut rng);
        let mut obs = vec![0f32; n * 4];
        let mut rewards = vec![0f32; n];
        let (mut term, mut trunc) = (vec![false; n], vec![false; n]);
        let rate = measure(n, |k| {
            let a = &acts[(k % ACTION_ROWS) * n..][..n];
            let r = env.step(a, &mut obs, &mut rewards, &mut term, &mut trunc);
            black_box((&r, &obs, &rewards, &term, &trunc));
            if k.is_multiple_of(64) {
                env.drain_completed().for_each(drop);
            }
        });
        println!(
            "| cartpole | {n} | written | {} | {:.2} GB/s |",
            fmt_rate(rate),
            rate * 16.0 / 1e9
        );
    }
    println!(
        "\nMedian of {RUNS} runs of ~{RUN_SECONDS} s each after an untimed warm-up; \
         {ROWS} rows; trading obs = 32 × {FEATURES} + 1 floats; uniformly random actions."
    );
    Ok(())
}
