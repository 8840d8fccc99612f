//! The tli DQN plugin: Double DQN (van Hasselt et al. 2016) with a target
//! network (hard or Polyak updates), a uniform ring replay buffer, a linear
//! ε-greedy schedule, Huber loss, global gradient-norm clipping, and optional
//! dueling head and n-step returns. It trains on the futures trading
//! environment over the dataset the host hands over (`"env": "trading"`, the
//! default) or on CartPole-v1 (`"env": "cartpole"`) for validation.
//!
//! One `step` is one environment transition. With `num_envs` environments the
//! trainer advances whole vector steps and carries the remainder: it keeps the
//! cumulative number of transitions asked for and steps while its count is
//! below it, so the state after a cumulative target is the same however the
//! target was split across calls. `train_frequency`, `target_update_interval`,
//! `learning_starts` and the ε schedule all count transitions.

mod checkpointing;
mod config;
mod eval;
mod metrics;
mod minibatch;
mod predictor;
mod qnet;
mod replay;
mod td_update;
#[cfg(test)]
mod validation_tests;

pub use config::{DqnConfig, EnvKind};

/// Internals for the crate's benchmarks (`benches/td_update.rs`); not an API.
#[doc(hidden)]
pub mod bench_api {
    pub use crate::minibatch::MinibatchTensors;
    pub use crate::qnet::{layout, QNet};
    pub use crate::replay::Replay;
    pub use crate::td_update::{autograd_update, ManualTd};

    use std::path::Path;
    use tli_plugin_api::abi_stable::{
        sabi_trait::TD_Opaque,
        std_types::{RArc, RStr},
    };
    use tli_plugin_api::{
        Dataset, Host, HostServicesApi, HostServicesApi_TO, LogLevel, Plugin, PluginError, TaskSpec,
    };

    struct Quiet;
    impl HostServicesApi for Quiet {
        fn log(&self, _: LogLevel, _: RStr<'_>) {}
        fn is_cancelled(&self) -> bool {
            false
        }
    }

    /// The greedy returns of the online network of a CartPole checkpoint
    /// directory (one a host wrote), over `episodes` episodes drawn from
    /// `seed`: how bench scripts evaluate a kept checkpoint afresh.
    pub fn checkpoint_cartpole_returns(
        dir: &Path,
        episodes: usize,
        seed: u64,
    ) -> Result<Vec<f64>, PluginError> {
        let config = crate::checkpointing::saved_config(dir)?;
        let host = Host::new(HostServicesApi_TO::from_ptr(RArc::new(Quiet), TD_Opaque));
        let spec = TaskSpec {
            task_id: "greedy-eval".into(),
            config_json: config.into(),
            device: "cpu".into(),
            seed: 0,
            max_steps: 1,
            dataset: RArc::new(Dataset::default()),
        };
        let mut trainer = crate::DqnPlugin::create_trainer(spec, host)?;
        trainer.load_from(dir)?;
        crate::eval::cartpole_returns(&trainer.online, episodes, seed, tch::Device::Cpu)
    }
}

use metrics::{push_recent, CallStats};
use minibatch::MinibatchTensors;
use qnet::{QNet, QNetMirror};
use replay::{NStep, Replay};
use std::collections::VecDeque;
use std::path::Path;
use tch::{Device, Tensor};
use td_update::{autograd_update, ManualTd};
use tli_plugin_api::{
    abi_stable::std_types::RArc, capability, export_plugin, Dataset, DatasetShape, EvalReport,
    Host, Manifest, MemoryBreakdown, Plugin, PluginError, Predictor, PredictorSpec, StepReport,
    TaskSpec, Trainer,
};
use tli_plugin_kit::rl::{Finished, StepBuffers, VecEnv as Envs};
use tli_plugin_kit::{
    adam::AdamConfig,
    data::{self, Split},
    device::{parse_device, parse_device_name},
    flat_adamw::FlatAdamW,
    rng::Rng,
    tensor_bytes,
    validation::validation_due,
};

pub struct DqnPlugin;

export_plugin!(DqnPlugin);

const F32: u64 = 4;
/// Episodes in the `episodic_return_mean20` window.
const RECENT: usize = 20;

impl Plugin for DqnPlugin {
    type Trainer = DqnTrainer;

