//! `WatchTraining` streams, fed by one poller per watched job.
//!
//! However many clients watch a job, one feed task reads it: every interval
//! (the shortest any of its watchers asked for) it reads the job's new state
//! changes from the store and its progress (running tasks' steps and metrics
//! from memory, [`LiveProgress`](tli_runtime::orchestrator::live::LiveProgress)), and broadcasts
//! them; in between it forwards the job's plugin log lines as they come.
//! The feed ends when the job has finished or nobody watches any more.
//!
//! Each stream first sends a snapshot of its own (every state change so far
//! and the progress), then follows the feed, skipping state changes it has
//! already sent (transition ids grow with time) and sending progress no more
//! often than its own interval. A stream that falls behind the feed, or
//! whose feed ended, takes a fresh snapshot and joins again, so it loses no
//! state change. Streams end with `finished`, when the client goes away, or
//! with UNAVAILABLE when the host shuts down.

use super::convert::{self, store_error};
use super::{blocking, shutting_down};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tli_proto::v1 as pb;
use tli_proto::v1::watch_training_response::Event;
use tli_runtime::orchestrator::engine::Orchestrator;
use tli_runtime::orchestrator::live::TaskLog;
use tli_runtime::orchestrator::JobId;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

/// Items buffered per feed for its slowest watcher before it must resync.
const FEED_CAPACITY: usize = 256;

/// What a feed broadcasts.
#[derive(Clone)]
enum FeedItem {
    /// New state changes, by transition id.
    Changes(Arc<Vec<(i64, pb::TaskStateChanged)>>),
    /// The job's progress; with the job itself when every task has finished.
    Progress(Arc<pb::JobProgress>, Option<Arc<pb::Job>>),
    Log(Arc<pb::LogLine>),
    /// Reading the job failed (e.g. the store): every stream ends with it.
    Failed(Status),
}

struct JobFeed {
    tx: broadcast::Sender<FeedItem>,
    /// Each joined stream's interval, by stream number.
    intervals: Mutex<HashMap<u64, Duration>>,
}

impl JobFeed {
    fn intervals(&self) -> MutexGuard<'_, HashMap<u64, Duration>> {
        self.intervals.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shortest interval any stream asked for.
    fn interval(&self, fallback: Duration) -> Duration {
        self.intervals().values().copied().min().unwrap_or(fallback)
    }
}

/// All feeds of a host.
pub struct WatchHub {
    orchestrator: Arc<Orchestrator>,
    shutdown: watch::Receiver<bool>,
    feeds: Mutex<HashMap<JobId, Arc<JobFeed>>>,
    next_stream: Mutex<u64>,
}

/// A stream's membership in a feed; leaving drops its interval.
struct Membership {
    feed: Arc<JobFeed>,
    stream: u64,
    rx: broadcast::Receiver<FeedItem>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.feed.intervals().remove(&self.stream);
    }
}

impl WatchHub {
    pub fn new(orchestrator: Arc<Orchestrator>, shutdown: watch::Receiver<bool>) -> Arc<Self> {
        Arc::new(Self {
            orchestrator,
            shutdown,
            feeds: Mutex::new(HashMap::new()),
            next_stream: Mutex::new(0),
        })
    }

