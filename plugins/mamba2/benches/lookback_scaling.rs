//! Training throughput against lookback: forward + backward of the Mamba-2
//! forecaster (default config: d_model 64, 2 layers, d_state 32, headdim 32)
//! at a fixed number of bars per step (`batch × lookback` = 16 384), for
//! lookbacks 256 … 4096, with the chunked SSD at several chunk sizes and with
//! the naive all-pairs form (one chunk spanning the whole window, i.e. the
//! `L × L` decay-masked matrix). Linear cost shows as constant bars/s.
//!
//! `cargo bench -p tli-plugin-mamba2 --bench lookback_scaling`
//! (`LOOKBACKS=256,1024 CHUNKS=64 REPEATS=3 THREADS=2` to narrow it).
//! Results go to docs/benchmarks.md ("Mamba-2").

use std::time::Instant;
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_mamba2::config::ForecasterConfig;
use tli_plugin_mamba2::model::Forecaster;

const BARS_PER_STEP: i64 = 16_384;
const FEATURES: i64 = 8;

fn list(key: &str, default: &str) -> Vec<usize> {
    std::env::var(key)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// Seconds of one forward + backward pass (median of `repeats`, after one warm-up).
fn time_step(model: &Forecaster, x: &Tensor, repeats: usize) -> f64 {
    let params = model.parameters();
    let mut times = Vec::with_capacity(repeats);
    for i in 0..=repeats {
        let started = Instant::now();
        let y = model.forward(x, 1, None).expect("forward");
        let loss = y.square().mean(Kind::Float);
        let grads = Tensor::run_backward(&[loss], &params, false, false);
        assert_eq!(grads.len(), params.len());
        if i > 0 {
            times.push(started.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    // As the `tli` binary starts (malloc policy, subnormals flushed to zero).
    let _ = tli_runtime::allocator::configure_from_env();
    let _ = tli_runtime::float_env::flush_denormals();
    let threads = list("THREADS", "2")[0];
    tch::set_num_threads(threads as i32);
    let lookbacks = list("LOOKBACKS", "256,512,1024,2048,4096");
    let chunks = list("CHUNKS", "32,64,128,256");
    let repeats = list("REPEATS", "3")[0];
    println!(
        "Mamba-2 forward+backward, {BARS_PER_STEP} bars per step, {threads} thread(s), \
         median of {repeats}"
    );
    println!("| lookback | batch | form | chunk | ms/step | bars/s |");
    println!("|---:|---:|---|---:|---:|---:|");
    for &lookback in &lookbacks {
        let batch = (BARS_PER_STEP / lookback as i64).max(1);
        let mut rng = Rng::new(1);
        let values: Vec<f32> = (0..batch * lookback as i64 * FEATURES)
            .map(|_| rng.normal() as f32)
            .collect();
        let x = Tensor::from_slice(&values).reshape([batch, lookback as i64, FEATURES]);
        let mut forms: Vec<(&str, usize)> = chunks
            .iter()
            .filter(|&&c| c < lookback)
            .map(|&c| ("chunked", c))
            .collect();
        forms.push(("all-pairs", lookback));
        for (form, chunk) in forms {
            let config = ForecasterConfig {
                lookback,
                chunk_size: chunk,
                ..ForecasterConfig::default()
            };
            let model = Forecaster::new(&config, FEATURES as usize, &mut Rng::new(2), Device::Cpu)
                .expect("model");
            let seconds = time_step(&model, &x, repeats);
            println!(
                "| {lookback} | {batch} | {form} | {chunk} | {:.1} | {:.0} |",
                seconds * 1e3,
                (batch * lookback as i64) as f64 / seconds
            );
        }
    }
}
