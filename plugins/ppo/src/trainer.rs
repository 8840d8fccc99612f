//! The PPO trainer: rollouts, updates, metrics, evaluation, checkpoints.

mod checkpointing;
mod metrics;
mod update;
#[cfg(test)]
mod validation_tests;

use crate::config::{EnvKind, PpoConfig};
use crate::eval;
use crate::net::ActorCritic;
use crate::rollout::{rollout_bytes, Batch, Rollout};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::Path;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::{
    abi_stable::std_types::RArc, Dataset, EvalReport, Host, MemoryBreakdown, Metric, PluginError,
    StepReport, TaskSpec, Trainer,
};
use tli_plugin_kit::rl::{EnvState, VecEnv as Env};
use tli_plugin_kit::{
    adam::AdamConfig,
    checkpoint,
    data::{split_rows, Split},
    device::parse_device,
    flat_adamw::FlatAdamW,
    rng::Rng,
    tensor_bytes,
    validation::validation_due,
    TchResultExt,
};

/// Completed episodes averaged in `episodic_return_mean20`.
const RECENT: usize = 20;
/// Greedy CartPole evaluation episodes.
const EVAL_EPISODES: usize = 10;

/// Sub-streams of the task seed.
const STREAM_INIT: u64 = 1;
const STREAM_ENV: u64 = 2;
const STREAM_EVAL: u64 = 3;
const STREAM_TRAIN: u64 = 4;

/// Device bytes besides parameters, gradients, optimizer state and the host
/// rollout buffer: the rollout's device copy during an update, one
/// minibatch's forward and backward activations, and (trading) one chunk of
/// the greedy evaluation walk.
pub fn working_bytes(config: &PpoConfig, features: usize) -> u64 {
    let d = config.obs_dim(features);
    let widths = |sizes: Vec<usize>| sizes.iter().sum::<usize>() as u64;
    let actor = widths(config.actor_sizes(features));
    let critic = widths(config.critic_sizes(features));
    let device_batch = rollout_bytes(config.num_envs, config.num_steps, d);
    let minibatch = 2 * config.minibatch_size() as u64 * (actor + critic) * 4;
    let walk = match config.env {
        EnvKind::Cartpole => 0,
        EnvKind::Trading => (config.num_actions() * eval::TRADING_CHUNK) as u64 * actor * 4,
    };
    device_batch + minibatch + walk
}

/// Averages over the minibatches of one update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct UpdateStats {
    loss: f64,
    policy_loss: f64,
    value_loss: f64,
    entropy: f64,
    approx_kl: f64,
    clip_fraction: f64,
    grad_norm: f64,
    explained_variance: f64,
    learning_rate: f64,
    clip_coef: f64,
    epochs: f64,
}

/// Counters that the checkpoint carries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Counters {
    /// Sum of the `n` of every `step(n)` (minus what a cancellation left undone).
    target: u64,
    /// Environment transitions made (≥ target − num_envs + 1; may run ahead of it by < num_envs).
    transitions: u64,
    updates: u64,
    episodes: u64,
}

pub struct PpoTrainer {
    config: PpoConfig,
    host: Host,
    device: Device,
    dataset: RArc<Dataset>,
    features: usize,
    obs_dim: usize,
    num_actions: usize,
    max_steps: u64,
    env: Env,
    /// The observations the next vector step acts on (`num_envs × obs_dim`).
    obs: Vec<f32>,
    rewards: Vec<f32>,
    terminated: Vec<bool>,
    truncated: Vec<bool>,
    actions: Vec<u32>,
    net: ActorCritic,
    /// AdamW over the actor's and critic's parameters, adopted into one flat buffer.
    optimizer: FlatAdamW,
    rng: Rng,
    rollout: Rollout,
    counters: Counters,
    recent_returns: VecDeque<f64>,
    recent_pnl: VecDeque<f64>,
    last_update: Option<UpdateStats>,
    reward_scale: f64,
    eval_seed: u64,
    /// Steps between validations (`valid_metrics_interval`; 0: none, also
    /// when a trading validation split is too short to walk).
    valid_interval: u64,
}

