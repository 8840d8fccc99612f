//! The real `tli` binary as gRPC server (`tli host serve`) and as client
//! (`tli train …`) over loopback: the whole job lifecycle, bad requests with
//! the right status codes and an unchanged store, a Python client that knows
//! the API only through server reflection, and the token rules.

use std::path::Path;
use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::store::Store;

fn job_id(job: &serde_json::Value) -> u64 {
    job["job_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no job_id in {job}"))
}

/// Polls `train status` until `done(status)` or the deadline.
fn wait_for(
    server: &Server,
    job: u64,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]));
        if done(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts a behaviour task of `steps` steps of 10 ms on synthetic bars; its job id.
fn start_behaviour(server: &Server, steps: &str) -> u64 {
    job_id(&ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "--config",
        r#"{"sleep_ms_per_step":10}"#,
        "-a",
        "synthetic:100",
        "--steps",
        steps,
        "-o",
        "json",
    ])))
}

fn task_states(status: &serde_json::Value) -> Vec<String> {
    status["progress"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks in {status}"))
        .iter()
        .map(|t| t["state"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn start_watch_status_list_stop_resume_complete() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let server = Server::start(plugins.path(), state.path(), &[]);
    let listed = ok_json(&server.client(&["plugins", "list", "-o", "json"]));
    let mut names: Vec<&str> = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["behaviour", "template"],
        "the host's plugins, over the API"
    );

    // Three quick jobs for listing, then the one we follow.
    for name in ["alpha", "bravo", "charlie"] {
        ok_json(&server.client(&[
            "train",
            "start",
            "--name",
            name,
            "-p",
            "template",
            "--config",
            r#"{"hidden_sizes":[8]}"#,
            "-a",
            "synthetic:300",
            "--steps",
            "20",
            "-o",
            "json",
        ]));
    }
    let started = ok_json(&server.client(&[
        "train",
        "start",
        "--name",
        "main",
        "-p",
        "behaviour",
        "-p",
        "template",
        "--config",
        r#"behaviour={"sleep_ms_per_step":10}"#,
        "--config",
        r#"template={"hidden_sizes":[16]}"#,
        "-a",
        "synthetic:400:1",
        "-a",
        "synthetic:400:2",
        "--steps",
        "300",
        "-o",
        "json",
    ]));
    let job = job_id(&started);
    assert_eq!(
        started["progress"]["tasks"].as_array().unwrap().len(),
        4,
        "2 models × 2 assets"
    );

    // Stop it while it runs, gracefully.
    wait_for(&server, job, "a running task", |s| {
        task_states(s).iter().any(|t| t == "running")
    });
    let stopped = ok_json(&server.client(&["train", "stop", &job.to_string(), "-o", "json"]));
    assert_eq!(job_id(&stopped), job);
    let status = wait_for(&server, job, "every task stopped or done", |s| {
        task_states(s)
            .iter()
            .all(|t| t == "cancelled" || t == "completed")
    });
    assert!(
        task_states(&status).iter().any(|t| t == "cancelled"),
        "{status}"
    );

    // List: filter, sort, and two pages.
    let all = ok_json(&server.client(&["train", "list", "--sort", "oldest", "-o", "json"]));
    let names: Vec<&str> = all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "bravo", "charlie", "main"]);
    let page1 = ok_json(&server.client(&[
        "train",
        "list",
        "--sort",
        "name",
        "--page-size",
        "2",
        "-o",
        "json",
    ]));
    let token = page1["next_page_token"].as_str().unwrap().to_string();
    assert!(!token.is_empty());
    let page2 = ok_json(&server.client(&[
        "train",
        "list",
        "--sort",
        "name",
        "--page-size",
        "2",
        "--page-token",
        &token,
        "-o",
        "json",
    ]));
    let paged: Vec<&str> = page1["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .chain(page2["jobs"].as_array().unwrap())
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(paged, ["alpha", "bravo", "charlie", "main"]);
    assert_eq!(page2["next_page_token"].as_str().unwrap_or(""), "");
    let cancelled =
        ok_json(&server.client(&["train", "list", "--state", "cancelled", "-o", "json"]));
    assert_eq!(cancelled["jobs"].as_array().unwrap().len(), 1);
    let by_plugin =
        ok_json(&server.client(&["train", "list", "--plugin", "behaviour", "-o", "json"]));
    assert_eq!(by_plugin["jobs"][0]["name"], "main");

    // Resume, then watch to the end.
    ok_json(&server.client(&["train", "resume", &job.to_string(), "-o", "json"]));
    let watched = server.client(&["train", "watch", &job.to_string()]);
    assert!(
        watched.status.success(),
        "{}\n{}",
        stdout(&watched),
        stderr(&watched)
    );
    let status = ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]));
    assert!(
        task_states(&status).iter().all(|t| t == "completed"),
        "{status}"
    );
    let table = stdout(&server.client(&["train", "status", &job.to_string()]));
    assert!(
        table.contains("completed") && table.contains("behaviour"),
        "{table}"
    );

    // Each task carries its plugin's headline metrics (plugin API 1.5), and
    // the METRICS cell shows them first: the template's validation loss,
    // skill, trading Sharpe and training loss rather than its test loss.
    let template = [
        "valid_loss",
        "valid_skill",
        "valid_trade_sharpe",
        "train_loss",
    ];
    for t in status["progress"]["tasks"].as_array().unwrap() {
        let expected: &[&str] = match t["plugin"].as_str().unwrap() {
            "template" => &template,
            _ => &[], // the behaviour fixture names none
        };
        assert_eq!(t["headline_metrics"], serde_json::json!(expected), "{t}");
    }
    let listed = ok_json(&server.client(&["plugins", "list", "-o", "json"]));
    let listed_template = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "template")
        .unwrap();
    assert_eq!(
        listed_template["headline_metrics"],
        serde_json::json!(template)
    );
    let row = table
        .lines()
        .find(|l| l.contains("template"))
        .unwrap_or_else(|| panic!("no template row:\n{table}"));
    let metrics = &row[row.find("valid_loss=").unwrap_or_else(|| panic!("{table}"))..];
    assert!(
        metrics.contains("valid_skill=")
            && metrics.contains("valid_trade_sharpe=")
            && metrics.contains("train_loss=")
            && !metrics.contains("test_loss="),
        "{table}"
    );
}

