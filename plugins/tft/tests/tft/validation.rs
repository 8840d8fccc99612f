//! Validation during training: the `valid_*` metrics come exactly from the
//! `step` calls that cross a multiple of `valid_every` (never from a
//! cancelled one), and training is bit-identical with and without them, in
//! FP32 and in INT8 (one-pass and staged steps).

use crate::predictor::{dataset, host, inputs, int8, roles, FP32};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tli_plugin_api::abi_stable::sabi_trait::TD_Opaque;
use tli_plugin_api::abi_stable::std_types::{RArc, RStr};
use tli_plugin_api::{
    Host, HostServicesApi, HostServicesApi_TO, LogLevel, Plugin, StepReport, TaskSpec, Trainer,
};
use tli_plugin_tft::trainer::TftTrainer;
use tli_plugin_tft::TftPlugin;

/// A host whose cancellation flag the test sets.
struct CancellableHost(Arc<AtomicBool>);

impl HostServicesApi for CancellableHost {
    fn log(&self, _: LogLevel, _: RStr<'_>) {}
    fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// `config` (the predictor tests' small model) with the keys of `extra`.
fn trainer(config: &str, extra: serde_json::Value, host: Host) -> TftTrainer {
    let (dataset, markers) = dataset();
    let mut config: serde_json::Value = serde_json::from_str(config).unwrap();
    for (key, value) in extra.as_object().unwrap() {
        config[key] = value.clone();
    }
    let task = TaskSpec {
        task_id: "t".into(),
        config_json: TftPlugin::validate_config(&config.to_string())
            .unwrap()
            .into(),
        device: "cpu".into(),
        seed: 5,
        max_steps: 30,
        dataset: RArc::new(dataset.clone()),
    };
    let inputs = inputs(dataset, &markers, &roles(true));
    TftPlugin::create_trainer_with_inputs(task, inputs, host).unwrap()
}

fn named(report: &StepReport) -> Vec<(String, f64)> {
    report
        .metrics
        .iter()
        .map(|m| (m.name.to_string(), m.value))
        .collect()
}

fn is_valid(name: &str) -> bool {
    name.starts_with("valid_")
}

/// The tensors of a checkpoint of `trainer` (weights, optimizer state).
fn checkpoint_tensors(trainer: &mut TftTrainer, tag: &str) -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("tli-tft-validation-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    trainer.save_checkpoint(&dir).unwrap();
    let bytes = std::fs::read(dir.join("tensors.safetensors")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

#[test]
fn validation_lands_on_the_cadence_and_leaves_training_alone() {
    let staged = {
        let mut c: serde_json::Value = serde_json::from_str(&int8()).unwrap();
        c["step_memory"] = "staged".into();
        c.to_string()
    };
    for (name, config) in [
        ("fp32", FP32.to_string()),
        ("int8", int8()),
        ("int8-staged", staged),
    ] {
        let cancelled = Arc::new(AtomicBool::new(false));
        let cancellable = Host::new(HostServicesApi_TO::from_ptr(
            RArc::new(CancellableHost(cancelled.clone())),
            TD_Opaque,
        ));
        let mut with = trainer(&config, json!({"valid_every": 10}), cancellable);
        let mut without = trainer(&config, json!({"valid_every": 0}), host());
        // (steps, validates): the counter goes 10, 15, 20, 27, 30, 30.
        let calls = [
            (10, true),
            (5, false),
            (5, true),
            (7, false),
            (3, true),
            (0, false),
        ];
        for (i, (n, due)) in calls.into_iter().enumerate() {
            let a = named(&with.step(n).unwrap());
            let b = named(&without.step(n).unwrap());
            let valid: Vec<&(String, f64)> = a.iter().filter(|(k, _)| is_valid(k)).collect();
            assert_eq!(!valid.is_empty(), due, "{name} call {i}: {a:?}");
            assert!(!b.iter().any(|(k, _)| is_valid(k)), "{b:?}");
            let rest: Vec<&(String, f64)> = a.iter().filter(|(k, _)| !is_valid(k)).collect();
            assert_eq!(rest, b.iter().collect::<Vec<_>>(), "{name} call {i}");
            if due {
                let names: Vec<&str> = valid.iter().map(|(k, _)| k.as_str()).collect();
                for metric in ["valid_loss", "valid_qrisk_p50", "valid_coverage_p10_p90"] {
                    assert!(
                        names.contains(&metric),
                        "{name}: {metric} missing: {names:?}"
                    );
                }
                assert!(!names.iter().any(|k| k.starts_with("test_")));
                assert!(valid.iter().all(|(_, v)| v.is_finite()), "{valid:?}");
            }
        }
        assert_eq!(
            checkpoint_tensors(&mut with, &format!("{name}-with")),
            checkpoint_tensors(&mut without, &format!("{name}-without")),
            "{name}: weights or optimizer state differ"
        );
        // A cancelled call validates nothing, even across a multiple.
        cancelled.store(true, Ordering::Relaxed);
        let report = with.step(10).unwrap();
        assert_eq!(report.steps_done, 0);
        assert!(!named(&report).iter().any(|(k, _)| is_valid(k)));
    }
}

/// No complete validation window: steps train on without validating.
#[test]
fn no_validation_window_means_no_validation_and_no_error() {
    // Lookback 60 fits the 200 training rows, not the 50 validation rows.
    let mut t = trainer(FP32, json!({"lookback": 60, "valid_every": 5}), host());
    let report = t.step(5).unwrap();
    assert_eq!(report.steps_done, 5);
    assert!(!named(&report).iter().any(|(k, _)| is_valid(k)));
}
