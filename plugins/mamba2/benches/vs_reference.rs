//! tli's side of the Mamba-2 side-by-side speed run (`scripts/bench-vs-reference.sh
//! mamba2`, against `scripts/reference/mamba2_ssd.py`): the forecaster at the
//! plugin's default config, `BARS` bars per step (`batch = BARS / lookback`),
//! timing
//!
//! * `fwd_bwd_ms`: forward over the windows, MSE of the last bar's forecast,
//!   backward to every parameter;
//! * `step_ms`: the trainer's whole step (forward, masked loss, flat gradient,
//!   global-norm clip at 1.0, AdamW update).
//!
//! One JSON line per lookback, each figure the median of `REPEATS` timed runs
//! after one warm-up:
//! `{"impl": "tli", "lookback": L, "batch": B, "fwd_bwd_ms": …, "step_ms": …}`.
//!
//! `cargo bench -p tli-plugin-mamba2 --bench vs_reference`
//! (`LOOKBACKS=256,1024,4096 BARS=16384 REPEATS=5 THREADS=2`).

use std::time::Instant;
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::forecast_loss::masked_loss;
use tli_plugin_kit::grad_clip::clip_grad_norm;
use tli_plugin_kit::rng::Rng;
use tli_plugin_mamba2::config::ForecasterConfig;
use tli_plugin_mamba2::model::Forecaster;

fn env_list(key: &str, default: &str) -> Vec<usize> {
    std::env::var(key)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn env_one(key: &str, default: usize) -> usize {
    env_list(key, &default.to_string())
        .first()
        .copied()
        .unwrap_or(default)
}

/// Median milliseconds of `repeats` runs of `f`, after one warm-up run.
fn median_ms(repeats: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..repeats.max(1))
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    // As the `tli` binary starts: the host's malloc policy (one task: blocks
    // stay in the heap between steps) and subnormal floats flushed to zero
    // (`TLI_MALLOC=glibc`, `TLI_DENORMALS=keep` to leave either as glibc and
    // the CPU have them, as the reference runs).
    let _ = tli_runtime::allocator::configure_from_env();
    let _ = tli_runtime::float_env::flush_denormals();
    tch::set_num_threads(env_one("THREADS", 2) as i32);
    let bars = env_one("BARS", 16_384);
    let repeats = env_one("REPEATS", 5);
    let features = env_one("FEATURES", 8);
    for lookback in env_list("LOOKBACKS", "256,1024,4096") {
        let batch = (bars / lookback).max(1);
        let config = ForecasterConfig {
            lookback,
            ..ForecasterConfig::default()
        };
        let model =
            Forecaster::new(&config, features, &mut Rng::new(1), Device::Cpu).expect("model");
        let mut optimizer = model.optimizer(&config).expect("optimizer");
        let mut rng = Rng::new(2);
        let mut draw = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.normal() as f32).collect() };
        let x = Tensor::from_slice(&draw(batch * lookback * features)).reshape([
            batch as i64,
            lookback as i64,
            features as i64,
        ]);
        let y = Tensor::from_slice(&draw(batch)).reshape([batch as i64, 1, 1]);
        let valid = Tensor::ones([batch as i64, 1, 1], (Kind::Float, Device::Cpu));

        let fwd_bwd_ms = median_ms(repeats, || {
            let forecast = model.forward(&x, 1, None).expect("forward");
            let loss = forecast
                .select(-1, 0)
                .f_sub(&y)
                .expect("loss")
                .square()
                .mean(Kind::Float);
            let grads = optimizer
                .params()
                .tensor_gradients(&loss)
                .expect("backward");
            assert!(!grads.is_empty());
        });
        let step_ms = median_ms(repeats, || {
            let forecast = model.forward(&x, 1, None).expect("forward");
            let loss = masked_loss(&forecast, &y, &valid, &[]).expect("loss");
            let grad = optimizer.gradients(&loss).expect("backward");
            let _norm = clip_grad_norm(&grad, config.max_grad_norm).expect("clip");
            optimizer
                .apply(&grad, config.learning_rate)
                .expect("update");
        });
        println!(
            "{{\"impl\": \"tli\", \"lookback\": {lookback}, \"batch\": {batch}, \
             \"fwd_bwd_ms\": {fwd_bwd_ms:.2}, \"step_ms\": {step_ms:.2}}}"
        );
    }
}
