//! Typed plugin configs over the API: a `DqnConfig` and a `PpoConfig` start a
//! job whose tasks run the real DQN and PPO plugins with exactly those keys
//! set (the plugins' own defaults for the rest), and a bad value is refused
//! by the plugin with the key named, before anything is stored. A typed
//! `Mamba2Config` and the generic `PluginConfig` train Mamba-2 in one job
//! beside the template, DQN, PPO and the TFT (typed `TftConfig`, FP32 and INT8).

use std::time::{Duration, Instant};
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::{Store, TaskRow};
use tli_proto::v1 as pb;
use tli_proto::v1::training_service_client::TrainingServiceClient;
use tli_testkit::{
    plugin_model, synthetic_asset, ApiServer, PluginDir, DQN, MAMBA2, PPO, TEMPLATE, TFT,
};

fn model(steps: u64, config: pb::model_spec::Config) -> pb::ModelSpec {
    pb::ModelSpec {
        keep_best: None,
        early_stopping: None,
        steps,
        priority: 0,
        pooled: false,
        config: Some(config),
    }
}

/// The tasks of `job` once all have finished (within `seconds`).
async fn finished_tasks(store: &Store, job: i64, seconds: u64) -> Vec<TaskRow> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let tasks = store.tasks_of(job).expect("tasks");
        if tasks.iter().all(|t| t.state.is_finished()) {
            return tasks;
        }
        assert!(Instant::now() < deadline, "job did not finish: {tasks:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
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
    let tasks = finished_tasks(&store, job, 120).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mamba2_trains_beside_the_other_families_from_typed_and_generic_configs() {
    let state = tempfile::tempdir().expect("temporary directory");
    let plugins = PluginDir::with(&[
        (MAMBA2, "mamba2"),
        (TEMPLATE, "template"),
        (DQN, "dqn"),
        (PPO, "ppo"),
        (TFT, "tft"),
    ]);
    let server = ApiServer::start_on_cpu(state.path(), plugins.path()).await;
    let mut client = TrainingServiceClient::connect(server.endpoint())
        .await
        .expect("connect");
    let tft = |precision: pb::TftPrecision| pb::TftConfig {
        precision: precision as i32,
        hidden_size: Some(16),
        attention_heads: Some(2),
        lookback: Some(16),
        horizons: Some(3),
        batch_size: Some(8),
        int8_min_elements: Some(256),
        ..Default::default()
    };
    let typed = pb::Mamba2Config {
        d_model: Some(16),
        layers: Some(1),
        d_state: Some(8),
        headdim: Some(8),
        lookback: Some(48),
        chunk_size: Some(16),
        horizons: Some(2),
        quantiles: vec![0.1, 0.5, 0.9],
        batch_size: Some(8),
        ..Default::default()
    };
    let generic = r#"{"d_model": 16, "layers": 1, "d_state": 8, "headdim": 8, "lookback": 32,
        "batch_size": 8}"#;
    let started = client
        .start_training(pb::StartTrainingRequest {
            name: "families".into(),
            models: vec![
                model(40, pb::model_spec::Config::Mamba2(typed)),
                plugin_model("mamba2", 40, generic),
                plugin_model("template", 40, "{}"),
                plugin_model("dqn", 300, r#"{"env": "cartpole", "hidden_sizes": [16]}"#),
                plugin_model("ppo", 128, r#"{"num_envs": 2, "num_steps": 32}"#),
                model(30, pb::model_spec::Config::Tft(tft(pb::TftPrecision::Fp32))),
                model(30, pb::model_spec::Config::Tft(tft(pb::TftPrecision::Int8))),
            ],
            assets: vec![synthetic_asset(2000, 1)],
            ..Default::default()
        })
        .await
        .expect("the job is accepted")
        .into_inner();
    let job = started.job.expect("job").job_id as i64;
    let store = Store::open_read_only(state.path()).expect("store");
    let tasks = finished_tasks(&store, job, 300).await;
    assert_eq!(tasks.len(), 7);
    for t in &tasks {
        assert_eq!(t.state, TaskState::Completed, "{t:?}");
    }
    let mamba: Vec<_> = tasks.iter().filter(|t| t.plugin == "mamba2").collect();
    assert_eq!(mamba.len(), 2);
    let typed_config: serde_json::Value =
        serde_json::from_str(&mamba[0].config_json).expect("stored config is JSON");
    assert_eq!(typed_config["lookback"], 48);
    assert_eq!(
        typed_config["quantiles"],
        serde_json::json!([0.1, 0.5, 0.9])
    );
    // Every Mamba-2 task was evaluated: its validation metrics are stored.
    for t in &mamba {
        let metrics = store.latest_metrics(t.id).expect("metrics");
        assert!(
            metrics
                .iter()
                .any(|(name, v)| name == "valid_mse" && v.is_finite()),
            "{metrics:?}"
        );
    }
    let typed_metrics = store.latest_metrics(mamba[0].id).expect("metrics");
    assert!(
        typed_metrics
            .iter()
            .any(|(name, _)| name == "valid_coverage_p10_p90"),
        "{typed_metrics:?}"
    );

    // Both TFT tasks ran in the precision asked for and report q-risk.
    let tft: Vec<_> = tasks.iter().filter(|t| t.plugin == "tft").collect();
    assert_eq!(tft.len(), 2);
    for (t, precision) in tft.iter().zip(["fp32", "int8"]) {
        let config: serde_json::Value =
            serde_json::from_str(&t.config_json).expect("stored config is JSON");
        assert_eq!(config["precision"], precision);
        let metrics = store.latest_metrics(t.id).expect("metrics");
        assert!(
            metrics
                .iter()
                .any(|(name, v)| name == "valid_qrisk_p50" && v.is_finite()),
            "{metrics:?}"
        );
    }
}
