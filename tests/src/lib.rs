//! Helpers for the end-to-end tests (one binary, `tests/e2e/main.rs`): locate
//! the built `tli` binary and plugin libraries (cargo puts them next to each
//! other in `target/<profile>`), assemble throw-away plugin directories from
//! them, run `tli`, and serve with it.
//!
//! The tests need the whole workspace built first (`make test` does
//! `cargo build --release --workspace` before `cargo test --release`).

pub mod slurm;
pub mod trainers;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

// Artifact location and plugin directories are shared with the host's own
// tests and benchmarks (one definition, in `tli_testkit`).
pub use tli_testkit::{
    artifact, http, library, profile_dir, PluginDir, BEHAVIOUR, DQN, FUTURE_API, MAMBA2,
    NOT_A_PLUGIN, ORACLE, PPO, TEMPLATE, TEMPLATE_NEXT, TFT,
};

pub fn tli_binary() -> PathBuf {
    artifact("tli")
}

/// The template and behaviour plugins (the orchestrator's and the CLI's tests).
pub fn template_and_behaviour() -> PluginDir {
    PluginDir::with(&[(TEMPLATE, "template"), (BEHAVIOUR, "behaviour")])
}

/// Runs `tli` with `args` against `plugin_dir`, without `LD_LIBRARY_PATH`
/// (the rpath must be enough) and with plain (uncoloured) logs.
pub fn run_tli(plugin_dir: &Path, args: &[&str]) -> Output {
    run_tli_with_env(plugin_dir, args, &[])
}

pub fn run_tli_with_env(plugin_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(tli_binary());
    command
        .args(args)
        .env("TLI_PLUGIN_DIR", plugin_dir)
        .env_remove("LD_LIBRARY_PATH")
        .env("NO_COLOR", "1")
        .env("TLI_LOG", "info");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("run tli")
}

/// Runs `tli` as a person at a terminal would, without `TLI_LOG` or
/// `RUST_LOG` (so its logs take the people's format).
pub fn run_tli_as_a_user(plugin_dir: &Path, args: &[&str]) -> Output {
    Command::new(tli_binary())
        .args(args)
        .env("TLI_PLUGIN_DIR", plugin_dir)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("TLI_LOG")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .output()
        .expect("run tli")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Parses stdout as JSON, with both streams in the panic message on failure.
pub fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e})\n--- stdout\n{}\n--- stderr\n{}",
            stdout(output),
            stderr(output)
        )
    })
}

/// Stdout as JSON of a run that must have succeeded (exit code and both
/// streams in the panic message otherwise).
pub fn ok_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}\n{}\n{}",
        out.status.code(),
        stdout(out),
        stderr(out)
    );
    json(out)
}

/// A `tli host serve` child process on a free loopback port.
pub struct Server {
    pub child: std::process::Child,
    /// `127.0.0.1:PORT`
    pub address: String,
    /// Everything the server printed on stderr so far is collected here.
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// Starts `tli host serve --listen 127.0.0.1:0` on `state_dir` with the
    /// plugins in `plugin_dir`, and waits for its ready line.
    pub fn start(plugin_dir: &Path, state_dir: &Path, extra: &[&str]) -> Self {
        Self::start_with(plugin_dir, state_dir, "127.0.0.1:0", extra, &[])
    }

    /// [`start`](Self::start) on `listen` (a restart on the same port) with
    /// `env` set for the server.
    pub fn start_with(
        plugin_dir: &Path,
        state_dir: &Path,
        listen: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_with_stdout(
            plugin_dir,
            state_dir,
            listen,
            extra,
            env,
            std::process::Stdio::null(),
        )
    }

