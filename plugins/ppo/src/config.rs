//! The PPO plugin's config: environment-dependent defaults, parsing, range
//! checks and the JSON Schema.
//!
//! Defaults depend on `env`: a config is the defaults of its environment
//! ([`PpoConfig::cartpole`] or [`PpoConfig::trading`]) overlaid with the keys
//! the user gave (the `trading` sub-object is merged key by key onto the kit's
//! [`TradingConfig`] defaults). Unknown keys are refused.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tli_plugin_api::PluginError;
use tli_plugin_kit::{config, env::TradingConfig};

pub use tli_plugin_kit::rl::EnvKind;
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PpoConfig {
    pub env: EnvKind,
    /// Trading environment settings (ignored for CartPole).
    pub trading: TradingConfig,
    /// Vectorized environments stepped together.
    pub num_envs: usize,
    /// Vector steps per rollout (a rollout holds `num_envs × num_steps` transitions).
    pub num_steps: usize,
    /// Minibatches the rollout is cut into per epoch (must divide it).
    pub num_minibatches: usize,
    /// Passes over each rollout.
    pub update_epochs: usize,
    pub learning_rate: f64,
    /// Anneal the learning rate linearly to 0 over the task's `max_steps`.
    pub anneal_lr: bool,
    pub adam_eps: f64,
    pub gamma: f64,
    pub gae_lambda: f64,
    /// Policy ratio clip range ε.
    pub clip_coef: f64,
    /// Anneal `clip_coef` (and `vf_clip_coef`) linearly to 0 over `max_steps`, as SB3's `lin_0.2`.
    pub anneal_clip: bool,
    /// Clip the value function around the rollout's values.
    pub clip_vloss: bool,
    /// Value clip range (in units of scaled return).
    pub vf_clip_coef: f64,
    pub ent_coef: f64,
    pub vf_coef: f64,
    /// Global gradient-norm limit.
    pub max_grad_norm: f64,
    /// Normalize advantages per minibatch.
    pub norm_adv: bool,
    /// Stop an update's epochs early once the approximate KL exceeds this (null: never).
    pub target_kl: Option<f64>,
    /// Hidden widths of the actor and of the critic (two separate tanh MLPs).
    pub hidden_sizes: Vec<usize>,
    /// Rewards are multiplied by this before learning; null = automatic
    /// (CartPole 1; trading: 1 / std of one contract's per-bar P&L on the
    /// training split, or 1 when `trading.vol_scaled`).
    pub reward_scale: Option<f64>,
    /// Steps between validations during training (0 = never): a `step`
    /// call that crosses a multiple of it reports, at its end, the greedy
    /// policy over the validation split (trading) or over fixed CartPole
    /// episodes.
    pub valid_metrics_interval: u64,
}

impl PpoConfig {
    /// CartPole-v1 defaults: the rl-baselines3-zoo `hyperparams/ppo.yml`
    /// CartPole-v1 entry (n_envs 8, n_steps 32, gamma 0.98, gae_lambda 0.8,
    /// ent_coef 0, clip lin_0.2) with SB3's implicit PPO defaults (vf_coef
    /// 0.5, max_grad_norm 0.5, Adam eps 1e-5, 64-64 tanh, no value clipping);
    /// research notes `models.md` §1.3 (DLR-RM/rl-baselines3-zoo). Ours
    /// differ in the update: 10 epochs of 2 minibatches (the zoo: 20 of one
    /// 256 batch; the same number of gradient steps, half the rows each) at
    /// lr lin_0.002 (the zoo: lin_0.001). Median time to a 20-episode mean of
    /// 475 over seeds 1–3 went from 3.3 s (30k steps) to 2.7 s (23k steps),
    /// every run still ending at 500 (docs/benchmarks.md, "RL speed").
    pub fn cartpole() -> Self {
        Self {
            env: EnvKind::Cartpole,
            trading: TradingConfig::default(),
            num_envs: 8,
            num_steps: 32,
            num_minibatches: 2,
            update_epochs: 10,
            learning_rate: 2e-3,
            anneal_lr: true,
            adam_eps: 1e-5,
            gamma: 0.98,
            gae_lambda: 0.8,
            clip_coef: 0.2,
            anneal_clip: true,
            clip_vloss: false,
            vf_clip_coef: 0.2,
            ent_coef: 0.0,
            vf_coef: 0.5,
            max_grad_norm: 0.5,
            norm_adv: true,
            target_kl: None,
            hidden_sizes: vec![64, 64],
            reward_scale: None,
            valid_metrics_interval: 10_000,
        }
    }

