//! Slurm's client commands, run as child processes with a timeout each:
//! `sbatch` (submit; a refusal keeps Slurm's own message), `squeue` (which
//! of our jobs still live), `scancel` and `sacct` (how a job ended, what it
//! used).

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long one Slurm command may take before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// Slurm said no (its own message, e.g. "Requested node configuration is not available").
    #[error("{command}: {message}")]
    Refused { command: String, message: String },
    #[error(
        "cannot run {command}: {source} (is Slurm installed on this machine? set --slurm-bin-dir)"
    )]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command} did not answer within {seconds} s (is slurmctld up?)")]
    Timeout { command: String, seconds: u64 },
    #[error("{command} printed {output:?}, which tli does not understand")]
    Unexpected { command: String, output: String },
}

/// How a job ended, from `sacct`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalState {
    /// "CANCELLED by 0 (exit 0:0)", "COMPLETED (exit 0:0)", …
    pub state: String,
    /// Whether it was ever given resources (CPUs allocated); `None` when
    /// `sacct` did not say.
    pub started: Option<bool>,
}

/// The last `JobID|State|ExitCode|AllocCPUS` line of `id` in `sacct` output.
pub fn parse_final_state(out: &str, id: &str) -> Option<FinalState> {
    out.lines().rev().find_map(|line| {
        let mut fields = line.split('|');
        let job = fields.next()?.trim();
        let state = fields.next()?.trim();
        let exit = fields.next().unwrap_or("").trim();
        let cpus = fields.next().and_then(|c| c.trim().parse::<u64>().ok());
        (job == id && !state.is_empty()).then(|| FinalState {
            state: format!("{state} (exit {exit})"),
            started: cpus.map(|c| c > 0),
        })
    })
}

/// What an ended job used, from `sacct`.
#[derive(Clone, Debug, PartialEq)]
pub struct Accounted {
    pub elapsed_seconds: u64,
    pub cpus: u32,
    /// `gres/gpu=N` of its allocated TRES, when accounting records GPUs.
    pub gpus: Option<f64>,
    /// `gres/shard=K` of its allocated TRES.
    pub shards: Option<u32>,
}

/// `JobIDRaw|ElapsedRaw|AllocCPUS|AllocTRES` lines → job id → usage. Job
/// steps (`12.batch`) and lines that do not parse are skipped; a job listed
/// twice (requeued) keeps its last line.
pub fn parse_accounting(out: &str) -> HashMap<String, Accounted> {
    out.lines()
        .filter_map(|line| {
            let mut f = line.trim().split('|');
            let id = f.next()?.trim();
            if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit() || c == '_') {
                return None;
            }
            let elapsed_seconds = f.next()?.trim().parse().ok()?;
            let cpus = f.next()?.trim().parse().ok()?;
            let tres = f.next().unwrap_or("").trim();
            let tres_value = |key: &str| {
                tres.split(',')
                    .find_map(|kv| kv.strip_prefix(key))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            Some((
                id.to_string(),
                Accounted {
                    elapsed_seconds,
                    cpus,
                    gpus: tres_value("gres/gpu="),
                    shards: tres_value("gres/shard=").map(|k| k as u32),
                },
            ))
        })
        .collect()
}

/// A job's state as `squeue` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobState {
    /// e.g. PENDING, RUNNING, COMPLETING.
    pub state: String,
    /// Why it waits (or `None`).
    pub reason: String,
}

impl JobState {
    /// The job still runs or will, or its processes may still be ending:
    /// its worker may still report. COMPLETING counts: right after `scancel`
    /// (or a time limit) Slurm shows the job COMPLETING for as long as its
    /// processes take to exit, and that is when a signalled worker saves its
    /// checkpoint.
    pub fn is_alive(&self) -> bool {
        matches!(
            self.state.as_str(),
            "PENDING"
                | "CONFIGURING"
                | "RUNNING"
                | "COMPLETING"
                | "STOPPED"
                | "SUSPENDED"
                | "REQUEUED"
                | "RESIZING"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "SIGNALING"
                | "STAGE_OUT"
        )
    }
}

