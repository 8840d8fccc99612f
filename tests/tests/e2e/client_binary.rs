//! `tli-client`, the command line built without libtorch: its dynamic
//! section names no libtorch, and every client command works against a real
//! `tli host serve` from a copy of the binary in a directory with no `.venv`
//! (as on a laptop that only watches a GPU box's jobs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tli_e2e_tests::*;

fn dynamic_section(binary: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(binary)
        .output()
        .expect("run readelf (binutils)");
    assert!(
        out.status.success(),
        "readelf -d {}: {}",
        binary.display(),
        stderr(&out)
    );
    stdout(&out)
}

/// The client in `dir` against `endpoint`, with nothing of the build's environment.
struct Client {
    binary: PathBuf,
    dir: PathBuf,
    endpoint: String,
}

impl Client {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.binary)
            .args(args)
            .args(["--endpoint", &self.endpoint])
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("NO_COLOR", "1")
            .output()
            .expect("run tli-client")
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut with_json = args.to_vec();
        with_json.extend(["-o", "json"]);
        ok_json(&self.run(&with_json))
    }
}

fn job_of(value: &serde_json::Value) -> String {
    value["job_id"].as_u64().expect("job_id").to_string()
}

fn states(status: &serde_json::Value) -> Vec<String> {
    status["progress"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["state"].as_str().expect("state").to_string())
        .collect()
}

#[test]
fn the_client_binary_has_no_libtorch_and_drives_a_host() {
    let built = tli_testkit::artifact("tli-client");
    let client_elf = dynamic_section(&built);
    assert!(client_elf.contains("(NEEDED)"), "{client_elf}");
    for lib in ["torch", "c10"] {
        assert!(
            !client_elf.contains(lib),
            "tli-client's dynamic section names {lib}:\n{client_elf}"
        );
    }
    // The same check on the full binary finds libtorch (the check can fail).
    assert!(dynamic_section(&tli_binary()).contains("libtorch"));

    // A copy far from the build tree: no .venv, no libtorch, no rpath to one.
    let bare = tempfile::tempdir().unwrap();
    let binary = bare.path().join("tli-client");
    std::fs::copy(&built, &binary).unwrap();
    assert!(!bare.path().join(".venv").exists());

    let (plugins, state_root) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let state = state_root.path().join("state");
    let server = Server::start(plugins.path(), &state, &["--strategy", "parallel:2"]);
    let client = Client {
        binary,
        dir: bare.path().to_path_buf(),
        endpoint: server.endpoint(),
    };

    let version = client.run(&["--version"]);
    assert!(version.status.success(), "{}", stderr(&version));
    assert!(
        stdout(&version).starts_with("tli-client "),
        "{}",
        stdout(&version)
    );

    let listed = client.json(&["plugins", "list"]);
    let names: Vec<&str> = listed["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"template") && names.contains(&"behaviour"),
        "{listed}"
    );
    client.json(&["plugins", "rescan"]);
    let resources = client.json(&["resources"]);
    assert!(resources["devices"].is_array(), "{resources}");

    // A job from start to completion, watched, then listed, plotted and charted from the store.
    let started = client.json(&small_template_job_args("from-a-laptop", "60"));
    let job = job_of(&started);
    let watched = client.run(&["train", "watch", &job]);
    assert!(watched.status.success(), "{}", stderr(&watched));
    let status = client.json(&["train", "status", &job]);
    assert_eq!(states(&status), ["completed", "completed"], "{status}");
    let jobs = client.json(&["train", "list"]);
    assert!(
        jobs["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .any(|j| j["job_id"] == started["job_id"]),
        "{jobs}"
    );
    let through_host = client.json(&["train", "plot", &job, "--out", "through-host"]);
    assert!(
        !through_host["files"].as_array().expect("files").is_empty(),
        "{through_host}"
    );
    assert!(bare.path().join("through-host").is_dir());
    let state_arg = state.to_str().unwrap();
    let from_store = client.json(&[
        "plot",
        "--state-dir",
        state_arg,
        "--job",
        &job,
        "--out",
        "from-store",
    ]);
    assert_eq!(
        from_store["files"].as_array().map(Vec::len),
        through_host["files"].as_array().map(Vec::len)
    );

    // Stop and resume a long job.
    let long = job_of(&client.json(&[
        "train",
        "start",
        "--name",
        "long",
        "-p",
        "behaviour",
        "--config",
        r#"{"sleep_ms_per_step":5}"#,
        "-a",
        "synthetic:300:1",
        "--steps",
        "1000000",
    ]));
    let stopped = client.json(&["train", "stop", &long]);
    assert!(stopped.is_object(), "{stopped}");
    wait_for_state(&client, &long, "cancelled");
    client.json(&["train", "resume", &long]);
    client.json(&["train", "stop", &long]);
    wait_for_state(&client, &long, "cancelled");

    // Offline commands that need no host and no libtorch.
    let completions = client.run(&["completions", "bash"]);
    assert!(
        stdout(&completions).contains("tli-client"),
        "{}",
        stderr(&completions)
    );
    let contracts = client.json(&["data", "contracts"]);
    assert!(contracts.to_string().contains("ES"), "{contracts}");

    // What only the full binary can do is refused with what to run instead.
    let refused = client.run(&["host", "serve", "--state-dir", "x"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("the full `tli`"),
        "{}",
        stderr(&refused)
    );
}

/// Waits (up to a minute) until every task of `job` is in `state`.
fn wait_for_state(client: &Client, job: &str, state: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = client.json(&["train", "status", job]);
        if states(&status).iter().all(|s| s == state) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {job} never became {state}: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
