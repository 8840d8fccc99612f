//! The PPO predictor (plugin API 1.2): the actor (the policy) applied to new
//! rows of the trading environment's market, acting greedily (the action
//! with the largest logit) exactly as the test-split evaluation does. The
//! walk, the stream and the P&L are the kit's [`TradingAgent`]; this module
//! loads the actor and names the outputs (README, "Prediction").
//!
//! Output columns: `action`, `position`, `prob:<i>` (the policy's
//! probability of action `i` at the position held coming in), `pnl`.

use crate::eval::{self, TRADING_CHUNK};
use crate::net::TanhMlp;
use crate::{EnvKind, PpoConfig};
use std::path::Path;
use tch::Device;
use tli_plugin_api::{
    Dataset, DatasetShape, Host, MemoryBreakdown, PluginError, Predictions, Predictor,
    PredictorSpec, TaskInputs,
};
use tli_plugin_kit::{
    device::parse_device,
    mlp::Mlp,
    rl::agent::{Decision, TradingAgent},
    rl::eval::trading_walk_bytes,
    rng::Rng,
    tensor_bytes, weights,
};

const F32: u64 = 4;
/// The checkpoint's name prefix of the actor's tensors.
const ACTOR: &str = "actor.";

/// Tensor names a weights file keeps from a checkpoint: the actor (not the
/// critic, the optimizer or the rollout).
pub fn is_weight(name: &str) -> bool {
    name.starts_with(ACTOR)
}

/// Refuses a config that did not train on the trading environment.
pub fn trading_only(config: &PpoConfig) -> Result<(), PluginError> {
    match config.env {
        EnvKind::Trading => Ok(()),
        EnvKind::Cartpole => Err(PluginError::unsupported(
            "this PPO model was trained on CartPole (\"env\": \"cartpole\"), which has no \
             market rows to act on; only models trained on the trading environment predict",
        )),
    }
}

/// The actor's parameters and one walk chunk's observations and
/// activations (every incoming position of up to `TRADING_CHUNK` rows).
pub fn estimate_memory(config: &PpoConfig, shape: DatasetShape) -> MemoryBreakdown {
    let features = shape.features as usize;
    let rows = (shape.rows as usize).clamp(1, TRADING_CHUNK);
    MemoryBreakdown {
        parameters: Mlp::parameter_count_for(&config.actor_sizes(features)) * F32,
        gradients: 0,
        optimizer_state: 0,
        activations: trading_walk_bytes(
            rows,
            config.obs_dim(features),
            config.num_actions(),
            &config.hidden_sizes,
        ),
    }
}

pub struct PpoPredictor {
    actor: TanhMlp,
    obs_dim: usize,
    device: Device,
    agent: TradingAgent,
    columns: Vec<String>,
}

/// Loads the actor's tensors, refusing a file that holds anything else or
/// lacks any of them.
fn load_weights(actor: &TanhMlp, path: &str, device: Device) -> Result<(), PluginError> {
    let tensors = weights::load(Path::new(path), device)?;
    let wrong = |why: String| {
        PluginError::io(format!(
            "{path} does not hold this PPO model's weights: {why}; export them with this \
             plugin from a checkpoint of the model, with the config it was trained with"
        ))
    };
    let expected: Vec<String> = actor
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let unexpected: Vec<&str> = tensors
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !expected.iter().any(|e| e == n))
        .collect();
    if !unexpected.is_empty() {
        return Err(wrong(format!(
            "it has tensors {unexpected:?}, this policy has {expected:?}"
        )));
    }
    actor
        .load_named(&tensors)
        .map_err(|e| wrong(e.message.to_string()))
}

/// Softmax of `logits`, in `f64`.
fn probabilities(logits: &[f32]) -> impl Iterator<Item = f64> + '_ {
    let max = logits
        .iter()
        .map(|l| f64::from(*l))
        .fold(f64::NEG_INFINITY, f64::max);
    let total: f64 = logits.iter().map(|l| (f64::from(*l) - max).exp()).sum();
    logits
        .iter()
        .map(move |l| (f64::from(*l) - max).exp() / total)
}

impl PpoPredictor {
    pub fn new(spec: PredictorSpec, host: Host) -> Result<Self, PluginError> {
        let config = PpoConfig::parse(&spec.config_json)?;
        trading_only(&config)?;
        let device = parse_device(&spec.device)?;
        let schema: &Dataset =
            spec.schema.datasets.first().ok_or_else(|| {
                PluginError::invalid_data("the predictor's schema holds no dataset")
            })?;
        let feature_names: Vec<String> =
            schema.feature_names.iter().map(|s| s.to_string()).collect();
        if feature_names.is_empty() {
            return Err(PluginError::invalid_data(
                "the model's schema has no feature columns",
            ));
        }
        let sizes = config.actor_sizes(feature_names.len());
        // Initialized only to be overwritten by the weights file.
        let actor = TanhMlp::new("actor", &sizes, 0.01, &mut Rng::new(0), device)?;
        load_weights(&actor, spec.weights_path.as_str(), device)?;
        let agent = TradingAgent::new(config.trading.clone(), feature_names, TRADING_CHUNK)?;
        let mut columns = vec!["action".to_string(), "position".to_string()];
        columns.extend((0..config.num_actions()).map(|i| format!("prob:{i}")));
        columns.push("pnl".into());
        host.info(&format!(
            "model {}: PPO policy {sizes:?}, window {}, positions ±{}",
            spec.model_id, config.trading.window, config.trading.max_contracts
        ));
        Ok(Self {
            actor,
            obs_dim: sizes[0],
            device,
            agent,
            columns,
        })
    }
}

/// Appends the decisions of dataset `index` as output rows.
fn push(out: &mut Predictions, index: usize, decisions: &[Decision]) -> Result<(), PluginError> {
    let mut values = Vec::new();
    for d in decisions {
        values.clear();
        values.push(d.action as f64);
        values.push(f64::from(d.position));
        values.extend(probabilities(&d.scores));
        values.push(d.pnl);
        out.push(index as u32, d.row, &values)?;
    }
    Ok(())
}

impl Predictor for PpoPredictor {
    /// Each dataset walked from its `predict_from` (README, "Prediction").
    fn predict(&mut self, batch: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = Predictions::with_columns(&self.columns);
        let (actor, obs_dim, device) = (&self.actor, self.obs_dim, self.device);
        for index in 0..batch.datasets.len() {
            let decisions = self.agent.walk(batch, index, |obs, _| {
                eval::logits(actor, obs, obs_dim, device)
            })?;
            push(&mut out, index, &decisions)?;
        }
        Ok(out)
    }

    fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        Ok(MemoryBreakdown {
            parameters: self.actor.parameters().into_iter().map(tensor_bytes).sum(),
            activations: self.agent.stream_bytes(),
            ..MemoryBreakdown::default()
        })
    }

    /// The walk continued over the new rows, carrying the position and the
    /// last rows per dataset (README, "Prediction").
    fn stream(&mut self, bars: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = Predictions::with_columns(&self.columns);
        let (actor, obs_dim, device) = (&self.actor, self.obs_dim, self.device);
        let decisions = self
            .agent
            .stream(bars, |obs, _| eval::logits(actor, obs, obs_dim, device))?;
        for (index, d) in decisions.iter().enumerate() {
            push(&mut out, index, d)?;
        }
        Ok(out)
    }

    fn reset(&mut self) -> Result<(), PluginError> {
        self.agent.reset();
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
