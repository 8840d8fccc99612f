//! The gRPC client commands: `tli train start|watch|status|list|stop|resume`
//! and `tli resources` (and the history call of `tli train plot`, drawn in
//! `crate::plot`). They talk to a `tli host serve` over the tli.v1 API
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

mod connection;
#[cfg(test)]
mod mock_tests;
pub(crate) mod models;
mod request;
pub(crate) mod sweeps;

mod watch;

use super::plugin_table::{print_plugin_listing, print_rescan, PluginListingJson, RescanJson};
use super::print_json;
use super::render;
use super::view::{self, EventJson, JobJson, ListJson, ResourcesJson};
use crate::args::{Cli, ListArgs, OutputFormat, StartArgs, TrainCommand};
use anyhow::{bail, Result};
use connection::{api_error, normalize_endpoint, run, Remote};
use tli_proto::v1::{
    GetResourcesRequest, GetTrainingHistoryRequest, GetTrainingHistoryResponse,
    GetTrainingStatusRequest, ListTrainingJobsRequest, ResumeTrainingRequest, StartTrainingRequest,
    StopTrainingRequest,
};

pub(super) fn train(cli: &Cli, command: &TrainCommand) -> Result<()> {
    let output = cli.output;
    match command {
        TrainCommand::Start(args) => {
            let request = start_request(args, &normalize_endpoint(&cli.endpoint))?;
            run(cli, |remote| {
                start(remote, request, args.watch, args.verbose, output)
            })
        }
        TrainCommand::Watch {
            job,
            interval_ms,
            verbose,
        } => run(cli, |remote| async move {
            watch::watch(&remote, *job, *interval_ms, *verbose, output).await
        }),
        TrainCommand::Status { job, rank } => {
            run(cli, |remote| status(remote, *job, rank.as_deref(), output))
        }
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
        TrainCommand::Resume {
            job,
            steps,
            accept_changed_inputs,
        } => run(cli, |remote| {
            resume(remote, *job, *steps, *accept_changed_inputs, output)
        }),
        TrainCommand::Local(_) => bail!("`train local` runs in-process, not through a host"),
        TrainCommand::Plot(_) => bail!("`train plot` is run by commands::plot"),
    }
}

/// Most bytes a `GetTrainingHistory` response may have (many tasks × metrics
/// × points outgrow tonic's default of 4 MiB).
const MAX_HISTORY_BYTES: usize = 512 << 20;

/// `GetTrainingHistory` of a job, for `tli train plot`.
pub(super) fn training_history(
    cli: &Cli,
    request: GetTrainingHistoryRequest,
) -> Result<GetTrainingHistoryResponse> {
    let mut answer = None;
    let slot = &mut answer;
    run(cli, move |remote| async move {
        let response = remote
            .training()
            .max_decoding_message_size(MAX_HISTORY_BYTES)
            .get_training_history(request)
            .await
            .map_err(|s| api_error(&remote, s))?
            .into_inner();
        *slot = Some(response);
        Ok(())
    })?;
    answer.ok_or_else(|| anyhow::anyhow!("the host sent no history"))
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
            crate::outln!("the host reports no devices");
        }
        for table in render::resources_tables(&resources) {
            crate::outln!("{table}");
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
        let listing = PluginListingJson::from(&response);
        if output == OutputFormat::Json {
            return print_json(&listing);
        }
        print_plugin_listing(&listing, "plugin directory of the host");
        Ok(())
    })
}

/// `tli plugins rescan`: the host loads what is new in its plugin directory.
pub(super) fn rescan_plugins(cli: &Cli) -> Result<()> {
    let output = cli.output;
    run(cli, |remote| async move {
        let response = tli_proto::v1::plugin_service_client::PluginServiceClient::with_interceptor(
            remote.channel.clone(),
            remote.auth.clone(),
        )
        .rescan_plugins(tli_proto::v1::RescanPluginsRequest {})
        .await
        .map_err(|s| api_error(&remote, s))?
        .into_inner();
        let report = RescanJson::from(&response);
        if output == OutputFormat::Json {
            return print_json(&report);
        }
        print_rescan(&report);
        Ok(())
    })
}

/// The StartTrainingRequest of `train start`, from `--spec` or the flags.
fn start_request(args: &StartArgs, endpoint: &str) -> Result<StartTrainingRequest> {
    let mut request = match &args.spec {
        Some(path) => {
            if !args.config.is_empty() {
                bail!("--config cannot be combined with --spec (put configs in the spec file)");
            }
            if args.dates.any() {
                bail!(
                    "--start, --end, --valid-start and --test-start cannot be combined with \
                     --spec (put them on the spec's assets and in its \"features\")"
                );
            }
            if args.features.any() {
                bail!(
                    "--features, --feature-column, --no-builtin-features, --target and \
                     --target-horizons cannot be combined with --spec (put them in its \
                     \"features\")"
                );
            }
            request::request_from_spec_file(path)?
        }
        None => request::request_from_flags(args)?,
    };
    request::absolutize_local_paths(&mut request, endpoint);
    Ok(request)
}

/// Submits a job (`StartTraining`); the job as the host stored it.
async fn submit(remote: &Remote, request: StartTrainingRequest) -> Result<JobJson> {
    let response = remote
        .training()
        .start_training(request)
        .await
        .map_err(|s| api_error(remote, s))?
        .into_inner();
    // Accepted all the same; said on stderr so JSON on stdout stays clean.
    for warning in &response.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(JobJson::from(&response.job.unwrap_or_default()))
}

/// `train start`: submits, prints the job, and follows it with `--watch`.
async fn start(
    remote: Remote,
    request: StartTrainingRequest,
    watch: bool,
    verbose: bool,
    output: OutputFormat,
) -> Result<()> {
    let job = submit(&remote, request).await?;
    match (output, watch) {
        (OutputFormat::Json, true) => {
            view::print_json_line(&EventJson::Started { job: job.clone() })?
        }
        (OutputFormat::Json, false) => print_json(&job)?,
        (_, _) => {
            crate::outln!("{}", render::started_table(&job));
            if !watch {
                eprintln!("follow it with `tli train watch {}`", job.job_id);
            }
        }
    }
    if watch {
        watch::watch(&remote, job.job_id, 0, verbose, output).await?;
    }
    Ok(())
}

async fn status(
    remote: Remote,
    job_id: u64,
    rank: Option<&str>,
    output: OutputFormat,
) -> Result<()> {
    let response = remote
        .training()
        .get_training_status(GetTrainingStatusRequest { job_id })
        .await
        .map_err(|s| api_error(&remote, s))?
        .into_inner();
    let mut job = JobJson::from(&response.job.unwrap_or_default());
    if let Some(metric) = rank {
        let order = render::rank_tasks(&mut job.progress.tasks, metric)?;
        eprintln!("tasks ranked by {metric}, best first ({order} is better)");
    }
    if output == OutputFormat::Json {
        return print_json(&job);
    }
    render::print_job_ranked(&job, rank);
    Ok(())
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

async fn resume(
    remote: Remote,
    job_id: u64,
    more_steps: Option<u64>,
    accept_changed_inputs: bool,
    output: OutputFormat,
) -> Result<()> {
    let response = remote
        .training()
        .resume_training(ResumeTrainingRequest {
            job_id,
            more_steps: more_steps.unwrap_or(0),
            accept_changed_inputs,
        })
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
    render::print_job(&job);
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
        crate::outln!("no jobs");
    } else {
        crate::outln!("{}", render::jobs_table(&jobs));
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
        let crate::args::Command::Train {
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