    fn manifest() -> Manifest {
        Manifest {
            name: "dqn".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            family: "dqn".into(),
            description: "Double DQN (target network, replay, ε-greedy, Huber, dueling and \
                          n-step options) on the trading environment or CartPole-v1"
                .into(),
            default_config: tli_plugin_kit::config::default_json(&DqnConfig::trading_defaults()),
            config_schema: DqnConfig::schema().to_string(),
        }
    }

    fn validate_config(config_json: &str) -> Result<String, PluginError> {
        let config = DqnConfig::parse(config_json)?;
        tli_plugin_kit::config::to_json(&config)
    }

    fn estimate_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let config = DqnConfig::parse(config_json)?;
        parse_device_name(device)?;
        let (obs_dim, actions) = config.obs_and_actions(shape.features as usize);
        let params = qnet::parameter_count(&qnet::layout(
            obs_dim,
            &config.hidden_sizes,
            actions,
            config.dueling,
        )) * F32;
        Ok(MemoryBreakdown {
            // Online and target networks.
            parameters: 2 * params,
            gradients: params,
            optimizer_state: 2 * params,
            activations: replay::bytes_per_transition(obs_dim) * config.buffer_size as u64
                + working_bytes(&config, obs_dim, actions),
        })
    }

    fn create_trainer(spec: TaskSpec, host: Host) -> Result<DqnTrainer, PluginError> {
        DqnTrainer::new(spec, host)
    }

    fn capabilities() -> Vec<String> {
        vec![capability::PREDICT.to_string()]
    }

    /// Compared by: its policy's validation Sharpe and P&L, test Sharpe, loss.
    fn headline_metrics() -> Vec<String> {
        tli_plugin_kit::headline::agent()
    }

    /// The online Q-network's tensors only (no target network, optimizer
    /// state or replay buffer).
    fn export_weights(
        config_json: &str,
        checkpoint_dir: &Path,
        weights_path: &Path,
    ) -> Result<(), PluginError> {
        DqnConfig::parse(config_json)?;
        tli_plugin_kit::weights::export_from_checkpoint(
            checkpoint_dir,
            weights_path,
            predictor::is_weight,
        )
    }

    fn estimate_predictor_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let config = DqnConfig::parse(config_json)?;
        predictor::trading_only(&config)?;
        parse_device_name(device)?;
        Ok(predictor::estimate_memory(&config, shape))
    }

    /// Trading models only: the greedy agent of the test-split evaluation
    /// (README, "Prediction").
    fn create_predictor(
        spec: PredictorSpec,
        host: Host,
    ) -> Result<Box<dyn Predictor>, PluginError> {
        Ok(Box::new(predictor::DqnPredictor::new(spec, host)?))
    }

    fn export_torchscript(
        _spec: PredictorSpec,
        _example: &tli_plugin_api::TaskInputs,
        _out_dir: &std::path::Path,
        _host: Host,
    ) -> Result<String, PluginError> {
        Err(tli_plugin_kit::rl::agent::torchscript_refusal())
    }
}

/// Peak bytes of one gradient step (three forward passes over a minibatch and
/// one backward, each layer's output and its gradient) and, for trading, of
/// one evaluation chunk.
fn working_bytes(config: &DqnConfig, obs_dim: usize, actions: usize) -> u64 {
    let widths = (obs_dim + config.hidden_sizes.iter().sum::<usize>() + actions) as u64;
    let batch = 4 * 2 * config.batch_size as u64 * widths * F32;
    let eval = match config.env {
        EnvKind::Trading => eval::trading_eval_bytes(obs_dim, actions, &config.hidden_sizes),
        EnvKind::Cartpole => 0,
    };
    batch.max(eval)
}

