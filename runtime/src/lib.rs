//! `tli-runtime`: what runs plugins. The orchestrator (jobs as tasks on runner threads,
//! admitted by the device-memory arbiter, checkpointed atomically, recorded in the store), the
//! plugin registry that finds, checks and loads plugin libraries, and the services the host
//! offers plugins.
//!
//! * [`orchestrator`]: the engine, the arbiter, the runners, the CUDA memory shim, and the
//!   seams to what lies outside it: [`TaskObserver`](orchestrator::observer::TaskObserver)
//!   (TensorBoard, Prometheus), [`RemoteExecutor`](orchestrator::remote_executor::RemoteExecutor)
//!   (Slurm), [`TaskRecord`](orchestrator::task_record::TaskRecord) (a runner thread in the
//!   host, or a worker recording through the host).
//! * [`models`]: trained models in use: a model card from a training run, a model loaded
//!   from its bundle and applied to bars.
//! * [`registry`]: finds, checks and loads plugin libraries; wraps their calls.
//! * [`elf_check`]: refuses truncated or foreign files before `dlopen` sees them.
//! * [`services`]: what the host offers plugins (logging, cancellation, progress).
//! * [`libtorch_info`]: which libtorch this process runs on, and CUDA.
//! * [`allocator`]: resident memory that follows live tensors (a heap trim after each
//!   task slice; `TLI_MMAP_THRESHOLD` for a fixed mmap threshold).
//!
//! Never depends on the server (gRPC, HTTP: `tli-server`, `tli-proto`, `tli-wire`, `tonic`),
//! on Slurm (`tli-slurm`) or on clap: those sit above it and plug in through the seams
//! (checked by `scripts/check-layers.sh` against docs/ARCHITECTURE.md).

pub mod allocator;
pub mod elf_check;
pub mod float_env;
pub mod libtorch_info;
pub mod models;
pub mod orchestrator;
pub mod registry;
pub mod services;
