//! The end-to-end tests, one binary (one libtorch link): the real `tli`
//! binary and real plugin `.so` files, one module per area. Run one area with
//! `cargo test --release -p tli-e2e-tests --test e2e -- <module>::`.
//! Helpers shared by the modules are the crate's library (`tests/src`).

mod backtest_cli;
mod bring_your_own_bars;
mod changed_inputs;
mod client_binary;
mod connection_flood;
mod data_cli;
mod data_roots;
mod date_splits;
mod defects_in_use;
mod dqn_plugin;
mod first_hour;
mod grpc_cli;
mod host_restart;
mod hostile_requests;
mod hot_plugins;
mod in_process_host;
mod io_faults;
mod kill_storm;
mod mamba2_plugin;
mod misbehaving_plugins;
mod model_service;
mod orchestrator;
mod plots;
mod plugin_loading;
mod ppo_plugin;
mod predict_cli;
mod predict_models;
mod profile_cli;
mod proto_api;
mod python_client;
mod selection;
mod shutdown;
mod slurm_executor;
mod status_page;
mod sweeps;
mod tensorboard;
mod tft_plugin;
mod torchscript_export;
mod training_through_the_abi;
mod user_columns;
mod walk_forward;
