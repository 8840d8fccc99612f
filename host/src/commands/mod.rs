//! What each `tli` subcommand does, and how its result is printed: a table
//! for people or JSON on stdout for programs (logs and progress go to stderr).
//!
//! * [`plugins`]: `tli plugins list`, `tli doctor`
//! * [`train`]: `tli train local`
//! * [`profile`]: `tli profile memory` (measured memory, child processes, chart)
//! * [`data`]: `tli data synth|inspect|convert|contracts`
//! * [`host`]: `tli host run|status`
//! * [`serve`]: `tli host serve` (the gRPC server)
//! * [`remote`]: the gRPC client commands `tli train start|watch|status|list|stop|resume`, `tli resources`
//! * [`plot`]: `tli train plot` (through a host) and `tli plot` (a state directory): PNG charts

mod data;
mod executor;
mod host;
mod plot;
mod plugin_table;
mod plugins;
mod profile;
mod remote;
mod render;
mod serve;
mod train;
mod view;
mod worker;

use crate::cli::{
    Cli, Command, DataCommand, HostCommand, PluginsCommand, ProfileCommand, TrainCommand,
};
use crate::registry::PluginRegistry;
use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use serde::Serialize;
use std::path::Path;

/// Runs the parsed command; the exit code is non-zero on any failure.
pub fn run(cli: Cli) -> Result<()> {
    let plugin_dir = cli
        .plugin_dir
        .clone()
        .unwrap_or_else(crate::default_plugin_dir);
    let contracts = cli.contracts.as_deref();
    match &cli.command {
        Command::Plugins {
            command: PluginsCommand::List { local: true },
        } => plugins::list(&plugin_dir, cli.output),
        Command::Plugins {
            command: PluginsCommand::List { local: false },
        } => remote::plugins(&cli),
        Command::Plugins {
            command: PluginsCommand::Rescan,
        } => remote::rescan_plugins(&cli),
        Command::Doctor => plugins::doctor(&plugin_dir, cli.output),
        Command::Train {
            command: TrainCommand::Local(args),
        } => train::local(&plugin_dir, contracts, args, cli.output),
        Command::Train {
            command: TrainCommand::Plot(args),
        } => plot::train_plot(&cli, args),
        Command::Train { command } => remote::train(&cli, command),
        Command::Plot(args) => plot::store_plot(args, cli.output),
        Command::Resources => remote::resources(&cli),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(
                *shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "tli",
                &mut script,
            );
            crate::stdout::write_bytes(&script);
            Ok(())
        }
        Command::Host { command } => match command.as_ref() {
            HostCommand::Run(args) => host::run(&plugin_dir, contracts, args, cli.output),
            HostCommand::Serve(args) => serve::serve(&plugin_dir, contracts, args),
            HostCommand::Status { state_dir, job } => host::status(state_dir, *job, cli.output),
        },
        Command::Data { command } => match command {
            DataCommand::Synth(args) => data::synth(contracts, args, cli.output),
            DataCommand::Inspect {
                files,
                tz,
                features: false,
                ..
            } => data::inspect(contracts, &data::with_tz(files, tz), cli.output),
            DataCommand::Inspect {
                files,
                tz,
                features: true,
                feature_config,
            } => data::inspect_features(
                contracts,
                &data::with_tz(files, tz),
                feature_config.as_deref(),
                cli.output,
            ),
            DataCommand::Convert {
                source,
                tz,
                destination,
            } => data::convert(
                contracts,
                &data::with_tz(std::slice::from_ref(source), tz)[0],
                destination,
            ),
            DataCommand::Contracts => data::contracts(contracts, cli.output),
        },
        Command::Profile {
            command: ProfileCommand::Memory(args),
        } => profile::memory(&plugin_dir, contracts, args, cli.output),
        Command::Worker(args) => worker::worker(&plugin_dir, args),
    }
}

fn scan(plugin_dir: &Path) -> Result<PluginRegistry> {
    Ok(PluginRegistry::scan(plugin_dir)?)
}

fn print_json<T: Serialize>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    crate::outln!("{text}");
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
