//! Plugins dropped into a running host: rescans, versions side by side, restarts after an upgrade.
//!
//! Real `tli host serve` processes, real plugin files copied into their
//! plugin directories while they run, and the real `tli` client.

use std::path::Path;
use std::time::{Duration, Instant};
use tli_e2e_tests::{
    ok_json, stdout, PluginDir, Server, BEHAVIOUR, DQN, NOT_A_PLUGIN, TEMPLATE, TEMPLATE_NEXT,
};
use tli_host::orchestrator::store::Store;

/// `tli train status JOB -o json`'s tasks.
fn tasks(server: &Server, job: u64) -> Vec<serde_json::Value> {
    let status = ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]));
    status["progress"]["tasks"]
        .as_array()
        .expect("tasks array")
        .clone()
}

fn job_id(started: &serde_json::Value) -> u64 {
    started["job_id"].as_u64().expect("job_id")
}

/// Waits (up to `limit`) until `done` holds for the job's tasks; returns them.
fn wait_for(
    server: &Server,
    job: u64,
    limit: Duration,
    what: &str,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + limit;
    loop {
        let now = tasks(server, job);
        if done(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "job {job}: {what} not seen: {now:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn all_in(tasks: &[serde_json::Value], state: &str) -> bool {
    tasks.iter().all(|t| t["state"] == state)
}

fn finished(server: &Server, job: u64) -> Vec<serde_json::Value> {
    wait_for(server, job, Duration::from_secs(240), "the end", |t| {
        t.iter().all(|t| {
            ["completed", "failed", "cancelled"].contains(&t["state"].as_str().unwrap_or(""))
        })
    })
}

/// `tli plugins list -o json` of the host.
fn listing(server: &Server) -> serde_json::Value {
    ok_json(&server.client(&["plugins", "list", "-o", "json"]))
}

/// The loaded (name, version) pairs of a listing.
fn versions(listing: &serde_json::Value) -> Vec<(String, String)> {
    listing["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_string(),
                p["version"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn sha256_hex(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("run sha256sum");
    stdout(&out)
        .split_whitespace()
        .next()
        .expect("sha256sum output")
        .to_string()
}

/// How many lines of the server's log mention `needle`.
fn log_lines_with(server: &Server, needle: &str) -> usize {
    let log = server.log.lock().map(|l| l.clone()).unwrap_or_default();
    log.lines().filter(|l| l.contains(needle)).count()
}

#[test]
fn a_plugin_copied_into_a_running_hosts_directory_is_usable_after_a_rescan() {
    let (plugins, state) = (
        PluginDir::with(&[(TEMPLATE, "template")]),
        tempfile::tempdir().unwrap(),
    );
    let server = Server::start(plugins.path(), state.path(), &[]);
    let long = job_id(&server.start_small_template_job("long", 6000));

    let before = server.client(&["train", "start", "-p", "behaviour", "-a", "synthetic:200"]);
    assert!(!before.status.success(), "behaviour is not installed yet");

    plugins.add(BEHAVIOUR, "behaviour");
    let rescan = server.client(&["plugins", "rescan"]);
    let text = stdout(&rescan);
    assert!(rescan.status.success(), "{text}");
    assert!(text.contains("loaded behaviour@0.1.0 from"), "{text}");
    assert!(text.contains("1 loaded, 0 refused, 1 unchanged"), "{text}");
    // Nothing new: a second rescan changes nothing.
    let again = stdout(&server.client(&["plugins", "rescan"]));
    assert!(
        again.contains("0 loaded, 0 refused, 2 unchanged"),
        "{again}"
    );

    let new = job_id(&ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "-a",
        "synthetic:200",
        "--steps",
        "50",
        "-o",
        "json",
    ])));
    let done = finished(&server, new);
    assert!(all_in(&done, "completed"), "{done:#?}");
    assert_eq!(done[0]["plugin_version"], "0.1.0");

    // The long job ran through the rescan undisturbed.
    let long_tasks = finished(&server, long);
    assert!(all_in(&long_tasks, "completed"), "{long_tasks:#?}");

    // Loaded from the host's private copy, with the file's checksum and its task count.
    let list = listing(&server);
    let behaviour = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "behaviour")
        .expect("behaviour listed")
        .clone();
    let copy = behaviour["loaded_from"].as_str().unwrap();
    assert!(
        Path::new(copy).starts_with(state.path().join("plugin-libs")),
        "{behaviour:#}"
    );
    assert_eq!(
        behaviour["checksum"],
        sha256_hex(&plugins.path().join("libtli_plugin_behaviour.so"))
    );
    assert_eq!(behaviour["tasks"], 1);
    assert_eq!(behaviour["active_tasks"], 0);
}

#[test]
fn a_new_template_version_serves_new_tasks_while_the_old_versions_tasks_finish_on_it() {
    let (plugins, state) = (
        PluginDir::with(&[(TEMPLATE, "template")]),
        tempfile::tempdir().unwrap(),
    );
    let server = Server::start(plugins.path(), state.path(), &["--watch-plugins", "0.2"]);
    let old = job_id(&server.start_small_template_job("old", 8000));
    wait_for(
        &server,
        old,
        Duration::from_secs(60),
        "old tasks running",
        |t| all_in(t, "running"),
    );

    // Dropped in while the old version's tasks run; the watch loads it.
    plugins.add(TEMPLATE_NEXT, "template_next");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !versions(&listing(&server)).contains(&("template".into(), "0.2.0".into())) {
        assert!(
            Instant::now() < deadline,
            "template 0.2.0 never loaded: {:#}",
            listing(&server)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let still = tasks(&server, old);
    assert!(
        still.iter().any(|t| t["state"] == "running"),
        "the old job should still be running when 0.2.0 arrives: {still:#?}"
    );
    let list = listing(&server);
    let old_entry = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "template" && p["version"] == "0.1.0")
        .expect("0.1.0 still loaded")
        .clone();
    assert_eq!(old_entry["active_tasks"], 2, "{old_entry:#}");

    // A plain name takes the newest version; a pinned one takes its own.
    let new = job_id(&server.start_small_template_job("new", 300));
    let pinned = job_id(&ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "template@0.1.0",
        "-a",
        "synthetic:300:1",
        "--steps",
        "300",
        "-o",
        "json",
    ])));

    let template_sum = sha256_hex(&plugins.path().join("libtli_plugin_template.so"));
    let next_sum = sha256_hex(&plugins.path().join("libtli_plugin_template_next.so"));
    for (job, version, sum) in [
        (old, "0.1.0", &template_sum),
        (new, "0.2.0", &next_sum),
        (pinned, "0.1.0", &template_sum),
    ] {
        let done = finished(&server, job);
        assert!(all_in(&done, "completed"), "{done:#?}");
        for t in &done {
            assert_eq!(t["plugin_version"], version, "job {job}: {t:#}");
            assert_eq!(&t["plugin_checksum"], sum, "job {job}: {t:#}");
        }
    }
    // The status table names the library of each version (its column shows
    // a version only when a job mixes two of one plugin).
    let table = stdout(&server.client(&["train", "status", &new.to_string()]));
    assert!(table.contains("template@0.2.0"), "{table}");
    assert!(
        table.contains(&format!(
            "plugin libraries: template@0.2.0 (sha256 {})",
            &next_sum[..12]
        )),
        "{table}"
    );

    // And so does the store itself.
    let store = Store::open_read_only(state.path()).expect("store");
    let ran: Vec<(u64, Option<String>)> = [old, new, pinned]
        .iter()
        .flat_map(|job| store.tasks_of(*job as i64).expect("tasks"))
        .map(|t| (t.job_id as u64, t.plugin_version))
        .collect();
    assert_eq!(
        ran,
        vec![
            (old, Some("0.1.0".into())),
            (old, Some("0.1.0".into())),
            (new, Some("0.2.0".into())),
            (new, Some("0.2.0".into())),
            (pinned, Some("0.1.0".into())),
        ]
    );
}

