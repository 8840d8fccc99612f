//! Malformed and abusive gRPC requests (docs/reliability.md §3):
//! the corpus of `tests/python/hostile_requests.py` (over 100 requests:
//! wrong wire types, cut varints, invalid UTF-8, groups nested 100 000
//! deep, messages over 4 MiB, 100 000 models × 100 000 assets, absurd
//! numbers, unknown enums, bad tokens, control characters and 1 MiB strings,
//! path traversal, deadlines) against a real `tli host serve` with a token.
//! Every request must get its status code; a refused request must leave the
//! store as it was (the few accepted ones are accounted for by job id); the
//! host must still be alive and SERVING, its memory bounded, and every
//! error message short. The long version with random mutations is
//! `scripts/hostile-requests.sh`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::store::Store;

const TOKEN: &str = "hostile-corpus-token";

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// Every job of the store with its tasks, their transitions, checkpoints
/// and latest metrics, as text by job id.
fn store_snapshot(state_dir: &Path) -> BTreeMap<i64, String> {
    let store = Store::open_read_only(state_dir).expect("open the store read-only");
    let mut out = BTreeMap::new();
    for job in store.jobs().unwrap() {
        let mut text = format!("{job:?}\n");
        for task in store.tasks_of(job.id).unwrap() {
            text += &format!(
                "{task:?}\n{:?}\n{:?}\n{:?}\n",
                store.transitions(task.id).unwrap(),
                store.checkpoints(task.id).unwrap(),
                store.latest_metrics(task.id).unwrap()
            );
        }
        out.insert(job.id, text);
    }
    out
}

fn client(server: &Server, args: &[&str]) -> std::process::Output {
    server.client_with_env(args, &[("TLI_TOKEN", TOKEN)])
}

/// Starts a small behaviour job and waits until it has completed.
fn finished_job(server: &Server) -> u64 {
    let started = ok_json(&client(
        server,
        &[
            "train",
            "start",
            "-p",
            "behaviour",
            "-a",
            "synthetic:100",
            "--steps",
            "20",
            "-o",
            "json",
        ],
    ));
    let job = started["job_id"].as_u64().expect("job_id");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = ok_json(&client(
            server,
            &["train", "status", &job.to_string(), "-o", "json"],
        ));
        if status.to_string().contains("\"completed\"") {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} never completed: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn malformed_and_abusive_requests_get_their_codes_and_change_nothing() {
    let (plugins, dir) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let state = dir.path().join("state");
    let mut server = Server::start(
        plugins.path(),
        &state,
        &[
            "--token-file",
            token_file.to_str().unwrap(),
            "--memory-budget",
            "1GiB",
        ],
    );
    let job = finished_job(&server);
    let before = store_snapshot(&state);
    let listed_before = ok_json(&client(&server, &["train", "list", "--all", "-o", "json"]));
    let rss_before = rss_kib(server.child.id());

    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/hostile_requests.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(&server.address)
        .args(["--token", TOKEN, "--job", &job.to_string()])
        .output()
        .expect("run tests/python/hostile_requests.py");
    let summary = json(&out);
    let log = || server.log.lock().map(|l| l.clone()).unwrap_or_default();

    // The host lived through it and still serves.
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the host died during the corpus; it printed:\n{}",
        log()
    );
    assert_eq!(summary["health"], "SERVING", "{}", log());

    // Every case got its code, with a short message that says what was wrong.
    let cases = summary["cases"].as_array().expect("cases");
    assert!(cases.len() >= 50, "only {} cases", cases.len());
    let wrong: Vec<String> = cases
        .iter()
        .filter(|c| c["got"] != c["expected"])
        .map(|c| {
            format!(
                "{}: expected {}, got {} ({})",
                c["name"], c["expected"], c["got"], c["message"]
            )
        })
        .collect();
    assert!(wrong.is_empty(), "wrong codes:\n{}", wrong.join("\n"));
    for c in cases {
        let len = c["message_len"].as_u64().unwrap();
        assert!(len <= 1100, "{}: a message of {len} bytes", c["name"]);
        let explained = [
            "INVALID_ARGUMENT",
            "NOT_FOUND",
            "PERMISSION_DENIED",
            "RESOURCE_EXHAUSTED",
            "UNAUTHENTICATED",
            "FAILED_PRECONDITION",
        ];
        if explained.iter().any(|code| c["got"] == *code) {
            assert!(len > 0, "{}: {} without a message", c["name"], c["got"]);
        }
    }

    // The store: the jobs that were there are unchanged, and the only new
    // ones are those the accepted cases started.
    let started: BTreeSet<i64> = summary["started_jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_i64().expect("a started job id"))
        .collect();
    let accepted_starts = cases.iter().filter(|c| c["started_job"].is_u64()).count();
    assert_eq!(started.len(), accepted_starts, "{started:?}");
    assert_eq!(accepted_starts, 4, "the corpus has four accepted starts");
    let after = store_snapshot(&state);
    for (id, text) in &before {
        assert_eq!(after.get(id), Some(text), "job {id} changed");
    }
    let new: BTreeSet<i64> = after
        .keys()
        .filter(|id| !before.contains_key(id))
        .copied()
        .collect();
    assert_eq!(
        new, started,
        "jobs in the store that no accepted case started"
    );
    let listed_after = ok_json(&client(&server, &["train", "list", "--all", "-o", "json"]));
    let old = |list: &serde_json::Value| {
        list.as_array()
            .or_else(|| list["jobs"].as_array())
            .expect("a job list")
            .iter()
            .filter(|j| j["job_id"].as_u64() == Some(job))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(old(&listed_before), old(&listed_after));
    assert_eq!(old(&listed_after).len(), 1);

    // Memory: nothing the corpus sent was kept (generous: the accepted jobs
    // ran meanwhile).
    let rss_after = rss_kib(server.child.id());
    assert!(
        rss_after < rss_before + 512 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    server.terminate();
}
