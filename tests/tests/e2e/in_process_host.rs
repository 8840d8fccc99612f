//! The host library used in-process, as the orchestrator will: one process
//! loads real plugin libraries, a trainer panics, and the same process keeps
//! training other trainers.

use tli_e2e_tests::*;
use tli_host::registry::PluginRegistry;
use tli_host::services::TaskServices;
use tli_plugin_api::{ErrorCode, TaskSpec};
use tli_testkit::{cpu_task, synthetic};

fn spec(task: &str, config: &str, steps: u64) -> TaskSpec {
    cpu_task(task, config, 1, steps, &synthetic(600))
}

#[test]
fn a_poisoned_trainer_fails_alone_while_others_train_on() {
    let dir = PluginDir::new();
    dir.add(BEHAVIOUR, "behaviour");
    dir.add(TEMPLATE, "template");
    let registry = PluginRegistry::scan(dir.path()).unwrap();
    assert!(registry.refused.is_empty(), "{:?}", registry.refused);
    let behaviour = registry.get("behaviour").unwrap();
    let template = registry.get("template").unwrap();

    let config = behaviour
        .validate_config(r#"{"panic_in_step_at": 2}"#)
        .unwrap();
    let mut panicking = behaviour
        .create_trainer(spec("p", &config, 10), TaskServices::new("behaviour", "p"))
        .unwrap();
    let healthy_config = template.validate_config("{}").unwrap();
    let mut healthy = template
        .create_trainer(
            spec("h", &healthy_config, 10),
            TaskServices::new("template", "h"),
        )
        .unwrap();

    assert_eq!(panicking.step(2).unwrap().steps_done, 2);
    let error = panicking.step(1).unwrap_err();
    assert_eq!(error.code, ErrorCode::PANIC);
    assert!(
        error.message.contains("deliberate panic at step 2"),
        "{error}"
    );
    assert!(
        error.message.contains("lib.rs"),
        "panic location missing: {error}"
    );
    // The half-updated trainer refuses further calls instead of running on.
    let again = panicking.step(1).unwrap_err();
    assert_eq!(again.code, ErrorCode::POISONED, "{again}");
    assert_eq!(
        panicking.total_steps().unwrap_err().code,
        ErrorCode::POISONED
    );
    drop(panicking);

    // The other trainer, created before the panic, and a new one both train.
    assert_eq!(healthy.step(5).unwrap().steps_done, 5);
    let mut fresh = template
        .create_trainer(
            spec("f", &healthy_config, 10),
            TaskServices::new("template", "f"),
        )
        .unwrap();
    assert_eq!(fresh.step(5).unwrap().steps_done, 5);
    assert_eq!(fresh.total_steps().unwrap(), 5);
}

#[test]
fn checkpoints_restore_exactly_and_errors_stay_errors() {
    let dir = PluginDir::new();
    dir.add(TEMPLATE, "template");
    dir.add(BEHAVIOUR, "behaviour");
    let registry = PluginRegistry::scan(dir.path()).unwrap();
    let template = registry.get("template").unwrap();
    let config = template
        .validate_config(r#"{"hidden_sizes": [16]}"#)
        .unwrap();

    // N + M steps in one go …
    let mut straight = template
        .create_trainer(spec("s", &config, 30), TaskServices::new("template", "s"))
        .unwrap();
    straight.step(30).unwrap();
    let expected = straight.evaluate().unwrap().metrics;

    // … equal N steps, checkpoint, a fresh trainer, load, M steps.
    let ckpt = tempfile::tempdir().unwrap();
    let mut first = template
        .create_trainer(spec("a", &config, 30), TaskServices::new("template", "a"))
        .unwrap();
    first.step(12).unwrap();
    first.save_checkpoint(ckpt.path()).unwrap();
    drop(first);
    let mut resumed = template
        .create_trainer(spec("b", &config, 30), TaskServices::new("template", "b"))
        .unwrap();
    resumed.load_checkpoint(ckpt.path()).unwrap();
    assert_eq!(resumed.total_steps().unwrap(), 12);
    resumed.step(18).unwrap();
    assert_eq!(resumed.evaluate().unwrap().metrics, expected);

    // A checkpoint from another architecture is refused with a reason.
    let other = template
        .validate_config(r#"{"hidden_sizes": [32]}"#)
        .unwrap();
    let mut mismatched = template
        .create_trainer(spec("c", &other, 30), TaskServices::new("template", "c"))
        .unwrap();
    let error = mismatched.load_checkpoint(ckpt.path()).unwrap_err();
    assert_eq!(error.code, ErrorCode::IO);
    assert!(error.message.contains("hidden sizes"), "{error}");

    // An error (not a panic) from step does not poison the trainer.
    let behaviour = registry.get("behaviour").unwrap();
    let cfg = behaviour
        .validate_config(r#"{"error_in_step_at": 1}"#)
        .unwrap();
    let mut erring = behaviour
        .create_trainer(spec("e", &cfg, 5), TaskServices::new("behaviour", "e"))
        .unwrap();
    assert_eq!(erring.step(1).unwrap().steps_done, 1);
    assert_eq!(erring.step(1).unwrap_err().code, ErrorCode::OTHER);
    assert_eq!(erring.total_steps().unwrap(), 1);
    let refused = behaviour.create_trainer(
        spec("x", r#"{"fail_create": true}"#, 5),
        TaskServices::new("behaviour", "x"),
    );
    assert!(refused.is_err());
}
