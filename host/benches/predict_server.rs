//! `Predict` through the real server: a `tli host serve` child on loopback,
//! each model trained briefly on the ES sample by the real `tli train local
//! --save`, imported and loaded with the real client, then called with a
//! tonic client the way any client would: bars in (the model's look-back as
//! context), forecasts out. Unlike `predict_latency` (the predictor alone,
//! on rows already featurized) this includes the request's bytes, checking
//! and featurizing the bars, the predictor's lock and the response.
//!
//! * latency p50/p99 of one caller asking for one bar's outputs (batch 1);
//! * rows per second of one caller asking for 256 bars' (batch 256);
//! * requests per second of 32 concurrent callers at batch 1 (they queue on
//!   the model's predictor: one request at a time per model).
//!
//! Run: `cargo build --release --workspace && cargo bench -p tli-host --bench
//! predict_server` (`TLI_BENCH_ITERS`, default 200 requests per case;
//! `TLI_BENCH_DEVICE`, default `cpu`, the host's device and where the models
//! train (`scripts/gpu-check.sh` sets `cuda:0`); the host uses its defaults
//! otherwise: all cores shared by its intra-op threads).
//! Prints a Markdown table for docs/benchmarks.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use tli_proto::v1 as pb;
use tli_proto::v1::model_service_client::ModelServiceClient;
use tli_testkit::measure::{env_number, percentile};
use tli_testkit::{artifact, PluginDir, ServeProcess, TEMPLATE, TFT};
use tonic::transport::Channel;

const CASES: &[(&str, &str, &str, &str)] = &[
    ("template MLP", "template", "{}", "50"),
    ("TFT h64 FP32", "tft", r#"{"hidden_size":64}"#, "4"),
    (
        "TFT h64 INT8",
        "tft",
        r#"{"hidden_size":64,"precision":"int8"}"#,
        "4",
    ),
];

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/samples/es_proxy_sp500_1d.csv")
}

