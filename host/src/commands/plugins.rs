//! `tli plugins list` and `tli doctor`.

use super::{new_table, print_json, scan};
use crate::cli::OutputFormat;
use crate::libtorch_info;
use crate::registry::PluginRegistry;
use anyhow::Result;
use serde::Serialize;
use std::path::Path;

#[derive(Serialize)]
struct PluginRow<'a> {
    name: &'a str,
    version: &'a str,
    api_version: &'a str,
    family: &'a str,
    description: &'a str,
    path: String,
    load_ms: f64,
    default_config: &'a serde_json::Value,
    config_schema: &'a serde_json::Value,
}

#[derive(Serialize)]
struct PluginListing<'a> {
    plugin_dir: String,
    host_plugin_api: &'static str,
    plugins: Vec<PluginRow<'a>>,
    refused: &'a [crate::registry::RefusedPlugin],
}

fn listing(registry: &PluginRegistry) -> PluginListing<'_> {
    PluginListing {
        plugin_dir: registry.dir.display().to_string(),
        host_plugin_api: tli_plugin_api::PLUGIN_API_VERSION,
        plugins: registry
            .loaded
            .iter()
            .map(|p| PluginRow {
                name: &p.manifest.name,
                version: &p.manifest.version,
                api_version: &p.manifest.api_version,
                family: &p.manifest.family,
                description: &p.manifest.description,
                path: p.path.display().to_string(),
                load_ms: p.load_time.as_secs_f64() * 1e3,
                default_config: &p.manifest.default_config,
                config_schema: &p.manifest.config_schema,
            })
            .collect(),
        refused: &registry.refused,
    }
}

pub(super) fn list(plugin_dir: &Path, output: OutputFormat) -> Result<()> {
    let registry = scan(plugin_dir)?;
    let listing = listing(&registry);
    if output == OutputFormat::Json {
        return print_json(&listing);
    }
    println!("plugin directory: {}", listing.plugin_dir);
    let mut table = new_table(vec!["NAME", "VERSION", "API", "FAMILY", "DESCRIPTION"]);
    for p in &listing.plugins {
        table.add_row(vec![
            p.name,
            p.version,
            p.api_version,
            p.family,
            p.description,
        ]);
    }
    println!("{table}");
    print_refused(&registry);
    if registry.loaded.is_empty() {
        eprintln!(
            "no plugins loaded from {}; build them (make build) or point --plugin-dir / TLI_PLUGIN_DIR at their directory",
            plugin_dir.display()
        );
    }
    Ok(())
}

fn print_refused(registry: &PluginRegistry) {
    for r in &registry.refused {
        println!("refused {}: {}", r.path.display(), r.reason);
    }
}

#[derive(Serialize)]
struct DoctorReport<'a> {
    tli_version: &'static str,
    plugin_api_version: &'static str,
    libtorch: libtorch_info::LibtorchInfo,
    cuda_memory: String,
    plugins: PluginListing<'a>,
}

pub(super) fn doctor(plugin_dir: &Path, output: OutputFormat) -> Result<()> {
    let libtorch = libtorch_info::probe();
    let registry = scan(plugin_dir)?;
    let report = DoctorReport {
        tli_version: env!("CARGO_PKG_VERSION"),
        plugin_api_version: tli_plugin_api::PLUGIN_API_VERSION,
        libtorch,
        cuda_memory: crate::orchestrator::cuda::describe(),
        plugins: listing(&registry),
    };
    if output == OutputFormat::Json {
        return print_json(&report);
    }
    let lt = &report.libtorch;
    let or_unknown = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
    let mut table = new_table(vec!["CHECK", "VALUE"]);
    let rows = [
        ("tli", report.tli_version.to_string()),
        ("plugin API", report.plugin_api_version.to_string()),
        ("libtorch version", or_unknown(lt.version.clone())),
        (
            "libtorch dir",
            or_unknown(lt.lib_dir.as_ref().map(|p| p.display().to_string())),
        ),
        ("torch_cuda linked", yes_no(lt.torch_cuda_loaded).into()),
        ("CUDA available", yes_no(lt.cuda_available).into()),
        ("CUDA devices", lt.cuda_devices.to_string()),
        ("cuDNN available", yes_no(lt.cudnn_available).into()),
        ("CUDA memory", crate::orchestrator::cuda::describe()),
        ("intra-op threads", lt.intra_op_threads.to_string()),
        ("plugin dir", report.plugins.plugin_dir.clone()),
        (
            "plugins loaded",
            report
                .plugins
                .plugins
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("plugins refused", report.plugins.refused.len().to_string()),
    ];
    for (k, v) in rows {
        table.add_row(vec![k.to_string(), v]);
    }
    println!("{table}");
    print_refused(&registry);
    Ok(())
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
