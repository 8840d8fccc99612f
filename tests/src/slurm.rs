//! A real single-node Slurm cluster for the end-to-end tests: Debian's
//! slurm-wlm and munge, configured and started by `scripts/slurm-cluster.sh`
//! under a temporary directory, stopped when the value is dropped. Only one
//! such cluster can run on a machine (fixed ports), so clusters are taken one
//! at a time (a process-wide lock held by the value).
//!
//! The cluster needs root (the daemons) and the packages
//! (`scripts/slurm-cluster.sh install`; `make test` runs it). Without them
//! the tests fail and say so; `TLI_SKIP_SLURM_TESTS=1` skips them on a
//! machine that cannot run Slurm.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// The repository's root (the tests run with the crate's directory as cwd).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn script() -> PathBuf {
    repo_root().join("scripts/slurm-cluster.sh")
}

pub struct SlurmCluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl SlurmCluster {
    /// Starts a cluster with `gpus` fake GPUs and `cpus` CPUs; `None` when
    /// `TLI_SKIP_SLURM_TESTS=1` (said on stderr).
    pub fn start(gpus: u32, cpus: u32) -> Option<Self> {
        if std::env::var("TLI_SKIP_SLURM_TESTS").is_ok_and(|v| v == "1") {
            eprintln!("TLI_SKIP_SLURM_TESTS=1: the real-Slurm test is skipped");
            return None;
        }
        // SAFETY: geteuid(2) has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "the Slurm tests start slurmctld and slurmd and need root: run them as root \
             (`make test` in CI does), or set TLI_SKIP_SLURM_TESTS=1 to skip them"
        );
        let lock = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::Builder::new()
            .prefix("tli-slurm-")
            .tempdir()
            .expect("temporary directory");
        let out = Command::new(script())
            .arg("start")
            .arg(dir.path())
            .args(["--gpus", &gpus.to_string(), "--cpus", &cpus.to_string()])
            .output()
            .expect("run scripts/slurm-cluster.sh");
        assert!(
            out.status.success(),
            "the Slurm cluster did not start (exit {:?}); install it with \
             `scripts/slurm-cluster.sh install` (as root; `make test` does)\n{}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(conf.is_file(), "no slurm.conf at {}", conf.display());
        Some(Self {
            dir,
            conf,
            _one_at_a_time: lock,
        })
    }

    /// `SLURM_CONF` for clients and hosts of this cluster.
    pub fn env(&self) -> (&'static str, String) {
        ("SLURM_CONF", self.conf.display().to_string())
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs a Slurm client command; its stdout (panics, with stderr, on failure).
    pub fn run(&self, command: &str, args: &[&str]) -> String {
        let out = Command::new("timeout")
            .arg("20")
            .arg(command)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap_or_else(|e| panic!("run {command}: {e}"));
        assert!(
            out.status.success(),
            "{command} {args:?}: exit {:?}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Ended jobs from the job-completion log (`sacct -c`): (id, name, state).
    pub fn ended_jobs(&self) -> Vec<(String, String, String)> {
        self.run("sacct", &["-c", "-n", "-P", "--format=JobID,JobName,State"])
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (f.len() >= 3).then(|| (f[0].to_string(), f[1].to_string(), f[2].to_string()))
            })
            .collect()
    }

    /// Live jobs (`squeue`): (id, name, state).
    pub fn live_jobs(&self) -> Vec<(String, String, String)> {
        self.run("squeue", &["-h", "-o", "%i|%j|%T"])
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (f.len() >= 3).then(|| (f[0].to_string(), f[1].to_string(), f[2].to_string()))
            })
            .collect()
    }

    /// `scontrol show job ID` as `key=value` pairs.
    pub fn job_fields(&self, id: &str) -> std::collections::HashMap<String, String> {
        self.run("scontrol", &["show", "job", id])
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Stops slurmctld alone (slurmd and jobs go on), as a controller outage does.
    pub fn stop_controller(&self) {
        self.script("stop-ctld");
    }

    /// Starts slurmctld again and waits until it answers.
    pub fn start_controller(&self) {
        self.script("start-ctld");
    }

    fn script(&self, command: &str) {
        let out = Command::new(script())
            .arg(command)
            .arg(self.dir.path())
            .output()
            .expect("run scripts/slurm-cluster.sh");
        assert!(
            out.status.success(),
            "slurm-cluster.sh {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The last `lines` lines of slurmctld's and slurmd's logs (for a failing test's message).
    pub fn log_tail(&self, lines: usize) -> String {
        ["slurmctld.log", "slurmd.log"]
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.path().join("log").join(name))
                    .unwrap_or_else(|e| format!("(unreadable: {e})"));
                let all: Vec<&str> = text.lines().collect();
                let tail = all[all.len().saturating_sub(lines)..].join("\n");
                format!("--- {name}\n{tail}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until `done()` or `limit` passes (then panics with `what`).
    pub fn wait_until(&self, limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(
                started.elapsed() < limit,
                "timed out after {limit:?}: {what}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}
