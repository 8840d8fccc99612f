//! `tli-cli`: the `tli` command line. The only crate that knows clap.
//!
//! * [`args`]: every command's arguments (clap), shared by both binaries.
//! * [`run_client`]: what needs no libtorch: the gRPC client commands
//!   ([`remote`]: `train start|watch|status|list|stop|resume`, `plugins
//!   list|rescan`, `resources`), `train plot` and `plot` ([`plot`], drawn by
//!   [`charts`]), `data synth|inspect|convert|contracts` ([`data`]) and
//!   `completions`.
//! * [`view`] and [`render`]: the JSON shapes every command prints and the
//!   tables people read; [`plugin_table`]: the plugin listing; [`stdout`]:
//!   output that ends quietly on a closed pipe.
//!
//! Two binaries are built from it: `tli-client` (this crate's own, with no
//! libtorch: it must never depend on tch, torch-sys or the host runtime;
//! checked by `scripts/check-layers.sh`), and the full `tli` of `tli-host`,
//! which runs the host-side commands itself and hands every other command to
//! [`run_client`].

pub mod args;
pub mod backtests;
pub mod charts;
pub mod data;
pub mod model_view;
mod people_log;
pub mod plot;
pub mod plugin_table;
pub mod predictions;
pub mod remote;
pub mod render;
pub mod stdout;
pub mod view;

use anyhow::Result;
use args::{Cli, Command, DataCommand, HostCommand, OutputFormat, PluginsCommand, TrainCommand};
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use serde::Serialize;

/// The command line of this process, parsed, for the binary `bin_name` (as
/// `--help` and `--version` name it); clap exits with its usage message on a
/// bad one.
pub fn parse(bin_name: &'static str) -> Cli {
    let matches = <Cli as clap::CommandFactory>::command()
        .name(bin_name)
        .bin_name(bin_name)
        .get_matches();
    let mut cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    cli.token_on_command_line = on_command_line(&matches, "token");
    cli
}

/// Whether the (global) argument `id` was written on the command line, before
/// or after the subcommand, rather than taken from its environment variable.
fn on_command_line(matches: &clap::ArgMatches, id: &str) -> bool {
    let here = matches.try_contains_id(id).unwrap_or(false)
        && matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    here || matches
        .subcommand()
        .is_some_and(|(_, sub)| on_command_line(sub, id))
}

/// Runs `cli` if it is a client command (see the crate docs): `None` when it
/// is one only the full `tli` binary has (it loads plugins or runs a host).
/// `bin_name` names the binary in generated shell completions.
pub fn run_client(cli: &Cli, bin_name: &'static str) -> Option<Result<()>> {
    let contracts = cli.contracts.as_deref();
    if cli.output.is_data_only() && !matches!(cli.command, Command::Predict(_)) {
        return Some(Err(anyhow::anyhow!(
            "-o {} is for `tli predict`; this command prints `-o table` or `-o json`",
            if cli.output == OutputFormat::Csv {
                "csv"
            } else {
                "parquet"
            }
        )));
    }
    let result = match &cli.command {
        Command::Plugins {
            command: PluginsCommand::List { local: false },
        } => remote::plugins(cli),
        Command::Plugins {
            command: PluginsCommand::Rescan,
        } => remote::rescan_plugins(cli),
        Command::Train {
            command: TrainCommand::Local(_),
        } => return None,
        Command::Train {
            command: TrainCommand::Plot(args),
        } => plot::train_plot(cli, args),
        Command::Train { command } => remote::train(cli, command),
        Command::Sweep { command } => remote::sweeps::sweep(cli, command),
        Command::Plot(args) => plot::store_plot(args, cli.output),
        Command::Resources => remote::resources(cli),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(
                *shell,
                &mut <Cli as clap::CommandFactory>::command().name(bin_name),
                bin_name,
                &mut script,
            );
            stdout::write_bytes(&script);
            Ok(())
        }
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
                feature_columns,
                target,
            } => data::inspect_features(
                contracts,
                &data::with_tz(files, tz),
                data::FeatureRequest {
                    config: feature_config.as_deref(),
                    columns: feature_columns,
                    target: target.as_ref(),
                },
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
        Command::Plugins {
            command: PluginsCommand::List { local: true },
        }
        | Command::Doctor
        | Command::Host { .. }
        | Command::Profile { .. }
        | Command::WalkForward(_)
        | Command::Worker(_) => return None,
        Command::Backtest(args) if args.is_bundle() => return None,
        Command::Backtest(args) => remote::models::backtest(cli, args),
        Command::Predict(args) if args.is_bundle() => return None,
        Command::Predict(args) => remote::models::predict(cli, args),
        Command::Models { command } if command.is_local() => return None,
        Command::Models { command } => remote::models::models(cli, command),
    };
    Some(result)
}

/// How log lines read on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStyle {
    /// A service's log (`host serve`, `host run`, `worker`): time, level,
    /// where it came from and its fields, for files and journals.
    Service,
    /// An interactive command's: the message alone, errors and warnings
    /// prefixed `error:` / `warning:`, as the command's own lines read.
    People,
}

impl Cli {
    /// Hosts and workers log as services; every other command speaks to a person.
    pub fn log_style(&self) -> LogStyle {
        match &self.command {
            Command::Host { command } => match command.as_ref() {
                HostCommand::Serve(_) | HostCommand::Run(_) => LogStyle::Service,
                _ => LogStyle::People,
            },
            Command::Worker(_) => LogStyle::Service,
            _ => LogStyle::People,
        }
    }
}

/// Logs to stderr, filtered by `TLI_LOG` (or `RUST_LOG`; default `info`),
/// coloured only on a terminal and without `NO_COLOR`: both binaries' set-up.
/// With `TLI_LOG` or `RUST_LOG` set, every command logs as a service (the
/// lines a bug report wants); otherwise `style` says.
pub fn init_logging(style: LogStyle) {
    use tracing_subscriber::EnvFilter;
    let asked = EnvFilter::try_from_env("TLI_LOG").or_else(|_| EnvFilter::try_from_default_env());
    let style = if asked.is_ok() {
        LogStyle::Service
    } else {
        style
    };
    let filter = asked.unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::env::var_os("NO_COLOR").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match style {
        LogStyle::Service => builder.init(),
        LogStyle::People => builder.event_format(people_log::ForPeople).init(),
    }
}

/// A command's result as the process's exit: any error as one line on
/// stderr (each cause once) and a non-zero code.
pub fn exit_code(result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!(
                "error: {}",
                tli_core::error_chain::error_chain(error.as_ref())
            );
            std::process::ExitCode::FAILURE
        }
    }
}

/// `value` as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    outln!("{text}");
    Ok(())
}

/// A table in the house style, with `header`.
pub fn new_table(header: Vec<&str>) -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header);
    table
}
