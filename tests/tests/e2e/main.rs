//! The end-to-end tests, one binary (one libtorch link): the real `tli`
//! binary and real plugin `.so` files, one module per area. Run one area with
//! `cargo test --release -p tli-e2e-tests --test e2e -- <module>::`.
//! Helpers shared by the modules are the crate's library (`tests/src`).

mod data_cli;
mod data_roots;
mod defects_in_use;
mod dqn_plugin;
mod grpc_cli;
mod host_restart;
mod in_process_host;
mod mamba2_plugin;
mod orchestrator;
mod plots;
mod plugin_loading;
mod ppo_plugin;
mod profile_cli;
mod proto_api;
mod slurm_executor;
mod status_page;
mod tensorboard;
mod tft_plugin;
mod training_through_the_abi;
