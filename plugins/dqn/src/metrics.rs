//! What the DQN trainer reports: per-call training metrics (loss, Q, gradient
//! norm averaged over the call's gradient steps; recent episode returns) and
//! the greedy evaluation.

use crate::{eval, DqnTrainer, EnvKind, RECENT};
use std::collections::VecDeque;
use tch::{Kind, Tensor};
use tli_plugin_api::{Metric, PluginError};
use tli_plugin_kit::{data::Split, TchResultExt};

/// Sums over the gradient steps of one `step` call.
#[derive(Default)]
pub(crate) struct CallStats {
    pub updates: u64,
    pub loss: ScalarSum,
    pub q: ScalarSum,
    pub grad_norm: ScalarSum,
}

/// A sum of scalars: host values (the CPU path computes them in Rust) and
/// device tensors, which stay on the device until the call ends. Tensors are
/// kept and added up a batch at a time ([`FOLD_EVERY`]): one addition per
/// gradient step would be one more libtorch operation in a step that is
/// mostly dispatch.
#[derive(Default)]
pub(crate) struct ScalarSum {
    host: f64,
    pushed: bool,
    total: Option<Tensor>,
    pending: Vec<Tensor>,
}

/// One step's value of a statistic: known on the host, or a 0-dim tensor on
/// the device.
pub enum Stat {
    Host(f64),
    Device(Tensor),
}

/// Scalars kept before they are folded into the total.
const FOLD_EVERY: usize = 256;

impl ScalarSum {
    pub fn push(&mut self, x: Stat) -> Result<(), PluginError> {
        self.pushed = true;
        let x = match x {
            Stat::Host(v) => {
                self.host += v;
                return Ok(());
            }
            Stat::Device(t) => t,
        };
        self.pending.push(x);
        if self.pending.len() >= FOLD_EVERY {
            self.fold()?;
        }
        Ok(())
    }

    fn fold(&mut self) -> Result<(), PluginError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let ctx = "accumulating metrics";
        let sum = Tensor::f_stack(&self.pending, 0)
            .and_then(|t| t.f_sum(Kind::Double))
            .plugin_err(ctx)?;
        self.pending.clear();
        self.total = Some(match self.total.take() {
            None => sum,
            Some(total) => total.f_add(&sum).plugin_err(ctx)?,
        });
        Ok(())
    }

    /// The mean over `n` pushes, `None` when nothing was pushed.
    fn mean(&mut self, n: u64) -> Result<Option<f64>, PluginError> {
        self.fold()?;
        if !self.pushed {
            return Ok(None);
        }
        let device = match &self.total {
            None => 0.0,
            Some(t) => t.f_double_value(&[]).plugin_err("reading metrics")?,
        };
        Ok(Some((self.host + device) / n.max(1) as f64))
    }
}

impl DqnTrainer {
    pub(crate) fn step_metrics(&self, stats: &mut CallStats) -> Result<Vec<Metric>, PluginError> {
        let mut m = vec![
            Metric::new("epsilon", self.epsilon()),
            Metric::new("learning_rate", self.learning_rate()),
            Metric::new("episodes", self.episodes as f64),
            Metric::new("env_steps", self.env_steps as f64),
            Metric::new("gradient_steps", self.updates as f64),
            Metric::new("replay_size", self.replay.len() as f64),
        ];
        if let Some(loss) = stats.loss.mean(stats.updates)? {
            m.push(Metric::new("train_loss", loss));
            m.push(Metric::new("td_loss", loss));
        }
        if let Some(q) = stats.q.mean(stats.updates)? {
            m.push(Metric::new("q_mean", q));
        }
        if let Some(g) = stats.grad_norm.mean(stats.updates)? {
            m.push(Metric::new("grad_norm", g));
        }
        if !self.recent_returns.is_empty() {
            m.push(Metric::new(
                "episodic_return_mean20",
                mean(&self.recent_returns),
            ));
        }
        if !self.recent_pnl.is_empty() {
            m.push(Metric::new("episodic_pnl_mean20", mean(&self.recent_pnl)));
        }
        Ok(m)
    }

    /// A validation during training (greedy, no training state touched):
    /// CartPole's `eval_episodes` episodes seeded with the task's fixed
    /// evaluation seed → `valid_return_mean`, `valid_return_min`; trading's
    /// walk over the validation split → `valid_sharpe`,
    /// `valid_max_drawdown`, `valid_total_pnl`, `valid_bh_sharpe`,
    /// `valid_bh_max_drawdown`. Only finite values.
    pub(crate) fn validation(&self) -> Result<Vec<Metric>, PluginError> {
        let metrics = match self.config.env {
            EnvKind::Cartpole => {
                let (mean, min) = self.cartpole_eval()?;
                vec![
                    Metric::new("valid_return_mean", mean),
                    Metric::new("valid_return_min", min),
                ]
            }
            EnvKind::Trading => {
                let comparison = eval::trading_split(
                    &self.online,
                    &self.dataset,
                    Split::Validation,
                    &self.config.trading,
                    self.device,
                )?;
                let (s, bh) = (&comparison.strategy, &comparison.buy_and_hold);
                vec![
                    Metric::new("valid_sharpe", s.sharpe),
                    Metric::new("valid_max_drawdown", s.max_drawdown),
                    Metric::new("valid_total_pnl", s.total_pnl),
                    Metric::new("valid_bh_sharpe", bh.sharpe),
                    Metric::new("valid_bh_max_drawdown", bh.max_drawdown),
                ]
            }
        };
        Ok(metrics
            .into_iter()
            .filter(|m| m.value.is_finite())
            .collect())
    }

    /// Mean and minimum return of the greedy policy over `eval_episodes`
    /// fresh CartPole episodes seeded with the fixed evaluation seed.
    fn cartpole_eval(&self) -> Result<(f64, f64), PluginError> {
        let returns = eval::cartpole_returns(
            &self.online,
            self.config.eval_episodes,
            self.eval_seed,
            self.device,
        )?;
        let mean = returns.iter().sum::<f64>() / returns.len().max(1) as f64;
        let min = returns.iter().copied().fold(f64::INFINITY, f64::min);
        Ok((mean, min))
    }

    /// Greedy evaluation: CartPole episodes, or the validation and test splits.
    pub(crate) fn evaluation(&mut self) -> Result<Vec<Metric>, PluginError> {
        let mut metrics = Vec::new();
        match self.config.env {
            EnvKind::Cartpole => {
                let (mean, min) = self.cartpole_eval()?;
                metrics.push(Metric::new("eval_return_mean", mean));
                metrics.push(Metric::new("eval_return_min", min));
            }
            EnvKind::Trading => {
                let mut any = false;
                for (split, prefix) in [(Split::Validation, "valid_"), (Split::Test, "test_")] {
                    match eval::trading_split(
                        &self.online,
                        &self.dataset,
                        split,
                        &self.config.trading,
                        self.device,
                    ) {
                        Ok(c) => {
                            any = true;
                            metrics.extend(eval::split_metrics(&c, prefix));
                        }
                        Err(e) => self.host.warn(&format!("not evaluated: {}", e.message)),
                    }
                }
                if !any {
                    return Err(PluginError::invalid_data(
                        "neither the validation nor the test split is long enough to evaluate",
                    ));
                }
            }
        }
        Ok(metrics)
    }
}

pub(crate) fn push_recent(window: &mut VecDeque<f64>, x: f64) {
    if window.len() == RECENT {
        window.pop_front();
    }
    window.push_back(x);
}

fn mean(x: &VecDeque<f64>) -> f64 {
    x.iter().sum::<f64>() / x.len().max(1) as f64
}