    /// [`start_with`](Self::start_with) with the server's stdout going to
    /// `stdout` (e.g. a pipe: take it from `child.stdout`).
    pub fn start_with_stdout(
        plugin_dir: &Path,
        state_dir: &Path,
        listen: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        stdout: std::process::Stdio,
    ) -> Self {
        let mut command = Command::new(tli_binary());
        command
            .args(["host", "serve", "--listen", listen, "--state-dir"])
            .arg(state_dir)
            .args(extra)
            .env("TLI_PLUGIN_DIR", plugin_dir)
            .env_remove("LD_LIBRARY_PATH")
            .env("NO_COLOR", "1");
        for (k, v) in env {
            command.env(k, v);
        }
        let tli_testkit::ServeProcess {
            child,
            address,
            log,
        } = tli_testkit::ServeProcess::spawn_with_stdout(command, stdout, |_| true);
        Self {
            child,
            address,
            log,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The status page's `IP:PORT` from the server's start-up lines.
    pub fn status_page(&self) -> String {
        self.logged_url("status page at http://")
    }

    /// The server's log once it holds `marker`, waiting up to 10 s for it
    /// (start-up lines come one after another, not at once).
    pub fn log_once(&self, marker: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
            if log.contains(marker) {
                return log;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no `{marker}` from tli host serve; it printed:\n{log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The address after `marker` in the server's log, waiting up to 10 s for it.
    pub fn logged_url(&self, marker: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
            if let Some(rest) = log.split(marker).nth(1) {
                return rest
                    .split(['/', ' ', '\n'])
                    .next()
                    .unwrap_or_default()
                    .to_string();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no `{marker}` line from tli host serve; it printed:\n{log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Starts a job `name` of a small template model (hidden [8]) on two
    /// synthetic assets for `steps` steps; returns `train start`'s JSON.
    pub fn start_small_template_job(&self, name: &str, steps: u64) -> serde_json::Value {
        let steps = steps.to_string();
        let mut args = small_template_job_args(name, &steps);
        args.extend(["-o", "json"]);
        ok_json(&self.client(&args))
    }

    /// Runs the `tli` client against this server.
    pub fn client(&self, args: &[&str]) -> Output {
        self.client_with_env(args, &[])
    }

    pub fn client_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(tli_binary());
        command
            .args(args)
            .args(["--endpoint", &self.endpoint()])
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("TLI_TOKEN")
            .env("NO_COLOR", "1");
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().expect("run tli client")
    }

    /// SIGKILL (no checkpoints, no goodbyes), then wait.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` (a number, e.g. 1 for SIGHUP), then waits; returns how
    /// the server exited.
    pub fn signal_and_wait(&mut self, signal: i32) -> std::process::ExitStatus {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc_kill(self.child.id() as i32, signal) };
        self.child.wait().expect("wait for tli host serve")
    }

    /// SIGTERM, then wait; returns how long the server took to exit.
    pub fn terminate(&mut self) -> std::time::Duration {
        let started = std::time::Instant::now();
        // SAFETY: sending a signal to our own child process.
        unsafe { libc_kill(self.child.id() as i32, 15) };
        let _ = self.child.wait();
        started.elapsed()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

/// `train start` arguments of a job `name`: a small template model (hidden
/// [8]) on two synthetic assets for `steps` steps (any client binary).
pub fn small_template_job_args<'a>(name: &'a str, steps: &'a str) -> Vec<&'a str> {
    vec![
        "train",
        "start",
        "--name",
        name,
        "-p",
        "template",
        "--config",
        r#"{"hidden_sizes":[8]}"#,
        "-a",
        "synthetic:300:1",
        "-a",
        "synthetic:300:2",
        "--steps",
        steps,
    ]
}

/// Waits up to `limit` for `child` to exit; kills it and returns `None` when it does not.
pub fn exit_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("poll a child process") {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Runs `command` with its output captured, killing it after `limit`: its
/// output, or `None` when it hung.
pub fn output_within(mut command: Command, limit: std::time::Duration) -> Option<Output> {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start a child process");
    exit_within(&mut child, limit)?;
    Some(child.wait_with_output().expect("collect a child's output"))
}

/// Why each of the first task of `job` moved between states, oldest first
/// (its transitions' reasons, read from the store in `state_dir`).
pub fn first_task_reasons(state_dir: &Path, job: u64) -> Vec<String> {
    let store = tli_host::orchestrator::store::Store::open_read_only(state_dir).expect("store");
    let task = store.tasks_of(job as i64).expect("tasks")[0].id;
    store
        .transitions(task)
        .expect("transitions")
        .into_iter()
        .map(|t| t.reason)
        .collect()
}

/// `train start` of one behaviour task on `asset` that trains for about
/// three seconds (600 steps of 5 ms), as JSON; its job id.
pub fn start_slow_behaviour_job(server: &Server, asset: &Path) -> u64 {
    let out = server.client(&[
        "train",
        "start",
        "-p",
        "behaviour",
        "--config",
        r#"{"sleep_ms_per_step":5}"#,
        "-a",
        asset.to_str().expect("a UTF-8 path"),
        "--steps",
        "600",
        "-o",
        "json",
    ]);
    ok_json(&out)["job_id"].as_u64().expect("a job id")
}
