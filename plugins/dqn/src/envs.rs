//! The two training environments behind one interface: CartPole-v1 and the
//! futures trading environment, both vectorized kit environments.

use serde::{Deserialize, Serialize};
use tli_plugin_api::{Dataset, PluginError};
use tli_plugin_kit::{
    data::Split,
    env::{cartpole, TradingConfig, TradingState, VecCartPole, VecTradingEnv},
};

pub enum Envs {
    CartPole(VecCartPole),
    Trading(VecTradingEnv),
}

/// What a checkpoint holds of the environments.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvState {
    CartPole(VecCartPole),
    Trading(TradingState),
}

/// A finished episode: its return (sum of rewards) and, for trading, its P&L.
#[derive(Clone, Copy, Debug)]
pub struct Finished {
    pub episode_return: f64,
    pub pnl: Option<f64>,
}

/// Caller-owned buffers of one vector step.
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

impl Envs {
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

    /// Steps every environment; fills `b` (see [`StepBuffers`]) and appends
    /// finished episodes to `finished`.
    pub fn step(
        &mut self,
        actions: &[u32],
        b: &mut StepBuffers,
        finished: &mut Vec<Finished>,
    ) -> Result<(), PluginError> {
        match self {
            Self::CartPole(e) => {
                e.step(
                    actions,
                    &mut b.obs,
                    &mut b.rewards,
                    &mut b.terminated,
                    &mut b.truncated,
                )?;
                b.next_obs.copy_from_slice(e.final_observations());
                finished.extend(e.drain_completed().map(|c| Finished {
                    episode_return: c.episode_return,
                    pnl: None,
                }));
            }
            Self::Trading(e) => {
                e.step(actions, &mut b.obs, &mut b.rewards, &mut b.truncated)?;
                b.terminated.fill(false);
                b.next_obs.copy_from_slice(&b.obs);
                let d = e.obs_dim();
                for (i, done) in b.truncated.iter().enumerate() {
                    if *done {
                        e.final_observation(i, &mut b.next_obs[i * d..(i + 1) * d])?;
                    }
                }
                finished.extend(e.drain_completed().map(|s| Finished {
                    episode_return: s.reward,
                    pnl: Some(s.pnl),
                }));
            }
        }
        Ok(())
    }

    pub fn state(&self) -> EnvState {
        match self {
            Self::CartPole(e) => EnvState::CartPole(e.clone()),
            Self::Trading(e) => EnvState::Trading(e.state()),
        }
    }

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