    /// Trading defaults: CleanRL `ppo.py`'s algorithm settings (gae_lambda
    /// 0.95, clip 0.2 with value clipping, ent_coef 0.01, vf_coef 0.5,
    /// max_grad_norm 0.5, Adam eps 1e-5, 4 epochs × 4 minibatches, annealed
    /// lr; models.md §1.2) with longer rollouts (one 256-step episode per
    /// environment per rollout), the kit's trading environment defaults, and
    /// two changes tuned on the synthetic AR(1) data (README): learning rate
    /// 1e-3 instead of 2.5e-4, and gamma 0.9 instead of 0.99 (an action's
    /// reward is mostly immediate; a shorter horizon cuts advantage noise).
    pub fn trading() -> Self {
        Self {
            env: EnvKind::Trading,
            trading: TradingConfig::default(),
            num_envs: 8,
            num_steps: 256,
            num_minibatches: 4,
            update_epochs: 4,
            learning_rate: 1e-3,
            anneal_lr: true,
            adam_eps: 1e-5,
            gamma: 0.9,
            gae_lambda: 0.95,
            clip_coef: 0.2,
            anneal_clip: false,
            clip_vloss: true,
            vf_clip_coef: 0.2,
            ent_coef: 0.01,
            vf_coef: 0.5,
            max_grad_norm: 0.5,
            norm_adv: true,
            target_kl: None,
            hidden_sizes: vec![64, 64],
            reward_scale: None,
            valid_metrics_interval: 10_000,
        }
    }

    pub fn defaults_for(env: EnvKind) -> Self {
        match env {
            EnvKind::Cartpole => Self::cartpole(),
            EnvKind::Trading => Self::trading(),
        }
    }

    /// Parses JSON (missing keys take the defaults of its `env`) and checks every range.
    pub fn parse(json: &str) -> Result<Self, PluginError> {
        let config = config::parse_layered("ppo", json, &["trading"], |user| {
            Ok(Self::defaults_for(
                EnvKind::of_config(user).map_err(|e| e.to_string())?,
            ))
        })?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), PluginError> {
        let bad = |key: &str, why: String| {
            Err(PluginError::invalid_config(format!(
                "ppo config: {key}: {why}"
            )))
        };
        let unit = |key: &str, v: f64, open_low: bool| -> Result<(), PluginError> {
            let ok = v.is_finite() && v <= 1.0 && if open_low { v > 0.0 } else { v >= 0.0 };
            if ok {
                Ok(())
            } else {
                let range = if open_low { "(0, 1]" } else { "[0, 1]" };
                bad(key, format!("{v} is outside {range}"))
            }
        };
        let int = |key: &str, v: usize, max: usize| -> Result<(), PluginError> {
            if (1..=max).contains(&v) {
                Ok(())
            } else {
                bad(key, format!("{v} is outside 1..={max}"))
            }
        };
        int("num_envs", self.num_envs, 4096)?;
        int("num_steps", self.num_steps, 100_000)?;
        int("update_epochs", self.update_epochs, 1000)?;
        let batch = self.num_envs * self.num_steps;
        if batch > 1 << 22 {
            return bad(
                "num_steps",
                format!(
                    "num_envs × num_steps = {batch} transitions per rollout; at most {}",
                    1 << 22
                ),
            );
        }
        int("num_minibatches", self.num_minibatches, batch)?;
        if !batch.is_multiple_of(self.num_minibatches) {
            return bad(
                "num_minibatches",
                format!(
                    "{} does not divide the rollout of num_envs × num_steps = {batch} transitions",
                    self.num_minibatches
                ),
            );
        }
        unit("learning_rate", self.learning_rate, true)?;
        if !(self.adam_eps > 0.0 && self.adam_eps <= 1.0) {
            return bad("adam_eps", format!("{} is outside (0, 1]", self.adam_eps));
        }
        unit("gamma", self.gamma, false)?;
        unit("gae_lambda", self.gae_lambda, false)?;
        unit("clip_coef", self.clip_coef, true)?;
        if !(self.vf_clip_coef.is_finite() && self.vf_clip_coef > 0.0) {
            return bad(
                "vf_clip_coef",
                format!("{} must be finite and > 0", self.vf_clip_coef),
            );
        }
        for (key, v) in [("ent_coef", self.ent_coef), ("vf_coef", self.vf_coef)] {
            if !(v.is_finite() && (0.0..=100.0).contains(&v)) {
                return bad(key, format!("{v} is outside [0, 100]"));
            }
        }
        if !(self.max_grad_norm.is_finite() && self.max_grad_norm > 0.0) {
            return bad(
                "max_grad_norm",
                format!("{} must be finite and > 0", self.max_grad_norm),
            );
        }
        if let Some(kl) = self.target_kl {
            if !(kl.is_finite() && kl > 0.0) {
                return bad("target_kl", format!("{kl} must be finite and > 0, or null"));
            }
        }
        if self.hidden_sizes.is_empty() || self.hidden_sizes.len() > 8 {
            return bad(
                "hidden_sizes",
                format!("{} layers; use 1 to 8", self.hidden_sizes.len()),
            );
        }
        if let Some(w) = self.hidden_sizes.iter().find(|w| **w == 0 || **w > 4096) {
            return bad("hidden_sizes", format!("width {w} is outside 1..=4096"));
        }
        if let Some(s) = self.reward_scale {
            if !(s.is_finite() && s > 0.0) {
                return bad(
                    "reward_scale",
                    format!("{s} must be finite and > 0, or null"),
                );
            }
        }
        if self.trading.max_contracts > 64 {
            return bad(
                "trading.max_contracts",
                format!(
                    "{} gives {} actions; the PPO policy head allows at most 64 contracts (129 actions)",
                    self.trading.max_contracts,
                    self.trading.num_actions()
                ),
            );
        }
        self.trading
            .validate()
            .map_err(|e| PluginError::invalid_config(format!("ppo config: trading: {}", e.message)))
    }

