//! `tli train local`: train plugins in this process, one after another, for
//! N steps each on one dataset, with progress shown. A plugin that fails (an error or a
//! caught panic) is reported and the next one still trains.
//!
//! This is the offline path used by the demo and by plugin authors; jobs on
//! a long-lived host go through the orchestrator instead.

use crate::plugin_configs::PluginConfigs;
use crate::registry::{LoadedPlugin, PluginRegistry, TrainerHandle};
use crate::services::TaskServices;
use abi_stable::std_types::RArc;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;
use tli_data::features::{FeatureConfig, FeatureStats};
use tli_models::card::{DataFile, TrainingRecord};
use tli_models::BundleWriter;
use tli_plugin_api::{
    Dataset, DatasetAnnex, Device, MemoryBreakdown, Metric, PluginError, TaskInputs, TaskSpec,
};
use tli_runtime::models::card::{card_for, TrainedAsset};

/// What to train.
#[derive(Clone, Debug)]
pub struct LocalTrainRequest {
    pub plugins: Vec<String>,
    pub steps: u64,
    /// Steps per `step(n)` call.
    pub slice: u64,
    /// The `--config` values (which applies to which plugin: [`PluginConfigs`]).
    pub configs: PluginConfigs,
    pub seed: u64,
    pub device: Device,
    /// libtorch intra-op threads (`None`: libtorch's default, one per core).
    pub threads: Option<i32>,
    /// Draw progress bars (otherwise a line every 10%).
    pub interactive: bool,
    /// Keep each trained model as a bundle (`--save`).
    pub save: Option<SaveModels>,
}

/// Where and with what `--save` keeps the trained models.
#[derive(Clone, Debug)]
pub struct SaveModels {
    /// The bundle directory (one plugin) or the directory of bundles (several).
    pub dir: PathBuf,
    /// The feature pipeline and what it fitted on the training split.
    pub features: FeatureConfig,
    pub stats: FeatureStats,
    /// The bar file, by name and SHA-256.
    pub data: Vec<DataFile>,
}

impl SaveModels {
    /// The bundle directory of `plugin` when `plugins` are trained.
    pub fn bundle_dir(&self, plugins: &[String], plugin: &str) -> PathBuf {
        if plugins.len() == 1 {
            self.dir.clone()
        } else {
            self.dir.join(plugin.replace('@', "-"))
        }
    }
}

/// The outcome of one plugin's run.
#[derive(Debug, Serialize)]
pub struct LocalRunReport {
    pub plugin: String,
    pub task_id: String,
    pub status: &'static str,
    pub error: Option<String>,
    pub steps_done: u64,
    pub seconds: f64,
    pub steps_per_second: f64,
    pub first_metrics: BTreeMap<String, f64>,
    pub final_metrics: BTreeMap<String, f64>,
    pub evaluation: BTreeMap<String, f64>,
    pub memory_estimate: Option<MemoryBytes>,
    pub memory_measured: Option<MemoryBytes>,
    /// The model bundle written (`--save`).
    pub bundle: Option<PathBuf>,
}

/// [`MemoryBreakdown`] for output (the ABI crate stays free of serde).
#[derive(Clone, Copy, Debug, Serialize, serde::Deserialize)]
pub struct MemoryBytes {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub activations: u64,
    pub total: u64,
}

impl From<MemoryBreakdown> for MemoryBytes {
    fn from(m: MemoryBreakdown) -> Self {
        Self {
            parameters: m.parameters,
            gradients: m.gradients,
            optimizer_state: m.optimizer_state,
            activations: m.activations,
            total: m.total(),
        }
    }
}

