//! Validation during training: the `valid_*` metrics come exactly from the
//! `step` calls that cross a multiple of `valid_metrics_interval` (never
//! from a cancelled one, none at creation), and training is bit-identical
//! with and without them, on the trading environment and on CartPole.

use super::PpoTrainer;
use crate::predictor::tests::market;
use crate::PpoPlugin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tli_plugin_api::{
    abi_stable::{
        sabi_trait::TD_Opaque,
        std_types::{RArc, RStr},
    },
    Dataset, Host, HostServicesApi, HostServicesApi_TO, LogLevel, Plugin, StepReport, TaskSpec,
    Trainer,
};

/// A host whose cancellation flag the test sets.
struct TestHost(Arc<AtomicBool>);

impl HostServicesApi for TestHost {
    fn log(&self, _: LogLevel, _: RStr<'_>) {}
    fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

fn trainer(config: &str, data: &Dataset) -> (PpoTrainer, Arc<AtomicBool>) {
    let cancelled = Arc::new(AtomicBool::new(false));
    let host = Host::new(HostServicesApi_TO::from_ptr(
        RArc::new(TestHost(cancelled.clone())),
        TD_Opaque,
    ));
    let spec = TaskSpec {
        task_id: "validation".into(),
        config_json: PpoPlugin::validate_config(config).unwrap().into(),
        device: "cpu".into(),
        seed: 3,
        max_steps: 300,
        dataset: RArc::new(data.clone()),
    };
    (PpoPlugin::create_trainer(spec, host).unwrap(), cancelled)
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

/// Runs `calls` `(steps, validates)` on a trainer validating every
/// `interval` steps (`INTERVAL` in `config`) and on one that never does;
/// checks where the metrics appear and that everything else (metrics,
/// weights) is equal to the bit; returns the names of the metrics reported.
fn compare(config: &str, interval: u64, data: &Dataset, calls: &[(u64, bool)]) -> Vec<String> {
    let (mut with, cancelled) = trainer(&config.replace("INTERVAL", &interval.to_string()), data);
    let (mut without, _) = trainer(&config.replace("INTERVAL", "0"), data);
    let mut names = Vec::new();
    for (i, &(n, due)) in calls.iter().enumerate() {
        let a = named(&with.step(n).unwrap());
        let b = named(&without.step(n).unwrap());
        let valid: Vec<&(String, f64)> = a.iter().filter(|(k, _)| is_valid(k)).collect();
        assert_eq!(!valid.is_empty(), due, "call {i}: {a:?}");
        assert!(!b.iter().any(|(k, _)| is_valid(k)), "{b:?}");
        let rest: Vec<&(String, f64)> = a.iter().filter(|(k, _)| !is_valid(k)).collect();
        assert_eq!(rest, b.iter().collect::<Vec<_>>(), "call {i}");
        assert!(valid.iter().all(|(_, v)| v.is_finite()), "{valid:?}");
        names.extend(valid.iter().map(|(k, _)| k.clone()));
    }
    assert!(with.counters.updates > 0, "no update happened");
    for (p, q) in with.net.parameters().iter().zip(without.net.parameters()) {
        assert!(p.equal(q), "weights differ");
    }
    // Later calls do not repeat what an earlier one measured.
    with.evaluate().unwrap();
    let later = named(&with.step(0).unwrap());
    assert!(
        !later.iter().any(|(k, _)| is_valid(k)),
        "repeated: {later:?}"
    );
    // A cancelled call does not validate, even across a multiple.
    cancelled.store(true, Ordering::Relaxed);
    let report = with.step(interval).unwrap();
    assert_eq!(report.steps_done, 0);
    assert!(!named(&report).iter().any(|(k, _)| is_valid(k)));
    names
}

#[test]
fn trading_validation_lands_on_the_cadence_and_leaves_training_alone() {
    let config = r#"{
        "num_envs": 2, "num_steps": 16, "num_minibatches": 2, "update_epochs": 2,
        "hidden_sizes": [16], "valid_metrics_interval": INTERVAL,
        "trading": {"window": 3, "max_contracts": 2, "episode_len": 40}
    }"#;
    // The counter goes 100, 145, 200, 270, 300, 300; the first call does
    // not repeat a walk taken at creation (there is none).
    let calls = [
        (100, true),
        (45, false),
        (55, true),
        (70, false),
        (30, true),
        (0, false),
    ];
    let names = compare(config, 100, &market(), &calls);
    for name in [
        "valid_sharpe",
        "valid_max_drawdown",
        "valid_total_pnl",
        "valid_bh_sharpe",
        "valid_bh_max_drawdown",
    ] {
        assert_eq!(names.iter().filter(|k| *k == name).count(), 3, "{name}");
    }
    let (mut t, _) = trainer(&config.replace("INTERVAL", "100"), &market());
    let first = named(&t.step(99).unwrap());
    assert!(!first.iter().any(|(k, _)| is_valid(k)), "{first:?}");
}

#[test]
fn cartpole_validation_is_a_greedy_evaluation_on_the_cadence() {
    let config = r#"{"env": "cartpole", "num_envs": 2, "num_steps": 16,
        "num_minibatches": 2, "update_epochs": 2, "hidden_sizes": [16],
        "valid_metrics_interval": INTERVAL}"#;
    let calls = [(50, true), (30, false), (20, true), (49, false), (1, true)];
    let names = compare(config, 50, &Dataset::default(), &calls);
    assert_eq!(
        names.iter().filter(|k| *k == "valid_return_mean").count(),
        3
    );
    assert_eq!(names.iter().filter(|k| *k == "valid_return_min").count(), 3);

    // The validation is the greedy evaluation of the policy as it is: the
    // same episodes as evaluate().
    let (mut t, _) = trainer(&config.replace("INTERVAL", "50"), &Dataset::default());
    let report = named(&t.step(50).unwrap());
    let eval = t.evaluate().unwrap();
    let get = |name: &str| report.iter().find(|(k, _)| k == name).unwrap().1;
    let eval_mean = eval
        .metrics
        .iter()
        .find(|m| m.name.as_str() == "eval_return_mean")
        .unwrap()
        .value;
    assert_eq!(get("valid_return_mean"), eval_mean);
}
