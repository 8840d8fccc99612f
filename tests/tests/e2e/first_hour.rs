//! docs/first-hour.md, run as written. The walkthrough's commands are the
//! test's: break one (a renamed flag, a moved file) and this test fails.
//!
//! The convention, which the doc states in a comment at its top:
//!
//! - Every fenced block opened by a line that is exactly ```` ```sh ```` is a
//!   step, run in document order by `bash -euo pipefail`, each in a bash of
//!   its own (nothing exported carries over), in one fresh working directory
//!   that stands in for the checkout: `data` and `.venv` there are links to
//!   the checkout's, `PATH` starts with the directory of the built `tli`, and
//!   `TLI_PLUGIN_DIR` holds copies of the doc's plugins. Other blocks
//!   (```` ```text ````, ```` ```bash ````) are output and setup, not run.
//! - A step whose first line is a comment ending in `terminal:` (`# in a
//!   second terminal:`) starts something that keeps running (the host,
//!   TensorBoard): it is started in the background, in a session of its own,
//!   and is ready when its output holds an `http://` address (both print where
//!   they listen). Such steps are stopped with SIGTERM when the walkthrough
//!   ends.
//! - The doc uses the default addresses (the API on 127.0.0.1:50051, the
//!   status page on :50052, TensorBoard on :6006). The walkthrough runs in a
//!   network namespace of its own (`unshare --user --map-root-user --net`,
//!   loopback brought up) where the system allows one, so no other host on
//!   this machine can answer in its place; elsewhere on the machine's
//!   loopback, and those ports must be free.
//!
//! Then the test checks what the doc promises: the job completes (the store),
//! `tli train watch` ends with the job's summary, the status page answers HTML
//! and counts the completed tasks, TensorBoard (as the doc starts it) serves
//! the runs the doc names and their event files read back (TensorBoard's own
//! `EventAccumulator`) with the tag groups it names, `tli train plot` wrote
//! the files the doc lists (PNGs and the CSV), and the comparison printed
//! every model, each backtest with the bars it traded.
//!
//! `TLI_FIRST_HOUR_KEEP=1` keeps the working directory (its path is printed):
//! `logs/NN.log` is each step's output, for refreshing the doc's captures.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::Store;

/// The doc, from this crate's directory.
fn doc_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/first-hour.md")
}

/// The checkout's root.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the checkout")
}

/// The job the walkthrough starts (a fresh state directory numbers it 1), its
/// name, and its tasks' TensorBoard runs as the doc names them.
const JOB_SUMMARY: &str = "job 1 (first-hour): 100.0% done";
const RUNS: [&str; 2] = [
    "job-1/task-1-dqn-es_proxy_sp500_1d",
    "job-1/task-2-tft-es_proxy_sp500_1d",
];
/// What `tli train plot 1 --out plots` writes, as the doc lists it.
const PLOT_FILES: [&str; 5] = [
    "plots/overview.png",
    "plots/model-dqn.png",
    "plots/model-tft.png",
    "plots/scalars.csv",
    "plots/memory-cpu.png",
];
/// Tags the doc points at in TensorBoard, per run (plugin in the run's name).
const TAGS: [(&str, &[&str]); 2] = [
    (
        "-dqn-",
        &["train/loss", "valid/sharpe", "perf/steps_per_second"],
    ),
    (
        "-tft-",
        &[
            "train/loss",
            "valid/loss",
            "test/qrisk_p50",
            "perf/steps_per_second",
        ],
    ),
];
/// The default ports the doc's commands use.
const PORTS: [u16; 3] = [50051, 50052, 6006];

/// A step of the walkthrough: a ```sh block.
struct Step {
    code: String,
    background: bool,
}

