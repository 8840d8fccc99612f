//! `tli train local`: in-process training on the synthetic dataset or a bar file
//! (and the dataset loader `tli profile memory` shares).

use super::scan;
use crate::byte_size::format_bytes;
use crate::local_train::{self, LocalTrainRequest, SaveModels};
use crate::plugin_configs::PluginConfigs;
use crate::registry::PluginRegistry;
use abi_stable::std_types::RArc;
use anyhow::{bail, Context, Result};
use std::io::IsTerminal;
use std::path::Path;
use tli_cli::args::{DataArgs, LocalArgs, OutputFormat};
use tli_cli::render::format_metrics_at_most;
use tli_cli::{new_table, print_json};

/// Metrics in the RESULTS cell of `train local`'s table (`-o json` has all).
const LOCAL_RESULTS: usize = 3;
use tli_data::contracts::ContractBook;
use tli_data::features::{AnnotatedDataset, FeatureConfig, FeatureStats};
use tli_data::synthetic_ar::{synthetic_ar_annotated, SyntheticArSpec};
use tli_data::BarSource;
use tli_models::card::DataFile;

/// An in-process run's dataset and, for a bar file, what a saved model
/// keeps of it.
pub(super) struct LocalData {
    pub annotated: AnnotatedDataset,
    /// `None` for the synthetic dataset.
    pub fitted: Option<Fitted>,
}

/// The feature pipeline of a bar file and what it fitted.
pub(super) struct Fitted {
    pub features: FeatureConfig,
    pub stats: FeatureStats,
    pub file: DataFile,
}

/// The bar file through the feature pipeline, or the synthetic AR(1) dataset
/// (seeded with `seed`).
pub(super) fn dataset_for(
    contracts: Option<&Path>,
    args: &DataArgs,
    seed: u64,
) -> Result<AnnotatedDataset> {
    local_data(contracts, args, seed).map(|d| d.annotated)
}

/// [`dataset_for`], with the pipeline's statistics for a bar file.
pub(super) fn local_data(
    contracts: Option<&Path>,
    args: &DataArgs,
    seed: u64,
) -> Result<LocalData> {
    let Some(source) = &args.data else {
        if args.dates.any() {
            bail!("--start, --end, --valid-start and --test-start cut a bar file: give --data");
        }
        if args.features.any() {
            bail!(
                "--features, --feature-column, --no-builtin-features, --target and \
                 --target-horizons shape the inputs of a bar file: give --data"
            );
        }
        return Ok(LocalData {
            annotated: synthetic_ar_annotated(SyntheticArSpec {
                rows: args.rows as usize,
                seed,
                ..SyntheticArSpec::default()
            }),
            fitted: None,
        });
    };
    let features = args
        .dates
        .apply_to_features(args.features.to_json()?.as_deref())
        .context("--features is not a valid feature config")?;
    let config: FeatureConfig = match &features {
        Some(json) => {
            serde_json::from_str(json).context("--features is not a valid feature config")?
        }
        None => FeatureConfig::default(),
    };
    let source = BarSource {
        tz: args.tz.clone(),
        start: args.dates.start,
        end: args.dates.end,
        ..source.clone()
    };
    source.check()?;
    let book = ContractBook::load(contracts)?;
    let (table, notes) = source.read_for(&book, &config)?;
    let contract = source.contract(&table, &notes, &book)?;
    let (annotated, stats) = tli_data::features::build_with_stats(&table, contract, &config)?;
    Ok(LocalData {
        annotated,
        fitted: Some(Fitted {
            features: config,
            stats,
            file: data_file(&source.path)?,
        }),
    })
}

/// A bar file by name and SHA-256, as a model card records it.
pub(super) fn data_file(path: &Path) -> Result<DataFile> {
    let file = tli_data::files::open_data_file(path)?;
    let (sha256, _) = tli_core::digest::sha256_stream(file, None)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(DataFile {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        sha256,
    })
}

/// Refuses, before anything trains, a `--save` whose bundle directories
/// exist or whose plugins cannot predict.
fn check_saveable(registry: &PluginRegistry, plugins: &[String], save: &SaveModels) -> Result<()> {
    for name in plugins {
        let dir = save.bundle_dir(plugins, name);
        if dir.symlink_metadata().is_ok() {
            bail!(
                "--save: {} already exists; give a new directory (nothing was trained)",
                dir.display()
            );
        }
        if let Ok(plugin) = registry.resolve(name) {
            if let Some(reason) = plugin.train_only_reason() {
                bail!("--save: {reason}, so its model cannot be saved (nothing was trained)");
            }
        }
    }
    Ok(())
}

