//! What clients ask of a running orchestrator besides submitting: read jobs
//! and their progress, list them with filters and pages, stop and resume
//! them, and see the device's reservations. The rules (which states may be
//! stopped, how pages continue) live here, once, for the API and the CLI.

use super::{lock, Orchestrator, OrchestratorError, Reservation, Resources};
use crate::orchestrator::job::JobSpec;
use crate::orchestrator::listing::{job_views, JobPage, JobQuery, JobView};
use crate::orchestrator::progress::{job_progress_with, task_progress, JobProgress, TaskProgress};
use crate::orchestrator::runner::StopRequest;
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::{JobRow, StoreError, TaskRow, TransitionRow};
use crate::orchestrator::{JobId, TaskId};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How many tasks and jobs are in each state (states with none are absent).
#[derive(Clone, Debug, Default)]
pub struct StateCounts {
    pub tasks: Vec<(String, u64)>,
    /// By overall state (`store::JOB_STATES`).
    pub jobs: Vec<(String, u64)>,
}

impl Orchestrator {
    /// Tasks by state and jobs by overall state, for dashboards and metrics.
    pub fn state_counts(&self) -> Result<StateCounts, StoreError> {
        Ok(StateCounts {
            tasks: self.store.task_state_counts()?,
            jobs: self.store.job_state_counts()?,
        })
    }

