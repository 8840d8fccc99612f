//! TensorBoard event files of every task, written by the host (plugins
//! report metrics as always and know nothing of it).
//!
//! One directory per task, `<root>/job-N/task-M-<plugin>-<asset>/` (the
//! root is `<state-dir>/tb` unless `--tensorboard-dir` says otherwise; the
//! asset by its file's name: [`run_name`]), so TensorBoard's run list says
//! which model on which data each line is. Each run of a task in a host
//! process opens a new event file there; TensorBoard reads every file of a
//! directory as one run. What is written:
//!
//! * every metric of every slice as a scalar at its step, as the store
//!   records it, under a grouped tag ([`scalar_tag`]: `train_loss` →
//!   `train/loss`, `valid_qrisk` → `valid/qrisk`, `test_…`, `interp_…`,
//!   anything else under `metrics/`), so the dashboard shows a few groups
//!   instead of hundreds of flat tags;
//! * the task's settings and its plugin config's top-level values for the
//!   HParams dashboard ([`hparams_of`]), when its file is opened;
//! * [`STEPS_PER_SECOND`] between successive durable progress records;
//! * the task's measured memory, total and by component ([`MEMORY_TAGS`]);
//! * the task's hyperparameters (plugin, asset, seed, config JSON) as a
//!   text summary under [`HYPERPARAMETERS`] when its file is opened;
//! * a `SessionLog START` at step S+1 when a run restarts from step S, so
//!   readers that honour it drop the steps after S recorded before (the
//!   store deletes those metrics too: they are redone).
//!
//! [`TensorBoardLog`] is a [`TaskObserver`] of the engine: it hears what
//! every [`StoreRecord`] of a host records (local runner threads and Slurm
//! workers' calls alike). Writing event files
//! must never fail training: the first failure of a task is logged as a
//! warning and that task's run carries on without its event file.
//!
//! [`StoreRecord`]: tli_runtime::orchestrator::task_record::StoreRecord
//! [`TaskObserver`]: tli_runtime::orchestrator::observer::TaskObserver

pub mod event_file;

use event_file::h_param_value::Kind;
use event_file::{wall_time_now, Event, EventFileError, EventWriter, HParamValue};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tli_runtime::orchestrator::observer::TaskObserver;
use tli_runtime::orchestrator::store::{MeasuredMemory, SliceMetrics, Store, TaskRow};
use tli_runtime::orchestrator::{JobId, TaskId};

/// The text summary of a task's plugin, asset, seed and config.
pub const HYPERPARAMETERS: &str = "hyperparameters";
/// Training steps per second between two durable progress records.
pub const STEPS_PER_SECOND: &str = "perf/steps_per_second";
/// Measured memory (bytes): the total, then each component.
pub const MEMORY_TAGS: [&str; 5] = [
    "memory/measured_bytes",
    "memory/parameters_bytes",
    "memory/gradients_bytes",
    "memory/optimizer_state_bytes",
    "memory/activations_bytes",
];

/// Where a task's event files go under `root`: [`run_name`] with the
/// task's plugin and asset, `job-N/task-M` when they are not known.
pub fn task_dir(root: &Path, job: JobId, task: TaskId, row: Option<&TaskRow>) -> PathBuf {
    match row {
        Some(row) => root.join(run_name(job, task, &row.plugin, &row.asset)),
        None => root.join(format!("job-{job}")).join(format!("task-{task}")),
    }
}

/// A task's run in TensorBoard: `job-3/task-7-tft-es_proxy_sp500_1d`. The
/// asset is its file's name without directories and extensions (`pooledN`
/// for a pooled task's N assets), in letters, digits, `-` and `_`, at most
/// 40 characters.
pub fn run_name(job: JobId, task: TaskId, plugin: &str, asset: &str) -> String {
    let asset = match asset.strip_prefix("pooled[") {
        Some(inner) => format!("pooled{}", inner.split(',').count()),
        None => {
            let file = asset.rsplit('/').next().unwrap_or(asset);
            let stem = match file.split_once('.') {
                Some((stem, _)) if !stem.is_empty() => stem,
                _ => file,
            };
            stem.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .take(40)
                .collect()
        }
    };
    let plugin: String = plugin
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    format!("job-{job}/task-{task}-{plugin}-{asset}")
}

