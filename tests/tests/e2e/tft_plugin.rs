//! The TFT plugin through its real `.so`, loaded by the host's registry:
//! config refusals, exact checkpoint resumption in FP32 and INT8 (dropout,
//! epochs wrapping, stochastic rounding), a checkpoint of the other
//! precision refused, the metrics and interpretability readouts an
//! evaluation reports, and INT8's bytes against FP32's.
//!
//! Needs the workspace built first (the test loads
//! `target/release/libtli_plugin_tft.so`).

use tli_e2e_tests::trainers::*;
use tli_e2e_tests::*;
use tli_host::services::TaskServices;
use tli_plugin_api::ErrorCode;

/// A small model for CI: hidden 16, 2 heads, lookback 16, 3 horizons.
const SMALL: &str = r#"{"hidden_size": 16, "attention_heads": 2, "lookback": 16, "horizons": 3,
    "batch_size": 8, "eval_batch_size": 64}"#;

#[test]
fn bad_configs_are_refused_naming_the_key() {
    let (_dir, registry) = registry_of(TFT, "tft");
    let tft = registry.get("tft").unwrap();
    assert_config_checks(
        tft,
        &[
            (r#"{"precision": "int4"}"#, "precision"),
            (
                r#"{"hidden_size": 30, "attention_heads": 4}"#,
                "attention_heads",
            ),
            (r#"{"quantiles": []}"#, "quantiles"),
            (r#"{"lookback": 0}"#, "lookback"),
            (r#"{"dropout": "lots"}"#, "dropout"),
            (r#"{"hidden": 64}"#, "hidden"),
        ],
        SMALL,
    );
    // A host estimates for devices it lacks (a Slurm node's GPU); a device
    // that does not exist anywhere is refused.
    tft.estimate_memory("{}", synthetic(100).shape(), "cuda:7")
        .expect("an estimate for another machine's GPU");
    let e = tft
        .estimate_memory("{}", synthetic(100).shape(), "tpu:0")
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::UNSUPPORTED_DEVICE, "{e}");
    let config = tft.validate_config(r#"{"lookback": 2000}"#).unwrap();
    let e = tft
        .create_trainer(
            task_spec(&config, 1, 10, &synthetic(1000)),
            TaskServices::new("tft", "t"),
        )
        .err()
        .expect("a 2000-bar lookback on 1000 rows was accepted");
    assert_eq!(e.code, ErrorCode::INVALID_DATA, "{e}");
    assert!(e.message.contains("lookback"), "{e}");
}

#[test]
fn checkpoints_resume_exactly_in_both_precisions() {
    one_thread();
    let (_dir, registry) = registry_of(TFT, "tft");
    let tft = registry.get("tft").unwrap();
    // 500 rows: 350 training rows, ~330 windows; 8 per batch → an epoch every ~42 steps.
    let data = synthetic(500);
    let fp32 = with(SMALL, r#"{"dropout": 0.1, "warmup_steps": 5}"#);
    let (_, eval) = assert_resumes_exactly(tft, &fp32, &data, 30, 20);
    for key in [
        "valid_qrisk_p10",
        "valid_qrisk_p50",
        "valid_qrisk_p90",
        "valid_qrisk_p50_h3",
        "valid_coverage_p10_p90",
        "valid_skill_h1",
        "test_qrisk_p50",
        "valid_vsn_static_asset",
        "valid_vsn_past_position",
        "valid_vsn_future_position",
        "valid_attention_lag_h1",
        "valid_attention_encoder_h3",
    ] {
        assert!(eval.contains_key(key), "{key} missing: {eval:?}");
    }
    // The selection weights of the past inputs are a distribution.
    let past: f64 = eval
        .iter()
        .filter(|(k, _)| k.starts_with("valid_vsn_past_"))
        .map(|(_, v)| v)
        .sum();
    assert!((past - 1.0).abs() < 1e-4, "past weights sum to {past}");
    // INT8 with a low threshold so that most matrices are quantized.
    let int8 = with(&fp32, r#"{"precision": "int8", "int8_min_elements": 256}"#);
    assert_resumes_exactly(tft, &int8, &data, 23, 17);
    // Staged INT8 steps (one block's f32 weights at a time), evaluation included.
    let staged = with(&int8, r#"{"step_memory": "staged"}"#);
    let (_, eval) = assert_resumes_exactly(tft, &staged, &data, 9, 7);
    assert!(eval.contains_key("valid_qrisk_p50"), "{eval:?}");
    // Moments below 8 bits: 4-bit (one-pass steps), factored (staged steps).
    assert_resumes_exactly(
        tft,
        &with(&int8, r#"{"optimizer_state": "4bit"}"#),
        &data,
        11,
        6,
    );
    assert_resumes_exactly(
        tft,
        &with(&staged, r#"{"optimizer_state": "factored"}"#),
        &data,
        8,
        5,
    );
}

#[test]
fn a_checkpoint_of_the_other_precision_is_refused() {
    let (_dir, registry) = registry_of(TFT, "tft");
    let tft = registry.get("tft").unwrap();
    let data = synthetic(300);
    let ckpt = tempfile::tempdir().unwrap();
    let mut t = trainer(tft, SMALL, 1, 10, &data);
    t.step(2).unwrap();
    t.save_checkpoint(ckpt.path()).unwrap();
    let mut other = trainer(tft, &with(SMALL, r#"{"precision": "int8"}"#), 1, 10, &data);
    let e = other.load_checkpoint(ckpt.path()).unwrap_err();
    assert_eq!(e.code, ErrorCode::IO, "{e}");
    assert!(e.message.contains("precision"), "{e}");
    // INT8 with 8-bit moments, resumed with 4-bit ones: refused, naming the key.
    let int8 = with(SMALL, r#"{"precision": "int8", "int8_min_elements": 256}"#);
    let ckpt = tempfile::tempdir().unwrap();
    let mut t = trainer(tft, &int8, 1, 10, &data);
    t.step(2).unwrap();
    t.save_checkpoint(ckpt.path()).unwrap();
    let four = with(&int8, r#"{"optimizer_state": "4bit"}"#);
    let mut other = trainer(tft, &four, 1, 10, &data);
    let e = other.load_checkpoint(ckpt.path()).unwrap_err();
    assert_eq!(e.code, ErrorCode::IO, "{e}");
    assert!(e.message.contains("optimizer_state \"8bit\""), "{e}");
}

#[test]
fn an_int8_task_reports_how_much_of_it_is_int8() {
    let (_dir, registry) = registry_of(TFT, "tft");
    let tft = registry.get("tft").unwrap();
    let data = synthetic(300);
    let fractions = |config: &str| {
        let mut t = trainer(tft, config, 1, 10, &data);
        let report = as_map(&t.step(1).unwrap().metrics);
        (
            report.get("int8_fraction").copied(),
            report.get("low_bit_state_fraction").copied(),
        )
    };
    // A small model with the default threshold quantizes nothing: it says so.
    let (none, _) = fractions(&with(SMALL, r#"{"precision": "int8"}"#));
    assert_eq!(none, Some(0.0));
    let low = with(SMALL, r#"{"precision": "int8", "int8_min_elements": 64}"#);
    let (int8, state) = fractions(&low);
    let int8 = int8.unwrap();
    assert!(int8 > 0.5 && int8 < 1.0, "{int8}");
    assert_eq!(state, Some(0.0), "8-bit moments are not below 8 bits");
    let (again, state) = fractions(&with(&low, r#"{"optimizer_state": "factored"}"#));
    assert_eq!((again, state), (Some(int8), Some(int8)));
    // FP32 reports neither.
    assert_eq!(fractions(SMALL), (None, None));
}

#[test]
fn int8_holds_about_a_quarter_of_the_fp32_bytes() {
    let (_dir, registry) = registry_of(TFT, "tft");
    let tft = registry.get("tft").unwrap();
    let data = synthetic(400);
    let config = with(SMALL, r#"{"hidden_size": 128, "attention_heads": 4}"#);
    let fp32 = trainer(tft, &config, 1, 10, &data).memory().unwrap();
    let int8 = trainer(
        tft,
        &with(&config, r#"{"precision": "int8"}"#),
        1,
        10,
        &data,
    )
    .memory()
    .unwrap();
    let ratio = (int8.parameters + int8.optimizer_state) as f64
        / (fp32.parameters + fp32.optimizer_state) as f64;
    assert!(
        ratio < 0.35,
        "int8/fp32 parameters + optimizer state = {ratio:.3}"
    );
    // A staged step holds one block's f32 weights and gradients: its measured
    // peak after a step is a fraction of the one-pass transient.
    let mut staged = trainer(
        tft,
        &with(&config, r#"{"precision": "int8", "step_memory": "staged"}"#),
        1,
        10,
        &data,
    );
    let planned = staged.memory().unwrap().gradients;
    staged.step(1).unwrap();
    let measured = staged.memory().unwrap();
    assert!(
        measured.gradients > 0 && measured.gradients <= planned,
        "staged transient measured {} vs planned {planned}",
        measured.gradients
    );
    assert!(
        (measured.gradients as f64) < 0.3 * int8.gradients as f64,
        "staged transient {} vs one-pass {}",
        measured.gradients,
        int8.gradients
    );
    assert_eq!(measured.parameters, int8.parameters);
    // The estimate from the dataset shape alone is of the same size as what the trainer holds.
    let estimate = tft
        .estimate_memory(&tft.validate_config(&config).unwrap(), data.shape(), "cpu")
        .unwrap();
    let ratio = estimate.parameters as f64 / fp32.parameters as f64;
    assert!(
        (0.5..2.0).contains(&ratio),
        "estimate/held parameters = {ratio:.2}"
    );
}

/// The real `tli` CLI against a running host: one job trains the TFT
/// (pooled in FP32 across both assets, and per asset in INT8) beside
/// Mamba-2, the template, DQN and PPO; `train status` then shows every task
/// completed with the TFT's q-risk per asset of the pooled task.
#[test]
fn the_cli_trains_the_tft_in_a_job_beside_the_other_families() {
    let plugins = PluginDir::with(&[
        (TFT, "tft"),
        (MAMBA2, "mamba2"),
        (TEMPLATE, "template"),
        (DQN, "dqn"),
        (PPO, "ppo"),
    ]);
    let state = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), state.path(), &[]);
    let spec = state.path().join("job.json");
    std::fs::write(
        &spec,
        r#"{"name": "families", "models": [
            {"plugin": "tft", "steps": 20, "pooled": true,
             "config": {"hidden_size": 16, "attention_heads": 2, "lookback": 16, "horizons": 3, "batch_size": 8}},
            {"plugin": "tft", "steps": 20,
             "config": {"precision": "int8", "hidden_size": 32, "lookback": 16, "horizons": 2, "batch_size": 8}},
            {"plugin": "mamba2", "steps": 20,
             "config": {"d_model": 16, "layers": 1, "d_state": 8, "headdim": 8, "lookback": 32, "batch_size": 8}},
            {"plugin": "template", "steps": 20},
            {"plugin": "dqn", "steps": 300, "config": {"env": "cartpole", "hidden_sizes": [16]}},
            {"plugin": "ppo", "steps": 128, "config": {"num_envs": 2, "num_steps": 32}}],
           "assets": [{"synthetic": {"rows": 1200, "seed": 1}}, {"synthetic": {"rows": 1200, "seed": 2}}]}"#,
    )
    .unwrap();
    let started = ok_json(&server.client(&[
        "train",
        "start",
        "--spec",
        spec.to_str().unwrap(),
        "-o",
        "json",
    ]));
    let job = started["job_id"].as_u64().expect("job id").to_string();
    let watched = server.client(&["train", "watch", &job]);
    assert!(watched.status.success(), "{}", stderr(&watched));
    let status = ok_json(&server.client(&["train", "status", &job, "-o", "json"]));
    let tasks = status["progress"]["tasks"].as_array().expect("tasks");
    // Pooled TFT: one task; the rest one per asset.
    assert_eq!(tasks.len(), 11, "{status}");
    for t in tasks {
        assert_eq!(t["state"], "completed", "{t}");
    }
    let text = status.to_string();
    assert!(
        text.contains("valid_qrisk_p50@"),
        "per-asset q-risk of the pooled TFT task: {text}"
    );
}

/// The short seeded version of the FP32/INT8 accuracy comparison (the full
/// one is `cargo bench -p tli-e2e-tests --bench tft_accuracy`): a pooled task over three assets with a
/// planted calendar effect (known in advance) and a flow effect (observed
/// one bar before), `tli_data::synthetic_seasonal`. FP32 gets at least half
/// of the P50 q-risk improvement over the zero forecast (q-risk 1.0) that the
/// best forecast gets; INT8, trained the same way with 8-bit, 4-bit or
/// factored optimizer state, lands within 3% of FP32 and its P10–P90
/// coverage within 5 points. `TFT_CI_STEPS` and
/// `TFT_CI_CONFIG` change the budget and the config.
#[test]
fn fp32_and_int8_learn_the_planted_calendar_and_flow_effects() {
    use abi_stable::std_types::RArc;
    use tli_data::synthetic_seasonal::{planted_seasonal, SeasonalSpec};
    use tli_plugin_api::TaskInputs;
    one_thread();
    let (_dir, registry) = registry_of(TFT, "tft");
    let tft = registry.get("tft").unwrap();
    let assets = planted_seasonal(SeasonalSpec {
        rows: 3000,
        ..SeasonalSpec::default()
    });
    let inputs = || {
        let parts = assets
            .iter()
            .map(|a| (RArc::new(a.data.dataset.clone()), a.data.annex.clone()))
            .collect();
        TaskInputs::new(parts, true, assets.len())
    };
    let first = RArc::new(assets[0].data.dataset.clone());
    let steps: u64 = std::env::var("TFT_CI_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let base = std::env::var("TFT_CI_CONFIG").unwrap_or_else(|_| {
        r#"{"hidden_size": 32, "attention_heads": 4, "lookback": 40, "horizons": 3,
            "batch_size": 32, "dropout": 0.0, "learning_rate": 0.005, "int8_min_elements": 256}"#
            .to_string()
    });
    let run = |overlay: &str| {
        let config = tft.validate_config(&with(&base, overlay)).unwrap();
        let mut t = tft
            .create_trainer_with_inputs(
                task_spec(&config, 7, steps, &first),
                inputs(),
                TaskServices::new("tft", overlay),
            )
            .unwrap();
        train(&mut t, steps, 100);
        as_map(&t.evaluate().unwrap().metrics)
    };
    // The best forecast's P50 q-risk on the validation windows (horizons 1..3).
    let (mut abs_err, mut abs_y) = (0.0, 0.0);
    for a in &assets {
        let d = &a.data.dataset;
        for t in d.splits.valid_start as usize + 40..d.splits.valid_end as usize - 3 {
            for h in 1..=3 {
                let y = d.targets[t + h - 1] as f64;
                abs_err += (y - a.expected(t, h)).abs();
                abs_y += y.abs();
            }
        }
    }
    let best = abs_err / abs_y;
    eprintln!("best forecast P50 q-risk ≈ {best:.4}");
    let fp32 = run(r#"{"precision": "fp32"}"#);
    let int8 = run(r#"{"precision": "int8"}"#);
    let (q32, q8) = (fp32["valid_qrisk_p50"], int8["valid_qrisk_p50"]);
    let (c32, c8) = (
        fp32["valid_coverage_p10_p90"],
        int8["valid_coverage_p10_p90"],
    );
    eprintln!(
        "P50 q-risk: fp32 {q32:.4}, int8 {q8:.4}; P10-P90 coverage: fp32 {c32:.3}, int8 {c8:.3}; \
         calendar weight (future): {:.3}",
        fp32["valid_vsn_future_dow_sin"]
            + fp32["valid_vsn_future_dow_cos"]
            + fp32["valid_vsn_future_slot_sin"]
            + fp32["valid_vsn_future_slot_cos"]
    );
    // FP32 gets at least half of the improvement over the zero forecast that is there.
    assert!(
        1.0 - q32 > 0.5 * (1.0 - best),
        "FP32 P50 q-risk {q32}; zero forecast 1.0, best {best}"
    );
    assert!(q8 < q32 * 1.03, "INT8 {q8} vs FP32 {q32}");
    assert!((c8 - c32).abs() < 0.05, "coverage INT8 {c8} vs FP32 {c32}");
    // Moments below 8 bits: 4-bit, and 4-bit with a factored second moment.
    for state in ["4bit", "factored"] {
        let low = run(&format!(
            r#"{{"precision": "int8", "optimizer_state": "{state}"}}"#
        ));
        let (q, c) = (low["valid_qrisk_p50"], low["valid_coverage_p10_p90"]);
        eprintln!("{state}: P50 q-risk {q:.4}, P10-P90 coverage {c:.3}");
        assert!(q < q32 * 1.03, "INT8 with {state} state {q} vs FP32 {q32}");
        assert!((c - c32).abs() < 0.05, "coverage {state} {c} vs FP32 {c32}");
    }
}
