//! The DQN predictor (plugin API 1.2): the online Q-network applied to new
//! rows of the trading environment's market, acting greedily (argmax Q)
//! exactly as the test-split evaluation does. The walk, the stream and the
//! P&L are the kit's [`TradingAgent`]; this module loads the network and
//! names the outputs (README, "Prediction").
//!
//! Output columns: `action`, `position`, `value:<i>` (the Q-value of action
//! `i` at the position held coming in), `pnl`.

use crate::eval::{self, EVAL_CHUNK};
use crate::qnet::{self, QNet};
use crate::{DqnConfig, EnvKind};
use std::path::Path;
use tch::Device;
use tli_plugin_api::{
    Dataset, DatasetShape, Host, MemoryBreakdown, PluginError, Predictions, Predictor,
    PredictorSpec, TaskInputs,
};
use tli_plugin_kit::{
    device::parse_device,
    rl::agent::{Decision, TradingAgent},
    rl::eval::trading_walk_bytes,
    rng::Rng,
    tensor_bytes, weights,
};

const F32: u64 = 4;
/// The checkpoint's name prefix of the online network's tensors.
const ONLINE: &str = "online.";

/// Tensor names a weights file keeps from a checkpoint: the online
/// Q-network (not the target network, the optimizer or the replay buffer).
pub fn is_weight(name: &str) -> bool {
    name.starts_with(ONLINE)
}

/// Refuses a config that did not train on the trading environment.
pub fn trading_only(config: &DqnConfig) -> Result<(), PluginError> {
    match config.env {
        EnvKind::Trading => Ok(()),
        EnvKind::Cartpole => Err(PluginError::unsupported(
            "this DQN model was trained on CartPole (\"env\": \"cartpole\"), which has no \
             market rows to act on; only models trained on the trading environment predict",
        )),
    }
}

/// The network's parameters and one walk chunk's observations and
/// activations (every incoming position of up to `EVAL_CHUNK` rows).
pub fn estimate_memory(config: &DqnConfig, shape: DatasetShape) -> MemoryBreakdown {
    let (obs_dim, actions) = config.obs_and_actions(shape.features as usize);
    let layout = qnet::layout(obs_dim, &config.hidden_sizes, actions, config.dueling);
    let rows = (shape.rows as usize).clamp(1, EVAL_CHUNK);
    MemoryBreakdown {
        parameters: qnet::parameter_count(&layout) * F32,
        gradients: 0,
        optimizer_state: 0,
        activations: trading_walk_bytes(rows, obs_dim, actions, &config.hidden_sizes),
    }
}

pub struct DqnPredictor {
    net: QNet,
    device: Device,
    agent: TradingAgent,
    columns: Vec<String>,
}

/// Loads the online network's tensors into `net`, refusing a file that
/// holds anything else or lacks any of them.
fn load_weights(net: &QNet, path: &str, device: Device) -> Result<(), PluginError> {
    let tensors = weights::load(Path::new(path), device)?;
    let wrong = |why: String| {
        PluginError::io(format!(
            "{path} does not hold this DQN model's weights: {why}; export them with this \
             plugin from a checkpoint of the model, with the config it was trained with"
        ))
    };
    let expected: Vec<String> = net
        .named_parameters()
        .into_iter()
        .map(|(n, _)| format!("{ONLINE}{n}"))
        .collect();
    let unexpected: Vec<&str> = tensors
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !expected.iter().any(|e| e == n))
        .collect();
    if !unexpected.is_empty() {
        return Err(wrong(format!(
            "it has tensors {unexpected:?}, this network has {expected:?}"
        )));
    }
    net.load_named(&tensors, ONLINE)
        .map_err(|e| wrong(e.message.to_string()))
}

impl DqnPredictor {
    pub fn new(spec: PredictorSpec, host: Host) -> Result<Self, PluginError> {
        let config = DqnConfig::parse(&spec.config_json)?;
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
        let (obs_dim, actions) = config.obs_and_actions(feature_names.len());
        let layout = qnet::layout(obs_dim, &config.hidden_sizes, actions, config.dueling);
        // Initialized only to be overwritten by the weights file.
        let net = QNet::new(&layout, &mut Rng::new(0), device)?;
        load_weights(&net, spec.weights_path.as_str(), device)?;
        let agent = TradingAgent::new(config.trading.clone(), feature_names, EVAL_CHUNK)?;
        let mut columns = vec!["action".to_string(), "position".to_string()];
        columns.extend((0..actions).map(|i| format!("value:{i}")));
        columns.push("pnl".into());
        host.info(&format!(
            "model {}: DQN Q-network {layout:?}, window {}, positions ±{}",
            spec.model_id, config.trading.window, config.trading.max_contracts
        ));
        Ok(Self {
            net,
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
        values.extend(d.scores.iter().map(|q| f64::from(*q)));
        values.push(d.pnl);
        out.push(index as u32, d.row, &values)?;
    }
    Ok(())
}

impl Predictor for DqnPredictor {
    /// Each dataset walked from its `predict_from` (README, "Prediction").
    fn predict(&mut self, batch: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = Predictions::with_columns(&self.columns);
        let (net, device) = (&self.net, self.device);
        for index in 0..batch.datasets.len() {
            let decisions = self.agent.walk(batch, index, |obs, rows| {
                eval::q_values(net, obs, rows, device)
            })?;
            push(&mut out, index, &decisions)?;
        }
        Ok(out)
    }

    fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        Ok(MemoryBreakdown {
            parameters: self.net.parameters().into_iter().map(tensor_bytes).sum(),
            activations: self.agent.stream_bytes(),
            ..MemoryBreakdown::default()
        })
    }

    /// The walk continued over the new rows, carrying the position and the
    /// last rows per dataset (README, "Prediction").
    fn stream(&mut self, bars: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = Predictions::with_columns(&self.columns);
        let (net, device) = (&self.net, self.device);
        let decisions = self
            .agent
            .stream(bars, |obs, rows| eval::q_values(net, obs, rows, device))?;
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