#[test]
fn bad_requests_get_the_right_code_and_leave_the_store_unchanged() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let server = Server::start(plugins.path(), state.path(), &[]);
    ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "-a",
        "synthetic:100",
        "--steps",
        "5",
        "-o",
        "json",
    ]));
    let jobs_before = ok_json(&server.client(&["train", "list", "-o", "json"]));

    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "train",
                "start",
                "-p",
                "nope",
                "-a",
                "synthetic:100",
                "--steps",
                "5",
            ],
            "invalid argument: models[0] (nope): no such plugin",
        ),
        (
            &[
                "train",
                "start",
                "-p",
                "template",
                "--config",
                r#"{"learning_rate":-1}"#,
                "-a",
                "synthetic:100",
                "--steps",
                "5",
            ],
            "learning_rate",
        ),
        (
            &[
                "train",
                "start",
                "-p",
                "template",
                "-a",
                "synthetic:100",
                "--steps",
                "0",
            ],
            "invalid argument",
        ),
        (&["train", "list", "--page-size", "100000"], "page_size"),
        (&["train", "list", "--page-token", "garbage!"], "page_token"),
        (&["train", "status", "987654"], "not found"),
    ];
    for (args, expected) in cases {
        let out = server.client(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.to_lowercase().contains(&expected.to_lowercase()),
            "{args:?}: expected {expected:?} in {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one clear line: {err}");
    }
    let huge = server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "-a",
        "synthetic:100",
        "--steps",
        "100000000000",
    ]);
    assert_eq!(huge.status.code(), Some(1));
    let jobs_after = ok_json(&server.client(&["train", "list", "-o", "json"]));
    assert_eq!(
        jobs_before, jobs_after,
        "rejected requests changed the store"
    );
}

#[test]
fn a_python_client_with_reflection_only_lists_services_and_streams_a_watch() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let server = Server::start(plugins.path(), state.path(), &[]);
    let job = job_id(&ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "-a",
        "synthetic:100",
        "--steps",
        "200",
        "-o",
        "json",
    ])));
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/reflection_client.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(&server.address)
        .arg(job.to_string())
        .output()
        .expect("run python");
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}");
    for service in [
        "tli.v1.TrainingService",
        "tli.v1.PluginService",
        "tli.v1.ResourceService",
        "tli.v1.ModelService",
        "grpc.health.v1.Health",
    ] {
        assert!(text.contains(service), "{service} not listed: {text}");
    }
    // ModelService answers a client that knows it only by reflection.
    assert!(text.contains("models: 0"), "{text}");
    assert!(
        text.contains("load nope: NOT_FOUND no model \"nope\""),
        "{text}"
    );
    assert!(
        text.contains("progress") && text.contains("finished"),
        "{text}"
    );
    assert!(
        text.contains("final states: TASK_STATE_COMPLETED"),
        "{text}"
    );
}

