//! The orchestrator: multi-model, multi-asset jobs run as tasks on runner
//! threads, admitted by a device-memory arbiter, checkpointed atomically and
//! recorded in a durable SQLite store so that a restarted host resumes them.
//!
//! * [`state`]: task states and the transitions allowed between them.
//! * [`store`]: the SQLite store (jobs, tasks, transitions, metrics,
//!   checkpoints, reservations), WAL with `synchronous=FULL`.
//! * [`checkpoint`]: atomic checkpoint directories with checksums, fallback
//!   to the previous good one, retention.
//! * [`arbiter`]: per-device memory budget and admission (sequential,
//!   parallel, auto-packed without starvation).
//! * [`cuda`]: device memory from the CUDA runtime and libtorch's caching
//!   allocator through a small C++ shim (reports "no CUDA" without a GPU).
//! * [`job`]: job specifications (models × assets).
//! * [`data_root`]: the directories bar files named by jobs must be under.
//! * [`executor`]: where tasks run: runner threads in the host, or Slurm jobs.
//! * [`runner`]: the per-task thread (slices, stop requests, checkpoints).
//! * [`memory_watch`]: a running task's memory measured again as it runs,
//!   and the cap above which it fails.
//! * [`crash_blame`]: a fatal signal on a runner thread names its task, so
//!   the next start fails that task instead of resuming it into a crash loop.
//! * [`observer`]: the seam to per-task consumers outside the engine
//!   (TensorBoard, Prometheus): [`TaskObserver`](observer::TaskObserver).
//! * [`remote_executor`]: the seam to executors beyond this host (Slurm):
//!   [`RemoteExecutor`](remote_executor::RemoteExecutor) dispatches, polls,
//!   cancels and adopts batch jobs; the engine keeps the leases.
//! * [`sweep_gate`]: a sweep trial's verdict at a rung and a sweep's result
//!   table, from what the store recorded (the rules are `tli_core::sweep`'s).
//! * [`task_record`]: where a runner records its task: the store (a runner
//!   thread in the host) or the host's worker service (a `tli worker`).
//! * [`engine`]: the [`Orchestrator`](engine::Orchestrator) tying it together;
//!   its `control` part answers queries, stops and resumes (the rules of
//!   which task may be stopped or resumed are [`state::TaskState`]'s).
//! * [`listing`]: job listings: filters, order, pages.
//! * [`progress`]: per-task and cost-weighted per-job progress.
//! * [`live`]: running tasks' latest progress in memory
//!   ([`LiveProgress`](live::LiveProgress)), and plugin log lines fanned out
//!   to watchers.

pub mod arbiter;
pub mod core_sharing;
mod cpu_budget;
pub mod crash_blame;
pub mod cuda;
pub mod engine;
pub mod listing;
pub mod live;
pub mod memory_watch;
pub mod observer;
pub mod pace;
pub mod progress;
pub mod remote_executor;
pub mod runner;
pub mod sweep_gate;
pub mod task_record;

// Moved to tli-core; re-exported here while the rest of the host still names them this way.
pub use tli_core::ids::{now_ms, JobId, TaskId};
pub use tli_core::{data_root, executor, job, selection, state, sweep};
// Moved to tli-store; re-exported the same way.
pub use tli_store as store;
pub use tli_store::checkpoint;
