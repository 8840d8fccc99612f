//! The models of a state directory: every task of its store that has a
//! model card and a checkpoint (its id is the task id, `"12"`), and every
//! bundle imported into its `models/` directory (its id is the name it was
//! imported under, never all digits, so the two kinds cannot collide).
//! A task that keeps best checkpoints (`keep_best`, `early_stopping`) is
//! the model of its best one; `"12:last"` names its newest instead.
//!
//! Read-only over the store: listing, inspecting and exporting work on a
//! read-only store (`tli models … --state-dir`) as on a host's. A task's
//! model is exported by the plugin version that trained it, from its best
//! checkpoint (else the newest) that verifies, with the task's latest validation and
//! test metrics in its card.

use super::ModelError;
use crate::registry::PluginRegistry;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tli_models::{Bundle, BundleError, BundleWriter, ModelCard};
use tli_store::{checkpoint, Store, StoreError, TaskRow};

/// The directory of imported bundles inside a state directory.
pub const IMPORTED_DIR: &str = "models";

/// Why a model could not be listed, found or exported. One line each.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("no model {0:?}: `tli models list` shows the models (a task's id, or an imported model's name)")]
    NotFound(String),
    #[error("task {task} is not a model: {why}")]
    NotAModel { task: i64, why: String },
    #[error(
        "{0:?} is not a model name: use 1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or \
         digit and not all digits (a number names a task's model)"
    )]
    BadName(String),
    #[error("a model named {0:?} already exists; import it under another name")]
    Exists(String),
    #[error("task {task}'s model card is damaged: {source}")]
    Card {
        task: i64,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "task {task} was trained by {plugin}, which is not loaded; its weights can only be \
         exported by that version (install it in the plugin directory)"
    )]
    TrainedPluginMissing { task: i64, plugin: String },
    #[error("plugin {plugin} could not export the weights: {source}")]
    Export {
        plugin: String,
        #[source]
        source: tli_plugin_api::PluginError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where a model comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelSource {
    Task { task: i64, job: i64, state: String },
    Imported { dir: PathBuf },
}

/// A model as listed (see the module docs).
#[derive(Clone, Debug)]
pub struct ModelEntry {
    pub id: String,
    pub source: ModelSource,
    pub card: ModelCard,
    /// Version of the plugin that trained it.
    pub plugin_version: String,
    /// Validation and test metrics, finite only.
    pub metrics: BTreeMap<String, f64>,
    /// The checkpoint's steps (a task), or the card's (imported).
    pub steps: u64,
    /// The newest checkpoint's bytes (a task), the weights' (imported).
    pub size_bytes: u64,
}

impl ModelEntry {
    pub fn is_task(&self) -> bool {
        matches!(self.source, ModelSource::Task { .. })
    }
}

/// A model id as given by a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelId {
    /// A task's model: its best checkpoint when it keeps any, else its
    /// newest; `last`: its newest in any case (`"12:last"`).
    Task {
        task: i64,
        last: bool,
    },
    Named(String),
}

impl ModelId {
    /// All digits: a task (`:last` after them: its newest checkpoint, not
    /// its best); otherwise a name, which must be valid.
    pub fn parse(text: &str) -> Result<Self, CatalogError> {
        let text = text.trim();
        let (number, last) = match text.strip_suffix(":last") {
            Some(n) => (n, true),
            None => (text.strip_suffix(":best").unwrap_or(text), false),
        };
        if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
            return number
                .parse()
                .map(|task| ModelId::Task { task, last })
                .map_err(|_| CatalogError::NotFound(text.into()));
        }
        check_name(text)?;
        Ok(ModelId::Named(text.into()))
    }
}

/// Checks an imported model's name (see [`CatalogError::BadName`]).
pub fn check_name(name: &str) -> Result<(), CatalogError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && !name.bytes().all(|b| b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(CatalogError::BadName(name.chars().take(80).collect()))
    }
}

/// The models of a state directory (see the module docs).
pub struct Catalog<'a> {
    pub store: &'a Store,
    pub state_dir: &'a Path,
}