#[test]
fn beyond_loopback_needs_a_token_and_a_wrong_token_is_rejected() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let refused = std::process::Command::new(tli_binary())
        .args(["host", "serve", "--listen", "0.0.0.0:0", "--state-dir"])
        .arg(state.path())
        .env("TLI_PLUGIN_DIR", plugins.path())
        .env_remove("TLI_SERVE_TOKEN")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("without a token"),
        "{}",
        stderr(&refused)
    );
    assert!(Store::open_read_only(state.path())
        .map(|s| s.jobs().unwrap().is_empty())
        .unwrap_or(true));

    let token_file = state.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let server = Server::start(
        plugins.path(),
        &state.path().join("s"),
        &["--token-file", token_file.to_str().unwrap()],
    );
    let none = server.client(&["train", "list"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(
        stderr(&none).to_lowercase().contains("unauthenticated"),
        "{}",
        stderr(&none)
    );
    let wrong = server.client(&["train", "list", "--token", "s3cret-tokex"]);
    assert!(
        stderr(&wrong).to_lowercase().contains("unauthenticated"),
        "{}",
        stderr(&wrong)
    );
    let right = server.client_with_env(
        &["train", "list", "-o", "json"],
        &[("TLI_TOKEN", "s3cret-token")],
    );
    assert!(right.status.success(), "{}", stderr(&right));

    // Rotation: the file rewritten with a new token puts it in force within
    // seconds (the status page's data shares the same check), and the old
    // one stops working; no restart. (The host used to keep the old token until
    // it restarted.)
    std::fs::write(&token_file, "n3w-token\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let new = server.client(&["train", "list", "--token", "n3w-token"]);
        if new.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "the new token: {}", stderr(&new));
        std::thread::sleep(Duration::from_millis(200));
    }
    let old = server.client(&["train", "list", "--token", "s3cret-token"]);
    assert!(
        stderr(&old).to_lowercase().contains("unauthenticated"),
        "{}",
        stderr(&old)
    );
    // An empty file (a rotation half done) keeps the new token in force.
    std::fs::write(&token_file, "").unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let still = server.client(&["train", "list", "--token", "n3w-token"]);
    assert!(still.status.success(), "{}", stderr(&still));
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("changed: the new token is in force"), "{log}");
    assert!(log.contains("the file is empty"), "{log}");
    assert!(
        !log.contains("n3w-token") && !log.contains("s3cret"),
        "{log}"
    );
}