pub struct DqnTrainer {
    config: DqnConfig,
    host: Host,
    device: Device,
    dataset: RArc<Dataset>,
    max_steps: u64,
    obs_dim: usize,
    num_actions: usize,
    online: QNet,
    /// The online network's weights as of its last change, for acting
    /// (`None`: stale, made again at the next greedy action).
    acting: Option<QNetMirror>,
    target: QNet,
    /// AdamW over the online network's parameters, adopted into one flat buffer.
    optimizer: FlatAdamW,
    envs: Envs,
    /// Current observations, `num_envs × obs_dim`.
    obs: Vec<f32>,
    buffers: StepBuffers,
    actions: Vec<u32>,
    finished: Vec<Finished>,
    replay: Replay,
    nstep: NStep,
    /// The gradient steps' minibatch, refilled in place.
    minibatch: MinibatchTensors,
    /// The hand-written TD update (`None`: dueling head, autograd instead).
    manual_td: Option<ManualTd>,
    explore_rng: Rng,
    replay_rng: Rng,
    eval_seed: u64,
    /// Transitions asked for so far (the sum of `steps_done`).
    requested: u64,
    /// Transitions made (≥ `requested`: whole vector steps).
    env_steps: u64,
    /// Gradient steps made.
    updates: u64,
    episodes: u64,
    recent_returns: VecDeque<f64>,
    recent_pnl: VecDeque<f64>,
    /// Steps between validations (`valid_metrics_interval`; 0: none, also
    /// when a trading validation split is too short to walk).
    valid_interval: u64,
}

impl DqnTrainer {
    fn new(spec: TaskSpec, host: Host) -> Result<Self, PluginError> {
        let config = DqnConfig::parse(&spec.config_json)?;
        let device = parse_device(&spec.device)?;
        let dataset = spec.dataset.clone();
        let root = Rng::new(spec.seed);
        let env_seed = root.fork(10).next_u64();
        let envs = match config.env {
            EnvKind::Cartpole => Envs::cartpole(config.num_envs, env_seed)?,
            EnvKind::Trading => {
                if dataset.feature_names.is_empty() {
                    return Err(PluginError::invalid_data(
                        "the dataset has no feature columns",
                    ));
                }
                Envs::trading(&dataset, config.trading.clone(), config.num_envs, env_seed)?
            }
        };
        let (obs_dim, num_actions) = config.obs_and_actions(dataset.feature_names.len());
        debug_assert_eq!(obs_dim, envs.obs_dim());
        let layout = qnet::layout(obs_dim, &config.hidden_sizes, num_actions, config.dueling);
        let online = QNet::new(&layout, &mut root.fork(1), device)?;
        let target = QNet::new(&layout, &mut root.fork(2), device)?;
        target.update_from(&online, 1.0)?;
        let optimizer = FlatAdamW::new(
            AdamConfig {
                learning_rate: config.learning_rate,
                eps: config.adam_eps,
                ..AdamConfig::default()
            },
            &online.parameters(),
        )?;
        let minibatch = MinibatchTensors::new(config.batch_size, obs_dim, device)?;
        let manual_td = ManualTd::new(
            &online,
            &target,
            &optimizer,
            &minibatch,
            config.double_q,
            config.huber_delta,
        )?;
        let valid_rows = data::split_rows(&dataset, Split::Validation).len();
        let valid_interval = match config.env {
            EnvKind::Trading if valid_rows > config.trading.window => config.valid_metrics_interval,
            EnvKind::Trading => {
                if config.valid_metrics_interval > 0 {
                    host.warn(&format!(
                        "the validation split has {valid_rows} rows, too few for window {}: \
                         no validation metrics during training",
                        config.trading.window
                    ));
                }
                0
            }
            EnvKind::Cartpole => config.valid_metrics_interval,
        };
        let n = config.num_envs;
        let mut obs = vec![0.0; n * obs_dim];
        envs.observe(&mut obs)?;
        host.info(&format!(
            "task {}: DQN on {:?}, {} env(s), obs {obs_dim}, {num_actions} actions, \
             hidden {:?}{}{}, {} parameters, replay {} on {}",
            spec.task_id,
            config.env,
            n,
            config.hidden_sizes,
            if config.dueling { ", dueling" } else { "" },
            if config.n_step > 1 {
                format!(", {}-step", config.n_step)
            } else {
                String::new()
            },
            qnet::parameter_count(&layout),
            config.buffer_size,
            spec.device,
        ));
        Ok(Self {
            host,
            device,
            max_steps: spec.max_steps.max(1),
            obs_dim,
            num_actions,
            online,
            acting: None,
            target,
            optimizer,
            envs,
            obs,
            buffers: StepBuffers::new(n, obs_dim),
            actions: vec![0; n],
            finished: Vec::new(),
            replay: Replay::new(config.buffer_size, obs_dim),
            nstep: NStep::new(config.n_step, config.gamma, n),
            minibatch,
            manual_td,
            explore_rng: root.fork(3),
            replay_rng: root.fork(4),
            eval_seed: root.fork(5).next_u64(),
            requested: 0,
            env_steps: 0,
            updates: 0,
            episodes: 0,
            recent_returns: VecDeque::new(),
            recent_pnl: VecDeque::new(),
            valid_interval,
            dataset,
            config,
        })
    }

