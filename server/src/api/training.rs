//! `TrainingService` over the orchestrator and its store: start a job,
//! follow it (a server stream of progress, state changes, log lines and a
//! final `finished`, see [`super::watch_hub`]), read its status, list jobs with filters and pages, stop
//! (gracefully or forced), resume, and read a job's recorded history for
//! charts (`GetTrainingHistory`, converted in [`super::history`]).
//!
//! Every call that touches the store or a plugin runs on tokio's blocking
//! pool. A rejected request changes nothing: the request is converted and
//! checked before [`Orchestrator::submit`], which stores nothing when it
//! fails.
//!
//! Page tokens are 32 lowercase hex digits: the id of the last job of the
//! previous page, then a 64-bit FNV-1a fingerprint of that id with the
//! filters and order. Pages continue after that job in the full ordering, so
//! jobs submitted meanwhile do not shift them; a token from other filters or
//! made up is INVALID_ARGUMENT.

use super::convert::{self, invalid, store_error};
use super::history;
use super::job_request;
use super::watch_hub::WatchHub;
use super::{blocking, quick_read, shutting_down, ShutdownSignal};
use std::sync::Arc;
use std::time::Duration;
use tli_proto::v1 as pb;
use tli_proto::v1::training_service_server::TrainingService;
use tli_runtime::orchestrator::engine::Orchestrator;
use tli_runtime::orchestrator::listing::{JobOrder, JobQuery};
use tli_runtime::orchestrator::sweep::Scheduler;
use tli_runtime::orchestrator::sweep_gate::{GateError, SweepTable};
use tli_runtime::orchestrator::JobId;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// Jobs per page when the request leaves `page_size` at 0, and the most allowed.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
pub const MAX_PAGE_SIZE: u32 = 1000;
/// Watch intervals: 0 means the default; shorter ones are raised to the minimum.
pub const DEFAULT_WATCH_INTERVAL_MS: u32 = 500;
pub const MIN_WATCH_INTERVAL_MS: u32 = 50;
/// A forced stop's deadline when the request leaves `deadline_ms` at 0.
pub const DEFAULT_STOP_DEADLINE_MS: u32 = 10_000;

pub struct TrainingApi {
    orchestrator: Arc<Orchestrator>,
    shutdown: ShutdownSignal,
    watchers: Arc<WatchHub>,
}

impl TrainingApi {
    pub fn new(orchestrator: Arc<Orchestrator>, shutdown: ShutdownSignal) -> Self {
        let watchers = WatchHub::new(orchestrator.clone(), shutdown.subscribe());
        Self {
            orchestrator,
            shutdown,
            watchers,
        }
    }

    fn refuse_when_shutting_down(&self) -> Result<(), Status> {
        if self.shutdown.is_triggered() {
            Err(shutting_down())
        } else {
            Ok(())
        }
    }
}

fn job_not_found(id: JobId) -> Status {
    Status::not_found(format!("job {id} not found"))
}

/// A job and its progress as a message, NOT_FOUND for an unknown id.
fn require_job(o: &Orchestrator, id: JobId) -> Result<pb::Job, Status> {
    o.job_view(id)
        .map_err(store_error)?
        .map(|view| convert::job_view(&view))
        .ok_or_else(|| job_not_found(id))
}

#[tonic::async_trait]
impl TrainingService for TrainingApi {
    async fn start_training(
        &self,
        request: Request<pb::StartTrainingRequest>,
    ) -> Result<Response<pb::StartTrainingResponse>, Status> {
        self.refuse_when_shutting_down()?;
        let spec = job_request::job_spec(request.get_ref())?;
        let orchestrator = self.orchestrator.clone();
        let (job, warnings) = blocking(move || {
            let (id, warnings) = orchestrator
                .submit_with_warnings(&spec)
                .map_err(convert::submit_error)?;
            Ok((require_job(&orchestrator, id)?, warnings))
        })
        .await?;
        Ok(Response::new(pb::StartTrainingResponse {
            job: Some(job),
            warnings,
        }))
    }

    type WatchTrainingStream = ReceiverStream<Result<pb::WatchTrainingResponse, Status>>;

