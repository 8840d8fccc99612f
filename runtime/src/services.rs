//! The host side of `HostServicesApi`: plugin log lines go into the host's
//! `tracing` log (target `plugin`, with the plugin and task attached), and a
//! shared flag tells the plugin when to stop (each poll of it is also a
//! point where a runner thread offers its core: `orchestrator::core_sharing`).
//!
//! When the task runs under the orchestrator, lines at `info` and above also
//! go to a [`TaskLogSink`] (the orchestrator's: the job's watchers).
//!
//! Plugins have their own copy of every Rust static, so their own `tracing`
//! or `log` calls would never reach the host's subscriber; this callback is
//! the way in.

use abi_stable::{sabi_trait::TD_Opaque, std_types::RArc, std_types::RStr};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tli_plugin_api::{HostServices, HostServicesApi, HostServicesApi_TO, LogLevel};

/// Services for one task.
#[derive(Clone)]
pub struct TaskServices {
    plugin: String,
    task_id: String,
    cancelled: Arc<AtomicBool>,
    sink: Option<Arc<dyn TaskLogSink>>,
}

/// Where a task's log lines at `info` and above go besides the host log.
pub trait TaskLogSink: Send + Sync {
    /// One line; `level` is `error`, `warn` or `info`.
    fn log_line(&self, plugin: &str, level: &'static str, message: &str);
}

impl TaskServices {
    pub fn new(plugin: &str, task_id: &str) -> Self {
        Self {
            plugin: plugin.to_string(),
            task_id: task_id.to_string(),
            cancelled: Arc::new(AtomicBool::new(false)),
            sink: None,
        }
    }

    /// Services whose cancellation flag is shared with the caller.
    pub fn with_cancel_flag(plugin: &str, task_id: &str, cancelled: Arc<AtomicBool>) -> Self {
        Self {
            plugin: plugin.to_string(),
            task_id: task_id.to_string(),
            cancelled,
            sink: None,
        }
    }

    /// Also passes the task's log lines (info and above) to `sink`.
    pub fn with_log_sink(mut self, sink: Arc<dyn TaskLogSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    pub(crate) fn into_abi(self) -> HostServices {
        HostServicesApi_TO::from_ptr(RArc::new(self), TD_Opaque)
    }
}

impl HostServicesApi for TaskServices {
    fn log(&self, level: LogLevel, message: RStr<'_>) {
        // Called from inside a plugin frame: a panic here must not unwind
        // into the plugin's extern "C" code (that aborts the process).
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let (plugin, task, message) = (&self.plugin, &self.task_id, message.as_str());
            match level {
                LogLevel::ERROR => {
                    tracing::error!(target: "plugin", plugin = %plugin, task = %task, "{message}")
                }
                LogLevel::WARN => {
                    tracing::warn!(target: "plugin", plugin = %plugin, task = %task, "{message}")
                }
                LogLevel::INFO => {
                    tracing::info!(target: "plugin", plugin = %plugin, task = %task, "{message}")
                }
                LogLevel::DEBUG => {
                    tracing::debug!(target: "plugin", plugin = %plugin, task = %task, "{message}")
                }
                _ => tracing::trace!(target: "plugin", plugin = %plugin, task = %task, "{message}"),
            }
            let level = match level {
                LogLevel::ERROR => "error",
                LogLevel::WARN => "warn",
                LogLevel::INFO => "info",
                _ => return,
            };
            if let Some(sink) = &self.sink {
                sink.log_line(plugin, level, message);
            }
        }));
    }

    fn is_cancelled(&self) -> bool {
        // Plugins poll this about once a step: on a runner thread it is also
        // where the core is offered to the API's threads in a long slice.
        crate::orchestrator::core_sharing::offer_if_due();
        self.cancelled.load(Ordering::Relaxed)
    }
}
