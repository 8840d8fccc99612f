//! The gRPC client commands: `tli train start|watch|status|list|stop|resume`
//! and `tli resources`. They talk to a `tli host serve` over the tli.v1 API
//! and do nothing else (no plugins are loaded here).
//!
//! # Connecting
//! `--endpoint` / `TLI_ENDPOINT` (default `http://127.0.0.1:50051`; a bare
//! `host:port` means `http://`). `https://` endpoints need `TLI_CA_FILE`, a
//! PEM file with the CA that signed the host's certificate (this build has no
//! system root store). `--token` / `TLI_TOKEN` is sent as
//! `authorization: Bearer <token>` on every call.
//!
//! # Exit codes
//! 0 on success; 1 on any error, printed as one line `error: …`: the host is
//! unreachable (`cannot reach the tli host at …`), the host refused the call
//! (`error: <code>: <message>`, e.g. `error: invalid argument: models[0].steps: …`
//! or `error: not found: …`), a bad argument, or — for `train watch` and
//! `train start --watch` — a job that finished with any task not completed.
//!
//! # JSON output (`-o json`, on stdout; progress and messages go to stderr)
//! Field names are snake_case, task states lower-case names (`queued`,
//! `running`, `checkpointing`, `completed`, `failed`, `cancelled`,
//! `interrupted`; `unspecified`/`unknown` for values this client does not
//! know), integers are JSON numbers and absent values `null`.
//!
//! A **job** (`train start`, `train status`, `train stop`, `train resume`):
//! ```json
//! {"job_id": 7, "name": "sweep", "created_unix_ms": 1700000000000,
//!  "progress": {"job_id": 7, "weighted_fraction": 0.42, "tasks": [task, …]}}
//! ```
//! where a **task** is
//! ```json
//! {"task_id": 1, "plugin": "template", "asset": "synthetic-ar1:20000:1",
//!  "state": "running", "steps_done": 120, "total_steps": 400,
//!  "steps_per_second": 35.2, "eta_seconds": 8.0, "metrics": {"train_loss": 0.97},
//!  "error": null, "estimate_bytes": 1048576, "measured_bytes": null}
//! ```
//! (`weighted_fraction` is 0..1, weighted by each task's estimated cost;
//! `eta_seconds` and `measured_bytes` are null when unknown, `error` when none.)
//! `train list`: `{"jobs": [job, …], "next_page_token": ""}` (empty token on
//! the last page; with `--all` every page is in `jobs`).
//!
//! `train watch` (and `train start --watch`) print NDJSON: one object per
//! line, with an `event` field:
//! ```json
//! {"event": "started", "job": job}                      (train start --watch only)
//! {"event": "progress", "job_id": 7, "weighted_fraction": 0.42, "tasks": [task, …]}
//!                                                       (the progress object of a job)
//! {"event": "state_changed", "job_id": 7, "task_id": 3, "from": "running",
//!  "to": "completed", "reason": "completed 400 steps", "at_unix_ms": 1700000000000}
//! {"event": "log", "level": "warn", "message": "…", "at_unix_ms": 1700000000000}
//! {"event": "finished", "job": job}                      (the last line)
//! ```
//! If the stream ends without `finished` (the host shut down), the command
//! fails with exit 1 after the lines it printed.
//! `resources`:
//! ```json
//! {"devices": [{"name": "cpu", "budget_bytes": 8589934592, "reserved_bytes": 1048576,
//!               "strategy": "auto", "total_bytes": null, "free_bytes": null,
//!               "reservations": [{"task_id": 3, "reserved_bytes": 1048576,
//!                                 "measured_bytes": 917504}]}]}
//! ```
//!
//! # Tables and lines (without `-o json`)
//! `train watch` draws progress bars on stderr (a plain line at most every 2 s
//! when stderr is not a terminal), prints state changes and host log lines on
//! stderr (`task 3: running → completed (completed 400 steps)`), and the final
//! task table on stdout. States are coloured (green completed; yellow queued, running,
//! checkpointing; red failed; grey cancelled, interrupted) only on a terminal
//! and never when `NO_COLOR` is set.

#[cfg(test)]
mod mock_tests;
mod request;
mod view;
mod watch;

