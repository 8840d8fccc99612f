//! The DQN plugin's config: per-environment defaults, parsing, range checks
//! and the JSON Schema.
//!
//! Defaults depend on `env`: a config is parsed by laying the user's keys over
//! the defaults of the environment it names (the `trading` sub-object is merged
//! key by key as well), so `{"env": "cartpole"}` alone gives the tuned CartPole
//! settings and `{}` the trading ones.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tli_plugin_api::PluginError;
use tli_plugin_kit::{config, env::TradingConfig};

pub use tli_plugin_kit::rl::EnvKind;
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DqnConfig {
    pub env: EnvKind,
    /// Trading environment settings (ignored for CartPole).
    pub trading: TradingConfig,
    /// Environments stepped together; one `step` is one transition of one of them.
    pub num_envs: usize,
    /// Hidden layer widths of the Q-network (ReLU).
    pub hidden_sizes: Vec<usize>,
    /// Dueling head: Q = V + A − mean(A) over a shared torso.
    pub dueling: bool,
    /// Double DQN target: the online network picks a', the target network values it.
    pub double_q: bool,
    /// Transitions summed into one n-step return.
    pub n_step: usize,
    pub gamma: f64,
    pub learning_rate: f64,
    /// The learning rate decays linearly over the task's step budget to
    /// `learning_rate · lr_final_fraction` (1 = constant).
    pub lr_final_fraction: f64,
    /// Adam epsilon.
    pub adam_eps: f64,
    pub batch_size: usize,
    /// Replay capacity in transitions (ring buffer, uniform sampling).
    pub buffer_size: usize,
    /// Env steps of purely random actions before any gradient step.
    pub learning_starts: u64,
    /// Env steps between training rounds.
    pub train_frequency: u64,
    /// Gradient steps per training round.
    pub gradient_steps: u64,
    /// Env steps between target-network updates.
    pub target_update_interval: u64,
    /// 1 = hard copy; < 1 = Polyak averaging target ← τ·online + (1−τ)·target.
    pub tau: f64,
    pub exploration_initial_eps: f64,
    pub exploration_final_eps: f64,
    /// Fraction of the task's step budget (TaskSpec.max_steps) over which ε decays linearly.
    pub exploration_fraction: f64,
    /// Global gradient-norm clip; 0 turns clipping off.
    pub max_grad_norm: f64,
    /// Huber (smooth L1) threshold.
    pub huber_delta: f64,
    /// Whether checkpoints hold the replay buffer (without it a resumed run differs).
    pub checkpoint_replay: bool,
    /// CartPole: greedy evaluation episodes in `evaluate()` and in each validation.
    pub eval_episodes: usize,
    /// Steps between validations during training (0 = never): a `step` call
    /// that crosses a multiple of it reports, at its end, the greedy policy
    /// over the validation split (trading) or over `eval_episodes` fixed
    /// CartPole episodes.
    pub valid_metrics_interval: u64,
}

impl DqnConfig {
    /// Defaults for CartPole-v1, from the rl-baselines3-zoo `hyperparams/dqn.yml`
    /// CartPole-v1 entry (HEAD 22e3ff24; 500 within 5e4 steps there): net [256, 256], batch 64, buffer 100k,
    /// learning_starts 1000, gamma 0.99, target_update_interval 10, train_freq 256,
    /// gradient_steps 128, exploration_fraction 0.16; and SB3's implicit DQN
    /// defaults: Huber loss, max_grad_norm 10, τ = 1, initial ε 1. SB3 counts
    /// train_freq and target_update_interval in env steps of its single
    /// environment, which is what `step` counts here.
    ///
    /// Changed after tuning (plugins/dqn/README.md has the sweeps): the zoo's
    /// lr 2.3e-3 and final ε 0.04 reach 500 and then collapse (final mean of 20
    /// training episodes 55 on seed 1 at 100k steps); lr 1e-3 decaying linearly
    /// to 0 over the budget, final ε 0.01 and 5-step returns held ≥ 491 on all
    /// six seeds tried (1–3 on one machine, 4–6 on another) at 100k steps.
    /// Then, for speed, the network went from [256, 256] to [128, 128]: the
    /// wider one spends half its time in matrix products, and the narrower
    /// one reaches a 20-episode mean of 475 about as soon (29–34k steps
    /// against 24–34k, seeds 1–3) in two thirds of the time, and ends solved
    /// (docs/benchmarks.md, "RL speed").
    pub fn cartpole_defaults() -> Self {
        Self {
            env: EnvKind::Cartpole,
            trading: Self::trading_env_defaults(),
            num_envs: 1,
            hidden_sizes: vec![128, 128],
            dueling: false,
            double_q: true,
            n_step: 5,
            gamma: 0.99,
            learning_rate: 1e-3,
            lr_final_fraction: 0.0,
            adam_eps: 1e-8,
            batch_size: 64,
            buffer_size: 100_000,
            learning_starts: 1_000,
            train_frequency: 256,
            gradient_steps: 128,
            target_update_interval: 10,
            tau: 1.0,
            exploration_initial_eps: 1.0,
            exploration_final_eps: 0.01,
            exploration_fraction: 0.16,
            max_grad_norm: 10.0,
            huber_delta: 1.0,
            checkpoint_replay: true,
            eval_episodes: 10,
            valid_metrics_interval: 10_000,
        }
    }

