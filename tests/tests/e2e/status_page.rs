//! The host's HTTP side on a real `tli host serve`: Prometheus metrics
//! scraped and parsed by Prometheus's own parser (Python `prometheus_client`)
//! and checked against what the API says; the status page's JSON; the token
//! rule; and the page itself in a real headless Chromium driven by Selenium.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tli_e2e_tests::http::{get, HttpResponse};
use tli_e2e_tests::*;

fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(name)
}

/// One sample of a parsed scrape.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: serde_json::Map<String, serde_json::Value>,
    value: f64,
}

struct Scrape {
    families: serde_json::Map<String, serde_json::Value>,
    samples: Vec<Sample>,
}

impl Scrape {
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).and_then(|x| x.as_str()) == Some(*v))
            })
            .map(|s| s.value)
    }

    fn all(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

/// GET /metrics and parse it with Prometheus's Python parser (which rejects
/// malformed exposition).
fn scrape(address: &str, token: Option<&str>) -> Scrape {
    let response = get(address, "/metrics", token).expect("GET /metrics");
    assert_eq!(response.status, 200, "{}", response.body);
    assert!(
        response
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text")),
        "{:?}",
        response.headers
    );
    let mut child = std::process::Command::new(python())
        .arg(script("parse_metrics.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(response.body.as_bytes())
        .expect("write scrape");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "Prometheus's parser refused the scrape: {}\n--- scrape\n{}",
        stderr(&out),
        response.body
    );
    let parsed = json(&out);
    Scrape {
        families: parsed["families"].as_object().cloned().unwrap_or_default(),
        samples: parsed["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .map(|s| Sample {
                name: s[0].as_str().unwrap_or_default().to_string(),
                labels: s[1].as_object().cloned().unwrap_or_default(),
                value: s[2].as_f64().unwrap_or(f64::NAN),
            })
            .collect(),
    }
}

/// Behaviour (10 ms steps) and template tasks on two synthetic assets, `steps` each.
fn start_job(server: &Server, steps: &str) -> (u64, Vec<u64>) {
    let started = ok_json(&server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "-p",
        "template",
        "--config",
        r#"behaviour={"sleep_ms_per_step":10}"#,
        "-a",
        "synthetic:400:1",
        "-a",
        "synthetic:400:2",
        "--steps",
        steps,
        "-o",
        "json",
    ]));
    let job = started["job_id"].as_u64().expect("job_id");
    let tasks = started["progress"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["task_id"].as_u64().expect("task_id"))
        .collect();
    (job, tasks)
}

fn status(server: &Server, job: u64) -> serde_json::Value {
    ok_json(&server.client(&["train", "status", &job.to_string(), "-o", "json"]))
}