/// One line on stderr: the dataset's size and splits.
pub(super) fn describe_dataset(dataset: &tli_plugin_api::Dataset) {
    eprintln!(
        "dataset {}: {} rows x {} features ({} train / {} validation / {} test)",
        dataset.symbol,
        dataset.rows(),
        dataset.feature_names.len(),
        dataset.splits.train_end,
        dataset.splits.valid_end - dataset.splits.valid_start,
        dataset.rows() as u64 - dataset.splits.test_start
    );
}

pub(super) fn local(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    args: &LocalArgs,
    output: OutputFormat,
) -> Result<()> {
    let configs = PluginConfigs::parse(&args.config, &args.plugins)?;
    let registry = scan(plugin_dir)?;
    if registry.loaded.is_empty() {
        bail!(
            "no plugins could be loaded from {} ({} refused); run `tli plugins list` for details",
            plugin_dir.display(),
            registry.refused.len()
        );
    }
    // A mistyped plugin is one clear line before any data is read.
    for name in &args.plugins {
        if let Err(e) = registry.resolve(name) {
            bail!(
                "--plugin {name}: {e}; nothing was trained (`tli plugins list --local` shows \
                 what {} holds)",
                plugin_dir.display()
            );
        }
    }
    let LocalData { annotated, fitted } = local_data(contracts, &args.data, args.run.seed)?;
    let AnnotatedDataset { dataset, annex } = annotated;
    let dataset = RArc::new(dataset);
    describe_dataset(&dataset);
    let save = match (&args.save, fitted) {
        (Some(dir), Some(fitted)) => Some(SaveModels {
            dir: dir.clone(),
            features: fitted.features,
            stats: fitted.stats,
            data: vec![fitted.file],
        }),
        (Some(_), None) => bail!("--save needs --data: a model keeps the bar file's pipeline"),
        (None, _) => None,
    };
    if let Some(save) = &save {
        check_saveable(&registry, &args.plugins, save)?;
    }
    let request = LocalTrainRequest {
        plugins: args.plugins.clone(),
        steps: args.steps,
        slice: args.slice,
        configs,
        seed: args.run.seed,
        device: args.run.device,
        threads: args.run.threads,
        interactive: std::io::stderr().is_terminal(),
        save,
    };
    let reports = local_train::run(&registry, &request, &dataset, &annex);
    if output == OutputFormat::Json {
        print_json(&reports)?;
    } else {
        let mut table = new_table(vec![
            "PLUGIN",
            "STATUS",
            "STEPS",
            "STEPS/S",
            "LOSS first → last",
            "RESULTS",
            "MEMORY (est/measured)",
        ]);
        for r in &reports {
            let loss = |m: &std::collections::BTreeMap<String, f64>| {
                m.get("train_loss")
                    .map(|v| format!("{v:.4}"))
                    .unwrap_or_else(|| "-".into())
            };
            // What the plugin says to compare it by (its validation results
            // and the last step's metrics), the loss having its own column.
            let headline = registry
                .get(&r.plugin)
                .map(|p| p.manifest.headline_metrics.clone())
                .unwrap_or_default();
            let mut results = r.final_metrics.clone();
            results.extend(r.evaluation.iter().map(|(k, v)| (k.clone(), *v)));
            results.remove("train_loss");
            let memory = match (r.memory_estimate, r.memory_measured) {
                (Some(e), Some(m)) => {
                    format!("{} / {}", format_bytes(e.total), format_bytes(m.total))
                }
                (Some(e), None) => format!("{} / -", format_bytes(e.total)),
                _ => "-".into(),
            };
            table.add_row(vec![
                r.plugin.clone(),
                r.status.to_string(),
                r.steps_done.to_string(),
                match r.steps_per_second {
                    r if r >= 100.0 => format!("{r:.0}"),
                    r if r >= 1.0 => format!("{r:.1}"),
                    r => format!("{r:.2}"),
                },
                format!("{} → {}", loss(&r.first_metrics), loss(&r.final_metrics)),
                format_metrics_at_most(&results, &headline, LOCAL_RESULTS),
                memory,
            ]);
        }
        tli_cli::outln!("{table}");
        for r in &reports {
            if let Some(dir) = &r.bundle {
                tli_cli::outln!(
                    "{} saved to {} (apply it with `tli predict --model {} --data FILE`)",
                    r.plugin,
                    dir.display(),
                    dir.display()
                );
            }
        }
        for r in reports.iter().filter(|r| r.error.is_some()) {
            tli_cli::outln!(
                "{} failed: {}",
                r.plugin,
                r.error.as_deref().unwrap_or_default()
            );
        }
    }
    let failed = reports.iter().filter(|r| r.error.is_some()).count();
    if failed > 0 {
        bail!("{failed} of {} training run(s) failed", reports.len());
    }
    Ok(())
}