    async fn watch_training(
        &self,
        request: Request<pb::WatchTrainingRequest>,
    ) -> Result<Response<Self::WatchTrainingStream>, Status> {
        let req = request.into_inner();
        let job = convert::job_id_from_proto("job_id", req.job_id)?;
        self.refuse_when_shutting_down()?;
        let interval = Duration::from_millis(u64::from(match req.interval_ms {
            0 => DEFAULT_WATCH_INTERVAL_MS,
            n => n.max(MIN_WATCH_INTERVAL_MS),
        }));
        let orchestrator = self.orchestrator.clone();
        blocking(move || {
            orchestrator
                .job(job)
                .map_err(store_error)?
                .map(|_| ())
                .ok_or_else(|| job_not_found(job))
        })
        .await?;
        let (tx, rx) = mpsc::channel(64);
        self.watchers.watch(job, interval, tx);
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_training_status(
        &self,
        request: Request<pb::GetTrainingStatusRequest>,
    ) -> Result<Response<pb::GetTrainingStatusResponse>, Status> {
        let job = convert::job_id_from_proto("job_id", request.get_ref().job_id)?;
        // One job's rows, read right here on the gRPC worker: about half a
        // millisecond, and no thread hand-off on the way (see `quick_read`).
        let job = require_job(&self.orchestrator, job)?;
        Ok(Response::new(pb::GetTrainingStatusResponse {
            job: Some(job),
        }))
    }

    async fn list_training_jobs(
        &self,
        request: Request<pb::ListTrainingJobsRequest>,
    ) -> Result<Response<pb::ListTrainingJobsResponse>, Status> {
        let query = ListQuery::from_request(request.get_ref())?;
        let orchestrator = self.orchestrator.clone();
        let response = quick_read(move || query.run(&orchestrator)).await?;
        Ok(Response::new(response))
    }

    async fn stop_training(
        &self,
        request: Request<pb::StopTrainingRequest>,
    ) -> Result<Response<pb::StopTrainingResponse>, Status> {
        let req = request.into_inner();
        let job = convert::job_id_from_proto("job_id", req.job_id)?;
        let forced = req.force.then(|| {
            Duration::from_millis(u64::from(match req.deadline_ms {
                0 => DEFAULT_STOP_DEADLINE_MS,
                n => n,
            }))
        });
        let orchestrator = self.orchestrator.clone();
        let task = match req.task_id {
            0 => None,
            id => Some(convert::task_id_from_proto(job, id)?),
        };
        // A forced stop blocks for up to its deadline.
        let job = blocking(move || {
            orchestrator
                .stop(job, task, forced)
                .map_err(convert::orchestrator_error)?;
            require_job(&orchestrator, job)
        })
        .await?;
        Ok(Response::new(pb::StopTrainingResponse { job: Some(job) }))
    }

    async fn resume_training(
        &self,
        request: Request<pb::ResumeTrainingRequest>,
    ) -> Result<Response<pb::ResumeTrainingResponse>, Status> {
        let job = convert::job_id_from_proto("job_id", request.get_ref().job_id)?;
        let more = request.get_ref().more_steps;
        let accept_changed_inputs = request.get_ref().accept_changed_inputs;
        if more > tli_core::job::MAX_STEPS {
            return Err(Status::invalid_argument(format!(
                "more_steps: {more} is outside 0..={}",
                tli_core::job::MAX_STEPS
            )));
        }
        self.refuse_when_shutting_down()?;
        let orchestrator = self.orchestrator.clone();
        let (job, resumed) = blocking(move || {
            let resumed = orchestrator
                .resume_job(job, (more > 0).then_some(more), accept_changed_inputs)
                .map_err(convert::orchestrator_error)?;
            Ok((require_job(&orchestrator, job)?, resumed))
        })
        .await?;
        Ok(Response::new(pb::ResumeTrainingResponse {
            job: Some(job),
            resumed_tasks: u32::try_from(resumed).unwrap_or(u32::MAX),
        }))
    }

    async fn get_training_history(
        &self,
        request: Request<pb::GetTrainingHistoryRequest>,
    ) -> Result<Response<pb::GetTrainingHistoryResponse>, Status> {
        let req = request.get_ref();
        let job = convert::job_id_from_proto("job_id", req.job_id)?;
        let query = history::history_query(req)?;
        let orchestrator = self.orchestrator.clone();
        let response = blocking(move || {
            orchestrator
                .training_history(job, &query)
                .map_err(store_error)?
                .map(|h| history::history_to_proto(&h))
                .ok_or_else(|| job_not_found(job))
        })
        .await?;
        Ok(Response::new(response))
    }

    async fn get_sweep(
        &self,
        request: Request<pb::GetSweepRequest>,
    ) -> Result<Response<pb::GetSweepResponse>, Status> {
        let job = convert::job_id_from_proto("job_id", request.get_ref().job_id)?;
        let orchestrator = self.orchestrator.clone();
        let response = blocking(move || match orchestrator.sweep_table(job) {
            Ok(Some(table)) => Ok(sweep_to_proto(job, &table)),
            Ok(None) => Err(Status::failed_precondition(format!(
                "job {job} is not a sweep; `tli train status {job}` shows its tasks"
            ))),
            Err(GateError::NoSuchJob(_)) => Err(job_not_found(job)),
            Err(GateError::Store(e)) => Err(store_error(e)),
            Err(e) => Err(Status::internal(e.to_string())),
        })
        .await?;
        Ok(Response::new(response))
    }
}

/// A sweep's result table on the wire.
fn sweep_to_proto(job: JobId, t: &SweepTable) -> pb::GetSweepResponse {
    pb::GetSweepResponse {
        job_id: convert::id_to_proto(job),
        plugin: t.sweep.plugin.clone(),
        metric: t.sweep.metric.clone(),
        mode: t.sweep.mode().as_str().to_string(),
        scheduler: match t.sweep.scheduler {
            Scheduler::Asha(_) => "asha",
            Scheduler::RunAll { .. } => "run_all",
        }
        .to_string(),
        rungs: t.rungs.clone(),
        trials: t
            .trials
            .iter()
            .map(|r| pb::SweepTrial {
                trial: r.trial as u32,
                task_id: convert::id_to_proto(r.task.id),
                asset: r.task.asset.clone(),
                params_json: r.params.to_string(),
                steps_done: r.task.steps_done,
                rung_values: t
                    .rungs
                    .iter()
                    .zip(&r.result.rung_values)
                    .filter_map(|(&step, v)| v.map(|value| pb::RungValue { step, value }))
                    .collect(),
                final_value: r.result.final_value,
                state: convert::state_to_proto(Some(r.task.state)) as i32,
                status: r.status.clone(),
                best: r.best,
                best_checkpoint: r.best_checkpoint.as_ref().map(|(step, b)| pb::BestModel {
                    step: *step,
                    metric: b.metric.clone(),
                    value: b.value,
                }),
            })
            .collect(),
        steps_trained: t.steps_trained,
        steps_if_run_all: t.steps_if_run_all,
        sweep_json: serde_json::to_string(&t.sweep).unwrap_or_default(),
    }
}

// ----- listing --------------------------------------------------------------

/// A checked `ListTrainingJobs` request: the orchestrator's query, and the
/// page token's encoding of where a page continues.
#[derive(Debug, Clone)]
struct ListQuery {
    /// States sorted and without duplicates (the token's fingerprint needs one spelling).
    query: JobQuery,
}

impl ListQuery {
    fn from_request(req: &pb::ListTrainingJobsRequest) -> Result<Self, Status> {
        let mut states = Vec::with_capacity(req.states.len());
        for (i, &s) in req.states.iter().enumerate() {
            let state = convert::state_from_proto(s).ok_or_else(|| {
                invalid(format!(
                    "states[{i}]: {s} is not a task state (TASK_STATE_QUEUED = 1 … TASK_STATE_INTERRUPTED = 7)"
                ))
            })?;
            states.push(state);
        }
        states.sort_by_key(|s| convert::state_to_proto(Some(*s)) as i32);
        states.dedup();
        let order = match pb::JobOrder::try_from(req.order) {
            Ok(pb::JobOrder::Unspecified | pb::JobOrder::NewestFirst) => JobOrder::NewestFirst,
            Ok(pb::JobOrder::OldestFirst) => JobOrder::OldestFirst,
            Ok(pb::JobOrder::Name) => JobOrder::Name,
            Err(_) => return Err(invalid(format!("order: {} is not a JobOrder", req.order))),
        };
        for (field, value) in [
            ("created_after_unix_ms", req.created_after_unix_ms),
            ("created_before_unix_ms", req.created_before_unix_ms),
        ] {
            if value < 0 {
                return Err(invalid(format!(
                    "{field}: {value} is negative (0 = no bound)"
                )));
            }
        }
        if req.created_after_unix_ms > 0
            && req.created_before_unix_ms > 0
            && req.created_after_unix_ms >= req.created_before_unix_ms
        {
            return Err(invalid(format!(
                "created_after_unix_ms: {} is not before created_before_unix_ms {}",
                req.created_after_unix_ms, req.created_before_unix_ms
            )));
        }
        let page_size = match req.page_size {
            0 => DEFAULT_PAGE_SIZE,
            n if n <= MAX_PAGE_SIZE => n,
            n => {
                return Err(invalid(format!(
                    "page_size: {n} is outside 1..={MAX_PAGE_SIZE}"
                )))
            }
        };
        let mut list = Self {
            query: JobQuery {
                states,
                plugin: req.plugin.clone(),
                asset: req.asset.clone(),
                created_after_ms: req.created_after_unix_ms,
                created_before_ms: req.created_before_unix_ms,
                order,
                page_size: page_size as usize,
                after_job: None,
            },
        };
        list.query.after_job = list.parse_token(&req.page_token)?;
        Ok(list)
    }

