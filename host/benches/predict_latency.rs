//! Inference benchmark of the in-process predictor (plugin API 1.2): each
//! model is trained briefly on the ES sample by the real `tli train local
//! --save`, loaded from its bundle, and timed on bars already featurized
//! (what `tli predict` and a resident model pay per request besides
//! featurizing):
//!
//! * latency p50/p99 of a request for one bar (batch 1: the newest bar, the
//!   file before it as context);
//! * throughput of a request for 256 bars (rows predicted per second);
//! * Mamba-2 streamed bar by bar (its O(1) recurrent step) beside windowed;
//! * the predictor's measured memory, and INT8/FP32 ratios of latency and
//!   memory for the TFT at three sizes, the largest the seed's size class
//!   (hidden 1024, 178 M parameters, on 400 bars).
//!
//! Run: `cargo build --release --workspace && cargo bench -p tli-host --bench
//! predict_latency` (`TLI_BENCH_ITERS`, default 200 requests per case;
//! `TLI_BENCH_THREADS`, default 1 intra-op thread; `TLI_BENCH_DEVICE`, default
//! `cpu`, where models train and predict (`scripts/gpu-check.sh` sets
//! `cuda:0`); `TLI_BENCH_CASES`, a
//! comma-separated list of label parts to run only those, e.g. `h1024`).
//! Prints a Markdown table for docs/benchmarks.md.

use std::path::{Path, PathBuf};
use std::time::Instant;
use tli_data::contracts::ContractBook;
use tli_data::BarSource;
use tli_host::registry::PluginRegistry;
use tli_models::Bundle;
use tli_plugin_api::{task_inputs::column, Device, TaskInputs};
use tli_runtime::models::{LoadedModel, PredictWindow};
use tli_testkit::measure::{env_number, percentile};
use tli_testkit::{artifact, PluginDir, DQN, MAMBA2, PPO, TEMPLATE, TFT};

struct Case {
    label: &'static str,
    plugin: &'static str,
    config: &'static str,
    steps: &'static str,
    /// Bars of the ES sample to train and predict on (all of it: 0).
    bars: usize,
}

const CASES: &[Case] = &[
    Case {
        label: "template MLP",
        plugin: "template",
        config: "{}",
        steps: "50",
        bars: 0,
    },
    Case {
        label: "TFT h64 FP32",
        plugin: "tft",
        config: r#"{"hidden_size":64}"#,
        steps: "4",
        bars: 0,
    },
    Case {
        label: "TFT h64 INT8",
        plugin: "tft",
        config: r#"{"hidden_size":64,"precision":"int8"}"#,
        steps: "4",
        bars: 0,
    },
    Case {
        label: "TFT h160 FP32",
        plugin: "tft",
        config: r#"{"hidden_size":160}"#,
        steps: "2",
        bars: 0,
    },
    Case {
        label: "TFT h160 INT8",
        plugin: "tft",
        config: r#"{"hidden_size":160,"precision":"int8"}"#,
        steps: "2",
        bars: 0,
    },
    Case {
        label: "Mamba-2",
        plugin: "mamba2",
        config: "{}",
        steps: "4",
        bars: 0,
    },
    Case {
        label: "DQN",
        plugin: "dqn",
        config: r#"{"learning_starts":100}"#,
        steps: "200",
        bars: 0,
    },
    Case {
        label: "PPO",
        plugin: "ppo",
        config: r#"{"num_envs":2,"num_steps":64}"#,
        steps: "128",
        bars: 0,
    },
    // The seed's size class (178 M parameters, docs/benchmarks.md "Memory at the seed's size
    // class"), on the first 400 bars so that a step and an evaluation take seconds.
    Case {
        label: "TFT h1024 FP32",
        plugin: "tft",
        config: SEED_SIZE_FP32,
        steps: "1",
        bars: 400,
    },
    Case {
        label: "TFT h1024 INT8",
        plugin: "tft",
        config: SEED_SIZE_INT8,
        steps: "1",
        bars: 400,
    },
];

const SEED_SIZE_FP32: &str =
    r#"{"hidden_size":1024,"lookback":32,"batch_size":8,"eval_batch_size":8}"#;