use super::print_json;
use crate::cli::{Cli, ListArgs, OutputFormat, StartArgs, TrainCommand};
use anyhow::{anyhow, bail, Context, Result};
use std::future::Future;
use std::time::Duration;
use tli_proto::v1::{
    resource_service_client::ResourceServiceClient, training_service_client::TrainingServiceClient,
    GetResourcesRequest, GetTrainingStatusRequest, ListTrainingJobsRequest, ResumeTrainingRequest,
    StartTrainingRequest, StopTrainingRequest,
};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};
use view::{EventJson, JobJson, ListJson, ResourcesJson};

/// How long connecting may take before the host counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) fn train(cli: &Cli, command: &TrainCommand) -> Result<()> {
    let output = cli.output;
    match command {
        TrainCommand::Start(args) => {
            let request = start_request(args, &normalize_endpoint(&cli.endpoint))?;
            run(cli, |remote| start(remote, request, args.watch, output))
        }
        TrainCommand::Watch { job, interval_ms } => run(cli, |remote| async move {
            watch::watch(&remote, *job, *interval_ms, output).await
        }),
        TrainCommand::Status { job } => run(cli, |remote| status(remote, *job, output)),
        TrainCommand::List(args) => {
            let request = list_request(args)?;
            run(cli, |remote| list(remote, request, args, output))
        }
        TrainCommand::Stop {
            job,
            task,
            force,
            deadline_ms,
        } => {
            let request = StopTrainingRequest {
                job_id: *job,
                task_id: task.unwrap_or(0),
                force: *force,
                deadline_ms: if *force { *deadline_ms } else { 0 },
            };
            run(cli, |remote| stop(remote, request, output))
        }
        TrainCommand::Resume { job } => run(cli, |remote| resume(remote, *job, output)),
        TrainCommand::Local(_) => bail!("`train local` runs in-process, not through a host"),
    }
}

pub(super) fn resources(cli: &Cli) -> Result<()> {
    let output = cli.output;
    run(cli, |remote| async move {
        let response = remote
            .resources()
            .get_resources(GetResourcesRequest {})
            .await
            .map_err(|s| api_error(&remote, s))?
            .into_inner();
        let resources = ResourcesJson::from(&response);
        if output == OutputFormat::Json {
            return print_json(&resources);
        }
        if resources.devices.is_empty() {
            println!("the host reports no devices");
        }
        for table in view::resources_tables(&resources) {
            println!("{table}");
        }
        Ok(())
    })
}

/// `tli plugins list` against a running host; the JSON has the shape of
/// `tli plugins list --local` (without the load times).
pub(super) fn plugins(cli: &Cli) -> Result<()> {
    let output = cli.output;
    run(cli, |remote| async move {
        let response = tli_proto::v1::plugin_service_client::PluginServiceClient::with_interceptor(
            remote.channel.clone(),
            remote.auth.clone(),
        )
        .list_plugins(tli_proto::v1::ListPluginsRequest {})
        .await
        .map_err(|s| api_error(&remote, s))?
        .into_inner();
        let parse = |text: &str| {
            serde_json::from_str::<serde_json::Value>(text).unwrap_or(serde_json::Value::Null)
        };
        let listing = serde_json::json!({
            "plugin_dir": response.plugin_dir,
            "host_plugin_api": response.host_plugin_api,
            "plugins": response.plugins.iter().map(|p| serde_json::json!({
                "name": p.name, "version": p.version, "api_version": p.api_version, "family": p.family,
                "description": p.description, "path": p.path,
                "default_config": parse(&p.default_config_json), "config_schema": parse(&p.config_schema_json),
            })).collect::<Vec<_>>(),
            "refused": response.refused.iter().map(|r| serde_json::json!({"path": r.path, "reason": r.reason})).collect::<Vec<_>>(),
        });
        if output == OutputFormat::Json {
            return print_json(&listing);
        }
        println!("plugin directory of the host: {}", response.plugin_dir);
        let mut table = super::new_table(vec!["NAME", "VERSION", "API", "FAMILY", "DESCRIPTION"]);
        for p in &response.plugins {
            table.add_row(vec![
                &p.name,
                &p.version,
                &p.api_version,
                &p.family,
                &p.description,
            ]);
        }
        println!("{table}");
        for r in &response.refused {
            println!("refused {}: {}", r.path, r.reason);
        }
        Ok(())
    })
}

/// Connects and runs one command on a small current-thread runtime (the
/// arguments are checked before this, so mistakes show without a host).
fn run<F, Fut>(cli: &Cli, command: F) -> Result<()>
where
    F: FnOnce(Remote) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let remote = Remote::connect(&cli.endpoint, cli.token.as_deref()).await?;
        command(remote).await
    })
}

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone)]
struct Auth(Option<MetadataValue<Ascii>>);

