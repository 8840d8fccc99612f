//! Who may read what: a host reads bar files named by jobs only under its
//! data roots (`--data-root`, default the working directory and the bundled
//! samples). Paths outside, `..` tricks and symlinks pointing out are
//! PERMISSION_DENIED, name no file content, and leave the store unchanged.

use std::path::Path;
use tli_e2e_tests::*;

const SAMPLE: &str = "data/samples/es_proxy_sp500_1d.csv";

fn sample() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(SAMPLE)
}

fn start(server: &Server, asset: &Path) -> std::process::Output {
    server.client(&[
        "train",
        "start",
        "-p",
        "template",
        "-a",
        asset.to_str().unwrap(),
        "--steps",
        "5",
        "-o",
        "json",
    ])
}

#[test]
fn bar_files_outside_the_data_roots_are_refused_without_a_trace() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let (state, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // A "secret" the host can read but no client may have it open.
    let secret = elsewhere.path().join("secret.csv");
    std::fs::write(&secret, "ts_event,open\nTOP-SECRET-VALUE,1\n").unwrap();
    let copy = elsewhere.path().join("es.csv");
    std::fs::copy(sample(), &copy).unwrap();

    // Default roots: the bundled samples are allowed, a temporary directory is not.
    let server = Server::start(plugins.path(), state.path(), &[]);
    let ok = start(&server, &sample());
    assert!(ok.status.success(), "{}", stderr(&ok));
    let link_dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let link = link_dir.path().join("looks-local.csv");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    // From the working directory (a root) up to `/` with `..`, then down to the secret.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sneaky = manifest.to_path_buf();
    for _ in manifest.components().skip(1) {
        sneaky.push("..");
    }
    let sneaky = sneaky.join(secret.strip_prefix("/").unwrap());
    let missing = elsewhere.path().join("not-there.csv");
    let job_ids = || {
        ok_json(&server.client(&["train", "list", "-o", "json"]))["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["job_id"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    let jobs_before = job_ids();
    for asset in [secret.as_path(), &copy, &link, &sneaky, &missing] {
        let out = start(&server, asset);
        let err = stderr(&out);
        assert!(!out.status.success(), "{asset:?} was accepted");
        assert!(err.contains("permission denied"), "{asset:?}: {err}");
        assert!(err.contains("--data-root"), "{asset:?}: {err}");
        assert!(!err.contains("TOP-SECRET"), "{asset:?}: {err}");
    }
    assert_eq!(job_ids(), jobs_before, "a refused job was stored");
    drop(server);

    // --data-root allows that directory (and only it: the default roots are replaced).
    let state = tempfile::tempdir().unwrap();
    let server = Server::start(
        plugins.path(),
        state.path(),
        &["--data-root", elsewhere.path().to_str().unwrap()],
    );
    let ok = start(&server, &copy);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let refused = start(&server, &sample());
    assert!(
        stderr(&refused).contains("permission denied"),
        "{}",
        stderr(&refused)
    );
    // Inside the roots, a missing file is an ordinary bad argument.
    let out = start(&server, &missing);
    assert!(
        stderr(&out).contains("invalid argument"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_data_root_that_does_not_exist_stops_the_host_at_start() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::tempdir().unwrap();
    let out = run_tli(
        plugins.path(),
        &[
            "host",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            state.path().to_str().unwrap(),
            "--data-root",
            "/no/such/data/root",
        ],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--data-root") && stderr(&out).contains("/no/such/data/root"),
        "{}",
        stderr(&out)
    );
}

/// Only regular files are data: a FIFO named as a bar file is refused at
/// once (it used to hold a host thread until a writer came), and a file
/// without line breaks (a sparse 1 GiB file) is refused after 16 MiB of it,
/// not read whole; the host keeps answering.
#[test]
fn a_fifo_and_a_file_without_line_breaks_are_refused_at_once() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let (state, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let root = format!("--data-root={}", data.path().display());
    let server = Server::start(plugins.path(), state.path(), &[&root]);
    let fifo = data.path().join("bars.csv");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let sparse = data.path().join("sparse.csv");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    for (file, expected) in [
        (&fifo, "is a FIFO (named pipe), not a regular file"),
        (&sparse, "a line longer than 16 MiB"),
    ] {
        let mut start = std::process::Command::new(tli_binary());
        start
            .args(["train", "start", "-p", "template", "-a"])
            .arg(file)
            .args(["--steps", "5", "--endpoint", &server.endpoint()]);
        let out = output_within(start, std::time::Duration::from_secs(60))
            .unwrap_or_else(|| panic!("train start on {} hung", file.display()));
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains(expected), "{}: {err}", file.display());
        let mut inspect = std::process::Command::new(tli_binary());
        inspect.args(["data", "inspect"]).arg(file);
        let out = output_within(inspect, std::time::Duration::from_secs(60))
            .unwrap_or_else(|| panic!("data inspect on {} hung", file.display()));
        assert!(!out.status.success());
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
    }
    let listed = ok_json(&server.client(&["train", "list", "-o", "json"]));
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(0), "{listed}");
}

/// Valid bars that are not the sample's: its later rows only (other split
/// times in a model card), and a "secret" no message may ever quote.
fn outside_files(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let text = std::fs::read_to_string(sample()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let later = lines.len() * 2 / 5;
    let valid = dir.join("valid.csv");
    let mut kept = vec![lines[0]];
    kept.extend(&lines[later..]);
    std::fs::write(&valid, kept.join("\n") + "\n").unwrap();
    let secret = dir.join("secret.csv");
    std::fs::write(&secret, "ts_event,SECRET_KEY\nTOP-SECRET-VALUE,1\n").unwrap();
    (valid, secret)
}

/// A data root holding a copy of the sample (`inside`) and a link to it
/// (`link`), with valid bars and a secret outside it, and a state directory.
struct LinkedRoot {
    state: tempfile::TempDir,
    root: tempfile::TempDir,
    _elsewhere: tempfile::TempDir,
    inside: std::path::PathBuf,
    link: std::path::PathBuf,
    valid: std::path::PathBuf,
    secret: std::path::PathBuf,
}

impl LinkedRoot {
    fn new() -> Self {
        let (state, root, elsewhere) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let inside = root.path().join("inside.csv");
        std::fs::copy(sample(), &inside).unwrap();
        let (valid, secret) = outside_files(elsewhere.path());
        let link = root.path().join("bars.csv");
        repoint(&link, &inside);
        Self {
            state,
            root,
            _elsewhere: elsewhere,
            inside,
            link,
            valid,
            secret,
        }
    }
}

/// Points `link` at `target` in one step (a new link renamed over it), so
/// it always exists.
fn repoint(link: &Path, target: &Path) {
    let fresh = link.with_extension("flip");
    let _ = std::fs::remove_file(&fresh);
    std::os::unix::fs::symlink(target, &fresh).unwrap();
    std::fs::rename(&fresh, link).unwrap();
}

/// A symbolic link inside the data root flipped, as fast as it goes, among
/// a file inside, valid bars outside and a secret outside, while 300 jobs
/// name it (each with another start time, so none is served from memory).
/// Some are refused and some accepted; every accepted job was built from
/// the file inside (its model card's split times are the inside file's),
/// and no message quotes the secret. The host used to check the path and
/// then open it again, so a flip in between trained on the outside file.
#[test]
fn a_link_flipped_during_hundreds_of_submissions_never_leads_outside() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tli_proto::v1 as pb;
    use tli_proto::v1::training_service_client::TrainingServiceClient;
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let LinkedRoot {
        state,
        root,
        _elsewhere,
        inside,
        link,
        valid,
        secret,
    } = LinkedRoot::new();
    let server = Server::start(
        plugins.path(),
        state.path(),
        &[&format!("--data-root={}", root.path().display())],
    );
    let request = |i: i64| pb::StartTrainingRequest {
        name: format!("race-{i}"),
        model: Some(pb::ModelSpec {
            steps: 1,
            config: Some(pb::model_spec::Config::Template(pb::TemplateConfig {
                hidden_sizes: vec![4],
                ..Default::default()
            })),
            ..Default::default()
        }),
        assets: vec![pb::AssetSpec {
            source: Some(pb::asset_spec::Source::DataPath(
                link.to_str().unwrap().to_string(),
            )),
            // Before every bar: the same data, another cache entry.
            start_unix_ns: Some(i),
            ..Default::default()
        }],
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut client = runtime
        .block_on(TrainingServiceClient::connect(server.endpoint()))
        .unwrap();
    let reference = runtime
        .block_on(client.start_training(request(0)))
        .unwrap()
        .into_inner()
        .job
        .unwrap()
        .job_id;

    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, link) = (stop.clone(), link.clone());
        let targets = [inside.clone(), valid.clone(), secret.clone()];
        std::thread::spawn(move || {
            let mut flips = 0usize;
            while !stop.load(Ordering::Relaxed) {
                repoint(&link, &targets[flips % 3]);
                flips += 1;
            }
            flips
        })
    };
    let (mut accepted, mut refused) = (Vec::new(), 0);
    for i in 1..=300 {
        match runtime.block_on(client.start_training(request(i))) {
            Ok(reply) => accepted.push(reply.into_inner().job.unwrap().job_id),
            Err(status) => {
                refused += 1;
                let message = status.message();
                assert!(!message.contains("SECRET"), "{message}");
                assert!(message.contains("data roots"), "{message}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(
        refused > 0 && !accepted.is_empty(),
        "the race did not happen: {} accepted, {refused} refused, {flips} flips",
        accepted.len()
    );

    let store = tli_host::orchestrator::store::Store::open_read_only(state.path()).unwrap();
    let card = |job: u64| -> serde_json::Value {
        let task = store.tasks_of(job as i64).unwrap()[0].id;
        serde_json::from_str(&store.model_card(task).unwrap().unwrap()).unwrap()
    };
    let splits = card(reference)["assets"][0]["splits"].clone();
    assert!(splits["train"].is_array(), "{splits}");
    let outside: Vec<u64> = accepted
        .iter()
        .copied()
        .filter(|&job| card(job)["assets"][0]["splits"] != splits)
        .collect();
    assert!(
        outside.is_empty(),
        "{} of {} accepted jobs were built from a file outside the root: {outside:?}",
        outside.len(),
        accepted.len()
    );
    eprintln!(
        "{} accepted, {refused} refused, {flips} flips of the link",
        accepted.len()
    );
}

/// A job accepted on a link inside the root; with the host killed (before
/// any checkpoint: its history says it starts again from step 0) the link
/// is pointed at a secret outside. At the next start the task is refused
/// (failed, naming the data roots) without a byte of the secret in its
/// error; pointed back inside, `resume` trains it to the end. The host used
/// to re-read the stored path with no check at all.
#[test]
fn a_task_started_again_after_a_restart_checks_its_files_again() {
    let plugins = template_and_behaviour();
    let LinkedRoot {
        state,
        root,
        _elsewhere,
        inside,
        link,
        secret,
        ..
    } = LinkedRoot::new();
    let data_root = format!("--data-root={}", root.path().display());
    let mut server = Server::start(plugins.path(), state.path(), &[&data_root]);
    let job = start_slow_behaviour_job(&server, &link).to_string();
    let status =
        |server: &Server| ok_json(&server.client(&["train", "status", &job, "-o", "json"]));
    let task_state = |server: &Server| status(server)["progress"]["tasks"][0]["state"].clone();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while task_state(&server) != "running" {
        assert!(std::time::Instant::now() < deadline, "{}", status(&server));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Killed before any checkpoint: the task starts again from step 0.
    server.kill9();
    repoint(&link, &secret);

    let server = Server::start(plugins.path(), state.path(), &[&data_root]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while task_state(&server) != "failed" {
        assert!(std::time::Instant::now() < deadline, "{}", status(&server));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let failed = status(&server)["progress"]["tasks"][0].clone();
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(error.contains("outside the host's data roots"), "{failed}");
    assert!(!error.contains("SECRET"), "{failed}");
    let reasons = first_task_reasons(state.path(), job.parse().unwrap());
    assert!(
        reasons.contains(
            &"re-queued at host start to start again from step 0 (it has no checkpoint)".into()
        ),
        "{reasons:#?}"
    );

    repoint(&link, &inside);
    let resumed = server.client(&["train", "resume", &job]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while task_state(&server) != "completed" {
        assert!(std::time::Instant::now() < deadline, "{}", status(&server));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
