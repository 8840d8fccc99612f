//! A data file that changes under a job: the host records each file a job
//! reads (where its path led, size, time, SHA-256) at submission, refuses
//! to start a task on a file that changed since (the task fails, saying
//! which file and how, and how to go on), and trains on the new bytes only
//! when the user accepts them, which the task's history records. Datasets
//! kept in memory are keyed by each file's version: a rewritten file is
//! read again, never served as it was.

use std::path::Path;
use std::time::{Duration, Instant};
use tli_e2e_tests::*;

fn sample() -> std::path::PathBuf {
    slurm::repo_root().join("data/samples/es_proxy_sp500_1d.csv")
}

/// `bars` rewritten with the sample's rows from `from` on (valid bars, other bytes).
fn rewrite_later_rows(bars: &Path, from: usize) {
    let text = std::fs::read_to_string(sample()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut kept = vec![lines[0]];
    kept.extend(&lines[from..]);
    std::fs::write(bars, kept.join("\n") + "\n").unwrap();
}

fn wait_for_state(server: &Server, job: &str, wanted: &str, limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        let status = ok_json(&server.client(&["train", "status", job, "-o", "json"]));
        let task = status["progress"]["tasks"][0].clone();
        if task["state"] == wanted {
            return task;
        }
        assert!(Instant::now() < deadline, "not {wanted}: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A job stopped with its host; its bar file is rewritten (valid bars,
/// other rows). At the next start the task fails, naming the file, what
/// changed and how to go on; a plain resume fails the same way; a resume
/// that accepts the change trains to the end and its history says so. A
/// file only touched (same bytes) is the same input. The host used to
/// resume silently on the new bytes.
#[test]
fn a_bar_file_rewritten_under_a_stopped_job_is_refused_until_accepted() {
    let plugins = template_and_behaviour();
    let (state, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let bars = data.path().join("bars.csv");
    std::fs::copy(sample(), &bars).unwrap();
    let root = format!("--data-root={}", data.path().display());
    let mut server = Server::start(plugins.path(), state.path(), &[&root]);
    let job = start_slow_behaviour_job(&server, &bars).to_string();
    wait_for_state(&server, &job, "running", Duration::from_secs(60));
    server.terminate();
    // Touched only: the same bytes are the same input.
    let file = std::fs::File::options().append(true).open(&bars).unwrap();
    file.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    drop(file);
    let mut server = Server::start(plugins.path(), state.path(), &[&root]);
    wait_for_state(&server, &job, "running", Duration::from_secs(60));
    server.terminate();

    rewrite_later_rows(&bars, 100);
    let server = Server::start(plugins.path(), state.path(), &[&root]);
    let failed = wait_for_state(&server, &job, "failed", Duration::from_secs(60));
    let error = failed["error"].as_str().unwrap_or_default().to_string();
    for needed in [
        "changed since the job was submitted",
        bars.to_str().unwrap(),
        "size ",
        "sha256 ",
        "--accept-changed-inputs",
    ] {
        assert!(error.contains(needed), "{needed:?} missing: {error}");
    }
    let again = server.client(&["train", "resume", &job]);
    assert!(again.status.success(), "{}", stderr(&again));
    wait_for_state(&server, &job, "failed", Duration::from_secs(60));

    let accepted = server.client(&["train", "resume", &job, "--accept-changed-inputs"]);
    assert!(accepted.status.success(), "{}", stderr(&accepted));
    wait_for_state(&server, &job, "completed", Duration::from_secs(120));
    let history = first_task_reasons(state.path(), job.parse().unwrap());
    assert!(
        history
            .iter()
            .any(|r| r.starts_with("resumed, accepting changed inputs: ")
                && r.contains("bars.csv (size ")),
        "{history:#?}"
    );
}

/// A file a finished job read is rewritten with bars that are not valid: a
/// new job naming it is refused, not built from the dataset the host still
/// holds for the old bytes (as it used to be).
#[test]
fn a_rewritten_file_is_read_again_not_served_from_memory() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let (state, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let bars = data.path().join("bars.csv");
    std::fs::copy(sample(), &bars).unwrap();
    let root = format!("--data-root={}", data.path().display());
    let server = Server::start(plugins.path(), state.path(), &[&root]);
    let start = || {
        server.client(&[
            "train",
            "start",
            "-p",
            "template",
            "-a",
            bars.to_str().unwrap(),
            "--steps",
            "5",
            "-o",
            "json",
        ])
    };
    let first = start();
    assert!(first.status.success(), "{}", stderr(&first));
    std::fs::write(&bars, "ts_event,open\nnot-a-time,1\n").unwrap();
    let second = start();
    assert!(
        !second.status.success(),
        "a rewritten, invalid file was accepted"
    );
    assert!(stderr(&second).contains("not-a-time") || stderr(&second).contains("bars.csv"));
}
