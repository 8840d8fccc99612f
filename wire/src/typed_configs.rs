//! The built-in plugins' typed configs (`TemplateConfig`, `DqnConfig`,
//! `PpoConfig`, `Mamba2Config`, `TftConfig` in tli.v1) as the JSON config
//! objects the plugins read: the fields that are set, under the plugin's own key names; the plugin fills in
//! the rest and checks the values (its errors name the key). Here only what
//! JSON cannot carry is refused: a non-finite number, an unknown enum value.
//!
//! Frozen: these five messages stay for compatibility and no new ones are
//! added. Every other plugin uses the generic `PluginConfig`, checked against
//! the plugin's own JSON Schema (`tli_core::config_schema`).

use crate::convert::invalid;
use serde_json::{Map, Value};
use tli_proto::v1 as pb;
use tonic::Status;

/// A config object under construction; `path` names fields in errors
/// (`models[0].dqn`).
struct ConfigObject {
    path: String,
    map: Map<String, Value>,
}

impl ConfigObject {
    fn new(path: String) -> Self {
        Self {
            path,
            map: Map::new(),
        }
    }

    fn number(&mut self, key: &str, value: Option<f64>) -> Result<&mut Self, Status> {
        if let Some(v) = value {
            if !v.is_finite() {
                return Err(invalid(format!(
                    "{}.{key}: {v} is not a finite number",
                    self.path
                )));
            }
            self.map.insert(key.into(), v.into());
        }
        Ok(self)
    }

    fn whole<T: Into<Value>>(&mut self, key: &str, value: Option<T>) -> &mut Self {
        if let Some(v) = value {
            self.map.insert(key.into(), v.into());
        }
        self
    }

    fn flag(&mut self, key: &str, value: Option<bool>) -> &mut Self {
        self.whole(key, value)
    }

    /// A list of finite numbers (left out when empty).
    fn numbers(&mut self, key: &str, values: &[f64]) -> Result<&mut Self, Status> {
        if let Some(v) = values.iter().find(|v| !v.is_finite()) {
            return Err(invalid(format!(
                "{}.{key}: {v} is not a finite number",
                self.path
            )));
        }
        if !values.is_empty() {
            self.map.insert(key.into(), values.to_vec().into());
        }
        Ok(self)
    }

    fn sizes(&mut self, key: &str, values: &[u32]) -> &mut Self {
        if !values.is_empty() {
            self.map.insert(key.into(), values.to_vec().into());
        }
        self
    }

    fn text(&mut self, key: &str, value: Option<&str>) -> &mut Self {
        self.whole(key, value)
    }

    fn object(&mut self, key: &str, value: Option<Map<String, Value>>) -> &mut Self {
        if let Some(v) = value.filter(|m| !m.is_empty()) {
            self.map.insert(key.into(), Value::Object(v));
        }
        self
    }

    fn done(&mut self) -> Value {
        Value::Object(std::mem::take(&mut self.map))
    }
}

/// `"lr_schedule"`: constant or cosine; unset leaves the plugin's default.
fn lr_schedule(path: &str, value: i32) -> Result<Option<&'static str>, Status> {
    match pb::LrSchedule::try_from(value) {
        Ok(pb::LrSchedule::Unspecified) => Ok(None),
        Ok(pb::LrSchedule::Constant) => Ok(Some("constant")),
        Ok(pb::LrSchedule::Cosine) => Ok(Some("cosine")),
        Err(_) => Err(invalid(format!(
            "{path}.lr_schedule: {value} is not an LrSchedule"
        ))),
    }
}

/// The template plugin's config.
pub fn template(i: usize, t: &pb::TemplateConfig) -> Result<Value, Status> {
    let path = format!("models[{i}].template");
    let schedule = lr_schedule(&path, t.lr_schedule)?;
    let mut c = ConfigObject::new(path);
    c.sizes("hidden_sizes", &t.hidden_sizes);
    c.number("learning_rate", t.learning_rate)?
        .number("weight_decay", t.weight_decay)?
        .whole("batch_size", t.batch_size)
        .whole("target_index", t.target_index)
        .text("lr_schedule", schedule);
    Ok(c.done())
}

/// `"env"`: trading or cartpole; unset leaves the plugin's default (trading).
fn env(path: &str, value: i32) -> Result<Option<&'static str>, Status> {
    match pb::RlEnv::try_from(value) {
        Ok(pb::RlEnv::Unspecified) => Ok(None),
        Ok(pb::RlEnv::Trading) => Ok(Some("trading")),
        Ok(pb::RlEnv::Cartpole) => Ok(Some("cartpole")),
        Err(_) => Err(invalid(format!("{path}.env: {value} is not an RlEnv"))),
    }
}

