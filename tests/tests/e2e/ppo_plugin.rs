//! The PPO plugin through its real `.so`, loaded by the host's registry:
//! exact checkpoint resumption on CartPole and on trading (also from the
//! middle of a rollout), learning on CartPole and on a synthetic market with
//! a planted predictable component, memory estimates, config refusals and
//! cancellation.
//!
//! Needs `cargo build --release -p tli-plugin-ppo` first (the test loads
//! `target/release/libtli_plugin_ppo.so`).

use abi_stable::std_types::RArc;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tli_data::synthetic_ar::{synthetic_ar_dataset, SyntheticArSpec};
use tli_e2e_tests::trainers::*;
use tli_e2e_tests::*;
use tli_host::registry::{LoadedPlugin, PluginRegistry};
use tli_host::services::TaskServices;
use tli_plugin_api::{Dataset, ErrorCode};

fn registry() -> (PluginDir, PluginRegistry) {
    registry_of(PPO, "ppo")
}

/// The shared N+M checkpoint equivalence, plus: the step metrics of one
/// `step(N+M)` call and of uneven calls equal those of the last of two calls
/// (PPO's per-call training metrics describe the last update, whatever the split).
fn check_resume(plugin: &LoadedPlugin, config: &str, data: &RArc<Dataset>, n: u64, m: u64) {
    let (expected_step, _) = assert_resumes_exactly(plugin, config, data, n, m);
    assert!(
        expected_step["updates"] >= 1.0,
        "no update happened: {expected_step:?}"
    );
    let total = n + m;
    let mut one_call = trainer(plugin, config, 3, total, data);
    assert_eq!(
        as_map(&one_call.step(total).unwrap().metrics),
        expected_step
    );
    let mut uneven = trainer(plugin, config, 3, total, data);
    let mut last_uneven = BTreeMap::new();
    let mut done = 0;
    for slice in [1, 7, 13, 50].iter().cycle() {
        if done == total {
            break;
        }
        let k = (*slice).min(total - done);
        last_uneven = as_map(&uneven.step(k).unwrap().metrics);
        done += k;
    }
    // Validation metrics belong to the call that crossed a multiple of the
    // cadence, which the last uneven call need not be.
    let training = |m: &BTreeMap<String, f64>| {
        m.iter()
            .filter(|(k, _)| !k.starts_with("valid_"))
            .map(|(k, v)| (k.clone(), *v))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(training(&last_uneven), training(&expected_step));
}

/// A checkpoint from before the flat AdamW (per-tensor `adam.m.<i>`) is
/// refused with an error that says so, not a panic.
#[test]
fn a_per_tensor_adam_checkpoint_is_refused_clearly() {
    one_thread();
    let (_dir, registry) = registry();
    let ppo = registry.get("ppo").unwrap();
    let config = r#"{"env": "cartpole", "num_envs": 2, "num_steps": 16, "num_minibatches": 2,
        "update_epochs": 2, "hidden_sizes": [16]}"#;
    assert_per_tensor_adam_checkpoint_refused(ppo, config, &synthetic(300), 40);
}

#[test]
fn cartpole_resumes_exactly_from_a_checkpoint() {
    one_thread();
    let (_dir, registry) = registry();
    let ppo = registry.get("ppo").unwrap();
    let data = synthetic(300);
    // 3 environments × 16 steps = 48 per rollout: N = 130 is a multiple of
    // neither, so the checkpoint holds a partial rollout and a remainder.
    let config = r#"{"env": "cartpole", "num_envs": 3, "num_steps": 16, "num_minibatches": 4,
        "update_epochs": 3, "hidden_sizes": [16, 16]}"#;
    check_resume(ppo, config, &data, 130, 101);
    // Value clipping, entropy bonus, target KL, unannealed rates, no advantage normalization.
    let options = r#"{"env": "cartpole", "num_envs": 2, "num_steps": 20, "num_minibatches": 5,
        "clip_vloss": true, "ent_coef": 0.01, "target_kl": 0.001, "anneal_lr": false,
        "anneal_clip": false, "norm_adv": false, "hidden_sizes": [8]}"#;
    check_resume(ppo, options, &data, 61, 90);
}

#[test]
fn trading_resumes_exactly_from_a_checkpoint() {
    one_thread();
    let (_dir, registry) = registry();
    let ppo = registry.get("ppo").unwrap();
    let data = synthetic(2_000);
    // Episodes of 40 steps end inside rollouts (time-limit bootstraps), the
    // validation walk runs every 100 steps, and N is mid-rollout.
    let config = r#"{"num_envs": 3, "num_steps": 30, "num_minibatches": 3, "hidden_sizes": [16],
        "valid_metrics_interval": 100, "trading": {"window": 4, "episode_len": 40,
        "max_contracts": 2}}"#;
    check_resume(ppo, config, &data, 200, 163);
    // Vol-scaled rewards (reward scale 1).
    let scaled = r#"{"num_envs": 2, "num_steps": 64, "num_minibatches": 2, "hidden_sizes": [8],
        "trading": {"window": 2, "episode_len": 50, "vol_scaled": true}}"#;
    check_resume(ppo, scaled, &data, 129, 128);
}

