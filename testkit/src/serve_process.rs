//! A `tli host serve` child process for the benchmarks and end-to-end tests
//! that drive a real host: started, its ready line awaited, its stderr
//! collected.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A running `tli host serve` and what it printed.
pub struct ServeProcess {
    pub child: Child,
    /// `127.0.0.1:PORT`, from its ready line.
    pub address: String,
    /// The stderr lines `keep` accepted so far.
    pub log: Arc<Mutex<String>>,
}

impl ServeProcess {
    /// Spawns `command` (a `tli host serve --listen 127.0.0.1:0 …`) with
    /// stdout discarded and stderr read on a thread, and waits up to 60 s
    /// for the "listening on ADDRESS" line.
    pub fn spawn(command: Command, keep: fn(&str) -> bool) -> Self {
        Self::spawn_with_stdout(command, Stdio::null(), keep)
    }

    /// [`spawn`](Self::spawn) with the host's stdout going to `stdout` (e.g.
    /// a pipe: take it from `child.stdout`).
    pub fn spawn_with_stdout(mut command: Command, stdout: Stdio, keep: fn(&str) -> bool) -> Self {
        let mut child = command
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tli host serve (cargo build --release --workspace first)");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let address = rest.split_whitespace().next().unwrap_or_default();
                    let _ = tx.send(address.to_string());
                }
                if keep(&line) {
                    if let Ok(mut l) = sink.lock() {
                        l.push_str(&line);
                        l.push('\n');
                    }
                }
            }
        });
        let address = rx
            .recv_timeout(Duration::from_secs(60))
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
}