const SEED_SIZE_INT8: &str =
    r#"{"hidden_size":1024,"lookback":32,"batch_size":8,"eval_batch_size":8,"precision":"int8"}"#;

/// The first `bars` bars of the ES sample (all: 0) as a file in `dir`.
fn bars_file(dir: &Path, bars: usize) -> PathBuf {
    if bars == 0 {
        return sample();
    }
    let text = std::fs::read_to_string(sample()).expect("read the ES sample");
    let kept: Vec<&str> = text.lines().take(bars + 1).collect();
    let path = dir.join(format!("es_{bars}.csv"));
    std::fs::write(&path, kept.join("\n") + "\n").expect("write the bars");
    path
}

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/samples/es_proxy_sp500_1d.csv")
}

/// Trains `case` on `device` with the real binary and returns its bundle, or why not.
fn train(plugins: &Path, work: &Path, case: &Case, device: Device) -> Result<PathBuf, String> {
    let dir = work.join(case.label.replace(' ', "_"));
    let data = format!("ES={}", bars_file(work, case.bars).display());
    let out = std::process::Command::new(artifact("tli"))
        .args([
            "train",
            "local",
            "-p",
            case.plugin,
            "--steps",
            case.steps,
            "--slice",
            "1",
        ])
        .args(["--config", case.config, "--data", &data, "--device"])
        .arg(device.to_string())
        .arg("--save")
        .arg(&dir)
        .env("TLI_PLUGIN_DIR", plugins)
        .env("TLI_LOG", "warn")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("failed").to_string());
    }
    Ok(dir)
}

/// Seconds of each of `iters` calls of `f`, sorted.
fn timed(iters: u64, mut f: impl FnMut()) -> Vec<f64> {
    f(); // warm-up
    let mut secs: Vec<f64> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    secs.sort_by(|a, b| a.total_cmp(b));
    secs
}

/// Rows `range` of every part of a one-dataset batch (its annex sliced to match).
fn slice(batch: &TaskInputs, range: std::ops::Range<usize>) -> TaskInputs {
    let d = &batch.datasets[0];
    let w = d.feature_names.len();
    let mut part = (**d).clone();
    part.timestamps = d.timestamps[range.clone()].to_vec().into();
    part.features = d.features[range.start * w..range.end * w].to_vec().into();
    part.close = d.close[range.clone()].to_vec().into();
    let mut annex = batch.annex(0).expect("the batch's annex");
    annex.row_markers = annex.row_markers[range].to_vec();
    TaskInputs::new(
        vec![(abi_stable::std_types::RArc::new(part), annex)],
        batch.pooled,
        batch.asset_count(),
    )
}

fn with_predict_from(mut batch: TaskInputs, from: usize) -> TaskInputs {
    batch
        .columns
        .retain(|c| c.name.as_str() != column::PREDICT_FROM);
    batch.columns.push(tli_plugin_api::Column {
        dataset: 0,
        name: column::PREDICT_FROM.into(),
        integers: vec![from as i64].into(),
        ..Default::default()
    });
    batch
}

