//! `tli-client`: the `tli` command line without libtorch, for machines that
//! only drive hosts (a laptop watching a GPU box's jobs): the same commands
//! and flags as `tli`, less those that load plugins or run a host.

fn main() -> std::process::ExitCode {
    let cli = tli_cli::parse("tli-client");
    tli_cli::init_logging(cli.log_style());
    let result = tli_cli::run_client(&cli, "tli-client").unwrap_or_else(|| {
        Err(anyhow::anyhow!(
            "this command loads plugins or runs a host, which tli-client (built without \
             libtorch) cannot do: run it with the full `tli` on the host machine"
        ))
    });
    tli_cli::exit_code(result)
}
