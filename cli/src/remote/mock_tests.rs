//! The client commands against an in-process fake TrainingService: the token
//! travels, refusals become errors, paging follows tokens, and `watch` ends
//! with the right outcome. (The real server is tested end to end elsewhere.)

use super::{resources, train};
use crate::args::{Cli, Command};
use clap::Parser;
use std::sync::{Arc, Mutex};
use tli_proto::v1::training_service_server::{TrainingService, TrainingServiceServer};
use tli_proto::v1::{
    model_spec, watch_training_response::Event, GetTrainingStatusRequest,
    GetTrainingStatusResponse, Job, JobProgress, ListTrainingJobsRequest, ListTrainingJobsResponse,
    ResumeTrainingRequest, ResumeTrainingResponse, StartTrainingRequest, StartTrainingResponse,
    StopTrainingRequest, StopTrainingResponse, TaskProgress, TaskState, TaskStateChanged,
    WatchTrainingRequest, WatchTrainingResponse,
};
use tonic::{Request, Response, Status};

#[derive(Default)]
struct Seen {
    authorization: Vec<String>,
    starts: Vec<StartTrainingRequest>,
    list_tokens: Vec<String>,
    stops: Vec<StopTrainingRequest>,
}

#[derive(Clone, Default)]
struct Fake {
    seen: Arc<Mutex<Seen>>,
}

fn task(id: u64, state: TaskState, done: u64) -> TaskProgress {
    TaskProgress {
        task_id: id,
        plugin: "template".into(),
        asset: "synthetic-ar1:100:1".into(),
        state: state as i32,
        steps_done: done,
        total_steps: 10,
        ..Default::default()
    }
}

fn job(id: u64, tasks: Vec<TaskProgress>) -> Job {
    Job {
        job_id: id,
        name: format!("job-{id}"),
        created_unix_ms: 1_700_000_000_000,
        progress: Some(JobProgress {
            job_id: id,
            weighted_fraction: 0.5,
            tasks,
        }),
    }
}

impl Fake {
    fn check<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let auth = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        self.seen.lock().unwrap().authorization.push(auth.clone());
        if auth == "Bearer secret" {
            Ok(())
        } else {
            Err(Status::unauthenticated("missing or wrong bearer token"))
        }
    }
}

type EventStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<WatchTrainingResponse, Status>> + Send>,
>;

#[tonic::async_trait]
impl TrainingService for Fake {
    async fn start_training(
        &self,
        request: Request<StartTrainingRequest>,
    ) -> Result<Response<StartTrainingResponse>, Status> {
        self.check(&request)?;
        let r = request.into_inner();
        self.seen.lock().unwrap().starts.push(r.clone());
        let models: Vec<_> = r.model.iter().chain(&r.models).collect();
        if let Some(i) = models.iter().position(|m| m.steps == 0) {
            return Err(Status::invalid_argument(format!(
                "models[{i}].steps: 0 is outside 1..=1000000000"
            )));
        }
        let tasks = (0..models.len() * r.assets.len())
            .map(|i| task(i as u64 + 1, TaskState::Queued, 0))
            .collect();
        Ok(Response::new(StartTrainingResponse {
            job: Some(job(1, tasks)),
            warnings: Vec::new(),
        }))
    }

    type WatchTrainingStream = EventStream;

