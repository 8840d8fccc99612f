//! Training through the plugin ABI with real `.so` files: the template
//! plugin learns; a panic inside a plugin's `step` comes back as an error and
//! the same process goes on training; plugin log lines reach the host's log; a
//! checkpoint of the per-tensor Adam layout is refused with a clear error.

use tli_e2e_tests::trainers::{assert_per_tensor_adam_checkpoint_refused, registry_of, synthetic};
use tli_e2e_tests::*;

fn metric(run: &serde_json::Value, group: &str, name: &str) -> f64 {
    run[group][name]
        .as_f64()
        .unwrap_or_else(|| panic!("{group}.{name} missing in {run}"))
}

#[test]
fn template_plugin_trains_through_the_abi_and_learns() {
    let dir = PluginDir::new();
    dir.add(TEMPLATE, "template");
    let out = run_tli(
        dir.path(),
        &[
            "train", "local", "-p", "template", "--steps", "300", "--seed", "3", "-o", "json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let runs = json(&out);
    let run = &runs[0];
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["steps_done"], 300);
    let first = metric(run, "first_metrics", "train_loss");
    let last = metric(run, "final_metrics", "train_loss");
    assert!(last < first, "loss did not fall: {first} -> {last}");
    // The synthetic AR(1) data (φ = 0.3) allows a skill of 1 − (1 − φ²) = 0.09
    // over the zero forecast; an untrained net has a negative skill.
    let skill = metric(run, "evaluation", "valid_skill");
    assert!(
        skill > 0.05,
        "validation skill {skill} shows no learning: {run}"
    );
    // The measured tensor bytes are within 25% of the estimate.
    let estimate = run["memory_estimate"]["total"].as_f64().unwrap();
    let measured = run["memory_measured"]["total"].as_f64().unwrap();
    assert!(
        (measured - estimate).abs() <= 0.25 * estimate,
        "estimate {estimate} vs measured {measured}"
    );
    // Progress lines were shown while training (stderr is not a terminal here).
    let err = stderr(&out);
    assert!(err.contains("template: 300/300 steps (100%)"), "{err}");
}

#[test]
fn same_seed_gives_the_same_run() {
    let dir = PluginDir::new();
    dir.add(TEMPLATE, "template");
    let args = [
        "train", "local", "-p", "template", "--steps", "40", "--seed", "9", "-o", "json",
    ];
    let a = json(&run_tli(dir.path(), &args));
    let b = json(&run_tli(dir.path(), &args));
    assert_eq!(a[0]["final_metrics"], b[0]["final_metrics"]);
    assert_eq!(a[0]["evaluation"], b[0]["evaluation"]);
}

#[test]
fn a_panic_in_step_is_an_error_and_the_same_process_trains_the_next_plugin() {
    let dir = PluginDir::new();
    dir.add(TEMPLATE, "template");
    dir.add(BEHAVIOUR, "behaviour");
    let out = run_tli(
        dir.path(),
        &[
            "train",
            "local",
            "-p",
            "behaviour",
            "-p",
            "template",
            "--steps",
            "50",
            "--config",
            r#"behaviour={"panic_in_step_at": 5}"#,
            "-o",
            "json",
        ],
    );
    // One run failed, so the exit code is non-zero, but the process lived on.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let runs = json(&out);
    let failed = &runs[0];
    assert_eq!(failed["plugin"], "behaviour");
    assert_eq!(failed["status"], "failed");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("panic: plugin panicked in step: deliberate panic at step 5"),
        "{error}"
    );
    assert!(error.contains("after 0 steps"), "{error}");
    let next = &runs[1];
    assert_eq!(next["plugin"], "template");
    assert_eq!(next["status"], "completed", "{next}");
    assert_eq!(next["steps_done"], 50);
    assert!(stderr(&out).contains("1 of 2 training run(s) failed"));
}