    /// Defaults for the trading environment. No published reference exists for
    /// this environment; these are CleanRL-`dqn.py`-like settings (train every
    /// few steps, one gradient step, a hard target copy every 1000 steps;
    /// models.md §1.1) with a short horizon (γ 0.9: a position matters for one
    /// bar plus the cost of changing it) and a smaller network, chosen on the
    /// validation Sharpe of the synthetic AR(1) market (README has the runs).
    pub fn trading_defaults() -> Self {
        Self {
            env: EnvKind::Trading,
            trading: Self::trading_env_defaults(),
            num_envs: 4,
            hidden_sizes: vec![64, 64],
            dueling: false,
            double_q: true,
            n_step: 1,
            gamma: 0.9,
            learning_rate: 5e-4,
            lr_final_fraction: 0.0,
            adam_eps: 1e-8,
            batch_size: 64,
            buffer_size: 50_000,
            learning_starts: 1_000,
            train_frequency: 4,
            gradient_steps: 1,
            target_update_interval: 1_000,
            tau: 1.0,
            exploration_initial_eps: 1.0,
            exploration_final_eps: 0.05,
            exploration_fraction: 0.2,
            max_grad_norm: 10.0,
            huber_delta: 1.0,
            checkpoint_replay: true,
            eval_episodes: 10,
            valid_metrics_interval: 10_000,
        }
    }

    /// The trading environment as this plugin sets it up by default: the kit's
    /// defaults, but rewards in units of one bar's volatility (so Q-values and the
    /// Huber threshold have a sensible scale whatever the contract) and a shorter
    /// window (the features already summarize longer horizons).
    pub fn trading_env_defaults() -> TradingConfig {
        TradingConfig {
            window: 4,
            vol_scaled: true,
            ..TradingConfig::default()
        }
    }

    pub fn defaults_for(env: EnvKind) -> Self {
        match env {
            EnvKind::Trading => Self::trading_defaults(),
            EnvKind::Cartpole => Self::cartpole_defaults(),
        }
    }