/// Trains each requested plugin in turn on `dataset`.
pub fn run(
    registry: &PluginRegistry,
    request: &LocalTrainRequest,
    dataset: &RArc<Dataset>,
    annex: &DatasetAnnex,
) -> Vec<LocalRunReport> {
    if let Some(threads) = request.threads {
        tch::set_num_threads(threads.max(1));
    }
    request
        .plugins
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let task_id = format!("local-{}-{name}", i + 1);
            let mut report = LocalRunReport {
                plugin: name.clone(),
                task_id: task_id.clone(),
                status: "failed",
                error: None,
                steps_done: 0,
                seconds: 0.0,
                steps_per_second: 0.0,
                first_metrics: BTreeMap::new(),
                final_metrics: BTreeMap::new(),
                evaluation: BTreeMap::new(),
                memory_estimate: None,
                memory_measured: None,
                bundle: None,
            };
            // `name` or `name@version` (several versions may be loaded).
            let unknown = registry
                .versions(crate::registry::split_plugin_ref(name).0)
                .is_empty();
            let outcome = match registry.resolve(name) {
                Ok(plugin) => train_one(plugin, &task_id, (dataset, annex), request, &mut report),
                Err(_) if unknown => Err(format!(
                    "no plugin named {name:?} is loaded (loaded: {})",
                    registry.names().join(", ")
                )),
                Err(why) => Err(format!("plugin {name:?}: {why}")),
            };
            match outcome {
                Ok(()) => report.status = "completed",
                // The table and its summary line say it; a log line would say it twice more.
                Err(message) => report.error = Some(message),
            }
            report
        })
        .collect()
}

fn config_for(request: &LocalTrainRequest, plugin: &LoadedPlugin) -> String {
    request
        .configs
        .for_plugin(plugin.name())
        .map(str::to_string)
        .unwrap_or_else(|| plugin.manifest.default_config.to_string())
}

fn train_one(
    plugin: &LoadedPlugin,
    task_id: &str,
    (dataset, annex): (&RArc<Dataset>, &DatasetAnnex),
    request: &LocalTrainRequest,
    report: &mut LocalRunReport,
) -> Result<(), String> {
    let fail = |what: &str, e: PluginError| format!("{what}: {e}");
    // "invalid config: <the plugin's message>", without its code repeating it.
    let config = plugin
        .validate_config(&config_for(request, plugin))
        .map_err(|e| {
            if e.code == tli_plugin_api::ErrorCode::INVALID_CONFIG {
                format!("invalid config: {}", e.message)
            } else {
                fail("invalid config", e)
            }
        })?;
    report.memory_estimate = Some(
        plugin
            .estimate_memory(&config, dataset.shape(), &request.device.to_string())
            .map_err(|e| fail("estimate_memory", e))?
            .into(),
    );
    let spec_config = config.clone();
    let spec = TaskSpec {
        task_id: task_id.into(),
        config_json: config.into(),
        device: request.device.to_string().into(),
        seed: request.seed,
        max_steps: request.steps,
        dataset: dataset.clone(),
    };
    let inputs = TaskInputs::new(vec![(dataset.clone(), annex.clone())], false, 1);
    let mut trainer = plugin
        .create_trainer_with_inputs(spec, inputs, TaskServices::new(plugin.name(), task_id))
        .map_err(|e| fail("create_trainer", e))?;

    let started = Instant::now();
    let progress = Progress::new(plugin.name(), request.steps, request.interactive);
    let result = drive(&mut trainer, request, report, &progress);
    report.seconds = started.elapsed().as_secs_f64();
    report.steps_per_second = report.steps_done as f64 / report.seconds.max(1e-9);
    progress.finish(result.is_ok());
    result?;
    report.memory_measured = Some(trainer.memory().map_err(|e| fail("memory", e))?.into());
    report.evaluation = to_map(&trainer.evaluate().map_err(|e| fail("evaluate", e))?.metrics);
    if let Some(save) = &request.save {
        let run = SavedRun {
            config: &spec_config,
            task_id,
            dataset,
            annex,
        };
        report.bundle = Some(save_bundle(
            plugin,
            &mut trainer,
            &run,
            request,
            save,
            report,
        )?);
    }
    Ok(())
}

/// What a `--save` bundle records of the run.
struct SavedRun<'a> {
    config: &'a str,
    task_id: &'a str,
    dataset: &'a RArc<Dataset>,
    annex: &'a DatasetAnnex,
}

