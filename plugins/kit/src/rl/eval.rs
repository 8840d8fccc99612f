//! Greedy (argmax) evaluation shared by the RL plugins: CartPole episodes, and
//! a walk through a whole trading split compared with buy-and-hold.
//!
//! The network is a closure `scores(obs, rows)` returning `rows × actions`
//! action scores (Q-values, logits), row-major. Nothing here touches training
//! state: evaluation environments are fresh and seeded by the caller.

use crate::data::{split_rows, Split};
use crate::env::{cartpole, TradingConfig, VecCartPole};
use crate::metrics::{compare_with_baselines, BaselineComparison, CostTerms};
use tli_plugin_api::{Dataset, Metric, PluginError};

/// Index of the largest value (the first one on ties).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best
}

/// Returns of `episodes` greedy CartPole episodes, one per environment of a
/// fresh vector seeded with `seed`.
pub fn cartpole_returns(
    episodes: usize,
    seed: u64,
    mut scores: impl FnMut(&[f32], usize) -> Result<Vec<f32>, PluginError>,
) -> Result<Vec<f64>, PluginError> {
    let mut env = VecCartPole::new(episodes, seed)?;
    let mut obs = vec![0f32; episodes * cartpole::OBS_DIM];
    env.observe(&mut obs)?;
    let (mut rewards, mut term, mut trunc) = (
        vec![0f32; episodes],
        vec![false; episodes],
        vec![false; episodes],
    );
    let mut returns: Vec<Option<f64>> = vec![None; episodes];
    let mut actions = vec![0u32; episodes];
    let num_actions = cartpole::NUM_ACTIONS as usize;
    while returns.iter().any(Option::is_none) {
        let s = scores(&obs, episodes)?;
        for (a, row) in actions.iter_mut().zip(s.chunks_exact(num_actions)) {
            *a = argmax(row) as u32;
        }
        env.step(&actions, &mut obs, &mut rewards, &mut term, &mut trunc)?;
        for ep in env.drain_completed() {
            returns[ep.env].get_or_insert(ep.episode_return);
        }
    }
    Ok(returns.into_iter().flatten().collect())
}

/// `eval_return_mean`, `_std`, `_min`, `_max` and `eval_episodes` of greedy
/// CartPole episodes.
pub fn cartpole_metrics(returns: &[f64]) -> Vec<Metric> {
    let n = returns.len().max(1) as f64;
    let mean = returns.iter().sum::<f64>() / n;
    let var = returns.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
    let min = returns.iter().copied().fold(f64::INFINITY, f64::min);
    let max = returns.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    vec![
        Metric::new("eval_return_mean", mean),
        Metric::new("eval_return_std", var.sqrt()),
        Metric::new("eval_return_min", min),
        Metric::new("eval_return_max", max),
        Metric::new("eval_episodes", returns.len() as f64),
    ]
}

/// The observation the trading environment shows at dataset row `row` with
/// `position` held (feature rows `row − window + 1 ..= row`, oldest first, then
/// `position / max_contracts`), written into `out`.
pub fn trading_observation(
    dataset: &Dataset,
    config: &TradingConfig,
    row: usize,
    position: i32,
    out: &mut [f32],
) {
    let width = dataset.feature_names.len();
    let first = (row + 1 - config.window) * width;
    let (head, tail) = out.split_at_mut(out.len() - 1);
    head.copy_from_slice(&dataset.features[first..first + head.len()]);
    tail[0] = position as f32 / config.max_contracts as f32;
}

/// Peak bytes of one trading-walk chunk of `chunk` decision rows: the
/// observations and activations of every possible incoming position.
pub fn trading_walk_bytes(chunk: usize, obs_dim: usize, actions: usize, hidden: &[usize]) -> u64 {
    let widths: usize = obs_dim + hidden.iter().sum::<usize>() + actions;
    (chunk * actions * widths * 4) as u64
}

/// The greedy policy walked through split `split` from its first row with a
/// full window to its last decision, starting flat, each decision seeing the
/// position the previous one chose — exactly as the trading environment would
/// run one episode over the whole split — and its P&L beside buy-and-hold.
/// `None` when the split is too short for one decision.
///
/// Every decision row is scored for every possible incoming position in one
/// batched call of `scores` per `chunk` rows (rows ordered row-major as
/// `(decision, incoming position)`); the sequential part (which position is
/// actually held) is then a lookup.
pub fn trading_walk(
    dataset: &Dataset,
    split: Split,
    config: &TradingConfig,
    chunk: usize,
    mut scores: impl FnMut(&[f32], usize) -> Result<Vec<f32>, PluginError>,
) -> Result<Option<BaselineComparison>, PluginError> {
    let rows = split_rows(dataset, split);
    let window = config.window;
    if rows.len() < window + 1 {
        return Ok(None);
    }
    let first_decision = rows.start + window - 1;
    let max = config.max_contracts as i32;
    let positions_k = (2 * max + 1) as usize;
    let obs_dim = window * dataset.feature_names.len() + 1;
    let decisions: Vec<usize> = (first_decision..rows.end - 1).collect();
    let mut positions = Vec::with_capacity(decisions.len());
    let mut held = 0i32;
    let mut obs = Vec::new();
    for rows_chunk in decisions.chunks(chunk.max(1)) {
        obs.clear();
        obs.resize(rows_chunk.len() * positions_k * obs_dim, 0.0);
        let mut slots = obs.chunks_exact_mut(obs_dim);
        for &row in rows_chunk {
            for k in 0..positions_k {
                if let Some(out) = slots.next() {
                    trading_observation(dataset, config, row, k as i32 - max, out);
                }
            }
        }
        let s = scores(&obs, rows_chunk.len() * positions_k)?;
        for j in 0..rows_chunk.len() {
            let at = (j * positions_k + (held + max) as usize) * positions_k;
            held = argmax(&s[at..at + positions_k]) as i32 - max;
            positions.push(held as f64);
        }
    }
    let close = &dataset.close[first_decision..rows.end];
    let terms = CostTerms::from_contract(
        &dataset.contract,
        config.commission_per_contract,
        config.slippage_ticks,
    )?;
    Ok(Some(compare_with_baselines(
        close,
        &positions,
        terms,
        dataset.periods_per_year,
        None,
    )?))
}

/// Strategy and buy-and-hold metrics of a walk, named `{prefix}sharpe`,
/// `{prefix}bh_sharpe`, … (the flat baseline is all zeros and left out).
pub fn walk_metrics(walk: &BaselineComparison, prefix: &str) -> Vec<Metric> {
    let mut out = walk.strategy.metrics(prefix);
    out.extend(walk.buy_and_hold.metrics(&format!("{prefix}bh_")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::VecTradingEnv;
    use tli_plugin_api::{ContractTerms, SplitBounds};

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
            trading_observation(&data, &config, row, position, &mut mine);
            assert_eq!(&obs[i * dim..(i + 1) * dim], &mine[..], "environment {i}");
        }
    }
}