impl Catalog<'_> {
    fn imported_dir(&self) -> PathBuf {
        self.state_dir.join(IMPORTED_DIR)
    }

    /// Where an imported model of this name lives.
    pub fn imported_path(&self, name: &str) -> Result<PathBuf, CatalogError> {
        check_name(name)?;
        Ok(self.imported_dir().join(name))
    }

    /// Every model: tasks newest first, then imported models by name.
    pub fn list(&self) -> Result<Vec<ModelEntry>, CatalogError> {
        let mut models = Vec::new();
        let mut jobs = self.store.jobs()?;
        jobs.sort_by_key(|j| std::cmp::Reverse(j.id));
        for job in jobs {
            let mut tasks = self.store.tasks_of(job.id)?;
            tasks.sort_by_key(|t| std::cmp::Reverse(t.id));
            for task in tasks {
                if let Ok(entry) = self.task_entry(&task, false) {
                    models.push(entry);
                }
            }
        }
        let mut names: Vec<String> = match std::fs::read_dir(self.imported_dir()) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| check_name(n).is_ok())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(CatalogError::Io {
                    path: self.imported_dir(),
                    source,
                })
            }
        };
        names.sort();
        for name in names {
            match self.imported_entry(&name) {
                Ok((entry, _)) => models.push(entry),
                Err(e) => tracing::warn!("imported model {name} is not listed: {e}"),
            }
        }
        Ok(models)
    }

    /// One model by id.
    pub fn get(&self, id: &str) -> Result<ModelEntry, CatalogError> {
        match ModelId::parse(id)? {
            ModelId::Task { task, last } => {
                let row = self
                    .store
                    .task(task)?
                    .ok_or_else(|| CatalogError::NotFound(id.into()))?;
                self.task_entry(&row, last)
            }
            ModelId::Named(name) => Ok(self.imported_entry(&name)?.0),
        }
    }

    fn imported_entry(&self, name: &str) -> Result<(ModelEntry, Bundle), CatalogError> {
        let dir = self.imported_path(name)?;
        if dir.symlink_metadata().is_err() {
            return Err(CatalogError::NotFound(name.into()));
        }
        let bundle = Bundle::open(&dir)?;
        let card = bundle.card.clone();
        Ok((
            ModelEntry {
                id: name.into(),
                source: ModelSource::Imported { dir },
                plugin_version: card.plugin.version.clone(),
                metrics: tli_models::card::finite_metrics(&card.metrics),
                steps: card.training.steps,
                size_bytes: bundle.weights_bytes,
                card,
            },
            bundle,
        ))
    }

    /// The checkpoints a task's model may come from, in order of choice:
    /// its best ones, best first (unless `last`), then its newest ones.
    fn model_checkpoints(
        &self,
        task: i64,
        last: bool,
    ) -> Result<Vec<tli_store::CheckpointRow>, StoreError> {
        let newest = self
            .store
            .checkpoints(task)?
            .into_iter()
            .filter(|r| r.best.is_none());
        let mut rows = if last {
            Vec::new()
        } else {
            self.store.best_checkpoints(task)?
        };
        rows.extend(newest);
        Ok(rows)
    }

    fn task_entry(&self, task: &TaskRow, last: bool) -> Result<ModelEntry, CatalogError> {
        let not = |why: &str| CatalogError::NotAModel {
            task: task.id,
            why: why.into(),
        };
        let card = self.store.model_card(task.id)?.ok_or_else(|| {
            not("it has no model card (trained on synthetic data, nothing to featurize new bars with, or submitted to an older host)")
        })?;
        let card: ModelCard = serde_json::from_str(&card).map_err(|source| CatalogError::Card {
            task: task.id,
            source,
        })?;
        let newest = self
            .model_checkpoints(task.id, last)?
            .into_iter()
            .next()
            .ok_or_else(|| not("it has no checkpoint yet"))?;
        Ok(ModelEntry {
            id: task.id.to_string(),
            source: ModelSource::Task {
                task: task.id,
                job: task.job_id,
                state: task.state.as_str().to_string(),
            },
            plugin_version: task
                .plugin_version
                .clone()
                .unwrap_or_else(|| card.plugin.version.clone()),
            metrics: evaluation_metrics(self.store, task.id)?,
            steps: newest.step,
            size_bytes: dir_bytes(Path::new(&newest.path)),
            card,
        })
    }

    /// The model as an opened, checked bundle: an imported one as it is;
    /// a task's exported into a scratch directory under `scratch`, opened,
    /// and the directory removed (the bundle keeps its weights open).
    pub fn open(
        &self,
        registry: &PluginRegistry,
        id: &str,
        scratch: &Path,
    ) -> Result<(ModelEntry, Bundle), CatalogError> {
        match ModelId::parse(id)? {
            ModelId::Named(name) => self.imported_entry(&name),
            ModelId::Task { task, last } => {
                std::fs::create_dir_all(scratch).map_err(|source| CatalogError::Io {
                    path: scratch.to_path_buf(),
                    source,
                })?;
                let dir = scratch.join(format!(
                    "task-{task}-{}-{}",
                    std::process::id(),
                    tli_core::ids::now_ms()
                ));
                let exported = self.export_task(registry, task, last, &dir);
                let opened = exported.and_then(|e| Ok((e.entry, Bundle::open(&e.dir)?)));
                let _ = std::fs::remove_dir_all(&dir);
                opened
            }
        }
    }

    /// Writes the model `id` as a bundle at `dir` (which must not exist).
    pub fn export(
        &self,
        registry: &PluginRegistry,
        id: &str,
        dir: &Path,
    ) -> Result<Exported, CatalogError> {
        match ModelId::parse(id)? {
            ModelId::Task { task, last } => self.export_task(registry, task, last, dir),
            ModelId::Named(name) => {
                let (entry, bundle) = self.imported_entry(&name)?;
                let dir = bundle.copy_to(dir)?;
                Ok(Exported {
                    entry,
                    dir,
                    skipped: Vec::new(),
                })
            }
        }
    }

    fn export_task(
        &self,
        registry: &PluginRegistry,
        task_id: i64,
        last: bool,
        dir: &Path,
    ) -> Result<Exported, CatalogError> {
        let task = self
            .store
            .task(task_id)?
            .ok_or_else(|| CatalogError::NotFound(task_id.to_string()))?;
        let mut entry = self.task_entry(&task, last)?;
        let rows = self.model_checkpoints(task_id, last)?;
        let candidates: Vec<PathBuf> = rows.iter().map(|r| PathBuf::from(&r.path)).collect();
        let (good, refused) = checkpoint::latest_good(candidates.iter().map(PathBuf::as_path));
        let skipped = refused
            .iter()
            .map(|(path, why)| format!("skipping checkpoint {}: {why}", path.display()))
            .collect();
        let checkpoint_dir = good.ok_or_else(|| CatalogError::NotAModel {
            task: task_id,
            why: "none of its checkpoints verifies".into(),
        })?;
        let step = rows
            .iter()
            .find(|r| Path::new(&r.path) == checkpoint_dir)
            .map(|r| r.step)
            .unwrap_or(0);
        let plugin = registry
            .get_version(&task.plugin, &entry.plugin_version)
            .ok_or_else(|| CatalogError::TrainedPluginMissing {
                task: task_id,
                plugin: format!("{}@{}", task.plugin, entry.plugin_version),
            })?;
        let writer = BundleWriter::create(dir)?;
        plugin
            .export_weights(&task.config_json, &checkpoint_dir, &writer.weights_path())
            .map_err(|source| CatalogError::Export {
                plugin: plugin.label(),
                source,
            })?;
        let card = &mut entry.card;
        card.metrics = entry.metrics.clone();
        card.training.task = format!("job {} task {task_id}", task.job_id);
        card.training.steps = step;
        card.training.saved_at_ms = tli_core::ids::now_ms();
        entry.steps = step;
        let dir = writer.finish(card)?;
        Ok(Exported {
            entry,
            dir,
            skipped,
        })
    }
}

