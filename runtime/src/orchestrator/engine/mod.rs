//! The orchestrator proper: accepts jobs, turns them into tasks, admits
//! queued tasks through the memory arbiter, runs each on its own runner
//! thread, and reacts to what runners report. Its state lives in the store,
//! so a host that is killed and started again finds every job; tasks that
//! were running become `interrupted` and (by default) resume from their last
//! good checkpoint.
//!
//! Queries, stops and resumes are in [`control`]; runner reports and the
//! run loops in [`rounds`]; tasks on a remote executor (Slurm, through the
//! [`RemoteExecutor`] seam) in [`dispatch`]; its errors in [`errors`].
//!
//! Call [`Orchestrator::tick`] regularly (or [`Orchestrator::run_until_idle`]; a server
//! uses [`Orchestrator::run_until_shutdown`]).
//!
//! # Locks
//!
//! * No plugin code runs under any of the orchestrator's locks: [`Orchestrator::submit`]
//!   calls `validate_config` and `estimate_memory` before it takes the arbiter's lock
//!   (then only for the arbiter's pure arithmetic), and a trainer is created and stepped
//!   on its runner's own thread. A plugin that takes seconds to answer delays its own
//!   submission, never a scheduling round or `GetResources`.
//! * Locks nest in one order, `arbiter` then `running` then `pace`: a scheduling round
//!   holds `arbiter` while it reads paces for the start order and for short tasks
//!   (recording them holds `running` and `pace` together) and while it adds a started
//!   runner to `running`. No other pair is ever held together; every other lock is
//!   taken alone and released before the next (a forced stop takes `running`, lets it
//!   go, then takes `arbiter`).
//! * Serving ([`serving`]) runs plugin code under two locks of its own, never under the
//!   others: `loading` (one model load at a time; inside it `arbiter` and the resident
//!   map are taken alone, briefly) and each resident model's predictor lock (one request
//!   at a time per model). A slow plugin delays loads and its own model's requests only.

mod containment;
mod control;
mod dispatch;
mod errors;
mod rounds;
pub mod serving;
mod start_order;
mod sweeps;
mod task_data;

pub use control::StateCounts;
pub use dispatch::{
    LeaseError, WorkerAssignment, WorkerLease, EARLY_LOSSES_BEFORE_FAILING, MAX_DISPATCHES,
};
pub use errors::{OrchestratorError, SubmitError};

use task_data::DatasetCache;

use super::arbiter::{Arbiter, Budget, Candidate, Strategy};
use super::executor::ExecutorKind;
use super::job::{JobSpec, TaskAssets};
use super::live::LiveProgress;
use super::observer::{Observers, TaskObserver};
use super::pace::{PaceBook, PaceKey};
use super::remote_executor::RemoteExecutor;
use super::runner::{self, DeviceOccupancy, RunnerContext, RunnerEvent, StopRequest};
use super::state::TaskState;
use super::store::{HistoryQuery, JobHistory, NewTask, Store, StoreError, TaskRow};
use super::task_record::StoreRecord;
use super::{JobId, TaskId};
use crate::registry::{watch, LiveRegistry, PluginRegistry, RegistryError, RescanReport};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;
use tli_core::config_schema;
use tli_data::contracts::ContractBook;
use tli_plugin_api::{capability, Device};

