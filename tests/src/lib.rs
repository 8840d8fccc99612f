//! Helpers for the end-to-end tests: locate the built `tli` binary and plugin
//! libraries (cargo puts them next to each other in `target/<profile>`),
//! assemble throw-away plugin directories from them, and run `tli`.
//!
//! The tests need the whole workspace built first (`make test` does
//! `cargo build --release --workspace` before `cargo test --release`).

pub mod trainers;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>`, derived from this test executable's own path
/// (`target/<profile>/deps/<test>-<hash>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("test executable lives in target/<profile>/deps")
}

/// A built artifact in `target/<profile>`, or a panic that says how to build it.
pub fn artifact(file_name: &str) -> PathBuf {
    let path = profile_dir().join(file_name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (cargo build --release --workspace, or make test)",
        path.display()
    );
    path
}

pub fn tli_binary() -> PathBuf {
    artifact("tli")
}

/// Library file of a workspace cdylib by its crate lib name.
pub fn library(lib_name: &str) -> PathBuf {
    artifact(&format!("lib{lib_name}.so"))
}

pub const TEMPLATE: &str = "tli_plugin_template";
pub const DQN: &str = "tli_plugin_dqn";
pub const PPO: &str = "tli_plugin_ppo";
pub const BEHAVIOUR: &str = "tli_fixture_behaviour";
pub const FUTURE_API: &str = "tli_fixture_future_api";
pub const NOT_A_PLUGIN: &str = "tli_fixture_not_a_plugin";

/// A temporary plugin directory filled with copies of built libraries.
pub struct PluginDir {
    dir: tempfile::TempDir,
}

impl PluginDir {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Copies library `lib_name` in as `libtli_plugin_<as_name>.so`.
    pub fn add(&self, lib_name: &str, as_name: &str) -> PathBuf {
        let target = self.file(as_name);
        std::fs::copy(library(lib_name), &target).expect("copy plugin library");
        target
    }

    /// Adds the first `keep` bytes of library `lib_name`, as a truncated download would leave it.
    pub fn add_truncated(&self, lib_name: &str, as_name: &str, keep: usize) -> PathBuf {
        let bytes = std::fs::read(library(lib_name)).expect("read plugin library");
        let target = self.file(as_name);
        std::fs::write(&target, &bytes[..keep.min(bytes.len())]).expect("write truncated copy");
        target
    }

    fn file(&self, as_name: &str) -> PathBuf {
        self.path().join(format!("libtli_plugin_{as_name}.so"))
    }
}

impl Default for PluginDir {
    fn default() -> Self {
        Self::new()
    }
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
        use std::io::BufRead;
        let mut child = Command::new(tli_binary())
            .args(["host", "serve", "--listen", "127.0.0.1:0", "--state-dir"])
            .arg(state_dir)
            .args(extra)
            .env("TLI_PLUGIN_DIR", plugin_dir)
            .env_remove("LD_LIBRARY_PATH")
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start tli host serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let address = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    let _ = tx.send(address);
                }
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let address = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "no ready line from tli host serve; it printed:\n{}",
                    log.lock().map(|l| l.clone()).unwrap_or_default()
                )
            });
        Self {
            child,
            address,
            log,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
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