    /// FNV-1a (64 bit) of the anchor job, the filters and the order.
    fn fingerprint(&self, anchor: JobId) -> u64 {
        let q = &self.query;
        let states: Vec<&str> = q.states.iter().map(|s| s.as_str()).collect();
        let order = match q.order {
            JobOrder::NewestFirst => pb::JobOrder::NewestFirst,
            JobOrder::OldestFirst => pb::JobOrder::OldestFirst,
            JobOrder::Name => pb::JobOrder::Name,
        };
        let text = format!(
            "tli.v1.ListTrainingJobs\n{anchor}\n{}\n{}:{}\n{}:{}\n{}\n{}\n{}",
            states.join(","),
            q.plugin.len(),
            q.plugin,
            q.asset.len(),
            q.asset,
            q.created_after_ms,
            q.created_before_ms,
            order.as_str_name(),
        );
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in text.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        hash
    }

    fn token(&self, anchor: JobId) -> String {
        format!("{anchor:016x}{:016x}", self.fingerprint(anchor))
    }

    fn parse_token(&self, token: &str) -> Result<Option<JobId>, Status> {
        if token.is_empty() {
            return Ok(None);
        }
        let foreign = || invalid("page_token: not a token from this server");
        let well_formed = token.len() == 32
            && token
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !well_formed {
            return Err(foreign());
        }
        let anchor = u64::from_str_radix(&token[..16], 16).map_err(|_| foreign())?;
        let check = u64::from_str_radix(&token[16..], 16).map_err(|_| foreign())?;
        let anchor = i64::try_from(anchor).map_err(|_| foreign())?;
        if check != self.fingerprint(anchor) {
            return Err(invalid(
                "page_token: not a token from this server for these filters and order \
                 (send the same filters as for the first page)",
            ));
        }
        Ok(Some(anchor))
    }

