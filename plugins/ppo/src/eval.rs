//! Greedy (argmax) evaluation of the policy: CartPole episodes, and a walk
//! through a whole trading split compared with buy-and-hold.
//!
//! Nothing here touches training state: evaluation environments are fresh,
//! seeded from the task seed, and no training RNG is drawn from.

use crate::net::TanhMlp;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::{Dataset, Metric, PluginError};
use tli_plugin_kit::{
    data::{split_rows, Split},
    env::{TradingConfig, VecCartPole},
    metrics::{compare_with_baselines, BaselineComparison, CostTerms},
    TchResultExt,
};

/// Decision rows per forward pass in the trading walk.
pub const TRADING_CHUNK: usize = 256;

/// Index of the largest value (the first on ties).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best
}

/// Logits of `actor` for `obs` (`n × obs_dim`, row-major) as a flat `Vec`.
pub fn logits(
    actor: &TanhMlp,
    obs: &[f32],
    obs_dim: usize,
    device: Device,
) -> Result<Vec<f32>, PluginError> {
    tch::no_grad(|| -> Result<Vec<f32>, tch::TchError> {
        let n = (obs.len() / obs_dim) as i64;
        let x = Tensor::f_from_slice(obs)?
            .f_reshape([n, obs_dim as i64])?
            .f_to_device(device)?;
        let out = actor
            .forward(&x)?
            .f_to_device(Device::Cpu)?
            .f_to_kind(Kind::Float)?
            .f_contiguous()?
            .f_view([-1])?;
        Vec::<f32>::try_from(&out)
    })
    .plugin_err("policy forward pass")
}

/// Returns of `episodes` greedy CartPole episodes, one per environment of a
/// fresh vector seeded with `seed`.
pub fn cartpole_returns(
    actor: &TanhMlp,
    episodes: usize,
    seed: u64,
    device: Device,
) -> Result<Vec<f64>, PluginError> {
    use tli_plugin_kit::env::cartpole::OBS_DIM;
    let mut env = VecCartPole::new(episodes, seed)?;
    let mut obs = vec![0f32; episodes * OBS_DIM];
    env.observe(&mut obs)?;
    let (mut rewards, mut term, mut trunc) = (
        vec![0f32; episodes],
        vec![false; episodes],
        vec![false; episodes],
    );
    let mut returns: Vec<Option<f64>> = vec![None; episodes];
    let mut actions = vec![0u32; episodes];
    while returns.iter().any(Option::is_none) {
        let l = logits(actor, &obs, OBS_DIM, device)?;
        for (a, row) in actions.iter_mut().zip(l.chunks_exact(2)) {
            *a = argmax(row) as u32;
        }
        env.step(&actions, &mut obs, &mut rewards, &mut term, &mut trunc)?;
        for ep in env.drain_completed() {
            returns[ep.env].get_or_insert(ep.episode_return);
        }
    }
    Ok(returns.into_iter().flatten().collect())
}

/// `eval_return_mean`, `_std`, `_min`, `_max` of greedy CartPole episodes.
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

