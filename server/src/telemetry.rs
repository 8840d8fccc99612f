//! The host's Prometheus metrics (served at `/metrics`, see
//! [`crate::web`] and docs/observability.md).
//!
//! Two kinds of figures:
//!
//! * **Events**, recorded as they happen into the server's [`Telemetry`]
//!   (one per server, no process-wide state): RPCs by method (count and
//!   latency, by the gRPC layer [`RpcMetricsLayer`]) and checkpoint writes by
//!   plugin (durations: the telemetry is one of the engine's
//!   [`TaskObserver`]s).
//! * **State**, sampled at scrape time from the orchestrator
//!   ([`StateSample`]): jobs and tasks by state, running tasks, the device
//!   budget, reserved and measured bytes, and each running task's steps per
//!   second and latest loss. Per-task series exist only while a task runs, so
//!   label sets stay bounded by what the device holds.
//!
//! Names follow Prometheus's conventions: the `tli_` prefix, base units
//! (`_seconds`, `_bytes`), counters ending in `_total`.

use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tli_core::ids::{JobId, TaskId};
use tli_runtime::orchestrator::observer::TaskObserver;

/// The content type of [`Telemetry::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabel {
    /// `tli.v1.TrainingService/StartTraining`, or `other` for paths that
    /// name no service of the host (unbounded input stays out of labels).
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabel {
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    job: String,
    task: String,
    plugin: String,
    asset: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Every metric the host exports, in one registry.
pub struct Telemetry {
    registry: Registry,
    rpc_requests: Family<MethodLabel, Counter>,
    rpc_seconds: Family<MethodLabel, Histogram, fn() -> Histogram>,
    checkpoint_seconds: Family<PluginLabel, Histogram, fn() -> Histogram>,
    jobs: Family<StateLabel, Gauge>,
    tasks: Family<StateLabel, Gauge>,
    running_tasks: Gauge,
    budget_bytes: Family<DeviceLabel, Gauge>,
    reserved_bytes: Family<DeviceLabel, Gauge>,
    measured_bytes: Family<DeviceLabel, Gauge>,
    task_steps_per_second: Family<TaskLabels, FloatGauge>,
    task_loss: Family<TaskLabels, FloatGauge>,
    task_progress: Family<TaskLabels, FloatGauge>,
    scrape_errors: Counter,
    /// One scrape at a time: sampled gauges are cleared and refilled.
    scrape: Mutex<()>,
}

fn rpc_histogram() -> Histogram {
    // 0.25 ms .. ~8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

fn checkpoint_histogram() -> Histogram {
    // 5 ms .. ~80 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// The state of the host at one moment, as the scrape sees it.
#[derive(Clone, Debug, Default)]
pub struct StateSample {
    /// Jobs by overall state (`store::JOB_STATES`); missing states count 0.
    pub jobs: Vec<(String, u64)>,
    /// Tasks by state; missing states count 0.
    pub tasks: Vec<(String, u64)>,
    pub devices: Vec<DeviceSample>,
    pub running: Vec<RunningTaskSample>,
}

#[derive(Clone, Debug, Default)]
pub struct DeviceSample {
    pub device: String,
    pub budget_bytes: u64,
    pub reserved_bytes: u64,
    /// What the running tasks measured (a task not measured yet counts 0).
    pub measured_bytes: u64,
}

#[derive(Clone, Debug, Default)]
pub struct RunningTaskSample {
    pub job: i64,
    pub task: i64,
    pub plugin: String,
    pub asset: String,
    pub steps_per_second: f64,
    /// Fraction of the task's steps done, 0..1.
    pub progress: f64,
    /// The task's latest loss, when it reports one (see [`loss_of`]).
    pub loss: Option<f64>,
}

/// The loss among a task's metric names: `loss`, else `train_loss`, else
/// the first whose name ends in `loss` (`policy_loss`, `train/loss`, ...).
pub fn loss_name<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Option<&'a str> {
    let first = |wanted: &dyn Fn(&str) -> bool| names.clone().find(|n| wanted(n));
    first(&|n| n == "loss")
        .or_else(|| first(&|n| n == "train_loss"))
        .or_else(|| first(&|n| n.ends_with("loss")))
}

/// The value of the task's loss (see [`loss_name`]).
pub fn loss_of(metrics: &[(String, f64)]) -> Option<f64> {
    let name = loss_name(metrics.iter().map(|(n, _)| n.as_str()))?;
    metrics.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}

/// Checkpoint writes are timed where the engine records them.
impl TaskObserver for Telemetry {
    fn checkpoint_written(&self, _job: JobId, _task: TaskId, plugin: &str, write_seconds: f64) {
        Telemetry::checkpoint_written(self, plugin, write_seconds);
    }
}

impl Telemetry {
    /// A registry with every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tli");
        let rpc_requests = Family::<MethodLabel, Counter>::default();
        registry.register(
            "rpc_requests",
            "gRPC requests received, by method",
            rpc_requests.clone(),
        );
        let rpc_seconds = Family::new_with_constructor(rpc_histogram as fn() -> Histogram);
        registry.register(
            "rpc_duration_seconds",
            "Time from a gRPC request to its response headers, by method (a stream: to its start)",
            rpc_seconds.clone(),
        );
        let checkpoint_seconds =
            Family::new_with_constructor(checkpoint_histogram as fn() -> Histogram);
        registry.register(
            "checkpoint_write_seconds",
            "Time to write one checkpoint (the plugin's save plus the atomic rename), by plugin",
            checkpoint_seconds.clone(),
        );
        let jobs = Family::<StateLabel, Gauge>::default();
        registry.register(
            "jobs",
            "Jobs by overall state: active (a task queued or running), completed, failed, \
             interrupted or cancelled",
            jobs.clone(),
        );
        let tasks = Family::<StateLabel, Gauge>::default();
        registry.register("tasks", "Tasks by state", tasks.clone());
        let running_tasks = Gauge::default();
        registry.register(
            "running_tasks",
            "Tasks running or checkpointing now",
            running_tasks.clone(),
        );
        let budget_bytes = Family::<DeviceLabel, Gauge>::default();
        registry.register(
            "device_budget_bytes",
            "The memory budget the arbiter admits tasks within, by device",
            budget_bytes.clone(),
        );
        let reserved_bytes = Family::<DeviceLabel, Gauge>::default();
        registry.register(
            "device_reserved_bytes",
            "Memory reserved by running tasks (estimate or measurement, with margin), by device",
            reserved_bytes.clone(),
        );
        let measured_bytes = Family::<DeviceLabel, Gauge>::default();
        registry.register(
            "device_measured_bytes",
            "Memory the running tasks measured after their first slice, by device",
            measured_bytes.clone(),
        );
        let task_steps_per_second = Family::<TaskLabels, FloatGauge>::default();
        registry.register(
            "task_steps_per_second",
            "Training speed of each running task",
            task_steps_per_second.clone(),
        );
        let task_loss = Family::<TaskLabels, FloatGauge>::default();
        registry.register(
            "task_loss",
            "Latest loss of each running task that reports one",
            task_loss.clone(),
        );
        let task_progress = Family::<TaskLabels, FloatGauge>::default();
        registry.register(
            "task_progress_ratio",
            "Fraction of its steps each running task has done",
            task_progress.clone(),
        );
        let scrape_errors = Counter::default();
        registry.register(
            "scrape_errors",
            "Scrapes whose state sample failed (the job store could not be read)",
            scrape_errors.clone(),
        );
        Self {
            registry,
            rpc_requests,
            rpc_seconds,
            checkpoint_seconds,
            jobs,
            tasks,
            running_tasks,
            budget_bytes,
            reserved_bytes,
            measured_bytes,
            task_steps_per_second,
            task_loss,
            task_progress,
            scrape_errors,
            scrape: Mutex::new(()),
        }
    }

    /// One RPC answered after `seconds`.
    pub fn rpc(&self, method: &str, seconds: f64) {
        let label = MethodLabel {
            method: method.to_string(),
        };
        self.rpc_requests.get_or_create(&label).inc();
        self.rpc_seconds.get_or_create(&label).observe(seconds);
    }

    /// One checkpoint written in `seconds` by a task of `plugin`.
    pub fn checkpoint_written(&self, plugin: &str, seconds: f64) {
        self.checkpoint_seconds
            .get_or_create(&PluginLabel {
                plugin: plugin.to_string(),
            })
            .observe(seconds);
    }

    /// The text exposition (OpenMetrics) with the state gauges set from
    /// `sample` (`None`: sampling failed; state gauges are left out).
    pub fn encode(&self, sample: Option<&StateSample>) -> String {
        let _one_at_a_time = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.jobs.clear();
        self.tasks.clear();
        self.budget_bytes.clear();
        self.reserved_bytes.clear();
        self.measured_bytes.clear();
        self.task_steps_per_second.clear();
        self.task_loss.clear();
        self.task_progress.clear();
        match sample {
            Some(sample) => self.set_state(sample),
            None => {
                self.scrape_errors.inc();
            }
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }

    fn set_state(&self, sample: &StateSample) {
        let count_of = |counts: &[(String, u64)], state: &str| {
            counts
                .iter()
                .find(|(s, _)| s == state)
                .map_or(0, |(_, n)| *n)
        };
        for state in tli_runtime::orchestrator::store::JOB_STATES {
            self.jobs
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(gauge_value(count_of(&sample.jobs, state)));
        }
        for state in tli_runtime::orchestrator::state::TaskState::ALL {
            self.tasks
                .get_or_create(&StateLabel {
                    state: state.as_str().into(),
                })
                .set(gauge_value(count_of(&sample.tasks, state.as_str())));
        }
        self.running_tasks
            .set(gauge_value(sample.running.len() as u64));
        for d in &sample.devices {
            let label = DeviceLabel {
                device: d.device.clone(),
            };
            self.budget_bytes
                .get_or_create(&label)
                .set(gauge_value(d.budget_bytes));
            self.reserved_bytes
                .get_or_create(&label)
                .set(gauge_value(d.reserved_bytes));
            self.measured_bytes
                .get_or_create(&label)
                .set(gauge_value(d.measured_bytes));
        }
        for t in &sample.running {
            let labels = TaskLabels {
                job: t.job.to_string(),
                task: t.task.to_string(),
                plugin: t.plugin.clone(),
                asset: t.asset.clone(),
            };
            self.task_steps_per_second
                .get_or_create(&labels)
                .set(t.steps_per_second);
            self.task_progress.get_or_create(&labels).set(t.progress);
            if let Some(loss) = t.loss {
                self.task_loss.get_or_create(&labels).set(loss);
            }
        }
    }
}

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The method label of a gRPC request path: `/pkg.Service/Method` becomes
/// `pkg.Service/Method` when the service is one the host serves, else `other`.
pub fn method_label(path: &str) -> String {
    let known = ["/tli.v1.", "/grpc.health.v1.", "/grpc.reflection."];
    let well_formed = path.len() <= 128
        && path.matches('/').count() == 2
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_'));
    if well_formed && known.iter().any(|k| path.starts_with(k)) {
        path[1..].to_string()
    } else {
        "other".to_string()
    }
}

/// A tower layer for the gRPC server: counts every request and times it to
/// its response headers, by method, into its [`Telemetry`].
#[derive(Clone)]
pub struct RpcMetricsLayer {
    telemetry: Arc<Telemetry>,
}

impl RpcMetricsLayer {
    pub fn new(telemetry: Arc<Telemetry>) -> Self {
        Self { telemetry }
    }
}

impl<S> tower::Layer<S> for RpcMetricsLayer {
    type Service = RpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcMetrics {
            inner,
            telemetry: self.telemetry.clone(),
        }
    }
}

/// The service [`RpcMetricsLayer`] wraps around the gRPC routes.
#[derive(Clone)]
pub struct RpcMetrics<S> {
    inner: S,
    telemetry: Arc<Telemetry>,
}

impl<S, B> tower::Service<http::Request<B>> for RpcMetrics<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = method_label(request.uri().path());
        let started = Instant::now();
        let response = self.inner.call(request);
        let telemetry = self.telemetry.clone();
        Box::pin(async move {
            let result = response.await;
            telemetry.rpc(&method, started.elapsed().as_secs_f64());
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_labels_are_bounded() {
        assert_eq!(
            method_label("/tli.v1.TrainingService/StartTraining"),
            "tli.v1.TrainingService/StartTraining"
        );
        assert_eq!(
            method_label("/grpc.health.v1.Health/Check"),
            "grpc.health.v1.Health/Check"
        );
        assert_eq!(method_label("/evil.Service/X"), "other");
        assert_eq!(method_label("/tli.v1.X/a\"b"), "other");
        assert_eq!(method_label("/tli.v1.X/Y/Z"), "other");
        assert_eq!(
            method_label(&format!("/tli.v1.{}/M", "x".repeat(200))),
            "other"
        );
    }

    #[test]
    fn loss_prefers_the_metric_named_loss() {
        let m = |v: &[(&str, f64)]| {
            v.iter()
                .map(|(n, x)| (n.to_string(), *x))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            loss_of(&m(&[("policy_loss", 2.0), ("loss", 1.0)])),
            Some(1.0)
        );
        assert_eq!(
            loss_of(&m(&[("return", 5.0), ("value_loss", 3.0)])),
            Some(3.0)
        );
        assert_eq!(loss_of(&m(&[("return", 5.0)])), None);
    }

    #[test]
    fn state_gauges_hold_only_the_latest_sample() {
        let t = Telemetry::new();
        let running = RunningTaskSample {
            job: 1,
            task: 2,
            plugin: "dqn".into(),
            asset: "ES.FUT".into(),
            steps_per_second: 12.5,
            progress: 0.25,
            loss: Some(0.5),
        };
        let sample = StateSample {
            jobs: vec![("active".into(), 1)],
            tasks: vec![("running".into(), 1), ("queued".into(), 3)],
            devices: vec![DeviceSample {
                device: "cpu".into(),
                budget_bytes: 1 << 30,
                reserved_bytes: 1 << 20,
                measured_bytes: 1 << 19,
            }],
            running: vec![running],
        };
        let text = t.encode(Some(&sample));
        assert!(text.contains("tli_tasks{state=\"queued\"} 3\n"), "{text}");
        assert!(text.contains("tli_tasks{state=\"failed\"} 0\n"), "{text}");
        assert!(text.contains("tli_jobs{state=\"active\"} 1\n"), "{text}");
        assert!(text.contains("tli_device_budget_bytes{device=\"cpu\"} 1073741824\n"));
        assert!(text.contains(
            "tli_task_steps_per_second{job=\"1\",task=\"2\",plugin=\"dqn\",asset=\"ES.FUT\"} 12.5\n"
        ));
        assert!(text.ends_with("# EOF\n"));
        // The task ended: its series go with it.
        let text = t.encode(Some(&StateSample::default()));
        assert!(!text.contains("tli_task_steps_per_second{"), "{text}");
        assert!(text.contains("tli_running_tasks 0\n"), "{text}");
        // A failed sample counts an error and leaves the state out.
        let text = t.encode(None);
        assert!(text.contains("tli_scrape_errors_total 1\n"), "{text}");
        assert!(!text.contains("tli_tasks{"), "{text}");
    }

    #[test]
    fn rpcs_and_checkpoints_are_counted() {
        let t = Telemetry::new();
        t.rpc("tli.v1.TrainingService/StartTraining", 0.002);
        t.rpc("tli.v1.TrainingService/StartTraining", 0.004);
        t.checkpoint_written("ppo", 0.3);
        let text = t.encode(Some(&StateSample::default()));
        assert!(
            text.contains(
                "tli_rpc_requests_total{method=\"tli.v1.TrainingService/StartTraining\"} 2\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "tli_rpc_duration_seconds_count{method=\"tli.v1.TrainingService/StartTraining\"} 2\n"
        ));
        assert!(text.contains("tli_checkpoint_write_seconds_count{plugin=\"ppo\"} 1\n"));
    }
}