    /// ε after `env_steps` transitions: linear from the initial to the final
    /// value over `exploration_fraction` of the task's step budget.
    fn epsilon(&self) -> f64 {
        let c = &self.config;
        let span = c.exploration_fraction * self.max_steps as f64;
        let progress = if span > 0.0 {
            (self.env_steps as f64 / span).min(1.0)
        } else {
            1.0
        };
        c.exploration_initial_eps + (c.exploration_final_eps - c.exploration_initial_eps) * progress
    }

    /// The learning rate after `env_steps` transitions (linear decay to
    /// `lr_final_fraction` of the initial rate over the task's step budget).
    fn learning_rate(&self) -> f64 {
        let c = &self.config;
        let progress = (self.env_steps as f64 / self.max_steps as f64).min(1.0);
        c.learning_rate * (1.0 - (1.0 - c.lr_final_fraction) * progress)
    }

    /// Picks actions: random before `learning_starts`, then ε-greedy per environment.
    fn choose_actions(&mut self) -> Result<(), PluginError> {
        let n = self.config.num_envs;
        let a = self.num_actions as u64;
        let warmup = self.env_steps < self.config.learning_starts;
        let eps = self.epsilon();
        let mut greedy = Vec::new();
        for i in 0..n {
            if warmup || self.explore_rng.uniform() < eps {
                self.actions[i] = self.explore_rng.below(a) as u32;
            } else {
                greedy.push(i);
            }
        }
        if greedy.is_empty() {
            return Ok(());
        }
        // Acting reads a plain-Rust copy of the online network: a few rows
        // through libtorch cost more in dispatch than in arithmetic.
        let mirror = match &mut self.acting {
            Some(mirror) => mirror,
            stale => stale.insert(self.online.mirror()?),
        };
        let q = mirror.q_values(&self.obs, n)?;
        let a = self.num_actions;
        for i in greedy {
            self.actions[i] = eval::argmax(&q[i * a..(i + 1) * a]);
        }
        Ok(())
    }