/// `1 / std` of one contract's per-bar P&L (`point_value · Δclose`) on the
/// training split; 1 when that is degenerate.
fn auto_trading_scale(dataset: &Dataset) -> f64 {
    let rows = split_rows(dataset, Split::Train);
    let close = &dataset.close[rows];
    let pv = dataset.contract.point_value;
    let moves: Vec<f64> = close.windows(2).map(|w| pv * (w[1] - w[0])).collect();
    let sd = tli_plugin_kit::metrics::std_dev(&moves);
    if sd.is_finite() && sd > 0.0 {
        1.0 / sd
    } else {
        1.0
    }
}

fn mean(x: impl ExactSizeIterator<Item = f64>) -> Option<f64> {
    let n = x.len();
    (n > 0).then(|| x.sum::<f64>() / n as f64)
}

/// Draws an action from log-probabilities `log_p` by inverse CDF.
fn sample(log_p: &[f32], rng: &mut Rng) -> usize {
    let u = rng.uniform();
    let mut cumulative = 0.0f64;
    for (i, lp) in log_p.iter().enumerate() {
        cumulative += (*lp as f64).exp();
        if u < cumulative {
            return i;
        }
    }
    // Rounding left the total just below u: take the last action with mass.
    log_p
        .iter()
        .rposition(|lp| lp.is_finite())
        .unwrap_or(log_p.len() - 1)
}

/// 1 − Var(returns − values) / Var(returns); 0 when the returns are constant.
fn explained_variance(values: &[f32], returns: &[f32]) -> f64 {
    let n = returns.len() as f64;
    let var = |x: &mut dyn Iterator<Item = f64>| {
        let v: Vec<f64> = x.collect();
        let m = v.iter().sum::<f64>() / n;
        v.iter().map(|a| (a - m).powi(2)).sum::<f64>() / n
    };
    let var_y = var(&mut returns.iter().map(|r| *r as f64));
    if var_y <= 0.0 {
        return 0.0;
    }
    let var_e = var(&mut returns.iter().zip(values).map(|(r, v)| (*r - *v) as f64));
    1.0 - var_e / var_y
}

impl PpoTrainer {
    pub fn new(spec: TaskSpec, host: Host) -> Result<Self, PluginError> {
        let config = PpoConfig::parse(&spec.config_json)?;
        let device = parse_device(&spec.device)?;
        let dataset = spec.dataset.clone();
        let root = Rng::new(spec.seed);
        let env_seed = root.fork(STREAM_ENV).next_u64();
        let (env, features, reward_scale) = match config.env {
            EnvKind::Cartpole => (
                Env::cartpole(config.num_envs, env_seed)?,
                0,
                config.reward_scale.unwrap_or(1.0),
            ),
            EnvKind::Trading => {
                let features = dataset.feature_names.len();
                if features == 0 {
                    return Err(PluginError::invalid_data(
                        "the dataset has no feature columns",
                    ));
                }
                let env =
                    Env::trading(&dataset, config.trading.clone(), config.num_envs, env_seed)?;
                let scale = match (config.reward_scale, config.trading.vol_scaled) {
                    (Some(s), _) => s,
                    (None, true) => 1.0,
                    (None, false) => auto_trading_scale(&dataset),
                };
                (env, features, scale)
            }
        };
        let obs_dim = config.obs_dim(features);
        let num_actions = config.num_actions();
        let net = ActorCritic::new(
            &config.actor_sizes(features),
            &config.critic_sizes(features),
            &mut root.fork(STREAM_INIT),
            device,
        )?;
        let optimizer = FlatAdamW::new(
            AdamConfig {
                learning_rate: config.learning_rate,
                eps: config.adam_eps,
                ..AdamConfig::default()
            },
            &net.parameters(),
        )?;
        let valid_interval = match config.env {
            EnvKind::Trading
                if split_rows(&dataset, Split::Validation).len() <= config.trading.window =>
            {
                if config.valid_metrics_interval > 0 {
                    host.warn(&format!(
                        "the validation split has {} rows, too few for window {}: no \
                         validation metrics during training",
                        split_rows(&dataset, Split::Validation).len(),
                        config.trading.window
                    ));
                }
                0
            }
            _ => config.valid_metrics_interval,
        };
        let n = config.num_envs;
        let mut obs = vec![0f32; n * obs_dim];
        env.observe(&mut obs)?;
        host.info(&format!(
            "task {}: PPO on {:?}, actor {:?} + critic {:?} on {}, {} envs × {} steps per rollout, \
             reward scale {reward_scale:.6e}",
            spec.task_id,
            config.env,
            config.actor_sizes(features),
            config.critic_sizes(features),
            spec.device,
            config.num_envs,
            config.num_steps,
        ));
        Ok(Self {
            rollout: Rollout::new(n, config.num_steps, obs_dim),
            rewards: vec![0.0; n],
            terminated: vec![false; n],
            truncated: vec![false; n],
            actions: vec![0; n],
            obs,
            host,
            device,
            dataset,
            features,
            obs_dim,
            num_actions,
            max_steps: spec.max_steps.max(1),
            env,
            net,
            optimizer,
            rng: root.fork(STREAM_TRAIN),
            counters: Counters::default(),
            recent_returns: VecDeque::with_capacity(RECENT),
            recent_pnl: VecDeque::with_capacity(RECENT),
            last_update: None,
            reward_scale,
            eval_seed: root.fork(STREAM_EVAL).next_u64(),
            config,
            valid_interval,
        })
    }

