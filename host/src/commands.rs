//! What each `tli` subcommand does, and how its result is printed: a table
//! for people or JSON on stdout for programs (logs and progress go to stderr).

use crate::cli::{Cli, Command, LocalArgs, OutputFormat, PluginsCommand, TrainCommand};
use crate::libtorch_info;
use crate::local_train::{self, LocalTrainRequest};
use crate::registry::PluginRegistry;
use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use serde::Serialize;
use std::io::IsTerminal;
use std::path::Path;

/// Runs the parsed command; the exit code is non-zero on any failure.
pub fn run(cli: Cli) -> Result<()> {
    let plugin_dir = cli
        .plugin_dir
        .clone()
        .unwrap_or_else(crate::default_plugin_dir);
    match &cli.command {
        Command::Plugins {
            command: PluginsCommand::List,
        } => plugins_list(&plugin_dir, cli.output),
        Command::Doctor => doctor(&plugin_dir, cli.output),
        Command::Train {
            command: TrainCommand::Local(args),
        } => train_local(&plugin_dir, args, cli.output),
    }
}

fn scan(plugin_dir: &Path) -> Result<PluginRegistry> {
    Ok(PluginRegistry::scan(plugin_dir)?)
}

fn print_json<T: Serialize>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    println!("{text}");
    Ok(())
}

fn new_table(header: Vec<&str>) -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header);
    table
}

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

fn plugins_list(plugin_dir: &Path, output: OutputFormat) -> Result<()> {
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
    plugins: PluginListing<'a>,
}

fn doctor(plugin_dir: &Path, output: OutputFormat) -> Result<()> {
    let libtorch = libtorch_info::probe();
    let registry = scan(plugin_dir)?;
    let report = DoctorReport {
        tli_version: env!("CARGO_PKG_VERSION"),
        plugin_api_version: tli_plugin_api::PLUGIN_API_VERSION,
        libtorch,
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

/// Splits a `--config` value into (plugin, JSON text), reading `@file`s.
fn parse_config_arg(arg: &str) -> Result<(Option<String>, String)> {
    let trimmed = arg.trim_start();
    let (plugin, value) = if trimmed.starts_with('{') || trimmed.starts_with('@') {
        (None, trimmed)
    } else {
        match trimmed.split_once('=') {
            Some((name, value)) => (Some(name.trim().to_string()), value.trim_start()),
            None => bail!("--config {arg:?}: expected JSON, @file, PLUGIN=JSON or PLUGIN=@file"),
        }
    };
    let json = match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("--config: cannot read config file {path}"))?,
        None => value.to_string(),
    };
    serde_json::from_str::<serde_json::Value>(&json)
        .with_context(|| format!("--config {arg:?} is not valid JSON"))?;
    Ok((plugin, json))
}

fn train_local(plugin_dir: &Path, args: &LocalArgs, output: OutputFormat) -> Result<()> {
    let configs = args
        .config
        .iter()
        .map(|c| parse_config_arg(c))
        .collect::<Result<Vec<_>>>()?;
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
        seed: args.seed,
        device: args.device.clone(),
        rows: args.rows as usize,
        interactive: std::io::stderr().is_terminal(),
    };
    let reports = local_train::run(&registry, &request);
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
                    format!("{} / {}", human_bytes(e.total), human_bytes(m.total))
                }
                (Some(e), None) => format!("{} / -", human_bytes(e.total)),
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
        println!("{table}");
        for r in reports.iter().filter(|r| r.error.is_some()) {
            println!(
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

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_args_are_routed_and_checked() {
        assert_eq!(
            parse_config_arg("{\"a\":1}").unwrap(),
            (None, "{\"a\":1}".into())
        );
        let (p, j) = parse_config_arg("template={\"batch_size\": 8}").unwrap();
        assert_eq!(p.as_deref(), Some("template"));
        assert_eq!(j, "{\"batch_size\": 8}");
        assert!(parse_config_arg("template={oops").is_err());
        assert!(parse_config_arg("nonsense").is_err());
        assert!(parse_config_arg("@/definitely/not/here.json").is_err());
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
