//! Models over gRPC with the real binaries: a host's task is a model that
//! `tli models list|show|export` reach through the host; its bundle imported
//! into a fresh host predicts byte for byte what the bundle predicts in
//! process; a loaded model holds memory through the arbiter (`tli
//! resources`); `PredictStream` gives, bar by bar, what `Predict` gives for
//! the whole file; bad imports change nothing; and 200 concurrent `Predict`
//! callers on one loaded TFT are all answered while training runs beside.

use super::predict_cli::{es_bars, host_run};
use std::path::Path;
use tli_e2e_tests::*;
use tli_proto::v1 as pb;
use tli_proto::v1::model_service_client::ModelServiceClient;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(server: &Server) -> ModelServiceClient<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    ModelServiceClient::new(channel).max_decoding_message_size(64 << 20)
}

/// The bars of a CSV bar file, as the client sends them.
fn bars_of(path: &str, take: usize) -> pb::Bars {
    let book = tli_data::contracts::ContractBook::load(None).unwrap();
    let source = tli_data::BarSource::file(path);
    let (table, _) = source.read(&book).unwrap();
    let mut bars = tli_wire::bars::bars_to_proto(&table);
    bars.ts_unix_ns.truncate(take);
    for column in [
        &mut bars.open,
        &mut bars.high,
        &mut bars.low,
        &mut bars.close,
    ] {
        column.truncate(take);
    }
    bars.volume.truncate(take);
    bars
}

fn one_bar(bars: &pb::Bars, i: usize) -> pb::Bars {
    pb::Bars {
        symbol: bars.symbol.clone(),
        interval: bars.interval.clone(),
        ts_unix_ns: vec![bars.ts_unix_ns[i]],
        open: vec![bars.open[i]],
        high: vec![bars.high[i]],
        low: vec![bars.low[i]],
        close: vec![bars.close[i]],
        volume: vec![bars.volume[i]],
        columns: Vec::new(),
    }
}

fn csv_predict(server: &Server, model: &str, data: &str) -> Vec<u8> {
    let out = server.client(&["predict", "--model", model, "--data", data, "-o", "csv"]);
    assert!(out.status.success(), "{}", stderr(&out));
    out.stdout
}

fn reservations(server: &Server) -> Vec<serde_json::Value> {
    let resources = ok_json(&server.client(&["resources", "-o", "json"]));
    resources["devices"][0]["reservations"]
        .as_array()
        .unwrap()
        .clone()
}

fn refused(out: &std::process::Output, expected: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    let text = stderr(out);
    assert!(text.contains(expected), "expected {expected:?} in: {text}");
    assert_eq!(text.trim().lines().count(), 1, "one line: {text}");
}

/// `grpcurl -plaintext ADDRESS args…` (scripts/grpcurl.sh installs it); its stdout.
fn grpcurl(server: &Server, args: &[&str]) -> String {
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/grpcurl");
    assert!(
        binary.exists(),
        "{} is missing: run `make grpc-tools` (scripts/grpcurl.sh)",
        binary.display()
    );
    let mut all = vec!["-plaintext", "-max-time", "30"];
    let (last, head) = args.split_last().unwrap();
    all.extend(head);
    all.push(&server.address);
    all.push(last);
    let out = std::process::Command::new(binary)
        .args(&all)
        .output()
        .expect("run grpcurl");
    assert!(out.status.success(), "grpcurl {all:?}: {}", stderr(&out));
    stdout(&out)
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    ["model.json", "weights.safetensors", "checksums.sha256"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap()))
        .collect()
}

