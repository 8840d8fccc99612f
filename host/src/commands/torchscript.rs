//! `tli models torchscript BUNDLE OUT --data FILE`: a bundle's model traced
//! by its plugin into a TorchScript module (plugin API 1.3), on the windows
//! of new bars featurized with the model's statistics. OUT gets `model.pt`,
//! the example inputs (`input<i>.bin`) and `signature.json`: the plugin's
//! signature plus what a user needs to read the outputs as `tli predict`
//! does (each output row's time, each column's target scale).

use super::scan;
use anyhow::{bail, Context, Result};
use std::path::Path;
use tli_cli::args::OutputFormat;
use tli_cli::print_json;
use tli_data::contracts::ContractBook;
use tli_data::BarSource;
use tli_models::Bundle;
use tli_plugin_api::Device;
use tli_runtime::models::{LoadedModel, PredictWindow};

/// Bars in the example when `--start` is not given.
const EXAMPLE_ROWS: usize = 256;

pub(super) struct Request<'a> {
    pub bundle: &'a Path,
    pub out: &'a Path,
    pub data: &'a BarSource,
    pub start: Option<i64>,
    pub device: Device,
}

pub(super) fn export(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    request: &Request<'_>,
    output: OutputFormat,
) -> Result<()> {
    if request.out.symlink_metadata().is_ok() {
        bail!(
            "{} already exists; give a new directory (nothing was written)",
            request.out.display()
        );
    }
    let bundle = Bundle::open(request.bundle)?;
    let book = ContractBook::load(contracts)?;
    let (table, notes) = request.data.read_for(&book, &bundle.card.features)?;
    let contract = request.data.contract(&table, &notes, &book)?;
    let registry = scan(plugin_dir)?;
    let name = bundle.card.plugin.name.clone();
    let model = LoadedModel::load(&registry, &bundle, &name, request.device)?;
    let start = match request.start {
        Some(start) => start,
        None => {
            let all = model.prepare(&table, contract, PredictWindow::default())?;
            let ts = &all.rows.timestamps;
            ts[ts.len().saturating_sub(EXAMPLE_ROWS)]
        }
    };
    let window = PredictWindow {
        start: Some(start),
        end: None,
    };
    let prepared = model.prepare(&table, contract, window)?;
    std::fs::create_dir_all(request.out)
        .with_context(|| format!("creating {}", request.out.display()))?;
    let result = (|| -> Result<serde_json::Value> {
        let signature =
            model.export_torchscript(&bundle, &prepared, request.out, request.device)?;
        let mut signature: serde_json::Value = serde_json::from_str(&signature)
            .context("the plugin's TorchScript signature is not JSON")?;
        let rows: Vec<usize> = signature["rows"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| r[1].as_u64().map(|r| r as usize))
                    .collect()
            })
            .unwrap_or_default();
        let timestamps: Vec<String> = rows
            .iter()
            .filter_map(|&r| prepared.rows.timestamps.get(r))
            .map(|&t| tli_data::timefmt::format(t))
            .collect();
        if timestamps.len() != rows.len() {
            bail!("the plugin's TorchScript rows name rows outside the example");
        }
        let stats = &prepared.asset.stats;
        let scales: Vec<f64> = signature["columns"]
            .as_array()
            .map(|columns| {
                columns
                    .iter()
                    .map(|c| {
                        let target = c.as_str().and_then(|c| c.split_once(':')).map(|(t, _)| t);
                        target
                            .and_then(|t| stats.target_names.iter().position(|n| n == t))
                            .map(|i| stats.target_scales[i])
                            .unwrap_or(1.0)
                    })
                    .collect()
            })
            .unwrap_or_default();
        signature["model"] = model.plugin.label().into();
        signature["symbol"] = prepared.rows.symbol.clone().into();
        signature["timestamps"] = timestamps.into();
        signature["target_scales"] = scales.into();
        let text = serde_json::to_vec_pretty(&signature)?;
        std::fs::write(request.out.join("signature.json"), text)
            .context("writing signature.json")?;
        Ok(signature)
    })();
    let signature = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir_all(request.out);
            return Err(e);
        }
    };
    if output == OutputFormat::Json {
        return print_json(&signature);
    }
    let windows = signature["rows"].as_array().map(Vec::len).unwrap_or(0);
    tli_cli::outln!(
        "{} traced on {windows} windows of {} into {} (model.pt, signature.json; \
         torch.jit.load(\"{}/model.pt\"))",
        model.plugin.label(),
        prepared.rows.symbol,
        request.out.display(),
        request.out.display()
    );
    Ok(())
}
