//! The tli PPO plugin: proximal policy optimization (Schulman et al. 2017)
//! with discrete actions, on the kit's futures trading environment over the
//! dataset the host hands over, or on CartPole-v1 (`"env": "cartpole"`).
//!
//! The algorithm follows CleanRL's `ppo.py`: vectorized environments,
//! rollouts of `num_envs × num_steps` transitions, GAE(λ), update epochs over
//! shuffled minibatches with per-minibatch advantage normalization, the
//! clipped surrogate objective, optional value clipping, an entropy bonus,
//! global gradient-norm clipping, linear learning-rate annealing over the
//! task's `max_steps`, orthogonal initialization, and separate actor and
//! critic tanh MLPs. Time-limit truncations are bootstrapped from the final
//! observation the environment keeps (`r + γ·V(s_final)`), true terminations
//! are not.
//!
//! Everything random (initialization, action sampling, minibatch shuffles,
//! environment resets) comes from the kit's [`Rng`](tli_plugin_kit::rng::Rng),
//! never from libtorch's global generator, and every piece of state is in
//! the checkpoint, so a resumed run is bit-identical on the CPU.

mod config;
mod eval;
mod net;
mod predictor;
mod rollout;
mod trainer;

pub use config::{EnvKind, PpoConfig};
pub use trainer::PpoTrainer;

use std::path::Path;
use tli_plugin_api::{
    capability, export_plugin, DatasetShape, Host, Manifest, MemoryBreakdown, Plugin, PluginError,
    Predictor, PredictorSpec, TaskSpec,
};
use tli_plugin_kit::{device::parse_device_name, mlp::Mlp};

pub struct PpoPlugin;

export_plugin!(PpoPlugin);

const F32: u64 = 4;

impl Plugin for PpoPlugin {
    type Trainer = PpoTrainer;

    fn manifest() -> Manifest {
        Manifest {
            name: "ppo".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            family: "ppo".into(),
            description: "PPO (clipped, GAE, discrete actions) on the futures trading environment or CartPole-v1".into(),
            default_config: tli_plugin_kit::config::default_json(&PpoConfig::trading()),
            config_schema: PpoConfig::schema().to_string(),
        }
    }

    fn validate_config(config_json: &str) -> Result<String, PluginError> {
        let config = PpoConfig::parse(config_json)?;
        tli_plugin_kit::config::to_json(&config)
    }

    fn estimate_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let config = PpoConfig::parse(config_json)?;
        parse_device_name(device)?;
        let features = shape.features as usize;
        let params = (Mlp::parameter_count_for(&config.actor_sizes(features))
            + Mlp::parameter_count_for(&config.critic_sizes(features)))
            * F32;
        Ok(MemoryBreakdown {
            parameters: params,
            gradients: params,
            optimizer_state: 2 * params,
            activations: rollout::rollout_bytes(
                config.num_envs,
                config.num_steps,
                config.obs_dim(features),
            ) + trainer::working_bytes(&config, features),
        })
    }

    fn create_trainer(spec: TaskSpec, host: Host) -> Result<PpoTrainer, PluginError> {
        PpoTrainer::new(spec, host)
    }

    fn capabilities() -> Vec<String> {
        vec![capability::PREDICT.to_string()]
    }

    /// Compared by: its policy's validation Sharpe and P&L, test Sharpe, loss.
    fn headline_metrics() -> Vec<String> {
        tli_plugin_kit::headline::agent()
    }

    /// The actor's tensors only: the policy. The critic is a separate
    /// network that acting does not use; the optimizer state and the partial
    /// rollout are left out too.
    fn export_weights(
        config_json: &str,
        checkpoint_dir: &Path,
        weights_path: &Path,
    ) -> Result<(), PluginError> {
        PpoConfig::parse(config_json)?;
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
        let config = PpoConfig::parse(config_json)?;
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
        Ok(Box::new(predictor::PpoPredictor::new(spec, host)?))
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