impl Interceptor for Auth {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Authed = InterceptedService<Channel, Auth>;

/// A connected host.
struct Remote {
    channel: Channel,
    auth: Auth,
}

impl Remote {
    async fn connect(endpoint: &str, token: Option<&str>) -> Result<Self> {
        let endpoint = normalize_endpoint(endpoint);
        let auth = match token.map(str::trim).filter(|t| !t.is_empty()) {
            Some(token) => {
                Auth(Some(format!("Bearer {token}").parse().map_err(|_| {
                    anyhow!("the token has characters a header cannot carry")
                })?))
            }
            None => Auth(None),
        };
        let mut builder = Endpoint::from_shared(endpoint.clone())
            .map_err(|e| anyhow!("invalid endpoint {endpoint:?}: {e}"))?
            .connect_timeout(CONNECT_TIMEOUT);
        if endpoint.starts_with("https://") {
            builder = builder
                .tls_config(tls_config()?)
                .map_err(|e| anyhow!("TLS for {endpoint}: {}", error_chain(&e)))?;
        } else if !endpoint.starts_with("http://") {
            bail!("invalid endpoint {endpoint:?}: use http://HOST:PORT or https://HOST:PORT");
        }
        let channel = builder
            .connect()
            .await
            .map_err(|e| unreachable_error(&endpoint, &error_chain(&e)))?;
        Ok(Self { channel, auth })
    }

    fn training(&self) -> TrainingServiceClient<Authed> {
        TrainingServiceClient::with_interceptor(self.channel.clone(), self.auth.clone())
    }

    fn resources(&self) -> ResourceServiceClient<Authed> {
        ResourceServiceClient::with_interceptor(self.channel.clone(), self.auth.clone())
    }
}

/// `host:port` → `http://host:port`; surrounding space and a trailing `/` go.
fn normalize_endpoint(endpoint: &str) -> String {
    let e = endpoint.trim().trim_end_matches('/');
    if e.contains("://") {
        e.to_string()
    } else {
        format!("http://{e}")
    }
}

fn tls_config() -> Result<ClientTlsConfig> {
    let Some(path) = std::env::var_os("TLI_CA_FILE") else {
        bail!(
            "https endpoints need TLI_CA_FILE: a PEM file with the CA certificate that signed the host's certificate"
        );
    };
    let pem = std::fs::read(&path)
        .with_context(|| format!("TLI_CA_FILE: cannot read {}", path.to_string_lossy()))?;
    Ok(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
}

/// An error and its causes as one line, without tonic's bare "transport error".
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if text != "transport error" && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    if parts.is_empty() {
        "transport error".into()
    } else {
        parts.join(": ")
    }
}

fn unreachable_error(endpoint: &str, reason: &str) -> anyhow::Error {
    anyhow!(
        "cannot reach the tli host at {endpoint}: {reason}; start one with `tli host serve` or set --endpoint / TLI_ENDPOINT"
    )
}

/// A gRPC code as words: `invalid argument`, `not found`, …
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid argument",
        Code::DeadlineExceeded => "deadline exceeded",
        Code::NotFound => "not found",
        Code::AlreadyExists => "already exists",
        Code::PermissionDenied => "permission denied",
        Code::ResourceExhausted => "resource exhausted",
        Code::FailedPrecondition => "failed precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out of range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// A refused call as one line: `<code name>: <message>` (main adds `error: `).
fn api_error(remote: &Remote, status: Status) -> anyhow::Error {
    status_error(&status, remote.auth.0.is_some())
}

fn status_error(status: &Status, has_token: bool) -> anyhow::Error {
    let code = code_name(status.code());
    let message = status.message().trim();
    let mut text = if message.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {message}")
    };
    if status.code() == Code::Unauthenticated && !has_token {
        text.push_str(" (set --token or TLI_TOKEN)");
    }
    anyhow!(text)
}

/// The StartTrainingRequest of `train start`, from `--spec` or the flags.
fn start_request(args: &StartArgs, endpoint: &str) -> Result<StartTrainingRequest> {
    let mut request = match &args.spec {
        Some(path) => {
            if !args.config.is_empty() {
                bail!("--config cannot be combined with --spec (put configs in the spec file)");
            }
            request::request_from_spec_file(path)?
        }
        None => request::request_from_flags(args)?,
    };
    request::absolutize_local_paths(&mut request, endpoint);
    Ok(request)
}