/// How the orchestrator runs tasks (from `tli host run|serve` options).
#[derive(Clone, Debug)]
pub struct OrchestratorConfig {
    pub state_dir: PathBuf,
    pub plugin_dir: PathBuf,
    pub contracts: Option<PathBuf>,
    pub strategy: Strategy,
    /// Device budget in bytes; `None` = the default for the device.
    pub budget_bytes: Option<u64>,
    /// Safety margin added to every estimate (0.1 = 10%).
    pub margin: f64,
    /// The device tasks run on; one arbiter per host for now.
    pub device: Device,
    /// CPU cores shared among running tasks' intra-op threads.
    pub cores: usize,
    /// On the CPU device, the most tasks `auto` runs at once; `None` = one
    /// per core (`cores`).
    pub cpu_auto_limit: Option<usize>,
    /// Resume interrupted tasks at start-up.
    pub resume_interrupted: bool,
    /// Where a job's tasks run when its spec does not say.
    pub default_executor: ExecutorKind,
    /// Where bar files named by submitted jobs must be; `None` = anywhere
    /// (the command line always sets it: `--data-root`, or its defaults).
    pub data_roots: Option<crate::orchestrator::data_root::DataRoots>,
    /// Poll the plugin directory this often and load what is added
    /// (`--watch-plugins`); `None` = only on request (`RescanPlugins`).
    pub watch_plugins: Option<std::time::Duration>,
}

/// A snapshot of the arbiter: see [`Orchestrator::resources`].
#[derive(Clone, Debug)]
pub struct Resources {
    pub budget: Budget,
    pub strategy: Strategy,
    /// Bytes reserved by running tasks (with margin).
    pub reserved_bytes: u64,
    /// Running tasks' reservations, in start order.
    pub running: Vec<Reservation>,
    /// Memory held for resident models and prediction streams: who, bytes.
    pub held: Vec<(String, u64)>,
}

/// One running task's reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub task: TaskId,
    /// What the arbiter holds for it (estimate or measurement, plus margin).
    pub reserved_bytes: u64,
    /// What it measured after its first slice, once known.
    pub measured_bytes: Option<u64>,
    /// The same by component.
    pub measured_memory: Option<super::store::MeasuredMemory>,
}

/// A task with a runner: how to stop it, and where it runs.
struct RunningTask {
    /// Its stop request (a runner thread polls it; a worker hears it in
    /// its heartbeats).
    stop: Arc<AtomicU8>,
    started: Instant,
    runner: Runner,
}

/// Where a running task runs.
enum Runner {
    /// On a runner thread of this host.
    Local(LocalRun),
    /// In a job of the remote executor.
    Remote(dispatch::RemoteTask),
}

/// A runner thread of this host and what it holds.
struct LocalRun {
    /// The plugin's cancellation flag (a forced stop raises it).
    plugin_cancel: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    /// Its device reservation in the store.
    reservation: i64,
    /// Its model's pace key and its steps when it started.
    pace: (PaceKey, u64),
    /// The steps it trains to (its expected remaining time is the steps
    /// left at its model's pace).
    total_steps: u64,
    /// A forced stop gave up on the thread (see `containment`).
    abandoned: bool,
}

impl RunningTask {
    fn remote(&self) -> Option<&dispatch::RemoteTask> {
        match &self.runner {
            Runner::Remote(remote) => Some(remote),
            Runner::Local(_) => None,
        }
    }

    fn local(&self) -> Option<&LocalRun> {
        match &self.runner {
            Runner::Local(local) => Some(local),
            Runner::Remote(_) => None,
        }
    }

    /// A runner thread a forced stop gave up on.
    fn is_abandoned(&self) -> bool {
        self.local().is_some_and(|l| l.abandoned)
    }
}

