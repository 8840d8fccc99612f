//! Loading one plugin library: the checks a file must pass, the manifest
//! read through the ABI, and the typed calls into a loaded plugin
//! ([`LoadedPlugin`], [`TrainerHandle`]).
//!
//! Checks, in order (each failure is a refusal naming the file):
//! 1. the file is a complete ELF shared object for this machine (checked
//!    before `dlopen`, which would crash the host with SIGBUS on a truncated
//!    file), and `dlopen` succeeds;
//! 2. the `tli_plugin_api_version` symbol exists (otherwise: not a tli plugin);
//! 3. its semver is compatible with this host (same major, minor ≤ host's);
//! 4. abi_stable's own version and type-layout checks of the root module,
//!    against the module of the minor the plugin declares (abi_stable refuses
//!    a library with fewer fields than expected, so a 1.0 plugin is checked
//!    against the frozen 1.0 module and then read through the current one,
//!    whose 1.1 entry points read as absent for it);
//! 5. the manifest can be read, its name is `[a-z0-9_-]+` and its version semver.
//!
//! Libraries are never unloaded (abi_stable leaks them by design): stopping a
//! task drops its trainer, never the library.

use crate::elf_check::ElfError;
use crate::services::TaskServices;
use abi_stable::library::lib_header_from_path;
use abi_stable::std_types::{RResult, RStr};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tli_plugin_api::{
    abi::{v1_0, v1_1, v1_2, v1_3},
    capability, check_compatible,
    version::Incompatibility,
    DatasetAnnex, DatasetShape, EvalReport, MemoryBreakdown, PluginError, PluginModuleRef,
    Predictions, PredictorBox, PredictorSpec, StepReport, TaskInputs, TaskSpec, TrainerBox,
    MAX_HEADLINE_METRICS, PLUGIN_API_VERSION, VERSION_SYMBOL,
};

/// A plugin's manifest as the host keeps it: read once from the ABI form
/// ([`tli_plugin_api::PluginManifest`]), configs and schema parsed as JSON.
#[derive(Clone, Debug, Serialize)]
pub struct ParsedManifest {
    pub name: String,
    pub version: String,
    pub api_version: String,
    pub family: String,
    pub description: String,
    pub default_config: serde_json::Value,
    pub config_schema: serde_json::Value,
    /// Plugin API capabilities (`pooled` since 1.1, `predict` since 1.2 and
    /// only with its entry points); empty for a 1.0 plugin.
    pub capabilities: Vec<String>,
    /// The metrics tables show first for its tasks (1.5, see
    /// `Plugin::headline_metrics`): well-formed names only, no repeats, at
    /// most `MAX_HEADLINE_METRICS`; empty when the plugin names none.
    pub headline_metrics: Vec<String>,
}

impl ParsedManifest {
    pub fn has_capability(&self, name: &str) -> bool {
        self.capabilities.iter().any(|c| c == name)
    }
}

/// A plugin that loaded.
pub struct LoadedPlugin {
    /// The file as found in the plugin directory.
    pub source: PathBuf,
    /// Where the library was loaded from: `source` itself, or the host's
    /// private copy of it (a file found by a rescan, see `registry::live`).
    pub path: PathBuf,
    pub manifest: ParsedManifest,
    /// `manifest.version`, parsed (checked at load).
    pub version: semver::Version,
    /// SHA-256 of the library file, hex.
    pub checksum: String,
    /// When it was loaded (Unix ms).
    pub loaded_at_ms: i64,
    pub load_time: Duration,
    module: PluginModuleRef,
}