    fn feeds(&self) -> MutexGuard<'_, HashMap<JobId, Arc<JobFeed>>> {
        self.feeds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a stream for `job` (checked to exist) sending into `tx`.
    pub fn watch(
        self: &Arc<Self>,
        job: JobId,
        interval: Duration,
        tx: mpsc::Sender<Result<pb::WatchTrainingResponse, Status>>,
    ) {
        let stream = {
            let mut next = self.next_stream.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        tokio::spawn(self.clone().run_stream(job, stream, interval, tx));
    }

    /// Joins the job's feed, starting it if nobody watches the job yet.
    fn join(self: &Arc<Self>, job: JobId, stream: u64, interval: Duration) -> Membership {
        let mut feeds = self.feeds();
        let feed = feeds
            .entry(job)
            .or_insert_with(|| {
                let feed = Arc::new(JobFeed {
                    tx: broadcast::channel(FEED_CAPACITY).0,
                    intervals: Mutex::new(HashMap::new()),
                });
                tokio::spawn(self.clone().run_feed(job, feed.clone(), interval));
                feed
            })
            .clone();
        feed.intervals().insert(stream, interval);
        let rx = feed.tx.subscribe();
        Membership { feed, stream, rx }
    }

    /// Removes the job's feed if it is `feed` and, unless `finished`,
    /// nobody listens any more. Returns whether it was removed.
    fn leave_if_unwatched(&self, job: JobId, feed: &Arc<JobFeed>, finished: bool) -> bool {
        let mut feeds = self.feeds();
        if !finished && feed.tx.receiver_count() > 0 {
            return false;
        }
        if feeds.get(&job).is_some_and(|f| Arc::ptr_eq(f, feed)) {
            feeds.remove(&job);
        }
        true
    }

    /// The poller of one job.
    async fn run_feed(self: Arc<Self>, job: JobId, feed: Arc<JobFeed>, first_interval: Duration) {
        let mut logs = self.orchestrator.live().subscribe_logs();
        let mut shutdown = self.shutdown.clone();
        let mut last_change = i64::MIN;
        let mut logs_open = true;
        loop {
            let o = self.orchestrator.clone();
            let read = blocking(move || read_job(&o, job, last_change)).await;
            let finished = match read {
                Ok(snapshot) => {
                    if let Some((id, _)) = snapshot.changes.last() {
                        last_change = *id;
                    }
                    if !snapshot.changes.is_empty() {
                        let _ = feed.tx.send(FeedItem::Changes(Arc::new(snapshot.changes)));
                    }
                    let finished = snapshot.finished.map(Arc::new);
                    let done = finished.is_some();
                    let _ = feed
                        .tx
                        .send(FeedItem::Progress(Arc::new(snapshot.progress), finished));
                    done
                }
                Err(status) => {
                    let _ = feed.tx.send(FeedItem::Failed(status));
                    true
                }
            };
            if self.leave_if_unwatched(job, &feed, finished) {
                return;
            }
            let deadline = Instant::now() + feed.interval(first_interval);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = shutdown.wait_for(|&s| s) => {
                        self.leave_if_unwatched(job, &feed, true);
                        return;
                    }
                    line = logs.recv(), if logs_open => match line {
                        Ok(line) if line.job == job => {
                            let _ = feed.tx.send(FeedItem::Log(Arc::new(log_line(&line))));
                        }
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            let _ = feed.tx.send(FeedItem::Log(Arc::new(dropped_lines(n))));
                        }
                        // The orchestrator is gone; only polling is left.
                        Err(broadcast::error::RecvError::Closed) => logs_open = false,
                    },
                }
            }
        }
    }

    /// One client's stream.
    async fn run_stream(
        self: Arc<Self>,
        job: JobId,
        stream: u64,
        interval: Duration,
        tx: mpsc::Sender<Result<pb::WatchTrainingResponse, Status>>,
    ) {
        let mut shutdown = self.shutdown.clone();
        let mut sender = StreamSender {
            tx: &tx,
            last_change: i64::MIN,
            last_progress: None,
            interval,
        };
        loop {
            // Join first, then read: nothing that happens in between is missed.
            let mut membership = self.join(job, stream, interval);
            let o = self.orchestrator.clone();
            let after = sender.last_change;
            let snapshot = tokio::select! {
                read = blocking(move || read_job(&o, job, after)) => read,
                _ = shutdown.wait_for(|&s| s) => break,
                _ = tx.closed() => return,
            };
            let item = match snapshot {
                Ok(s) => {
                    let finished = s.finished.map(Arc::new);
                    if !s.changes.is_empty() {
                        if let Flow::Stop = sender.changes(&s.changes).await {
                            return;
                        }
                    }
                    sender.last_progress = None; // a snapshot's progress always goes out
                    FeedItem::Progress(Arc::new(s.progress), finished)
                }
                Err(status) => FeedItem::Failed(status),
            };
            let mut next = Some(Ok(item));
            loop {
                let item = match next.take() {
                    Some(item) => item,
                    None => tokio::select! {
                        item = membership.rx.recv() => item,
                        _ = shutdown.wait_for(|&s| s) => break,
                        _ = tx.closed() => return,
                    },
                };
                let flow = match item {
                    Ok(item) => {
                        tokio::select! {
                            flow = sender.item(item) => flow,
                            _ = shutdown.wait_for(|&s| s) => break,
                        }
                    }
                    // Fell behind, or the feed ended (e.g. it saw the job
                    // finish before we joined): take a fresh snapshot.
                    Err(_) => Flow::Resync,
                };
                match flow {
                    Flow::Go => {}
                    Flow::Stop => return,
                    Flow::Resync => break,
                }
            }
            if *shutdown.borrow() {
                break;
            }
        }
        // Shutting down: end the stream now so the server need not wait for it.
        let _ = tx.try_send(Err(shutting_down()));
    }
}