fn trading(
    path: &str,
    t: Option<&pb::TradingEnvConfig>,
) -> Result<Option<Map<String, Value>>, Status> {
    let Some(t) = t else {
        return Ok(None);
    };
    let mut c = ConfigObject::new(format!("{path}.trading"));
    c.whole("window", t.window)
        .whole("max_contracts", t.max_contracts)
        .number("commission_per_contract", t.commission_per_contract)?
        .number("slippage_ticks", t.slippage_ticks)?
        .flag("vol_scaled", t.vol_scaled)
        .whole("episode_len", t.episode_len)
        .number("vol_halflife", t.vol_halflife)?
        .number("vol_floor", t.vol_floor)?;
    match c.done() {
        Value::Object(map) => Ok(Some(map)),
        _ => Ok(None),
    }
}

/// The DQN plugin's config.
pub fn dqn(i: usize, d: &pb::DqnConfig) -> Result<Value, Status> {
    let path = format!("models[{i}].dqn");
    let mut c = ConfigObject::new(path.clone());
    c.text("env", env(&path, d.env)?)
        .object("trading", trading(&path, d.trading.as_ref())?)
        .whole("num_envs", d.num_envs)
        .sizes("hidden_sizes", &d.hidden_sizes)
        .flag("dueling", d.dueling)
        .flag("double_q", d.double_q)
        .whole("n_step", d.n_step)
        .number("gamma", d.gamma)?
        .number("learning_rate", d.learning_rate)?
        .number("lr_final_fraction", d.lr_final_fraction)?
        .number("adam_eps", d.adam_eps)?
        .whole("batch_size", d.batch_size)
        .whole("buffer_size", d.buffer_size)
        .whole("learning_starts", d.learning_starts)
        .whole("train_frequency", d.train_frequency)
        .whole("gradient_steps", d.gradient_steps)
        .whole("target_update_interval", d.target_update_interval)
        .number("tau", d.tau)?
        .number("exploration_initial_eps", d.exploration_initial_eps)?
        .number("exploration_final_eps", d.exploration_final_eps)?
        .number("exploration_fraction", d.exploration_fraction)?
        .number("max_grad_norm", d.max_grad_norm)?
        .number("huber_delta", d.huber_delta)?
        .flag("checkpoint_replay", d.checkpoint_replay)
        .whole("eval_episodes", d.eval_episodes)
        .whole("valid_metrics_interval", d.valid_metrics_interval);
    Ok(c.done())
}

/// The PPO plugin's config.
pub fn ppo(i: usize, p: &pb::PpoConfig) -> Result<Value, Status> {
    let path = format!("models[{i}].ppo");
    let mut c = ConfigObject::new(path.clone());
    c.text("env", env(&path, p.env)?)
        .object("trading", trading(&path, p.trading.as_ref())?)
        .whole("num_envs", p.num_envs)
        .whole("num_steps", p.num_steps)
        .whole("num_minibatches", p.num_minibatches)
        .whole("update_epochs", p.update_epochs)
        .number("learning_rate", p.learning_rate)?
        .flag("anneal_lr", p.anneal_lr)
        .number("adam_eps", p.adam_eps)?
        .number("gamma", p.gamma)?
        .number("gae_lambda", p.gae_lambda)?
        .number("clip_coef", p.clip_coef)?
        .flag("anneal_clip", p.anneal_clip)
        .flag("clip_vloss", p.clip_vloss)
        .number("vf_clip_coef", p.vf_clip_coef)?
        .number("ent_coef", p.ent_coef)?
        .number("vf_coef", p.vf_coef)?
        .number("max_grad_norm", p.max_grad_norm)?
        .flag("norm_adv", p.norm_adv)
        .number("target_kl", p.target_kl)?
        .sizes("hidden_sizes", &p.hidden_sizes)
        .number("reward_scale", p.reward_scale)?
        .whole("valid_metrics_interval", p.valid_metrics_interval);
    Ok(c.done())
}

