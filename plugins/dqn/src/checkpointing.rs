//! DQN checkpoints: both networks, the optimizer, the replay buffer (unless
//! `checkpoint_replay` is off) and every counter and RNG, so that a resumed
//! run is identical to an uninterrupted one.

use crate::replay::NStep;
use crate::{DqnConfig, DqnTrainer};
use serde::{Deserialize, Serialize};
use std::path::Path;
use tch::Tensor;
use tli_plugin_api::PluginError;
use tli_plugin_kit::{checkpoint, rl::EnvState, rng::Rng};

/// What `state.json` holds besides the tensors.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedState {
    config: DqnConfig,
    requested: u64,
    env_steps: u64,
    updates: u64,
    optimizer_steps: u64,
    explore_rng: Rng,
    replay_rng: Rng,
    envs: EnvState,
    nstep: NStep,
    replay_saved: bool,
    replay_len: usize,
    replay_pos: usize,
    episodes: u64,
    recent_returns: Vec<f64>,
    recent_pnl: Vec<f64>,
    /// Checkpoints written before validation metrics were reported only by
    /// the call that measured them kept the last ones here: read, ignored.
    #[serde(rename = "valid_metrics", default, skip_serializing)]
    _old_valid_metrics: Option<serde::de::IgnoredAny>,
}

impl DqnTrainer {
    fn saved_state(&self) -> SavedState {
        SavedState {
            config: self.config.clone(),
            requested: self.requested,
            env_steps: self.env_steps,
            updates: self.updates,
            optimizer_steps: self.optimizer.step,
            explore_rng: self.explore_rng.clone(),
            replay_rng: self.replay_rng.clone(),
            envs: self.envs.state(),
            nstep: self.nstep.clone(),
            replay_saved: self.config.checkpoint_replay,
            replay_len: self.replay.len(),
            replay_pos: self.replay.pos(),
            episodes: self.episodes,
            recent_returns: self.recent_returns.iter().copied().collect(),
            recent_pnl: self.recent_pnl.iter().copied().collect(),
            _old_valid_metrics: None,
        }
    }

    pub(crate) fn save_to(&mut self, dir: &Path) -> Result<(), PluginError> {
        let replay_tensors = if self.config.checkpoint_replay {
            self.replay.to_tensors()?
        } else {
            Vec::new()
        };
        let mut named: Vec<(String, &Tensor)> = Vec::new();
        for (prefix, net) in [("online.", &self.online), ("target.", &self.target)] {
            named.extend(
                net.named_parameters()
                    .into_iter()
                    .map(|(n, t)| (format!("{prefix}{n}"), t)),
            );
        }
        named.extend(self.optimizer.named_state());
        named.extend(replay_tensors.iter().map(|(n, t)| (n.clone(), t)));
        checkpoint::save(dir, &named, &self.saved_state())
    }

    pub(crate) fn load_from(&mut self, dir: &Path) -> Result<(), PluginError> {
        let (tensors, state): (_, SavedState) = checkpoint::load(dir, self.device)?;
        // The validation cadence does not change training: a checkpoint
        // resumes under another one.
        let differing: Vec<String> =
            tli_plugin_kit::config::differing_keys(&state.config, &self.config)
                .into_iter()
                .filter(|k| !k.starts_with("valid_metrics_interval "))
                .collect();
        checkpoint::refuse_mismatch(dir, "config", &differing)?;
        self.nstep.check_compatible(&state.nstep, self.obs_dim)?;
        self.optimizer.check_named(&tensors)?;
        if state.env_steps < state.requested {
            return Err(PluginError::io(format!(
                "checkpoint counters are inconsistent: {} transitions made, {} asked for",
                state.env_steps, state.requested
            )));
        }
        // The environment check (data fingerprint, sizes) comes before any change.
        self.envs.restore(state.envs)?;
        self.online.load_named(&tensors, "online.")?;
        self.acting = None;
        self.target.load_named(&tensors, "target.")?;
        self.optimizer.load_named(&tensors, state.optimizer_steps)?;
        if state.replay_saved {
            self.replay
                .load(&tensors, state.replay_len, state.replay_pos)?;
        } else {
            self.host.warn(
                "checkpoint holds no replay buffer (checkpoint_replay = false): training \
                 resumes with an empty buffer and differs from an uninterrupted run",
            );
            self.replay.clear();
        }
        self.envs.observe(&mut self.obs)?;
        self.nstep = state.nstep;
        self.requested = state.requested;
        self.env_steps = state.env_steps;
        self.updates = state.updates;
        self.explore_rng = state.explore_rng;
        self.replay_rng = state.replay_rng;
        self.episodes = state.episodes;
        self.recent_returns = state.recent_returns.into_iter().collect();
        self.recent_pnl = state.recent_pnl.into_iter().collect();
        Ok(())
    }
}

/// The config a checkpoint was written with, as JSON (what a trainer that
/// loads it must be created with).
pub(crate) fn saved_config(dir: &Path) -> Result<String, PluginError> {
    let (_, state): (_, SavedState) = checkpoint::load(dir, tch::Device::Cpu)?;
    serde_json::to_string(&state.config)
        .map_err(|e| PluginError::other(format!("the checkpoint's config: {e}")))
}
