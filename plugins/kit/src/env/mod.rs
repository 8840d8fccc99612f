//! Reinforcement-learning environments written as plain Rust (no tch), stepped
//! many at a time so the model, not the environment, is the bottleneck.
//!
//! * [`cartpole`]: CartPole-v1 with Gymnasium's exact dynamics, single and
//!   vectorized ([`VecCartPole`]), for checking RL plugins against a known task.
//! * [`trading`]: a vectorized futures trading environment ([`VecTradingEnv`])
//!   over a [`Dataset`](tli_plugin_api::Dataset) split: windowed feature
//!   observations, discrete position targets, P&L net of commission and slippage.
//!
//! Conventions shared by both:
//!
//! * A vectorized `step` takes one action per environment and writes into
//!   caller-owned buffers (no allocation per step); every buffer length is
//!   checked up front and a wrong length or an invalid action is a
//!   [`PluginError`], returned before any environment has moved.
//! * Finished episodes reset automatically: after a done, the observation
//!   buffer holds the first observation of the next episode, and the last
//!   observation of the finished one stays available for bootstrapping.
//! * Randomness comes only from the kit's [`Rng`](crate::rng::Rng), one stream
//!   per environment, and the whole mutable state is serde-serializable, so a
//!   restored checkpoint continues bit-identically.

pub mod cartpole;
pub mod trading;
pub mod trading_config;

pub use cartpole::{CartPole, CompletedEpisode, VecCartPole};
pub use trading::{EpisodeStats, TradingConfig, TradingState, VecTradingEnv};

use tli_plugin_api::PluginError;

/// Checks that a caller-provided buffer has the length a vectorized step needs.
pub(crate) fn check_len(what: &str, got: usize, want: usize) -> Result<(), PluginError> {
    if got == want {
        Ok(())
    } else {
        Err(PluginError::invalid_data(format!(
            "{what} has length {got}, expected {want}"
        )))
    }
}
