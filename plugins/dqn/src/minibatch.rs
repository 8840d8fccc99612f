//! The minibatch tensors of a gradient step, allocated once per trainer and
//! refilled in place from the replay buffer: no tensor is made per gradient
//! step (each one made costs several dispatched libtorch operations, a
//! sizeable part of a step on a small network).
//!
//! Layout: one `f32` buffer of `batch · (2·obs + 2)` values — every obs row,
//! every next-obs row, the n-step returns, the bootstrap discounts — viewed
//! as the five tensors below, and one `i64` buffer of actions. Obs and
//! next-obs rows are adjacent, so [`MinibatchTensors::both_obs`] is one
//! `[2·batch, obs]` view through which the online network values both in
//! one pass. On the CPU the replay buffer writes straight into the tensors'
//! memory; on another device the rows are staged on the host and copied over
//! in one copy per buffer.

use crate::replay::Replay;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::{host_slice::host_slice_mut, rng::Rng, TchResultExt};

pub struct MinibatchTensors {
    floats: Tensor,
    /// `[batch, 1]`, `i64` (for `gather` and `scatter`).
    pub actions: Tensor,
    /// `[2·batch, obs]`: the obs rows, then the next-obs rows.
    pub both_obs: Tensor,
    /// `[batch, obs]`.
    pub obs: Tensor,
    /// `[batch, obs]`.
    pub next_obs: Tensor,
    /// `[batch, 1]`.
    pub returns: Tensor,
    /// `[batch, 1]`: γ^k, or 0 after a terminal state.
    pub discounts: Tensor,
    /// Host staging for a device other than the CPU (empty on the CPU).
    host_floats: Vec<f32>,
    host_actions: Vec<i64>,
    batch: usize,
}

impl MinibatchTensors {
    pub fn new(batch: usize, obs_dim: usize, device: Device) -> Result<Self, PluginError> {
        if batch == 0 || obs_dim == 0 {
            return Err(PluginError::invalid_config(format!(
                "a minibatch needs rows and columns (batch {batch}, observation width {obs_dim})"
            )));
        }
        let ctx = "allocating the minibatch tensors";
        let (b, d) = (batch as i64, obs_dim as i64);
        let floats = Tensor::f_zeros([b * (2 * d + 2)], (Kind::Float, device)).plugin_err(ctx)?;
        let actions = Tensor::f_zeros([b, 1], (Kind::Int64, device)).plugin_err(ctx)?;
        let view = |start: i64, len: i64, shape: [i64; 2]| {
            floats
                .f_narrow(0, start, len)
                .and_then(|t| t.f_view(shape))
                .plugin_err(ctx)
        };
        let staged = device != Device::Cpu;
        Ok(Self {
            both_obs: view(0, 2 * b * d, [2 * b, d])?,
            obs: view(0, b * d, [b, d])?,
            next_obs: view(b * d, b * d, [b, d])?,
            returns: view(2 * b * d, b, [b, 1])?,
            discounts: view(2 * b * d + b, b, [b, 1])?,
            floats,
            actions,
            host_floats: if staged {
                vec![0.0; batch * (2 * obs_dim + 2)]
            } else {
                Vec::new()
            },
            host_actions: if staged { vec![0; batch] } else { Vec::new() },
            batch,
        })
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Draws a new minibatch from `replay` into the tensors (uniform, with
    /// replacement; the same draws from `rng` on every device).
    pub fn fill(&mut self, replay: &Replay, rng: &mut Rng) -> Result<(), PluginError> {
        if self.floats.device() == Device::Cpu {
            // SAFETY: both tensors are this struct's own CPU buffers
            // (`host_slice_mut` checks them); the views above and the
            // operations of earlier steps only read them, and CPU operations
            // have finished when they return, so nothing else touches the
            // memory while the slices live.
            let floats = unsafe { host_slice_mut::<f32>(&self.floats)? };
            // SAFETY: as above.
            let actions = unsafe { host_slice_mut::<i64>(&self.actions)? };
            return replay.sample_into(rng, floats, actions);
        }
        replay.sample_into(rng, &mut self.host_floats, &mut self.host_actions)?;
        let ctx = "copying a minibatch to the device";
        let floats = Tensor::f_from_slice(&self.host_floats).plugin_err(ctx)?;
        let actions = Tensor::f_from_slice(&self.host_actions)
            .and_then(|t| t.f_view([self.batch as i64, 1]))
            .plugin_err(ctx)?;
        self.floats.f_copy_(&floats).plugin_err(ctx)?;
        self.actions.f_copy_(&actions).plugin_err(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_views_see_what_fill_wrote() {
        let mut replay = Replay::new(8, 2);
        for i in 0..3 {
            let x = i as f32;
            replay.push(&[x, x + 0.5], i, 10.0 + x, &[x + 1.0, x + 1.5], 0.5 * x);
        }
        let mut batch = MinibatchTensors::new(4, 2, Device::Cpu).unwrap();
        batch.fill(&replay, &mut Rng::new(3)).unwrap();
        let row = |t: &Tensor, i: i64| Vec::<f32>::try_from(t.get(i)).unwrap();
        for i in 0..4 {
            let a = batch.actions.int64_value(&[i, 0]);
            let x = a as f32;
            assert_eq!(row(&batch.obs, i), vec![x, x + 0.5]);
            assert_eq!(row(&batch.both_obs, i), vec![x, x + 0.5]);
            assert_eq!(row(&batch.next_obs, i), vec![x + 1.0, x + 1.5]);
            assert_eq!(row(&batch.both_obs, 4 + i), vec![x + 1.0, x + 1.5]);
            assert_eq!(row(&batch.returns, i), vec![10.0 + x]);
            assert_eq!(row(&batch.discounts, i), vec![0.5 * x]);
        }
        let empty = Replay::new(8, 2);
        assert!(batch.fill(&empty, &mut Rng::new(3)).is_err());
    }
}
