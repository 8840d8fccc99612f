//! Greedy evaluation of the Q-network: CartPole episodes, and one pass of the
//! trading policy over a whole dataset split compared with buy-and-hold —
//! the kit's [`rl::eval`](tli_plugin_kit::rl::eval) driven by Q-values.

use crate::qnet::QNet;
use tch::{Device, Tensor};
use tli_plugin_api::{Dataset, PluginError};
use tli_plugin_kit::{
    data::{split_rows, Split},
    env::TradingConfig,
    metrics::BaselineComparison,
    rl::eval as rl_eval,
    TchResultExt,
};

pub use rl_eval::walk_metrics as split_metrics;

/// Q-values of `rows` observations (`obs.len() = rows × obs_dim`), row-major `[rows, actions]`.
pub fn q_values(
    net: &QNet,
    obs: &[f32],
    rows: usize,
    device: Device,
) -> Result<Vec<f32>, PluginError> {
    let dim = obs.len() / rows.max(1);
    let q = tch::no_grad(|| {
        let x = Tensor::f_from_slice(obs)
            .and_then(|t| t.f_reshape([rows as i64, dim as i64]))
            .and_then(|t| t.f_to_device(device))
            .plugin_err("building an observation batch")?;
        net.forward(&x)
    })?;
    let q = q
        .f_to_device(Device::Cpu)
        .and_then(|t| t.f_contiguous())
        .plugin_err("reading Q-values")?;
    let mut out = vec![0f32; q.numel()];
    q.f_copy_data(&mut out, q.numel())
        .plugin_err("reading Q-values")?;
    Ok(out)
}

/// Index of the largest value (the first one on ties).
pub fn argmax(row: &[f32]) -> u32 {
    rl_eval::argmax(row) as u32
}

/// Greedy CartPole returns of `episodes` fresh episodes seeded with `seed`.
pub fn cartpole_returns(
    net: &QNet,
    episodes: usize,
    seed: u64,
    device: Device,
) -> Result<Vec<f64>, PluginError> {
    rl_eval::cartpole_returns(episodes, seed, |obs, rows| q_values(net, obs, rows, device))
}

/// Decision rows per forward pass when evaluating a split (and when the
/// predictor walks a batch: the same batching gives the same Q-values).
pub(crate) const EVAL_CHUNK: usize = 512;

/// Peak bytes of one evaluation chunk's observations and activations.
pub fn trading_eval_bytes(obs_dim: usize, actions: usize, hidden: &[usize]) -> u64 {
    rl_eval::trading_walk_bytes(EVAL_CHUNK, obs_dim, actions, hidden)
}

/// The greedy policy run once over `split`, starting flat at the first row
/// whose window fits; positions are compared with buy-and-hold on the same
/// bars. An error when the split is too short for one decision.
pub fn trading_split(
    net: &QNet,
    dataset: &Dataset,
    split: Split,
    config: &TradingConfig,
    device: Device,
) -> Result<BaselineComparison, PluginError> {
    rl_eval::trading_walk(dataset, split, config, EVAL_CHUNK, |obs, rows| {
        q_values(net, obs, rows, device)
    })?
    .ok_or_else(|| {
        let (n, window) = (split_rows(dataset, split).len(), config.window);
        PluginError::invalid_data(format!(
            "the {split:?} split has {n} rows; evaluating needs at least window {window} + 1"
        ))
    })
}