/// Why a library was refused. The message follows the file's name
/// ("libx.so is truncated: …"); the registry keeps it as the refusal's reason.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot be read: {0}")]
    Unreadable(#[source] std::io::Error),
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// `dlopen` failed; `reason` is what the dynamic loader said.
    #[error("cannot be loaded as a shared library ({reason})")]
    NotLoadable { reason: String },
    #[error(
        "not a tli plugin: it has no tli_plugin_api_version symbol (build it with \
         tli_plugin_api::export_plugin!)"
    )]
    NotATliPlugin,
    #[error("its tli_plugin_api_version marker is not UTF-8")]
    MarkerNotUtf8,
    /// Its declared plugin-API version is not one this host accepts.
    #[error("{0}")]
    Incompatible(Incompatibility),
    /// abi_stable's version or type-layout check failed; `detail` is its
    /// report, cut to its first lines.
    #[error("abi_stable refused it: {detail}")]
    AbiRefused { detail: String },
    #[error("its capabilities() failed: {0}")]
    Capabilities(PluginError),
    #[error("its headline_metrics() failed: {0}")]
    HeadlineMetrics(PluginError),
    #[error("its manifest() failed: {0}")]
    Manifest(PluginError),
    #[error("its manifest says plugin API {manifest} but its library symbol says {symbol}")]
    ApiMismatch { manifest: String, symbol: String },
    #[error("its {what} is not valid JSON: {source}")]
    ManifestJson {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("its name {name:?} is not lower-case [a-z0-9_-]+")]
    BadName { name: String },
    #[error("its version {version:?} is not semver: {source}")]
    BadVersion {
        version: String,
        source: semver::Error,
    },
}

/// A file that was refused, and why.
#[derive(Clone, Debug, Serialize)]
pub struct RefusedPlugin {
    pub path: PathBuf,
    pub reason: String,
}

/// Loads one library in place, returning the refusal reason on failure.
pub(super) fn load_plugin(path: &Path) -> Result<LoadedPlugin, LoadError> {
    load_plugin_as(path, PLUGIN_API_VERSION)
}

/// Loads the library at `path`, a copy of `source` whose checksum is
/// `checksum` (see `registry::live`).
pub(super) fn load_plugin_copy(
    source: &Path,
    path: &Path,
    checksum: String,
) -> Result<LoadedPlugin, LoadError> {
    let mut plugin = load_checked(path, PLUGIN_API_VERSION, checksum)?;
    plugin.source = source.to_path_buf();
    Ok(plugin)
}

/// Loads one library as a host speaking plugin API `host_api` would (a
/// parameter so that tests can apply an older host's rule to a real file).
pub fn load_plugin_as(path: &Path, host_api: &str) -> Result<LoadedPlugin, LoadError> {
    let checksum = file_sha256(path).map_err(LoadError::Unreadable)?;
    load_checked(path, host_api, checksum)
}

/// SHA-256 of a file, hex.
pub(super) fn file_sha256(path: &Path) -> std::io::Result<String> {
    tli_core::digest::sha256_stream(std::fs::File::open(path)?, None).map(|(digest, _)| digest)
}

