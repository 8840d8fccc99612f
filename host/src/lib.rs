//! `tli-host`: the tli host process and command line.
//!
//! * [`registry`]: finds, checks and loads plugin libraries; wraps their calls.
//! * [`elf_check`]: refuses truncated or foreign files before `dlopen` sees them.
//! * [`error_chain`]: an error and its causes as one line for people.
//! * [`services`]: what the host offers plugins (logging, cancellation).
//! * [`orchestrator`]: jobs, tasks, the store, checkpoints, the memory arbiter.
//! * [`local_train`]: training plugins in-process for N steps (`tli train local`).
//! * [`profile`]: measured memory of a plugin's trainer (`tli profile memory`).
//! * [`plugin_configs`]: `--config` values and which one applies to which plugin.
//! * [`libtorch_info`]: which libtorch this process runs on, and CUDA.
//! * [`byte_size`]: byte sizes formatted and parsed for people.
//! * [`allocator`]: glibc malloc settings (`TLI_MMAP_THRESHOLD`): resident memory that follows live tensors.
//! * [`api`]: the gRPC control API (`tli.v1`) over the orchestrator (`tli host serve`).
//! * [`slurm`]: Slurm as an executor: sbatch/squeue/scancel, requests from estimates.
//! * [`worker`]: `tli worker`, one task in a Slurm job, recording through the host.
//! * [`tensorboard`]: every task's TensorBoard event files (metrics, rate, memory, hyperparameters).
//! * [`telemetry`]: the Prometheus metrics (RPCs, checkpoint writes, state sampled at scrape).
//! * [`web`]: the HTTP side of `tli host serve`: the status page, its JSON, `/metrics`.
//! * [`commands`]: the host-side `tli` commands (the arguments, the client
//!   commands and the output shapes are `tli-cli`'s).
//!
//! See docs/ARCHITECTURE.md for the whole map.

pub mod allocator;
pub mod api;
pub mod commands;
pub mod elf_check;
pub mod fault_signals;
pub mod libtorch_info;
pub mod local_train;
pub mod orchestrator;
pub mod profile;
pub mod registry;
pub mod services;
pub mod slurm;
pub mod telemetry;
pub mod tensorboard;
pub mod web;
pub mod worker;

// Moved to tli-core; re-exported here while the rest of the host still names them this way.
pub use tli_core::{byte_size, digest, error_chain, plugin_configs};

use std::path::PathBuf;

/// Where plugins are looked for when neither `--plugin-dir` nor
/// `TLI_PLUGIN_DIR` is given, next to the `tli` binary: `plugins/` if it
/// exists, else `../lib/tli/plugins` (the layout of `make install`) if it
/// exists, else the binary's own directory (where cargo builds the plugins).
pub fn default_plugin_dir() -> PathBuf {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("."));
    [exe_dir.join("plugins"), exe_dir.join("../lib/tli/plugins")]
        .into_iter()
        .find(|dir| dir.is_dir())
        // `…/bin/../lib/tli/plugins` reads better as `…/lib/tli/plugins`.
        .map(|dir| dir.canonicalize().unwrap_or(dir))
        .unwrap_or(exe_dir)
}