#[test]
fn plugin_log_lines_reach_the_host_log() {
    let dir = PluginDir::new();
    dir.add(BEHAVIOUR, "behaviour");
    dir.add(TEMPLATE, "template");
    let out = run_tli(
        dir.path(),
        &[
            "train",
            "local",
            "-p",
            "behaviour",
            "-p",
            "template",
            "--steps",
            "30",
            "--config",
            r#"behaviour={"log_every": 10}"#,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // The results table shows what each plugin says it is compared by: the
    // template's validation loss, skill and trading Sharpe (plugin API 1.5);
    // the behaviour fixture names none and gets the usual order.
    let table = stdout(&out);
    let template_row = table
        .lines()
        .find(|l| l.contains("template") && l.contains("completed"))
        .unwrap_or_else(|| panic!("no template row:\n{table}"));
    assert!(
        table.contains("RESULTS")
            && template_row.contains("valid_loss=")
            && template_row.contains("valid_skill=")
            && template_row.contains("valid_trade_sharpe="),
        "{table}"
    );
    let err = stderr(&out);
    for step in [10, 20, 30] {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("behaviour reached step {step}")))
            .unwrap_or_else(|| panic!("log line for step {step} missing:\n{err}"));
        assert!(
            line.contains("INFO")
                && line.contains("plugin=behaviour")
                && line.contains("task=local-1-behaviour"),
            "{line}"
        );
    }
    // The template plugin's own log line, with its task id.
    assert!(
        err.lines()
            .any(|l| l.contains("plugin=template") && l.contains("MLP [8, 64, 64, 1]")),
        "{err}"
    );

    // Without TLI_LOG, as a person runs it: the same lines as the command's own, no time,
    // level or module path; a warning says so.
    let out = run_tli_as_a_user(
        dir.path(),
        &[
            "train",
            "local",
            "-p",
            "behaviour",
            "--steps",
            "20",
            "--config",
            r#"behaviour={"log_every": 10}"#,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l == "behaviour: behaviour reached step 10"),
        "{err}"
    );
    assert!(
        !err.contains(" INFO ") && !err.contains("plugin=") && !err.contains("tli_"),
        "{err}"
    );
}

#[test]
fn bad_configs_and_unknown_plugins_are_clear_errors() {
    let dir = PluginDir::new();
    dir.add(TEMPLATE, "template");
    let out = run_tli(
        dir.path(),
        &[
            "train",
            "local",
            "-p",
            "template",
            "--config",
            r#"{"learning_rate": -1}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    // The plugin's message once, without its internal code.
    assert!(
        text.contains("invalid config: learning_rate: -1 is outside (0, 1]")
            && !text.contains("invalid_config"),
        "{text}"
    );

    // A mistyped plugin: one line, before any data is read; nothing on stdout.
    for (name, hint) in [("nope", ""), ("tempalte", " (did you mean template?)")] {
        let out = run_tli_as_a_user(dir.path(), &["train", "local", "-p", name]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(stdout(&out), "", "no dataset line, no table");
        assert_eq!(
            stderr(&out).trim_end(),
            format!(
                "error: --plugin {name}: no such plugin{hint}; loaded: template; nothing was \
                 trained (`tli plugins list --local` shows what {} holds)",
                dir.path().display()
            )
        );
    }

    let out = run_tli(
        dir.path(),
        &["train", "local", "-p", "template", "--config", "{oops"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is not valid JSON"),
        "{}",
        stderr(&out)
    );

    let out = run_tli(
        dir.path(),
        &["train", "local", "-p", "template", "--steps", "0"],
    );
    assert_eq!(out.status.code(), Some(2), "clap rejects a zero step count");
}

/// A template checkpoint from before the flat AdamW (per-tensor
/// `adam.m.<i>`) is refused with an error that says so, not a panic.
#[test]
fn a_per_tensor_adam_template_checkpoint_is_refused_clearly() {
    let (_dir, registry) = registry_of(TEMPLATE, "template");
    let template = registry.get("template").unwrap();
    let config = r#"{"hidden_sizes": [8], "batch_size": 16}"#;
    assert_per_tensor_adam_checkpoint_refused(template, config, &synthetic(400), 5);
}
