//! The `tli` command line, declared with clap.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "tli",
    version,
    about = "Train trading models on futures data with dynamically loaded model plugins"
)]
pub struct Cli {
    /// Directory of plugin libraries (libtli_plugin_*.so). Default: <dir of tli>/plugins, else the dir of tli.
    #[arg(long, env = "TLI_PLUGIN_DIR", global = true)]
    pub plugin_dir: Option<PathBuf>,

    /// Output format: tables for people, JSON (on stdout) for programs.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Table, global = true)]
    pub output: OutputFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Inspect plugins.
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Report libtorch, CUDA devices and what the plugin directory holds.
    Doctor,
    /// Train models.
    Train {
        #[command(subcommand)]
        command: TrainCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum PluginsCommand {
    /// List loaded plugins, and files that were refused with the reason.
    List,
}

#[derive(Subcommand, Debug)]
pub enum TrainCommand {
    /// Train plugins inside this process (no host) on the synthetic sample dataset.
    Local(LocalArgs),
}

#[derive(Args, Debug)]
pub struct LocalArgs {
    /// Plugin to train; repeat to train several one after another.
    #[arg(long = "plugin", short = 'p', required = true)]
    pub plugins: Vec<String>,
    /// Optimisation steps per plugin.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub steps: u64,
    /// Steps per call into the plugin (progress is reported between calls).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub slice: u64,
    /// Config as JSON, `@file.json`, or `PLUGIN=JSON` / `PLUGIN=@file` for one plugin. Repeatable.
    #[arg(long)]
    pub config: Vec<String>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Rows of the synthetic dataset.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(64..=10_000_000))]
    pub rows: u64,
}