fn load_checked(path: &Path, host_api: &str, checksum: String) -> Result<LoadedPlugin, LoadError> {
    let started = Instant::now();
    crate::elf_check::check_shared_object(path)?;
    let declared = read_declared_api_version(path)?;
    let declared_version =
        check_compatible(&declared, host_api).map_err(LoadError::Incompatible)?;
    let refused = |e: abi_stable::library::LibraryError| LoadError::AbiRefused {
        detail: first_lines(&e.to_string(), 6),
    };
    let header = lib_header_from_path(path).map_err(refused)?;
    // abi_stable accepts a library whose module has at least the fields it
    // expects: check against the module of the minor the plugin speaks. (A
    // later minor adds its frozen module type here.)
    match declared_version.minor {
        0 => header.ensure_layout::<v1_0::PluginModuleRef>(),
        1 => header.ensure_layout::<v1_1::PluginModuleRef>(),
        2 => header.ensure_layout::<v1_2::PluginModuleRef>(),
        3 | 4 => header.ensure_layout::<v1_3::PluginModuleRef>(),
        _ => header.ensure_layout::<PluginModuleRef>(),
    }
    .map_err(refused)?;
    // SAFETY: the layout was checked just above against the module of the
    // declared minor, whose fields are a prefix of `PluginModule`'s (the
    // `abi_v1_*_is_a_prefix_of_the_current_module` tests); the fields it
    // lacks are read through accessors that return `None` for this library.
    let module = unsafe { header.init_root_module_with_unchecked_layout::<PluginModuleRef>() }
        .map_err(refused)?;
    let capabilities = match module.capabilities() {
        None => Vec::new(),
        Some(f) => match f() {
            RResult::ROk(names) => names.into_iter().map(|n| n.into_string()).collect(),
            RResult::RErr(e) => return Err(LoadError::Capabilities(e)),
        },
    };
    // `predict` means the 1.2 entry points exist: a plugin of an older minor
    // that names it cannot be asked for a predictor.
    let mut capabilities = capabilities;
    if module.create_predictor().is_none() {
        capabilities.retain(|c| c != capability::PREDICT);
    }
    let headline_metrics = match module.headline_metrics() {
        None => Vec::new(),
        Some(f) => match f() {
            RResult::ROk(names) => headline_names(names.into_iter().map(|n| n.into_string())),
            RResult::RErr(e) => return Err(LoadError::HeadlineMetrics(e)),
        },
    };
    let manifest = match (module.manifest())() {
        RResult::ROk(m) => m,
        RResult::RErr(e) => return Err(LoadError::Manifest(e)),
    };
    if manifest.api_version.as_str() != declared {
        return Err(LoadError::ApiMismatch {
            manifest: manifest.api_version.into_string(),
            symbol: declared,
        });
    }
    let parse_json = |what: &'static str, text: &str| {
        serde_json::from_str(text).map_err(|source| LoadError::ManifestJson { what, source })
    };
    let manifest = ParsedManifest {
        default_config: parse_json("default config", &manifest.default_config)?,
        config_schema: parse_json("config schema", &manifest.config_schema)?,
        name: manifest.name.into_string(),
        version: manifest.version.into_string(),
        api_version: manifest.api_version.into_string(),
        family: manifest.family.into_string(),
        description: manifest.description.into_string(),
        capabilities,
        headline_metrics,
    };
    if manifest.name.is_empty()
        || !manifest
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
    {
        return Err(LoadError::BadName {
            name: manifest.name,
        });
    }
    let version =
        semver::Version::parse(&manifest.version).map_err(|source| LoadError::BadVersion {
            version: manifest.version.clone(),
            source,
        })?;
    Ok(LoadedPlugin {
        source: path.to_path_buf(),
        path: path.to_path_buf(),
        manifest,
        version,
        checksum,
        loaded_at_ms: crate::orchestrator::now_ms(),
        load_time: started.elapsed(),
        module,
    })
}

/// `dlopen`s the file and reads its `tli_plugin_api_version` marker. The
/// library stays loaded for the life of the process (it is about to be
/// loaded by abi_stable anyway, and nothing is ever unloaded).
fn read_declared_api_version(path: &Path) -> Result<String, LoadError> {
    use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};
    // SAFETY: loading a library runs its initialisers; that is inherent to
    // plugins. Nothing from it is called here, only a static is read.
    let library = unsafe { Library::open(Some(path), RTLD_LAZY | RTLD_LOCAL) }.map_err(|e| {
        LoadError::NotLoadable {
            reason: dl_reason(&e),
        }
    })?;
    // SAFETY: the symbol is declared by `export_plugin!` as `[u8; 32]`.
    let marker = unsafe { library.get::<*const [u8; 32]>(VERSION_SYMBOL) };
    let result = match marker {
        Ok(symbol) => {
            // SAFETY: a valid static of 32 bytes in a loaded library.
            let bytes: [u8; 32] = unsafe { **symbol };
            let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
            std::str::from_utf8(&bytes[..end])
                .map(str::to_string)
                .map_err(|_| LoadError::MarkerNotUtf8)
        }
        Err(_) => Err(LoadError::NotATliPlugin),
    };
    std::mem::forget(library);
    result
}

fn dl_reason(error: &libloading::Error) -> String {
    let text = error.to_string();
    // libloading wraps dlerror()'s text; keep only what the loader said.
    text.rsplit(": ").next().unwrap_or(&text).to_string()
}

