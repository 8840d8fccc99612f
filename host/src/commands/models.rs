//! `tli models list|export`: the models of a state directory, read from its
//! store (read-only) and checkpoint directories; `export` has the task's
//! plugin write the weights of its newest good checkpoint into a bundle.

use super::scan;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use tli_cli::args::{ModelsCommand, OutputFormat};
use tli_cli::{new_table, print_json};
use tli_models::{BundleWriter, ModelCard};
use tli_store::{checkpoint, Store, TaskRow};

pub(super) fn run(plugin_dir: &Path, command: &ModelsCommand, output: OutputFormat) -> Result<()> {
    match command {
        ModelsCommand::List { state_dir } => list(state_dir, output),
        ModelsCommand::Export {
            state_dir,
            task,
            dir,
        } => export(plugin_dir, state_dir, *task, dir, output),
    }
}

#[derive(serde::Serialize)]
struct ModelJson {
    task: i64,
    job: i64,
    plugin: String,
    assets: String,
    pooled: bool,
    state: String,
    checkpoint_step: u64,
    metrics: std::collections::BTreeMap<String, f64>,
}

fn open(state_dir: &Path) -> Result<Store> {
    Store::open_read_only(state_dir)
        .with_context(|| format!("reading the store of {}", state_dir.display()))
}

fn list(state_dir: &Path, output: OutputFormat) -> Result<()> {
    let store = open(state_dir)?;
    let mut models = Vec::new();
    for job in store.jobs()? {
        for task in store.tasks_of(job.id)? {
            let Some(card) = store.model_card(task.id)? else {
                continue;
            };
            let Some(newest) = store.checkpoints(task.id)?.into_iter().next() else {
                continue;
            };
            let card: ModelCard = serde_json::from_str(&card)
                .with_context(|| format!("the model card of task {}", task.id))?;
            models.push(ModelJson {
                task: task.id,
                job: task.job_id,
                plugin: format!(
                    "{}@{}",
                    task.plugin,
                    task.plugin_version.as_deref().unwrap_or("?")
                ),
                assets: task.asset.clone(),
                pooled: card.pooled,
                state: task.state.as_str().to_string(),
                checkpoint_step: newest.step,
                metrics: evaluation_metrics(&store, &task)?,
            });
        }
    }
    if output == OutputFormat::Json {
        return print_json(&models);
    }
    let mut table = new_table(vec![
        "TASK",
        "JOB",
        "PLUGIN",
        "ASSETS",
        "STATE",
        "CHECKPOINT",
        "METRIC",
    ]);
    for m in &models {
        let metric = [
            "test_qrisk_p50",
            "test_mse",
            "test_sharpe",
            "valid_mse",
            "valid_skill",
        ]
        .iter()
        .find_map(|k| m.metrics.get(*k).map(|v| format!("{k} {v:.4}")))
        .unwrap_or_else(|| "-".into());
        table.add_row(vec![
            m.task.to_string(),
            m.job.to_string(),
            m.plugin.clone(),
            m.assets.clone(),
            m.state.clone(),
            format!("step {}", m.checkpoint_step),
            metric,
        ]);
    }
    tli_cli::outln!("{table}");
    if models.is_empty() {
        eprintln!(
            "no models in {}: a model is a task trained on bar files with a checkpoint",
            state_dir.display()
        );
    }
    Ok(())
}

/// The task's latest validation and test metrics (what its evaluation reported).
fn evaluation_metrics(
    store: &Store,
    task: &TaskRow,
) -> Result<std::collections::BTreeMap<String, f64>> {
    Ok(store
        .latest_metrics(task.id)?
        .into_iter()
        .filter(|(name, v)| {
            (name.starts_with("valid_") || name.starts_with("test_")) && v.is_finite()
        })
        .collect())
}

fn export(
    plugin_dir: &Path,
    state_dir: &Path,
    task_id: i64,
    dir: &Path,
    output: OutputFormat,
) -> Result<()> {
    let store = open(state_dir)?;
    let task = store.task(task_id)?.ok_or_else(|| {
        anyhow!(
            "{} has no task {task_id} (`tli models list`)",
            state_dir.display()
        )
    })?;
    let card = store.model_card(task_id)?.ok_or_else(|| {
        anyhow!(
            "task {task_id} has no model card: it was trained on synthetic data (nothing to \
             featurize new bars with) or submitted to an older host"
        )
    })?;
    let mut card: ModelCard =
        serde_json::from_str(&card).with_context(|| format!("the model card of task {task_id}"))?;
    let rows = store.checkpoints(task_id)?;
    if rows.is_empty() {
        bail!("task {task_id} has no checkpoint yet; a model is exported from one");
    }
    let candidates: Vec<PathBuf> = rows.iter().map(|r| PathBuf::from(&r.path)).collect();
    let (good, refused) = checkpoint::latest_good(candidates.iter().map(PathBuf::as_path));
    for (path, why) in &refused {
        eprintln!("skipping checkpoint {}: {why}", path.display());
    }
    let checkpoint_dir =
        good.ok_or_else(|| anyhow!("none of task {task_id}'s checkpoints verifies"))?;
    let step = rows
        .iter()
        .find(|r| Path::new(&r.path) == checkpoint_dir)
        .map(|r| r.step)
        .unwrap_or(0);
    let registry = scan(plugin_dir)?;
    let version = task
        .plugin_version
        .clone()
        .unwrap_or_else(|| card.plugin.version.clone());
    let plugin = registry
        .get_version(&task.plugin, &version)
        .ok_or_else(|| {
            anyhow!(
                "task {task_id} was trained by {}@{version}, which is not loaded from {}; its \
             weights can only be exported by that version",
                task.plugin,
                plugin_dir.display()
            )
        })?;
    let writer = BundleWriter::create(dir)?;
    plugin
        .export_weights(&task.config_json, &checkpoint_dir, &writer.weights_path())
        .map_err(|e| {
            anyhow!(
                "plugin {} could not export the weights: {e}",
                plugin.label()
            )
        })?;
    card.metrics = evaluation_metrics(&store, &task)?;
    card.training.task = format!("job {} task {task_id}", task.job_id);
    card.training.steps = step;
    card.training.saved_at_ms = tli_core::ids::now_ms();
    let written = writer.finish(&card)?;
    if output == OutputFormat::Json {
        return print_json(&serde_json::json!({
            "task": task_id,
            "bundle": written,
            "checkpoint_step": step,
        }));
    }
    tli_cli::outln!(
        "task {task_id} ({}, step {step}) exported to {} (apply it with `tli predict --model {} \
         --data FILE`)",
        plugin.label(),
        written.display(),
        written.display()
    );
    Ok(())
}