/// The TensorBoard tag of a metric: its split prefix as the group
/// (`train_loss` → `train/loss`; `valid_`, `test_`, `interp_` alike), a name
/// that already has a `/` as it is, anything else under `metrics/`.
pub fn scalar_tag(metric: &str) -> String {
    if metric.contains('/') {
        return metric.to_string();
    }
    for group in ["train", "valid", "test", "interp"] {
        if let Some(rest) = metric
            .strip_prefix(group)
            .and_then(|r| r.strip_prefix('_'))
            .filter(|r| !r.is_empty())
        {
            return format!("{group}/{rest}");
        }
    }
    format!("metrics/{metric}")
}

/// A task's hyperparameters for the HParams dashboard: plugin, asset,
/// seed, steps and device, then each top-level value of its plugin config
/// (numbers, strings and booleans as they are, anything else as JSON;
/// a key that repeats a setting's name as `config.<key>`).
pub fn hparams_of(row: &TaskRow) -> BTreeMap<String, HParamValue> {
    let text = |s: &str| HParamValue {
        kind: Some(Kind::StringValue(s.to_string())),
    };
    let number = |n: f64| HParamValue {
        kind: Some(Kind::NumberValue(n)),
    };
    let mut out = BTreeMap::from([
        ("plugin".to_string(), text(&row.plugin)),
        ("asset".to_string(), text(&row.asset)),
        ("seed".to_string(), number(row.seed as f64)),
        ("steps".to_string(), number(row.total_steps as f64)),
        ("device".to_string(), text(&row.device.to_string())),
    ]);
    if let Ok(serde_json::Value::Object(config)) = serde_json::from_str(&row.config_json) {
        for (key, value) in config {
            let value = match value {
                serde_json::Value::Bool(b) => HParamValue {
                    kind: Some(Kind::BoolValue(b)),
                },
                serde_json::Value::Number(n) => number(n.as_f64().unwrap_or(f64::NAN)),
                serde_json::Value::String(s) => text(&s),
                other => text(&other.to_string()),
            };
            let key = if out.contains_key(&key) {
                format!("config.{key}")
            } else {
                key
            };
            out.insert(key, value);
        }
    }
    out
}

/// The event files of a host's tasks: one open writer per running task.
pub struct TensorBoardLog {
    root: PathBuf,
    store: Arc<Store>,
    tasks: Mutex<HashMap<TaskId, Arc<Mutex<TaskLog>>>>,
}

