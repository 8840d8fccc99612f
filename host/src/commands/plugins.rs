//! `tli plugins list` and `tli doctor`.

use super::scan;
use crate::libtorch_info;
use crate::registry::PluginRegistry;
use anyhow::Result;
use serde::Serialize;
use std::path::Path;
use tli_cli::args::OutputFormat;
use tli_cli::plugin_table::{
    print_plugin_listing, print_refused, PluginJson, PluginListingJson, RefusedJson,
};
use tli_cli::{new_table, print_json};

pub(super) fn list(plugin_dir: &Path, output: OutputFormat) -> Result<()> {
    let registry = scan(plugin_dir)?;
    let listing = listing_of(&registry);
    if output == OutputFormat::Json {
        return print_json(&listing);
    }
    print_plugin_listing(&listing, "plugin directory");
    if registry.loaded.is_empty() {
        eprintln!(
            "no plugins loaded from {}; build them (make build) or point --plugin-dir / TLI_PLUGIN_DIR at their directory",
            plugin_dir.display()
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct DoctorReport {
    tli_version: &'static str,
    plugin_api_version: &'static str,
    libtorch: libtorch_info::LibtorchInfo,
    cuda_memory: String,
    plugins: PluginListingJson,
}

pub(super) fn doctor(plugin_dir: &Path, output: OutputFormat) -> Result<()> {
    let libtorch = libtorch_info::probe();
    let registry = scan(plugin_dir)?;
    let report = DoctorReport {
        tli_version: env!("CARGO_PKG_VERSION"),
        plugin_api_version: tli_plugin_api::PLUGIN_API_VERSION,
        libtorch,
        cuda_memory: crate::orchestrator::cuda::describe(),
        plugins: listing_of(&registry),
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
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("plugins refused", report.plugins.refused.len().to_string()),
    ];
    for (k, v) in rows {
        table.add_row(vec![k.to_string(), v]);
    }
    tli_cli::outln!("{table}");
    print_refused(&report.plugins);
    Ok(())
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// A local scan in the listing's shape (the same as a host's answer).
fn listing_of(registry: &PluginRegistry) -> PluginListingJson {
    PluginListingJson {
        plugin_dir: registry.dir.display().to_string(),
        host_plugin_api: tli_plugin_api::PLUGIN_API_VERSION.to_string(),
        plugins: registry
            .loaded
            .iter()
            .map(|p| PluginJson {
                name: p.manifest.name.clone(),
                version: p.manifest.version.clone(),
                api_version: p.manifest.api_version.clone(),
                family: p.manifest.family.clone(),
                description: p.manifest.description.clone(),
                path: p.source.display().to_string(),
                load_ms: Some(p.load_time.as_secs_f64() * 1e3),
                default_config: p.manifest.default_config.clone(),
                config_schema: p.manifest.config_schema.clone(),
                capabilities: p.manifest.capabilities.clone(),
                headline_metrics: p.manifest.headline_metrics.clone(),
                loaded_from: p.path.display().to_string(),
                checksum: p.checksum.clone(),
                loaded_unix_ms: p.loaded_at_ms,
                active_tasks: None,
                tasks: None,
            })
            .collect(),
        refused: registry
            .refused
            .iter()
            .map(|r| RefusedJson {
                path: r.path.display().to_string(),
                reason: r.reason.clone(),
            })
            .collect(),
    }
}
