//! The `tli` binary: parses the command line, sets up logging to stderr and
//! turns any error into one clear line and a non-zero exit code.

use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    // Before any thread exists: TLI_MMAP_THRESHOLD (resident memory follows live tensors).
    tli_host::allocator::configure_from_env();
    // A write past `ulimit -f` fails with EFBIG instead of killing the host.
    tli_host::fault_signals::ignore_file_size_signal();
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
    let cli = tli_cli::parse("tli");
    match tli_host::commands::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // Each cause once: many errors repeat their source in their own message.
            let chain = tli_core::error_chain::error_chain(error.as_ref());
            eprintln!("error: {chain}");
            std::process::ExitCode::FAILURE
        }
    }
}
