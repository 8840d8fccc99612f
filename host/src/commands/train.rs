//! `tli train local`: in-process training on the synthetic dataset or a bar file
//! (and the dataset loader `tli profile memory` shares).

use super::scan;
use crate::byte_size::format_bytes;
use crate::local_train::{self, LocalTrainRequest};
use crate::plugin_configs::PluginConfigs;
use abi_stable::std_types::RArc;
use anyhow::{bail, Context, Result};
use std::io::IsTerminal;
use std::path::Path;
use tli_cli::args::{DataArgs, LocalArgs, OutputFormat};
use tli_cli::{new_table, print_json};
use tli_data::contracts::ContractBook;
use tli_data::features::{AnnotatedDataset, FeatureConfig};
use tli_data::synthetic_ar::{synthetic_ar_annotated, SyntheticArSpec};
use tli_data::BarSource;

/// The bar file through the feature pipeline, or the synthetic AR(1) dataset
/// (seeded with `seed`).
pub(super) fn dataset_for(
    contracts: Option<&Path>,
    args: &DataArgs,
    seed: u64,
) -> Result<AnnotatedDataset> {
    let Some(source) = &args.data else {
        return Ok(synthetic_ar_annotated(SyntheticArSpec {
            rows: args.rows as usize,
            seed,
            ..SyntheticArSpec::default()
        }));
    };
    let config: FeatureConfig = match &args.features {
        Some(json) => {
            serde_json::from_str(json).context("--features is not a valid feature config")?
        }
        None => FeatureConfig::default(),
    };
    let source = BarSource {
        tz: args.tz.clone(),
        ..source.clone()
    };
    let book = ContractBook::load(contracts)?;
    let (table, notes) = source.read(&book)?;
    let contract = source.contract(&table, &notes, &book)?;
    Ok(tli_data::features::build_annotated_dataset(
        &table, contract, &config,
    )?)
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
    let AnnotatedDataset { dataset, annex } = dataset_for(contracts, &args.data, args.run.seed)?;
    let dataset = RArc::new(dataset);
    describe_dataset(&dataset);
    let registry = scan(plugin_dir)?;
    if registry.loaded.is_empty() {
        bail!(
            "no plugins could be loaded from {} ({} refused); run `tli plugins list` for details",
            plugin_dir.display(),
            registry.refused.len()
        );
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
            "FIRST LOSS",
            "FINAL LOSS",
            "VALID SKILL",
            "MEMORY (est/measured)",
        ]);
        for r in &reports {
            let loss = |m: &std::collections::BTreeMap<String, f64>| {
                m.get("train_loss")
                    .map(|v| format!("{v:.4}"))
                    .unwrap_or_else(|| "-".into())
            };
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
                format!("{:.0}", r.steps_per_second),
                loss(&r.first_metrics),
                loss(&r.final_metrics),
                r.evaluation
                    .get("valid_skill")
                    .map(|v| format!("{v:.4}"))
                    .unwrap_or_else(|| "-".into()),
                memory,
            ]);
        }
        tli_cli::outln!("{table}");
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