    /// Every running or checkpointing task's job and progress (with live
    /// figures), by task id.
    pub fn running_progress(&self) -> Result<Vec<(JobId, TaskProgress)>, StoreError> {
        let rows = self
            .store
            .tasks_in(&[TaskState::Running, TaskState::Checkpointing])?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.push((
                row.job_id,
                task_progress(&self.store, Some(&self.live), row)?,
            ));
        }
        Ok(out)
    }

    /// Whether a task of that id exists.
    pub fn task_exists(&self, task: TaskId) -> Result<bool, StoreError> {
        Ok(self.store.task(task)?.is_some())
    }

    /// The names of the metrics a task has recorded, sorted.
    pub fn metric_names(&self, task: TaskId) -> Result<Vec<String>, StoreError> {
        self.store.metric_names(task)
    }

    /// One metric of a task by step, thinned evenly to at most `max_points`
    /// (the first and last kept).
    pub fn metric_series(
        &self,
        task: TaskId,
        name: &str,
        max_points: usize,
    ) -> Result<crate::orchestrator::store::MetricSeries, StoreError> {
        self.store.metric_series(task, name, max_points)
    }

    /// A job's stored row, `None` for an unknown id.
    pub fn job(&self, job: JobId) -> Result<Option<JobRow>, StoreError> {
        self.store.job(job)
    }

    /// A job's progress with running tasks' latest steps and metrics.
    pub fn job_progress(&self, job: JobId) -> Result<Option<JobProgress>, StoreError> {
        let mut progress = job_progress_with(&self.store, Some(&self.live), job)?;
        if let Some(progress) = &mut progress {
            self.name_headlines(progress);
        }
        Ok(progress)
    }

    /// Each task's headline metrics: those its plugin (the version that ran
    /// it, else the newest loaded) declares; none for a plugin not loaded.
    fn name_headlines(&self, progress: &mut JobProgress) {
        let registry = self.registry.snapshot();
        for task in &mut progress.tasks {
            let plugin = match &task.plugin_version {
                Some(version) => registry.get_version(&task.plugin, version),
                None => None,
            }
            .or_else(|| registry.get(&task.plugin));
            task.headline_metrics = plugin
                .map(|p| p.manifest.headline_metrics.clone())
                .unwrap_or_default();
        }
    }

    /// A job with its progress, `None` for an unknown id.
    pub fn job_view(&self, job: JobId) -> Result<Option<JobView>, StoreError> {
        let Some(row) = self.store.job(job)? else {
            return Ok(None);
        };
        Ok(self
            .job_progress(job)?
            .map(|progress| JobView { row, progress }))
    }

    /// Every job with its progress, newest first.
    pub fn all_job_views(&self) -> Result<Vec<JobView>, StoreError> {
        let mut views = job_views(&self.store, Some(&self.live), None)?;
        for view in &mut views {
            self.name_headlines(&mut view.progress);
        }
        Ok(views)
    }

    /// A job's tasks.
    pub fn tasks_of(&self, job: JobId) -> Result<Vec<TaskRow>, StoreError> {
        self.store.tasks_of(job)
    }

    /// A job's state changes with an id above `after` (0: all), oldest first.
    pub fn job_transitions_after(
        &self,
        job: JobId,
        after: i64,
    ) -> Result<Vec<TransitionRow>, StoreError> {
        self.store.job_transitions_after(job, after)
    }

    /// One page of jobs matching `query` (see [`JobQuery`]).
    pub fn list_jobs(&self, query: &JobQuery) -> Result<JobPage, OrchestratorError> {
        let jobs = self.store.jobs()?;
        let page = query.select(jobs, |job| self.store.tasks_of(job))?;
        let mut views = Vec::with_capacity(page.jobs.len());
        for row in page.jobs {
            if let Some(progress) = self.job_progress(row.id)? {
                views.push(JobView { row, progress });
            }
        }
        Ok(JobPage {
            jobs: views,
            more: page.more,
        })
    }

    /// The device's budget, strategy and current reservations, each with
    /// the task's measured bytes when known.
    pub fn resources(&self) -> Result<Resources, StoreError> {
        let (budget, strategy, reserved_bytes, held, holds) = {
            let arbiter = lock(&self.arbiter);
            (
                arbiter.budget().clone(),
                arbiter.strategy(),
                arbiter.reserved(),
                arbiter.running(),
                arbiter.holds(),
            )
        };
        let names = self.hold_names();
        let held_models = holds
            .into_iter()
            .map(|(id, bytes)| {
                let name = names
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| format!("hold {}", id.0));
                (name, bytes)
            })
            .collect();
        let mut running = Vec::with_capacity(held.len());
        for (task, reserved) in held {
            let row = self.store.task(task)?;
            running.push(Reservation {
                task,
                reserved_bytes: reserved,
                measured_bytes: row.as_ref().and_then(|t| t.measured_bytes),
                measured_memory: row.and_then(|t| t.measured_memory),
            });
        }
        Ok(Resources {
            budget,
            strategy,
            reserved_bytes,
            running,
            held: held_models,
        })
    }

    /// Stops a job's queued and running tasks, or only `task` of it.
    /// Graceful (`forced` = `None`): each finishes its slice, checkpoints and
    /// becomes `cancelled`. Forced: the plugin is told to return at once, no
    /// checkpoint is written, and after the deadline the task is marked
    /// `cancelled` even if the plugin has not returned (its thread is then
    /// left to end on its own; its memory stays reserved until it does, but
    /// it takes no strategy place and shutdown does not wait for it). All
    /// tasks are told at once and one deadline is waited in all.
    ///
    /// Refused, changing nothing: an unknown job or task, a task that is not
    /// queued or running, a job with no such task.
    pub fn stop(
        &self,
        job: JobId,
        task: Option<TaskId>,
        forced: Option<Duration>,
    ) -> Result<(), OrchestratorError> {
        if self.store.job(job)?.is_none() {
            return Err(OrchestratorError::NoSuchJob(job));
        }
        let tasks = self.store.tasks_of(job)?;
        let targets: Vec<TaskId> = match task {
            Some(id) => {
                let row = tasks
                    .iter()
                    .find(|t| t.id == id)
                    .ok_or(OrchestratorError::NoSuchTask { job, task: id })?;
                if !row.state.is_stoppable() {
                    return Err(OrchestratorError::TaskNotStoppable {
                        job,
                        task: id,
                        state: row.state,
                    });
                }
                vec![id]
            }
            None => {
                let ids: Vec<TaskId> = tasks
                    .iter()
                    .filter(|t| t.state.is_stoppable())
                    .map(|t| t.id)
                    .collect();
                if ids.is_empty() {
                    return Err(OrchestratorError::NothingToStop {
                        job,
                        states: state_summary(&tasks),
                    });
                }
                ids
            }
        };
        self.stop_tasks(&targets, forced)
    }

    /// Stops one task of whatever job (see [`stop`](Self::stop)).
    pub fn stop_task(
        &self,
        task: TaskId,
        forced: Option<Duration>,
    ) -> Result<(), OrchestratorError> {
        let job = self
            .store
            .task(task)?
            .map(|t| t.job_id)
            .ok_or(OrchestratorError::UnknownTask(task))?;
        self.stop(job, Some(task), forced)
    }

    /// Stops every queued or running task of a job (see [`stop`](Self::stop)).
    pub fn stop_job(&self, job: JobId, forced: Option<Duration>) -> Result<(), OrchestratorError> {
        self.stop(job, None, forced)
    }

    fn stop_tasks(
        &self,
        tasks: &[TaskId],
        forced: Option<Duration>,
    ) -> Result<(), OrchestratorError> {
        let mut signalled = Vec::new();
        for &task in tasks {
            let state = self
                .store
                .task(task)?
                .ok_or(OrchestratorError::UnknownTask(task))?
                .state;
            if state == TaskState::Queued {
                let (in_running, pending_in_slurm) = {
                    let running = lock(&self.running);
                    let entry = running.get(&task);
                    (
                        entry.is_some(),
                        entry.is_some_and(|r| r.remote().is_some_and(|x| !x.attached)),
                    )
                };
                if !in_running || pending_in_slurm {
                    // Cancelled first, so no scheduling round dispatches it again.
                    self.store.transition(
                        task,
                        TaskState::Cancelled,
                        "stopped before it started",
                    )?;
                    self.withdraw_pending(task, "stopped before its worker started");
                    continue;
                }
            }
            let Some((stop, cancel)) = lock(&self.running).get(&task).map(|a| {
                (
                    a.stop.clone(),
                    a.local().map(|local| local.plugin_cancel.clone()),
                )
            }) else {
                continue; // not running: nothing to stop
            };
            match forced {
                None => stop.store(StopRequest::Graceful as u8, Ordering::Release),
                Some(_) => {
                    stop.store(StopRequest::Forced as u8, Ordering::Release);
                    if let Some(cancel) = cancel {
                        cancel.store(true, Ordering::Release);
                    }
                    signalled.push(task);
                }
            }
        }
        let Some(deadline) = forced else {
            return Ok(());
        };
        let until = Instant::now() + deadline;
        let still_running = |tasks: &[TaskId]| {
            let running = lock(&self.running);
            tasks.iter().any(|t| running.contains_key(t))
        };
        while Instant::now() < until && still_running(&signalled) {
            self.drain_events();
            std::thread::sleep(Duration::from_millis(5));
        }
        for task in signalled {
            if lock(&self.running).contains_key(&task) {
                // A Slurm worker is given up on (its job cancelled); a thread
                // ends on its own, abandoned meanwhile (`containment`).
                self.abandon_remote(task);
                self.abandon_thread(task);
                let _ = self.store.transition(
                    task,
                    TaskState::Cancelled,
                    &format!(
                        "forced stop: the plugin did not return within {:.1}s",
                        deadline.as_secs_f64()
                    ),
                );
            }
        }
        Ok(())
    }

    /// Re-queues a job's cancelled, failed and interrupted tasks; each resumes
    /// from its last good checkpoint. With `more_steps`, its completed tasks
    /// too, each given that many steps beyond those it has done (and the
    /// others as well). With `accept_changed_inputs`, the job's data files
    /// are recorded anew as they are now, and each resumed task's history
    /// says which changed and how. Returns how many.
    pub fn resume_job(
        &self,
        job: JobId,
        more_steps: Option<u64>,
        accept_changed_inputs: bool,
    ) -> Result<usize, OrchestratorError> {
        let Some(row) = self.store.job(job)? else {
            return Err(OrchestratorError::NoSuchJob(job));
        };
        let mut reason = "resumed".to_string();
        if accept_changed_inputs {
            let inputs_error = |message: String| OrchestratorError::Inputs { job, message };
            let mut spec: JobSpec = serde_json::from_str(&row.spec_json)
                .map_err(|e| inputs_error(format!("stored job spec: {e}")))?;
            let now = self.datasets.inputs_now(&spec).map_err(inputs_error)?;
            let changes: Vec<String> = spec
                .inputs
                .iter()
                .filter_map(|then| {
                    let current = now.iter().find(|f| f.path == then.path)?;
                    let change = then.change_from(current)?;
                    Some(format!("{} ({change})", then.path.display()))
                })
                .collect();
            if !changes.is_empty() {
                reason = format!("resumed, accepting changed inputs: {}", changes.join("; "));
            }
            spec.inputs = now;
            let json =
                serde_json::to_string(&spec).map_err(|e| inputs_error(format!("job spec: {e}")))?;
            self.store.set_job_spec(job, &json)?;
        }
        // A sweep trial that ASHA stopped at a rung would be stopped there again: it stays.
        let rungs = match more_steps {
            Some(_) => super::super::sweep_gate::job_spec(&self.store, job)
                .map(|s| s.decision_rungs())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let stopped_at_rung = |t: &TaskRow| {
            t.state == TaskState::Completed
                && t.steps_done < t.total_steps
                && rungs.contains(&t.steps_done)
        };
        let mut resumed = 0;
        for task in self.store.tasks_of(job)? {
            match more_steps {
                Some(_) if stopped_at_rung(&task) => {}
                Some(more) if task.state.is_resumable() || task.state == TaskState::Completed => {
                    self.store.extend_task(task.id, more)?;
                    resumed += 1;
                }
                _ if task.state.is_resumable() => {
                    self.store.transition(task.id, TaskState::Queued, &reason)?;
                    resumed += 1;
                }
                _ => {}
            }
        }
        Ok(resumed)
    }
}

/// "completed ×2, failed ×1", for messages.
fn state_summary(tasks: &[TaskRow]) -> String {
    TaskState::ALL
        .iter()
        .filter_map(|s| {
            let n = tasks.iter().filter(|t| t.state == *s).count();
            (n > 0).then(|| format!("{s} ×{n}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}