    fn run(&self, o: &Orchestrator) -> Result<pb::ListTrainingJobsResponse, Status> {
        let page = o
            .list_jobs(&self.query)
            .map_err(convert::orchestrator_error)?;
        let next_page_token = match (page.more, page.jobs.last()) {
            (true, Some(last)) => self.token(last.row.id),
            _ => String::new(),
        };
        Ok(pb::ListTrainingJobsResponse {
            jobs: page.jobs.iter().map(convert::job_view).collect(),
            next_page_token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(page_token: &str) -> Result<ListQuery, Status> {
        ListQuery::from_request(&pb::ListTrainingJobsRequest {
            plugin: "behaviour".into(),
            page_token: page_token.into(),
            ..Default::default()
        })
    }

    #[test]
    fn page_tokens_round_trip_and_are_checked() {
        let q = query("").unwrap();
        let token = q.token(42);
        assert_eq!(token.len(), 32);
        assert_eq!(query(&token).unwrap().query.after_job, Some(42));
        for bad in ["x", "o10:abc", &token.to_uppercase(), &token[..31]] {
            let e = query(bad).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().starts_with("page_token: "), "{}", e.message());
        }
        let other = ListQuery::from_request(&pb::ListTrainingJobsRequest {
            plugin: "template".into(),
            page_token: token,
            ..Default::default()
        })
        .unwrap_err();
        assert!(other.message().starts_with("page_token: "));
    }

    #[test]
    fn bad_list_requests_name_the_field() {
        let cases = [
            (
                pb::ListTrainingJobsRequest {
                    page_size: 5000,
                    ..Default::default()
                },
                "page_size: 5000 is outside 1..=1000",
            ),
            (
                pb::ListTrainingJobsRequest {
                    states: vec![2, 0],
                    ..Default::default()
                },
                "states[1]: ",
            ),
            (
                pb::ListTrainingJobsRequest {
                    order: 9,
                    ..Default::default()
                },
                "order: 9 is not a JobOrder",
            ),
            (
                pb::ListTrainingJobsRequest {
                    created_after_unix_ms: 10,
                    created_before_unix_ms: 5,
                    ..Default::default()
                },
                "created_after_unix_ms: ",
            ),
        ];
        for (req, prefix) in cases {
            let e = ListQuery::from_request(&req).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().starts_with(prefix), "{}", e.message());
        }
    }
}
