//! PPO checkpoints: the networks, the optimizer, the partial rollout and
//! every counter and RNG, so that a resumed run is identical to an
//! uninterrupted one.

use super::*;

/// What `state.json` holds besides the tensors.
#[derive(Serialize, Deserialize)]
struct SavedState {
    config: PpoConfig,
    counters: Counters,
    optimizer_steps: u64,
    rng: Rng,
    env: EnvState,
    rollout_filled: usize,
    recent_returns: Vec<f64>,
    recent_pnl: Vec<f64>,
    last_update: Option<UpdateStats>,
    reward_scale: f64,
    obs_dim: usize,
}

impl PpoTrainer {
    pub(super) fn named_tensors(&self) -> Vec<(String, &Tensor)> {
        let mut all = self.net.named_parameters();
        all.extend(self.optimizer.named_state());
        all
    }

    pub(super) fn save_to(&mut self, dir: &Path) -> Result<(), PluginError> {
        let rollout = self.rollout.to_tensors()?;
        let mut tensors = self.named_tensors();
        tensors.extend(rollout.iter().map(|(n, t)| (n.clone(), t)));
        let state = SavedState {
            config: self.config.clone(),
            counters: self.counters.clone(),
            optimizer_steps: self.optimizer.step,
            rng: self.rng.clone(),
            env: self.env.state(),
            rollout_filled: self.rollout.filled,
            recent_returns: self.recent_returns.iter().copied().collect(),
            recent_pnl: self.recent_pnl.iter().copied().collect(),
            last_update: self.last_update.clone(),
            reward_scale: self.reward_scale,
            obs_dim: self.obs_dim,
        };
        checkpoint::save(dir, &tensors, &state)
    }

    pub(super) fn load_from(&mut self, dir: &Path) -> Result<(), PluginError> {
        let (tensors, state): (_, SavedState) = checkpoint::load(dir, self.device)?;
        // The validation cadence does not change training: a checkpoint
        // resumes under another one (and older checkpoints' last validation
        // walk, `valid_walk`, is ignored).
        let differing: Vec<String> =
            tli_plugin_kit::config::differing_keys(&state.config, &self.config)
                .into_iter()
                .filter(|k| !k.starts_with("valid_metrics_interval "))
                .collect();
        checkpoint::refuse_mismatch(dir, "PPO config", &differing)?;
        if state.obs_dim != self.obs_dim {
            return Err(PluginError::io(format!(
                "checkpoint in {} has observation width {}, this trainer {} (different dataset features?)",
                dir.display(),
                state.obs_dim,
                self.obs_dim
            )));
        }
        if state.reward_scale.to_bits() != self.reward_scale.to_bits() {
            return Err(PluginError::io(format!(
                "checkpoint in {} used reward scale {}, this trainer {} (different dataset?)",
                dir.display(),
                state.reward_scale,
                self.reward_scale
            )));
        }
        self.optimizer.check_named(&tensors)?;
        self.net.load_named(&tensors)?;
        self.optimizer.load_named(&tensors, state.optimizer_steps)?;
        self.rollout.load(&tensors, state.rollout_filled)?;
        self.env.restore(state.env)?;
        self.env.observe(&mut self.obs)?;
        self.counters = state.counters;
        self.rng = state.rng;
        self.recent_returns = state.recent_returns.into_iter().collect();
        self.recent_pnl = state.recent_pnl.into_iter().collect();
        self.last_update = state.last_update;
        Ok(())
    }
}