    /// Fraction of the schedule left before the rollout now being collected
    /// (CleanRL: `1 − (iteration − 1) / num_iterations`), in `[0, 1]`.
    fn schedule_left(&self) -> f64 {
        let before_rollout =
            self.counters.transitions - (self.rollout.filled * self.config.num_envs) as u64;
        (1.0 - before_rollout as f64 / self.max_steps as f64).clamp(0.0, 1.0)
    }

    fn learning_rate(&self) -> f64 {
        match self.config.anneal_lr {
            true => self.config.learning_rate * self.schedule_left(),
            false => self.config.learning_rate,
        }
    }

    fn clip_scale(&self) -> f64 {
        match self.config.anneal_clip {
            true => self.schedule_left(),
            false => 1.0,
        }
    }

    /// `(log-probabilities n × actions, values n)` for `obs` (n × obs_dim), no gradients.
    fn policy(&self, obs: &[f32]) -> Result<(Vec<f32>, Vec<f32>), PluginError> {
        let n = (obs.len() / self.obs_dim) as i64;
        tch::no_grad(|| -> Result<(Vec<f32>, Vec<f32>), tch::TchError> {
            let x = Tensor::f_from_slice(obs)?
                .f_reshape([n, self.obs_dim as i64])?
                .f_to_device(self.device)?;
            let (logp, value) = self.net.forward(&x)?;
            let flat = |t: Tensor| -> Result<Vec<f32>, tch::TchError> {
                Vec::<f32>::try_from(&t.f_to_device(Device::Cpu)?.f_contiguous()?.f_view([-1])?)
            };
            Ok((flat(logp)?, flat(value)?))
        })
        .plugin_err("policy forward pass")
    }

