//! `tli-core`: the vocabulary every other host crate speaks, with no I/O
//! engine behind it: no libtorch, no SQLite, no gRPC, no command line.
//!
//! * [`ids`]: job and task ids, the store's time unit.
//! * [`job`]: job specifications (models × assets) and the task plan;
//!   [`spec_error`]: why one was refused.
//! * [`state`]: task states and the transitions allowed between them.
//! * [`data_root`]: the directories bar files named by jobs must be under.
//! * [`executor`]: where tasks run: runner threads in the host, or Slurm jobs.
//! * [`plugin_configs`]: `--config` values and which one applies to which plugin.
//! * [`config_schema`]: a config checked against the plugin's own JSON Schema.
//! * [`selection`]: keep a task's best checkpoints and stop it early, by a
//!   validation metric.
//! * [`sweep`]: search spaces, seeded trials and the ASHA rule of sweeps.
//! * [`strategy`]: how many tasks may share a device, and the margin's range.
//! * [`byte_size`]: byte sizes formatted and parsed for people.
//! * [`digest`]: streamed SHA-256 as hex.
//! * [`error_chain`]: an error and its causes as one line for people.
//!
//! It must never depend on tch, rusqlite, tonic or clap: the client binary,
//! the store and the runtime all build on it (the layer rule is checked by
//! `scripts/check-layers.sh`).

pub mod byte_size;
pub mod config_schema;
pub mod data_root;
pub mod digest;
pub mod error_chain;
pub mod executor;
pub mod ids;
pub mod job;
pub mod plugin_configs;
pub mod selection;
pub mod spec_error;
pub mod state;
pub mod strategy;
pub mod suggest;
pub mod sweep;

pub use ids::{now_ms, JobId, TaskId};