/// A plugin's headline metric names as the host keeps them: names of 1 to 64
/// characters of `[A-Za-z0-9_.@/-]` (what a metric name may hold), each once,
/// at most [`MAX_HEADLINE_METRICS`], in the plugin's order; others dropped.
fn headline_names(names: impl Iterator<Item = String>) -> Vec<String> {
    let well_formed = |n: &str| {
        (1..=64).contains(&n.len())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.@/-".contains(c))
    };
    let mut kept: Vec<String> = Vec::new();
    for name in names {
        if kept.len() == MAX_HEADLINE_METRICS {
            break;
        }
        if well_formed(&name) && !kept.contains(&name) {
            kept.push(name);
        }
    }
    kept
}

fn first_lines(text: &str, n: usize) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(n)
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Calls a plugin function's result into a Rust `Result`.
fn into_result<T>(r: RResult<T, PluginError>) -> Result<T, PluginError> {
    r.into_result()
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.label(), self.source.display())
    }
}

impl LoadedPlugin {
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// `name@version`, as jobs pin it and messages name it.
    pub fn label(&self) -> String {
        format!("{}@{}", self.manifest.name, self.manifest.version)
    }

    /// Validates a config and returns it normalized.
    pub fn validate_config(&self, config_json: &str) -> Result<String, PluginError> {
        into_result((self.module.validate_config())(RStr::from(config_json)))
            .map(|s| s.into_string())
    }

    pub fn estimate_memory(
        &self,
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        into_result((self.module.estimate_memory())(
            RStr::from(config_json),
            shape,
            RStr::from(device),
        ))
    }

    /// Creates a trainer for one dataset that carries nothing beyond 1.0
    /// (see [`DatasetAnnex::plain`]).
    pub fn create_trainer(
        &self,
        spec: TaskSpec,
        services: TaskServices,
    ) -> Result<TrainerHandle, PluginError> {
        let annex = DatasetAnnex::plain(&spec.dataset);
        let inputs = TaskInputs::new(vec![(spec.dataset.clone(), annex)], false, 1);
        self.create_trainer_with_inputs(spec, inputs, services)
    }

    /// Creates a trainer. A 1.1 plugin also gets `inputs` (the task's
    /// datasets and side table); a 1.0 plugin gets the 1.0 call, and cannot
    /// take a pooled task.
    pub fn create_trainer_with_inputs(
        &self,
        spec: TaskSpec,
        inputs: TaskInputs,
        services: TaskServices,
    ) -> Result<TrainerHandle, PluginError> {
        let trainer = match self.module.create_trainer_with_inputs() {
            Some(create) => into_result(create(spec, inputs, services.into_abi()))?,
            None if inputs.pooled => {
                return Err(PluginError::invalid_config(format!(
                    "plugin {} speaks plugin API {}, which has no pooled tasks (1.1 and later)",
                    self.manifest.name, self.manifest.api_version
                )))
            }
            None => into_result((self.module.create_trainer())(spec, services.into_abi()))?,
        };
        Ok(TrainerHandle { trainer })
    }

    /// True when the plugin can apply a trained model (plugin API 1.2 and
    /// the `predict` capability); otherwise it is "train only".
    pub fn can_predict(&self) -> bool {
        self.manifest.has_capability(capability::PREDICT)
            && self.module.create_predictor().is_some()
    }

    /// Why this plugin cannot predict, as one line (`None` when it can).
    pub fn train_only_reason(&self) -> Option<String> {
        if self.can_predict() {
            return None;
        }
        Some(if self.module.create_predictor().is_none() {
            format!(
                "plugin {} speaks plugin API {}, which has no predictors (1.2 and later): it is \
                 train only",
                self.label(),
                self.manifest.api_version
            )
        } else {
            format!(
                "plugin {} does not declare the predict capability: it is train only",
                self.label()
            )
        })
    }

    fn predict_entry<T>(&self, entry: Option<T>) -> Result<T, PluginError> {
        match (self.train_only_reason(), entry) {
            (None, Some(f)) => Ok(f),
            (reason, _) => Err(PluginError::unsupported(reason.unwrap_or_else(|| {
                format!("plugin {} lacks a predictor entry point", self.label())
            }))),
        }
    }

    /// Writes the weights of the checkpoint in `checkpoint_dir` to
    /// `weights_path` (weights only).
    pub fn export_weights(
        &self,
        config_json: &str,
        checkpoint_dir: &Path,
        weights_path: &Path,
    ) -> Result<(), PluginError> {
        let export = self.predict_entry(self.module.export_weights())?;
        into_result(export(
            RStr::from(config_json),
            RStr::from(checkpoint_dir.to_string_lossy().as_ref()),
            RStr::from(weights_path.to_string_lossy().as_ref()),
        ))
    }

