//! The replay buffer (a ring of plain `f32` arrays on the CPU, sampled
//! uniformly with replacement) and the n-step accumulator that feeds it.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use tch::Tensor;
use tli_plugin_api::PluginError;
use tli_plugin_kit::{mlp::find, rng::Rng, TchResultExt};

/// Bytes per stored transition: obs and next obs (`f32`), action (`i64`),
/// n-step return and bootstrap discount (`f32`).
pub fn bytes_per_transition(obs_dim: usize) -> u64 {
    (2 * obs_dim * 4 + 8 + 4 + 4) as u64
}

pub struct Replay {
    capacity: usize,
    obs_dim: usize,
    obs: Vec<f32>,
    next_obs: Vec<f32>,
    actions: Vec<i64>,
    /// n-step discounted reward sum.
    returns: Vec<f32>,
    /// What multiplies the bootstrap value: γ^k, or 0 after a terminal state.
    discounts: Vec<f32>,
    /// Next slot to write.
    pos: usize,
    len: usize,
}

impl Replay {
    /// Allocates the whole ring up front (zeroed pages are only touched when
    /// written), so the measured size is the configured one from the start.
    pub fn new(capacity: usize, obs_dim: usize) -> Self {
        Self {
            capacity,
            obs_dim,
            obs: vec![0.0; capacity * obs_dim],
            next_obs: vec![0.0; capacity * obs_dim],
            actions: vec![0; capacity],
            returns: vec![0.0; capacity],
            discounts: vec![0.0; capacity],
            pos: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes held by the ring's arrays.
    pub fn bytes(&self) -> u64 {
        (self.obs.capacity() * 4
            + self.next_obs.capacity() * 4
            + self.actions.capacity() * 8
            + self.returns.capacity() * 4
            + self.discounts.capacity() * 4) as u64
    }

    pub fn push(&mut self, obs: &[f32], action: u32, ret: f32, next_obs: &[f32], discount: f32) {
        let (d, i) = (self.obs_dim, self.pos);
        self.obs[i * d..(i + 1) * d].copy_from_slice(obs);
        self.next_obs[i * d..(i + 1) * d].copy_from_slice(next_obs);
        self.actions[i] = action as i64;
        self.returns[i] = ret;
        self.discounts[i] = discount;
        self.pos = (i + 1) % self.capacity;
        self.len = (self.len + 1).min(self.capacity);
    }

    /// Draws `actions.len()` transitions uniformly (with replacement) from the
    /// filled part and writes them in the minibatch layout
    /// ([`crate::minibatch`]): `floats` holds every obs row, then every
    /// next-obs row, then the returns, then the discounts (`batch · (2·obs + 2)`
    /// values); `actions` one action per row.
    pub fn sample_into(
        &self,
        rng: &mut Rng,
        floats: &mut [f32],
        actions: &mut [i64],
    ) -> Result<(), PluginError> {
        let (d, batch) = (self.obs_dim, actions.len());
        if self.len == 0 || floats.len() != batch * (2 * d + 2) {
            return Err(PluginError::other(format!(
                "replay sampling: {} stored transitions, {} floats for {batch} rows of width {d}",
                self.len,
                floats.len()
            )));
        }
        let (obs, rest) = floats.split_at_mut(batch * d);
        let (next_obs, rest) = rest.split_at_mut(batch * d);
        let (returns, discounts) = rest.split_at_mut(batch);
        for (row, action) in actions.iter_mut().enumerate() {
            let i = rng.below(self.len as u64) as usize;
            obs[row * d..(row + 1) * d].copy_from_slice(&self.obs[i * d..(i + 1) * d]);
            next_obs[row * d..(row + 1) * d].copy_from_slice(&self.next_obs[i * d..(i + 1) * d]);
            *action = self.actions[i];
            returns[row] = self.returns[i];
            discounts[row] = self.discounts[i];
        }
        Ok(())
    }

    /// The filled part as named CPU tensors (`replay.obs`, …), in storage order.
    pub fn to_tensors(&self) -> Result<Vec<(String, Tensor)>, PluginError> {
        let (n, d) = (self.len, self.obs_dim);
        let ctx = "copying the replay buffer for a checkpoint";
        let m = |v: &[f32], w: usize| {
            Tensor::f_from_slice(&v[..n * w])
                .and_then(|t| t.f_reshape([n as i64, w as i64]))
                .plugin_err(ctx)
        };
        Ok(vec![
            ("replay.obs".into(), m(&self.obs, d)?),
            ("replay.next_obs".into(), m(&self.next_obs, d)?),
            (
                "replay.actions".into(),
                Tensor::f_from_slice(&self.actions[..n]).plugin_err(ctx)?,
            ),
            ("replay.returns".into(), m(&self.returns, 1)?),
            ("replay.discounts".into(), m(&self.discounts, 1)?),
        ])
    }

    /// Empties the buffer (a checkpoint without replay was loaded).
    pub fn clear(&mut self) {
        self.pos = 0;
        self.len = 0;
    }

    /// Restores what [`to_tensors`](Self::to_tensors) wrote, with the write position.
    pub fn load(
        &mut self,
        tensors: &[(String, Tensor)],
        len: usize,
        pos: usize,
    ) -> Result<(), PluginError> {
        if len > self.capacity || pos >= self.capacity.max(1) || (len < self.capacity && pos != len)
        {
            return Err(PluginError::io(format!(
                "checkpoint replay buffer holds {len} transitions at position {pos}, \
                 which does not fit this buffer of capacity {}",
                self.capacity
            )));
        }
        let d = self.obs_dim;
        let read_f32 = |name: &str, width: usize, out: &mut [f32]| -> Result<(), PluginError> {
            let t = find(tensors, name)?;
            if t.size() != [len as i64, width as i64] || t.kind() != tch::Kind::Float {
                return Err(PluginError::io(format!(
                    "checkpoint tensor {name:?} is {:?} {:?}, expected [{len}, {width}] Float",
                    t.kind(),
                    t.size()
                )));
            }
            t.f_contiguous()
                .and_then(|t| t.f_copy_data(&mut out[..len * width], len * width))
                .plugin_err("restoring the replay buffer")
        };
        read_f32("replay.obs", d, &mut self.obs)?;
        read_f32("replay.next_obs", d, &mut self.next_obs)?;
        read_f32("replay.returns", 1, &mut self.returns)?;
        read_f32("replay.discounts", 1, &mut self.discounts)?;
        let a = find(tensors, "replay.actions")?;
        if a.size() != [len as i64] || a.kind() != tch::Kind::Int64 {
            return Err(PluginError::io(format!(
                "checkpoint tensor \"replay.actions\" is {:?} {:?}, expected [{len}] Int64",
                a.kind(),
                a.size()
            )));
        }
        a.f_copy_data(&mut self.actions[..len], len)
            .plugin_err("restoring the replay buffer")?;
        self.len = len;
        self.pos = pos;
        Ok(())
    }
}

/// One transition waiting for its n-step return.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingStep {
    obs: Vec<f32>,
    action: u32,
    reward: f32,
}

/// Per-environment queues that turn 1-step transitions into n-step ones:
/// `R = Σ_{k<m} γ^k r_k`, bootstrap discount `γ^m` (0 if the episode
/// terminated), where `m ≤ n` shrinks at episode ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NStep {
    n: usize,
    gamma: f64,
    queues: Vec<VecDeque<PendingStep>>,
}