    /// Parses JSON (missing keys take the defaults of the chosen `env`) and
    /// checks every range.
    pub fn parse(json: &str) -> Result<Self, PluginError> {
        let config = config::parse_layered("dqn", json, &["trading"], |user| {
            Ok(Self::defaults_for(
                EnvKind::of_config(user).map_err(|e| e.to_string())?,
            ))
        })?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), PluginError> {
        let bad =
            |field: &str, why: String| Err(PluginError::invalid_config(format!("{field}: {why}")));
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        if self.env == EnvKind::Trading {
            self.trading.validate()?;
        }
        if !(1..=4096).contains(&self.num_envs) {
            return bad("num_envs", format!("{} is outside 1..=4096", self.num_envs));
        }
        if self.hidden_sizes.len() > 8 {
            return bad(
                "hidden_sizes",
                format!("{} layers; at most 8", self.hidden_sizes.len()),
            );
        }
        if let Some(w) = self.hidden_sizes.iter().find(|w| **w == 0 || **w > 8192) {
            return bad("hidden_sizes", format!("width {w} is outside 1..=8192"));
        }
        if self.dueling && self.hidden_sizes.is_empty() {
            return bad(
                "dueling",
                "a dueling head needs at least one hidden layer (hidden_sizes is empty)".into(),
            );
        }
        if !(1..=100).contains(&self.n_step) {
            return bad("n_step", format!("{} is outside 1..=100", self.n_step));
        }
        if !(self.gamma >= 0.0 && self.gamma <= 1.0) {
            return bad("gamma", format!("{} is outside [0, 1]", self.gamma));
        }
        if !(self.learning_rate > 0.0 && self.learning_rate <= 1.0) {
            return bad(
                "learning_rate",
                format!("{} is outside (0, 1]", self.learning_rate),
            );
        }
        if !(self.adam_eps > 0.0 && self.adam_eps <= 1.0) {
            return bad("adam_eps", format!("{} is outside (0, 1]", self.adam_eps));
        }
        if !(1..=65_536).contains(&self.batch_size) {
            return bad(
                "batch_size",
                format!("{} is outside 1..=65536", self.batch_size),
            );
        }
        if !(1..=100_000_000).contains(&self.buffer_size) {
            return bad(
                "buffer_size",
                format!("{} is outside 1..=100000000", self.buffer_size),
            );
        }
        if self.train_frequency == 0 {
            return bad("train_frequency", "must be ≥ 1 env step".into());
        }
        if self.gradient_steps > 100_000 {
            return bad(
                "gradient_steps",
                format!("{} is outside 0..=100000", self.gradient_steps),
            );
        }
        if self.target_update_interval == 0 {
            return bad("target_update_interval", "must be ≥ 1 env step".into());
        }
        if !(self.tau > 0.0 && self.tau <= 1.0) {
            return bad("tau", format!("{} is outside (0, 1]", self.tau));
        }
        for (name, v) in [
            ("lr_final_fraction", self.lr_final_fraction),
            ("exploration_initial_eps", self.exploration_initial_eps),
            ("exploration_final_eps", self.exploration_final_eps),
            ("exploration_fraction", self.exploration_fraction),
        ] {
            if !unit(v) {
                return bad(name, format!("{v} is outside [0, 1]"));
            }
        }
        if !(self.max_grad_norm >= 0.0 && self.max_grad_norm.is_finite()) {
            return bad(
                "max_grad_norm",
                format!(
                    "{} must be finite and ≥ 0 (0 = no clipping)",
                    self.max_grad_norm
                ),
            );
        }
        if !(self.huber_delta > 0.0 && self.huber_delta.is_finite()) {
            return bad(
                "huber_delta",
                format!("{} must be finite and > 0", self.huber_delta),
            );
        }
        if !(1..=10_000).contains(&self.eval_episodes) {
            return bad(
                "eval_episodes",
                format!("{} is outside 1..=10000", self.eval_episodes),
            );
        }
        Ok(())
    }

    /// Observation width and number of actions for a dataset with `features` columns.
    pub fn obs_and_actions(&self, features: usize) -> (usize, usize) {
        match self.env {
            EnvKind::Cartpole => (
                tli_plugin_kit::env::cartpole::OBS_DIM,
                tli_plugin_kit::env::cartpole::NUM_ACTIONS as usize,
            ),
            EnvKind::Trading => (
                self.trading.window * features + 1,
                self.trading.num_actions(),
            ),
        }
    }

