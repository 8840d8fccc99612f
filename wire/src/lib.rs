//! `tli-wire`: the `tli.v1` messages ↔ tli's own types, for both ends of the
//! API: the server (`tli host serve`) and every client (the `tli` command line,
//! the client-only `tli-client` binary).
//!
//! * [`bars`]: `Bars` ↔ bar tables (checked like a file's rows) and `PredictionRows` ↔
//!   prediction tables, for `Predict` and `PredictStream`.
//! * [`convert`]: task states both ways, ids, measurements, state changes.
//! * [`job_request`]: `StartTrainingRequest` ↔ [`JobSpec`](tli_core::job::JobSpec),
//!   both directions sharing their rules and bounds.
//! * [`sweep`]: `Sweep` ↔ [`SweepSpec`](tli_core::sweep::SweepSpec).
//! * [`typed_configs`]: the typed config messages of the built-in plugins ↔
//!   the plugins' JSON configs (frozen: new plugins use the generic config).
//! * [`history`]: `GetTrainingHistory` ↔ the store's job history.
//! * [`worker_inputs`]: a task's inputs (plugin-api `TaskInputs`: every dataset and the side
//!   table) ↔ the worker service's `WorkerInputs`, exactly; the host's worker service and
//!   `tli worker` both use it.
//!
//! No libtorch, no engine: it builds on `tli-core`, `tli-store`'s row types
//! `tli-plugin-api`'s data types and `tli-proto` only (checked by `scripts/check-layers.sh`).

pub mod backtest;
pub mod bars;
pub mod convert;
pub mod history;
pub mod job_request;
pub mod sweep;
pub mod typed_configs;
pub mod worker_inputs;
