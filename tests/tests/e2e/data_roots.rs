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
