//! A worker's life: attach under its lease, check the plugin, start the
//! heartbeat and signal watchers, train with the runner, report the end.

use super::client::HostConnection;
use super::record::RemoteRecord;
use super::{WorkerError, HEARTBEAT_INTERVAL};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tli_core::selection::Selection;
use tli_proto::v1 as pb;
use tli_runtime::orchestrator::job::CheckpointPolicy;
use tli_runtime::orchestrator::runner::{
    self, DeviceOccupancy, Outcome, RunnerContext, StopRequest,
};
use tli_runtime::orchestrator::state::TaskState;
use tli_runtime::orchestrator::store::TaskRow;
use tli_runtime::orchestrator::task_record::TaskRecord;
use tli_runtime::registry::PluginRegistry;
use tli_wire::worker_inputs as wire;

/// What `tli worker` is started with (by the batch script).
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    pub host_url: String,
    pub task: i64,
    pub dispatch: i64,
    pub token: String,
    pub plugin_dir: PathBuf,
    /// libtorch intra-op threads; `None` = what the host says.
    pub threads: Option<u32>,
    /// How long calls are retried while the host cannot be reached.
    pub reconnect_for: Duration,
}

/// The last signal received (0 = none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    SIGNAL.store(signal, Ordering::SeqCst);
}

fn install_signal_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // Every signal that is fatal by default and that Slurm, a terminal or an
    // administrator sends: each ends the worker with a checkpoint.
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        for signal in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGHUP,
            libc::SIGQUIT,
        ] {
            libc::signal(signal, handler);
        }
    }
}

fn stop_from_wire(stop: i32) -> StopRequest {
    match pb::WorkerStop::try_from(stop) {
        Ok(pb::WorkerStop::Graceful) => StopRequest::Graceful,
        Ok(pb::WorkerStop::Forced) => StopRequest::Forced,
        Ok(pb::WorkerStop::Shutdown) => StopRequest::Shutdown,
        _ => StopRequest::None,
    }
}

/// Runs the worker's task to its end; the outcome has been recorded by the host.
pub fn run_worker(options: &WorkerOptions) -> Result<Outcome, WorkerError> {
    install_signal_handlers();
    let host = Arc::new(HostConnection::new(
        &options.host_url,
        &options.token,
        options.reconnect_for,
    )?);
    let lease = pb::WorkerLease {
        task_id: options.task,
        dispatch_id: options.dispatch,
    };
    let attach = pb::AttachWorkerRequest {
        lease: Some(lease),
        node: crate::host_name(),
        slurm_job_id: std::env::var("SLURM_JOB_ID").unwrap_or_default(),
    };
    let response = host.call("attaching to the host", |mut client| {
        let request = attach.clone();
        async move { client.attach_worker(request).await }
    })?;
    let task = response
        .task
        .ok_or_else(|| WorkerError::Setup("the host sent no task".into()))?;
    let inputs = wire::inputs_from_wire(response.inputs.unwrap_or_default())?;
    let record = Arc::new(RemoteRecord::new(
        host.clone(),
        options.task,
        options.dispatch,
    ));
    tracing::info!(
        task = task.task_id,
        "attached: {} on {}, {} steps, checkpoints in {}",
        task.plugin,
        task.device,
        task.total_steps,
        task.checkpoint_dir
    );

    let registry = PluginRegistry::scan(&options.plugin_dir)?;
    // The version the host chose, when this node has it; else the newest (refused below).
    let plugin = registry
        .get_version(&task.plugin, &task.plugin_version)
        .or_else(|| registry.get(&task.plugin))
        .cloned();
    let found = plugin.as_ref().map(|p| p.manifest.version.as_str());
    if let Some(why) = plugin_refusal(&task, found, &options.plugin_dir, &registry.names()) {
        tracing::error!("{why}");
        // The host reaps the task when it records this end.
        if let Err(e) = record.transition(TaskState::Failed, &why) {
            tracing::error!("the refusal could not be recorded: {e}");
        }
        return Ok(Outcome::Failed(why));
    }
    let Some(plugin) = plugin else {
        return Ok(Outcome::Failed(format!(
            "plugin {} is not loaded",
            task.plugin
        )));
    };

    let device = task
        .device
        .parse()
        .map_err(|e| WorkerError::Setup(format!("device {:?} from the host: {e}", task.device)))?;
    let policy = task.checkpoint.unwrap_or_default();
    let selection = if task.selection_json.is_empty() {
        Selection::default()
    } else {
        serde_json::from_str(&task.selection_json).map_err(|e| {
            WorkerError::Setup(format!("keep_best/early_stopping from the host: {e}"))
        })?
    };
    let row = TaskRow {
        id: task.task_id,
        job_id: task.job_id,
        ordinal: 0,
        plugin: task.plugin.clone(),
        asset: String::new(),
        config_json: task.config_json.clone(),
        seed: task.seed,
        total_steps: task.total_steps,
        priority: 0,
        device,
        estimate_bytes: 0,
        measured_bytes: None,
        cost_weight: 0.0,
        state: TaskState::Queued,
        steps_done: 0,
        error: None,
        created_ms: 0,
        updated_ms: 0,
        oom_requeues: task.oom_requeues,
        measured_memory: None,
        plugin_version: Some(task.plugin_version.clone()),
        plugin_checksum: None,
    };
    let stop = Arc::new(AtomicU8::new(StopRequest::None as u8));
    let plugin_cancel = Arc::new(AtomicBool::new(false));
    let threads = options.threads.unwrap_or(task.threads).max(1);
    let ctx = RunnerContext {
        task: row,
        plugin,
        replaces_version: None,
        dataset: inputs.datasets[0].clone(),
        inputs,
        record: record.clone(),
        checkpoint_root: PathBuf::from(&task.checkpoint_dir),
        policy: CheckpointPolicy::with_intervals(
            Some(policy.every_steps),
            Some(policy.every_seconds),
            (policy.keep as usize).max(1),
        ),
        slice_steps: task.slice_steps.max(1),
        selection,
        rungs: task.rungs.clone(),
        stop: stop.clone(),
        plugin_cancel: plugin_cancel.clone(),
        threads: threads as i32,
        occupancy: Arc::new(DeviceOccupancy::default()),
        // Slurm gave the job its memory; the host's budget is not this node's.
        memory_cap: None,
        start_note: String::new(),
    };

    let done = Arc::new(AtomicBool::new(false));
    let heartbeat = spawn_heartbeat(
        record.clone(),
        stop.clone(),
        plugin_cancel.clone(),
        done.clone(),
    );
    let outcome = runner::run(&ctx);
    done.store(true, Ordering::Release);
    let _ = heartbeat.join();
    // The runner recorded the end (the host reaps the task on that record).
    tracing::info!(task = task.task_id, "ended: {outcome:?}");
    Ok(outcome)
}