enum Flow {
    Go,
    Stop,
    Resync,
}

/// Sends one stream's events, skipping what it already sent.
struct StreamSender<'a> {
    tx: &'a mpsc::Sender<Result<pb::WatchTrainingResponse, Status>>,
    last_change: i64,
    last_progress: Option<Instant>,
    interval: Duration,
}

impl StreamSender<'_> {
    async fn send(&self, event: Event) -> Flow {
        match self
            .tx
            .send(Ok(pb::WatchTrainingResponse { event: Some(event) }))
            .await
        {
            Ok(()) => Flow::Go,
            Err(_) => Flow::Stop,
        }
    }

    async fn changes(&mut self, changes: &[(i64, pb::TaskStateChanged)]) -> Flow {
        for (id, change) in changes {
            if *id <= self.last_change {
                continue;
            }
            self.last_change = *id;
            if let Flow::Stop = self.send(Event::StateChanged(change.clone())).await {
                return Flow::Stop;
            }
        }
        Flow::Go
    }

    async fn item(&mut self, item: FeedItem) -> Flow {
        match item {
            FeedItem::Changes(changes) => self.changes(&changes).await,
            FeedItem::Progress(progress, finished) => {
                let due = self
                    .last_progress
                    .is_none_or(|at| at.elapsed() >= self.interval);
                if due || finished.is_some() {
                    self.last_progress = Some(Instant::now());
                    if let Flow::Stop = self.send(Event::Progress((*progress).clone())).await {
                        return Flow::Stop;
                    }
                }
                match finished {
                    Some(job) => {
                        let _ = self.send(Event::Finished((*job).clone())).await;
                        Flow::Stop
                    }
                    None => Flow::Go,
                }
            }
            FeedItem::Log(line) => self.send(Event::Log((*line).clone())).await,
            FeedItem::Failed(status) => {
                let _ = self.tx.send(Err(status)).await;
                Flow::Stop
            }
        }
    }
}

/// What one read of a job found.
struct JobSnapshot {
    /// State changes after the given id, with their ids.
    changes: Vec<(i64, pb::TaskStateChanged)>,
    progress: pb::JobProgress,
    /// The job, when every task has finished.
    finished: Option<pb::Job>,
}

fn read_job(o: &Orchestrator, job: JobId, after_change: i64) -> Result<JobSnapshot, Status> {
    let not_found = || Status::not_found(format!("job {job} not found"));
    let row = o.job(job).map_err(store_error)?.ok_or_else(not_found)?;
    // Progress first: every state change up to this moment is read below,
    // so a finished job's changes all go out before `finished`.
    let progress = o
        .job_progress(job)
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    let changes = o
        .job_transitions_after(job, after_change)
        .map_err(store_error)?
        .iter()
        .map(|t| (t.id, convert::state_changed(job, t)))
        .collect();
    let finished = progress
        .is_finished()
        .then(|| convert::job(&row, &progress));
    Ok(JobSnapshot {
        changes,
        progress: convert::job_progress(&progress),
        finished,
    })
}

fn log_line(line: &TaskLog) -> pb::LogLine {
    pb::LogLine {
        level: line.level.to_string(),
        message: line.message.clone(),
        at_unix_ms: line.at_ms,
        task_id: convert::id_to_proto(line.task),
        plugin: line.plugin.clone(),
    }
}

fn dropped_lines(n: u64) -> pb::LogLine {
    pb::LogLine {
        level: "warn".into(),
        message: format!("{n} plugin log lines were dropped: the host produced them faster than this stream took them"),
        at_unix_ms: tli_runtime::orchestrator::now_ms(),
        task_id: 0,
        plugin: String::new(),
    }
}
