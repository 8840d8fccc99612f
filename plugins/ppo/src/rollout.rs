//! The rollout buffer (host memory, `num_steps × num_envs` transitions in
//! step-major order) and generalized advantage estimation.

use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::{mlp::find, TchResultExt};

pub struct Rollout {
    pub num_envs: usize,
    pub num_steps: usize,
    pub obs_dim: usize,
    /// Vector steps stored so far.
    pub filled: usize,
    pub obs: Vec<f32>,
    pub actions: Vec<i64>,
    pub log_probs: Vec<f32>,
    pub values: Vec<f32>,
    /// Scaled rewards, plus `γ·V(final observation)` where a time limit cut the episode.
    pub rewards: Vec<f32>,
    /// 1.0 where the transition ended its episode (terminated or truncated).
    pub dones: Vec<f32>,
}

/// Bytes of a rollout buffer for these sizes (what [`Rollout::bytes`] measures).
pub fn rollout_bytes(num_envs: usize, num_steps: usize, obs_dim: usize) -> u64 {
    // obs f32, action i64, log-prob, value, reward, done f32.
    (num_envs * num_steps * (obs_dim * 4 + 8 + 4 * 4)) as u64
}

impl Rollout {
    pub fn new(num_envs: usize, num_steps: usize, obs_dim: usize) -> Self {
        let n = num_envs * num_steps;
        Self {
            num_envs,
            num_steps,
            obs_dim,
            filled: 0,
            obs: vec![0.0; n * obs_dim],
            actions: vec![0; n],
            log_probs: vec![0.0; n],
            values: vec![0.0; n],
            rewards: vec![0.0; n],
            dones: vec![0.0; n],
        }
    }

    pub fn is_full(&self) -> bool {
        self.filled == self.num_steps
    }

    /// Bytes held by the buffers.
    pub fn bytes(&self) -> u64 {
        (self.obs.capacity() * 4
            + self.actions.capacity() * 8
            + (self.log_probs.capacity()
                + self.values.capacity()
                + self.rewards.capacity()
                + self.dones.capacity())
                * 4) as u64
    }

    /// Advantages and returns (`advantage + value`) by GAE(λ): with
    /// `δ_t = r_t + γ·V_{t+1}·(1 − done_t) − V_t` and
    /// `A_t = δ_t + γλ·(1 − done_t)·A_{t+1}`, where `V` after the last step is
    /// `next_values` (the values of the observations the rollout ended on).
    pub fn advantages(&self, next_values: &[f32], gamma: f64, lambda: f64) -> (Vec<f32>, Vec<f32>) {
        let (e, n) = (self.num_envs, self.num_envs * self.num_steps);
        let mut adv = vec![0f32; n];
        for (env, next) in next_values.iter().enumerate().take(e) {
            let mut next_adv = 0f64;
            let mut next_value = *next as f64;
            for t in (0..self.num_steps).rev() {
                let i = t * e + env;
                let live = 1.0 - self.dones[i] as f64;
                let v = self.values[i] as f64;
                let delta = self.rewards[i] as f64 + gamma * next_value * live - v;
                next_adv = delta + gamma * lambda * live * next_adv;
                adv[i] = next_adv as f32;
                next_value = v;
            }
        }
        let returns = adv.iter().zip(&self.values).map(|(a, v)| a + v).collect();
        (adv, returns)
    }

    /// The filled part as named tensors for a checkpoint (none when empty).
    pub fn to_tensors(&self) -> Result<Vec<(String, Tensor)>, PluginError> {
        if self.filled == 0 {
            return Ok(Vec::new());
        }
        let n = self.filled * self.num_envs;
        (|| -> Result<Vec<(String, Tensor)>, tch::TchError> {
            Ok(vec![
                (
                    "rollout.obs".into(),
                    Tensor::f_from_slice(&self.obs[..n * self.obs_dim])?,
                ),
                (
                    "rollout.actions".into(),
                    Tensor::f_from_slice(&self.actions[..n])?,
                ),
                (
                    "rollout.log_probs".into(),
                    Tensor::f_from_slice(&self.log_probs[..n])?,
                ),
                (
                    "rollout.values".into(),
                    Tensor::f_from_slice(&self.values[..n])?,
                ),
                (
                    "rollout.rewards".into(),
                    Tensor::f_from_slice(&self.rewards[..n])?,
                ),
                (
                    "rollout.dones".into(),
                    Tensor::f_from_slice(&self.dones[..n])?,
                ),
            ])
        })()
        .plugin_err("copying the rollout for a checkpoint")
    }