/// The Mamba-2 plugin's config.
pub fn mamba2(i: usize, m: &pb::Mamba2Config) -> Result<Value, Status> {
    let path = format!("models[{i}].mamba2");
    let schedule = lr_schedule(&path, m.lr_schedule)?;
    let mut c = ConfigObject::new(path);
    c.numbers("quantiles", &m.quantiles)?
        .whole("d_model", m.d_model)
        .whole("layers", m.layers)
        .whole("d_state", m.d_state)
        .whole("headdim", m.headdim)
        .whole("expand", m.expand)
        .whole("d_conv", m.d_conv)
        .whole("ngroups", m.ngroups)
        .whole("chunk_size", m.chunk_size)
        .whole("lookback", m.lookback)
        .whole("loss_positions", m.loss_positions)
        .whole("horizons", m.horizons)
        .whole("target_index", m.target_index)
        .number("learning_rate", m.learning_rate)?
        .text("lr_schedule", schedule)
        .whole("warmup_steps", m.warmup_steps)
        .number("dropout", m.dropout)?
        .whole("batch_size", m.batch_size)
        .number("weight_decay", m.weight_decay)?
        .number("max_grad_norm", m.max_grad_norm)?
        .whole("eval_batch_size", m.eval_batch_size);
    Ok(c.done())
}

