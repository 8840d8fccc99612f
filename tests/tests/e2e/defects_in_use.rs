//! Defects found when tli was tried as a new user would, each
//! reproduced through the real `tli` binary: every test here failed before
//! its fix.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tli_e2e_tests::*;

fn all_finished(status: &serde_json::Value) -> bool {
    status["progress"]["tasks"].as_array().is_some_and(|tasks| {
        tasks.iter().all(|t| {
            matches!(
                t["state"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
        })
    })
}

/// The margin was added twice once a task had measured itself, so four DQN
/// tasks that fit under 64 MiB on their estimates held 73.3 MB afterwards.
#[test]
fn reservations_stay_within_the_budget_after_tasks_measure_themselves() {
    let plugins = PluginDir::with(&[(DQN, "dqn")]);
    let state = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), state.path(), &["--memory-budget", "64MiB"]);
    let started = ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "dqn",
        "-p",
        "dqn",
        "-a",
        "synthetic:20000",
        "-a",
        "synthetic:30000",
        // Long enough (about a second a task) for several polls to see the
        // tasks measured: at 3,000 steps a DQN task ends in 0.1 s.
        "--steps",
        "30000",
        "-o",
        "json",
    ]));
    let job = started["job_id"].as_u64().expect("job_id").to_string();
    let deadline = Instant::now() + Duration::from_secs(300);
    let (mut polls, mut measured_polls, mut most_running) = (0, 0, 0);
    loop {
        let resources = ok_json(&server.client(&["resources", "-o", "json"]));
        let device = &resources["devices"][0];
        let reserved = device["reserved_bytes"].as_u64().expect("reserved_bytes");
        let budget = device["budget_bytes"].as_u64().expect("budget_bytes");
        assert!(
            reserved <= budget,
            "reserved {reserved} > budget {budget}: {device}"
        );
        let held = device["reservations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        most_running = most_running.max(held.len());
        if held.iter().any(|r| r["measured_bytes"].is_u64()) {
            measured_polls += 1;
        }
        for r in held.iter().filter(|r| r["measured_bytes"].is_u64()) {
            assert_breakdown_sums(&r["measured_memory"], &r["measured_bytes"]);
        }
        polls += 1;
        let status = ok_json(&server.client(&["train", "status", &job, "-o", "json"]));
        if all_finished(&status) {
            for task in status["progress"]["tasks"].as_array().expect("tasks") {
                assert_breakdown_sums(&task["measured_memory"], &task["measured_bytes"]);
            }
            break;
        }
        assert!(Instant::now() < deadline, "job did not finish: {status}");
    }
    assert!(
        measured_polls > 0,
        "no poll saw a measured task ({polls} polls); the check proved nothing"
    );
    assert!(
        most_running >= 2,
        "tasks never ran side by side ({most_running})"
    );
}

/// Memory by component: the parts sum to the measured
/// total, and on the CPU the activations are the plugin's own count.
fn assert_breakdown_sums(memory: &serde_json::Value, total: &serde_json::Value) {
    let part = |k: &str| {
        memory[k]
            .as_u64()
            .unwrap_or_else(|| panic!("no {k} in {memory}"))
    };
    let sum =
        part("parameters") + part("gradients") + part("optimizer_state") + part("activations");
    assert_eq!(Some(sum), total.as_u64(), "{memory}");
    assert!(part("parameters") > 0, "{memory}");
    assert_eq!(memory["source"], "plugin_count", "{memory}");
}