#[test]
fn a_truncated_or_foreign_file_dropped_into_a_watched_directory_is_refused_with_one_line() {
    let plugins = PluginDir::with(&[(BEHAVIOUR, "behaviour")]);
    let state = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), state.path(), &["--watch-plugins", "0.2"]);
    let job = job_id(&ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "--config",
        r#"{"sleep_ms_per_step":5}"#,
        "-a",
        "synthetic:200",
        "--steps",
        "600",
        "-o",
        "json",
    ])));

    plugins.add_truncated(DQN, "half", 100_000);
    plugins.add(NOT_A_PLUGIN, "foreign");
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        let list = listing(&server);
        let refused: Vec<String> = list["refused"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| format!("{}: {}", r["path"], r["reason"]))
            .collect();
        if refused.len() == 2 {
            break refused;
        }
        assert!(Instant::now() < deadline, "not both refused: {list:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        refused
            .iter()
            .any(|r| r.contains("libtli_plugin_half.so") && r.contains("truncated")),
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .any(|r| r.contains("libtli_plugin_foreign.so") && r.contains("not a tli plugin")),
        "{refused:?}"
    );
    // Several polls later, still one line each in the host's log.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        log_lines_with(&server, "libtli_plugin_half.so"),
        1,
        "{}",
        server.log.lock().unwrap()
    );
    assert_eq!(log_lines_with(&server, "libtli_plugin_foreign.so"), 1);

    // The host and its job are unaffected; nothing else was loaded.
    let done = finished(&server, job);
    assert!(all_in(&done, "completed"), "{done:#?}");
    assert_eq!(
        versions(&listing(&server)),
        vec![("behaviour".into(), "0.1.0".into())]
    );
}

