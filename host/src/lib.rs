//! `tli-host`: the tli host process and command line.
//!
//! * [`data`]: market data in (DBN, Parquet, CSV), contracts, synthetic bars, features.
//! * [`registry`]: finds, checks and loads plugin libraries; wraps their calls.
//! * [`elf_check`]: refuses truncated or foreign files before `dlopen` sees them.
//! * [`services`]: what the host offers plugins (logging, cancellation).
//! * [`orchestrator`]: jobs, tasks, the store, checkpoints, the memory arbiter.
//! * [`local_train`]: training plugins in-process for N steps (`tli train local`).
//! * [`sample_data`]: the deterministic synthetic dataset used offline.
//! * [`libtorch_info`]: which libtorch this process runs on, and CUDA.
//! * [`units`]: byte sizes formatted and parsed for people.
//! * [`api`]: the gRPC control API (`tli.v1`) over the orchestrator (`tli host serve`).
//! * [`cli`] and [`commands`]: the `tli` command line (clap) and its output.
//!
//! See docs/ARCHITECTURE.md for the whole map.

pub mod api;
pub mod cli;
pub mod commands;
pub mod data;
pub mod elf_check;
pub mod libtorch_info;
pub mod local_train;
pub mod orchestrator;
pub mod registry;
pub mod sample_data;
pub mod services;
pub mod units;

use std::path::PathBuf;

/// Where plugins are looked for when neither `--plugin-dir` nor
/// `TLI_PLUGIN_DIR` is given: `<dir of tli>/plugins` if it exists, else the
/// directory of the `tli` binary itself (where cargo puts the plugins it builds).
pub fn default_plugin_dir() -> PathBuf {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("."));
    let nested = exe_dir.join("plugins");
    if nested.is_dir() {
        nested
    } else {
        exe_dir
    }
}
