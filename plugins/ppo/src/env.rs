//! One face for the two kit environments the agent trains on.

use serde::{Deserialize, Serialize};
use tli_plugin_api::{Dataset, PluginError};
use tli_plugin_kit::data::Split;
use tli_plugin_kit::env::{TradingConfig, TradingState, VecCartPole, VecTradingEnv};

/// A finished training episode.
#[derive(Clone, Copy, Debug)]
pub struct Finished {
    /// Sum of the environment's (unscaled) rewards.
    pub episode_return: f64,
    /// Currency P&L net of costs (trading only).
    pub pnl: Option<f64>,
}

pub enum Env {
    CartPole(VecCartPole),
    Trading(VecTradingEnv),
}

/// What a checkpoint keeps of the environment.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvState {
    CartPole(VecCartPole),
    Trading(TradingState),
}

impl Env {
    pub fn cartpole(num_envs: usize, seed: u64) -> Result<Self, PluginError> {
        Ok(Self::CartPole(VecCartPole::new(num_envs, seed)?))
    }

    pub fn trading(
        dataset: &Dataset,
        config: TradingConfig,
        num_envs: usize,
        seed: u64,
    ) -> Result<Self, PluginError> {
        Ok(Self::Trading(VecTradingEnv::from_dataset(
            dataset,
            Split::Train,
            config,
            num_envs,
            seed,
        )?))
    }

    pub fn observe(&self, out: &mut [f32]) -> Result<(), PluginError> {
        match self {
            Self::CartPole(e) => e.observe(out),
            Self::Trading(e) => e.observe(out),
        }
    }

    /// Steps every environment. `terminated`: a true terminal state (no
    /// bootstrap); `truncated`: a time limit (bootstrap from
    /// [`final_observation`](Self::final_observation)). A done environment has
    /// been reset and `obs` holds its next episode's first observation.
    pub fn step(
        &mut self,
        actions: &[u32],
        obs: &mut [f32],
        rewards: &mut [f32],
        terminated: &mut [bool],
        truncated: &mut [bool],
    ) -> Result<(), PluginError> {
        match self {
            Self::CartPole(e) => e.step(actions, obs, rewards, terminated, truncated),
            Self::Trading(e) => {
                // Trading episodes only end at their time limit.
                e.step(actions, obs, rewards, truncated)?;
                terminated.fill(false);
                Ok(())
            }
        }
    }

    /// The last observation of environment `env`'s episode that just ended.
    pub fn final_observation(&self, env: usize, out: &mut [f32]) -> Result<(), PluginError> {
        match self {
            Self::CartPole(e) => {
                let d = out.len();
                out.copy_from_slice(&e.final_observations()[env * d..(env + 1) * d]);
                Ok(())
            }
            Self::Trading(e) => e.final_observation(env, out),
        }
    }

    /// Episodes finished since the last call, in order.
    pub fn drain_finished(&mut self) -> Vec<Finished> {
        match self {
            Self::CartPole(e) => e
                .drain_completed()
                .map(|c| Finished {
                    episode_return: c.episode_return,
                    pnl: None,
                })
                .collect(),
            Self::Trading(e) => e
                .drain_completed()
                .map(|s| Finished {
                    episode_return: s.reward,
                    pnl: Some(s.pnl),
                })
                .collect(),
        }
    }

    pub fn state(&self) -> EnvState {
        match self {
            Self::CartPole(e) => EnvState::CartPole(e.clone()),
            Self::Trading(e) => EnvState::Trading(e.state()),
        }
    }

    pub fn restore(&mut self, state: EnvState) -> Result<(), PluginError> {
        match (self, state) {
            (Self::CartPole(e), EnvState::CartPole(s)) => {
                if s.num_envs() != e.num_envs() {
                    return Err(PluginError::io(format!(
                        "checkpoint holds {} CartPole environments, this trainer has {}",
                        s.num_envs(),
                        e.num_envs()
                    )));
                }
                *e = s;
                Ok(())
            }
            (Self::Trading(e), EnvState::Trading(s)) => e
                .restore(s)
                .map_err(|err| PluginError::io(err.message.to_string())),
            _ => Err(PluginError::io(
                "checkpoint was written for the other environment (cartpole vs trading)",
            )),
        }
    }
}
