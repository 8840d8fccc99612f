//! Plugin API 1.1 (and 1.2 refusals) end to end, over gRPC against real plugin libraries:
//! * a plugin binary built against the frozen 1.0.0 API
//!   (`tests/fixtures/api-1-0`) loads into this host and trains, checkpoints
//!   and completes through the API, and is train only (no predictors);
//! * a 1.2 plugin (the real template) is refused by the 1.0 and 1.1 rules
//!   with its one-line reason;
//! * a pooled template job over three synthetic assets that share a planted
//!   AR(1) signal at different scales reports overall and per-asset metrics,
//!   and a stop + resume through the API ends with the same weights as an
//!   uninterrupted run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tli_host::orchestrator::store::Store;
use tli_host::registry::{load_plugin_as, PluginRegistry};
use tli_proto::v1 as pb;
use tli_proto::v1::training_service_client::TrainingServiceClient;
use tli_testkit::{library, plugin_model, profile_dir, ApiServer, PluginDir, TEMPLATE};

/// The 1.0 fixture plugin, built from its own workspace if it is not yet.
fn legacy_plugin() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = profile_dir().join("../api-1-0");
    let built = target.join("release/libtli_fixture_api_1_0.so");
    if !built.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--release", "--manifest-path"])
            .arg(root.join("tests/fixtures/api-1-0/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .status()
            .expect("run cargo for the 1.0 fixture");
        assert!(status.success(), "building tests/fixtures/api-1-0 failed");
    }
    built
}

async fn serve(
    state: &Path,
    plugins: &Path,
) -> (ApiServer, TrainingServiceClient<tonic::transport::Channel>) {
    let server = ApiServer::start_on_cpu(state, plugins).await;
    let client = TrainingServiceClient::connect(server.endpoint())
        .await
        .expect("connect");
    (server, client)
}