    /// One vector step, then whatever target updates and gradient steps
    /// fall due at the new transition count.
    fn vector_step(&mut self, stats: &mut CallStats) -> Result<(), PluginError> {
        self.choose_actions()?;
        let (n, d) = (self.config.num_envs, self.obs_dim);
        self.envs
            .step_buffers(&self.actions, &mut self.buffers, &mut self.finished)?;
        let b = &self.buffers;
        for i in 0..n {
            let done = b.terminated[i] || b.truncated[i];
            self.nstep.add(
                &mut self.replay,
                i,
                &self.obs[i * d..(i + 1) * d],
                self.actions[i],
                b.rewards[i],
                &b.next_obs[i * d..(i + 1) * d],
                b.terminated[i],
                done,
            );
        }
        std::mem::swap(&mut self.obs, &mut self.buffers.obs);
        for f in self.finished.drain(..) {
            self.episodes += 1;
            push_recent(&mut self.recent_returns, f.episode_return);
            if let Some(pnl) = f.pnl {
                push_recent(&mut self.recent_pnl, pnl);
            }
        }
        let before = self.env_steps;
        self.env_steps += n as u64;
        let due = |interval: u64| self.env_steps / interval - before / interval;

        let c = &self.config;
        let target_updates = due(c.target_update_interval);
        let rounds = if self.env_steps > c.learning_starts {
            due(c.train_frequency)
        } else {
            0
        };
        let gradient_steps = rounds * c.gradient_steps;
        let tau = c.tau;
        for _ in 0..target_updates.min(if tau >= 1.0 { 1 } else { u64::MAX }) {
            self.target.update_from(&self.online, tau)?;
        }
        for _ in 0..gradient_steps {
            if self.replay.len() >= self.config.batch_size {
                self.gradient_step(stats)?;
            }
        }
        Ok(())
    }

    /// One Double-DQN update on a uniform minibatch.
    fn gradient_step(&mut self, stats: &mut CallStats) -> Result<(), PluginError> {
        self.minibatch.fill(&self.replay, &mut self.replay_rng)?;
        let lr = self.learning_rate();
        let c = &self.config;
        let step = match &mut self.manual_td {
            Some(manual) => {
                manual.update(&self.minibatch, &mut self.optimizer, lr, c.max_grad_norm)?
            }
            None => autograd_update(
                &self.online,
                &self.target,
                &mut self.optimizer,
                &self.minibatch,
                c.double_q,
                c.huber_delta,
                lr,
                c.max_grad_norm,
            )?,
        };
        self.acting = None;
        self.updates += 1;
        stats.updates += 1;
        stats.loss.push(step.loss)?;
        stats.q.push(step.q_mean)?;
        stats.grad_norm.push(step.grad_norm)?;
        Ok(())
    }
}

impl Trainer for DqnTrainer {
    /// Makes `n` transitions (whole vector steps, the remainder carried);
    /// then, when the call crossed a multiple of `valid_metrics_interval` in
    /// transitions asked for and was not cancelled, validates the online
    /// network as it is now (greedy; see `validation` in `metrics.rs`).
    fn step(&mut self, n: u64) -> Result<StepReport, PluginError> {
        let start = self.requested;
        let goal = start + n;
        let mut stats = CallStats::default();
        let mut cancelled = false;
        while self.env_steps < goal {
            if self.host.is_cancelled() {
                cancelled = true;
                break;
            }
            self.vector_step(&mut stats)?;
        }
        let done = if cancelled {
            self.env_steps.saturating_sub(start).min(n)
        } else {
            n
        };
        self.requested = start + done;
        let mut metrics = self.step_metrics(&mut stats)?;
        if !cancelled && validation_due(start, self.requested, self.valid_interval) {
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
        let bytes = |ts: Vec<&Tensor>| ts.into_iter().map(tensor_bytes).sum::<u64>();
        Ok(MemoryBreakdown {
            parameters: bytes(self.online.parameters()) + bytes(self.target.parameters()),
            // The flat gradient each gradient step gathers.
            gradients: self.optimizer.gradient_bytes(),
            optimizer_state: self.optimizer.state_bytes(),
            activations: self.replay.bytes()
                + working_bytes(&self.config, self.obs_dim, self.num_actions),
        })
    }

    fn total_steps(&self) -> u64 {
        self.requested
    }
}