#[test]
fn sigterm_ends_watch_streams_checkpoints_and_exits_promptly() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let mut server = Server::start(plugins.path(), state.path(), &[]);
    let job = start_behaviour(&server, "100000");
    wait_for(&server, job, "running", |s| {
        task_states(s).iter().any(|t| t == "running")
    });
    let mut watch = std::process::Command::new(tli_binary())
        .args([
            "train",
            "watch",
            &job.to_string(),
            "--endpoint",
            &server.endpoint(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let took = server.terminate();
    assert!(took < Duration::from_secs(20), "shutdown took {took:?}");
    let _ = watch.wait();
    let store = Store::open_read_only(state.path()).unwrap();
    let task = &store.tasks_of(job as i64).unwrap()[0];
    assert_eq!(
        task.state.as_str(),
        "interrupted",
        "a running task is checkpointed and left to resume"
    );
    assert!(!store.checkpoints(task.id).unwrap().is_empty());
}

#[test]
fn concurrent_watchers_each_get_every_state_change_and_the_plugin_log_lines() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let server = Server::start(plugins.path(), state.path(), &[]);
    let job = job_id(&ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "--config",
        // ~4 s per task: log lines keep coming while the watchers join.
        r#"{"sleep_ms_per_step":10,"log_every":20}"#,
        "-a",
        "synthetic:200:1",
        "-a",
        "synthetic:200:2",
        "--steps",
        "400",
        "-o",
        "json",
    ])));
    let job_arg = job.to_string();
    // Four watchers at once, at different intervals: one feed serves them all.
    let watchers: Vec<_> = ["100", "100", "250", "500"]
        .into_iter()
        .map(|interval| {
            let server = &server;
            let job_arg = job_arg.clone();
            let args = vec![
                "train".to_string(),
                "watch".into(),
                job_arg,
                "--interval-ms".into(),
                interval.into(),
                "-o".into(),
                "json".into(),
            ];
            let endpoint = server.endpoint();
            std::thread::spawn(move || {
                let out = std::process::Command::new(tli_binary())
                    .args(&args)
                    .args(["--endpoint", &endpoint])
                    .env("NO_COLOR", "1")
                    .output()
                    .expect("run tli train watch");
                assert!(out.status.success(), "{}", stderr(&out));
                stdout(&out)
            })
        })
        .collect();
    let outputs: Vec<String> = watchers.into_iter().map(|w| w.join().unwrap()).collect();

    let mut first_changes: Option<Vec<String>> = None;
    for output in &outputs {
        let events: Vec<serde_json::Value> = output
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let kinds = |kind: &'static str| events.iter().filter(move |e| e["event"] == kind);
        // Every state change once, in order: queued → running → completed per task.
        let changes: Vec<String> = kinds("state_changed")
            .map(|e| format!("{}:{}→{}", e["task_id"], e["from"], e["to"]))
            .collect();
        assert_eq!(
            changes
                .iter()
                .filter(|c| c.ends_with("→\"completed\""))
                .count(),
            2,
            "{changes:?}"
        );
        let mut unique = changes.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            changes.len(),
            "a state change repeated: {changes:?}"
        );
        match &first_changes {
            None => first_changes = Some(changes),
            Some(first) => assert_eq!(first, &changes, "watchers disagree"),
        }
        // The plugin's log lines, tagged with their task and plugin.
        let logs: Vec<&serde_json::Value> = kinds("log").collect();
        assert!(
            logs.iter().any(|l| l["message"]
                .as_str()
                .unwrap()
                .starts_with("behaviour reached step")
                && l["plugin"] == "behaviour"
                && l["task_id"].as_u64().unwrap() > 0),
            "no plugin log line in {output}"
        );
        assert!(kinds("progress").count() >= 1, "{output}");
        let last = events.last().unwrap();
        assert_eq!(last["event"], "finished", "{output}");
    }
}

/// A plugin's config is checked against the JSON Schema in the plugin's own
/// manifest before the plugin is asked, and the refusal names the key. The
/// `behaviour` fixture stands for a plugin written outside this repository:
/// its schema caps `log_every` at 1,000,000 while its parser takes any
/// number, so a refusal of 10^9 can only come from the host's schema check.
#[test]
fn a_plugins_config_is_checked_against_its_own_schema_naming_the_key() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let server = Server::start(plugins.path(), state.path(), &[]);
    let start = |config: &str| {
        server.client(&[
            "train",
            "start",
            "-p",
            "behaviour",
            "--config",
            config,
            "-a",
            "synthetic:100",
            "--steps",
            "3",
        ])
    };
    let cases = [
        (
            r#"{"log_every": 1000000000}"#,
            "config key `log_every`: 1000000000 is more than the maximum 1000000",
        ),
        (
            r#"{"sleep_ms_per_step": "fast"}"#,
            "config key `sleep_ms_per_step`: expected integer, got a string",
        ),
        (
            r#"{"sleep_ms_per_stp": 1}"#,
            "config key `sleep_ms_per_stp`: is not a key",
        ),
        (
            r#"{"panic_in_step_at": -1}"#,
            "config key `panic_in_step_at`: -1 is less than",
        ),
    ];
    for (config, expected) in cases {
        let out = start(config);
        assert_eq!(out.status.code(), Some(1), "{config}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(
            err.contains("invalid argument: models[0] (behaviour): "),
            "{err}"
        );
        assert!(
            err.contains(expected),
            "{config}: expected {expected:?} in {err}"
        );
        assert!(err.contains("(the plugin's config schema)"), "{err}");
    }
    let jobs = ok_json(&server.client(&["train", "list", "-o", "json"]));
    assert_eq!(jobs["jobs"].as_array().map(Vec::len), Some(0), "{jobs}");
    // What the schema allows trains.
    let ok = ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "--config",
        r#"{"log_every": 1000000}"#,
        "-a",
        "synthetic:100",
        "--steps",
        "3",
        "-o",
        "json",
    ]));
    let watched = server.client(&["train", "watch", &job_id(&ok).to_string()]);
    assert!(watched.status.success(), "{}", stderr(&watched));
}