fn synthetic(rows: u64, seed: u64, sigma: f64) -> pb::AssetSpec {
    pb::AssetSpec {
        source: Some(pb::asset_spec::Source::Synthetic(pb::SyntheticAsset {
            rows,
            seed,
            sigma,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// Polls the job through the API until every task is in a state `done` accepts.
async fn wait_for(
    client: &mut TrainingServiceClient<tonic::transport::Channel>,
    job: u64,
    done: impl Fn(&pb::TaskProgress) -> bool,
) -> pb::JobProgress {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let status = client
            .get_training_status(pb::GetTrainingStatusRequest { job_id: job })
            .await
            .expect("status")
            .into_inner()
            .job
            .and_then(|j| j.progress)
            .expect("job progress");
        if !status.tasks.is_empty() && status.tasks.iter().all(&done) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} did not get there: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn is(state: pb::TaskState) -> impl Fn(&pb::TaskProgress) -> bool {
    move |t| t.state == state as i32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_api_1_0_trains_through_the_api() {
    let plugins = PluginDir::new();
    std::fs::copy(
        legacy_plugin(),
        plugins.path().join("libtli_plugin_legacy.so"),
    )
    .unwrap();
    let registry = PluginRegistry::scan(plugins.path()).unwrap();
    assert!(registry.refused.is_empty(), "{:?}", registry.refused);
    let legacy = registry.get("legacy_linear").expect("the 1.0 plugin loads");
    assert_eq!(legacy.manifest.api_version, "1.0.0");
    assert!(legacy.manifest.capabilities.is_empty());
    // A 1.0 plugin is train only: one line says so.
    assert!(!legacy.can_predict());
    let reason = legacy.train_only_reason().unwrap();
    assert_eq!(
        reason,
        "plugin legacy_linear@1.0.0 speaks plugin API 1.0.0, which has no predictors (1.2 and \
         later): it is train only"
    );

    let state = tempfile::tempdir().unwrap();
    let (_server, mut client) = serve(state.path(), plugins.path()).await;
    let job = client
        .start_training(pb::StartTrainingRequest {
            name: "legacy".into(),
            model: Some(plugin_model(
                "legacy_linear",
                3000,
                r#"{"learning_rate":0.005}"#,
            )),
            assets: vec![synthetic(2000, 3, 0.0)],
            checkpoint: Some(pb::CheckpointPolicy {
                every_steps: 1000,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("a job of the 1.0 plugin is accepted")
        .into_inner()
        .job
        .unwrap()
        .job_id;
    let done = wait_for(&mut client, job, is(pb::TaskState::Completed)).await;
    let task = &done.tasks[0];
    assert_eq!(task.steps_done, 3000);
    let store = Store::open_read_only(state.path()).unwrap();
    assert!(!store.checkpoints(task.task_id as i64).unwrap().is_empty());
    // It learned the planted AR(1) signal: validation MSE below the zero forecast's (≈1).
    let mse = task
        .metrics
        .iter()
        .find(|m| m.name == "valid_mse")
        .unwrap_or_else(|| panic!("no valid_mse in {:?}", task.metrics))
        .value;
    assert!(mse < 0.97, "valid_mse {mse}");

    // A pooled job needs the 1.1 capability: refused at submission, with the reason.
    let refused = client
        .start_training(pb::StartTrainingRequest {
            name: "legacy-pooled".into(),
            model: Some(pb::ModelSpec {
                keep_best: None,
                early_stopping: None,
                pooled: true,
                ..plugin_model("legacy_linear", 10, "")
            }),
            assets: vec![synthetic(600, 1, 0.0), synthetic(600, 2, 0.0)],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        refused.message().contains("cannot train pooled tasks"),
        "{}",
        refused.message()
    );
}

#[test]
fn a_current_plugin_is_refused_by_older_hosts_rules_with_its_reason() {
    let current = &tli_plugin_api::PLUGIN_API_VERSION[..3];
    for host in ["1.0.0", "1.1.0", "1.2.0"] {
        let reason = match load_plugin_as(&library(TEMPLATE), host) {
            Ok(_) => panic!("a {host} host must refuse the {current} template"),
            Err(reason) => reason,
        };
        assert!(
            matches!(
                reason,
                tli_host::registry::LoadError::Incompatible(
                    tli_plugin_api::version::Incompatibility::NewerMinor { .. }
                )
            ),
            "{reason:?}"
        );
        let reason = reason.to_string();
        let minor = &host[..3];
        assert!(
            reason.starts_with(&format!(
                "built against plugin API {current}, this host speaks {minor};"
            )),
            "{reason}"
        );
        assert_eq!(reason.lines().count(), 1);
    }
    // The same file loads under the current rule, with its capabilities.
    let plugin = load_plugin_as(&library(TEMPLATE), tli_plugin_api::PLUGIN_API_VERSION).unwrap();
    assert!(plugin
        .manifest
        .has_capability(tli_plugin_api::capability::POOLED));
    assert!(plugin.can_predict());
    assert_eq!(plugin.train_only_reason(), None);
}

fn pooled_request(steps: u64) -> pb::StartTrainingRequest {
    pb::StartTrainingRequest {
        name: "pooled".into(),
        model: Some(pb::ModelSpec {
            keep_best: None,
            early_stopping: None,
            pooled: true,
            ..plugin_model(
                "template",
                steps,
                r#"{"hidden_sizes":[16],"batch_size":64}"#,
            )
        }),
        // One planted AR(1) signal (φ = 0.3), three assets at three scales.
        assets: vec![
            synthetic(3000, 11, 0.002),
            synthetic(3000, 12, 0.01),
            synthetic(3000, 13, 0.05),
        ],
        seed: 9,
        checkpoint: Some(pb::CheckpointPolicy {
            every_steps: 100,
            keep: 2,
            ..Default::default()
        }),
        slice_steps: 10,
        ..Default::default()
    }
}

fn final_checksum(state: &Path, task: u64) -> String {
    let store = Store::open_read_only(state).unwrap();
    let ckpts = store.checkpoints(task as i64).unwrap();
    tli_host::orchestrator::checkpoint::verify(Path::new(&ckpts[0].path)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_job_reports_per_asset_metrics_and_resumes_exactly() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let steps = 600;

    // Uninterrupted.
    let straight = tempfile::tempdir().unwrap();
    let (server, mut client) = serve(straight.path(), plugins.path()).await;
    let job = client
        .start_training(pooled_request(steps))
        .await
        .expect("pooled job accepted")
        .into_inner()
        .job
        .unwrap();
    let tasks = &job.progress.as_ref().expect("progress").tasks;
    assert_eq!(tasks.len(), 1, "one pooled task for three assets");
    assert!(tasks[0].asset.starts_with("pooled["), "{}", tasks[0].asset);
    let done = wait_for(&mut client, job.job_id, is(pb::TaskState::Completed)).await;
    drop(server);
    let metrics = &done.tasks[0].metrics;
    let value = |name: &str| {
        metrics
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no {name} in {metrics:?}"))
            .value
    };
    // Overall and per asset; every asset has the planted signal (best skill ≈ 0.09).
    assert!(
        value("valid_skill") > 0.02,
        "overall skill {}",
        value("valid_skill")
    );
    let per_asset: Vec<&pb::Metric> = metrics
        .iter()
        .filter(|m| m.name.starts_with("valid_skill@"))
        .collect();
    assert_eq!(per_asset.len(), 3, "{metrics:?}");
    for m in per_asset {
        assert!(m.value > 0.0, "{} = {}", m.name, m.value);
    }
    let expected = final_checksum(straight.path(), done.tasks[0].task_id);

    // Stopped part-way and resumed, all through the API.
    let state = tempfile::tempdir().unwrap();
    let (_server, mut client) = serve(state.path(), plugins.path()).await;
    let job = client
        .start_training(pooled_request(steps))
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap()
        .job_id;
    wait_for(&mut client, job, |t| t.steps_done >= 150).await;
    client
        .stop_training(pb::StopTrainingRequest {
            job_id: job,
            ..Default::default()
        })
        .await
        .expect("stop");
    let stopped = wait_for(&mut client, job, is(pb::TaskState::Cancelled)).await;
    let at = stopped.tasks[0].steps_done;
    assert!(at > 0 && at < steps, "stopped at {at}");
    let resumed = client
        .resume_training(pb::ResumeTrainingRequest {
            job_id: job,
            more_steps: 0,
            accept_changed_inputs: false,
        })
        .await
        .expect("resume")
        .into_inner();
    assert_eq!(resumed.resumed_tasks, 1);
    let done = wait_for(&mut client, job, is(pb::TaskState::Completed)).await;
    assert_eq!(
        final_checksum(state.path(), done.tasks[0].task_id),
        expected,
        "final weights after stop + resume differ from the uninterrupted run"
    );
}