/// `tli … | head` panicked with "failed printing to stdout: Broken pipe".
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template"), (DQN, "dqn")]);
    for args in [
        &["plugins", "list", "--local", "-o", "json"][..],
        &["data", "contracts"][..],
        &["completions", "bash"][..],
    ] {
        let mut child = Command::new(tli_binary())
            .args(args)
            .env("TLI_PLUGIN_DIR", plugins.path())
            .env_remove("LD_LIBRARY_PATH")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tli");
        // The reader goes away before tli has written anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// `make install` did not exist and plugins were 64 MB each; the installed
/// `tli` must find its stripped plugins with no flag or environment.
#[test]
fn install_puts_tli_and_stripped_plugins_where_tli_finds_them() {
    let prefix = tempfile::tempdir().unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install.sh");
    let out = Command::new(&script)
        .arg(prefix.path())
        .arg(profile_dir())
        .output()
        .expect("run scripts/install.sh");
    assert!(out.status.success(), "{}", stderr(&out));
    let plugin_dir = prefix.path().join("lib/tli/plugins");
    for name in [TEMPLATE, DQN, PPO, MAMBA2] {
        let file = plugin_dir.join(format!("lib{name}.so"));
        let size = std::fs::metadata(&file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .len();
        assert!(
            size < 16 << 20,
            "{} is {size} bytes: not stripped",
            file.display()
        );
    }
    let listed = Command::new(prefix.path().join("bin/tli"))
        .args(["plugins", "list", "--local", "-o", "json"])
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("TLI_PLUGIN_DIR")
        .output()
        .expect("run the installed tli");
    let listed = ok_json(&listed);
    let text = listed.to_string();
    for plugin in ["\"template\"", "\"dqn\"", "\"ppo\"", "\"mamba2\""] {
        assert!(text.contains(plugin), "{plugin} not listed: {text}");
    }
    assert!(
        text.contains(&plugin_dir.canonicalize().unwrap().display().to_string())
            || text.contains("lib/tli/plugins"),
        "{text}"
    );
}

/// Fast agents checkpointed about every second under the step-based default
/// and `watch` printed each one twice; now the default is time-based and
/// routine checkpoints show only with `--verbose`.
#[test]
fn routine_checkpoints_are_rare_by_default_and_shown_only_when_asked() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), state.path(), &[]);
    let routine = |lines: &str| {
        lines
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["event"] == "state_changed")
            .filter(|e| {
                matches!(
                    (e["from"].as_str(), e["to"].as_str()),
                    (Some("running"), Some("checkpointing"))
                        | (Some("checkpointing"), Some("running"))
                )
            })
            .count()
    };
    // Defaults: 1500 steps wrote a routine checkpoint at 1000 before. (A small
    // model, so that even a machine busy with other tests stays well within
    // the default 300 s time trigger.)
    let out = server.client(&[
        "train",
        "start",
        "-p",
        "template",
        "--config",
        r#"{"hidden_sizes":[8],"batch_size":32}"#,
        "-a",
        "synthetic:2000",
        "--steps",
        "1500",
        "--watch",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(routine(&stdout(&out)), 0, "{}", stdout(&out));
    let store = tli_host::orchestrator::store::Store::open_read_only(state.path()).unwrap();
    let task = store.tasks_of(1).unwrap()[0].id;
    let steps: Vec<u64> = store
        .checkpoints(task)
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, vec![1500], "only the final checkpoint by default");

    // A step interval asked for: written, hidden from watch, shown with --verbose.
    let spec = state.path().join("job.json");
    std::fs::write(
        &spec,
        r#"{"name":"ck","models":[{"plugin":"template","steps":1500,
                        "config":{"hidden_sizes":[8],"batch_size":32}}],
            "assets":[{"synthetic":{"rows":2000}}],"checkpoint":{"every_steps":500}}"#,
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let quiet = server.client(&["train", "start", "--spec", spec, "--watch", "-o", "json"]);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert_eq!(routine(&stdout(&quiet)), 0, "{}", stdout(&quiet));
    let verbose = server.client(&[
        "train",
        "start",
        "--spec",
        spec,
        "--watch",
        "--verbose",
        "-o",
        "json",
    ]);
    assert!(verbose.status.success(), "{}", stderr(&verbose));
    // Two routine checkpoints (there and back) and the final one's start.
    assert_eq!(routine(&stdout(&verbose)), 5, "{}", stdout(&verbose));
}

/// `tli host serve --token s3cret` was accepted and ignored: the host said
/// "token: not required" and served every call without one. `--token` is
/// the client's flag; the host refuses it (before or after the subcommand),
/// names what to use, echoes no secret and starts nothing.
#[test]
fn host_serve_refuses_a_client_token_on_its_command_line() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state_arg = state.to_str().unwrap();
    let serve = [
        "host",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--ui-listen",
        "off",
        "--state-dir",
        state_arg,
    ];
    let after: Vec<&str> = serve.iter().copied().chain(["--token", "s3cret"]).collect();
    let before: Vec<&str> = ["--token", "s3cret"].into_iter().chain(serve).collect();
    for args in [after, before] {
        let mut child = Command::new(tli_binary())
            .args(&args)
            .env("TLI_PLUGIN_DIR", plugins.path())
            .env_remove("TLI_TOKEN")
            .env_remove("TLI_SERVE_TOKEN")
            .env_remove("LD_LIBRARY_PATH")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tli");
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`tli {}` is serving: --token was ignored", args.join(" "));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = child.wait_with_output().expect("output");
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("--token-file") && err.contains("TLI_SERVE_TOKEN"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("s3cret"), "the secret was echoed: {err}");
        assert!(!state.exists(), "{args:?}: a state directory was created");
    }
}
