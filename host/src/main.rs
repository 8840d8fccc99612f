//! The `tli` binary: parses the command line, sets up logging to stderr and
//! turns any error into one clear line and a non-zero exit code.

fn main() -> std::process::ExitCode {
    // Before any thread exists: malloc set up so that resident memory follows
    // live tensors without page faults in every step (TLI_MALLOC, TLI_MMAP_THRESHOLD).
    let _ = tli_host::allocator::configure_from_env();
    // Before any thread exists, so every thread inherits it: subnormal floats
    // flushed to zero (a state-space model's decays otherwise crawl; TLI_DENORMALS).
    let _ = tli_host::float_env::flush_denormals();
    // A write past `ulimit -f` fails with EFBIG instead of killing the host.
    tli_host::fault_signals::ignore_file_size_signal();
    // As many descriptors as the system allows: a host's connections are
    // capped below the limit, the rest kept for its store and checkpoints.
    let _ = tli_host::connections::raise_descriptor_limit();
    let cli = tli_cli::parse("tli");
    tli_cli::init_logging(cli.log_style());
    tli_cli::exit_code(tli_host::commands::run(cli))
}