    pub fn schema() -> Value {
        let t = Self::trading_defaults();
        let c = Self::cartpole_defaults();
        let both = |name: &str| {
            let (tv, cv) = (
                serde_json::to_value(&t)
                    .ok()
                    .and_then(|v| v.get(name).cloned()),
                serde_json::to_value(&c)
                    .ok()
                    .and_then(|v| v.get(name).cloned()),
            );
            format!(
                "default: trading {}, cartpole {}",
                tv.unwrap_or(Value::Null),
                cv.unwrap_or(Value::Null)
            )
        };
        let int = |name: &str, min: u64, max: u64| serde_json::json!({"type": "integer", "minimum": min, "maximum": max, "description": both(name)});
        let num = |name: &str, min: f64, max: f64| serde_json::json!({"type": "number", "minimum": min, "maximum": max, "description": both(name)});
        let trading = TradingConfig::default();
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "dqn plugin config",
            "description": "Double DQN. Missing keys take the defaults of the chosen env (trading or cartpole).",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "env": {"enum": ["trading", "cartpole"], "default": "trading"},
                "trading": {
                    "type": "object",
                    "additionalProperties": false,
                    "description": "Trading environment (kit TradingConfig); this plugin's defaults: window 4, vol_scaled true, the rest as the kit's.",
                    "properties": {
                        "window": {"type": "integer", "minimum": 1, "default": 4},
                        "max_contracts": {"type": "integer", "minimum": 1, "maximum": 1000000, "default": trading.max_contracts},
                        "commission_per_contract": {"type": "number", "minimum": 0, "default": trading.commission_per_contract},
                        "slippage_ticks": {"type": "number", "minimum": 0, "default": trading.slippage_ticks},
                        "vol_scaled": {"type": "boolean", "default": true},
                        "episode_len": {"type": "integer", "minimum": 1, "default": trading.episode_len},
                        "vol_halflife": {"type": "number", "exclusiveMinimum": 0, "default": trading.vol_halflife},
                        "vol_floor": {"type": "number", "exclusiveMinimum": 0, "default": trading.vol_floor}
                    }
                },
                "num_envs": int("num_envs", 1, 4096),
                "hidden_sizes": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 8192}, "maxItems": 8, "description": both("hidden_sizes")},
                "dueling": {"type": "boolean", "default": false},
                "double_q": {"type": "boolean", "default": true},
                "n_step": int("n_step", 1, 100),
                "gamma": num("gamma", 0.0, 1.0),
                "learning_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "description": both("learning_rate")},
                "lr_final_fraction": num("lr_final_fraction", 0.0, 1.0),
                "adam_eps": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1e-8},
                "batch_size": int("batch_size", 1, 65536),
                "buffer_size": int("buffer_size", 1, 100_000_000),
                "learning_starts": int("learning_starts", 0, u64::MAX / 2),
                "train_frequency": int("train_frequency", 1, u64::MAX / 2),
                "gradient_steps": int("gradient_steps", 0, 100_000),
                "target_update_interval": int("target_update_interval", 1, u64::MAX / 2),
                "tau": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1.0},
                "exploration_initial_eps": num("exploration_initial_eps", 0.0, 1.0),
                "exploration_final_eps": num("exploration_final_eps", 0.0, 1.0),
                "exploration_fraction": num("exploration_fraction", 0.0, 1.0),
                "max_grad_norm": {"type": "number", "minimum": 0, "default": 10.0, "description": "0 = no clipping"},
                "huber_delta": {"type": "number", "exclusiveMinimum": 0, "default": 1.0},
                "checkpoint_replay": {"type": "boolean", "default": true},
                "eval_episodes": int("eval_episodes", 1, 10_000),
                "valid_metrics_interval": {"type": "integer", "minimum": 0, "maximum": u64::MAX / 2, "description": format!("steps between validations during training (0 = never): a step call that crosses a multiple of it reports the valid_* metrics measured at its end (trading: the validation split; cartpole: eval_episodes greedy episodes); {}", both("valid_metrics_interval"))}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_depend_on_env_and_round_trip() {
        assert_eq!(
            DqnConfig::parse("{}").unwrap(),
            DqnConfig::trading_defaults()
        );
        assert_eq!(
            DqnConfig::parse(r#"{"env": "cartpole"}"#).unwrap(),
            DqnConfig::cartpole_defaults()
        );
        let c = DqnConfig::parse(r#"{"env": "cartpole", "dueling": true, "n_step": 3}"#).unwrap();
        let again = DqnConfig::parse(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(c, again);
        let t = DqnConfig::parse(r#"{"trading": {"max_contracts": 2}}"#).unwrap();
        assert_eq!(t.trading.max_contracts, 2);
        assert_eq!(
            t.trading.window, 4,
            "plugin default kept beside the user's key"
        );
        assert!(t.trading.vol_scaled);
    }

    #[test]
    fn bad_values_name_the_field() {
        for (json, field) in [
            (r#"{"learning_rate": -1}"#, "learning_rate"),
            (r#"{"gamma": 1.5}"#, "gamma"),
            (r#"{"tau": 0}"#, "tau"),
            (r#"{"n_step": 0}"#, "n_step"),
            (r#"{"hidden_sizes": [0]}"#, "hidden_sizes"),
            (r#"{"dueling": true, "hidden_sizes": []}"#, "dueling"),
            (r#"{"exploration_final_eps": 2}"#, "exploration_final_eps"),
            (r#"{"train_frequency": 0}"#, "train_frequency"),
            (r#"{"env": "atari"}"#, "env"),
            (r#"{"lerning_rate": 0.1}"#, "unknown field"),
            (r#"{"trading": {"windw": 3}}"#, "unknown field"),
            (r#"{"trading": {"window": 0}}"#, "window"),
            (r#"{"batch_size": "big"}"#, "batch_size"),
        ] {
            let e = DqnConfig::parse(json).unwrap_err();
            assert!(e.message.contains(field), "{json}: {}", e.message);
        }
    }
}