    async fn watch_training(
        &self,
        request: Request<WatchTrainingRequest>,
    ) -> Result<Response<EventStream>, Status> {
        self.check(&request)?;
        let id = request.into_inner().job_id;
        let event = |e: Event| Ok(WatchTrainingResponse { event: Some(e) });
        let changed = |task_id, from: TaskState, to: TaskState, reason: &str| {
            event(Event::StateChanged(TaskStateChanged {
                job_id: id,
                task_id,
                from: from as i32,
                to: to as i32,
                reason: reason.into(),
                at_unix_ms: 1,
            }))
        };
        // Job 1: one task completes, one fails. Job 2: both complete.
        // Job 3: the stream ends without `finished`.
        let second = if id == 1 {
            TaskState::Failed
        } else {
            TaskState::Completed
        };
        let mut events = vec![
            event(Event::Progress(JobProgress {
                job_id: id,
                weighted_fraction: 0.2,
                tasks: vec![
                    task(1, TaskState::Running, 2),
                    task(2, TaskState::Running, 1),
                ],
            })),
            changed(
                1,
                TaskState::Running,
                TaskState::Completed,
                "completed 10 steps",
            ),
            changed(2, TaskState::Running, second, "boom"),
        ];
        if id != 3 {
            let mut failed = task(2, second, 4);
            if id == 1 {
                failed.error = "boom".into();
            }
            events.push(event(Event::Finished(job(
                id,
                vec![task(1, TaskState::Completed, 10), failed],
            ))));
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(events))))
    }

    async fn get_training_status(
        &self,
        request: Request<GetTrainingStatusRequest>,
    ) -> Result<Response<GetTrainingStatusResponse>, Status> {
        self.check(&request)?;
        match request.into_inner().job_id {
            1 => Ok(Response::new(GetTrainingStatusResponse {
                job: Some(job(1, vec![task(1, TaskState::Running, 3)])),
            })),
            other => Err(Status::not_found(format!("no job {other}"))),
        }
    }

    async fn list_training_jobs(
        &self,
        request: Request<ListTrainingJobsRequest>,
    ) -> Result<Response<ListTrainingJobsResponse>, Status> {
        self.check(&request)?;
        let token = request.into_inner().page_token;
        self.seen.lock().unwrap().list_tokens.push(token.clone());
        let (id, next) = if token.is_empty() { (1, "p2") } else { (2, "") };
        Ok(Response::new(ListTrainingJobsResponse {
            jobs: vec![job(id, vec![task(1, TaskState::Completed, 10)])],
            next_page_token: next.into(),
        }))
    }

    async fn stop_training(
        &self,
        request: Request<StopTrainingRequest>,
    ) -> Result<Response<StopTrainingResponse>, Status> {
        self.check(&request)?;
        let r = request.into_inner();
        self.seen.lock().unwrap().stops.push(r);
        Ok(Response::new(StopTrainingResponse {
            job: Some(job(1, vec![task(1, TaskState::Cancelled, 3)])),
        }))
    }

    async fn resume_training(
        &self,
        request: Request<ResumeTrainingRequest>,
    ) -> Result<Response<ResumeTrainingResponse>, Status> {
        self.check(&request)?;
        Ok(Response::new(ResumeTrainingResponse {
            job: Some(job(1, vec![task(1, TaskState::Queued, 3)])),
            resumed_tasks: 1,
        }))
    }

    async fn get_training_history(
        &self,
        request: Request<tli_proto::v1::GetTrainingHistoryRequest>,
    ) -> Result<Response<tli_proto::v1::GetTrainingHistoryResponse>, Status> {
        self.check(&request)?;
        Err(Status::unimplemented("not faked"))
    }

    async fn get_sweep(
        &self,
        request: Request<tli_proto::v1::GetSweepRequest>,
    ) -> Result<Response<tli_proto::v1::GetSweepResponse>, Status> {
        self.check(&request)?;
        Err(Status::unimplemented("not faked"))
    }
}

/// Serves the fake on a free loopback port from its own thread and runtime.
fn serve(fake: Fake) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            tonic::transport::Server::builder()
                .add_service(TrainingServiceServer::new(fake))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
    });
    format!("http://{addr}")
}

