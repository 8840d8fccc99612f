//! `tli train watch JOB`: follows WatchTraining until the job finishes.
//!
//! On a terminal (stderr) it draws a bar for the cost-weighted total and one
//! bar per task (at most [`MAX_TASK_BARS`]; with more tasks the bars show the
//! running ones first), and prints state changes and host log lines above
//! them. Without a terminal it prints the same lines plus a plain progress
//! line at most every [`PLAIN_INTERVAL`], and only when it changed. With `-o json` every event is also
//! one JSON line on stdout (NDJSON).
//!
//! A running task's routine checkpoints (`running → checkpointing → running`)
//! are shown only with `--verbose`, in both forms: with the default policy
//! they come every few minutes per task and would scroll the view away. The
//! transitions that end a task always show, from the state last shown: the
//! final checkpoint's `checkpointing → completed` reads `running →
//! completed` unless `--verbose` showed the `running → checkpointing` before.
//!
//! A host that is lost mid-watch (killed, the network gone) is reached again
//! and the job followed on, for as long as one call may wait (`--timeout`);
//! a host that ends the stream itself (a clean shutdown) ends the watch.

use super::{api_error, Remote};
use crate::args::OutputFormat;
use crate::render::{
    format_percent, headline_metric, paint, print_job, state_counts, stderr_colours, tone,
};
use crate::view::{print_json_line, EventJson, JobJson, TaskJson, WireState};
use anyhow::{bail, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use tli_core::state::TaskState;
use tli_proto::v1::{watch_training_response::Event, WatchTrainingRequest};

/// Task bars drawn at most; beyond this the bars follow the busiest tasks.
const MAX_TASK_BARS: usize = 12;
/// Plain progress lines (no terminal) at most this often.
const PLAIN_INTERVAL: Duration = Duration::from_secs(2);
/// Resolution of the total bar (weighted_fraction × this).
const TOTAL_SCALE: u64 = 1000;

pub(super) async fn watch(
    remote: &Remote,
    job_id: u64,
    interval_ms: u32,
    verbose: bool,
    output: OutputFormat,
) -> Result<()> {
    watch_with(remote, job_id, interval_ms, verbose, output, true).await
}

/// Progress bars and state changes on stderr only, nothing on stdout (for a
/// command that prints its own result when the job is done).
pub(super) async fn watch_progress(remote: &Remote, job_id: u64) -> Result<()> {
    watch_with(remote, job_id, 0, false, OutputFormat::Table, false).await
}

/// A status that says the connection to the host was lost (the host died,
/// the network went away), not an answer from it: it carries the transport
/// error as its source, where an answer from the host has none.
fn connection_lost(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_some()
}

/// First pause between tries to reach a host that was lost; doubled up to
/// [`RECONNECT_MAX_PAUSE`].
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
const RECONNECT_MAX_PAUSE: Duration = Duration::from_secs(5);

async fn watch_with(
    remote: &Remote,
    job_id: u64,
    interval_ms: u32,
    verbose: bool,
    output: OutputFormat,
    table_at_end: bool,
) -> Result<()> {
    let mut view = WatchView::new(job_id, output == OutputFormat::Json, verbose);
    view.table_at_end = table_at_end;
    // A host that dies (or a network that drops) is followed again once it
    // answers, for as long as one call may wait (`--timeout`); a host that
    // ends the stream itself (a clean shutdown) ends the watch.
    let patience = remote.channel.limit();
    let mut lost: Option<(Instant, Duration)> = None;
    loop {
        let request = WatchTrainingRequest {
            job_id,
            interval_ms,
        };
        let mut stream = match remote.training().watch_training(request).await {
            Ok(stream) => {
                if lost.take().is_some() {
                    view.line(&format!(
                        "reconnected to the host; following job {job_id} again"
                    ));
                }
                stream.into_inner()
            }
            Err(status) => match lost.as_mut() {
                Some((since, pause)) if connection_lost(&status) => {
                    if since.elapsed() >= patience {
                        view.clear();
                        bail!(
                            "lost the host and could not reach it again within {} s: {}; \
                             follow job {job_id} again with `tli train watch {job_id}` once it \
                             runs (or give it longer with --timeout)",
                            patience.as_secs(),
                            api_error(remote, status)
                        );
                    }
                    tokio::time::sleep(*pause).await;
                    *pause = (*pause * 2).min(RECONNECT_MAX_PAUSE);
                    continue;
                }
                _ => {
                    view.clear();
                    return Err(api_error(remote, status));
                }
            },
        };
        loop {
            match stream.message().await {
                Ok(Some(message)) => {
                    let Some(event) = message.event else { continue };
                    if let Some(job) = view.handle(&event)? {
                        return view.finish(&job);
                    }
                }
                Ok(None) => {
                    view.clear();
                    bail!(
                        "the host ended the stream before job {job_id} finished (is it shutting \
                         down?); follow it again with `tli train watch {job_id}`"
                    );
                }
                Err(status) if connection_lost(&status) => {
                    view.line(&format!(
                        "lost the host ({}); reconnecting for up to {} s",
                        api_error(remote, status),
                        patience.as_secs()
                    ));
                    lost = Some((Instant::now(), RECONNECT_PAUSE));
                    break;
                }
                Err(status) => {
                    view.clear();
                    return Err(api_error(remote, status));
                }
            }
        }
    }
}

struct Bars {
    multi: MultiProgress,
    total: ProgressBar,
    slots: Vec<ProgressBar>,
    style: ProgressStyle,
}

struct WatchView {
    job_id: u64,
    json: bool,
    /// Show routine checkpoint transitions too.
    verbose: bool,
    colours: bool,
    bars: Option<Bars>,
    /// When the last plain progress line was printed, and what it said.
    last_plain: Option<(Instant, String)>,
    weighted_fraction: f64,
    tasks: BTreeMap<u64, TaskJson>,
    /// Each task's state as the last shown line left it.
    shown: BTreeMap<u64, WireState>,
    /// Print the final task table on stdout (tables only).
    table_at_end: bool,
}

impl WatchView {
    fn new(job_id: u64, json: bool, verbose: bool) -> Self {
        let bars = std::io::stderr().is_terminal().then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let total = multi.add(ProgressBar::new(TOTAL_SCALE));
            total.set_style(
                ProgressStyle::with_template(
                    "{prefix:.bold} {bar:32.green/white} {percent:>3}% {msg}",
                )
                .expect("a valid template")
                .progress_chars("█▉▊▋▌▍▎▏ "),
            );
            total.set_prefix(format!("job {job_id}"));
            total.set_message("waiting for progress…");
            let style =
                ProgressStyle::with_template("{prefix} {bar:32.cyan/blue} {pos}/{len} {msg}")
                    .expect("a valid template")
                    .progress_chars("█▉▊▋▌▍▎▏ ");
            Bars {
                multi,
                total,
                slots: Vec::new(),
                style,
            }
        });
        Self {
            job_id,
            json,
            verbose,
            colours: stderr_colours(),
            bars,
            last_plain: None,
            weighted_fraction: 0.0,
            tasks: BTreeMap::new(),
            shown: BTreeMap::new(),
            table_at_end: true,
        }
    }

    /// A human line on stderr, above the bars when there are any.
    fn line(&self, text: &str) {
        match &self.bars {
            Some(bars) => {
                let _ = bars.multi.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    /// One NDJSON line on stdout, without tearing the bars on stderr.
    fn emit(&self, event: &EventJson) -> Result<()> {
        match &self.bars {
            Some(bars) => bars.multi.suspend(|| print_json_line(event)),
            None => print_json_line(event),
        }
    }

    /// Applies one event; returns the job once it has finished.
    fn handle(&mut self, event: &Event) -> Result<Option<JobJson>> {
        let shown = match event {
            Event::StateChanged(c) => self.verbose || !is_routine_checkpoint(c.from, c.to),
            _ => true,
        };
        if self.json && shown {
            self.emit(&EventJson::from(event))?;
        }
        match event {
            Event::Progress(p) => {
                self.weighted_fraction = p.weighted_fraction;
                for t in &p.tasks {
                    self.tasks.insert(t.task_id, t.into());
                }
                self.render();
            }
            Event::StateChanged(c) => {
                let to = WireState::from_proto(c.to);
                let from = WireState::from_proto(c.from);
                if let Some(t) = self.tasks.get_mut(&c.task_id) {
                    t.state = to;
                }
                if !shown {
                    self.render_bars();
                    return Ok(None);
                }
                let text = self.transition_text(c.task_id, from, to, &c.reason);
                self.line(&text);
                self.render_bars();
            }
            Event::Log(l) => {
                let level = if l.level.is_empty() { "info" } else { &l.level };
                let text = match l.task_id {
                    0 => format!("[{level}] {}", l.message),
                    task => format!("[{level}] task {task} ({}): {}", l.plugin, l.message),
                };
                self.line(&text);
            }
            Event::Finished(job) => return Ok(Some(job.into())),
        }
        Ok(None)
    }

    /// The line of a shown transition: from the state the last shown line
    /// left the task in (a hidden checkpoint's `checkpointing` is not one).
    fn transition_text(
        &mut self,
        task: u64,
        from: WireState,
        to: WireState,
        reason: &str,
    ) -> String {
        let from = self.shown.insert(task, to).unwrap_or(from);
        let to_text = paint(to.name(), tone(to), self.colours);
        let mut text = if from == WireState::Unspecified {
            format!("task {task}: {to_text}")
        } else {
            format!("task {task}: {} → {to_text}", from.name())
        };
        if !reason.is_empty() {
            text.push_str(&format!(" ({reason})"));
        }
        text
    }

    fn summary(&self) -> String {
        let tasks: Vec<TaskJson> = self.tasks.values().cloned().collect();
        state_counts(&tasks)
    }

    fn render(&mut self) {
        if self.bars.is_some() {
            self.render_bars();
        } else if self
            .last_plain
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= PLAIN_INTERVAL)
        {
            let (done, total) = self
                .tasks
                .values()
                .fold((0, 0), |(d, t), x| (d + x.steps_done, t + x.total_steps));
            let line = format!(
                "job {}: {} ({}; {done}/{total} steps)",
                self.job_id,
                format_percent(self.weighted_fraction),
                self.summary()
            );
            // Only what changed: a job waiting in the queue is one line, not one per poll.
            if self
                .last_plain
                .as_ref()
                .is_none_or(|(_, last)| *last != line)
            {
                eprintln!("{line}");
                self.last_plain = Some((Instant::now(), line));
            }
        }
    }

    /// Which tasks get a bar: all of them when they fit, else the busiest.
    fn shown_tasks(&self) -> Vec<&TaskJson> {
        let mut shown: Vec<&TaskJson> = self.tasks.values().collect();
        if shown.len() > MAX_TASK_BARS {
            let rank = |t: &TaskJson| match t.state {
                WireState::Known(TaskState::Running | TaskState::Checkpointing) => 0,
                WireState::Known(TaskState::Queued | TaskState::Interrupted) => 1,
                _ => 2,
            };
            shown.sort_by_key(|t| (rank(t), t.task_id));
            shown.truncate(MAX_TASK_BARS);
            shown.sort_by_key(|t| t.task_id);
        }
        shown
    }

    fn render_bars(&mut self) {
        let Some(bars) = &self.bars else { return };
        let shown = self.shown_tasks();
        let prefixes: Vec<String> = shown
            .iter()
            .map(|t| format!("task {} {}", t.task_id, t.plugin))
            .collect();
        let width = prefixes
            .iter()
            .map(|p| p.chars().count())
            .max()
            .unwrap_or(0);
        let mut new_slots = Vec::new();
        for (i, (t, prefix)) in shown.iter().zip(&prefixes).enumerate() {
            let bar = match bars.slots.get(i) {
                Some(bar) => bar.clone(),
                None => {
                    let bar = bars.multi.add(ProgressBar::new(t.total_steps));
                    bar.set_style(bars.style.clone());
                    new_slots.push(bar.clone());
                    bar
                }
            };
            bar.set_prefix(format!("{prefix:<width$}"));
            bar.set_length(t.total_steps.max(1));
            bar.set_position(t.steps_done.min(t.total_steps.max(1)));
            let mut message = paint(t.state.name(), tone(t.state), self.colours);
            if let Some(metric) = headline_metric(&t.metrics) {
                message.push(' ');
                message.push_str(&metric);
            }
            bar.set_message(message);
        }
        let position = (self.weighted_fraction.clamp(0.0, 1.0) * TOTAL_SCALE as f64).round() as u64;
        bars.total.set_position(position);
        let hidden = self.tasks.len().saturating_sub(shown.len());
        let mut message = if self.tasks.is_empty() {
            "waiting for progress…".to_string()
        } else {
            self.summary()
        };
        if hidden > 0 {
            message.push_str(&format!(" ({hidden} task(s) without a bar)"));
        }
        bars.total.set_message(message);
        if let Some(bars) = &mut self.bars {
            bars.slots.extend(new_slots);
        }
    }

    /// Removes the bars for good (a dropped bar would otherwise draw again).
    fn clear(&self) {
        if let Some(bars) = &self.bars {
            for bar in bars.slots.iter().chain([&bars.total]) {
                bar.finish_and_clear();
            }
            let _ = bars.multi.clear();
        }
    }

    /// Prints the final state; an error (exit 1) unless every task completed.
    fn finish(&mut self, job: &JobJson) -> Result<()> {
        self.clear();
        if !self.json && self.table_at_end {
            print_job(job);
        }
        let unfinished: Vec<String> = job
            .progress
            .tasks
            .iter()
            .filter(|t| t.state != WireState::Known(TaskState::Completed))
            .map(|t| match &t.error {
                Some(e) => format!("task {} {} ({e})", t.task_id, t.state),
                None => format!("task {} {}", t.task_id, t.state),
            })
            .collect();
        if !unfinished.is_empty() {
            bail!(
                "job {} did not complete: {}",
                job.job_id,
                unfinished.join("; ")
            );
        }
        Ok(())
    }
}

/// `running → checkpointing` and `checkpointing → running`: a running task's
/// checkpoint (what follows a final or stop checkpoint is the task's end).
fn is_routine_checkpoint(from: i32, to: i32) -> bool {
    use TaskState::{Checkpointing, Running};
    matches!(
        (WireState::from_proto(from), WireState::from_proto(to)),
        (WireState::Known(Running), WireState::Known(Checkpointing))
            | (WireState::Known(Checkpointing), WireState::Known(Running))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tli_proto::v1::TaskState as Pb;

    #[test]
    fn a_final_checkpoint_reads_from_the_state_last_shown() {
        use Pb::{Checkpointing, Completed, Queued, Running};
        for (verbose, expected) in [
            (false, "task 7: running → completed (done)"),
            (true, "task 7: checkpointing → completed (done)"),
        ] {
            let mut view = WatchView::new(1, true, verbose);
            view.colours = false;
            let mut lines = Vec::new();
            for (from, to, reason) in [
                (Queued, Running, "started"),
                (Running, Checkpointing, "routine"),
                (Checkpointing, Running, ""),
                (Running, Checkpointing, "final"),
                (Checkpointing, Completed, "done"),
            ] {
                let (from, to) = (from as i32, to as i32);
                if verbose || !is_routine_checkpoint(from, to) {
                    let (from, to) = (WireState::from_proto(from), WireState::from_proto(to));
                    lines.push(view.transition_text(7, from, to, reason));
                }
            }
            assert_eq!(
                lines.first().map(String::as_str),
                Some("task 7: queued → running (started)")
            );
            assert_eq!(
                lines.last().map(String::as_str),
                Some(expected),
                "{lines:?}"
            );
            assert_eq!(lines.len(), if verbose { 5 } else { 2 }, "{lines:?}");
        }
    }
}