/// One task's run as far as its event file is concerned.
#[derive(Default)]
struct TaskLog {
    writer: Option<EventWriter>,
    /// A write failed (and was logged): nothing more for this run.
    failed: bool,
    /// The latest step known, for measurements.
    steps: u64,
    /// Steps and time of the previous progress record (for steps/s).
    last_rate: Option<(u64, Instant)>,
    /// This run recorded progress already.
    progressed: bool,
    /// A measurement taken after the run's first slice, before that slice's
    /// progress was recorded: it is written at that slice's step.
    pending_memory: Option<MeasuredMemory>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl TaskObserver for TensorBoardLog {
    fn run_started(&self, job: JobId, task: TaskId, steps: u64) {
        self.started(job, task, steps);
    }
    fn progress(&self, job: JobId, task: TaskId, steps: u64, batch: &[SliceMetrics]) {
        TensorBoardLog::progress(self, job, task, steps, batch);
    }
    fn measured(&self, job: JobId, task: TaskId, memory: &MeasuredMemory) {
        TensorBoardLog::measured(self, job, task, memory);
    }
    fn run_ended(&self, task: TaskId) {
        self.close(task);
    }
}

impl TensorBoardLog {
    /// Event files under `root`; task rows (for the hyperparameters) from `store`.
    pub fn new(root: PathBuf, store: Arc<Store>) -> Self {
        Self {
            root,
            store,
            tasks: Mutex::new(HashMap::new()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A run of the task starts (or resumes) at `steps`.
    pub fn started(&self, job: JobId, task: TaskId, steps: u64) {
        self.with_writer(job, task, Some(steps), |log, writer| {
            log.steps = steps;
            log.last_rate = Some((steps, Instant::now()));
            log.progressed = false;
            let restart = i64::try_from(steps.saturating_add(1)).unwrap_or(i64::MAX);
            writer.write(&Event::session_start(wall_time_now(), restart))
        });
    }

    /// Progress at `steps` with the metrics of each slice (at its own time).
    pub fn progress(&self, job: JobId, task: TaskId, steps: u64, batch: &[SliceMetrics]) {
        self.with_writer(job, task, None, |log, writer| {
            for slice in batch {
                let scalars: Vec<(String, f32)> = slice
                    .metrics
                    .iter()
                    .map(|(name, value)| (scalar_tag(name), *value as f32))
                    .collect();
                if !scalars.is_empty() {
                    let wall_time = slice.at_ms as f64 / 1e3;
                    writer.write(&Event::scalars(wall_time, step_of(slice.step), &scalars))?;
                }
            }
            if let Some(memory) = log.pending_memory.take() {
                let first = batch.first().map_or(steps, |slice| slice.step);
                writer.write(&memory_event(first, &memory))?;
            }
            let now = Instant::now();
            if let Some((before, at)) = log.last_rate {
                let seconds = now.duration_since(at).as_secs_f64();
                if steps > before && seconds > 0.0 {
                    let rate = (steps - before) as f64 / seconds;
                    let scalar = [(STEPS_PER_SECOND.to_string(), rate as f32)];
                    writer.write(&Event::scalars(wall_time_now(), step_of(steps), &scalar))?;
                }
            }
            log.last_rate = Some((steps, now));
            log.steps = steps;
            log.progressed = true;
            Ok(())
        });
    }

    /// What the task measured after its first slice: at that slice's step
    /// (the latest recorded, or the first of the next progress record).
    pub fn measured(&self, job: JobId, task: TaskId, memory: &MeasuredMemory) {
        self.with_writer(job, task, None, |log, writer| {
            if log.progressed {
                writer.write(&memory_event(log.steps, memory))
            } else {
                log.pending_memory = Some(*memory);
                Ok(())
            }
        });
    }

    /// The task's run ended: its file is flushed and closed; a later run
    /// opens a new one.
    pub fn close(&self, task: TaskId) {
        let removed = lock(&self.tasks).remove(&task);
        if let Some(log) = removed {
            let mut log = lock(&log);
            let pending = log.pending_memory.take();
            if let Some(mut writer) = log.writer.take() {
                let written = match pending {
                    Some(memory) => writer.write(&memory_event(log.steps, &memory)),
                    None => Ok(()),
                };
                if let Err(e) = written.and_then(|()| writer.flush()) {
                    warn(task, &e);
                }
            }
        }
    }

    /// Runs `write` on the task's open writer (opening it first, with the
    /// hyperparameters at `start` or the stored step count), then flushes.
    /// The first failure is logged; after it the run writes nothing more.
    fn with_writer(
        &self,
        job: JobId,
        task: TaskId,
        start: Option<u64>,
        write: impl FnOnce(&mut TaskLog, &mut EventWriter) -> Result<(), EventFileError>,
    ) {
        let entry = lock(&self.tasks).entry(task).or_default().clone();
        let mut log = lock(&entry);
        if log.failed {
            return;
        }
        let result = self
            .open(&mut log, job, task, start)
            .and_then(|mut writer| {
                let result = write(&mut log, &mut writer).and_then(|()| writer.flush());
                log.writer = Some(writer);
                result
            });
        if let Err(e) = result {
            warn(task, &e);
            log.failed = true;
            log.writer = None;
        }
    }

    /// The task's writer, taken out of `log` (a new file if it has none).
    fn open(
        &self,
        log: &mut TaskLog,
        job: JobId,
        task: TaskId,
        start: Option<u64>,
    ) -> Result<EventWriter, EventFileError> {
        if let Some(writer) = log.writer.take() {
            return Ok(writer);
        }
        let row = match self.store.task(task) {
            Ok(row) => row,
            Err(e) => {
                tracing::debug!(task, "TensorBoard: hyperparameters not written: {e}");
                None
            }
        };
        let mut writer = EventWriter::create(&task_dir(&self.root, job, task, row.as_ref()))?;
        match row {
            Some(row) => {
                let step = start.unwrap_or(row.steps_done);
                log.steps = step;
                let now = wall_time_now();
                let text = hyperparameters_text(&row);
                writer.write(&Event::text(now, step_of(step), HYPERPARAMETERS, &text))?;
                let group = run_name(job, task, &row.plugin, &row.asset);
                writer.write(&Event::hparams(
                    now,
                    step_of(step),
                    hparams_of(&row),
                    &group,
                ))?;
            }
            None => tracing::debug!(task, "TensorBoard: no task row for the hyperparameters"),
        }
        Ok(writer)
    }
}

fn warn(task: TaskId, e: &EventFileError) {
    tracing::warn!(
        task,
        "TensorBoard event file not written ({e}); this run of the task goes on without one"
    );
}

/// The memory scalars of a measurement at `step`.
fn memory_event(step: u64, memory: &MeasuredMemory) -> Event {
    let parts = [
        memory.total(),
        memory.parameters,
        memory.gradients,
        memory.optimizer_state,
        memory.activations,
    ];
    let scalars: Vec<(String, f32)> = MEMORY_TAGS
        .iter()
        .zip(parts)
        .map(|(tag, bytes)| (tag.to_string(), bytes as f32))
        .collect();
    Event::scalars(wall_time_now(), step_of(step), &scalars)
}

fn step_of(steps: u64) -> i64 {
    i64::try_from(steps).unwrap_or(i64::MAX)
}

/// The text summary of a task: a markdown table of its settings and its
/// plugin config as (pretty) JSON.
pub fn hyperparameters_text(row: &TaskRow) -> String {
    let config = serde_json::from_str::<serde_json::Value>(&row.config_json)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| row.config_json.clone());
    format!(
        "| setting | value |\n|---|---|\n| plugin | {} |\n| asset | {} |\n| seed | {} |\n\
         | steps | {} |\n| device | {} |\n| job | {} |\n| task | {} |\n\n\
         plugin config:\n\n```json\n{config}\n```\n",
        row.plugin, row.asset, row.seed, row.total_steps, row.device, row.job_id, row.id
    )
}

#[cfg(test)]
mod tests {
    use super::event_file::{event, read_records, summary_value};
    use super::*;
    use prost::Message;
    use tli_plugin_api::Device;
    use tli_runtime::orchestrator::store::{MemorySource, NewTask};

    /// A store in `dir` holding one template task; its (job, task).
    fn store_with_task(dir: &Path) -> (Arc<Store>, JobId, TaskId) {
        let store = Store::open(dir).expect("store");
        let (job, tasks) = store
            .create_job(
                "tb",
                "{}",
                &[NewTask {
                    plugin: "template".into(),
                    asset: "synthetic:300".into(),
                    config_json: r#"{"hidden_sizes":[8],"learning_rate":0.01}"#.into(),
                    seed: 42,
                    total_steps: 20,
                    priority: 0,
                    device: Device::Cpu,
                    estimate_bytes: 1000,
                    cost_weight: 1.0,
                    plugin_version: None,
                    plugin_checksum: None,
                    model_card: None,
                }],
            )
            .expect("job");
        (Arc::new(store), job, tasks[0])
    }

    /// Every event of every file in `dir`, file by file in name order.
    fn events_in(dir: &Path) -> Vec<Vec<Event>> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("task dir")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| {
                read_records(&std::fs::read(f).expect("read"))
                    .expect("records")
                    .iter()
                    .map(|r| Event::decode(r.as_slice()).expect("event"))
                    .collect()
            })
            .collect()
    }