fn tli(plugins: &Path, args: &[&str]) {
    let out = Command::new(artifact("tli"))
        .args(args)
        .env("TLI_PLUGIN_DIR", plugins)
        .env("TLI_LOG", "warn")
        .output()
        .expect("run tli");
    assert!(
        out.status.success(),
        "tli {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The last `n` bars of `bars`.
fn tail(bars: &pb::Bars, n: usize) -> pb::Bars {
    let from = bars.ts_unix_ns.len().saturating_sub(n);
    pb::Bars {
        symbol: bars.symbol.clone(),
        interval: bars.interval.clone(),
        ts_unix_ns: bars.ts_unix_ns[from..].to_vec(),
        open: bars.open[from..].to_vec(),
        high: bars.high[from..].to_vec(),
        low: bars.low[from..].to_vec(),
        close: bars.close[from..].to_vec(),
        volume: bars.volume[from..].to_vec(),
        columns: Vec::new(),
    }
}

fn request(model: &str, bars: pb::Bars) -> pb::PredictRequest {
    pb::PredictRequest {
        model: model.into(),
        bars: Some(bars),
        start_unix_ns: None,
        end_unix_ns: None,
    }
}

async fn rows(client: &mut ModelServiceClient<Channel>, req: pb::PredictRequest) -> usize {
    client
        .predict(req)
        .await
        .expect("predict")
        .into_inner()
        .rows
        .map(|r| r.ts_unix_ns.len())
        .unwrap_or(0)
}

fn main() {
    let iters = env_number("TLI_BENCH_ITERS", 200) as usize;
    let device = std::env::var("TLI_BENCH_DEVICE").unwrap_or_else(|_| "cpu".into());
    let plugins = PluginDir::with(&[(TEMPLATE, "template"), (TFT, "tft")]);
    let work = tempfile::tempdir().expect("temporary directory");
    let state = work.path().join("state");
    let mut command = Command::new(artifact("tli"));
    command
        .args([
            "host",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ui-listen",
            "off",
        ])
        .arg("--state-dir")
        .arg(&state)
        .args(["--device", &device])
        .env("TLI_PLUGIN_DIR", plugins.path())
        .env("TLI_LOG", "warn");
    let mut host = ServeProcess::spawn(command, |_| false);
    let endpoint = format!("http://{}", host.address);
    let book = tli_data::contracts::ContractBook::builtin();
    let source = tli_data::BarSource {
        symbol: Some("ES".into()),
        ..tli_data::BarSource::file(sample())
    };
    let (table, _) = source.read(&book).expect("read the ES sample");
    let all = tli_wire::bars::bars_to_proto(&table);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");

    println!("| model (through the server) | batch 1 p50 | batch 1 p99 | batch 256 (rows/s) | 32 callers, batch 1 (requests/s) |");
    println!("|---|---|---|---|---|");
    for (label, plugin, config, steps) in CASES {
        let name = label.replace(' ', "-").to_lowercase();
        let bundle = work.path().join(&name);
        let data = format!("ES={}", sample().display());
        tli(
            plugins.path(),
            &[
                "train",
                "local",
                "-p",
                plugin,
                "--steps",
                steps,
                "--config",
                config,
                "--data",
                &data,
                "--save",
                bundle.to_str().expect("utf-8"),
            ],
        );
        for args in [
            vec![
                "models",
                "import",
                bundle.to_str().expect("utf-8"),
                "--name",
                &name,
            ],
            vec!["models", "load", &name],
        ] {
            let mut all_args = args.clone();
            all_args.extend(["--endpoint", &endpoint]);
            tli(plugins.path(), &all_args);
        }
        runtime.block_on(async {
            let channel = Channel::from_shared(endpoint.clone())
                .expect("endpoint")
                .connect()
                .await
                .expect("connect");
            let mut client = ModelServiceClient::new(channel).max_decoding_message_size(64 << 20);
            // How many of 300 bars get outputs: the rest is the context each request needs.
            let probe = tail(&all, 300);
            let context = 300 - rows(&mut client, request(&name, probe.clone())).await;
            let one = tail(&all, context + 1);
            let batch = tail(&all, context + 256);
            assert_eq!(rows(&mut client, request(&name, one.clone())).await, 1);
            assert_eq!(rows(&mut client, request(&name, batch.clone())).await, 256);
            let mut secs = Vec::with_capacity(iters);
            for _ in 0..iters {
                let t = Instant::now();
                rows(&mut client, request(&name, one.clone())).await;
                secs.push(t.elapsed().as_secs_f64());
            }
            secs.sort_by(|a, b| a.total_cmp(b));
            let big_iters = (iters / 10).max(3);
            let t = Instant::now();
            for _ in 0..big_iters {
                rows(&mut client, request(&name, batch.clone())).await;
            }
            let rows_per_s = (256 * big_iters) as f64 / t.elapsed().as_secs_f64();
            // 32 callers on one multiplexed connection, each waiting for its answer.
            let per_caller = (iters / 32).max(1);
            let t = Instant::now();
            let callers: Vec<_> = (0..32)
                .map(|_| {
                    let mut c = client.clone();
                    let (name, one) = (name.clone(), one.clone());
                    tokio::spawn(async move {
                        for _ in 0..per_caller {
                            rows(&mut c, request(&name, one.clone())).await;
                        }
                    })
                })
                .collect();
            for caller in callers {
                caller.await.expect("caller");
            }
            let concurrent = (32 * per_caller) as f64 / t.elapsed().as_secs_f64();
            println!(
                "| {label} | {:.2} ms | {:.2} ms | {rows_per_s:.0} | {concurrent:.0} |",
                percentile(&secs, 0.5) * 1e3,
                percentile(&secs, 0.99) * 1e3,
            );
        });
    }
    let _ = host.child.kill();
    let _ = host.child.wait();
}