/// A behaviour 1.0.0 task is checkpointed and interrupted by a host
/// shutdown; the library is replaced by `next` and the host restarted.
/// Returns the task as the restarted host ends it, and its transitions.
fn upgrade_under_an_interrupted_task(next: &str) -> (serde_json::Value, Vec<String>) {
    let (plugins, state) = (PluginDir::new(), tempfile::tempdir().unwrap());
    plugins.add_behaviour_version("behaviour", "1.0.0");
    let spec = state.path().join("job.json");
    std::fs::write(
        &spec,
        r#"{"name":"upgrade","models":[{"plugin":"behaviour","steps":400,"config":{"sleep_ms_per_step":10}}],
            "assets":[{"synthetic":{"rows":200}}],"checkpoint":{"every_steps":20},"slice_steps":10}"#,
    )
    .unwrap();
    let mut server = Server::start(plugins.path(), state.path(), &[]);
    let job = job_id(&ok_json(&server.client(&[
        "train",
        "start",
        "--spec",
        spec.to_str().unwrap(),
        "-o",
        "json",
    ])));
    wait_for(&server, job, Duration::from_secs(60), "60 steps", |t| {
        t[0]["steps_done"].as_u64().unwrap_or(0) >= 60
    });
    server.terminate();
    drop(server);

    plugins.add_behaviour_version("behaviour", next);
    let server = Server::start(plugins.path(), state.path(), &[]);
    let task = finished(&server, job).remove(0);
    let store = Store::open_read_only(state.path()).expect("store");
    let id = task["task_id"].as_u64().unwrap() as i64;
    let reasons = store
        .transitions(id)
        .expect("transitions")
        .into_iter()
        .map(|t| t.reason)
        .collect();
    (task, reasons)
}

#[test]
fn after_an_upgrade_a_task_resumes_on_the_new_version_when_it_accepts_the_checkpoint() {
    let (task, reasons) = upgrade_under_an_interrupted_task("1.1.0");
    assert_eq!(task["state"], "completed", "{task:#} {reasons:#?}");
    assert_eq!(task["steps_done"], 400);
    assert_eq!(task["plugin_version"], "1.1.0");
    assert_eq!(
        task["plugin_checksum"],
        sha256_digest(&tli_testkit::behaviour_with_version("1.1.0"))
    );
    let resumed = reasons
        .iter()
        .find(|r| r.starts_with("resumed from checkpoint step"))
        .unwrap_or_else(|| panic!("no resume: {reasons:#?}"));
    assert!(
        resumed.contains(
            "on behaviour@1.1.0 (submitted with behaviour@1.0.0, which is no longer installed)"
        ),
        "{resumed}"
    );
}

#[test]
fn after_an_upgrade_a_task_fails_naming_both_versions_when_the_new_one_refuses_its_checkpoint() {
    let (task, reasons) = upgrade_under_an_interrupted_task("2.0.0");
    assert_eq!(task["state"], "failed", "{task:#} {reasons:#?}");
    let error = task["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("behaviour@1.0.0")
            && error.contains("behaviour@2.0.0")
            && error.contains("refuses the checkpoint"),
        "{error}"
    );
    assert!(error.contains("written by behaviour 1.0.0"), "{error}");
    // It did not silently start over on the new version.
    assert!(
        !reasons
            .iter()
            .any(|r| r.starts_with("started") && r.contains("2.0.0")),
        "{reasons:#?}"
    );
}

fn sha256_digest(bytes: &[u8]) -> String {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    sha256_hex(file.path())
}

#[test]
fn a_loaded_library_rewritten_in_place_is_loaded_anew_with_a_warning() {
    let plugins = PluginDir::new();
    let file = plugins.add_behaviour_version("behaviour", "0.1.0");
    let state = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), state.path(), &[]);
    // `cp` over the file the host mapped at start-up: same inode, new contents.
    std::fs::write(&file, tli_testkit::behaviour_with_version("0.2.0")).unwrap();
    let out = server.client(&["plugins", "rescan", "-o", "json"]);
    let report = ok_json(&out);
    assert_eq!(report["loaded"][0]["version"], "0.2.0", "{report:#}");
    let warning = report["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.contains("libtli_plugin_behaviour.so was rewritten in place")
            && warning.contains("never cp"),
        "{report:#}"
    );
    assert_eq!(
        versions(&listing(&server)),
        vec![
            ("behaviour".into(), "0.1.0".into()),
            ("behaviour".into(), "0.2.0".into())
        ]
    );
}
