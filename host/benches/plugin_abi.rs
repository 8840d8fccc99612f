//! Benchmark of the plugin boundary (run with `make bench`, or
//! `cargo bench -p tli-host --bench plugin_abi` after `cargo build --release --workspace`):
//!
//! * the cost of one host→plugin `step(1)` call on a trainer that does
//!   nothing (the `behaviour` fixture with its default config);
//! * the host's core-offer check that every plugin `is_cancelled()` poll
//!   makes on a runner thread (`core_sharing::offer_if_due`);
//! * the time to scan a plugin directory and load every plugin in it
//!   (template + behaviour), each round from fresh file paths so the dynamic
//!   loader really maps them again.
//!
//! Prints a Markdown table for docs/benchmarks.md.

use abi_stable::std_types::RArc;
use std::time::Instant;
use tli_data::synthetic_ar::{synthetic_ar_dataset, SyntheticArSpec};
use tli_host::registry::PluginRegistry;
use tli_host::services::TaskServices;
use tli_testkit::{cpu_task, library, synthetic, BEHAVIOUR, TEMPLATE};

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn main() {
    let libs = [TEMPLATE, BEHAVIOUR];
    for lib in libs {
        // Built? (Otherwise this panics, saying how to build it.)
        library(lib);
    }
    let work = tempfile::tempdir().expect("temporary directory");

    // Load time: fresh paths each round.
    let rounds = 15;
    let mut load_ms = Vec::new();
    let mut last_registry = None;
    for round in 0..rounds {
        let dir = work.path().join(format!("round{round}"));
        std::fs::create_dir_all(&dir).expect("create plugin dir");
        for lib in libs {
            let short = lib.rsplit('_').next().unwrap_or(lib);
            std::fs::copy(library(lib), dir.join(format!("libtli_plugin_{short}.so")))
                .expect("copy plugin");
        }
        let started = Instant::now();
        let registry = PluginRegistry::scan(&dir).expect("scan");
        load_ms.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(
            registry.loaded.len(),
            libs.len(),
            "refused: {:?}",
            registry.refused
        );
        last_registry = Some(registry);
    }
    let registry = last_registry.expect("at least one round");

    // step(1) on a do-nothing trainer.
    let behaviour = registry.get("behaviour").expect("behaviour plugin");
    let spec = cpu_task("bench", "{}", 0, u64::MAX, &synthetic(64));
    let mut trainer = behaviour
        .create_trainer(spec.clone(), TaskServices::new("behaviour", "bench"))
        .expect("trainer");
    let calls = 2_000_000u64;
    for _ in 0..100_000 {
        trainer.step(1).expect("step");
    }
    let mut ns_per_call = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        for _ in 0..calls {
            std::hint::black_box(trainer.step(std::hint::black_box(1)).expect("step"));
        }
        ns_per_call.push(started.elapsed().as_secs_f64() * 1e9 / calls as f64);
    }

    // For scale: step(1) of the template MLP (batch 256, 8→64→64→1) on CPU.
    let template = registry.get("template").expect("template plugin");
    let config = template.validate_config("{}").expect("config");
    let mut spec = spec;
    spec.config_json = config.into();
    spec.dataset = RArc::new(synthetic_ar_dataset(SyntheticArSpec::default()));
    let mut mlp = template
        .create_trainer(spec, TaskServices::new("template", "bench"))
        .expect("trainer");
    mlp.step(50).expect("warm-up");
    let mut mlp_us = Vec::new();
    for _ in 0..5 {
        let n = 400;
        let started = Instant::now();
        for _ in 0..n {
            mlp.step(1).expect("step");
        }
        mlp_us.push(started.elapsed().as_secs_f64() * 1e6 / n as f64);
    }

    // The core-offer check of each `is_cancelled()` poll, on a runner thread.
    let sharing = tli_host::orchestrator::core_sharing::share_this_thread();
    let polls = 20_000_000u64;
    let mut offer_ns = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        for _ in 0..polls {
            std::hint::black_box(tli_host::orchestrator::core_sharing::offer_if_due());
        }
        offer_ns.push(started.elapsed().as_secs_f64() * 1e9 / polls as f64);
    }
    drop(sharing);

    println!("| measurement | median | min | max | runs |");
    println!("|---|---|---|---|---|");
    let row = |name: &str, unit: &str, xs: &[f64]| {
        let min = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        println!(
            "| {name} | {:.2} {unit} | {min:.2} {unit} | {max:.2} {unit} | {} |",
            median(xs.to_vec()),
            xs.len()
        );
    };
    row(
        "host→plugin `step(1)`, do-nothing trainer",
        "ns",
        &ns_per_call,
    );
    row(
        "core-offer check per `is_cancelled()` poll (runner thread)",
        "ns",
        &offer_ns,
    );
    row(
        "load all plugins (2 libraries, fresh paths)",
        "ms",
        &load_ms,
    );
    row(
        "template MLP `step(1)` (batch 256), for scale",
        "µs",
        &mlp_us,
    );
    println!();
    println!("threads: libtorch intra-op = {}", tch::get_num_threads());
}