    /// Restores `filled` vector steps written by [`to_tensors`](Self::to_tensors).
    pub fn load(&mut self, tensors: &[(String, Tensor)], filled: usize) -> Result<(), PluginError> {
        if filled >= self.num_steps {
            return Err(PluginError::io(format!(
                "checkpoint rollout holds {filled} steps; this trainer's rollouts hold {}",
                self.num_steps
            )));
        }
        self.filled = filled;
        if filled == 0 {
            return Ok(());
        }
        let n = filled * self.num_envs;
        fn read<T: tch::kind::Element + Copy>(
            tensors: &[(String, Tensor)],
            name: &str,
            dst: &mut [T],
        ) -> Result<(), PluginError> {
            let t = find(tensors, name)?
                .f_to_device(Device::Cpu)
                .and_then(|t| t.f_to_kind(T::KIND))
                .plugin_err("reading the checkpoint rollout")?;
            if t.numel() != dst.len() {
                return Err(PluginError::io(format!(
                    "checkpoint tensor {name:?} holds {} values, expected {}",
                    t.numel(),
                    dst.len()
                )));
            }
            t.f_copy_data(dst, dst.len())
                .plugin_err("reading the checkpoint rollout")
        }
        read(tensors, "rollout.obs", &mut self.obs[..n * self.obs_dim])?;
        read(tensors, "rollout.actions", &mut self.actions[..n])?;
        read(tensors, "rollout.log_probs", &mut self.log_probs[..n])?;
        read(tensors, "rollout.values", &mut self.values[..n])?;
        read(tensors, "rollout.rewards", &mut self.rewards[..n])?;
        read(tensors, "rollout.dones", &mut self.dones[..n])?;
        Ok(())
    }
}

/// The device copy of a full rollout used by one update.
pub struct Batch {
    pub obs: Tensor,
    pub actions: Tensor,
    pub log_probs: Tensor,
    pub values: Tensor,
    pub advantages: Tensor,
    pub returns: Tensor,
}

impl Batch {
    pub fn new(
        r: &Rollout,
        adv: &[f32],
        returns: &[f32],
        device: Device,
    ) -> Result<Self, PluginError> {
        let n = (r.num_envs * r.num_steps) as i64;
        (|| -> Result<Self, tch::TchError> {
            let to = |t: Tensor| t.f_to_device(device);
            Ok(Self {
                obs: to(Tensor::f_from_slice(&r.obs)?.f_reshape([n, r.obs_dim as i64])?)?,
                actions: to(Tensor::f_from_slice(&r.actions)?)?.f_to_kind(Kind::Int64)?,
                log_probs: to(Tensor::f_from_slice(&r.log_probs)?)?,
                values: to(Tensor::f_from_slice(&r.values)?)?,
                advantages: to(Tensor::f_from_slice(adv)?)?,
                returns: to(Tensor::f_from_slice(returns)?)?,
            })
        })()
        .plugin_err("copying the rollout to the device")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gae_matches_a_hand_computation_and_stops_at_episode_ends() {
        // One environment, three steps; the episode ends after step 1.
        let mut r = Rollout::new(1, 3, 1);
        r.rewards = vec![1.0, 2.0, 3.0];
        r.values = vec![0.5, 0.25, 1.0];
        r.dones = vec![0.0, 1.0, 0.0];
        let (g, l) = (0.9f64, 0.8f64);
        let (adv, ret) = r.advantages(&[2.0], g, l);
        let d2 = 3.0 + g * 2.0 - 1.0;
        let d1 = 2.0 - 0.25;
        let d0 = 1.0 + g * 0.25 - 0.5;
        let want = [d0 + g * l * d1, d1, d2];
        for (a, w) in adv.iter().zip(want) {
            assert!((*a as f64 - w).abs() < 1e-6, "{adv:?} vs {want:?}");
        }
        assert!((ret[0] - (adv[0] + 0.5)).abs() < 1e-6);
        // λ = 1, γ = 1, no dones: advantage = sum of rewards + bootstrap − value.
        r.dones = vec![0.0; 3];
        let (adv, _) = r.advantages(&[2.0], 1.0, 1.0);
        assert!((adv[0] - (1.0 + 2.0 + 3.0 + 2.0 - 0.5)).abs() < 1e-6);
    }

    #[test]
    fn partial_rollouts_roundtrip_through_tensors() {
        let mut r = Rollout::new(2, 4, 3);
        r.filled = 2;
        for (i, v) in r.obs.iter_mut().enumerate() {
            *v = i as f32 * 0.5;
        }
        r.actions[3] = 1;
        r.rewards[2] = 7.0;
        let tensors = r.to_tensors().unwrap();
        let mut back = Rollout::new(2, 4, 3);
        back.load(&tensors, 2).unwrap();
        assert_eq!(back.obs[..12], r.obs[..12]);
        assert_eq!(back.actions, r.actions);
        assert_eq!(back.rewards, r.rewards);
        assert_eq!(back.filled, 2);
        assert!(back.load(&tensors, 4).is_err());
    }
}