/// The TFT plugin's config.
pub fn tft(i: usize, m: &pb::TftConfig) -> Result<Value, Status> {
    let path = format!("models[{i}].tft");
    let schedule = lr_schedule(&path, m.lr_schedule)?;
    let precision = match pb::TftPrecision::try_from(m.precision) {
        Ok(pb::TftPrecision::Unspecified) => None,
        Ok(pb::TftPrecision::Fp32) => Some("fp32"),
        Ok(pb::TftPrecision::Int8) => Some("int8"),
        Err(_) => {
            return Err(invalid(format!(
                "{path}.precision: {} is not a TftPrecision",
                m.precision
            )))
        }
    };
    let step_memory = match pb::TftStepMemory::try_from(m.step_memory) {
        Ok(pb::TftStepMemory::Unspecified) => None,
        Ok(pb::TftStepMemory::Full) => Some("full"),
        Ok(pb::TftStepMemory::Staged) => Some("staged"),
        Err(_) => {
            return Err(invalid(format!(
                "{path}.step_memory: {} is not a TftStepMemory",
                m.step_memory
            )))
        }
    };
    let optimizer_state = match pb::TftOptimizerState::try_from(m.optimizer_state) {
        Ok(pb::TftOptimizerState::Unspecified) => None,
        Ok(pb::TftOptimizerState::TftOptimizerState8bit) => Some("8bit"),
        Ok(pb::TftOptimizerState::TftOptimizerState4bit) => Some("4bit"),
        Ok(pb::TftOptimizerState::Factored) => Some("factored"),
        Err(_) => {
            return Err(invalid(format!(
                "{path}.optimizer_state: {} is not a TftOptimizerState",
                m.optimizer_state
            )))
        }
    };
    let mut c = ConfigObject::new(path);
    c.numbers("quantiles", &m.quantiles)?
        .text("precision", precision)
        .text("step_memory", step_memory)
        .text("optimizer_state", optimizer_state)
        .whole("hidden_size", m.hidden_size)
        .whole("attention_heads", m.attention_heads)
        .whole("lstm_layers", m.lstm_layers)
        .number("dropout", m.dropout)?
        .whole("lookback", m.lookback)
        .whole("horizons", m.horizons)
        .whole("target_index", m.target_index)
        .number("learning_rate", m.learning_rate)?
        .text("lr_schedule", schedule)
        .whole("warmup_steps", m.warmup_steps)
        .whole("batch_size", m.batch_size)
        .number("weight_decay", m.weight_decay)?
        .number("max_grad_norm", m.max_grad_norm)?
        .whole("eval_batch_size", m.eval_batch_size)
        .whole("int8_min_elements", m.int8_min_elements);
    Ok(c.done())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_fields_become_the_plugins_keys_and_unset_ones_stay_out() {
        let d = pb::DqnConfig {
            env: pb::RlEnv::Cartpole as i32,
            hidden_sizes: vec![64, 64],
            gamma: Some(0.98),
            buffer_size: Some(50_000),
            dueling: Some(true),
            trading: Some(pb::TradingEnvConfig {
                window: Some(16),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            dqn(0, &d).unwrap(),
            json!({"env": "cartpole", "hidden_sizes": [64, 64], "gamma": 0.98,
                   "buffer_size": 50000, "dueling": true, "trading": {"window": 16}})
        );
        assert_eq!(dqn(0, &pb::DqnConfig::default()).unwrap(), json!({}));
        let p = pb::PpoConfig {
            num_steps: Some(128),
            target_kl: Some(0.02),
            anneal_lr: Some(false),
            trading: Some(pb::TradingEnvConfig::default()),
            ..Default::default()
        };
        assert_eq!(
            ppo(1, &p).unwrap(),
            json!({"num_steps": 128, "target_kl": 0.02, "anneal_lr": false})
        );
        let m = pb::Mamba2Config {
            lookback: Some(1024),
            quantiles: vec![0.1, 0.5, 0.9],
            lr_schedule: pb::LrSchedule::Constant as i32,
            dropout: Some(0.1),
            ..Default::default()
        };
        assert_eq!(
            mamba2(0, &m).unwrap(),
            json!({"lookback": 1024, "quantiles": [0.1, 0.5, 0.9], "lr_schedule": "constant",
                   "dropout": 0.1})
        );
        assert_eq!(mamba2(0, &pb::Mamba2Config::default()).unwrap(), json!({}));
        assert_eq!(tft(0, &pb::TftConfig::default()).unwrap(), json!({}));
        let t = pb::TftConfig {
            precision: pb::TftPrecision::Int8 as i32,
            hidden_size: Some(32),
            quantiles: vec![0.05, 0.5, 0.95],
            lr_schedule: pb::LrSchedule::Constant as i32,
            int8_min_elements: Some(1024),
            step_memory: pb::TftStepMemory::Staged as i32,
            optimizer_state: pb::TftOptimizerState::Factored as i32,
            ..Default::default()
        };
        assert_eq!(
            tft(1, &t).unwrap(),
            json!({"precision": "int8", "hidden_size": 32, "quantiles": [0.05, 0.5, 0.95],
                   "lr_schedule": "constant", "int8_min_elements": 1024, "step_memory": "staged",
                   "optimizer_state": "factored"})
        );
        for (state, name) in [
            (pb::TftOptimizerState::TftOptimizerState8bit, "8bit"),
            (pb::TftOptimizerState::TftOptimizerState4bit, "4bit"),
        ] {
            let t = pb::TftConfig {
                optimizer_state: state as i32,
                ..Default::default()
            };
            assert_eq!(tft(1, &t).unwrap(), json!({ "optimizer_state": name }));
        }
        let bad = pb::TftConfig {
            precision: 9,
            ..Default::default()
        };
        assert_eq!(
            tft(2, &bad).unwrap_err().message(),
            "models[2].tft.precision: 9 is not a TftPrecision"
        );
        let bad = pb::TftConfig {
            step_memory: 7,
            ..Default::default()
        };
        assert_eq!(
            tft(3, &bad).unwrap_err().message(),
            "models[3].tft.step_memory: 7 is not a TftStepMemory"
        );
        let bad = pb::TftConfig {
            optimizer_state: 5,
            ..Default::default()
        };
        assert_eq!(
            tft(4, &bad).unwrap_err().message(),
            "models[4].tft.optimizer_state: 5 is not a TftOptimizerState"
        );
    }

    #[test]
    fn what_json_cannot_carry_is_refused_naming_the_field() {
        let nan = pb::PpoConfig {
            gamma: Some(f64::NAN),
            ..Default::default()
        };
        let e = ppo(2, &nan).unwrap_err();
        assert_eq!(
            e.message(),
            "models[2].ppo.gamma: NaN is not a finite number"
        );
        let bad_env = pb::DqnConfig {
            env: 9,
            ..Default::default()
        };
        assert_eq!(
            dqn(0, &bad_env).unwrap_err().message(),
            "models[0].dqn.env: 9 is not an RlEnv"
        );
        let inf = pb::DqnConfig {
            trading: Some(pb::TradingEnvConfig {
                vol_floor: Some(f64::INFINITY),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            dqn(0, &inf).unwrap_err().message(),
            "models[0].dqn.trading.vol_floor: inf is not a finite number"
        );
        let q = pb::Mamba2Config {
            quantiles: vec![0.5, f64::NAN],
            ..Default::default()
        };
        assert_eq!(
            mamba2(3, &q).unwrap_err().message(),
            "models[3].mamba2.quantiles: NaN is not a finite number"
        );
        let schedule = pb::Mamba2Config {
            lr_schedule: 7,
            ..Default::default()
        };
        assert_eq!(
            mamba2(0, &schedule).unwrap_err().message(),
            "models[0].mamba2.lr_schedule: 7 is not an LrSchedule"
        );
    }
}
