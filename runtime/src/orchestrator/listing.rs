//! Listing jobs: filters (task states, plugin, asset, creation time), an
//! order, and pages that continue after the last job of the previous page, so
//! jobs submitted meanwhile do not shift them. The API turns the anchor into
//! an opaque page token; the rule of what a page holds lives here.

use super::live::LiveProgress;
use super::progress::{job_progress_with, JobProgress};
use super::state::TaskState;
use super::store::{JobRow, Store, StoreError, TaskRow};
use super::JobId;

/// The order of a listing.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum JobOrder {
    #[default]
    NewestFirst,
    OldestFirst,
    /// By name, then by id.
    Name,
}

/// What to list. Empty filters match everything; times are Unix ms, 0 = no bound.
#[derive(Clone, Debug, PartialEq)]
pub struct JobQuery {
    /// Jobs with at least one task in one of these states.
    pub states: Vec<TaskState>,
    /// Jobs with a task of this plugin.
    pub plugin: String,
    /// Jobs with a task on this asset (its label).
    pub asset: String,
    /// Created at or after.
    pub created_after_ms: i64,
    /// Created before.
    pub created_before_ms: i64,
    pub order: JobOrder,
    /// At most this many jobs per page (at least 1).
    pub page_size: usize,
    /// Continue after this job (the last of the previous page).
    pub after_job: Option<JobId>,
}

/// A job with its progress.
#[derive(Clone, Debug)]
pub struct JobView {
    pub row: JobRow,
    pub progress: JobProgress,
}

/// Every job in `store` (or only `only`) with its progress, newest first;
/// running tasks' numbers from `live` when given. Used by the orchestrator
/// and, on a read-only store, by `tli host status`.
pub fn job_views(
    store: &Store,
    live: Option<&LiveProgress>,
    only: Option<JobId>,
) -> Result<Vec<JobView>, StoreError> {
    let mut views = Vec::new();
    for row in store.jobs()? {
        if only.is_some_and(|j| j != row.id) {
            continue;
        }
        if let Some(progress) = job_progress_with(store, live, row.id)? {
            views.push(JobView { row, progress });
        }
    }
    Ok(views)
}

/// One page of a listing.
#[derive(Clone, Debug)]
pub struct JobPage {
    pub jobs: Vec<JobView>,
    /// Whether more jobs match after the last one of this page.
    pub more: bool,
}

/// A page of rows before progress is attached.
pub(super) struct RowPage {
    pub jobs: Vec<JobRow>,
    pub more: bool,
}

/// Why a listing could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("the page continues after job {0}, which this host does not have")]
    UnknownAnchor(JobId),
    #[error("job store: {0}")]
    Store(#[from] StoreError),
}

impl JobQuery {
    fn filters_tasks(&self) -> bool {
        !self.states.is_empty() || !self.plugin.is_empty() || !self.asset.is_empty()
    }

    fn matches_time(&self, job: &JobRow) -> bool {
        (self.created_after_ms == 0 || job.created_ms >= self.created_after_ms)
            && (self.created_before_ms == 0 || job.created_ms < self.created_before_ms)
    }

    fn matches_tasks(&self, tasks: &[TaskRow]) -> bool {
        (self.states.is_empty() || tasks.iter().any(|t| self.states.contains(&t.state)))
            && (self.plugin.is_empty() || tasks.iter().any(|t| t.plugin == self.plugin))
            && (self.asset.is_empty() || tasks.iter().any(|t| t.asset == self.asset))
    }

    /// Orders `jobs`, skips to after the anchor, and takes one page of those
    /// that match; `tasks_of` is asked only when a task filter is set.
    pub(super) fn select(
        &self,
        mut jobs: Vec<JobRow>,
        tasks_of: impl Fn(JobId) -> Result<Vec<TaskRow>, StoreError>,
    ) -> Result<RowPage, ListError> {
        match self.order {
            JobOrder::OldestFirst => jobs.sort_by_key(|j| j.id),
            JobOrder::Name => jobs.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id))),
            JobOrder::NewestFirst => jobs.sort_by_key(|j| std::cmp::Reverse(j.id)),
        }
        let start = match self.after_job {
            None => 0,
            Some(anchor) => {
                jobs.iter()
                    .position(|j| j.id == anchor)
                    .ok_or(ListError::UnknownAnchor(anchor))?
                    + 1
            }
        };
        let page_size = self.page_size.max(1);
        let mut page = Vec::new();
        let mut more = false;
        for job in jobs.into_iter().skip(start) {
            if !self.matches_time(&job) {
                continue;
            }
            if self.filters_tasks() && !self.matches_tasks(&tasks_of(job.id)?) {
                continue;
            }
            if page.len() == page_size {
                more = true;
                break;
            }
            page.push(job);
        }
        Ok(RowPage { jobs: page, more })
    }
}