/// `train start`: submits, prints the job, and follows it with `--watch`.
async fn start(
    remote: Remote,
    request: StartTrainingRequest,
    watch: bool,
    output: OutputFormat,
) -> Result<()> {
    let response = remote
        .training()
        .start_training(request)
        .await
        .map_err(|s| api_error(&remote, s))?
        .into_inner();
    let job = JobJson::from(&response.job.unwrap_or_default());
    match (output, watch) {
        (OutputFormat::Json, true) => {
            view::print_json_line(&EventJson::Started { job: job.clone() })?
        }
        (OutputFormat::Json, false) => print_json(&job)?,
        (OutputFormat::Table, _) => {
            println!("{}", view::started_table(&job));
            if !watch {
                eprintln!("follow it with `tli train watch {}`", job.job_id);
            }
        }
    }
    if watch {
        watch::watch(&remote, job.job_id, 0, output).await?;
    }
    Ok(())
}

async fn status(remote: Remote, job_id: u64, output: OutputFormat) -> Result<()> {
    let response = remote
        .training()
        .get_training_status(GetTrainingStatusRequest { job_id })
        .await
        .map_err(|s| api_error(&remote, s))?
        .into_inner();
    print_job_result(&response.job.unwrap_or_default(), output)
}

async fn stop(remote: Remote, request: StopTrainingRequest, output: OutputFormat) -> Result<()> {
    let response = remote
        .training()
        .stop_training(request)
        .await
        .map_err(|s| api_error(&remote, s))?
        .into_inner();
    print_job_result(&response.job.unwrap_or_default(), output)
}

async fn resume(remote: Remote, job_id: u64, output: OutputFormat) -> Result<()> {
    let response = remote
        .training()
        .resume_training(ResumeTrainingRequest { job_id })
        .await
        .map_err(|s| api_error(&remote, s))?
        .into_inner();
    eprintln!("resumed {} task(s) of job {job_id}", response.resumed_tasks);
    print_job_result(&response.job.unwrap_or_default(), output)
}

fn print_job_result(job: &tli_proto::v1::Job, output: OutputFormat) -> Result<()> {
    let job = JobJson::from(job);
    if output == OutputFormat::Json {
        return print_json(&job);
    }
    view::print_job(&job);
    Ok(())
}

/// The list request for the filters of `train list` (page token aside).
fn list_request(args: &ListArgs) -> Result<ListTrainingJobsRequest> {
    let states = args
        .state
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.trim().is_empty())
        .map(|s| request::parse_state(s).map(|s| s as i32))
        .collect::<Result<Vec<_>>>()?;
    Ok(ListTrainingJobsRequest {
        states,
        plugin: args.plugin.clone().unwrap_or_default(),
        asset: args.asset.clone().unwrap_or_default(),
        order: request::parse_order(&args.sort)? as i32,
        page_size: args.page_size,
        page_token: args.page_token.clone().unwrap_or_default(),
        ..Default::default()
    })
}

/// The command that fetches the next page, with the same filters.
fn next_page_hint(args: &ListArgs, token: &str) -> String {
    let mut hint = format!("more: tli train list --page-token {token}");
    for s in &args.state {
        hint.push_str(&format!(" --state {s}"));
    }
    if let Some(p) = &args.plugin {
        hint.push_str(&format!(" --plugin {p:?}"));
    }
    if let Some(a) = &args.asset {
        hint.push_str(&format!(" --asset {a:?}"));
    }
    if args.sort != "newest" {
        hint.push_str(&format!(" --sort {}", args.sort));
    }
    if args.page_size != 20 {
        hint.push_str(&format!(" --page-size {}", args.page_size));
    }
    hint
}

