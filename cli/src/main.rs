//! `tli-client`: the `tli` command line without libtorch, for machines that
//! only drive hosts (a laptop watching a GPU box's jobs): the same commands
//! and flags as `tli`, less those that load plugins or run a host.

use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    let filter = EnvFilter::try_from_env("TLI_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(
            std::env::var_os("NO_COLOR").is_none()
                && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        )
        .init();
    let cli = tli_cli::parse("tli-client");
    let result = tli_cli::run_client(&cli, "tli-client").unwrap_or_else(|| {
        Err(anyhow::anyhow!(
            "this command loads plugins or runs a host, which tli-client (built without \
             libtorch) cannot do: run it with the full `tli` on the host machine"
        ))
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // Each cause once: many errors repeat their source in their own message.
            let chain = tli_core::error_chain::error_chain(error.as_ref());
            eprintln!("error: {chain}");
            std::process::ExitCode::FAILURE
        }
    }
}