    /// Transitions per rollout.
    pub fn batch_size(&self) -> usize {
        self.num_envs * self.num_steps
    }

    pub fn minibatch_size(&self) -> usize {
        self.batch_size() / self.num_minibatches
    }

    /// Observation width for a dataset with `features` feature columns.
    pub fn obs_dim(&self, features: usize) -> usize {
        match self.env {
            EnvKind::Cartpole => tli_plugin_kit::env::cartpole::OBS_DIM,
            EnvKind::Trading => self.trading.window * features + 1,
        }
    }

    pub fn num_actions(&self) -> usize {
        match self.env {
            EnvKind::Cartpole => tli_plugin_kit::env::cartpole::NUM_ACTIONS as usize,
            EnvKind::Trading => self.trading.num_actions(),
        }
    }

    /// Actor layer sizes `[obs, hidden…, actions]`.
    pub fn actor_sizes(&self, features: usize) -> Vec<usize> {
        let mut s = vec![self.obs_dim(features)];
        s.extend(&self.hidden_sizes);
        s.push(self.num_actions());
        s
    }

    /// Critic layer sizes `[obs, hidden…, 1]`.
    pub fn critic_sizes(&self, features: usize) -> Vec<usize> {
        let mut s = vec![self.obs_dim(features)];
        s.extend(&self.hidden_sizes);
        s.push(1);
        s
    }