/// Slurm's client commands.
#[derive(Clone, Debug, Default)]
pub struct Slurm {
    /// Where the commands are; `None` = `PATH`.
    pub bin_dir: Option<PathBuf>,
}

impl Slurm {
    fn command(&self, name: &str) -> Command {
        match &self.bin_dir {
            Some(dir) => Command::new(dir.join(name)),
            None => Command::new(name),
        }
    }

    /// Runs `name args`, feeding `stdin`; returns stdout when it exits 0,
    /// otherwise [`SlurmError::Refused`] with what it printed on stderr.
    fn run(&self, name: &str, args: &[String], stdin: Option<&str>) -> Result<String, SlurmError> {
        let mut child = self
            .command(name)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| SlurmError::Spawn {
                command: name.to_string(),
                source,
            })?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A child that exits early closes its end: its exit status says why.
            let _ = pipe.write_all(text.as_bytes());
        }
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let output = match rx.recv_timeout(COMMAND_TIMEOUT) {
            Ok(Ok(output)) => output,
            Ok(Err(source)) => {
                return Err(SlurmError::Spawn {
                    command: name.to_string(),
                    source,
                })
            }
            Err(_) => {
                // SAFETY: plain kill(2) of our own child's pid.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                return Err(SlurmError::Timeout {
                    command: name.to_string(),
                    seconds: COMMAND_TIMEOUT.as_secs(),
                });
            }
        };
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            return Ok(stdout);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let message = stderr
            .lines()
            .chain(stdout.lines())
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        Err(SlurmError::Refused {
            command: name.to_string(),
            message: if message.is_empty() {
                format!("exited with {}", output.status)
            } else {
                message
            },
        })
    }

    /// Submits a batch script with `args` (`--parsable` is added); returns
    /// the Slurm job id.
    pub fn submit(&self, args: &[String], script: &str) -> Result<String, SlurmError> {
        let mut all = vec!["--parsable".to_string()];
        all.extend_from_slice(args);
        let out = self.run("sbatch", &all, Some(script))?;
        // --parsable prints "<id>" or "<id>;<cluster>".
        let id = out
            .trim()
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit() || c == '_') {
            return Err(SlurmError::Unexpected {
                command: "sbatch".into(),
                output: out,
            });
        }
        Ok(id)
    }

    /// The states of this user's live jobs (pending, running, completing …)
    /// by job id. A job that is not listed has ended.
    pub fn live_jobs(&self) -> Result<HashMap<String, JobState>, SlurmError> {
        // SAFETY: getuid(2) has no preconditions.
        let uid = unsafe { libc::getuid() };
        let out = self.run(
            "squeue",
            &[
                "--noheader".into(),
                format!("--user={uid}"),
                "--format=%i|%T|%r".into(),
            ],
            None,
        )?;
        Ok(parse_squeue(&out))
    }

    /// Cancels a job (no error when it has already ended).
    pub fn cancel(&self, id: &str) -> Result<(), SlurmError> {
        self.run("scancel", &[id.to_string()], None).map(|_| ())
    }

    /// How an ended job ended ("CANCELLED by 0 (exit 0:0)", "TIMEOUT …")
    /// and whether it ever started, from accounting, or from the
    /// job-completion log where there is no accounting database (`sacct
    /// -c`); `None` when neither knows.
    pub fn final_state(&self, id: &str) -> Option<FinalState> {
        let args = |extra: &[&str]| -> Vec<String> {
            let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            a.extend(
                [
                    "--noheader",
                    "--parsable2",
                    "--format=JobID,State,ExitCode,AllocCPUS",
                ]
                .map(String::from),
            );
            a.push(format!("--jobs={id}"));
            a
        };
        let out = self
            .run("sacct", &args(&["-X"]), None)
            .or_else(|_| self.run("sacct", &args(&["-c"]), None))
            .ok()?;
        parse_final_state(&out, id)
    }
}