fn run_cli(endpoint: &str, token: Option<&str>, args: &[&str]) -> anyhow::Result<()> {
    let mut argv = vec!["tli", "--endpoint", endpoint];
    if let Some(t) = token {
        argv.extend(["--token", t]);
    }
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(argv).unwrap();
    match &cli.command {
        Command::Train { command } => train(&cli, command),
        Command::Resources => resources(&cli),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_client_commands_against_a_fake_host() {
    let fake = Fake::default();
    let seen = fake.seen.clone();
    let url = serve(fake);
    let ok = |args: &[&str]| run_cli(&url, Some("secret"), args);
    let err = |args: &[&str]| format!("{:#}", run_cli(&url, Some("secret"), args).unwrap_err());

    // The token goes on every call; without it the refusal says how to fix it.
    let e = format!(
        "{:#}",
        run_cli(&url, None, &["train", "status", "1"]).unwrap_err()
    );
    assert_eq!(
        e,
        "unauthenticated: missing or wrong bearer token (set --token or TLI_TOKEN)"
    );
    ok(&["train", "status", "1"]).unwrap();
    ok(&["-o", "json", "train", "status", "1"]).unwrap();
    assert_eq!(err(&["train", "status", "9"]), "not found: no job 9");
    assert_eq!(
        seen.lock().unwrap().authorization[..2],
        ["".to_string(), "Bearer secret".to_string()]
    );

    // start: flags → request; a refusal is `<code>: <message>`.
    ok(&[
        "train",
        "start",
        "-p",
        "template",
        "-a",
        "synthetic:100",
        "--steps",
        "5",
    ])
    .unwrap();
    ok(&[
        "-o",
        "json",
        "train",
        "start",
        "-p",
        "a",
        "-p",
        "b",
        "-a",
        "synthetic:100",
    ])
    .unwrap();
    assert_eq!(
        err(&[
            "train",
            "start",
            "-p",
            "template",
            "-a",
            "synthetic:100",
            "--steps",
            "0"
        ]),
        "invalid argument: models[0].steps: 0 is outside 1..=1000000000"
    );
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.starts.len(), 3);
        let single = s.starts[0].model.as_ref().unwrap();
        assert_eq!(single.steps, 5);
        assert!(matches!(
            &single.config,
            Some(model_spec::Config::Plugin(p)) if p.plugin == "template"
        ));
        assert_eq!(s.starts[1].models.len(), 2);
    }

    // watch: exit status follows the tasks' outcome.
    let e = err(&["train", "watch", "1"]);
    assert_eq!(e, "job 1 did not complete: task 2 failed (boom)");
    ok(&["train", "watch", "2"]).unwrap();
    ok(&["-o", "json", "train", "watch", "2"]).unwrap();
    let e = err(&["train", "watch", "3"]);
    assert!(e.contains("ended the stream before job 3 finished"), "{e}");
    let e = err(&[
        "train",
        "start",
        "-p",
        "template",
        "-a",
        "synthetic:100",
        "--watch",
    ]);
    assert_eq!(e, "job 1 did not complete: task 2 failed (boom)");

    // list: one page and a hint, or every page with --all.
    ok(&["train", "list"]).unwrap();
    ok(&[
        "-o",
        "json",
        "train",
        "list",
        "--all",
        "--state",
        "completed",
    ])
    .unwrap();
    assert_eq!(seen.lock().unwrap().list_tokens, ["", "", "p2"]);

    // stop and resume.
    ok(&[
        "train",
        "stop",
        "1",
        "--task",
        "1",
        "--force",
        "--deadline-ms",
        "50",
    ])
    .unwrap();
    ok(&["train", "stop", "1"]).unwrap();
    ok(&["train", "resume", "1"]).unwrap();
    {
        let s = seen.lock().unwrap();
        assert_eq!(
            (s.stops[0].task_id, s.stops[0].force, s.stops[0].deadline_ms),
            (1, true, 50)
        );
        assert_eq!(
            (s.stops[1].task_id, s.stops[1].force, s.stops[1].deadline_ms),
            (0, false, 0)
        );
    }

    // A service the host does not offer is an error like any other.
    let e = err(&["resources"]);
    assert!(e.starts_with("unimplemented"), "{e}");
}