    /// One step of every environment, stored in the rollout; updates when it is full.
    fn vector_step(&mut self) -> Result<(), PluginError> {
        let (e, d, a) = (self.config.num_envs, self.obs_dim, self.num_actions);
        let (log_p, values) = self.policy(&self.obs)?;
        let base = self.rollout.filled * e;
        for i in 0..e {
            let row = &log_p[i * a..(i + 1) * a];
            let action = sample(row, &mut self.rng);
            self.actions[i] = action as u32;
            self.rollout.actions[base + i] = action as i64;
            self.rollout.log_probs[base + i] = row[action];
            self.rollout.values[base + i] = values[i];
        }
        self.rollout.obs[base * d..(base + e) * d].copy_from_slice(&self.obs);
        self.env.step(
            &self.actions,
            &mut self.obs,
            &mut self.rewards,
            &mut self.terminated,
            &mut self.truncated,
        )?;
        // Time limits are not terminal: bootstrap from the value of the
        // observation the episode was cut at (SB3's handling of TimeLimit).
        let cut: Vec<usize> = (0..e)
            .filter(|&i| self.truncated[i] && !self.terminated[i])
            .collect();
        let mut bootstrap = vec![0f32; e];
        if !cut.is_empty() {
            let mut last = vec![0f32; cut.len() * d];
            for (j, &i) in cut.iter().enumerate() {
                self.env
                    .final_observation(i, &mut last[j * d..(j + 1) * d])?;
            }
            let (_, v) = self.policy(&last)?;
            for (j, &i) in cut.iter().enumerate() {
                bootstrap[i] = v[j];
            }
        }
        let gamma = self.config.gamma;
        for (i, boot) in bootstrap.iter().enumerate() {
            let r = self.rewards[i] as f64 * self.reward_scale + gamma * *boot as f64;
            self.rollout.rewards[base + i] = r as f32;
            let done = self.terminated[i] || self.truncated[i];
            self.rollout.dones[base + i] = if done { 1.0 } else { 0.0 };
        }
        self.rollout.filled += 1;
        self.counters.transitions += e as u64;
        for f in self.env.drain_finished() {
            self.counters.episodes += 1;
            if self.recent_returns.len() == RECENT {
                self.recent_returns.pop_front();
            }
            self.recent_returns.push_back(f.episode_return);
            if let Some(pnl) = f.pnl {
                if self.recent_pnl.len() == RECENT {
                    self.recent_pnl.pop_front();
                }
                self.recent_pnl.push_back(pnl);
            }
        }
        if self.rollout.is_full() {
            self.update()?;
        }
        Ok(())
    }
}

impl Trainer for PpoTrainer {
    /// Makes `n` transitions (whole vector steps, the remainder carried);
    /// then, when the call crossed a multiple of `valid_metrics_interval` in
    /// the step count (`total_steps()`) and was not cancelled, validates the
    /// policy as it is now (greedy; see `validation` in `trainer/metrics.rs`).
    fn step(&mut self, n: u64) -> Result<StepReport, PluginError> {
        let start = self.counters.target;
        let goal = start + n;
        let mut stepped = false;
        let mut cancelled = false;
        while self.counters.transitions < goal {
            if self.host.is_cancelled() {
                cancelled = true;
                break;
            }
            self.vector_step()?;
            stepped = true;
        }
        // Cancelled: credit the transitions made (< goal), or nothing when no
        // vector step ran (what an earlier call ran ahead stays a remainder).
        self.counters.target = match (cancelled, stepped) {
            (false, _) => goal,
            (true, true) => self.counters.transitions,
            (true, false) => start,
        };
        let done = self.counters.target - start;
        let mut metrics = self.step_metrics();
        if !cancelled && validation_due(start, self.counters.target, self.valid_interval) {
            metrics.extend(self.validation()?);
        }
        Ok(StepReport {
            steps_done: done,
            metrics: metrics.into(),
        })
    }

    fn evaluate(&mut self) -> Result<EvalReport, PluginError> {
        Ok(EvalReport {
            metrics: self.evaluation()?.into(),
        })
    }

