//! The plugin kit's integration tests, one binary (one libtorch link):
//! CartPole against Gymnasium's equations ([`cartpole_env`]), the evaluation
//! metrics by hand ([`metrics`]), the vectorized trading environment
//! ([`trading_env`]) and the fused flat AdamW against the per-tensor Adam
//! ([`flat_adamw`]).

mod cartpole_env;
mod counter_rng;
mod flat_adamw;
mod nn_blocks;
mod trading_env;
mod windows;