fn main() {
    let iters = env_number("TLI_BENCH_ITERS", 200);
    let threads = env_number("TLI_BENCH_THREADS", 1) as i32;
    let device: Device = std::env::var("TLI_BENCH_DEVICE")
        .unwrap_or_else(|_| "cpu".into())
        .parse()
        .expect("TLI_BENCH_DEVICE: cpu or cuda:N");
    tch::set_num_threads(threads);
    let plugins = PluginDir::with(&[
        (TEMPLATE, "template"),
        (TFT, "tft"),
        (MAMBA2, "mamba2"),
        (DQN, "dqn"),
        (PPO, "ppo"),
    ]);
    let work = tempfile::tempdir().expect("temporary directory");
    let registry = PluginRegistry::scan(plugins.path()).expect("scan plugins");
    let book = ContractBook::builtin();

    println!("| model | batch 1 p50 | batch 1 p99 | batch 256 (rows/s) | streamed bar p50 | predictor memory |");
    println!("|---|---|---|---|---|---|");
    let mut p50_of = std::collections::BTreeMap::new();
    let mut memory_of = std::collections::BTreeMap::new();
    let only: Vec<String> = std::env::var("TLI_BENCH_CASES")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    for case in CASES {
        if !only.is_empty() && !only.iter().any(|o| case.label.contains(o.as_str())) {
            continue;
        }
        let bundle = match train(plugins.path(), work.path(), case, device) {
            Ok(dir) => dir,
            Err(why) => {
                println!("| {} | skipped: {why} | | | | |", case.label);
                continue;
            }
        };
        let source = BarSource {
            symbol: Some("ES".into()),
            ..BarSource::file(bars_file(work.path(), case.bars))
        };
        let (table, notes) = source.read(&book).expect("read the ES bars");
        let contract = source.contract(&table, &notes, &book).expect("ES contract");
        let bundle = Bundle::open(&bundle).expect("open the bundle");
        let mut model =
            LoadedModel::load(&registry, &bundle, case.label, Device::Cpu).expect("load the model");
        let prepared = model
            .prepare(&table, contract, PredictWindow::default())
            .expect("featurize the sample");
        let n = prepared.rows.len();
        // The newest bar that gets an output (a TFT with known-future inputs
        // needs the bars after it), and the 256 before it.
        let all = model
            .predict_batch(prepared.batch.clone())
            .expect("predict the file");
        let last = all.rows.iter().copied().max().expect("some output") as usize;
        let one = with_predict_from(prepared.batch.clone(), last);
        let got = model
            .predict_batch(one.clone())
            .expect("predict one bar")
            .len();
        assert_eq!(got, 1, "{}: a batch-1 request gave {got} rows", case.label);
        let latency = timed(iters, || {
            model.predict_batch(one.clone()).expect("predict one bar");
        });
        let many = with_predict_from(prepared.batch.clone(), last - 255);
        let rows = model
            .predict_batch(many.clone())
            .expect("predict 256 bars")
            .len();
        let per_256 = timed(iters.div_ceil(4).max(5), || {
            model.predict_batch(many.clone()).expect("predict 256 bars");
        });
        // Streamed: 400 bars of history in one call, then the last 100 one by one.
        let history = n.saturating_sub(500);
        let streamed = model.reset_stream().and_then(|_| {
            model.stream_batch(slice(&prepared.batch, history..n - 100))?;
            let mut secs = Vec::new();
            for r in n - 100..n {
                let bar = slice(&prepared.batch, r..r + 1);
                let t = Instant::now();
                model.stream_batch(bar)?;
                secs.push(t.elapsed().as_secs_f64());
            }
            secs.sort_by(|a, b| a.total_cmp(b));
            Ok(secs)
        });
        let memory = model.memory().map(|m| m.total()).unwrap_or(0);
        let p50 = percentile(&latency, 0.5);
        p50_of.insert(case.label, p50);
        memory_of.insert(case.label, memory);
        println!(
            "| {} | {:.3} ms | {:.3} ms | {:.0} | {} | {} |",
            case.label,
            p50 * 1e3,
            percentile(&latency, 0.99) * 1e3,
            rows as f64 / percentile(&per_256, 0.5),
            match streamed {
                Ok(s) => format!("{:.3} ms", percentile(&s, 0.5) * 1e3),
                Err(_) => "windowed only".into(),
            },
            tli_core::byte_size::format_bytes(memory),
        );
    }
    for size in ["h64", "h160", "h1024"] {
        let (f, i) = (format!("TFT {size} FP32"), format!("TFT {size} INT8"));
        if let (Some(f32_p50), Some(i8_p50)) = (p50_of.get(f.as_str()), p50_of.get(i.as_str())) {
            println!(
                "\nTFT {size}: INT8/FP32 latency (batch 1, p50) {:.2}x, predictor memory {:.2}x",
                i8_p50 / f32_p50,
                memory_of[i.as_str()] as f64 / memory_of[f.as_str()].max(1) as f64
            );
        }
    }
    println!("\n({iters} requests per case, {threads} intra-op thread(s), {device})");
}
