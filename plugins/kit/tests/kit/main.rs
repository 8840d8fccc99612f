//! The plugin kit's integration tests, one binary (one libtorch link):
//! CartPole against Gymnasium's equations ([`cartpole_env`]), the evaluation
//! metrics by hand ([`metrics`]) and the vectorized trading environment
//! ([`trading_env`]).

mod cartpole_env;
mod counter_rng;
mod metrics;
mod nn_blocks;
mod trading_env;
mod windows;
