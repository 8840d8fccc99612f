//! One face for the two kit environments an RL agent trains on: CartPole-v1
//! and the futures trading environment, both vectorized, with a serializable
//! [`EnvState`] for checkpoints.

use crate::data::Split;
use crate::env::{cartpole, TradingConfig, TradingState, VecCartPole, VecTradingEnv};
use serde::{Deserialize, Serialize};
use tli_plugin_api::{Dataset, PluginError};

/// Why the `"env"` of a plugin config was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvKindError {
    /// Not `"trading"` or `"cartpole"`.
    #[error("env: {value} is not one of \"trading\", \"cartpole\"")]
    Unknown {
        /// The JSON value given.
        value: serde_json::Value,
    },
}

/// Which environment an RL agent trains on (`"env"` in a plugin config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvKind {
    /// The futures trading environment over the dataset the host hands over.
    Trading,
    /// CartPole-v1 (the dataset is ignored).
    Cartpole,
}

impl EnvKind {
    /// The `"env"` of a user's config object; trading when absent.
    pub fn of_config(
        user: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, EnvKindError> {
        match user.get("env") {
            None => Ok(Self::Trading),
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|_| EnvKindError::Unknown { value: v.clone() }),
        }
    }
}

/// The training environments: a vector of CartPoles or of trading episodes.
pub enum VecEnv {
    CartPole(VecCartPole),
    Trading(VecTradingEnv),
}

/// What a checkpoint keeps of the environments.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvState {
    CartPole(VecCartPole),
    Trading(TradingState),
}

/// A finished training episode.
#[derive(Clone, Copy, Debug)]
pub struct Finished {
    /// Sum of the environment's (unscaled) rewards.
    pub episode_return: f64,
    /// Currency P&L net of costs (trading only).
    pub pnl: Option<f64>,
}

/// Caller-owned buffers of one vector step (see [`VecEnv::step_buffers`]).
pub struct StepBuffers {
    /// `num_envs × obs_dim`: observations to act on (after auto-reset).
    pub obs: Vec<f32>,
    /// `num_envs × obs_dim`: the state each environment reached (the final
    /// observation for an episode that just ended), for bootstrapping.
    pub next_obs: Vec<f32>,
    pub rewards: Vec<f32>,
    pub terminated: Vec<bool>,
    pub truncated: Vec<bool>,
}

impl StepBuffers {
    pub fn new(num_envs: usize, obs_dim: usize) -> Self {
        Self {
            obs: vec![0.0; num_envs * obs_dim],
            next_obs: vec![0.0; num_envs * obs_dim],
            rewards: vec![0.0; num_envs],
            terminated: vec![false; num_envs],
            truncated: vec![false; num_envs],
        }
    }
}

impl VecEnv {
    pub fn cartpole(num_envs: usize, seed: u64) -> Result<Self, PluginError> {
        Ok(Self::CartPole(VecCartPole::new(num_envs, seed)?))
    }

    /// Trading environments over the dataset's training split.
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

    pub fn obs_dim(&self) -> usize {
        match self {
            Self::CartPole(_) => cartpole::OBS_DIM,
            Self::Trading(e) => e.obs_dim(),
        }
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

    /// Steps every environment into `b` (including `next_obs`, the state each
    /// environment reached) and appends finished episodes to `finished`.
    pub fn step_buffers(
        &mut self,
        actions: &[u32],
        b: &mut StepBuffers,
        finished: &mut Vec<Finished>,
    ) -> Result<(), PluginError> {
        self.step(
            actions,
            &mut b.obs,
            &mut b.rewards,
            &mut b.terminated,
            &mut b.truncated,
        )?;
        match self {
            Self::CartPole(e) => b.next_obs.copy_from_slice(e.final_observations()),
            Self::Trading(e) => {
                b.next_obs.copy_from_slice(&b.obs);
                let d = e.obs_dim();
                for (i, done) in b.truncated.iter().enumerate() {
                    if *done {
                        e.final_observation(i, &mut b.next_obs[i * d..(i + 1) * d])?;
                    }
                }
            }
        }
        self.drain_finished_into(finished);
        Ok(())
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

    /// Appends the episodes finished since the last call, in order, to `out`.
    pub fn drain_finished_into(&mut self, out: &mut Vec<Finished>) {
        match self {
            Self::CartPole(e) => out.extend(e.drain_completed().map(|c| Finished {
                episode_return: c.episode_return,
                pnl: None,
            })),
            Self::Trading(e) => out.extend(e.drain_completed().map(|s| Finished {
                episode_return: s.reward,
                pnl: Some(s.pnl),
            })),
        }
    }

    /// Episodes finished since the last call, in order.
    pub fn drain_finished(&mut self) -> Vec<Finished> {
        let mut out = Vec::new();
        self.drain_finished_into(&mut out);
        out
    }

    pub fn state(&self) -> EnvState {
        match self {
            Self::CartPole(e) => EnvState::CartPole(e.clone()),
            Self::Trading(e) => EnvState::Trading(e.state()),
        }
    }

    /// Restores [`state`](Self::state); an error when it was written for the
    /// other environment or another number of environments.
    pub fn restore(&mut self, state: EnvState) -> Result<(), PluginError> {
        let mismatch = |what: &str| {
            PluginError::io(format!(
                "checkpoint environment state is {what}, which does not fit this trainer"
            ))
        };
        match (self, state) {
            (Self::CartPole(e), EnvState::CartPole(saved)) => {
                if saved.num_envs() != e.num_envs() {
                    return Err(mismatch(&format!(
                        "{} CartPole environments (this trainer has {})",
                        saved.num_envs(),
                        e.num_envs()
                    )));
                }
                *e = saved;
                Ok(())
            }
            (Self::Trading(e), EnvState::Trading(saved)) => e
                .restore(saved)
                .map_err(|err| PluginError::io(err.message.to_string())),
            (Self::CartPole(_), EnvState::Trading(_)) => Err(mismatch("trading")),
            (Self::Trading(_), EnvState::CartPole(_)) => Err(mismatch("CartPole")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};

    fn user(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn the_env_key_names_the_environment_and_trading_is_the_default() {
        assert_eq!(EnvKind::of_config(&Map::new()), Ok(EnvKind::Trading));
        assert_eq!(
            EnvKind::of_config(&user(json!({"env": "cartpole"}))),
            Ok(EnvKind::Cartpole)
        );
        let e = EnvKind::of_config(&user(json!({"env": "atari"}))).unwrap_err();
        assert_eq!(
            e,
            EnvKindError::Unknown {
                value: json!("atari")
            }
        );
        assert_eq!(
            e.to_string(),
            "env: \"atari\" is not one of \"trading\", \"cartpole\""
        );
    }
}
