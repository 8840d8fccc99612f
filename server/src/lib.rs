//! `tli-server`: what `tli host serve` serves. The gRPC control API (`tli.v1`) over the
//! orchestrator, the HTTP side (status page, its JSON, `/metrics`), and the per-task consumers
//! the engine tells through its `TaskObserver` seam.
//!
//! * [`api`]: the gRPC services (training, plugins, resources, the worker service), their
//!   limits, authentication and error mapping.
//! * [`connections`]: how many connections the listeners hold and for how long (descriptors
//!   are kept for the store and checkpoints; silent connections make room for talking ones).
//! * [`web`]: the status page, `/api/status` and `/metrics` over HTTP/1.1.
//! * [`telemetry`]: the Prometheus metrics (RPCs, checkpoint writes, state sampled at scrape);
//!   one `Telemetry` per server, no process-global state.
//! * [`tensorboard`]: every task's TensorBoard event files (metrics, rate, memory,
//!   hyperparameters).
//!
//! Never depends on Slurm (`tli-slurm`) or on clap (checked by `scripts/check-layers.sh`): the
//! binary wires a Slurm executor into the engine, and the worker service speaks only the
//! engine's and `tli-wire`'s types.

pub mod api;
pub mod connections;
pub mod telemetry;
pub mod tensorboard;
pub mod web;