#[test]
fn a_checkpoint_from_another_config_or_dataset_is_refused() {
    one_thread();
    let (_dir, registry) = registry();
    let ppo = registry.get("ppo").unwrap();
    let data = synthetic(1_000);
    let config = r#"{"env": "cartpole", "hidden_sizes": [16], "num_steps": 8}"#;
    let ckpt = tempfile::tempdir().unwrap();
    let mut a = trainer(ppo, config, 1, 100, &data);
    a.step(60).unwrap();
    a.save_checkpoint(ckpt.path()).unwrap();

    let other = r#"{"env": "cartpole", "hidden_sizes": [32], "num_steps": 8}"#;
    let mut b = trainer(ppo, other, 1, 100, &data);
    let error = b.load_checkpoint(ckpt.path()).unwrap_err();
    assert_eq!(error.code, ErrorCode::IO);
    assert!(error.message.contains("hidden_sizes"), "{error}");

    let mut c = trainer(
        ppo,
        r#"{"hidden_sizes": [16], "num_steps": 8}"#,
        1,
        100,
        &data,
    );
    let error = c.load_checkpoint(ckpt.path()).unwrap_err();
    assert_eq!(error.code, ErrorCode::IO);
    assert!(error.message.contains("env"), "{error}");

    // The same trading config on other market data.
    let trading =
        r#"{"hidden_sizes": [8], "num_steps": 16, "trading": {"window": 2, "episode_len": 20}}"#;
    let ckpt2 = tempfile::tempdir().unwrap();
    let mut d = trainer(ppo, trading, 1, 100, &data);
    d.step(50).unwrap();
    d.save_checkpoint(ckpt2.path()).unwrap();
    let other_data = RArc::new(synthetic_ar_dataset(SyntheticArSpec {
        rows: 1_000,
        seed: 99,
        ..SyntheticArSpec::default()
    }));
    let mut e = trainer(ppo, trading, 1, 100, &other_data);
    let error = e.load_checkpoint(ckpt2.path()).unwrap_err();
    assert_eq!(error.code, ErrorCode::IO, "{error}");
}