/// A model written as a bundle.
#[derive(Debug)]
pub struct Exported {
    pub entry: ModelEntry,
    pub dir: PathBuf,
    /// Checkpoints passed over because they did not verify, one line each.
    pub skipped: Vec<String>,
}

/// The task's latest validation and test metrics (what its evaluation reported).
fn evaluation_metrics(store: &Store, task: i64) -> Result<BTreeMap<String, f64>, StoreError> {
    Ok(store
        .latest_metrics(task)?
        .into_iter()
        .filter(|(name, v)| {
            (name.starts_with("valid_") || name.starts_with("test_")) && v.is_finite()
        })
        .collect())
}

/// Bytes of the regular files directly in `dir` (a checkpoint's).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_task_numbers_or_names() {
        let task = |task, last| ModelId::Task { task, last };
        assert_eq!(ModelId::parse("12").unwrap(), task(12, false));
        assert_eq!(ModelId::parse("12:best").unwrap(), task(12, false));
        assert_eq!(ModelId::parse("12:last").unwrap(), task(12, true));
        assert!(ModelId::parse(":last").is_err());
        assert_eq!(
            ModelId::parse("es-tft.v2").unwrap(),
            ModelId::Named("es-tft.v2".into())
        );
        for bad in ["", "-x", "../x", "a/b", ".hidden", "a b", &"x".repeat(65)] {
            assert!(
                matches!(ModelId::parse(bad), Err(CatalogError::BadName(_))),
                "{bad:?}"
            );
        }
        assert!(check_name("007").is_err(), "all digits names a task");
        assert!(ModelId::parse("99999999999999999999999").is_err());
    }
}