/// A frozen host (SIGSTOP: it accepts connections in the kernel, never
/// answers) no longer hangs the CLI: a call ends after `--timeout` saying
/// what got no answer; the same host answers again once it runs.
#[test]
fn a_frozen_host_fails_each_call_after_its_deadline_naming_it() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let mut server = Server::start(plugins.path(), state.path(), &[]);
    let pid = server.child.id() as i32;
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    let mut list = std::process::Command::new(tli_binary());
    list.args([
        "train",
        "list",
        "--timeout",
        "2",
        "--endpoint",
        &server.endpoint(),
    ]);
    let out = output_within(list, Duration::from_secs(30));
    signal("-CONT");
    let out = out.expect("train list hung on a frozen host");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("within 2 s"), "{err}");
    assert!(
        err.contains("TrainingService/ListTrainingJobs")
            || err.contains("cannot reach the tli host"),
        "{err}"
    );
    let listed = server.client(&["train", "list", "--timeout", "10"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    server.terminate();
}

/// A host serving TLS with an expired certificate warns at start, naming
/// the file and the date. A client that speaks plain text to its port is
/// told, in its own protocol, to use https:// — the CLI with an http://
/// endpoint prints it (it used to print only "unknown: transport error"),
/// and a plain HTTP/1.1 request gets a 400 saying so.
#[test]
fn plain_text_to_the_tls_port_is_told_to_use_https_and_an_expired_certificate_is_named() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::tempdir().unwrap();
    let (cert, key, request) = (
        state.path().join("c.pem"),
        state.path().join("k.pem"),
        state.path().join("r.csr"),
    );
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("run openssl (Debian package openssl)");
        assert!(out.status.success(), "{}", stderr(&out));
    };
    let path = |p: &Path| p.to_str().unwrap().to_string();
    openssl(&["genrsa", "-out", &path(&key), "2048"]);
    openssl(&[
        "req",
        "-new",
        "-key",
        &path(&key),
        "-subj",
        "/CN=localhost",
        "-out",
        &path(&request),
    ]);
    // Valid from now until a day ago: expired (extensions make it X.509 v3).
    let extensions = state.path().join("v3.ext");
    std::fs::write(
        &extensions,
        "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        &path(&request),
        "-signkey",
        &path(&key),
        "-days",
        "-1",
        "-extfile",
        &path(&extensions),
        "-out",
        &path(&cert),
    ]);
    let server = Server::start_with(
        plugins.path(),
        state.path(),
        "127.0.0.1:0",
        &["--tls-cert", &path(&cert), "--tls-key", &path(&key)],
        &[("TLI_SERVE_TOKEN", "tls-token")],
    );
    let log = server.log.lock().unwrap().clone();
    assert!(
        log.contains(&format!(
            "warning: --tls-cert {}: the certificate expired at ",
            path(&cert)
        )),
        "{log}"
    );

    let out = server.client(&["train", "list", "--token", "tls-token", "--timeout", "20"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("this port speaks TLS: connect with https://"),
        "{}",
        stderr(&out)
    );
    use std::io::{Read, Write};
    let mut plain = std::net::TcpStream::connect(&server.address).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: tli\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    let _ = plain.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 400 Bad Request"), "{reply}");
    assert!(reply.contains("this port speaks TLS"), "{reply}");
}

/// `tli train watch` follows a job across its host's death: the host is
/// killed (SIGKILL) mid-watch and started again on the same address; the
/// watch says it lost the host, reconnects, and ends when the job (resumed
/// by the new host) completes. It used to exit at once with "h2 protocol
/// error".
#[test]
fn watch_follows_a_job_across_a_host_killed_and_started_again() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let mut server = Server::start(plugins.path(), state.path(), &[]);
    let job = start_behaviour(&server, "600");
    wait_for(&server, job, "running", |s| {
        s["progress"]["tasks"][0]["state"] == "running"
    });
    let mut watch = std::process::Command::new(tli_binary())
        .args([
            "train",
            "watch",
            &job.to_string(),
            "--endpoint",
            &server.endpoint(),
        ])
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let address = server.address.clone();
    server.kill9();
    std::thread::sleep(Duration::from_secs(2));
    let _again = Server::start_with(plugins.path(), state.path(), &address, &[], &[]);
    let exited = exit_within(&mut watch, Duration::from_secs(120));
    let out = watch.wait_with_output().unwrap();
    assert!(exited.is_some(), "the watch did not end: {}", stderr(&out));
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("lost the host ("), "{said}");
    assert!(
        said.contains("reconnected to the host; following job"),
        "{said}"
    );
    assert!(said.contains("completed"), "{said}");
}