/// CI's learning check: one seed, a reduced budget, one core.
#[test]
fn cartpole_learns_within_a_ci_budget() {
    one_thread();
    let (_dir, registry) = registry();
    let ppo = registry.get("ppo").unwrap();
    let data = synthetic(300);
    let steps = 40_000;
    let started = Instant::now();
    let mut t = trainer(ppo, r#"{"env": "cartpole"}"#, 1, steps, &data);
    let last = train(&mut t, steps, 1_000);
    let eval = as_map(&t.evaluate().unwrap().metrics);
    let mean20 = last["episodic_return_mean20"];
    eprintln!(
        "CartPole PPO CI run: {steps} steps in {:.1} s, episodic_return_mean20 {mean20:.1}, \
         greedy eval {:.1}, entropy {:.3}",
        started.elapsed().as_secs_f64(),
        eval["eval_return_mean"],
        last["entropy"],
    );
    assert_eq!(last["env_steps"], steps as f64);
    // A uniformly random policy averages about 22.
    assert!(mean20 >= 250.0, "mean of the last 20 returns {mean20}");
    assert!(eval["eval_return_mean"] >= 250.0, "{eval:?}");
}

/// AR(1) returns with φ = 0.3: the policy must find the planted
/// predictability out of sample, net of costs, with the default config.
#[test]
fn trading_beats_buy_and_hold_on_a_planted_signal() {
    one_thread();
    let (_dir, registry) = registry();
    let ppo = registry.get("ppo").unwrap();
    let data = synthetic(20_000);
    let steps = 200_000;
    let started = Instant::now();
    let mut t = trainer(ppo, "{}", 1, steps, &data);
    let last = train(&mut t, steps, 10_000);
    let eval = as_map(&t.evaluate().unwrap().metrics);
    eprintln!(
        "synthetic trading PPO: {steps} steps in {:.1} s; test Sharpe {:.2} (buy-and-hold {:.2}), \
         validation Sharpe {:.2} (buy-and-hold {:.2}); last step metrics {last:?}",
        started.elapsed().as_secs_f64(),
        eval["test_sharpe"],
        eval["test_bh_sharpe"],
        eval["valid_sharpe"],
        eval["valid_bh_sharpe"],
    );
    for key in [
        "valid_sharpe",
        "valid_max_drawdown",
        "valid_bh_sharpe",
        "entropy",
    ] {
        assert!(last.contains_key(key), "{key} missing: {last:?}");
    }
    assert!(eval["test_sharpe"] > 1.0, "{eval:?}");
    assert!(eval["test_sharpe"] > eval["test_bh_sharpe"], "{eval:?}");
}

#[test]
fn memory_estimate_matches_the_created_trainer() {
    one_thread();
    let (_dir, registry) = registry();
    let ppo = registry.get("ppo").unwrap();
    let data = synthetic(2_000);
    for config in [
        r#"{"env": "cartpole"}"#,
        r#"{"env": "cartpole", "hidden_sizes": [512, 512], "num_envs": 32, "num_steps": 128}"#,
        r#"{}"#,
        r#"{"hidden_sizes": [256, 256], "num_envs": 16, "trading": {"window": 64, "max_contracts": 3}}"#,
    ] {
        let config = ppo.validate_config(config).unwrap();
        let estimate = ppo.estimate_memory(&config, data.shape(), "cpu").unwrap();
        let mut t = ppo
            .create_trainer(
                task_spec(&config, 1, 1000, &data),
                TaskServices::new("ppo", "m"),
            )
            .unwrap();
        for _ in 0..2 {
            assert_estimate_close(&config, &estimate, &t);
            // Measured again after training (gradients and buffers in use).
            t.step(300).unwrap();
        }
    }
    assert!(ppo.estimate_memory("{}", data.shape(), "tpu:0").is_err());
}

#[test]
fn bad_configs_are_refused_with_the_key_named() {
    let (_dir, registry) = registry();
    let ppo = registry.get("ppo").unwrap();
    let refused = [
        (r#"{"gamma": 2}"#, "gamma"),
        (r#"{"env": "pong"}"#, "env"),
        (r#"{"num_envs": 0}"#, "num_envs"),
        (r#"{"num_minibatches": 3}"#, "num_minibatches"),
        (r#"{"clip_coef": 0}"#, "clip_coef"),
        (r#"{"learning_rate": "fast"}"#, "learning_rate"),
        (r#"{"learning_rat": 0.1}"#, "learning_rat"),
        (r#"{"trading": {"episode_len": 0}}"#, "episode_len"),
        (r#"{"trading": {"max_contracts": 1000}}"#, "max_contracts"),
        (r#"{"hidden_sizes": []}"#, "hidden_sizes"),
        (r#"[1, 2]"#, "object"),
    ];
    assert_config_checks(ppo, &refused, r#"{"env": "cartpole"}"#);

    // A dataset too short for one trading episode, and an unknown device.
    let tiny = synthetic(200);
    let config = ppo.validate_config("{}").unwrap();
    let error = ppo
        .create_trainer(
            task_spec(&config, 1, 10, &tiny),
            TaskServices::new("ppo", "x"),
        )
        .err()
        .expect("too few rows must be refused");
    assert_eq!(error.code, ErrorCode::INVALID_DATA, "{error}");
    let mut bad_device = task_spec(&config, 1, 10, &synthetic(2_000));
    bad_device.device = "tpu:0".into();
    let error = ppo
        .create_trainer(bad_device, TaskServices::new("ppo", "x"))
        .err()
        .expect("unknown device must be refused");
    assert_eq!(error.code, ErrorCode::UNSUPPORTED_DEVICE, "{error}");
}

#[test]
fn cancellation_stops_between_vector_steps() {
    one_thread();
    let (_dir, registry) = registry();
    let ppo = registry.get("ppo").unwrap();
    let data = synthetic(300);
    let config = ppo
        .validate_config(r#"{"env": "cartpole", "hidden_sizes": [8], "num_envs": 4}"#)
        .unwrap();
    let flag = Arc::new(AtomicBool::new(false));
    let mut t = ppo
        .create_trainer(
            task_spec(&config, 1, 1000, &data),
            TaskServices::with_cancel_flag("ppo", "c", flag.clone()),
        )
        .unwrap();
    assert_eq!(t.step(10).unwrap().steps_done, 10);
    flag.store(true, Ordering::Relaxed);
    assert_eq!(t.step(100).unwrap().steps_done, 0);
    assert_eq!(t.total_steps().unwrap(), 10);

    // Cancelled from another thread in the middle of a long call: it stops
    // early and reports what it did.
    flag.store(false, Ordering::Relaxed);
    let setter = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            flag.store(true, Ordering::Relaxed);
        })
    };
    let report = t.step(100_000_000).unwrap();
    setter.join().unwrap();
    let done = report.steps_done;
    assert!(done > 0 && done < 100_000_000, "{done}");
    assert_eq!(t.total_steps().unwrap(), 10 + done);
    let metrics = as_map(&report.metrics);
    assert!(metrics["env_steps"] >= (10 + done) as f64, "{metrics:?}");
    flag.store(false, Ordering::Relaxed);
    assert_eq!(t.step(5).unwrap().steps_done, 5);
    assert_eq!(t.total_steps().unwrap(), 15 + done);
}
