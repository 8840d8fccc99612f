//! What the PPO trainer reports: per-call training metrics, the validations
//! during training, and the greedy evaluation.

use super::*;

impl PpoTrainer {
    /// A validation during training (greedy, no training state touched):
    /// CartPole's [`EVAL_EPISODES`] episodes seeded with the task's fixed
    /// evaluation seed → `valid_return_mean`, `valid_return_min`; trading's
    /// walk over the validation split → `valid_sharpe`,
    /// `valid_max_drawdown`, `valid_total_pnl`, `valid_bh_sharpe`,
    /// `valid_bh_max_drawdown`. Only finite values.
    pub(super) fn validation(&self) -> Result<Vec<Metric>, PluginError> {
        let metrics = match self.config.env {
            EnvKind::Cartpole => {
                let returns = self.cartpole_returns()?;
                let mean = returns.iter().sum::<f64>() / returns.len().max(1) as f64;
                let min = returns.iter().copied().fold(f64::INFINITY, f64::min);
                vec![
                    Metric::new("valid_return_mean", mean),
                    Metric::new("valid_return_min", min),
                ]
            }
            EnvKind::Trading => {
                const KEEP: [&str; 5] = [
                    "valid_sharpe",
                    "valid_max_drawdown",
                    "valid_total_pnl",
                    "valid_bh_sharpe",
                    "valid_bh_max_drawdown",
                ];
                self.trading_walk(Split::Validation)?
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|m| KEEP.contains(&m.name.as_str()))
                    .collect()
            }
        };
        Ok(metrics
            .into_iter()
            .filter(|m| m.value.is_finite())
            .collect())
    }

    /// Greedy CartPole returns over [`EVAL_EPISODES`] fresh episodes seeded
    /// with the fixed evaluation seed (no training RNG is drawn from).
    fn cartpole_returns(&self) -> Result<Vec<f64>, PluginError> {
        eval::cartpole_returns(&self.net.actor, EVAL_EPISODES, self.eval_seed, self.device)
    }

    pub(super) fn trading_walk(&self, split: Split) -> Result<Option<Vec<Metric>>, PluginError> {
        let prefix = match split {
            Split::Train => "train_",
            Split::Validation => "valid_",
            Split::Test => "test_",
        };
        Ok(eval::trading_walk(
            &self.net.actor,
            &self.dataset,
            split,
            &self.config.trading,
            self.device,
        )?
        .map(|w| eval::walk_metrics(&w, prefix)))
    }

    pub(super) fn step_metrics(&self) -> Vec<Metric> {
        let mut m = Vec::new();
        if let Some(u) = &self.last_update {
            m.extend([
                Metric::new("train_loss", u.loss),
                Metric::new("policy_loss", u.policy_loss),
                Metric::new("value_loss", u.value_loss),
                Metric::new("entropy", u.entropy),
                Metric::new("approx_kl", u.approx_kl),
                Metric::new("clip_fraction", u.clip_fraction),
                Metric::new("grad_norm", u.grad_norm),
                Metric::new("explained_variance", u.explained_variance),
                Metric::new("update_epochs_run", u.epochs),
            ]);
        }
        m.push(Metric::new("learning_rate", self.learning_rate()));
        m.push(Metric::new(
            "clip_coef",
            self.config.clip_coef * self.clip_scale(),
        ));
        if let Some(r) = mean(self.recent_returns.iter().copied()) {
            m.push(Metric::new("episodic_return_mean20", r));
        }
        if let Some(p) = mean(self.recent_pnl.iter().copied()) {
            m.push(Metric::new("episodic_pnl_mean20", p));
        }
        m.push(Metric::new("episodes", self.counters.episodes as f64));
        m.push(Metric::new("env_steps", self.counters.transitions as f64));
        m.push(Metric::new("updates", self.counters.updates as f64));
        m
    }

    /// Greedy evaluation: CartPole episodes, or walks over the validation and
    /// test splits.
    pub(super) fn evaluation(&mut self) -> Result<Vec<Metric>, PluginError> {
        let metrics = match self.config.env {
            EnvKind::Cartpole => eval::cartpole_metrics(&self.cartpole_returns()?),
            EnvKind::Trading => {
                let mut m = Vec::new();
                for split in [Split::Validation, Split::Test] {
                    match self.trading_walk(split)? {
                        Some(w) => m.extend(w),
                        None => self.host.warn(&format!(
                            "the {split:?} split is too short for one decision with window {}",
                            self.config.trading.window
                        )),
                    }
                }
                if m.is_empty() {
                    return Err(PluginError::invalid_data(format!(
                        "the validation and test splits are both shorter than window {} + 1 rows",
                        self.config.trading.window
                    )));
                }
                m
            }
        };
        Ok(metrics)
    }
}