async fn list(
    remote: Remote,
    mut request: ListTrainingJobsRequest,
    args: &ListArgs,
    output: OutputFormat,
) -> Result<()> {
    let mut jobs = Vec::new();
    let next_page_token = loop {
        let response = remote
            .training()
            .list_training_jobs(request.clone())
            .await
            .map_err(|s| api_error(&remote, s))?
            .into_inner();
        jobs.extend(response.jobs.iter().map(JobJson::from));
        let token = response.next_page_token;
        if !args.all || token.is_empty() {
            break token;
        }
        if token == request.page_token {
            bail!("the host returned the same page token twice ({token}); stopping");
        }
        request.page_token = token;
    };
    if output == OutputFormat::Json {
        print_json(&ListJson {
            jobs,
            next_page_token: next_page_token.clone(),
        })?;
    } else if jobs.is_empty() {
        println!("no jobs");
    } else {
        println!("{}", view::jobs_table(&jobs));
    }
    if !next_page_token.is_empty() {
        eprintln!("{}", next_page_hint(args, &next_page_token));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::time::Instant;

    #[test]
    fn an_unreachable_host_is_one_clear_line() {
        let cli =
            Cli::try_parse_from(["tli", "--endpoint", "http://127.0.0.1:1", "resources"]).unwrap();
        let started = Instant::now();
        let e = format!("{:#}", resources(&cli).unwrap_err());
        assert!(started.elapsed() < Duration::from_secs(4), "{e}");
        assert!(
            e.starts_with("cannot reach the tli host at http://127.0.0.1:1: "),
            "{e}"
        );
        assert!(
            e.ends_with("; start one with `tli host serve` or set --endpoint / TLI_ENDPOINT"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        assert!(e.to_lowercase().contains("refused"), "{e}");
    }

    #[test]
    fn endpoints_are_checked_and_normalised() {
        assert_eq!(
            normalize_endpoint("127.0.0.1:50051"),
            "http://127.0.0.1:50051"
        );
        assert_eq!(normalize_endpoint(" http://h:1/ "), "http://h:1");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt
            .block_on(Remote::connect("ftp://h:1", None))
            .err()
            .unwrap();
        assert!(e.to_string().contains("invalid endpoint"), "{e}");
        let e = rt
            .block_on(Remote::connect("http://127.0.0.1:1", Some("bad\ntoken")))
            .err()
            .unwrap();
        assert!(e.to_string().contains("token"), "{e}");
    }

    #[test]
    fn refusals_read_as_code_and_message() {
        assert_eq!(code_name(Code::InvalidArgument), "invalid argument");
        assert_eq!(code_name(Code::NotFound), "not found");
        let e = status_error(
            &Status::invalid_argument("models[0].steps: 0 is outside 1..=1000000000"),
            false,
        );
        assert_eq!(
            e.to_string(),
            "invalid argument: models[0].steps: 0 is outside 1..=1000000000"
        );
        let e = status_error(&Status::unauthenticated("missing token"), false);
        assert_eq!(
            e.to_string(),
            "unauthenticated: missing token (set --token or TLI_TOKEN)"
        );
        let e = status_error(&Status::unauthenticated("bad token"), true);
        assert_eq!(e.to_string(), "unauthenticated: bad token");
        assert_eq!(
            status_error(&Status::not_found(""), false).to_string(),
            "not found"
        );
    }

    #[test]
    fn list_filters_become_a_request_and_a_hint() {
        let cli = Cli::try_parse_from([
            "tli",
            "train",
            "list",
            "--state",
            "running,failed",
            "--state",
            "queued",
            "--sort",
            "oldest",
            "--plugin",
            "template",
        ])
        .unwrap();
        let crate::cli::Command::Train {
            command: TrainCommand::List(args),
        } = &cli.command
        else {
            panic!()
        };
        let r = list_request(args).unwrap();
        use tli_proto::v1::{JobOrder, TaskState};
        assert_eq!(
            r.states,
            vec![
                TaskState::Running as i32,
                TaskState::Failed as i32,
                TaskState::Queued as i32
            ]
        );
        assert_eq!(r.order, JobOrder::OldestFirst as i32);
        assert_eq!((r.plugin.as_str(), r.page_size), ("template", 20));
        let hint = next_page_hint(args, "abc");
        assert!(
            hint.starts_with("more: tli train list --page-token abc "),
            "{hint}"
        );
        assert!(hint.contains("--sort oldest"), "{hint}");
        let mut bad = ListArgs { ..clone_list(args) };
        bad.state = vec!["done".into()];
        assert!(list_request(&bad).is_err());
    }

    fn clone_list(a: &ListArgs) -> ListArgs {
        ListArgs {
            state: a.state.clone(),
            plugin: a.plugin.clone(),
            asset: a.asset.clone(),
            sort: a.sort.clone(),
            page_size: a.page_size,
            page_token: a.page_token.clone(),
            all: a.all,
        }
    }
}
