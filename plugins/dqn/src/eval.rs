//! Greedy evaluation: CartPole episodes, and one pass of the trading policy
//! over a whole dataset split compared with buy-and-hold.

use crate::qnet::QNet;
use tch::{Device, Tensor};
use tli_plugin_api::{Dataset, Metric, PluginError};
use tli_plugin_kit::{
    data::{split_rows, Split},
    env::{cartpole, TradingConfig, VecCartPole},
    metrics::{compare_with_baselines, BaselineComparison, CostTerms},
    TchResultExt,
};

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
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy CartPole returns of `episodes` fresh episodes seeded with `seed`.
pub fn cartpole_returns(
    net: &QNet,
    episodes: usize,
    seed: u64,
    device: Device,
) -> Result<Vec<f64>, PluginError> {
    let mut env = VecCartPole::new(episodes, seed)?;
    let dim = cartpole::OBS_DIM;
    let mut obs = vec![0f32; episodes * dim];
    env.observe(&mut obs)?;
    let mut rewards = vec![0f32; episodes];
    let (mut term, mut trunc) = (vec![false; episodes], vec![false; episodes]);
    let mut returns: Vec<Option<f64>> = vec![None; episodes];
    while returns.iter().any(Option::is_none) {
        let q = q_values(net, &obs, episodes, device)?;
        let actions: Vec<u32> = q.chunks_exact(2).map(argmax).collect();
        env.step(&actions, &mut obs, &mut rewards, &mut term, &mut trunc)?;
        for c in env.drain_completed() {
            returns[c.env].get_or_insert(c.episode_return);
        }
    }
    Ok(returns.into_iter().flatten().collect())
}

/// Decision rows per forward pass when evaluating a split.
const EVAL_CHUNK: usize = 512;

/// Peak bytes of one evaluation chunk's observations and activations.
pub fn trading_eval_bytes(obs_dim: usize, actions: usize, hidden: &[usize]) -> u64 {
    let widths: usize = obs_dim + hidden.iter().sum::<usize>() + actions;
    (EVAL_CHUNK * actions * widths * 4) as u64
}

/// Writes the observation of decision row `row` (a dataset row) holding
/// `position`: feature rows `row − window + 1 ..= row`, then `position / max`
/// (the kit trading environment's layout).
pub fn trading_obs(dataset: &Dataset, row: usize, window: usize, position: f32, out: &mut [f32]) {
    let width = dataset.feature_names.len();
    let first = (row + 1 - window) * width;
    let (head, tail) = out.split_at_mut(window * width);
    head.copy_from_slice(&dataset.features[first..first + window * width]);
    tail[0] = position;
}

/// The greedy policy run once over `split`, starting flat at the first row
/// whose window fits; positions are compared with buy-and-hold on the same bars.
pub fn trading_split(
    net: &QNet,
    dataset: &Dataset,
    split: Split,
    config: &TradingConfig,
    device: Device,
) -> Result<BaselineComparison, PluginError> {
    let rows = split_rows(dataset, split);
    let (n, window) = (rows.len(), config.window);
    if n < window + 1 {
        return Err(PluginError::invalid_data(format!(
            "the {split:?} split has {n} rows; evaluating needs at least window {window} + 1"
        )));
    }
    let max = config.max_contracts as usize;
    let positions_n = 2 * max + 1;
    let obs_dim = window * dataset.feature_names.len() + 1;
    let decisions: Vec<usize> = (rows.start + window - 1..rows.end - 1).collect();
    let mut positions = Vec::with_capacity(decisions.len());
    let mut prev = max; // action index of the flat position
    let mut obs = Vec::new();
    for chunk in decisions.chunks(EVAL_CHUNK) {
        obs.clear();
        obs.resize(chunk.len() * positions_n * obs_dim, 0.0);
        let mut slots = obs.chunks_exact_mut(obs_dim);
        for &row in chunk {
            for p in 0..positions_n {
                let pos = (p as f32 - max as f32) / max as f32;
                if let Some(out) = slots.next() {
                    trading_obs(dataset, row, window, pos, out);
                }
            }
        }
        let q = q_values(net, &obs, chunk.len() * positions_n, device)?;
        for i in 0..chunk.len() {
            let at = (i * positions_n + prev) * positions_n;
            prev = argmax(&q[at..at + positions_n]) as usize;
            positions.push(prev as f64 - max as f64);
        }
    }
    let close = &dataset.close[rows.start + window - 1..rows.end];
    let terms = CostTerms::from_contract(
        &dataset.contract,
        config.commission_per_contract,
        config.slippage_ticks,
    )?;
    compare_with_baselines(close, &positions, terms, dataset.periods_per_year, None)
}

/// `{prefix}sharpe`, …, `{prefix}bh_sharpe`, … (strategy and buy-and-hold).
pub fn split_metrics(c: &BaselineComparison, prefix: &str) -> Vec<Metric> {
    let mut out = c.strategy.metrics(prefix);
    out.extend(c.buy_and_hold.metrics(&format!("{prefix}bh_")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tli_plugin_api::{ContractTerms, SplitBounds};
    use tli_plugin_kit::env::VecTradingEnv;

    fn dataset(rows: usize, width: usize) -> Dataset {
        Dataset {
            symbol: "T".into(),
            timestamps: (0..rows as i64).collect::<Vec<_>>().into(),
            features: (0..rows * width)
                .map(|i| i as f32 * 0.01)
                .collect::<Vec<_>>()
                .into(),
            feature_names: (0..width)
                .map(|i| format!("f{i}").as_str().into())
                .collect::<Vec<_>>()
                .into(),
            targets: vec![0.0; rows].into(),
            target_names: vec!["y".into()].into(),
            splits: SplitBounds {
                train_end: 60,
                valid_start: 60,
                valid_end: 80,
                test_start: 80,
            },
            close: (0..rows)
                .map(|i| 100.0 + (i as f64 * 0.7).sin())
                .collect::<Vec<_>>()
                .into(),
            contract: ContractTerms {
                root: "T".into(),
                tick_size: 0.25,
                point_value: 50.0,
                currency: "USD".into(),
            },
            periods_per_year: 252.0,
        }
    }

    #[test]
    fn evaluation_observations_match_the_environment() {
        let data = dataset(100, 3);
        let config = TradingConfig {
            window: 5,
            episode_len: 20,
            max_contracts: 2,
            ..TradingConfig::default()
        };
        let mut env =
            VecTradingEnv::from_dataset(&data, Split::Train, config.clone(), 3, 9).unwrap();
        let dim = env.obs_dim();
        let mut obs = vec![0f32; 3 * dim];
        // Move once so that positions are not all flat.
        let (mut r, mut d) = (vec![0f32; 3], vec![false; 3]);
        env.step(&[0, 3, 4], &mut obs, &mut r, &mut d).unwrap();
        let rows: Vec<(usize, i32)> = env
            .running()
            .map(|s| (s.start_row + s.steps, s.position))
            .collect();
        for (i, (row, position)) in rows.into_iter().enumerate() {
            let mut mine = vec![0f32; dim];
            trading_obs(&data, row, 5, position as f32 / 2.0, &mut mine);
            assert_eq!(&obs[i * dim..(i + 1) * dim], &mine[..], "environment {i}");
        }
    }
}
