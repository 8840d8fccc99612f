//! `tli-host`: the full `tli` binary. The host-side commands (`host serve|run|status`,
//! `worker`, `train local`, `profile memory`, `plugins list --local`, `doctor`) wire the
//! runtime (`tli-runtime`), the server (`tli-server`) and Slurm (`tli-slurm`) together; every
//! other command is handed to `tli-cli`.
//!
//! * [`commands`]: the host-side `tli` commands (the arguments, the client
//!   commands and the output shapes are `tli-cli`'s).
//! * [`local_train`]: training plugins in-process for N steps (`tli train local`).
//! * [`profile`]: measured memory of a plugin's trainer (`tli profile memory`).
//! * [`fault_signals`]: process-wide signal settings of the binary (a full disk is an error,
//!   not SIGXFSZ).
//!
//! See docs/ARCHITECTURE.md for the whole map.

pub mod commands;
pub mod fault_signals;
pub mod local_train;
pub mod profile;

// The runtime, the server and Slurm are crates of their own; re-exported under the paths the
// host's commands, tests and benches name them by.
pub use tli_core::{byte_size, digest, error_chain, plugin_configs};
pub use tli_runtime::{
    allocator, elf_check, float_env, libtorch_info, orchestrator, registry, services,
};
pub use tli_server::{api, connections, telemetry, tensorboard, web};
/// Slurm as an executor (the `tli-slurm` crate).
pub use tli_slurm as slurm;
pub use tli_slurm::worker;

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