/// Checkpoints the trainer into the bundle's scratch directory, has the
/// plugin export the weights, and writes the bundle.
fn save_bundle(
    plugin: &LoadedPlugin,
    trainer: &mut TrainerHandle,
    run: &SavedRun<'_>,
    request: &LocalTrainRequest,
    save: &SaveModels,
    report: &LocalRunReport,
) -> Result<PathBuf, String> {
    let dir = save.bundle_dir(&request.plugins, &report.plugin);
    let failed = |e: &dyn std::fmt::Display| format!("saving the model to {}: {e}", dir.display());
    let writer = BundleWriter::create(&dir).map_err(|e| e.to_string())?;
    let scratch = writer.scratch_dir().map_err(|e| failed(&e))?;
    trainer.save_checkpoint(&scratch).map_err(|e| failed(&e))?;
    plugin
        .export_weights(run.config, &scratch, &writer.weights_path())
        .map_err(|e| failed(&e))?;
    let asset = TrainedAsset {
        dataset: run.dataset,
        annex: run.annex,
        stats: &save.stats,
    };
    let training = TrainingRecord {
        task: run.task_id.to_string(),
        seed: request.seed,
        steps: report.steps_done,
        device: request.device.to_string(),
        data: save.data.clone(),
        saved_at_ms: tli_core::ids::now_ms(),
    };
    let card = card_for(
        &plugin.manifest,
        run.config,
        &save.features,
        false,
        &[asset],
        &report.evaluation,
        training,
    )
    .map_err(|e| failed(&e))?;
    writer.finish(&card).map_err(|e| e.to_string())
}

fn drive(
    trainer: &mut TrainerHandle,
    request: &LocalTrainRequest,
    report: &mut LocalRunReport,
    progress: &Progress,
) -> Result<(), String> {
    let slice = request.slice.max(1);
    while report.steps_done < request.steps {
        let n = slice.min(request.steps - report.steps_done);
        let step = trainer
            .step(n)
            .map_err(|e| format!("step failed after {} steps: {e}", report.steps_done))?;
        // What the slice freed goes back to the kernel, as in a host (see `allocator`).
        crate::allocator::release_free_memory();
        if step.steps_done == 0 {
            return Err(format!(
                "the trainer made no progress when asked for {n} steps"
            ));
        }
        report.steps_done += step.steps_done;
        report.final_metrics = to_map(&step.metrics);
        if report.first_metrics.is_empty() {
            report.first_metrics = report.final_metrics.clone();
        }
        progress.update(report.steps_done, &report.final_metrics);
    }
    Ok(())
}

fn to_map(metrics: &[Metric]) -> BTreeMap<String, f64> {
    metrics
        .iter()
        .map(|m| (m.name.to_string(), m.value))
        .collect()
}

/// A progress bar on a terminal; otherwise a log line every 10%.
struct Progress {
    bar: Option<ProgressBar>,
    plugin: String,
    total: u64,
    last_decile: std::cell::Cell<u64>,
}

impl Progress {
    fn new(plugin: &str, total: u64, interactive: bool) -> Self {
        let bar = interactive.then(|| {
            let bar = ProgressBar::new(total);
            let style = ProgressStyle::with_template(
                "{prefix:>10} [{elapsed_precise}] {bar:30} {pos}/{len} steps {per_sec} eta {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_prefix(plugin.to_string());
            bar
        });
        Self {
            bar,
            plugin: plugin.to_string(),
            total,
            last_decile: std::cell::Cell::new(0),
        }
    }

    fn update(&self, done: u64, metrics: &BTreeMap<String, f64>) {
        // `train_loss` by convention; else the first metric that is a loss.
        let loss = metrics
            .get_key_value("train_loss")
            .or_else(|| metrics.iter().find(|(k, _)| k.contains("loss")))
            .map(|(k, v)| format!("{k} {v:.4}"))
            .unwrap_or_default();
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                bar.set_message(loss);
            }
            None => {
                let decile = done * 10 / self.total.max(1);
                if decile > self.last_decile.get() {
                    self.last_decile.set(decile);
                    eprintln!(
                        "{}: {done}/{} steps ({}%) {loss}",
                        self.plugin,
                        self.total,
                        decile * 10
                    );
                }
            }
        }
    }

    fn finish(&self, ok: bool) {
        if let Some(bar) = &self.bar {
            if ok {
                bar.finish();
            } else {
                bar.abandon();
            }
        }
    }
}