impl Slurm {
    /// What the ended `jobs` used, from accounting, or from the
    /// job-completion log where there is no accounting database (`sacct
    /// -c`); jobs neither knows (yet) are missing.
    pub fn accounting(&self, jobs: &[String]) -> Result<HashMap<String, Accounted>, SlurmError> {
        let args = |extra: &str| -> Vec<String> {
            vec![
                extra.to_string(),
                "--noheader".into(),
                "--parsable2".into(),
                "--format=JobIDRaw,ElapsedRaw,AllocCPUS,AllocTRES".into(),
                format!("--jobs={}", jobs.join(",")),
            ]
        };
        let out = self
            .run("sacct", &args("-X"), None)
            .or_else(|_| self.run("sacct", &args("-c"), None))?;
        Ok(parse_accounting(&out))
    }
}

/// `squeue --format=%i|%T|%r` lines → job id → state.
pub fn parse_squeue(out: &str) -> HashMap<String, JobState> {
    out.lines()
        .filter_map(|line| {
            let mut fields = line.trim().splitn(3, '|');
            let id = fields.next()?.trim();
            let state = fields.next()?.trim();
            if id.is_empty() || state.is_empty() {
                return None;
            }
            Some((
                id.to_string(),
                JobState {
                    state: state.to_string(),
                    reason: fields.next().unwrap_or("").trim().to_string(),
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_lines_are_read_and_junk_is_skipped() {
        let jobs = parse_squeue(
            "12|RUNNING|None\n13|PENDING|Resources\n\ngarbage\n14|COMPLETING|None\n15|CANCELLED|None\n",
        );
        assert_eq!(jobs.len(), 4);
        assert!(jobs["12"].is_alive());
        assert_eq!(jobs["13"].reason, "Resources");
        assert!(jobs["13"].is_alive());
        assert!(
            jobs["14"].is_alive(),
            "a completing job's worker may still be saving its checkpoint"
        );
        assert!(!jobs["15"].is_alive());
    }

    #[test]
    fn sacct_usage_lines_are_read_with_and_without_gpu_tres() {
        let out = "12|95|4|billing=4,cpu=4,gres/gpu=2,mem=8G,node=1\n\
                   12.batch|95|4|cpu=4,mem=8G\n\
                   13|7|1|\n\
                   14|3|2|cpu=2,gres/shard=3\n\
                   junk\n";
        let a = parse_accounting(out);
        assert_eq!(a.len(), 3, "{a:?}");
        assert_eq!(
            a["12"],
            Accounted {
                elapsed_seconds: 95,
                cpus: 4,
                gpus: Some(2.0),
                shards: None
            }
        );
        assert_eq!(a["13"].gpus, None);
        assert_eq!(a["13"].elapsed_seconds, 7);
        assert_eq!(a["14"].shards, Some(3));
    }

    #[test]
    fn sacct_says_whether_a_job_ever_started() {
        let out = "2|CANCELLED|0:0|0\n1|CANCELLED by 0|0:0|2\n3|COMPLETED|0:0\n";
        let pending = parse_final_state(out, "2").unwrap();
        assert_eq!(pending.state, "CANCELLED (exit 0:0)");
        assert_eq!(pending.started, Some(false));
        assert_eq!(parse_final_state(out, "1").unwrap().started, Some(true));
        assert_eq!(parse_final_state(out, "3").unwrap().started, None);
        assert_eq!(parse_final_state(out, "4"), None);
    }

    #[test]
    fn a_missing_command_says_what_to_do() {
        let slurm = Slurm {
            bin_dir: Some("/nonexistent-slurm".into()),
        };
        let e = slurm.live_jobs().unwrap_err();
        assert!(e.to_string().contains("--slurm-bin-dir"), "{e}");
    }

    #[test]
    fn a_refusal_keeps_the_commands_message() {
        let dir = tempfile::tempdir().unwrap();
        let sbatch = dir.path().join("sbatch");
        std::fs::write(
            &sbatch,
            "#!/bin/sh\ncat > /dev/null\necho 'sbatch: error: Batch job submission failed: Requested node configuration is not available' >&2\nexit 1\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&sbatch, std::fs::Permissions::from_mode(0o755)).unwrap();
        let slurm = Slurm {
            bin_dir: Some(dir.path().into()),
        };
        let e = slurm.submit(&[], "#!/bin/sh\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("Requested node configuration is not available"),
            "{e}"
        );
    }
}
