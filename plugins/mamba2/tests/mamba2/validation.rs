//! Validation during training: the `valid_*` metrics come exactly from the
//! `step` calls that cross a multiple of `valid_every` (never from a
//! cancelled one), and training is bit-identical with and without them.

use crate::predictor::{dataset, host, inputs, CONFIG};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tli_plugin_api::abi_stable::sabi_trait::TD_Opaque;
use tli_plugin_api::abi_stable::std_types::{RArc, RStr};
use tli_plugin_api::{
    Host, HostServicesApi, HostServicesApi_TO, LogLevel, Plugin, StepReport, TaskSpec, Trainer,
};
use tli_plugin_mamba2::trainer::Mamba2Trainer;
use tli_plugin_mamba2::Mamba2Plugin;

/// A host whose cancellation flag the test sets.
struct CancellableHost(Arc<AtomicBool>);

impl HostServicesApi for CancellableHost {
    fn log(&self, _: LogLevel, _: RStr<'_>) {}
    fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The predictor tests' small model with dropout (its stream must not
/// move), with the keys of `extra` laid over it.
fn trainer(extra: serde_json::Value, host: Host) -> Mamba2Trainer {
    let (dataset, markers) = dataset();
    let mut config: serde_json::Value = serde_json::from_str(CONFIG).unwrap();
    config["dropout"] = 0.1.into();
    for (key, value) in extra.as_object().unwrap() {
        config[key] = value.clone();
    }
    let config = config.to_string();
    let task = TaskSpec {
        task_id: "t".into(),
        config_json: Mamba2Plugin::validate_config(&config).unwrap().into(),
        device: "cpu".into(),
        seed: 5,
        max_steps: 40,
        dataset: RArc::new(dataset.clone()),
    };
    Mamba2Plugin::create_trainer_with_inputs(task, inputs(dataset, &markers), host).unwrap()
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
fn checkpoint_tensors(trainer: &mut Mamba2Trainer, tag: &str) -> Vec<u8> {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "tli-mamba2-validation-{}-{tag}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    trainer.save_checkpoint(&dir).unwrap();
    let bytes = std::fs::read(dir.join("tensors.safetensors")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

#[test]
fn validation_lands_on_the_cadence_and_leaves_training_alone() {
    let cancelled = Arc::new(AtomicBool::new(false));
    let cancellable = Host::new(HostServicesApi_TO::from_ptr(
        RArc::new(CancellableHost(cancelled.clone())),
        TD_Opaque,
    ));
    let mut with = trainer(json!({"valid_every": 10}), cancellable);
    let mut without = trainer(json!({"valid_every": 0}), host());
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
        assert_eq!(!valid.is_empty(), due, "call {i}: {a:?}");
        assert!(!b.iter().any(|(k, _)| is_valid(k)), "{b:?}");
        let rest: Vec<&(String, f64)> = a.iter().filter(|(k, _)| !is_valid(k)).collect();
        assert_eq!(rest, b.iter().collect::<Vec<_>>(), "call {i}");
        if due {
            let names: Vec<&str> = valid.iter().map(|(k, _)| k.as_str()).collect();
            for name in [
                "valid_loss",
                "valid_mse",
                "valid_qrisk_p50",
                "valid_windows",
            ] {
                assert!(names.contains(&name), "{name} missing: {names:?}");
            }
            assert!(!names.iter().any(|k| k.starts_with("test_")));
            assert!(valid.iter().all(|(_, v)| v.is_finite()), "{valid:?}");
        }
    }
    assert_eq!(
        checkpoint_tensors(&mut with, "with"),
        checkpoint_tensors(&mut without, "without"),
        "weights or optimizer state differ"
    );
    // What the last validating call measured is what evaluate() reports now.
    let eval: Vec<(String, f64)> = with
        .evaluate()
        .unwrap()
        .metrics
        .iter()
        .map(|m| (m.name.to_string(), m.value))
        .collect();
    assert!(eval.iter().any(|(k, _)| k == "valid_loss"));
    // A cancelled call validates nothing, even across a multiple.
    cancelled.store(true, Ordering::Relaxed);
    let report = with.step(10).unwrap();
    assert_eq!(report.steps_done, 0);
    assert!(!named(&report).iter().any(|(k, _)| is_valid(k)));
}

/// No complete validation window: steps train on without validating.
#[test]
fn no_validation_window_means_no_validation_and_no_error() {
    // Lookback 60 fits the 200 training rows, not the 50 validation rows.
    let mut t = trainer(json!({"lookback": 60, "valid_every": 5}), host());
    let report = t.step(5).unwrap();
    assert_eq!(report.steps_done, 5);
    assert!(!named(&report).iter().any(|(k, _)| is_valid(k)));
}
