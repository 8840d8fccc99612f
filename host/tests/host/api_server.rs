//! The gRPC control API in-process: a real orchestrator on a temporary state
//! directory (with the behaviour fixture plugin), its scheduling loop on a
//! thread, the tonic services from `tli_host::api` on 127.0.0.1:0, and real
//! tonic clients over loopback.
//!
//! Needs `target/release/libtli_fixture_behaviour.so` (cargo build --release --workspace).

use std::sync::Arc;
use std::time::{Duration, Instant};
use tli_host::api::{ServerConfig, TlsPem};
use tli_host::orchestrator::arbiter::Strategy;
use tli_host::orchestrator::engine::Orchestrator;
use tli_host::orchestrator::store::Store;
use tli_proto::v1 as pb;
use tli_proto::v1::plugin_service_client::PluginServiceClient;
use tli_proto::v1::resource_service_client::ResourceServiceClient;
use tli_proto::v1::training_service_client::TrainingServiceClient;
use tli_proto::v1::watch_training_response::Event;
use tli_testkit::{
    orchestrator_config, plugin_model, synthetic_asset, ApiServer, PluginDir, BEHAVIOUR,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic::Code;

fn plugin_dir() -> PluginDir {
    PluginDir::with(&[(BEHAVIOUR, "behaviour")])
}

/// A host serving the API on 127.0.0.1:0.
struct Host {
    server: ApiServer,
    _state: tempfile::TempDir,
    _plugins: PluginDir,
}

impl Host {
    async fn start(token: Option<&str>) -> Host {
        Self::start_with(ServerConfig {
            token: token.map(str::to_string),
            tls: None,
            worker_token: None,
            ..Default::default()
        })
        .await
    }

    async fn start_with(config: ServerConfig) -> Host {
        let state = tempfile::tempdir().expect("temporary directory");
        let plugins = plugin_dir();
        let orchestrator = Arc::new(
            Orchestrator::open(orchestrator_config(
                state.path(),
                plugins.path(),
                Strategy::Auto,
                1 << 30,
            ))
            .expect("orchestrator opens"),
        );
        Host {
            server: ApiServer::start(orchestrator, Duration::from_millis(5), &config).await,
            _state: state,
            _plugins: plugins,
        }
    }

    async fn channel(&self) -> Channel {
        Channel::from_shared(self.server.endpoint())
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    async fn training(&self) -> TrainingServiceClient<Channel> {
        TrainingServiceClient::new(self.channel().await)
    }

    fn job_ids(&self) -> Vec<i64> {
        Store::open_read_only(self.server.orchestrator.state_dir())
            .expect("store")
            .jobs()
            .expect("jobs")
            .iter()
            .map(|j| j.id)
            .collect()
    }

    /// Raises the shutdown flag and waits for the scheduling loop (running
    /// tasks checkpoint and become interrupted).
    fn stop_scheduler(&mut self) {
        self.server.stop();
    }
}

fn behaviour(steps: u64, config_json: &str) -> pb::ModelSpec {
    plugin_model("behaviour", steps, config_json)
}

fn synthetic() -> pb::AssetSpec {
    synthetic_asset(600, 3)
}

fn start_request(name: &str, model: pb::ModelSpec) -> pb::StartTrainingRequest {
    pb::StartTrainingRequest {
        name: name.into(),
        model: Some(model),
        assets: vec![synthetic()],
        seed: 7,
        checkpoint: Some(pb::CheckpointPolicy {
            every_steps: 50,
            every_seconds: 0.0,
            keep: 2,
        }),
        slice_steps: 10,
        ..Default::default()
    }
}

async fn start(
    client: &mut TrainingServiceClient<Channel>,
    req: pb::StartTrainingRequest,
) -> pb::Job {
    client
        .start_training(req)
        .await
        .expect("start")
        .into_inner()
        .job
        .expect("job")
}

async fn status(client: &mut TrainingServiceClient<Channel>, job: u64) -> pb::Job {
    client
        .get_training_status(pb::GetTrainingStatusRequest { job_id: job })
        .await
        .expect("status")
        .into_inner()
        .job
        .expect("job")
}

fn tasks(job: &pb::Job) -> &[pb::TaskProgress] {
    job.progress
        .as_ref()
        .map(|p| p.tasks.as_slice())
        .unwrap_or(&[])
}

fn state_of(job: &pb::Job) -> pb::TaskState {
    pb::TaskState::try_from(tasks(job)[0].state).expect("a task state")
}

/// Polls the job until `done` holds for its first task, or panics after `limit`.
async fn wait_for(
    client: &mut TrainingServiceClient<Channel>,
    job: u64,
    limit: Duration,
    what: &str,
    done: impl Fn(&pb::TaskProgress) -> bool,
) -> pb::Job {
    let until = Instant::now() + limit;
    loop {
        let j = status(client, job).await;
        if done(&tasks(&j)[0]) {
            return j;
        }
        assert!(
            Instant::now() < until,
            "timed out waiting for {what}: {j:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads a watch stream to its end: the events, and the status it ended with.
async fn watch(
    client: &mut TrainingServiceClient<Channel>,
    job: u64,
    limit: Duration,
) -> (Vec<Event>, Option<tonic::Status>) {
    let mut stream = client
        .watch_training(pb::WatchTrainingRequest {
            job_id: job,
            interval_ms: 50,
        })
        .await
        .expect("watch")
        .into_inner();
    let mut events = Vec::new();
    let end = tokio::time::timeout(limit, async {
        loop {
            match stream.message().await {
                Ok(Some(m)) => events.push(m.event.expect("an event")),
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    })
    .await
    .expect("the watch stream ends in time");
    (events, end)
}

fn expect_status<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    code: Code,
    message_start: &str,
) {
    let status = result.expect_err("the request is refused");
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        status.message().starts_with(message_start),
        "{:?} does not start with {message_start:?}",
        status.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_watch_status_and_list_in_pages() {
    let host = Host::start(None).await;
    let mut client = host.training().await;

    let job = start(&mut client, start_request("first", behaviour(40, ""))).await;
    assert_eq!(job.name, "first");
    assert!(job.job_id > 0 && job.created_unix_ms > 0);
    assert_eq!(tasks(&job).len(), 1);
    assert_eq!(tasks(&job)[0].plugin, "behaviour");
    assert_eq!(tasks(&job)[0].total_steps, 40);

    let (events, end) = watch(&mut client, job.job_id, Duration::from_secs(30)).await;
    assert!(end.is_none(), "the stream ends cleanly: {end:?}");
    assert!(events.iter().any(|e| matches!(e, Event::Progress(_))));
    let changes: Vec<&pb::TaskStateChanged> = events
        .iter()
        .filter_map(|e| match e {
            Event::StateChanged(c) => Some(c),
            _ => None,
        })
        .collect();
    assert!(
        changes.iter().any(
            |c| c.to == pb::TaskState::Running as i32 && c.from == pb::TaskState::Queued as i32
        ),
        "{changes:?}"
    );
    assert!(changes
        .iter()
        .any(|c| c.to == pb::TaskState::Completed as i32 && c.job_id == job.job_id));
    let Some(Event::Finished(finished)) = events.last() else {
        panic!("the last event is `finished`: {:?}", events.last());
    };
    assert_eq!(state_of(finished), pb::TaskState::Completed);
    assert_eq!(
        finished.progress.as_ref().map(|p| p.weighted_fraction),
        Some(1.0)
    );

    let now = status(&mut client, job.job_id).await;
    assert_eq!(state_of(&now), pb::TaskState::Completed);
    assert_eq!(tasks(&now)[0].steps_done, 40);

    // Two more jobs, then list the completed behaviour jobs two at a time, newest first.
    let mut ids = vec![job.job_id];
    for name in ["second", "third"] {
        let j = start(&mut client, start_request(name, behaviour(20, ""))).await;
        wait_for(
            &mut client,
            j.job_id,
            Duration::from_secs(30),
            "completion",
            |t| t.state == pb::TaskState::Completed as i32,
        )
        .await;
        ids.push(j.job_id);
    }
    let request = pb::ListTrainingJobsRequest {
        states: vec![pb::TaskState::Completed as i32],
        plugin: "behaviour".into(),
        page_size: 2,
        ..Default::default()
    };
    let first = client
        .list_training_jobs(request.clone())
        .await
        .expect("list")
        .into_inner();
    let first_ids: Vec<u64> = first.jobs.iter().map(|j| j.job_id).collect();
    assert_eq!(first_ids, vec![ids[2], ids[1]]);
    assert!(!first.next_page_token.is_empty());
    let second = client
        .list_training_jobs(pb::ListTrainingJobsRequest {
            page_token: first.next_page_token.clone(),
            ..request.clone()
        })
        .await
        .expect("second page")
        .into_inner();
    let second_ids: Vec<u64> = second.jobs.iter().map(|j| j.job_id).collect();
    assert_eq!(second_ids, vec![ids[0]]);
    assert!(second.next_page_token.is_empty());

    // Name order, and filters that match nothing.
    let by_name = client
        .list_training_jobs(pb::ListTrainingJobsRequest {
            order: pb::JobOrder::Name as i32,
            ..Default::default()
        })
        .await
        .expect("by name")
        .into_inner();
    let names: Vec<&str> = by_name.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["first", "second", "third"]);
    for req in [
        pb::ListTrainingJobsRequest {
            states: vec![pb::TaskState::Running as i32],
            ..Default::default()
        },
        pb::ListTrainingJobsRequest {
            asset: "nowhere.csv".into(),
            ..Default::default()
        },
        pb::ListTrainingJobsRequest {
            created_before_unix_ms: 1,
            ..Default::default()
        },
    ] {
        let r = client
            .list_training_jobs(req)
            .await
            .expect("list")
            .into_inner();
        assert!(r.jobs.is_empty() && r.next_page_token.is_empty());
    }
    // A token used with other filters is refused.
    expect_status(
        client
            .list_training_jobs(pb::ListTrainingJobsRequest {
                page_token: first.next_page_token,
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "page_token: ",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_resume_a_slow_task() {
    let host = Host::start(None).await;
    let mut client = host.training().await;
    let job = start(
        &mut client,
        start_request("slow", behaviour(300, r#"{"sleep_ms_per_step": 5}"#)),
    )
    .await;
    let id = job.job_id;
    let task = tasks(&job)[0].task_id;
    wait_for(&mut client, id, Duration::from_secs(30), "steps", |t| {
        t.steps_done >= 20
    })
    .await;

    // A task of another job, and a task id that does not exist.
    expect_status(
        client
            .stop_training(pb::StopTrainingRequest {
                job_id: id,
                task_id: task + 100,
                ..Default::default()
            })
            .await,
        Code::NotFound,
        &format!("task {} not found in job {id}", task + 100),
    );

    // Graceful: the slice ends, a checkpoint is written, the task is cancelled.
    client
        .stop_training(pb::StopTrainingRequest {
            job_id: id,
            task_id: task,
            ..Default::default()
        })
        .await
        .expect("stop");
    let stopped = wait_for(&mut client, id, Duration::from_secs(30), "cancelled", |t| {
        t.state == pb::TaskState::Cancelled as i32
    })
    .await;
    let steps_at_stop = tasks(&stopped)[0].steps_done;
    assert!(steps_at_stop < 300, "{stopped:?}");
    expect_status(
        client
            .stop_training(pb::StopTrainingRequest {
                job_id: id,
                ..Default::default()
            })
            .await,
        Code::FailedPrecondition,
        &format!("job {id} has no queued or running task to stop"),
    );

    let resumed = client
        .resume_training(pb::ResumeTrainingRequest {
            job_id: id,
            more_steps: 0,
            accept_changed_inputs: false,
        })
        .await
        .expect("resume")
        .into_inner();
    assert_eq!(resumed.resumed_tasks, 1);

    // Forced, with a deadline: cancelled without waiting for the slice.
    wait_for(
        &mut client,
        id,
        Duration::from_secs(30),
        "running again",
        |t| t.state == pb::TaskState::Running as i32 && t.steps_done > steps_at_stop,
    )
    .await;
    client
        .stop_training(pb::StopTrainingRequest {
            job_id: id,
            task_id: 0,
            force: true,
            deadline_ms: 2000,
        })
        .await
        .expect("forced stop");
    wait_for(&mut client, id, Duration::from_secs(10), "cancelled", |t| {
        t.state == pb::TaskState::Cancelled as i32
    })
    .await;

    let resumed = client
        .resume_training(pb::ResumeTrainingRequest {
            job_id: id,
            more_steps: 0,
            accept_changed_inputs: false,
        })
        .await
        .expect("resume")
        .into_inner();
    assert_eq!(resumed.resumed_tasks, 1);
    let (events, end) = watch(&mut client, id, Duration::from_secs(60)).await;
    assert!(end.is_none(), "{end:?}");
    let Some(Event::Finished(done)) = events.last() else {
        panic!("the last event is `finished`");
    };
    assert_eq!(state_of(done), pb::TaskState::Completed);
    assert_eq!(tasks(done)[0].steps_done, 300);
    // Nothing left to resume.
    let again = client
        .resume_training(pb::ResumeTrainingRequest {
            job_id: id,
            more_steps: 0,
            accept_changed_inputs: false,
        })
        .await
        .expect("resume")
        .into_inner();
    assert_eq!(again.resumed_tasks, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_and_change_nothing() {
    let host = Host::start(None).await;
    let mut client = host.training().await;
    let existing = start(&mut client, start_request("kept", behaviour(10, ""))).await;
    let before = host.job_ids();

    expect_status(
        client
            .start_training(start_request("zero", behaviour(0, "")))
            .await,
        Code::InvalidArgument,
        "models[0].steps: 0 is outside 1..=1000000000",
    );
    let mut both = start_request("both", behaviour(10, ""));
    both.models = vec![behaviour(10, "")];
    expect_status(
        client.start_training(both).await,
        Code::InvalidArgument,
        "model and models: give exactly one",
    );
    let mut unknown = start_request("unknown", behaviour(10, ""));
    if let Some(m) = unknown.model.as_mut() {
        m.config = Some(pb::model_spec::Config::Plugin(pb::PluginConfig {
            plugin: "no-such-plugin".into(),
            config_json: String::new(),
        }));
    }
    expect_status(
        client.start_training(unknown).await,
        Code::InvalidArgument,
        "models[0] (no-such-plugin): no such plugin",
    );
    expect_status(
        client
            .start_training(start_request(
                "bad config",
                behaviour(10, "{\"colour\": 1}"),
            ))
            .await,
        Code::InvalidArgument,
        "models[0] (behaviour): ",
    );
    let mut bad_asset = start_request("bad asset", behaviour(10, ""));
    bad_asset.assets = vec![pb::AssetSpec {
        source: Some(pb::asset_spec::Source::DataPath(
            "/nonexistent/bars.csv".into(),
        )),
        ..Default::default()
    }];
    expect_status(
        client.start_training(bad_asset).await,
        Code::InvalidArgument,
        "assets[0] (/nonexistent/bars.csv): ",
    );
    let mut bad_features = start_request("bad features", behaviour(10, ""));
    bad_features.features_json = "{not json".into();
    expect_status(
        client.start_training(bad_features).await,
        Code::InvalidArgument,
        "features_json: ",
    );

    expect_status(
        client
            .list_training_jobs(pb::ListTrainingJobsRequest {
                page_size: 5000,
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "page_size: 5000 is outside 1..=1000",
    );
    expect_status(
        client
            .list_training_jobs(pb::ListTrainingJobsRequest {
                page_token: "o50:deadbeef".into(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "page_token: not a token from this server",
    );

    expect_status(
        client
            .get_training_status(pb::GetTrainingStatusRequest { job_id: 999 })
            .await,
        Code::NotFound,
        "job 999 not found",
    );
    expect_status(
        client
            .watch_training(pb::WatchTrainingRequest {
                job_id: 999,
                interval_ms: 0,
            })
            .await,
        Code::NotFound,
        "job 999 not found",
    );
    expect_status(
        client
            .stop_training(pb::StopTrainingRequest {
                job_id: 999,
                ..Default::default()
            })
            .await,
        Code::NotFound,
        "job 999 not found",
    );
    expect_status(
        client
            .resume_training(pb::ResumeTrainingRequest {
                job_id: 999,
                more_steps: 0,
                accept_changed_inputs: false,
            })
            .await,
        Code::NotFound,
        "job 999 not found",
    );
    expect_status(
        client
            .get_training_status(pb::GetTrainingStatusRequest { job_id: 0 })
            .await,
        Code::InvalidArgument,
        "job_id: ",
    );

    assert_eq!(
        host.job_ids(),
        before,
        "rejected requests changed the store"
    );
    assert_eq!(before, vec![existing.job_id as i64]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_except_for_health() {
    let host = Host::start(Some("test-token-0123456789")).await;
    let channel = host.channel().await;

    let mut anonymous = TrainingServiceClient::new(channel.clone());
    expect_status(
        anonymous
            .list_training_jobs(pb::ListTrainingJobsRequest::default())
            .await,
        Code::Unauthenticated,
        "missing authorization",
    );
    let mut wrong =
        TrainingServiceClient::with_interceptor(channel.clone(), |mut r: tonic::Request<()>| {
            r.metadata_mut().insert(
                "authorization",
                "Bearer not-the-token".parse().expect("header"),
            );
            Ok(r)
        });
    expect_status(
        wrong
            .list_training_jobs(pb::ListTrainingJobsRequest::default())
            .await,
        Code::Unauthenticated,
        "authorization: the token is not accepted",
    );

    let with_token = |mut r: tonic::Request<()>| {
        r.metadata_mut().insert(
            "authorization",
            "Bearer test-token-0123456789".parse().expect("header"),
        );
        Ok(r)
    };
    let mut training = TrainingServiceClient::with_interceptor(channel.clone(), with_token);
    let listed = training
        .list_training_jobs(pb::ListTrainingJobsRequest::default())
        .await
        .expect("list with the token")
        .into_inner();
    assert!(listed.jobs.is_empty());

    let plugins = PluginServiceClient::with_interceptor(channel.clone(), with_token)
        .list_plugins(pb::ListPluginsRequest {})
        .await
        .expect("plugins")
        .into_inner();
    assert_eq!(plugins.plugins.len(), 1);
    assert_eq!(plugins.plugins[0].name, "behaviour");
    assert_eq!(plugins.host_plugin_api, tli_plugin_api::PLUGIN_API_VERSION);
    assert_eq!(plugins.plugins[0].default_config_json, "{}");

    let resources = ResourceServiceClient::with_interceptor(channel.clone(), with_token)
        .get_resources(pb::GetResourcesRequest {})
        .await
        .expect("resources")
        .into_inner();
    assert_eq!(resources.devices.len(), 1);
    let cpu = &resources.devices[0];
    assert_eq!(cpu.name, "cpu");
    assert_eq!(cpu.budget_bytes, 1 << 30);
    assert_eq!(cpu.strategy, "auto");
    assert_eq!(cpu.total_bytes, None);
    expect_status(
        ResourceServiceClient::new(channel.clone())
            .get_resources(pb::GetResourcesRequest {})
            .await,
        Code::Unauthenticated,
        "missing authorization",
    );

    // Health needs no token.
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: "tli.v1.TrainingService".into(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(
        health.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_watch_streams_and_interrupts_tasks() {
    let mut host = Host::start(None).await;
    let mut client = host.training().await;
    let job = start(
        &mut client,
        start_request("long", behaviour(100_000, r#"{"sleep_ms_per_step": 5}"#)),
    )
    .await;
    wait_for(
        &mut client,
        job.job_id,
        Duration::from_secs(30),
        "running",
        |t| t.steps_done > 0,
    )
    .await;
    let mut watcher = host.training().await;
    let id = job.job_id;
    let watching =
        tokio::spawn(async move { watch(&mut watcher, id, Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let stopping = Instant::now();
    tokio::task::block_in_place(|| host.stop_scheduler());
    let orchestrator = host.server.orchestrator.clone();
    let (events, end) = watching.await.expect("watch task");
    assert!(stopping.elapsed() < Duration::from_secs(10));
    assert!(events.iter().any(|e| matches!(e, Event::Progress(_))));
    let end = end.expect("the stream ends with a status");
    assert_eq!(end.code(), Code::Unavailable, "{end:?}");

    let store = Store::open_read_only(orchestrator.state_dir()).expect("store");
    let task = store.tasks_of(id as i64).expect("tasks").remove(0);
    assert_eq!(
        task.state,
        tli_host::orchestrator::state::TaskState::Interrupted,
        "{task:?}"
    );
    assert!(!store.checkpoints(task.id).expect("checkpoints").is_empty());
}

/// A test CA and a server certificate it signed for `localhost` and
/// 127.0.0.1 (P-256, valid 2020–2120; made with `openssl ca`).
const TEST_CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBYTCCAQagAwIBAgICEAAwCgYIKoZIzj0EAwIwFjEUMBIGA1UEAwwLdGxpIHRl
c3QgQ0EwIBcNMjAwMTAxMDAwMDAwWhgPMjEyMDAxMDEwMDAwMDBaMBYxFDASBgNV
BAMMC3RsaSB0ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEeI1v2Z0l
ltumx6pJQd4De/UDl6w1VBKQjrclkq03H6XrtJ/Y/vkeqUHLx0Q1uYeMXzoqYzGv
jleZgjxFusjWaaNCMEAwDwYDVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAgQw
HQYDVR0OBBYEFOAiHOmHATtP4xOe3vhwA0PPfizvMAoGCCqGSM49BAMCA0kAMEYC
IQDsPbIS8Ipw9Hsk1MV85ybfC5kesgrs1ktSpOENtsjAjQIhANiHNAt3UiAuaHRP
MmniEIo/8aNgmTMQgek70hZyv5QV
-----END CERTIFICATE-----
";
const TEST_SERVER_CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBrjCCAVWgAwIBAgICEAEwCgYIKoZIzj0EAwIwFjEUMBIGA1UEAwwLdGxpIHRl
c3QgQ0EwIBcNMjAwMTAxMDAwMDAwWhgPMjEyMDAxMDEwMDAwMDBaMBQxEjAQBgNV
BAMMCWxvY2FsaG9zdDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABGeDR9+3RkU6
pxK22yA6f6eUk4eAJCNVyaW6DwVTF3CEH3gSI61nSTTSBSlKgrln5YKyOriGDGg1
2UdXICPOctejgZIwgY8wGgYDVR0RBBMwEYIJbG9jYWxob3N0hwR/AAABMAwGA1Ud
EwEB/wQCMAAwEwYDVR0lBAwwCgYIKwYBBQUHAwEwDgYDVR0PAQH/BAQDAgeAMB8G
A1UdIwQYMBaAFOAiHOmHATtP4xOe3vhwA0PPfizvMB0GA1UdDgQWBBQ+9c42XZ2p
XnjQSmFOXbrphb9MajAKBggqhkjOPQQDAgNHADBEAiAZpRUM1cF1oG3LUjHc83XM
dS4j3IxL/4pmpGFpq24l2AIgCeysUmxNi5Udw7jhtWYLU4ZQmoRHedRZa9ezZaxY
4Ks=
-----END CERTIFICATE-----
";
const TEST_SERVER_KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg1g0QTu5tvhPi4CwA
7lSv2rr/YYIo+kqLHtgrMBJBRaWhRANCAARng0fft0ZFOqcSttsgOn+nlJOHgCQj
Vcmlug8FUxdwhB94EiOtZ0k00gUpSoK5Z+WCsjq4hgxoNdlHVyAjznLX
-----END PRIVATE KEY-----
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_clients_that_trust_the_certificate() {
    let host = Host::start_with(ServerConfig {
        token: None,
        tls: Some(TlsPem {
            cert: TEST_SERVER_CERT_PEM.as_bytes().to_vec(),
            key: TEST_SERVER_KEY_PEM.as_bytes().to_vec(),
        }),
        worker_token: None,
        ..Default::default()
    })
    .await;
    let channel = Channel::from_shared(format!("https://localhost:{}", host.server.addr.port()))
        .expect("uri")
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(TEST_CA_PEM))
                .domain_name("localhost"),
        )
        .expect("client TLS")
        .connect()
        .await
        .expect("TLS connect");
    let listed = TrainingServiceClient::new(channel)
        .list_training_jobs(pb::ListTrainingJobsRequest::default())
        .await
        .expect("list over TLS")
        .into_inner();
    assert!(listed.jobs.is_empty());

    // A plaintext client gets no answer.
    let mut plain = TrainingServiceClient::new(
        Channel::from_shared(host.server.endpoint())
            .expect("uri")
            .connect_lazy(),
    );
    let refused = plain
        .list_training_jobs(pb::ListTrainingJobsRequest::default())
        .await;
    assert!(refused.is_err(), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_v1_and_v1alpha_list_the_services() {
    use tonic_reflection::pb::{v1, v1alpha};
    let host = Host::start(None).await;
    let channel = host.channel().await;

    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let symbol = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1::server_reflection_request::MessageRequest::FileContainingSymbol(
                "tli.v1.TrainingService".into(),
            ),
        ),
    };
    let mut responses = v1::server_reflection_client::ServerReflectionClient::new(channel.clone())
        .server_reflection_info(tokio_stream::iter([request, symbol]))
        .await
        .expect("reflection v1")
        .into_inner();
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        responses
            .message()
            .await
            .expect("a response")
            .and_then(|r| r.message_response)
    else {
        panic!("expected a service list");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    for expected in [
        "grpc.health.v1.Health",
        "tli.v1.PluginService",
        "tli.v1.ResourceService",
        "tli.v1.TrainingService",
    ] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    let Some(v1::server_reflection_response::MessageResponse::FileDescriptorResponse(files)) =
        responses
            .message()
            .await
            .expect("a response")
            .and_then(|r| r.message_response)
    else {
        panic!("expected file descriptors");
    };
    assert!(!files.file_descriptor_proto.is_empty());

    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut responses = v1alpha::server_reflection_client::ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection v1alpha")
        .into_inner();
    let Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        responses
            .message()
            .await
            .expect("a response")
            .and_then(|r| r.message_response)
    else {
        panic!("expected a service list");
    };
    assert!(list
        .service
        .iter()
        .any(|s| s.name == "tli.v1.TrainingService"));
}