/// Every ```sh block of `doc`, in order.
fn steps(doc: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in doc.lines() {
        match &mut block {
            None if line == "```sh" => block = Some(Vec::new()),
            Some(lines) if line.starts_with("```") => {
                let background = lines
                    .first()
                    .is_some_and(|l| l.starts_with('#') && l.trim_end().ends_with("terminal:"));
                steps.push(Step {
                    code: lines.join("\n") + "\n",
                    background,
                });
                block = None;
            }
            Some(lines) => lines.push(line),
            None => {}
        }
    }
    assert!(block.is_none(), "an unclosed ```sh block in the doc");
    steps
}

/// Runs `steps/NN[-background].sh` in order in the working directory,
/// each step's output into `logs/NN….log` (see the module's doc), then the
/// test's own `checks.sh` (into `logs/checks.log`) while what the steps
/// started still runs.
const DRIVER: &str = r#"set -uo pipefail
sessions=()
stop() {
  for s in "${sessions[@]}"; do kill -TERM -- "-$s" 2>/dev/null; done
  for s in "${sessions[@]}"; do
    for _ in $(seq 300); do kill -0 -- "-$s" 2>/dev/null || break; sleep 0.1; done
  done
}
trap stop EXIT
for step in steps/*.sh; do
  name=$(basename "$step" .sh)
  log=logs/$name.log
  echo "first hour: step $name" >&2
  case $name in
    *-background)
      setsid bash -euo pipefail "$step" >"$log" 2>&1 &
      sessions+=("$!")
      echo "$!" >>logs/sessions
      ready=""
      for _ in $(seq 1200); do
        if grep -q 'http://' "$log"; then ready=1; break; fi
        kill -0 "$!" 2>/dev/null || break
        sleep 0.1
      done
      if [ -z "$ready" ]; then
        echo "first hour: step $name never printed its address" >&2
        exit 1
      fi
      ;;
    *)
      if ! bash -euo pipefail "$step" >"$log" 2>&1; then
        echo "first hour: step $name failed" >&2
        exit 1
      fi
      ;;
  esac
done
echo "first hour: the test's checks" >&2
if ! bash -euo pipefail checks.sh >logs/checks.log 2>&1; then
  echo "first hour: the test's checks failed" >&2
  exit 1
fi
"#;

/// The test's checks while the walkthrough's TensorBoard runs: the runs it
/// lists over its HTTP API (`/data/runs`), at the address it printed, once it
/// has loaded both (it reads the log directory a few seconds after it starts).
const CHECKS: &str = r#"url=$(grep -ho 'TensorBoard [^ ]* at http://[^ ]*' logs/*.log |
  grep -o 'http://[^ ]*' | head -n 1)
runs=""
for _ in $(seq 120); do
  runs=$(curl -s "${url}data/runs" || true)
  case $runs in *task-1-*task-2-* | *task-2-*task-1-*) break ;; esac
  sleep 0.5
done
echo "$runs"
"#;

/// Whether a user and network namespace with loopback up can be made here.
fn private_network() -> bool {
    Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--net",
            "ip",
            "link",
            "set",
            "lo",
            "up",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Sends `signal` to process group `group`.
fn kill_group(group: i32, signal: i32) {
    // SAFETY: signalling process groups this test started.
    unsafe { libc::kill(-group, signal) };
}

/// Each step's code and output, for a failure's message.
fn transcript(work: &Path, names: &[String], steps: &[Step]) -> String {
    let mut text = String::new();
    for (name, step) in names.iter().zip(steps) {
        let log = std::fs::read_to_string(work.join(format!("logs/{name}.log")))
            .unwrap_or_else(|_| "(not run)".into());
        text.push_str(&format!(
            "--- step {name}\n{}--- its output\n{log}\n",
            step.code
        ));
    }
    text
}

#[test]
fn first_hour_doc_runs_as_written() {
    let started = Instant::now();
    let doc = std::fs::read_to_string(doc_path()).expect("docs/first-hour.md");
    let steps = steps(&doc);
    assert!(steps.len() >= 5, "too few ```sh blocks in the doc");

    // The working directory stands in for the checkout.
    let work = tempfile::tempdir().expect("temp dir");
    let root = checkout();
    for link in ["data", ".venv"] {
        std::os::unix::fs::symlink(root.join(link), work.path().join(link)).expect("link");
    }
    std::fs::create_dir(work.path().join("steps")).expect("steps dir");
    std::fs::create_dir(work.path().join("logs")).expect("logs dir");
    let names: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{:02}{}",
                i + 1,
                if s.background { "-background" } else { "" }
            )
        })
        .collect();
    for (name, step) in names.iter().zip(&steps) {
        std::fs::write(work.path().join(format!("steps/{name}.sh")), &step.code).expect("step");
    }
    std::fs::write(work.path().join("driver.sh"), DRIVER).expect("driver");
    std::fs::write(work.path().join("checks.sh"), CHECKS).expect("checks");

    let plugins = PluginDir::with(&[(DQN, "dqn"), (TFT, "tft")]);
    let tli_dir = tli_binary()
        .parent()
        .expect("tli's directory")
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(tli_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");

    let private = private_network();
    let mut command = if private {
        let mut c = Command::new("unshare");
        c.args(["--user", "--map-root-user", "--net", "bash", "-c"])
            .arg("ip link set lo up && exec bash driver.sh");
        c
    } else {
        for port in PORTS {
            assert!(
                std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
                "port {port} of 127.0.0.1 is taken and no private network namespace can be \
                 made here: the walkthrough uses the default ports"
            );
        }
        let mut c = Command::new("bash");
        c.arg("driver.sh");
        c
    };
    eprintln!(
        "first hour: {} steps in {} ({})",
        steps.len(),
        work.path().display(),
        if private {
            "a private network namespace"
        } else {
            "the machine's loopback"
        }
    );
    command
        .current_dir(work.path())
        .env("PATH", path)
        .env("TLI_PLUGIN_DIR", plugins.path())
        .env("NO_COLOR", "1")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("TLI_ENDPOINT")
        .env_remove("TLI_STATE_DIR")
        .env_remove("TLI_TOKEN")
        .env_remove("TLI_LOG")
        .env_remove("RUST_LOG");
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut driver = command.spawn().expect("start the walkthrough");
    let status = match exit_within(&mut driver, Duration::from_secs(420)) {
        Some(status) => status,
        None => {
            // Hung: the driver is gone (exit_within killed it); so must be
            // what it started.
            kill_group(driver.id() as i32, libc::SIGKILL);
            let sessions =
                std::fs::read_to_string(work.path().join("logs/sessions")).unwrap_or_default();
            for session in sessions.lines().filter_map(|s| s.parse::<i32>().ok()) {
                kill_group(session, libc::SIGKILL);
            }
            panic!(
                "the walkthrough did not end within 7 minutes\n{}",
                transcript(work.path(), &names, &steps)
            );
        }
    };
    let keep = std::env::var_os("TLI_FIRST_HOUR_KEEP").is_some();
    let work_dir = work.path().to_path_buf();
    if keep {
        eprintln!("first hour: kept {}", work.keep().display());
    }
    let work = work_dir.as_path();
    let transcript = transcript(work, &names, &steps);
    assert!(
        status.success(),
        "the walkthrough failed ({status})\n{transcript}"
    );
    let log_of = |needle: &str| -> String {
        let i = steps
            .iter()
            .position(|s| s.code.contains(needle))
            .unwrap_or_else(|| panic!("no step runs `{needle}`"));
        std::fs::read_to_string(work.join(format!("logs/{}.log", names[i]))).expect("a log")
    };

    // The job completed: every task, in the store.
    let store = Store::open_read_only(&work.join(".tli")).expect("the host's store");
    let tasks = store.tasks_of(1).expect("job 1's tasks");
    assert_eq!(tasks.len(), 2, "{transcript}");
    for task in &tasks {
        assert_eq!(
            task.state,
            TaskState::Completed,
            "task {}\n{transcript}",
            task.id
        );
    }

    // `tli train watch` ends with the job's summary.
    let watch = log_of("tli train watch 1");
    assert!(
        watch
            .lines()
            .any(|l| l.starts_with(JOB_SUMMARY) && l.ends_with("2 completed")),
        "no summary in `tli train watch`'s output:\n{watch}"
    );
    assert!(doc.contains(JOB_SUMMARY), "the doc shows no watch summary");

    // The status page answers HTML, and its metrics count the tasks.
    let page = log_of("curl -s http://127.0.0.1:50052/");
    assert!(page.contains("<title>tli host</title>"), "{page}");
    assert!(page.contains("tli_tasks{state=\"completed\"} 2"), "{page}");

    // TensorBoard listened, and its event files hold the runs the doc names.
    let tensorboard = log_of("tensorboard --logdir .tli/tb");
    assert!(
        tensorboard.contains("http://localhost:6006/"),
        "{tensorboard}"
    );
    let reader = std::process::Command::new(root.join(".venv/bin/python"))
        .arg(root.join("tests/python/tensorboard_roundtrip.py"))
        .arg(work.join(".tli/tb"))
        .output()
        .expect("run python");
    let runs = ok_json(&reader);
    let listed = std::fs::read_to_string(work.join("logs/checks.log")).expect("checks' log");
    let mut listed: Vec<String> = serde_json::from_str(listed.trim())
        .unwrap_or_else(|e| panic!("TensorBoard's /data/runs ({e}): {listed}"));
    listed.sort();
    assert_eq!(listed, RUNS, "the runs TensorBoard serves");
    let mut names_read: Vec<&String> = runs.as_object().expect("runs").keys().collect();
    names_read.sort();
    assert_eq!(names_read, RUNS, "TensorBoard's runs");
    for run in RUNS {
        assert!(doc.contains(run), "the doc does not name the run {run}");
        let (_, tags) = TAGS
            .iter()
            .find(|(plugin, _)| run.contains(plugin))
            .expect("the run's plugin");
        for tag in *tags {
            assert!(
                runs[run]["scalars"][tag]
                    .as_array()
                    .is_some_and(|p| !p.is_empty()),
                "{run} has no {tag}: {}",
                runs[run]["scalars"]
                    .as_object()
                    .map(|s| s.keys().cloned().collect::<Vec<_>>().join(" "))
                    .unwrap_or_default()
            );
            assert!(doc.contains(tag), "the doc does not name the tag {tag}");
        }
    }

    // The plot files the doc lists: PNGs and the CSV table.
    let plot = log_of("tli train plot 1");
    for file in PLOT_FILES {
        assert!(doc.contains(file), "the doc does not list {file}");
        assert!(
            plot.contains(file),
            "`tli train plot` did not write {file}:\n{plot}"
        );
        let bytes = std::fs::read(work.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        if file.ends_with(".png") {
            assert!(
                bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
                "{file} is not a PNG"
            );
        } else {
            assert!(
                bytes.starts_with(b"task_id,task,metric,step,value\n"),
                "{file}"
            );
        }
    }

    // The comparison: every model listed and backtested.
    let compare = log_of("tli models list");
    for plugin in ["dqn@", "tft@"] {
        assert!(
            compare.contains(plugin),
            "{plugin} not compared:\n{compare}"
        );
    }
    assert_eq!(
        compare.matches("buy and hold").count(),
        2,
        "a backtest per model:\n{compare}"
    );
    // Each backtest says how many bars it traded (a host's answer has no
    // ledger to count them from).
    assert_eq!(
        compare.matches(" bars): positions from").count(),
        2,
        "{compare}"
    );
    assert!(!compare.contains("(0 bars)"), "{compare}");
    eprintln!("first hour: {:.0} s", started.elapsed().as_secs_f64());
}
