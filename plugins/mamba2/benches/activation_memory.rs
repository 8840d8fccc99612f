//! The memory model against a measurement: bytes in use on the CPU heap
//! (glibc `mallinfo2`: in-use arena bytes plus mmapped blocks, all arenas;
//! libtorch's CPU allocator takes tensors straight from malloc, without a
//! cache) while one training step runs, against
//! `memory::step_activation_bytes` for the same config. A sampler thread
//! polls the heap every 200 µs through the forward and backward pass; the
//! peak above the level before the step is the step's activation footprint
//! (inputs, everything autograd saved, the gradients in flight).
//!
//! Each config is measured twice: as initialised (the chunked SSD factors
//! its within-chunk decay) and with every `A_log` raised so that each chunk
//! decays beyond the factored form's range (the plain form, with its
//! per-head `(l, s)` decay matrices). Which form runs depends on the data,
//! so the estimate has to cover the plain one.
//!
//! `cargo bench -p tli-plugin-mamba2 --bench activation_memory`
//! Results go to docs/benchmarks.md ("Mamba-2").

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_mamba2::config::ForecasterConfig;
use tli_plugin_mamba2::memory::step_activation_bytes;
use tli_plugin_mamba2::model::Forecaster;

#[repr(C)]
#[derive(Default)]
struct Mallinfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}

extern "C" {
    fn mallinfo2() -> Mallinfo2;
}

fn heap_in_use() -> usize {
    // SAFETY: glibc's mallinfo2 takes no arguments and returns a plain struct.
    let m = unsafe { mallinfo2() };
    m.uordblks + m.hblkhd
}

const FEATURES: i64 = 8;

fn main() {
    tch::set_num_threads(1);
    let configs = [
        r#"{"lookback": 256, "batch_size": 32}"#,
        r#"{"lookback": 1024, "batch_size": 8, "chunk_size": 128}"#,
        r#"{"lookback": 4096, "batch_size": 4}"#,
        r#"{"lookback": 512, "batch_size": 16, "d_model": 128, "layers": 4, "d_state": 64, "headdim": 64}"#,
        r#"{"lookback": 256, "batch_size": 32, "loss_positions": 64, "horizons": 5, "quantiles": [0.1, 0.5, 0.9]}"#,
        r#"{"lookback": 2048, "batch_size": 2, "d_model": 96, "headdim": 16, "d_state": 8, "layers": 3, "chunk_size": 32}"#,
        r#"{"lookback": 768, "batch_size": 8, "d_model": 32, "expand": 4, "ngroups": 2, "headdim": 16, "d_state": 48, "layers": 1, "d_conv": 8}"#,
        r#"{"lookback": 300, "batch_size": 24, "d_model": 48, "headdim": 8, "d_state": 24, "layers": 6, "chunk_size": 100}"#,
        // Not used to fit the memory model's two weights:
        r#"{"lookback": 1500, "batch_size": 3, "d_model": 80, "headdim": 20, "d_state": 12, "layers": 2, "chunk_size": 48}"#,
        r#"{"lookback": 640, "batch_size": 12, "d_model": 64, "expand": 3, "headdim": 24, "d_state": 40, "layers": 3, "chunk_size": 80, "ngroups": 2}"#,
    ];
    println!(
        "| config | estimate MB | measured peak MB, factored | plain | estimate / measured, factored | plain |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for json in configs {
        let config = ForecasterConfig::parse(json).expect("config");
        let factored = measure(&config, false);
        let plain = measure(&config, true);
        let estimate = step_activation_bytes(&config, FEATURES as u64) as f64;
        println!(
            "| `{json}` | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
            estimate / 1e6,
            factored / 1e6,
            plain / 1e6,
            estimate / factored,
            estimate / plain
        );
    }
}

/// The heap peak of one training step above the level before it, in bytes;
/// `plain`: with `A = −exp(A_log)` at −10⁴ in every layer, so that every
/// chunk's decay spans far more than the factored form allows.
fn measure(config: &ForecasterConfig, plain: bool) -> f64 {
    let model =
        Forecaster::new(config, FEATURES as usize, &mut Rng::new(1), Device::Cpu).expect("model");
    if plain {
        tch::no_grad(|| {
            for layer in &model.stack.layers {
                let _ = layer.mixer.a_log.shallow_clone().fill_(1e4f64.ln());
            }
        });
    }
    let params = model.parameters();
    let mut rng = Rng::new(2);
    let (b, l) = (config.batch_size as i64, config.lookback as i64);
    let values: Vec<f32> = (0..b * l * FEATURES).map(|_| rng.normal() as f32).collect();
    let x = Tensor::from_slice(&values).reshape([b, l, FEATURES]);
    let base = heap_in_use();
    let peak = Arc::new(AtomicUsize::new(base));
    let running = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, running) = (peak.clone(), running.clone());
        std::thread::spawn(move || {
            while running.load(Ordering::Relaxed) {
                peak.fetch_max(heap_in_use(), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    // The step as the trainer runs it: the window batch, forecasts, loss, gradients.
    let window = x.copy();
    let k = config.loss_positions as i64;
    let forecast = model
        .forward(&window, config.loss_positions, None)
        .expect("forward");
    let target = Tensor::zeros([b, k, config.horizons as i64], (Kind::Float, Device::Cpu));
    let loss = (forecast.select(-1, 0) - &target)
        .square()
        .mean(Kind::Float);
    peak.fetch_max(heap_in_use(), Ordering::Relaxed);
    let grads = Tensor::run_backward(&[loss], &params, false, false);
    peak.fetch_max(heap_in_use(), Ordering::Relaxed);
    let flat = Tensor::cat(
        &grads.iter().map(|g| g.reshape([-1])).collect::<Vec<_>>(),
        0,
    );
    peak.fetch_max(heap_in_use(), Ordering::Relaxed);
    running.store(false, Ordering::Relaxed);
    sampler.join().expect("sampler");
    drop((flat, grads, forecast, window));
    peak.load(Ordering::Relaxed).saturating_sub(base) as f64
}