/// The greedy policy walked through split `split` from its first row with a
/// full window to its last decision, starting flat, each decision seeing the
/// position the previous one chose — exactly as the trading environment would
/// run one episode over the whole split — and its P&L beside buy-and-hold.
/// `None` when the split is too short for one decision.
///
/// Every decision row is evaluated for every possible incoming position in
/// one batched forward pass per [`TRADING_CHUNK`] rows; the sequential
/// part (which position is actually held) is then a lookup.
pub fn trading_walk(
    actor: &TanhMlp,
    dataset: &Dataset,
    split: Split,
    config: &TradingConfig,
    device: Device,
) -> Result<Option<BaselineComparison>, PluginError> {
    let rows = split_rows(dataset, split);
    let window = config.window;
    if rows.len() < window + 1 {
        return Ok(None);
    }
    let periods = rows.len() - window;
    let first_decision = rows.start + window - 1;
    let max = config.max_contracts as i32;
    let positions_k = (2 * max + 1) as usize;
    let obs_dim = window * dataset.feature_names.len() + 1;
    let mut positions = Vec::with_capacity(periods);
    let mut held = 0i32;
    let mut obs = Vec::new();
    for chunk_start in (0..periods).step_by(TRADING_CHUNK) {
        let chunk = TRADING_CHUNK.min(periods - chunk_start);
        obs.resize(positions_k * chunk * obs_dim, 0.0);
        for k in 0..positions_k {
            for j in 0..chunk {
                let at = (k * chunk + j) * obs_dim;
                trading_observation(
                    dataset,
                    config,
                    first_decision + chunk_start + j,
                    k as i32 - max,
                    &mut obs[at..at + obs_dim],
                );
            }
        }
        let l = logits(actor, &obs, obs_dim, device)?;
        let actions = positions_k;
        for j in 0..chunk {
            let k = (held + max) as usize;
            let at = (k * chunk + j) * actions;
            held = argmax(&l[at..at + actions]) as i32 - max;
            positions.push(held as f64);
        }
    }
    let close = &dataset.close[first_decision..first_decision + periods + 1];
    let terms = CostTerms::from_contract(
        &dataset.contract,
        config.commission_per_contract,
        config.slippage_ticks,
    )?;
    compare_with_baselines(close, &positions, terms, dataset.periods_per_year, None).map(Some)
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
    use tli_plugin_api::{ContractTerms, SplitBounds};
    use tli_plugin_kit::{env::VecTradingEnv, rng::Rng};

    fn market(rows: usize, width: usize) -> Dataset {
        let mut rng = Rng::new(11);
        let mut price = 50.0;
        let close: Vec<f64> = (0..rows)
            .map(|_| {
                price *= 1.0 + 0.01 * rng.normal();
                price
            })
            .collect();
        let features: Vec<f32> = (0..rows * width).map(|_| rng.normal() as f32).collect();
        Dataset {
            symbol: "T".into(),
            timestamps: (0..rows as i64).collect(),
            features: features.into(),
            feature_names: (0..width).map(|i| format!("f{i}").into()).collect(),
            targets: vec![0.0; rows].into(),
            target_names: vec!["y".into()].into(),
            splits: SplitBounds {
                train_end: 200,
                valid_start: 205,
                valid_end: 300,
                test_start: 305,
            },
            close: close.into(),
            contract: ContractTerms {
                root: "T".into(),
                tick_size: 0.25,
                point_value: 20.0,
                currency: "USD".into(),
            },
            periods_per_year: 252.0,
        }
    }

    /// The batched walk sees exactly the environment's observations and earns
    /// exactly one environment episode's P&L over the same split.
    #[test]
    fn walk_matches_one_environment_episode_over_the_split() {
        let d = market(400, 3);
        let rows = split_rows(&d, Split::Validation);
        let window = 4;
        let config = TradingConfig {
            window,
            max_contracts: 2,
            // One admissible start: the episode covers the whole split.
            episode_len: rows.len() - window,
            ..TradingConfig::default()
        };
        let obs_dim = window * 3 + 1;
        // A large output gain so the greedy actions vary.
        let actor = TanhMlp::new(
            "actor",
            &[obs_dim, 16, 5],
            3.0,
            &mut Rng::new(2),
            Device::Cpu,
        )
        .unwrap();
        let walk = trading_walk(&actor, &d, Split::Validation, &config, Device::Cpu)
            .unwrap()
            .unwrap();
        assert_eq!(walk.strategy.periods, rows.len() - window);

        let mut env =
            VecTradingEnv::from_dataset(&d, Split::Validation, config.clone(), 1, 0).unwrap();
        let mut obs = vec![0f32; obs_dim];
        let mut expected = vec![0f32; obs_dim];
        env.observe(&mut obs).unwrap();
        let (mut reward, mut done) = ([0f32], [false]);
        let mut position = 0;
        let mut distinct = std::collections::BTreeSet::new();
        for t in 0..walk.strategy.periods {
            trading_observation(
                &d,
                &config,
                rows.start + window - 1 + t,
                position,
                &mut expected,
            );
            assert_eq!(obs, expected, "observation at period {t}");
            let action = argmax(&logits(&actor, &obs, obs_dim, Device::Cpu).unwrap()) as u32;
            position = action as i32 - 2;
            distinct.insert(position);
            env.step(&[action], &mut obs, &mut reward, &mut done)
                .unwrap();
        }
        assert!(done[0]);
        assert!(distinct.len() > 1, "the policy never changed position");
        let episode = env.drain_completed().next().unwrap();
        assert!((episode.pnl - walk.strategy.total_pnl).abs() < 1e-6 * episode.pnl.abs().max(1.0));
        assert_eq!(episode.turnover as f64, walk.strategy.turnover);
    }

    #[test]
    fn a_split_shorter_than_the_window_gives_no_walk() {
        let d = market(400, 2);
        let config = TradingConfig {
            window: 200,
            ..TradingConfig::default()
        };
        let actor =
            TanhMlp::new("actor", &[401, 4, 3], 1.0, &mut Rng::new(1), Device::Cpu).unwrap();
        assert!(
            trading_walk(&actor, &d, Split::Validation, &config, Device::Cpu)
                .unwrap()
                .is_none()
        );
    }
}