pub struct Orchestrator {
    config: OrchestratorConfig,
    store: Arc<Store>,
    registry: Arc<LiveRegistry>,
    contracts: ContractBook,
    arbiter: Arc<Mutex<Arbiter>>,
    /// Models kept resident for prediction requests (serving.rs).
    serving: serving::Serving,
    datasets: DatasetCache,
    running: Mutex<HashMap<TaskId, RunningTask>>,
    events_tx: Sender<RunnerEvent>,
    events_rx: Mutex<Receiver<RunnerEvent>>,
    /// Set by a signal handler or `request_shutdown`.
    shutdown: Arc<AtomicBool>,
    live: Arc<LiveProgress>,
    /// Runners on the host's device (for attributing allocator counters).
    occupancy: Arc<DeviceOccupancy>,
    /// The remote executor (Slurm), when the host has one.
    remote: Option<dispatch::Remote>,
    /// Each job's executor (read from its spec once).
    job_executors: Mutex<HashMap<JobId, ExecutorKind>>,
    /// Who hears of what task records record (see [`Orchestrator::observe`]).
    observers: Arc<Observers>,
    /// Measured seconds per step by model, for the start order.
    pace: Mutex<PaceBook>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Orchestrator {
    /// Opens the state directory (taking its lock), loads the plugins,
    /// marks tasks that were running when the last host died as
    /// `interrupted`, and re-queues them if configured to. Local tasks only:
    /// see [`open_with`](Self::open_with) for a remote executor.
    pub fn open(config: OrchestratorConfig) -> Result<Self, OrchestratorError> {
        Self::open_with(config, None)
    }

    /// [`open`](Self::open), with a remote executor (Slurm) for the jobs
    /// that ask for it; the jobs it still runs from a previous host are
    /// re-adopted.
    pub fn open_with(
        config: OrchestratorConfig,
        remote: Option<Arc<dyn RemoteExecutor>>,
    ) -> Result<Self, OrchestratorError> {
        let store = Arc::new(Store::open(&config.state_dir)?);
        let registry = Arc::new(LiveRegistry::new(
            PluginRegistry::scan(&config.plugin_dir)?,
            config.state_dir.join("plugin-libs"),
        ));
        if let Some(poll) = config.watch_plugins {
            watch::spawn(Arc::downgrade(&registry), poll)
                .map_err(OrchestratorError::PluginWatch)?;
        }
        let contracts = ContractBook::load(config.contracts.as_deref())?;
        let budget = Budget {
            device: config.device,
            total_bytes: match config.budget_bytes {
                Some(b) => b,
                None => default_budget(config.device)?,
            },
        };
        // The budget over time, for memory timelines (a row only when it changed).
        store.record_budget(budget.device, budget.total_bytes)?;
        let mut arbiter = Arbiter::new(config.strategy, budget, config.margin);
        if config.device == Device::Cpu {
            // A CPU task needs a core: more at once only time-slice.
            arbiter = arbiter.with_auto_limit(config.cpu_auto_limit.unwrap_or(config.cores));
        }
        let (events_tx, events_rx) = channel();
        let remote = remote.map(dispatch::Remote::new);
        let orchestrator = Self {
            config,
            store,
            registry,
            contracts,
            arbiter: Arc::new(Mutex::new(arbiter)),
            serving: serving::Serving::default(),
            datasets: DatasetCache::default(),
            running: Mutex::new(HashMap::new()),
            events_tx,
            events_rx: Mutex::new(events_rx),
            shutdown: Arc::new(AtomicBool::new(false)),
            live: Arc::new(LiveProgress::new()),
            occupancy: Arc::new(DeviceOccupancy::default()),
            remote,
            job_executors: Mutex::new(HashMap::new()),
            observers: Arc::new(Observers::default()),
            pace: Mutex::new(PaceBook::new()),
        };
        orchestrator.recover()?;
        Ok(orchestrator)
    }

    /// After a start: re-adopts Slurm jobs that still run, marks the other
    /// tasks that were running `interrupted`, and re-queues them if configured to.
    fn recover(&self) -> Result<(), OrchestratorError> {
        let adopted = self.adopt_remote_jobs()?;
        self.fail_crashed_tasks()?;
        let interrupted = self
            .store
            .recover_after_restart("the host stopped while it was running", &adopted)?;
        if !interrupted.is_empty() {
            tracing::info!(
                "{} task(s) were running when the previous host stopped",
                interrupted.len()
            );
        }
        if self.config.resume_interrupted {
            for task in self.store.tasks_in(&[TaskState::Interrupted])? {
                self.store.transition(
                    task.id,
                    TaskState::Queued,
                    &format!("re-queued at host start to {}", self.resume_point(task.id)),
                )?;
            }
        }
        Ok(())
    }

    /// Where a re-queued task goes on from, for its history: "resume from
    /// its checkpoint at step 1200", or "start again from step 0 (it has no
    /// checkpoint)".
    pub(super) fn resume_point(&self, task: TaskId) -> String {
        let newest = self.store.checkpoints(task).ok().and_then(|rows| {
            rows.iter()
                .filter(|r| r.best.is_none())
                .map(|r| r.step)
                .max()
        });
        match newest {
            Some(step) => format!("resume from its checkpoint at step {step}"),
            None => "start again from step 0 (it has no checkpoint)".to_string(),
        }
    }

    /// A job's recorded history for charts (`GetTrainingHistory`): metric
    /// series, reservations and budgets; `None` for an unknown job.
    pub fn training_history(
        &self,
        job: JobId,
        query: &HistoryQuery,
    ) -> Result<Option<JobHistory>, StoreError> {
        self.store.job_history(job, query)
    }

    /// A sweep job's result table (`GetSweep`); `None` for a job that is not
    /// a sweep; an unknown job is `GateError::NoSuchJob`.
    pub fn sweep_table(
        &self,
        job: JobId,
    ) -> Result<Option<super::sweep_gate::SweepTable>, super::sweep_gate::GateError> {
        super::sweep_gate::table(&self.store, job)
    }

    /// Running tasks' latest progress and the plugins' log lines.
    pub fn live(&self) -> &Arc<LiveProgress> {
        &self.live
    }

    /// Wires `observer` in: from now on it hears of every task's progress,
    /// measurements, checkpoints and run boundaries (see [`TaskObserver`]).
    /// Add observers before the first scheduling round to hear every run.
    pub fn observe(&self, observer: Arc<dyn TaskObserver>) {
        self.observers.add(observer);
    }

    /// The job store (observers read task rows from it).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Forgets a task's live progress and tells the observers its run ended
    /// (it ended without a runner's own `forget_live`).
    fn forget_live(&self, task: TaskId) {
        self.live.forget(task);
        self.observers.each(|o| o.run_ended(task));
    }

    /// The record a runner of `task` (here or in a Slurm job) writes through.
    fn store_record(&self, task: TaskId, job: JobId) -> StoreRecord {
        StoreRecord {
            task,
            job,
            store: self.store.clone(),
            live: self.live.clone(),
            events: self.events_tx.clone(),
            observers: self.observers.clone(),
        }
    }

    /// The state directory (store, checkpoints, host lock).
    pub fn state_dir(&self) -> &Path {
        &self.config.state_dir
    }

    /// The plugins loaded as of now.
    pub fn registry(&self) -> Arc<PluginRegistry> {
        self.registry.snapshot()
    }

    /// Loads plugin files added to (or changed in) the plugin directory.
    pub fn rescan_plugins(&self) -> Result<RescanReport, RegistryError> {
        self.registry.rescan()
    }

    /// How many tasks each plugin version has (for `ListPlugins`).
    pub fn plugin_version_use(&self) -> Result<Vec<super::store::PluginVersionUse>, StoreError> {
        self.store.plugin_version_use()
    }

    pub fn budget(&self) -> Budget {
        lock(&self.arbiter).budget().clone()
    }

    /// The directories jobs may name data files under (`None`: anywhere).
    pub fn data_roots(&self) -> Option<&crate::orchestrator::data_root::DataRoots> {
        self.config.data_roots.as_ref()
    }

    /// A flag that makes `run_until_idle` checkpoint every running task and return.
    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    /// Validates a job against the loaded plugins and data, estimates every
    /// task's memory, refuses it if one task alone exceeds the budget, and
    /// stores it with all tasks queued.
    pub fn submit(&self, spec: &JobSpec) -> Result<JobId, SubmitError> {
        self.submit_with_warnings(spec).map(|(job, _)| job)
    }

    /// [`submit`](Self::submit), and what a person should know about the
    /// job's data (bar files with outlier prices), each naming its file.
    pub fn submit_with_warnings(
        &self,
        spec: &JobSpec,
    ) -> Result<(JobId, Vec<String>), SubmitError> {
        spec.check()?;
        let executor = spec.executor.unwrap_or(self.config.default_executor);
        if executor != ExecutorKind::Local
            && self.remote.as_ref().map(|r| r.executor.kind()) != Some(executor)
        {
            return Err(SubmitError::NoSlurmExecutor);
        }
        if executor == ExecutorKind::Local && spec.device != self.config.device {
            return Err(SubmitError::WrongDevice {
                host: self.config.device,
                asked: spec.device,
            });
        }
        if let Some(roots) = &self.config.data_roots {
            roots
                .check_assets(&spec.assets)
                .map_err(|(asset, error)| SubmitError::DataRoot { asset, error })?;
            roots
                .check_features(&spec.features)
                .map_err(|(column, error)| SubmitError::CovariateRoot { column, error })?;
        }
        // A walk-forward job's folds are planned on the bars once, and stored with it.
        let planned = DatasetCache::plan_folds(spec, &self.contracts).map_err(|(i, message)| {
            SubmitError::Asset {
                asset: i,
                label: spec.assets[i].label(),
                message,
            }
        })?;
        let spec = &planned;
        let data = self
            .datasets
            .job(spec, &self.contracts)
            .map_err(|(i, message)| SubmitError::Asset {
                asset: i,
                label: spec.assets[i].label(),
                message,
            })?;
        let registry = self.registry.snapshot();
        // Plugin code (validate_config, estimate_memory) runs before the arbiter's lock is
        // taken: a slow or stuck plugin must not hold up scheduling rounds or GetResources.
        let mut tasks = Vec::new();
        let mut sizes = Vec::new();
        let mut validated: HashMap<usize, String> = HashMap::new();
        if let Some(sweep) = &spec.sweep {
            let plugin = registry
                .resolve(&sweep.plugin)
                .map_err(|e| SubmitError::Model {
                    model: 0,
                    plugin: sweep.plugin.clone(),
                    message: e.to_string(),
                })?;
            sweep.check(
                &plugin.manifest.config_schema,
                &plugin.manifest.default_config,
            )?;
        }
        let rungs = spec.decision_rungs();
        for planned in spec.task_plan() {
            let (m, model) = (planned.model, &spec.models[planned.model]);
            let model_err = |message: String| SubmitError::Model {
                model: m,
                plugin: model.plugin.clone(),
                message,
            };
            let plugin = registry
                .resolve(&model.plugin)
                .map_err(|e| model_err(e.to_string()))?;
            if model.pooled && !plugin.manifest.has_capability(capability::POOLED) {
                return Err(model_err(format!(
                    "plugin {} (plugin API {}) cannot train pooled tasks; drop \"pooled\" to \
                     train one task per asset",
                    plugin.manifest.name, plugin.manifest.api_version
                )));
            }
            let config = match validated.get(&m) {
                Some(c) => c.clone(),
                None => {
                    let config_text = match &model.config {
                        Some(c) => {
                            // The plugin's own schema first: the key named the same
                            // way for every plugin, built here or anywhere else.
                            config_schema::check(&plugin.manifest.config_schema, c).map_err(
                                |violation| SubmitError::Config {
                                    model: m,
                                    plugin: model.plugin.clone(),
                                    violation,
                                },
                            )?;
                            c.to_string()
                        }
                        None => plugin.manifest.default_config.to_string(),
                    };
                    let config = plugin
                        .validate_config(&config_text)
                        .map_err(|e| model_err(e.to_string()))?;
                    if let Some(every) = runner::validation_cadence(&config) {
                        if let Some(rung) = rungs.iter().find(|&&r| r % every != 0) {
                            return Err(SubmitError::RungsMissValidation {
                                trial: m,
                                every,
                                rung: *rung,
                            });
                        }
                    }
                    validated.insert(m, config.clone());
                    config
                }
            };
            let label = spec.assets_label(planned.assets);
            let estimate = plugin
                .estimate_memory(
                    &config,
                    data.shape(planned.assets),
                    &spec.device.to_string(),
                )
                .map_err(|e| model_err(e.to_string()))?;
            let ordinal = tasks.len() as u64;
            let features = match planned.assets {
                TaskAssets::One(unit) => spec.unit_features(unit),
                TaskAssets::Pooled => spec.features.clone(),
            };
            let model_card = data.model_card(
                &plugin.manifest,
                &config,
                &features,
                planned.assets,
                tli_models::card::TrainingRecord {
                    task: String::new(),
                    seed: spec.seed.wrapping_add(ordinal),
                    steps: 0,
                    device: spec.device.to_string(),
                    data: Vec::new(),
                    saved_at_ms: 0,
                },
            );
            sizes.push((model.plugin.clone(), label.clone(), estimate.total()));
            tasks.push(NewTask {
                plugin: plugin.manifest.name.clone(),
                asset: label,
                config_json: config,
                seed: spec.seed.wrapping_add(ordinal),
                total_steps: model.steps,
                priority: model.priority,
                device: spec.device,
                estimate_bytes: estimate.total(),
                // Cost proxy for weighted progress: steps × bytes the task touches.
                cost_weight: model.steps as f64
                    * (estimate.parameters + estimate.activations).max(1) as f64,
                plugin_version: Some(plugin.manifest.version.clone()),
                plugin_checksum: Some(plugin.checksum.clone()),
                model_card,
            });
        }
        // Slurm decides whether a node can hold a Slurm task.
        if executor == ExecutorKind::Local {
            // Pure bookkeeping under the lock: no plugin call, no I/O.
            let arbiter = lock(&self.arbiter);
            for (plugin, asset, estimate) in sizes {
                let bytes = arbiter.with_margin(estimate);
                arbiter
                    .check_fits_alone(bytes)
                    .map_err(|e| SubmitError::TooBig {
                        plugin,
                        asset,
                        message: e.to_string(),
                    })?;
            }
        }
        // The executor is fixed at submission: a restart with another default
        // keeps it. The files read are recorded as they were: a task refuses
        // to start on one that changed since.
        let spec = JobSpec {
            executor: Some(executor),
            inputs: data.inputs(),
            ..spec.clone()
        };
        let spec_json = serde_json::to_string(&spec).map_err(SubmitError::Encode)?;
        let (job, _) = self.store.create_job(&spec.name, &spec_json, &tasks)?;
        tracing::info!(job, tasks = tasks.len(), "job {:?} submitted", spec.name);
        let warnings = data.warnings();
        for warning in &warnings {
            tracing::warn!(job, "{warning}");
        }
        Ok((job, warnings))
    }

    /// One scheduling round: handle runner reports, then start what fits.
    pub fn tick(&self) -> Result<(), OrchestratorError> {
        self.drain_events();
        self.poll_remote();
        let active_ids: Vec<TaskId> = lock(&self.running).keys().copied().collect();
        let queued: Vec<TaskRow> = self
            .store
            .tasks_in(&[TaskState::Queued])?
            .into_iter()
            .filter(|t| !active_ids.contains(&t.id))
            .collect();
        if self.shutdown.load(Ordering::Acquire) {
            return Ok(());
        }
        let (remote_queued, queued): (Vec<TaskRow>, Vec<TaskRow>) = self
            .admissible(queued)
            .into_iter()
            .partition(|t| self.executor_of(t.job_id) != ExecutorKind::Local);
        self.dispatch_remote_tasks(remote_queued);
        if queued.is_empty() {
            return Ok(());
        }
        let local_running = active_ids.len() - self.remote_count().min(active_ids.len());
        let mut arbiter = lock(&self.arbiter);
        let queued = self.fail_never_fitting(queued, &arbiter);
        let ranks = self.start_ranks(&queued, arbiter.max_running());
        let candidates: Vec<Candidate> = queued
            .iter()
            .map(|t| Candidate {
                task: t.id,
                priority: t.priority,
                order: ranks.get(&t.id).copied().unwrap_or(t.id as u64),
                // A task that ran before is admitted on what it measured.
                bytes: arbiter.with_margin(containment::admission_bytes(t)),
            })
            .collect();
        // A task beside full slots has a thread of its own and no share of the cores.
        let beside = arbiter.running_beside().len();
        let chosen = arbiter.select(&candidates);
        let running_after = local_running.saturating_sub(beside) + chosen.len();
        let threads = (self.config.cores / running_after.max(1)).max(1) as i32;
        let cap = containment::memory_cap(&arbiter);
        let bytes_of = |id: TaskId| {
            candidates
                .iter()
                .find(|c| c.task == id)
                .map(|c| c.bytes)
                .unwrap_or(0)
        };
        let mut failed = Vec::new();
        for id in chosen {
            let Some(task) = queued.iter().find(|t| t.id == id) else {
                continue;
            };
            if !self.start_or_fail(
                &mut arbiter,
                task,
                bytes_of(id),
                threads,
                cap,
                String::new(),
            ) {
                failed.push(id);
            }
        }
        if !arbiter.short_lane_open() {
            return Ok(());
        }
        // Every place taken: a short task may start beside them (pace.rs, arbiter.rs).
        let waiting: Vec<&TaskRow> = queued
            .iter()
            .filter(|t| !failed.contains(&t.id) && !arbiter.is_running(t.id))
            .collect();
        let holders = arbiter.slot_holders();
        let short = self.short_tasks(&waiting, &holders);
        let names: HashSet<TaskId> = short.keys().copied().collect();
        let waiting_ids: HashSet<TaskId> = waiting.iter().map(|t| t.id).collect();
        let waiting_candidates: Vec<Candidate> = candidates
            .iter()
            .filter(|c| waiting_ids.contains(&c.task))
            .copied()
            .collect();
        let Some(id) = arbiter.select_short(&waiting_candidates, &names) else {
            return Ok(());
        };
        let Some(task) = waiting.iter().find(|t| t.id == id) else {
            arbiter.release(id);
            return Ok(());
        };
        let expected = short.get(&id).copied().unwrap_or_default();
        let note = format!(
            "; beside the {} task(s) holding every slot: expected to take {expected:.2} s \
             (a short task), on one intra-op thread",
            holders.len()
        );
        tracing::info!(task = id, "starting a short task beside full slots{note}");
        self.start_or_fail(&mut arbiter, task, bytes_of(id), 1, cap, note);
        Ok(())
    }

    /// Starts a task the arbiter admitted; when it cannot start, releases its
    /// admission and fails it with the reason. True when it started.
    fn start_or_fail(
        &self,
        arbiter: &mut Arbiter,
        task: &TaskRow,
        bytes: u64,
        threads: i32,
        cap: super::memory_watch::MemoryCap,
        start_note: String,
    ) -> bool {
        let Err(message) = self.start(task, bytes, threads, cap, start_note) else {
            return true;
        };
        arbiter.release(task.id);
        tracing::error!(task = task.id, "could not start: {message}");
        let _ = self.store.transition(task.id, TaskState::Failed, &message);
        false
    }

    /// Submits queued remote tasks, highest priority first, up to the
    /// executor's limit of jobs at once.
    fn dispatch_remote_tasks(&self, mut queued: Vec<TaskRow>) {
        let Some(remote) = &self.remote else {
            for task in queued {
                let _ = self.store.transition(
                    task.id,
                    TaskState::Failed,
                    "its job asks for the Slurm executor, which this host no longer has; \
                     restart the host with --executor slurm and resume the job",
                );
            }
            return;
        };
        queued.sort_by_key(|t| (std::cmp::Reverse(t.priority), t.id));
        let name = remote.executor.name();
        let room = remote
            .executor
            .capacity()
            .saturating_sub(self.remote_count());
        let mut tried = 0;
        let began = Instant::now();
        for task in queued.iter().take(room) {
            // A round submits for a bounded time; the next round (within
            // milliseconds) goes on, so runner events and local tasks are not
            // held up behind a thousand submissions.
            if !remote.may_submit() || began.elapsed() >= dispatch::SUBMIT_BUDGET {
                break;
            }
            tried += 1;
            match self.dispatch_remote(task) {
                Ok(()) => {}
                Err(dispatch::DispatchFailure::Transient(why)) => {
                    tracing::warn!(task = task.id, "waiting for {name}: {why}");
                    tried -= 1;
                    break;
                }
                Err(dispatch::DispatchFailure::Refused(message)) => {
                    tracing::error!(task = task.id, "could not submit to {name}: {message}");
                    let _ = self.store.transition(task.id, TaskState::Failed, &message);
                }
            }
        }
        // What the tasks left queued wait for.
        let waiting = lock(&remote.waiting).clone();
        for (i, task) in queued.iter().enumerate().skip(tried) {
            let note = match &waiting {
                Some(why) => format!("waiting for {name}: {why}"),
                None if i >= room => format!(
                    "waiting for a {name} slot: this host holds its limit of {} {name} jobs \
                     at once (--slurm-max-jobs)",
                    remote.executor.capacity()
                ),
                None => continue,
            };
            self.live.set_note(task.id, Some(note));
        }
    }

    fn start(
        &self,
        task: &TaskRow,
        bytes: u64,
        threads: i32,
        cap: super::memory_watch::MemoryCap,
        start_note: String,
    ) -> Result<(), String> {
        let (spec, dataset, inputs) = self.task_inputs(task)?;
        let (plugin, replaces_version) = runner::resolve_plugin(&self.registry.snapshot(), task)?;
        if replaces_version.is_some() {
            self.store
                .set_task_plugin(task.id, &plugin.manifest.version, &plugin.checksum)
                .map_err(|e| e.to_string())?;
        }
        let reservation = self
            .store
            .reserve(task.id, self.config.device, bytes)
            .map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicU8::new(StopRequest::None as u8));
        let plugin_cancel = Arc::new(AtomicBool::new(false));
        let ctx = RunnerContext {
            task: task.clone(),
            plugin,
            replaces_version,
            dataset,
            inputs,
            record: Arc::new(self.store_record(task.id, task.job_id)),
            checkpoint_root: self
                .config
                .state_dir
                .join("checkpoints")
                .join(format!("task-{}", task.id)),
            policy: spec.checkpoint.clone(),
            selection: spec.selection_of(task.ordinal as usize),
            rungs: spec.decision_rungs(),
            slice_steps: spec.slice_steps,
            stop: stop.clone(),
            plugin_cancel: plugin_cancel.clone(),
            threads,
            occupancy: self.occupancy.clone(),
            memory_cap: Some(cap),
            start_note,
        };
        let handle = match runner::spawn(ctx, self.events_tx.clone()) {
            Ok(h) => h,
            Err(e) => {
                let _ = self.store.release(reservation);
                return Err(format!("cannot start a runner thread: {e}"));
            }
        };
        lock(&self.running).insert(
            task.id,
            RunningTask {
                stop,
                started: Instant::now(),
                runner: Runner::Local(LocalRun {
                    plugin_cancel,
                    handle: Some(handle),
                    reservation,
                    pace: (PaceKey::of(task), task.steps_done),
                    total_steps: task.total_steps,
                    abandoned: false,
                }),
            },
        );
        Ok(())
    }
}

/// The default budget of a device: half of RAM for the CPU; the device's
/// total memory minus 10% for CUDA.
fn default_budget(device: Device) -> Result<u64, OrchestratorError> {
    let Some(index) = device.cuda_index() else {
        return super::arbiter::cpu_budget_from_meminfo(
            super::arbiter::DEFAULT_CPU_BUDGET_FRACTION,
        )
        .map_err(OrchestratorError::CpuBudget);
    };
    let info = super::cuda::mem_info(index)
        .map_err(|source| OrchestratorError::DeviceMemory { device, source })?;
    Ok(info.total / 10 * 9)
}