    pub fn schema() -> Value {
        let d = Self::trading();
        let c = Self::cartpole();
        let num = |v: f64| serde_json::json!(v);
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "ppo plugin config",
            "description": "Defaults depend on env; the defaults shown are the trading ones. CartPole-v1 defaults (rl-baselines3-zoo): num_envs 8, num_steps 32, num_minibatches 1, update_epochs 20, learning_rate 0.001, gamma 0.98, gae_lambda 0.8, anneal_clip true, clip_vloss false, ent_coef 0.",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "env": {"enum": ["trading", "cartpole"], "default": "trading"},
                "trading": {
                    "type": "object",
                    "description": "kit trading environment settings (TradingConfig); unknown keys refused",
                    "additionalProperties": false,
                    "properties": {
                        "window": {"type": "integer", "minimum": 1, "default": d.trading.window},
                        "max_contracts": {"type": "integer", "minimum": 1, "maximum": 1_000_000, "default": d.trading.max_contracts},
                        "commission_per_contract": {"type": "number", "minimum": 0, "default": d.trading.commission_per_contract},
                        "slippage_ticks": {"type": "number", "minimum": 0, "default": d.trading.slippage_ticks},
                        "vol_scaled": {"type": "boolean", "default": d.trading.vol_scaled},
                        "episode_len": {"type": "integer", "minimum": 1, "default": d.trading.episode_len},
                        "vol_halflife": {"type": "number", "exclusiveMinimum": 0, "default": d.trading.vol_halflife},
                        "vol_floor": {"type": "number", "exclusiveMinimum": 0, "default": d.trading.vol_floor}
                    }
                },
                "num_envs": {"type": "integer", "minimum": 1, "maximum": 4096, "default": d.num_envs},
                "num_steps": {"type": "integer", "minimum": 1, "maximum": 100_000, "default": d.num_steps},
                "num_minibatches": {"type": "integer", "minimum": 1, "default": d.num_minibatches, "description": "must divide num_envs × num_steps"},
                "update_epochs": {"type": "integer", "minimum": 1, "maximum": 1000, "default": d.update_epochs},
                "learning_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": num(d.learning_rate)},
                "anneal_lr": {"type": "boolean", "default": d.anneal_lr},
                "adam_eps": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": num(d.adam_eps)},
                "gamma": {"type": "number", "minimum": 0, "maximum": 1, "default": num(d.gamma)},
                "gae_lambda": {"type": "number", "minimum": 0, "maximum": 1, "default": num(d.gae_lambda)},
                "clip_coef": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": num(d.clip_coef)},
                "anneal_clip": {"type": "boolean", "default": d.anneal_clip},
                "clip_vloss": {"type": "boolean", "default": d.clip_vloss},
                "vf_clip_coef": {"type": "number", "exclusiveMinimum": 0, "default": num(d.vf_clip_coef)},
                "ent_coef": {"type": "number", "minimum": 0, "maximum": 100, "default": num(d.ent_coef)},
                "vf_coef": {"type": "number", "minimum": 0, "maximum": 100, "default": num(d.vf_coef)},
                "max_grad_norm": {"type": "number", "exclusiveMinimum": 0, "default": num(d.max_grad_norm)},
                "norm_adv": {"type": "boolean", "default": d.norm_adv},
                "target_kl": {"type": ["number", "null"], "exclusiveMinimum": 0, "default": null},
                "hidden_sizes": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 4096}, "minItems": 1, "maxItems": 8, "default": d.hidden_sizes},
                "reward_scale": {"type": ["number", "null"], "exclusiveMinimum": 0, "default": null, "description": "null = automatic"},
                "valid_metrics_interval": {"type": "integer", "minimum": 0, "default": d.valid_metrics_interval, "description": "steps between validations during training (0 = never): a step call that crosses a multiple of it reports the valid_* metrics measured at its end (trading: a greedy walk over the validation split; cartpole: 10 greedy episodes)"}
            },
            "examples": [serde_json::to_value(c).unwrap_or(Value::Null)]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_env_and_user_keys_override() {
        assert_eq!(PpoConfig::parse("{}").unwrap(), PpoConfig::trading());
        assert_eq!(PpoConfig::parse("").unwrap(), PpoConfig::trading());
        assert_eq!(
            PpoConfig::parse(r#"{"env": "cartpole"}"#).unwrap(),
            PpoConfig::cartpole()
        );
        let c =
            PpoConfig::parse(r#"{"env": "cartpole", "gamma": 0.9, "target_kl": 0.02}"#).unwrap();
        assert_eq!(c.gamma, 0.9);
        assert_eq!(c.target_kl, Some(0.02));
        assert_eq!(c.num_steps, 32);
        // The trading sub-object merges key by key.
        let t = PpoConfig::parse(r#"{"trading": {"window": 4}}"#).unwrap();
        assert_eq!(t.trading.window, 4);
        assert_eq!(t.trading.episode_len, TradingConfig::default().episode_len);
        // Normalized output parses back to itself.
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(PpoConfig::parse(&text).unwrap(), t);
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases = [
            (r#"{"gamma": 1.5}"#, "gamma"),
            (r#"{"learning_rate": 0}"#, "learning_rate"),
            (r#"{"num_envs": 0}"#, "num_envs"),
            (r#"{"num_minibatches": 3}"#, "num_minibatches"),
            (r#"{"hidden_sizes": []}"#, "hidden_sizes"),
            (r#"{"hidden_sizes": [0]}"#, "hidden_sizes"),
            (r#"{"env": "pong"}"#, "env"),
            (r#"{"max_grad_norm": -1}"#, "max_grad_norm"),
            (r#"{"reward_scale": 0}"#, "reward_scale"),
            (r#"{"target_kl": -0.1}"#, "target_kl"),
            (r#"{"lerning_rate": 0.1}"#, "unknown field"),
            (r#"{"trading": {"window": 0}}"#, "window"),
            (r#"{"trading": {"windw": 3}}"#, "unknown field"),
            (r#"[1]"#, "object"),
            (
                r#"{"learning_rate": "fast"}"#,
                "learning_rate: invalid type",
            ),
            (r#"{"trading": {"window": -1}}"#, "trading: invalid value"),
        ];
        for (json, key) in cases {
            let e = PpoConfig::parse(json).unwrap_err();
            assert!(e.message.contains(key), "{json}: {}", e.message);
        }
    }

    #[test]
    fn differing_keys_are_named() {
        let a = PpoConfig::cartpole();
        let mut b = a.clone();
        b.hidden_sizes = vec![32];
        let keys = tli_plugin_kit::config::differing_keys(&a, &b);
        assert_eq!(keys.len(), 1);
        assert!(keys[0].starts_with("hidden_sizes"), "{keys:?}");
    }
}
