//! `tli profile memory` through the real binary and the real TFT plugin:
//! configs measured in child processes, side by side with ratios, as JSON
//! and as a table, the PNG chart, and the refusals (bad JSON, a plugin that
//! is not there, labels that do not match the configs).

use tli_e2e_tests::*;

/// A small TFT; INT8 quantizes its 32×32 matrices (min 256 elements).
const SMALL: &str = r#""hidden_size": 32, "attention_heads": 2, "lookback": 16, "horizons": 3,
    "eval_batch_size": 64, "int8_min_elements": 256"#;

fn config(extra: &str) -> String {
    format!("{{{SMALL}, {extra}}}")
}

fn profile(plugins: &PluginDir, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "profile",
        "memory",
        "-p",
        "tft",
        "--steps",
        "2",
        "--rows",
        "600",
        "--threads",
        "1",
    ];
    args.extend_from_slice(extra);
    run_tli(plugins.path(), &args)
}

fn bytes(p: &serde_json::Value, group: &str, key: &str) -> f64 {
    p[group][key]
        .as_f64()
        .unwrap_or_else(|| panic!("{group}.{key} missing in {p}"))
}

#[test]
fn two_configs_are_measured_side_by_side_with_a_chart() {
    let plugins = PluginDir::with(&[(TFT, "tft")]);
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("memory.png");
    let (fp32, int8, big) = (
        config(r#""batch_size": 8"#),
        config(r#""batch_size": 8, "precision": "int8""#),
        config(r#""batch_size": 512"#),
    );
    let out = profile(
        &plugins,
        &[
            "--config",
            &fp32,
            "--config",
            &int8,
            "--config",
            &big,
            "--label",
            "fp32",
            "--label",
            "int8",
            "--label",
            "fp32 batch 512",
            "--chart",
            chart.to_str().unwrap(),
            "-o",
            "json",
        ],
    );
    let profiles = ok_json(&out);
    let profiles = profiles.as_array().expect("a list of profiles");
    assert_eq!(profiles.len(), 3);
    let (f, i, b) = (&profiles[0], &profiles[1], &profiles[2]);
    assert_eq!(f["label"], "fp32");
    assert_eq!(
        i["config"]["precision"], "int8",
        "the validated config is shown"
    );
    assert_eq!(f["steps"], 2);
    // INT8 parameters + optimizer state: well under half of FP32's.
    let held = |p: &serde_json::Value| {
        bytes(p, "tensors", "parameters") + bytes(p, "tensors", "optimizer_state")
    };
    let ratio = held(i) / held(f);
    assert!(
        ratio < 0.45,
        "int8/fp32 parameters + optimizer = {ratio:.3}"
    );
    // The kernel's figure is independent of the plugin, and follows memory: 64× the
    // batch makes the peak resident memory grow many times over.
    for p in profiles {
        assert_eq!(p["process"]["peak_reset"], true, "{p}");
        assert!(bytes(p, "process", "peak_over_baseline") > 0.0, "{p}");
        assert!(p["cuda"].is_null(), "no CUDA on a cpu run: {p}");
    }
    let peak = |p: &serde_json::Value| bytes(p, "process", "peak_over_baseline");
    assert!(
        peak(b) > 8.0 * peak(f),
        "peak RSS over baseline: batch 512 {} vs batch 8 {}",
        peak(b),
        peak(f)
    );
    let png = std::fs::read(&chart).expect("the chart was written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 10_000, "a {} byte chart", png.len());
    let height = u32::from_be_bytes([png[20], png[21], png[22], png[23]]);
    assert_eq!(height, 1000, "the MiB panel and the ratio panel below it");

    // The table for people: the ratio columns and the independent figure.
    let out = profile(
        &plugins,
        &[
            "--config", &fp32, "--config", &int8, "--label", "fp32", "--label", "int8",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    for needle in [
        "int8 / fp32",
        "parameters + optimizer",
        "peak RSS over baseline",
        "seconds per step",
    ] {
        assert!(table.contains(needle), "{needle:?} missing:\n{table}");
    }
}

#[test]
fn bad_requests_are_refused_with_the_reason() {
    let plugins = PluginDir::with(&[(TFT, "tft")]);
    let out = profile(&plugins, &["--config", "{\"hidden_size\": 32"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--config"), "{}", stderr(&out));

    let out = run_tli(
        plugins.path(),
        &["profile", "memory", "-p", "nosuch", "--rows", "600"],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no plugin named \"nosuch\""),
        "{}",
        stderr(&out)
    );

    let out = profile(&plugins, &["--label", "a", "--label", "b"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("labels"), "{}", stderr(&out));

    let out = profile(&plugins, &["--config", r#"{"hidden_size": -3}"#]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("hidden_size"), "{}", stderr(&out));
}