    /// Bytes a predictor will hold for batches of `shape.rows` rows.
    pub fn estimate_predictor_memory(
        &self,
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let estimate = self.predict_entry(self.module.estimate_predictor_memory())?;
        into_result(estimate(RStr::from(config_json), shape, RStr::from(device)))
    }

    /// The model of `spec` traced into a TorchScript module in `out_dir`
    /// on the windows of `example` (plugin API 1.3); its signature as JSON.
    pub fn export_torchscript(
        &self,
        spec: PredictorSpec,
        example: TaskInputs,
        out_dir: &Path,
        services: TaskServices,
    ) -> Result<String, PluginError> {
        self.predict_entry(Some(()))?;
        let export = self.module.export_torchscript().ok_or_else(|| {
            PluginError::unsupported(format!(
                "plugin {} speaks plugin API {}, which cannot export TorchScript (1.3 and later)",
                self.label(),
                self.manifest.api_version
            ))
        })?;
        into_result(export(
            spec,
            example,
            RStr::from(out_dir.to_string_lossy().as_ref()),
            services.into_abi(),
        ))
        .map(|s| s.into_string())
    }

    /// A predictor from exported weights.
    pub fn create_predictor(
        &self,
        spec: PredictorSpec,
        services: TaskServices,
    ) -> Result<PredictorHandle, PluginError> {
        let create = self.predict_entry(self.module.create_predictor())?;
        let predictor = into_result(create(spec, services.into_abi()))?;
        Ok(PredictorHandle { predictor })
    }
}

/// A live predictor, with the ABI's `RResult`s turned into `Result`s.
/// Dropping it drops the predictor inside the plugin.
pub struct PredictorHandle {
    predictor: PredictorBox,
}

impl PredictorHandle {
    pub fn predict(&mut self, batch: TaskInputs) -> Result<Predictions, PluginError> {
        into_result(self.predictor.predict(batch))
    }
    pub fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        into_result(self.predictor.memory())
    }
    pub fn stream(&mut self, bars: TaskInputs) -> Result<Predictions, PluginError> {
        into_result(self.predictor.stream(bars))
    }
    pub fn reset(&mut self) -> Result<(), PluginError> {
        into_result(self.predictor.reset())
    }
}

/// A live trainer, with the ABI's `RResult`s turned into `Result`s.
/// Dropping it drops the trainer inside the plugin (never the library).
pub struct TrainerHandle {
    trainer: TrainerBox,
}

impl TrainerHandle {
    pub fn step(&mut self, n: u64) -> Result<StepReport, PluginError> {
        into_result(self.trainer.step(n))
    }
    pub fn evaluate(&mut self) -> Result<EvalReport, PluginError> {
        into_result(self.trainer.evaluate())
    }
    pub fn save_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        into_result(
            self.trainer
                .save_checkpoint(RStr::from(dir.to_string_lossy().as_ref())),
        )
    }
    pub fn load_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        into_result(
            self.trainer
                .load_checkpoint(RStr::from(dir.to_string_lossy().as_ref())),
        )
    }
    pub fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        into_result(self.trainer.memory())
    }
    pub fn total_steps(&self) -> Result<u64, PluginError> {
        into_result(self.trainer.total_steps())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headline_names_keep_well_formed_names_once_in_order_up_to_the_limit() {
        let names = [
            "valid_sharpe",
            "",
            "train_loss",
            "valid_sharpe",
            "bad name",
            "x".repeat(65).as_str(),
            "test_qrisk_p50",
            "a",
            "b",
            "c",
            "d",
        ]
        .map(String::from);
        let kept = headline_names(names.into_iter());
        assert_eq!(
            kept,
            [
                "valid_sharpe",
                "train_loss",
                "test_qrisk_p50",
                "a",
                "b",
                "c"
            ]
        );
        assert_eq!(kept.len(), MAX_HEADLINE_METRICS);
    }
}