fn wait_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metrics_are_valid_prometheus_text_and_agree_with_the_api() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let server = Server::start(plugins.path(), state.path(), &[]);
    let page = server.status_page();
    // The page's port given as the API's: one line that says so, not a protocol error.
    let wrong = std::process::Command::new(tli_binary())
        .args(["resources", "--endpoint", &format!("http://{page}")])
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run tli");
    assert!(!wrong.status.success());
    let err = stderr(&wrong);
    assert!(
        err.contains("is not a tli host's API")
            && err.contains("status page's port")
            && err.contains("404")
            && !err.contains("compression flag"),
        "{err}"
    );
    let (job, tasks) = start_job(&server, "400");
    assert_eq!(tasks.len(), 4);

    // While it runs: per-task series for the running tasks, with their labels.
    let running = wait_until("a scrape with running tasks", || {
        let s = scrape(&page, None);
        (s.value("tli_running_tasks", &[]).unwrap_or(0.0) >= 1.0
            && !s.all("tli_task_steps_per_second").is_empty())
        .then_some(s)
    });
    for sample in running.all("tli_task_steps_per_second") {
        assert_eq!(
            sample.labels.get("job").and_then(|v| v.as_str()),
            Some(job.to_string().as_str())
        );
        let task: u64 = sample.labels["task"].as_str().unwrap().parse().unwrap();
        assert!(tasks.contains(&task), "{sample:?}");
        assert!(sample.value >= 0.0);
    }
    let has_family = |scrape: &Scrape, family: &str, kind: &str| {
        assert_eq!(
            scrape.families.get(family).and_then(|k| k.as_str()),
            Some(kind),
            "{family}: {:?}",
            scrape.families
        );
    };
    has_family(&running, "tli_task_steps_per_second", "gauge");
    has_family(&running, "tli_task_progress_ratio", "gauge");
    assert_eq!(running.value("tli_jobs", &[("state", "active")]), Some(1.0));

    // Done: the counts match the API's, the per-task series are gone.
    let mut status_calls = 0;
    wait_until("the job to finish", || {
        status_calls += 1;
        let s = status(&server, job);
        s["progress"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["state"] == "completed")
            .then_some(())
    });
    let done = scrape(&page, None);
    for (family, kind) in [
        ("tli_rpc_requests", "counter"),
        ("tli_rpc_duration_seconds", "histogram"),
        ("tli_checkpoint_write_seconds", "histogram"),
        ("tli_jobs", "gauge"),
        ("tli_tasks", "gauge"),
        ("tli_running_tasks", "gauge"),
        ("tli_device_budget_bytes", "gauge"),
        ("tli_device_reserved_bytes", "gauge"),
        ("tli_device_measured_bytes", "gauge"),
        ("tli_scrape_errors", "counter"),
    ] {
        has_family(&done, family, kind);
    }
    assert_eq!(
        done.value("tli_tasks", &[("state", "completed")]),
        Some(4.0)
    );
    assert_eq!(done.value("tli_tasks", &[("state", "running")]), Some(0.0));
    assert_eq!(done.value("tli_jobs", &[("state", "completed")]), Some(1.0));
    assert_eq!(done.value("tli_jobs", &[("state", "active")]), Some(0.0));
    assert_eq!(done.value("tli_running_tasks", &[]), Some(0.0));
    assert!(done.all("tli_task_steps_per_second").is_empty());
    let resources = ok_json(&server.client(&["resources", "-o", "json"]));
    let device = &resources["devices"][0];
    assert_eq!(
        done.value(
            "tli_device_budget_bytes",
            &[("device", device["name"].as_str().unwrap())]
        ),
        device["budget_bytes"].as_f64(),
        "{resources}"
    );
    assert_eq!(
        done.value(
            "tli_rpc_requests_total",
            &[("method", "tli.v1.TrainingService/StartTraining")]
        ),
        Some(1.0)
    );
    let status_count = done
        .value(
            "tli_rpc_requests_total",
            &[("method", "tli.v1.TrainingService/GetTrainingStatus")],
        )
        .unwrap_or(0.0);
    assert!(
        status_count >= f64::from(status_calls),
        "{status_count} < {status_calls}"
    );
    assert_eq!(
        done.value(
            "tli_rpc_duration_seconds_count",
            &[("method", "tli.v1.TrainingService/StartTraining")]
        ),
        Some(1.0)
    );
    // Every task wrote at least its final checkpoint.
    for plugin in ["behaviour", "template"] {
        let n = done
            .value("tli_checkpoint_write_seconds_count", &[("plugin", plugin)])
            .unwrap_or(0.0);
        assert!(n >= 2.0, "{plugin}: {n} checkpoint writes counted");
    }

    // The page's JSON says what the API says.
    let body = get(&page, "/api/status", None).unwrap().json();
    let api = status(&server, job);
    let listed = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job_id"] == job)
        .unwrap_or_else(|| panic!("job {job} not on the page: {body}"));
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 4);
    for (page_task, api_task) in listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .zip(api["progress"]["tasks"].as_array().unwrap())
    {
        assert_eq!(page_task["task_id"], api_task["task_id"]);
        assert_eq!(page_task["state"], api_task["state"]);
        assert_eq!(page_task["steps_done"], api_task["steps_done"]);
    }
    // A template task's loss series ends at its latest reported value.
    let template = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["plugin"] == "template")
        .unwrap();
    assert_eq!(template["loss_metric"], "train_loss");
    let series = get(
        &page,
        &format!("/api/series?task={}&points=50", template["task_id"]),
        None,
    )
    .unwrap()
    .json();
    assert_eq!(series["metric"], "train_loss");
    let steps = series["steps"].as_array().unwrap();
    let values = series["values"].as_array().unwrap();
    assert!(steps.len() >= 2 && steps.len() <= 50, "{series}");
    assert_eq!(steps.len(), values.len());
    assert!(steps.windows(2).all(|w| w[0].as_u64() < w[1].as_u64()));
    assert_eq!(values.last(), Some(&template["metrics"]["train_loss"]));
    let missing = get(&page, "/api/series?task=999999", None).unwrap();
    assert_eq!(missing.status, 404, "{}", missing.body);
    let nowhere = get(&page, "/nowhere", None).unwrap();
    assert_eq!(nowhere.status, 404);
}

