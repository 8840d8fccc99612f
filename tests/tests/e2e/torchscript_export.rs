//! `tli models torchscript` with the real binary and plugins: the FP32
//! forecasters (template MLP, TFT, Mamba-2) traced into TorchScript, loaded
//! by PyTorch alone (`torch.jit.load`, no tli code), give on the example
//! inputs the forecasts `tli predict` writes for the same bars, to 1e-5;
//! INT8 TFTs and RL agents are refused with their reason and nothing written.

use super::predict_cli::es_bars;
use std::path::Path;
use tli_e2e_tests::*;

fn train(plugins: &Path, plugin: &str, config: &str, steps: &str, data: &str, bundle: &Path) {
    let out = run_tli(
        plugins,
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
            data,
            "--save",
            bundle.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{plugin}: {}", stderr(&out));
}

#[test]
fn fp32_forecasters_export_to_torchscript_that_pytorch_runs_as_tli_predicts() {
    let plugins = PluginDir::with(&[
        (TEMPLATE, "template"),
        (TFT, "tft"),
        (MAMBA2, "mamba2"),
        (DQN, "dqn"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let es = es_bars(dir.path(), "es.csv", 1200, 1.0);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../.venv/bin/python");
    let check = root.join("python/torchscript_check.py");
    for (plugin, config, steps) in [
        ("template", "{}", "60"),
        ("tft", r#"{"hidden_size": 32}"#, "5"),
        ("mamba2", r#"{"lookback": 64}"#, "5"),
    ] {
        let bundle = dir.path().join(plugin);
        train(plugins.path(), plugin, config, steps, &es, &bundle);
        let export = dir.path().join(format!("{plugin}-ts"));
        let signature = ok_json(&run_tli(
            plugins.path(),
            &[
                "models",
                "torchscript",
                bundle.to_str().unwrap(),
                export.to_str().unwrap(),
                "--data",
                &es,
                "-o",
                "json",
            ],
        ));
        let timestamps = signature["timestamps"].as_array().unwrap();
        // The last 256 bars, less the TFT's decoder rows at the end of the file.
        assert!(
            (250..=256).contains(&timestamps.len()),
            "{plugin}: {}",
            timestamps.len()
        );
        assert_eq!(
            signature["batch"].is_null(),
            plugin != "mamba2",
            "{plugin}: {}",
            signature["batch"]
        );
        let predictions = dir.path().join(format!("{plugin}.json"));
        let out = run_tli(
            plugins.path(),
            &[
                "predict",
                "--model",
                bundle.to_str().unwrap(),
                "--data",
                &es,
                "--start",
                timestamps[0].as_str().unwrap(),
                "-o",
                "json",
                "--out",
                predictions.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{plugin}: {}", stderr(&out));
        let checked = std::process::Command::new(&python)
            .arg(&check)
            .arg(&export)
            .arg(&predictions)
            .output()
            .expect("run python");
        let report = String::from_utf8_lossy(&checked.stdout);
        assert!(
            checked.status.success(),
            "{plugin}: {report}{}",
            String::from_utf8_lossy(&checked.stderr)
        );
        let report: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
        assert_eq!(report["rows"], timestamps.len(), "{plugin}: {report}");
        assert!(
            report["max_rel_diff"].as_f64().unwrap() <= 1e-5,
            "{plugin}: {report}"
        );
    }

    // What is not exportable says why, and writes nothing.
    let int8 = dir.path().join("tft-int8");
    train(
        plugins.path(),
        "tft",
        r#"{"hidden_size": 32, "precision": "int8"}"#,
        "2",
        &es,
        &int8,
    );
    let dqn = dir.path().join("dqn");
    train(plugins.path(), "dqn", "{}", "40", &es, &dqn);
    for (bundle, expected) in [
        (&int8, "an INT8 TFT keeps int8 codes"),
        (&dqn, "agents are not exported to TorchScript"),
    ] {
        let export = dir.path().join("refused");
        let out = run_tli(
            plugins.path(),
            &[
                "models",
                "torchscript",
                bundle.to_str().unwrap(),
                export.to_str().unwrap(),
                "--data",
                &es,
            ],
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
        assert!(!export.exists(), "nothing written");
    }
    let out = run_tli(
        plugins.path(),
        &[
            "models",
            "torchscript",
            dir.path().join("template").to_str().unwrap(),
            dir.path().join("template-ts").to_str().unwrap(),
            "--data",
            &es,
        ],
    );
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
}