impl NStep {
    pub fn new(n: usize, gamma: f64, num_envs: usize) -> Self {
        Self {
            n,
            gamma,
            queues: vec![VecDeque::new(); num_envs],
        }
    }

    /// Adds environment `env`'s transition and moves every completed n-step
    /// transition into `replay`. `next_obs` is the state reached (the final
    /// one when the episode ended); `done` = terminated or truncated.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        replay: &mut Replay,
        env: usize,
        obs: &[f32],
        action: u32,
        reward: f32,
        next_obs: &[f32],
        terminated: bool,
        done: bool,
    ) {
        if self.n == 1 {
            let discount = if terminated { 0.0 } else { self.gamma as f32 };
            replay.push(obs, action, reward, next_obs, discount);
            return;
        }
        let q = &mut self.queues[env];
        q.push_back(PendingStep {
            obs: obs.to_vec(),
            action,
            reward,
        });
        let gamma = self.gamma;
        let mut emit = |q: &mut VecDeque<PendingStep>| {
            let (mut ret, mut g) = (0.0f64, 1.0f64);
            for p in q.iter() {
                ret += g * p.reward as f64;
                g *= gamma;
            }
            let discount = if terminated { 0.0 } else { g as f32 };
            if let Some(first) = q.pop_front() {
                replay.push(&first.obs, first.action, ret as f32, next_obs, discount);
            }
        };
        if done {
            while !q.is_empty() {
                emit(q);
            }
        } else if q.len() >= self.n {
            emit(q);
        }
    }

    /// Checks a restored accumulator against this trainer's settings.
    pub fn check_compatible(&self, other: &NStep, obs_dim: usize) -> Result<(), PluginError> {
        let fits = other.n == self.n
            && other.gamma == self.gamma
            && other.queues.len() == self.queues.len()
            && other
                .queues
                .iter()
                .all(|q| q.len() < other.n.max(2) && q.iter().all(|p| p.obs.len() == obs_dim));
        if fits {
            Ok(())
        } else {
            Err(PluginError::io(
                "checkpoint n-step queues do not fit this trainer (n_step, gamma, num_envs or \
                 observation width differ)",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_step_returns_and_discounts() {
        let mut replay = Replay::new(16, 1);
        let mut acc = NStep::new(3, 0.5, 1);
        // rewards 1, 2, 4, 8 then terminate on the 5th (reward 16).
        for (t, r) in [1.0f32, 2.0, 4.0, 8.0, 16.0].iter().enumerate() {
            let done = t == 4;
            acc.add(
                &mut replay,
                0,
                &[t as f32],
                0,
                *r,
                &[t as f32 + 1.0],
                done,
                done,
            );
        }
        assert_eq!(replay.len(), 5);
        // t=0: 1 + 0.5·2 + 0.25·4 = 3, discount 0.125, next obs 3.
        assert_eq!(replay.returns[0], 3.0);
        assert_eq!(replay.discounts[0], 0.125);
        assert_eq!(replay.next_obs[0], 3.0);
        // t=1: 2 + 2 + 2 = 6.
        assert_eq!(replay.returns[1], 6.0);
        // The last three are flushed at the terminal step with discount 0.
        assert_eq!(replay.returns[2], 4.0 + 4.0 + 4.0);
        assert_eq!(replay.returns[3], 8.0 + 8.0);
        assert_eq!(replay.returns[4], 16.0);
        assert!(replay.discounts[2..5].iter().all(|d| *d == 0.0));
        assert!(replay.next_obs[2..5].iter().all(|o| *o == 5.0));
    }

    #[test]
    fn ring_wraps_and_round_trips_through_tensors() {
        let mut replay = Replay::new(3, 2);
        for i in 0..5 {
            let x = i as f32;
            replay.push(&[x, x], i, x, &[x + 1.0, x + 1.0], 0.9);
        }
        assert_eq!((replay.len(), replay.pos()), (3, 2));
        let tensors = replay.to_tensors().unwrap();
        let mut back = Replay::new(3, 2);
        back.load(&tensors, 3, 2).unwrap();
        assert_eq!(back.obs, replay.obs);
        assert_eq!(back.actions, replay.actions);
        assert_eq!(back.next_obs, replay.next_obs);
        assert!(back.load(&tensors, 3, 7).is_err());
    }
}
