//! Greedy (argmax) evaluation of the policy: CartPole episodes, and a walk
//! through a whole trading split compared with buy-and-hold — the kit's
//! [`rl::eval`](tli_plugin_kit::rl::eval) driven by the actor's logits.
//!
//! Nothing here touches training state: evaluation environments are fresh,
//! seeded from the task seed, and no training RNG is drawn from.

use crate::net::TanhMlp;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::{Dataset, PluginError};
use tli_plugin_kit::{
    data::Split, env::TradingConfig, metrics::BaselineComparison, rl::eval as rl_eval, TchResultExt,
};

pub use rl_eval::{cartpole_metrics, walk_metrics};

/// Decision rows per forward pass in the trading walk.
pub const TRADING_CHUNK: usize = 256;

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
    rl_eval::cartpole_returns(episodes, seed, |obs, rows| {
        logits(actor, obs, obs.len() / rows, device)
    })
}

/// The greedy policy walked through split `split` (see
/// [`rl_eval::trading_walk`]), [`TRADING_CHUNK`] decision rows per forward
/// pass. `None` when the split is too short for one decision.
pub fn trading_walk(
    actor: &TanhMlp,
    dataset: &Dataset,
    split: Split,
    config: &TradingConfig,
    device: Device,
) -> Result<Option<BaselineComparison>, PluginError> {
    rl_eval::trading_walk(dataset, split, config, TRADING_CHUNK, |obs, rows| {
        logits(actor, obs, obs.len() / rows, device)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tli_plugin_api::{ContractTerms, SplitBounds};
    use tli_plugin_kit::rl::eval::{argmax, trading_observation};
    use tli_plugin_kit::{data::split_rows, env::VecTradingEnv, rng::Rng};

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
