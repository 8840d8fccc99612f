//! What the host-side `tli` subcommands do (those that load plugins or run
//! a host), and how their result is printed: a table for people or JSON on
//! stdout for programs (logs and progress go to stderr).
//!
//! * [`plugins`]: `tli plugins list`, `tli doctor`
//! * [`train`]: `tli train local`
//! * [`predict`]: `tli predict` (a model bundle applied to a bar file)
//! * [`models`]: `tli models list|export` (a state directory's models, a task's bundle)
//! * [`profile`]: `tli profile memory` (measured memory, child processes, chart)
//! * [`host`]: `tli host run|status`
//! * [`serve`]: `tli host serve` (the gRPC server)
//!
//! Every other command (the gRPC client commands, plots, `data`,
//! `completions`) is `tli-cli`'s, shared with the `tli-client` binary.

mod backtest;
mod executor;
mod host;
mod models;
mod plugins;
mod predict;
mod profile;
mod serve;
mod torchscript;
mod train;
mod walk_forward;
mod worker;

use crate::registry::PluginRegistry;
use anyhow::Result;
use std::path::Path;
use tli_cli::args::{Cli, Command, HostCommand, PluginsCommand, ProfileCommand, TrainCommand};

/// Runs the parsed command; the exit code is non-zero on any failure.
pub fn run(cli: Cli) -> Result<()> {
    let plugin_dir = cli
        .plugin_dir
        .clone()
        .unwrap_or_else(crate::default_plugin_dir);
    let contracts = cli.contracts.as_deref();
    if let Some(result) = tli_cli::run_client(&cli, "tli") {
        return result;
    }
    match &cli.command {
        Command::Plugins {
            command: PluginsCommand::List { local: true },
        } => plugins::list(&plugin_dir, cli.output),
        Command::Doctor => plugins::doctor(&plugin_dir, cli.output),
        Command::Train {
            command: TrainCommand::Local(args),
        } => train::local(&plugin_dir, contracts, args, cli.output),
        Command::Host { command } => match command.as_ref() {
            HostCommand::Run(args) => host::run(&plugin_dir, contracts, args, cli.output),
            HostCommand::Serve(args) => {
                if cli.token_on_command_line {
                    anyhow::bail!(
                        "--token is the token a client sends; a host takes its own from \
                         --token-file FILE (or the TLI_SERVE_TOKEN environment variable), which \
                         keeps it out of the process list. Nothing was started."
                    );
                }
                serve::serve(&plugin_dir, contracts, args)
            }
            HostCommand::Status { state_dir, job } => host::status(state_dir, *job, cli.output),
        },
        Command::Profile {
            command: ProfileCommand::Memory(args),
        } => profile::memory(&plugin_dir, contracts, args, cli.output),
        Command::Predict(args) => predict::predict(&plugin_dir, contracts, args, cli.output),
        Command::Backtest(args) => backtest::backtest(&plugin_dir, contracts, args, cli.output),
        Command::WalkForward(args) => walk_forward::run(&plugin_dir, contracts, args, cli.output),
        Command::Models { command } => models::run(&plugin_dir, contracts, command, cli.output),
        Command::Worker(args) => worker::worker(&plugin_dir, args),
        // Every other command is a client command, run above.
        other => anyhow::bail!("internal: {other:?} is neither a host nor a client command"),
    }
}

fn scan(plugin_dir: &Path) -> Result<PluginRegistry> {
    Ok(PluginRegistry::scan(plugin_dir)?)
}