    fn save_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        self.save_to(dir)
    }

    fn load_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        self.load_from(dir)
    }

    fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        let params = self.net.parameters();
        Ok(MemoryBreakdown {
            parameters: params.iter().map(|t| tensor_bytes(t)).sum(),
            // The flat gradient each minibatch gathers.
            gradients: self.optimizer.gradient_bytes(),
            optimizer_state: self.optimizer.state_bytes(),
            activations: self.rollout.bytes() + working_bytes(&self.config, self.features),
        })
    }

    fn total_steps(&self) -> u64 {
        self.counters.target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_follows_the_probabilities() {
        let log_p = [0.2f32.ln(), 0.5f32.ln(), 0.3f32.ln()];
        let mut rng = Rng::new(5);
        let mut counts = [0usize; 3];
        for _ in 0..30_000 {
            counts[sample(&log_p, &mut rng)] += 1;
        }
        for (c, p) in counts.iter().zip([0.2, 0.5, 0.3]) {
            let f = *c as f64 / 30_000.0;
            assert!((f - p).abs() < 0.015, "{counts:?}");
        }
        // Mass only on the last action.
        assert_eq!(sample(&[f32::NEG_INFINITY, 0.0], &mut rng), 1);
    }

    struct QuietHost;

    impl tli_plugin_api::HostServicesApi for QuietHost {
        fn log(
            &self,
            _: tli_plugin_api::LogLevel,
            _: tli_plugin_api::abi_stable::std_types::RStr<'_>,
        ) {
        }
        fn is_cancelled(&self) -> bool {
            false
        }
    }

    fn cartpole_trainer() -> PpoTrainer {
        use tli_plugin_api::abi_stable::sabi_trait::TD_Opaque;
        let spec = TaskSpec {
            task_id: "t".into(),
            config_json:
                r#"{"env": "cartpole", "num_envs": 1, "num_steps": 8, "hidden_sizes": [8]}"#.into(),
            device: "cpu".into(),
            seed: 1,
            max_steps: 100,
            dataset: RArc::new(Dataset::default()),
        };
        let host = Host::new(tli_plugin_api::HostServicesApi_TO::from_ptr(
            RArc::new(QuietHost),
            TD_Opaque,
        ));
        PpoTrainer::new(spec, host).unwrap()
    }

    /// Puts CartPole environment 0 in `state` after `elapsed` steps.
    fn set_cartpole(t: &mut PpoTrainer, state: [f64; 4], elapsed: u32) {
        let Env::CartPole(env) = &mut t.env else {
            panic!("not CartPole")
        };
        let mut json = serde_json::to_value(&*env).unwrap();
        json["states"][0] = serde_json::json!(state);
        json["lengths"][0] = serde_json::json!(elapsed);
        json["returns"][0] = serde_json::json!(elapsed as f64);
        *env = serde_json::from_value(json).unwrap();
        env.observe(&mut t.obs).unwrap();
    }

    /// CartPole's 500-step limit bootstraps from the final observation; a fall does not.
    #[test]
    fn truncation_bootstraps_and_termination_does_not() {
        let mut t = cartpole_trainer();
        let gamma = t.config.gamma as f32;
        // Upright and still on the 500th step: only the time limit ends it.
        let upright = [0.0, 0.0, 0.0, 0.0];
        set_cartpole(&mut t, upright, 499);
        t.vector_step().unwrap();
        assert_eq!(t.rollout.dones[0], 1.0);
        let final_obs = match &t.env {
            Env::CartPole(e) => e.final_observations().to_vec(),
            _ => unreachable!(),
        };
        let (_, v) = t.policy(&final_obs).unwrap();
        assert!(
            v[0].abs() > 1e-6,
            "a zero value would not show the bootstrap"
        );
        assert!((t.rollout.rewards[0] - (1.0 + gamma * v[0])).abs() < 1e-6);
        assert_eq!(t.recent_returns.back(), Some(&500.0));

        // About to fall whatever the action: terminal, reward 1 exactly.
        set_cartpole(&mut t, [0.0, 0.0, 0.2, 3.0], 10);
        t.vector_step().unwrap();
        assert_eq!(t.rollout.dones[1], 1.0);
        assert_eq!(t.rollout.rewards[1], 1.0);
        // An ordinary step: not done, reward 1.
        t.vector_step().unwrap();
        assert_eq!(t.rollout.dones[2], 0.0);
        assert_eq!(t.rollout.rewards[2], 1.0);
    }

    #[test]
    fn explained_variance_is_one_for_perfect_values() {
        let r = [1.0f32, 2.0, 3.0];
        assert!((explained_variance(&r, &r) - 1.0).abs() < 1e-12);
        assert_eq!(explained_variance(&[0.0; 3], &[1.0; 3]), 0.0);
    }
}