/// Why this worker cannot train `task` with the plugin version it `found`
/// in its plugin directory (`None`: not there), if it cannot.
fn plugin_refusal(
    task: &pb::WorkerTask,
    found: Option<&str>,
    plugin_dir: &std::path::Path,
    loaded: &[&str],
) -> Option<String> {
    match found {
        None => Some(format!(
            "plugin {} is not in this worker's plugin directory {} (loaded: {}); install it on \
             every node",
            task.plugin,
            plugin_dir.display(),
            if loaded.is_empty() {
                "none".to_string()
            } else {
                loaded.join(", ")
            }
        )),
        Some(version) if version != task.plugin_version => Some(format!(
            "plugin {} is version {version} on this node, the host loaded {}; install the same \
             version on every node",
            task.plugin, task.plugin_version
        )),
        Some(_) => None,
    }
}

/// Every [`HEARTBEAT_INTERVAL`]: live progress and log lines out, the
/// host's stop request in; Slurm's signals become an `interrupted` stop.
fn spawn_heartbeat(
    record: Arc<RemoteRecord>,
    stop: Arc<AtomicU8>,
    plugin_cancel: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let tick = Duration::from_millis(50);
        let mut since_beat = HEARTBEAT_INTERVAL;
        let mut host_away = false;
        while !done.load(Ordering::Acquire) {
            let signal = SIGNAL.swap(0, Ordering::SeqCst);
            if signal != 0 {
                tracing::warn!("signal {signal}: checkpointing, then ending as interrupted");
                let _ = stop.compare_exchange(
                    StopRequest::None as u8,
                    StopRequest::Preempted as u8,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
            if since_beat >= HEARTBEAT_INTERVAL {
                since_beat = Duration::ZERO;
                match record.send_heartbeat() {
                    Ok(response) => {
                        if host_away {
                            tracing::info!("heartbeat: the host answers again");
                        }
                        host_away = false;
                        let asked = stop_from_wire(response.stop);
                        if asked != StopRequest::None {
                            stop.store(asked as u8, Ordering::Release);
                            if asked == StopRequest::Forced {
                                plugin_cancel.store(true, Ordering::Release);
                            }
                        }
                    }
                    Err(status) if status.code() == tonic::Code::FailedPrecondition => {
                        tracing::error!("the host refused this worker: {}", status.message());
                        stop.store(StopRequest::Forced as u8, Ordering::Release);
                        plugin_cancel.store(true, Ordering::Release);
                    }
                    Err(status) => {
                        // Once per outage (the record calls say when it lasts).
                        if !host_away {
                            tracing::warn!(
                                "heartbeat: {}: {}; retrying every {:.0}s",
                                status.code(),
                                status.message(),
                                HEARTBEAT_INTERVAL.as_secs_f64()
                            );
                        }
                        host_away = true;
                    }
                }
            }
            std::thread::sleep(tick);
            since_beat += tick;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_refuses_a_missing_plugin_or_another_version() {
        let task = pb::WorkerTask {
            plugin: "dqn".into(),
            plugin_version: "0.3.0".into(),
            ..Default::default()
        };
        let dir = std::path::Path::new("/opt/tli/plugins");
        assert_eq!(plugin_refusal(&task, Some("0.3.0"), dir, &["dqn"]), None);
        let other = plugin_refusal(&task, Some("0.2.0"), dir, &["dqn"]).unwrap();
        assert!(
            other.contains("version 0.2.0 on this node, the host loaded 0.3.0"),
            "{other}"
        );
        let missing = plugin_refusal(&task, None, dir, &["ppo"]).unwrap();
        assert!(
            missing
                .contains("not in this worker's plugin directory /opt/tli/plugins (loaded: ppo)"),
            "{missing}"
        );
    }
}