#[test]
fn a_model_exported_by_one_host_predicts_the_same_on_another_and_streams_bar_by_bar() {
    let plugins = template_and_behaviour();
    let dir = tempfile::tempdir().unwrap();
    let es = es_bars(dir.path(), "es.csv", 2500, 1.0);
    let short = es_bars(dir.path(), "es-short.csv", 400, 1.0);
    let state_a = host_run(
        &plugins,
        dir.path(),
        serde_json::json!({
            "name": "served",
            "models": [{"plugin": "template", "steps": 100, "config": {"hidden_sizes": [16]}}],
            "assets": [{"data": es}],
            "checkpoint": {"every_steps": 50}
        }),
    );
    let a = Server::start(plugins.path(), &state_a, &[]);

    // The task is model "1" on the host, as offline.
    let listed = ok_json(&a.client(&["models", "list", "-o", "json"]));
    let model = &listed["models"][0];
    assert_eq!(
        (model["id"].as_str(), model["source"].as_str()),
        (Some("1"), Some("task"))
    );
    assert_eq!(model["steps"], 100);
    assert!(model["metrics"]["test_mse"].as_f64().unwrap() > 0.0);
    assert!(model["resident"].is_null());
    let offline = ok_json(&run_tli(
        plugins.path(),
        &[
            "models",
            "list",
            "--state-dir",
            state_a.to_str().unwrap(),
            "-o",
            "json",
        ],
    ));
    assert_eq!(offline["models"][0]["metrics"], model["metrics"]);
    let shown = ok_json(&a.client(&["models", "show", "1", "-o", "json"]));
    assert_eq!(shown["card"]["plugin"]["name"], "template");
    assert!(shown["card"]["assets"][0]["stats"]["feature_mean"].is_array());

    // Exported through the host: the weights the offline export writes.
    let through_host = dir.path().join("through-host");
    let out = a.client(&["models", "export", "1", through_host.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let offline_bundle = dir.path().join("offline");
    let out = run_tli(
        plugins.path(),
        &[
            "models",
            "export",
            "1",
            offline_bundle.to_str().unwrap(),
            "--state-dir",
            state_a.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(through_host.join("weights.safetensors")).unwrap(),
        std::fs::read(offline_bundle.join("weights.safetensors")).unwrap()
    );
    let in_process = csv_predict(&a, through_host.to_str().unwrap(), &es);

    // Loaded on host A: its reservation shows, and the host predicts what the bundle does.
    let loaded = ok_json(&a.client(&["models", "load", "1", "-o", "json"]));
    assert_eq!(loaded["loaded_now"], true);
    let reserved = loaded["model"]["resident"]["reserved_bytes"]
        .as_u64()
        .unwrap();
    assert!(reserved > 0);
    let held: Vec<_> = reservations(&a)
        .into_iter()
        .filter(|r| r["model"] == "1")
        .collect();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["reserved_bytes"].as_u64(), Some(reserved));
    let again = ok_json(&a.client(&["models", "load", "1", "-o", "json"]));
    assert_eq!(again["loaded_now"], false);
    assert_eq!(csv_predict(&a, "1", &es), in_process);

    // Backtested on the host: the bundle's backtest here, to the bit (summary, ledger),
    // and the charts drawn from what the host sent.
    let backtest = |model: &str, ledger: &Path, extra: &[&str]| {
        let mut args = vec!["backtest", "--model", model, "--data", &es];
        args.extend(["--ledger", ledger.to_str().unwrap(), "-o", "json"]);
        args.extend(extra);
        ok_json(&a.client(&args))
    };
    let plots = dir.path().join("host-plots");
    let (host_ledger, local_ledger) = (dir.path().join("host.csv"), dir.path().join("local.csv"));
    let on_host = backtest("1", &host_ledger, &["--plots", plots.to_str().unwrap()]);
    let here = backtest(through_host.to_str().unwrap(), &local_ledger, &[]);
    assert_eq!(on_host, here);
    assert_eq!(on_host["positions_from"], "sign");
    assert_eq!(on_host["currency"], "USD");
    assert!(
        on_host["strategy"]["trades"].as_u64().unwrap() > 0,
        "{on_host}"
    );
    assert_eq!(
        std::fs::read(&host_ledger).unwrap(),
        std::fs::read(&local_ledger).unwrap()
    );
    for chart in ["equity.png", "forecast.png"] {
        let png = std::fs::read(plots.join(chart)).unwrap();
        assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{chart}");
    }
    let costly = ok_json(&a.client(&[
        "backtest",
        "--model",
        "1",
        "--data",
        &es,
        "--commission",
        "20",
        "-o",
        "json",
    ]));
    assert_eq!(costly["commission"], 20.0);
    let (turnover, gross) = (
        on_host["strategy"]["performance"]["turnover"]
            .as_f64()
            .unwrap(),
        on_host["strategy"]["gross_pnl"].as_f64().unwrap(),
    );
    assert_eq!(costly["strategy"]["gross_pnl"].as_f64().unwrap(), gross);
    let paid = costly["strategy"]["costs"].as_f64().unwrap();
    let cost = 20.0 + 0.5 * 0.25 * 50.0;
    assert!(
        turnover >= 1.0 && (paid - turnover * cost).abs() < 1e-6,
        "costs are the contracts traded × (commission + slippage): {paid} vs {turnover} × {cost}"
    );
    refused(
        &a.client(&[
            "backtest", "--model", "1", "--data", &es, "--rule", "scaled",
        ]),
        "the scaled rule needs P10 and P90 forecasts",
    );
    refused(
        &a.client(&["backtest", "--model", "nope", "--data", &es]),
        "not found: no model \"nope\"",
    );

    // A fresh host imports the bundle: byte-identical predictions, and exports it unchanged.
    let state_b = dir.path().join("state-b");
    let b = Server::start(plugins.path(), &state_b, &[]);
    let imported = ok_json(&b.client(&[
        "models",
        "import",
        through_host.to_str().unwrap(),
        "--name",
        "es-template",
        "-o",
        "json",
    ]));
    assert_eq!(imported["source"], "imported");
    refused(
        &b.client(&["predict", "--model", "es-template", "--data", &es]),
        "model es-template is not loaded; load it first",
    );
    let out = b.client(&["models", "load", "es-template"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(csv_predict(&b, "es-template", &es), in_process);
    let back = dir.path().join("back");
    let out = b.client(&["models", "export", "es-template", back.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(files(&back), files(&through_host));

    // Bad imports and requests: one line each, nothing added.
    let edited = dir.path().join("edited");
    std::fs::create_dir(&edited).unwrap();
    for (name, bytes) in files(&through_host) {
        let bytes = if name == "model.json" {
            String::from_utf8(bytes)
                .unwrap()
                .replacen("\"pooled\": false", "\"pooled\": true", 1)
                .into_bytes()
        } else {
            bytes
        };
        std::fs::write(edited.join(name), bytes).unwrap();
    }
    // Checked here before it is sent...
    refused(
        &b.client(&["models", "import", edited.to_str().unwrap()]),
        "model.json does not match its checksum",
    );
    refused(
        &b.client(&[
            "models",
            "import",
            through_host.to_str().unwrap(),
            "--name",
            "es-template",
        ]),
        "a model named \"es-template\" already exists",
    );
    refused(
        &b.client(&[
            "models",
            "import",
            through_host.to_str().unwrap(),
            "--name",
            "../up",
        ]),
        "is not a model name",
    );
    refused(&b.client(&["models", "load", "nope"]), "no model \"nope\"");
    refused(
        &b.client(&["predict", "--model", "nope", "--data", &es]),
        "not found: no model \"nope\"",
    );
    refused(
        &b.client(&[
            "predict",
            "--model",
            "es-template",
            "--data",
            "/no/such.csv",
        ]),
        "/no/such.csv",
    );
    let rt = runtime();
    rt.block_on(async {
        // ...and by the host when a client sends it anyway.
        let mut client = connect(&b).await;
        let mut chunks = Vec::new();
        for (i, (file, data)) in files(&edited).into_iter().enumerate() {
            chunks.push(pb::ImportModelRequest {
                name: if i == 0 {
                    "edited".into()
                } else {
                    String::new()
                },
                file,
                data,
            });
        }
        let status = client
            .import_model(tokio_stream::iter(chunks))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status
                .message()
                .contains("model edited: model.json does not match its checksum"),
            "{status:?}"
        );
        assert!(
            !status.message().contains("state-b"),
            "no host paths: {status:?}"
        );
    });
    let mut entries: Vec<String> = std::fs::read_dir(state_b.join("models"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        vec!["es-template"],
        "nothing staged is left behind"
    );

    // PredictStream, one bar at a time, gives what Predict gives for the whole file.
    rt.block_on(async {
        let mut client = connect(&b).await;
        let bars = bars_of(&short, 400);
        let whole = client
            .predict(pb::PredictRequest {
                model: "es-template".into(),
                bars: Some(bars.clone()),
                start_unix_ns: None,
                end_unix_ns: None,
            })
            .await
            .unwrap()
            .into_inner()
            .rows
            .unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tx.send(pb::PredictStreamRequest {
            request: Some(pb::predict_stream_request::Request::Open(
                pb::OpenPredictStream {
                    model: "es-template".into(),
                    symbol: bars.symbol.clone(),
                    interval: String::new(),
                },
            )),
        })
        .await
        .unwrap();
        let mut outputs = client
            .predict_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let opened = outputs.message().await.unwrap().unwrap();
        assert!(opened.rows.is_none());
        // While it streams, its predictor holds memory of its own.
        let (mut ts, mut values, mut columns) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..bars.ts_unix_ns.len() {
            tx.send(pb::PredictStreamRequest {
                request: Some(pb::predict_stream_request::Request::Bars(one_bar(&bars, i))),
            })
            .await
            .unwrap();
            let answer = outputs.message().await.unwrap().unwrap();
            assert_eq!(answer.bars_seen, i as u64 + 1);
            if let Some(rows) = answer.rows {
                assert!(rows.ts_unix_ns.len() <= 1);
                columns = rows.columns.clone();
                ts.extend(rows.ts_unix_ns);
                values.extend(rows.values);
            }
            if i == 10 {
                let streams: Vec<_> = tokio::task::block_in_place(|| reservations(&b))
                    .into_iter()
                    .filter(|r| r["model"] == "es-template (stream 1)")
                    .collect();
                assert_eq!(streams.len(), 1);
            }
        }
        // A bar out of order ends the stream with a clear status.
        tx.send(pb::PredictStreamRequest {
            request: Some(pb::predict_stream_request::Request::Bars(one_bar(&bars, 5))),
        })
        .await
        .unwrap();
        let status = outputs.message().await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("does not come after"),
            "{status:?}"
        );

        assert_eq!(
            ts, whole.ts_unix_ns,
            "one output per bar after the look-back"
        );
        let width = whole.columns.len();
        for (c, name) in columns.iter().enumerate() {
            let w = whole.columns.iter().position(|n| n == name).unwrap();
            for r in 0..ts.len() {
                let (got, want) = (values[r * columns.len() + c], whole.values[r * width + w]);
                // f32 forward passes of one row and of a batch sum in other orders.
                assert!(
                    (got - want).abs() <= 1e-5 * want.abs() + 1e-9,
                    "{name} at row {r}: {got} vs {want}"
                );
            }
        }
        assert!(!columns.iter().any(|c| c.ends_with(":actual")));
    });
    // The stream's reservation ended with it; unloading frees the model's.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while reservations(&b)
        .iter()
        .any(|r| r["model"] == "es-template (stream 1)")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the stream's hold stayed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // grpcurl, knowing the API only through reflection, lists and calls it.
    let listed = grpcurl(&b, &["list"]);
    assert!(listed.contains("tli.v1.ModelService"), "{listed}");
    let models: serde_json::Value = serde_json::from_str(&grpcurl(
        &b,
        &["-d", "{}", "tli.v1.ModelService/ListModels"],
    ))
    .unwrap();
    assert_eq!(models["models"][0]["id"], "es-template", "{models}");
    assert!(models["models"][0]["resident"]["reservedBytes"].is_string());
    let bars = bars_of(&short, 100);
    let request = serde_json::json!({
        "model": "es-template",
        "bars": {
            "symbol": bars.symbol, "ts_unix_ns": bars.ts_unix_ns, "open": bars.open,
            "high": bars.high, "low": bars.low, "close": bars.close, "volume": bars.volume,
        }
    });
    let answer: serde_json::Value = serde_json::from_str(&grpcurl(
        &b,
        &["-d", &request.to_string(), "tli.v1.ModelService/Predict"],
    ))
    .unwrap();
    let rows = &answer["rows"];
    assert_eq!(rows["columns"][0], "fwd_logret_1:mean", "{answer}");
    assert_eq!(
        rows["tsUnixNs"].as_array().unwrap().len(),
        80,
        "100 bars less the features' look-back of 20: {answer}"
    );
    let unloaded = ok_json(&b.client(&["models", "unload", "es-template", "-o", "json"]));
    assert_eq!(unloaded["unloaded"], true);
    assert!(reservations(&b).iter().all(|r| r["model"].is_null()));
    refused(
        &b.client(&["predict", "--model", "es-template", "--data", &es]),
        "is not loaded",
    );
}

#[test]
fn two_hundred_concurrent_callers_on_one_loaded_tft_are_all_answered_beside_training() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template"), (TFT, "tft")]);
    let dir = tempfile::tempdir().unwrap();
    let es = es_bars(dir.path(), "es.csv", 1500, 1.0);
    let bundle = dir.path().join("tft");
    let out = run_tli(
        plugins.path(),
        &[
            "train",
            "local",
            "--plugin",
            "tft",
            "--steps",
            "5",
            "--data",
            &es,
            "--save",
            bundle.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let server = Server::start(plugins.path(), &dir.path().join("state"), &[]);
    for args in [
        vec![
            "models",
            "import",
            bundle.to_str().unwrap(),
            "--name",
            "tft",
        ],
        vec!["models", "load", "tft"],
    ] {
        let out = server.client(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let job = server.start_small_template_job("beside", 3000);
    let job_id = job["job_id"].as_u64().unwrap().to_string();

    // 20 bars of the features' look-back, the TFT's 64, its decoder's 5 known-future rows
    // and a few bars to forecast.
    let bars = bars_of(&es, 100);
    let answers = runtime().block_on(async {
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(connect(&server).await);
        }
        let calls = (0..200).map(|i| {
            let mut client = clients[i % clients.len()].clone();
            let bars = bars.clone();
            tokio::spawn(async move {
                client
                    .predict(pb::PredictRequest {
                        model: "tft".into(),
                        bars: Some(bars),
                        start_unix_ns: None,
                        end_unix_ns: None,
                    })
                    .await
                    .map(|r| r.into_inner())
            })
        });
        let mut answers = Vec::new();
        for call in calls.collect::<Vec<_>>() {
            answers.push(call.await.unwrap());
        }
        answers
    });
    let first = answers[0].as_ref().unwrap().rows.clone().unwrap();
    assert!(!first.ts_unix_ns.is_empty(), "{first:?}");
    assert!(
        first.columns.iter().any(|c| c.ends_with(":p50")),
        "{:?}",
        first.columns
    );
    let scale = first.values.iter().fold(0f64, |m, v| m.max(v.abs()));
    for (i, answer) in answers.iter().enumerate() {
        let rows = answer
            .as_ref()
            .unwrap_or_else(|status| panic!("caller {i}: {status:?}"))
            .rows
            .as_ref()
            .unwrap();
        // The same bars, the same forecasts, to f32 rounding: training beside sets how many
        // intra-op threads libtorch sums with.
        assert_eq!(
            (&rows.columns, &rows.ts_unix_ns),
            (&first.columns, &first.ts_unix_ns)
        );
        for (got, want) in rows.values.iter().zip(&first.values) {
            assert!(
                (got - want).abs() <= 1e-5 * scale,
                "caller {i}: {got} vs {want}"
            );
        }
    }
    let shown = ok_json(&server.client(&["models", "show", "tft", "-o", "json"]));
    assert_eq!(shown["resident"]["predictions"], 200);

    // The training job beside them completes.
    let watched = server.client(&["train", "watch", &job_id]);
    assert!(watched.status.success(), "{}", stderr(&watched));
    let status = ok_json(&server.client(&["train", "status", &job_id, "-o", "json"]));
    for task in status["progress"]["tasks"].as_array().unwrap() {
        assert_eq!(task["state"], "completed", "{task}");
    }
}
