//! Typed plugin configs over the API: a `DqnConfig` and a `PpoConfig` start a
//! job whose tasks run the real DQN and PPO plugins with exactly those keys
//! set (the plugins' own defaults for the rest), and a bad value is refused
//! by the plugin with the key named, before anything is stored.

use std::time::{Duration, Instant};
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::Store;
use tli_host::testing::{synthetic_asset, ApiServer, PluginDir, DQN, PPO};
use tli_proto::v1 as pb;
use tli_proto::v1::training_service_client::TrainingServiceClient;

fn model(steps: u64, config: pb::model_spec::Config) -> pb::ModelSpec {
    pb::ModelSpec {
        steps,
        priority: 0,
        pooled: false,
        config: Some(config),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_dqn_and_ppo_configs_reach_the_plugins_under_their_keys() {
    let state = tempfile::tempdir().expect("temporary directory");
    let plugins = PluginDir::with(&[(DQN, "dqn"), (PPO, "ppo")]);
    let server = ApiServer::start_on_cpu(state.path(), plugins.path()).await;
    let mut client = TrainingServiceClient::connect(server.endpoint())
        .await
        .expect("connect");
    let dqn = pb::DqnConfig {
        env: pb::RlEnv::Cartpole as i32,
        hidden_sizes: vec![32],
        learning_starts: Some(100),
        gamma: Some(0.97),
        ..Default::default()
    };
    let ppo = pb::PpoConfig {
        num_envs: Some(2),
        num_steps: Some(32),
        num_minibatches: Some(2),
        trading: Some(pb::TradingEnvConfig {
            window: Some(8),
            ..Default::default()
        }),
        ..Default::default()
    };
    let started = client
        .start_training(pb::StartTrainingRequest {
            name: "typed".into(),
            models: vec![
                model(300, pb::model_spec::Config::Dqn(dqn.clone())),
                model(128, pb::model_spec::Config::Ppo(ppo)),
            ],
            assets: vec![synthetic_asset(2000, 1)],
            ..Default::default()
        })
        .await
        .expect("typed configs are accepted")
        .into_inner();
    let job = started.job.expect("job").job_id as i64;

    let store = Store::open_read_only(state.path()).expect("store");
    let deadline = Instant::now() + Duration::from_secs(120);
    let tasks = loop {
        let tasks = store.tasks_of(job).expect("tasks");
        if tasks.iter().all(|t| t.state.is_finished()) {
            break tasks;
        }
        assert!(Instant::now() < deadline, "job did not finish: {tasks:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for t in &tasks {
        assert_eq!(t.state, TaskState::Completed, "{t:?}");
    }
    let config = |plugin: &str| -> serde_json::Value {
        let task = tasks.iter().find(|t| t.plugin == plugin).expect("task");
        serde_json::from_str(&task.config_json).expect("stored config is JSON")
    };
    let d = config("dqn");
    assert_eq!(d["env"], "cartpole");
    assert_eq!(d["hidden_sizes"], serde_json::json!([32]));
    assert_eq!(d["learning_starts"], 100);
    assert_eq!(d["gamma"], 0.97);
    let p = config("ppo");
    assert_eq!(
        (p["num_envs"].as_u64(), p["num_steps"].as_u64()),
        (Some(2), Some(32))
    );
    assert_eq!(p["trading"]["window"], 8);

    // A value the plugin refuses names the key; nothing is stored.
    let refused = client
        .start_training(pb::StartTrainingRequest {
            name: "bad".into(),
            model: Some(model(
                10,
                pb::model_spec::Config::Dqn(pb::DqnConfig {
                    gamma: Some(1.5),
                    ..dqn
                }),
            )),
            assets: vec![synthetic_asset(2000, 1)],
            ..Default::default()
        })
        .await
        .expect_err("gamma 1.5 is refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("gamma"), "{}", refused.message());
    assert_eq!(store.jobs().expect("jobs").len(), 1);
}
