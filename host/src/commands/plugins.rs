//! `tli plugins list` and `tli doctor`.

use super::plugin_table::{print_plugin_listing, print_refused, PluginListingJson};
use super::{new_table, print_json, scan};
use crate::cli::OutputFormat;
use crate::libtorch_info;
use anyhow::Result;
use serde::Serialize;
use std::path::Path;

pub(super) fn list(plugin_dir: &Path, output: OutputFormat) -> Result<()> {
    let registry = scan(plugin_dir)?;
    let listing = PluginListingJson::from(&registry);
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
        plugins: PluginListingJson::from(&registry),
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
    crate::outln!("{table}");
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