    /// (tag, step, value) of every scalar.
    fn scalars(events: &[Event]) -> Vec<(String, i64, f32)> {
        let mut out = Vec::new();
        for e in events {
            if let Some(event::What::Summary(s)) = &e.what {
                for v in &s.value {
                    if let Some(summary_value::Value::SimpleValue(x)) = v.value {
                        out.push((v.tag.clone(), e.step, x));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn run_names_and_tags_are_grouped_for_people() {
        assert_eq!(
            run_name(3, 7, "tft", "data/samples/es_proxy_sp500_1d.dbn.zst"),
            "job-3/task-7-tft-es_proxy_sp500_1d"
        );
        assert_eq!(
            run_name(1, 2, "dqn", "pooled[a.csv,b.csv,c.csv]"),
            "job-1/task-2-dqn-pooled3"
        );
        assert_eq!(
            run_name(1, 2, "x/../y", "synthetic-ar1:300:1"),
            "job-1/task-2-xy-synthetic-ar1_300_1"
        );
        assert_eq!(
            run_name(1, 2, "mlp", "/data/.hidden"),
            "job-1/task-2-mlp-_hidden"
        );
        for (metric, tag) in [
            ("train_loss", "train/loss"),
            ("valid_qrisk_p50", "valid/qrisk_p50"),
            ("test_sharpe", "test/sharpe"),
            ("interp_var_weight_close", "interp/var_weight_close"),
            ("episodic_return_mean20", "metrics/episodic_return_mean20"),
            ("train_", "metrics/train_"),
            ("trainer_steps", "metrics/trainer_steps"),
            ("memory/measured_bytes", "memory/measured_bytes"),
        ] {
            assert_eq!(scalar_tag(metric), tag);
        }
    }

    #[test]
    fn a_run_writes_hyperparameters_metrics_rate_and_memory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, job, task) = store_with_task(&dir.path().join("state"));
        let tb = TensorBoardLog::new(dir.path().join("tb"), store);
        tb.started(job, task, 0);
        let metric = |n: &str, v: f64| (n.to_string(), v);
        tb.progress(
            job,
            task,
            10,
            &[
                SliceMetrics::now(5, vec![metric("train_loss", 0.5)]),
                SliceMetrics::now(10, vec![metric("train_loss", 0.25), metric("lr", 0.1)]),
            ],
        );
        tb.measured(
            job,
            task,
            &MeasuredMemory {
                parameters: 100,
                gradients: 100,
                optimizer_state: 200,
                activations: 600,
                source: MemorySource::PluginCount,
            },
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
        tb.progress(
            job,
            task,
            20,
            &[SliceMetrics::now(20, vec![metric("train_loss", f64::NAN)])],
        );
        tb.close(task);

        let row = tb.store.task(task).expect("store").expect("row");
        let dir = task_dir(tb.root(), job, task, Some(&row));
        assert!(dir.ends_with(format!("job-{job}/task-{task}-template-synthetic_300")));
        let files = events_in(&dir);
        assert_eq!(files.len(), 1, "one file per run");
        let events = &files[0];
        assert_eq!(
            events[0].what,
            Some(event::What::FileVersion(event_file::FILE_VERSION.into()))
        );
        let Some(event::What::Summary(text)) = &events[1].what else {
            panic!("no text summary: {:?}", events[1]);
        };
        assert_eq!(text.value[0].tag, HYPERPARAMETERS);
        let Some(summary_value::Value::Tensor(t)) = &text.value[0].value else {
            panic!("text is not a tensor");
        };
        let text = String::from_utf8_lossy(&t.string_val[0]);
        for part in [
            "template",
            "synthetic:300",
            "| seed | 42 |",
            "\"learning_rate\": 0.01",
        ] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
        // The HParams dashboard's record, as TensorBoard's own summary writes it.
        let Some(event::What::Summary(hp)) = &events[2].what else {
            panic!("no hparams summary: {:?}", events[2]);
        };
        assert_eq!(hp.value[0].tag, event_file::SESSION_START_INFO_TAG);
        let plugin = hp.value[0].metadata.as_ref().unwrap().plugin_data.as_ref();
        assert_eq!(plugin.unwrap().plugin_name, "hparams");
        let data = event_file::HParamsPluginData::decode(plugin.unwrap().content.as_slice())
            .expect("plugin data");
        let info = data.session_start_info.expect("session start");
        let number = |k: &str| match info.hparams.get(k).and_then(|v| v.kind.clone()) {
            Some(Kind::NumberValue(n)) => n,
            other => panic!("{k}: {other:?}"),
        };
        assert_eq!(number("seed"), 42.0);
        assert_eq!(number("learning_rate"), 0.01);
        assert_eq!(
            info.hparams["plugin"].kind,
            Some(Kind::StringValue("template".into()))
        );
        assert_eq!(info.group_name, run_name(job, task, "template", &row.asset));
        assert_eq!(events[3], Event::session_start(events[3].wall_time, 1));

        let found = scalars(events);
        let value = |tag: &str, step: i64| {
            found
                .iter()
                .find(|(t, s, _)| t == tag && *s == step)
                .map(|(_, _, v)| *v)
        };
        assert_eq!(value("train/loss", 5), Some(0.5));
        assert_eq!(value("train/loss", 10), Some(0.25));
        assert_eq!(value("metrics/lr", 10), Some(0.1f64 as f32));
        assert!(value("train/loss", 20).is_some_and(f32::is_nan));
        assert!(value(STEPS_PER_SECOND, 10).is_some_and(|r| r > 0.0));
        assert!(value(STEPS_PER_SECOND, 20).is_some_and(|r| r > 0.0));
        // Measured after the first record: at its step.
        let memory: Vec<Option<f32>> = MEMORY_TAGS.iter().map(|t| value(t, 10)).collect();
        assert_eq!(
            memory,
            [
                Some(1000.0),
                Some(100.0),
                Some(100.0),
                Some(200.0),
                Some(600.0)
            ]
        );
    }

    #[test]
    fn a_resumed_run_opens_a_new_file_that_marks_the_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, job, task) = store_with_task(&dir.path().join("state"));
        let tb = TensorBoardLog::new(dir.path().join("tb"), store);
        tb.started(job, task, 0);
        tb.progress(
            job,
            task,
            10,
            &[SliceMetrics::now(10, vec![("loss".into(), 1.0)])],
        );
        tb.close(task);
        tb.started(job, task, 5);
        // Measured after the first slice, before its progress is recorded.
        let memory = MeasuredMemory {
            parameters: 1,
            gradients: 2,
            optimizer_state: 3,
            activations: 4,
            source: MemorySource::PluginCount,
        };
        tb.measured(job, task, &memory);
        tb.progress(
            job,
            task,
            10,
            &[
                SliceMetrics::now(8, vec![("loss".into(), 3.0)]),
                SliceMetrics::now(10, vec![("loss".into(), 2.0)]),
            ],
        );
        tb.close(task);
        let row = tb.store.task(task).expect("store").expect("row");
        let files = events_in(&task_dir(tb.root(), job, task, Some(&row)));
        assert_eq!(files.len(), 2);
        let second = &files[1];
        assert!(
            second.iter().any(|e| e.step == 6
                && matches!(&e.what, Some(event::What::SessionLog(l)) if l.status == event_file::SESSION_START)),
            "{second:?}"
        );
        assert!(
            second.iter().any(|e| e.step == 5
                && matches!(&e.what, Some(event::What::Summary(s)) if s.value[0].tag == HYPERPARAMETERS)),
            "hyperparameters at the step the run starts from"
        );
        let found = scalars(second);
        assert!(found.contains(&("metrics/loss".into(), 10, 2.0)));
        assert!(
            found.contains(&(MEMORY_TAGS[0].into(), 8, 10.0)),
            "memory at the first slice's step: {found:?}"
        );
    }

    #[test]
    fn an_unwritable_root_costs_a_warning_not_the_run() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, job, task) = store_with_task(&dir.path().join("state"));
        // A file where the root directory should be.
        let root = dir.path().join("tb");
        std::fs::write(&root, b"not a directory").expect("file");
        let tb = TensorBoardLog::new(root.clone(), store);
        tb.started(job, task, 0);
        tb.progress(
            job,
            task,
            10,
            &[SliceMetrics::now(10, vec![("loss".into(), 1.0)])],
        );
        assert!(lock(&tb.tasks)
            .get(&task)
            .is_some_and(|log| lock(log).failed));
        tb.close(task);
        assert!(root.is_file());
    }
}
