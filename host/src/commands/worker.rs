//! `tli worker`: one Slurm task (see [`crate::worker`]). Exits 0 when the
//! task completed, stopped or was interrupted (its state is recorded by the
//! host), 1 when it failed or the worker could not run it.

use crate::orchestrator::runner::Outcome;
use crate::worker::run::{run_worker, WorkerOptions};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;
use tli_cli::args::WorkerArgs;

pub(super) fn worker(plugin_dir: &Path, args: &WorkerArgs) -> Result<()> {
    let token = std::fs::read_to_string(&args.token_file)
        .with_context(|| format!("--token-file {}: cannot read", args.token_file.display()))?;
    if token.trim().is_empty() {
        bail!(
            "--token-file {}: the file is empty",
            args.token_file.display()
        );
    }
    let options = WorkerOptions {
        host_url: args.host_url.clone(),
        task: args.task,
        dispatch: args.dispatch,
        token: token.trim().to_string(),
        plugin_dir: plugin_dir.to_path_buf(),
        threads: args.threads,
        reconnect_for: Duration::from_secs(args.reconnect_seconds),
    };
    match run_worker(&options).with_context(|| format!("worker of task {}", args.task))? {
        Outcome::Failed(why) => bail!("task {} failed: {why}", args.task),
        _ => Ok(()),
    }
}
