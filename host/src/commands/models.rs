//! `tli models list|show|export --state-dir S`: the models of a state
//! directory read offline (its store read-only, its imported bundles), in
//! the shapes the host's `ModelService` gives (`tli_cli::model_view`).
//! `export` has the plugin version that trained a task write the weights of
//! its newest good checkpoint into a bundle. Every other `tli models`
//! command talks to a host (tli-cli).

use super::scan;
use anyhow::{bail, Context, Result};
use std::path::Path;
use tli_cli::args::{ModelsCommand, OutputFormat};
use tli_cli::model_view::{print_model, print_models};
use tli_cli::print_json;
use tli_runtime::models::catalog::Catalog;
use tli_server::api::models::model_info;
use tli_store::Store;

pub(super) fn run(
    plugin_dir: &Path,
    contracts: Option<&Path>,
    command: &ModelsCommand,
    output: OutputFormat,
) -> Result<()> {
    if let ModelsCommand::Torchscript {
        bundle,
        out,
        data,
        start,
        device,
    } = command
    {
        return super::torchscript::export(
            plugin_dir,
            contracts,
            &super::torchscript::Request {
                bundle,
                out,
                data,
                start: *start,
                device: *device,
            },
            output,
        );
    }
    let Some(state_dir) = command.state_dir() else {
        bail!("internal: `tli models` without --state-dir is a client command");
    };
    let store = Store::open_read_only(state_dir)
        .with_context(|| format!("reading the store of {}", state_dir.display()))?;
    let catalog = Catalog {
        store: &store,
        state_dir,
    };
    match command {
        ModelsCommand::List { .. } => {
            let models: Vec<_> = catalog
                .list()?
                .iter()
                .map(|entry| model_info(entry, None))
                .collect();
            print_models(&models, output, &state_dir.display().to_string())
        }
        ModelsCommand::Show { model, .. } => {
            let entry = catalog.get(model)?;
            let mut info = model_info(&entry, None);
            info.card_json = serde_json::to_string_pretty(&entry.card)?;
            print_model(&info, output)
        }
        ModelsCommand::Export { model, dir, .. } => {
            let registry = scan(plugin_dir)?;
            let exported = catalog.export(&registry, model, dir)?;
            for line in &exported.skipped {
                eprintln!("{line}");
            }
            let entry = &exported.entry;
            if output == OutputFormat::Json {
                return print_json(&serde_json::json!({
                    "model": entry.id,
                    "task": entry.is_task().then(|| entry.id.clone()),
                    "bundle": exported.dir,
                    "checkpoint_step": entry.steps,
                }));
            }
            tli_cli::outln!(
                "model {} ({}@{}, step {}) exported to {} (apply it with `tli predict --model {} \
                 --data FILE`)",
                entry.id,
                entry.card.plugin.name,
                entry.plugin_version,
                entry.steps,
                exported.dir.display(),
                exported.dir.display()
            );
            Ok(())
        }
        ModelsCommand::Import { .. }
        | ModelsCommand::Load { .. }
        | ModelsCommand::Unload { .. }
        | ModelsCommand::Torchscript { .. } => {
            bail!("internal: this `tli models` command is a client command")
        }
    }
}