#[test]
fn the_token_rule_covers_the_page_data_and_metrics() {
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    // Beyond loopback without a token: refused, naming the way out.
    let out = run_tli(
        plugins.path(),
        &[
            "host",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ui-listen",
            "0.0.0.0:0",
            "--state-dir",
            state.path().to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("without a token") && stderr(&out).contains("--token-file"),
        "{}",
        stderr(&out)
    );

    // With TLS the HTTP side stays on loopback: the token would cross the network in clear.
    let (cert, key) = (state.path().join("c.pem"), state.path().join("k.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl (Debian package openssl)");
    assert!(made.status.success(), "{}", stderr(&made));
    let out = run_tli_with_env(
        plugins.path(),
        &[
            "host",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ui-listen",
            "0.0.0.0:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--state-dir",
            state.path().to_str().unwrap(),
        ],
        &[("TLI_SERVE_TOKEN", "tls-token")],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("plain HTTP") && stderr(&out).contains("--ui-listen"),
        "{}",
        stderr(&out)
    );

    let token = "page-token-123";
    let server = Server::start_with(
        plugins.path(),
        state.path(),
        "127.0.0.1:0",
        &[
            "--ui-listen",
            "0.0.0.0:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        &[("TLI_SERVE_TOKEN", token)],
    );
    let page = server.status_page().replace("0.0.0.0", "127.0.0.1");
    let metrics_only = server.logged_url("Prometheus metrics at http://");
    let check = |address: &str, path: &str, bearer: Option<&str>, expected: u16| {
        let r: HttpResponse = get(address, path, bearer).unwrap();
        assert_eq!(r.status, expected, "{path} with {bearer:?}: {}", r.body);
        assert!(!r.body.contains(token), "{}", r.body);
        r
    };
    // The page's files carry no data: anyone may load them; the data needs the token.
    let html = check(&page, "/", None, 200);
    assert!(html.body.contains("<title>tli host</title>"));
    check(&page, "/app.js", None, 200);
    for path in ["/api/status", "/metrics", "/api/series?task=1"] {
        let r = check(&page, path, None, 401);
        assert!(r.body.contains("Bearer"), "{}", r.body);
        check(&page, path, Some("wrong"), 401);
    }
    check(&page, "/api/status", Some(token), 200);
    assert!(scrape(&page, Some(token)).value("tli_running_tasks", &[]) == Some(0.0));
    // --metrics-listen serves metrics only, under the same rule.
    check(&metrics_only, "/metrics", None, 401);
    check(&metrics_only, "/metrics", Some(token), 200);
    check(&metrics_only, "/", Some(token), 404);
    check(&metrics_only, "/api/status", Some(token), 404);
}

#[test]
fn the_status_page_shows_live_jobs_in_a_real_browser() {
    if std::env::var("TLI_SKIP_BROWSER_TESTS").as_deref() == Ok("1") {
        eprintln!("skipped: TLI_SKIP_BROWSER_TESTS=1");
        return;
    }
    let (plugins, state) = (template_and_behaviour(), tempfile::tempdir().unwrap());
    let server = Server::start(plugins.path(), state.path(), &[]);
    // About 15 s of 10 ms steps: the page sees it run.
    let (job, tasks) = start_job(&server, "1500");
    let screenshot = state.path().join("status-page.png");
    let out = std::process::Command::new(python())
        .arg(script("status_page_browser.py"))
        .args(["--url", &format!("http://{}/", server.status_page())])
        .args(["--tasks", "4", "--timeout", "90"])
        .arg("--screenshot")
        .arg(&screenshot)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "browser check failed:\n{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let seen = json(&out);
    let rows = seen["first"]["rows"].as_array().unwrap();
    let mut shown: Vec<u64> = rows
        .iter()
        .map(|r| r["task_id"].as_u64().unwrap())
        .collect();
    shown.sort();
    let mut expected = tasks.clone();
    expected.sort();
    assert_eq!(shown, expected, "{seen}");
    for row in rows {
        let state = row["state"].as_str().unwrap();
        assert!(
            ["queued", "running", "checkpointing", "completed"].contains(&state),
            "{row}"
        );
        assert!(row["steps"].as_str().unwrap().ends_with("/ 1500"), "{row}");
    }
    assert!(
        seen["first"]["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["job_id"] == job),
        "{seen}"
    );
    assert!(
        seen["first"]["devices"][0]["label"]
            .as_str()
            .unwrap()
            .starts_with("cpu: "),
        "{seen}"
    );
    assert!(
        seen["third"]["sparks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["points"].as_u64() >= Some(2)),
        "{seen}"
    );
    assert!(
        seen["fourth"]["sparks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["valid_points"].as_u64() >= Some(2) && s["points"].as_u64() >= Some(2)),
        "a template task's train_loss with valid_loss beside it: {seen}"
    );
    let png = std::fs::read(&screenshot).expect("screenshot written");
    assert_eq!(&png[1..4], b"PNG");
    let _ = server.client(&["train", "stop", &job.to_string(), "--force"]);
}
