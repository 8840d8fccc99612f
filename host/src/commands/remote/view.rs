//! What the client prints: the stable JSON shapes (our own serde structs, not
//! the generated proto types), the tables, and state colours.

use super::super::new_table;
use super::request::state_name;
use crate::units::format_bytes;
use comfy_table::{Cell, Color, Table};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use tli_proto::v1 as pb;

/// A job (`train start|status|stop|resume`, the items of `train list`, the
/// `finished` event of `train watch`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct JobJson {
    pub job_id: u64,
    pub name: String,
    pub created_unix_ms: i64,
    pub progress: ProgressJson,
}

/// A job's progress (in a job, and the `progress` event of `train watch`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct ProgressJson {
    pub job_id: u64,
    pub weighted_fraction: f64,
    pub tasks: Vec<TaskJson>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct TaskJson {
    pub task_id: u64,
    pub plugin: String,
    pub asset: String,
    pub state: &'static str,
    pub steps_done: u64,
    pub total_steps: u64,
    pub steps_per_second: f64,
    pub eta_seconds: Option<f64>,
    pub metrics: BTreeMap<String, f64>,
    pub error: Option<String>,
    pub estimate_bytes: u64,
    pub measured_bytes: Option<u64>,
}

/// One line of `train watch -o json` (and of `train start --watch -o json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(super) enum EventJson {
    Started {
        job: JobJson,
    },
    Progress(ProgressJson),
    StateChanged {
        job_id: u64,
        task_id: u64,
        from: &'static str,
        to: &'static str,
        reason: String,
        at_unix_ms: i64,
    },
    Log {
        level: String,
        message: String,
        at_unix_ms: i64,
        /// 0 for a note from the host about the stream itself.
        task_id: u64,
        plugin: String,
    },
    Finished {
        job: JobJson,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct ListJson {
    pub jobs: Vec<JobJson>,
    pub next_page_token: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct ResourcesJson {
    pub devices: Vec<DeviceJson>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct DeviceJson {
    pub name: String,
    pub budget_bytes: u64,
    pub reserved_bytes: u64,
    pub strategy: String,
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub reservations: Vec<ReservationJson>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct ReservationJson {
    pub task_id: u64,
    pub reserved_bytes: u64,
    pub measured_bytes: Option<u64>,
}

impl From<&pb::TaskProgress> for TaskJson {
    fn from(t: &pb::TaskProgress) -> Self {
        Self {
            task_id: t.task_id,
            plugin: t.plugin.clone(),
            asset: t.asset.clone(),
            state: state_name(t.state),
            steps_done: t.steps_done,
            total_steps: t.total_steps,
            steps_per_second: t.steps_per_second,
            eta_seconds: t.eta_seconds,
            metrics: t
                .metrics
                .iter()
                .map(|m| (m.name.clone(), m.value))
                .collect(),
            error: (!t.error.is_empty()).then(|| t.error.clone()),
            estimate_bytes: t.estimate_bytes,
            measured_bytes: t.measured_bytes,
        }
    }
}

impl From<&pb::JobProgress> for ProgressJson {
    fn from(p: &pb::JobProgress) -> Self {
        Self {
            job_id: p.job_id,
            weighted_fraction: p.weighted_fraction,
            tasks: p.tasks.iter().map(TaskJson::from).collect(),
        }
    }
}

impl From<&pb::Job> for JobJson {
    fn from(j: &pb::Job) -> Self {
        let progress = j.progress.clone().unwrap_or_default();
        Self {
            job_id: j.job_id,
            name: j.name.clone(),
            created_unix_ms: j.created_unix_ms,
            progress: ProgressJson {
                // The job's own id even when the host left this one unset.
                job_id: j.job_id,
                ..ProgressJson::from(&progress)
            },
        }
    }
}

impl From<&pb::watch_training_response::Event> for EventJson {
    fn from(e: &pb::watch_training_response::Event) -> Self {
        use pb::watch_training_response::Event;
        match e {
            Event::Progress(p) => Self::Progress(p.into()),
            Event::StateChanged(c) => Self::StateChanged {
                job_id: c.job_id,
                task_id: c.task_id,
                from: state_name(c.from),
                to: state_name(c.to),
                reason: c.reason.clone(),
                at_unix_ms: c.at_unix_ms,
            },
            Event::Log(l) => Self::Log {
                level: l.level.clone(),
                message: l.message.clone(),
                at_unix_ms: l.at_unix_ms,
                task_id: l.task_id,
                plugin: l.plugin.clone(),
            },
            Event::Finished(j) => Self::Finished { job: j.into() },
        }
    }
}

impl From<&pb::GetResourcesResponse> for ResourcesJson {
    fn from(r: &pb::GetResourcesResponse) -> Self {
        Self {
            devices: r
                .devices
                .iter()
                .map(|d| DeviceJson {
                    name: d.name.clone(),
                    budget_bytes: d.budget_bytes,
                    reserved_bytes: d.reserved_bytes,
                    strategy: d.strategy.clone(),
                    total_bytes: d.total_bytes,
                    free_bytes: d.free_bytes,
                    reservations: d
                        .reservations
                        .iter()
                        .map(|r| ReservationJson {
                            task_id: r.task_id,
                            reserved_bytes: r.reserved_bytes,
                            measured_bytes: r.measured_bytes,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Prints one value as a single JSON line (NDJSON) on stdout.
pub(super) fn print_json_line<T: Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

// ---- colours ----

/// Colour for one state: green done, yellow in progress or waiting, red failed,
/// grey stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tone {
    Good,
    Busy,
    Bad,
    Muted,
    Plain,
}

pub(super) fn tone(state: &str) -> Tone {
    match state {
        "completed" => Tone::Good,
        "running" | "checkpointing" | "queued" => Tone::Busy,
        "failed" => Tone::Bad,
        "cancelled" | "interrupted" => Tone::Muted,
        _ => Tone::Plain,
    }
}

/// Colours only for a terminal, and never when NO_COLOR is set.
fn colours_for(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none()
}

pub(super) fn stdout_colours() -> bool {
    colours_for(std::io::stdout().is_terminal())
}

pub(super) fn stderr_colours() -> bool {
    colours_for(std::io::stderr().is_terminal())
}

/// `text` in the tone's ANSI colour when `on`.
pub(super) fn paint(text: &str, tone: Tone, on: bool) -> String {
    let code = match tone {
        Tone::Good => "32",
        Tone::Busy => "33",
        Tone::Bad => "31",
        Tone::Muted => "90",
        Tone::Plain => return text.to_string(),
    };
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

fn cell(text: impl Into<String>, tone: Tone, on: bool) -> Cell {
    let cell = Cell::new(text.into());
    let colour = match tone {
        Tone::Good => Color::Green,
        Tone::Busy => Color::Yellow,
        Tone::Bad => Color::Red,
        Tone::Muted => Color::DarkGrey,
        Tone::Plain => return cell,
    };
    if on {
        cell.fg(colour)
    } else {
        cell
    }
}

// ---- formatting ----

pub(super) fn format_percent(fraction: f64) -> String {
    format!("{:.1}%", fraction.clamp(0.0, 1.0) * 100.0)
}

pub(super) fn format_eta(seconds: Option<f64>) -> String {
    let Some(s) = seconds.filter(|s| s.is_finite() && *s >= 0.0) else {
        return "-".into();
    };
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// `2025-11-30 13:40:02 UTC` from Unix milliseconds.
pub(super) fn format_time(unix_ms: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(unix_ms.div_euclid(1000)) {
        Ok(t) if unix_ms > 0 => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        _ => "-".into(),
    }
}

/// Metrics shown in a table cell at most (`-o json` has them all).
const TABLE_METRICS: usize = 4;

/// The first few metrics for a table: losses, then skills, then the rest
/// (each group by name), and how many were left out.
pub(super) fn format_metrics(metrics: &BTreeMap<String, f64>) -> String {
    if metrics.is_empty() {
        return "-".into();
    }
    let rank = |name: &str| {
        if name.contains("loss") {
            0
        } else if name.contains("skill") {
            1
        } else {
            2
        }
    };
    let mut names: Vec<&String> = metrics.keys().collect();
    names.sort_by_key(|n| rank(n));
    let mut text = names
        .iter()
        .take(TABLE_METRICS)
        .map(|k| format!("{k}={}", format_value(metrics[*k])))
        .collect::<Vec<_>>()
        .join(" ");
    if names.len() > TABLE_METRICS {
        text.push_str(&format!(" (+{} more)", names.len() - TABLE_METRICS));
    }
    text
}

fn format_value(v: f64) -> String {
    if v != 0.0 && (v.abs() < 1e-3 || v.abs() >= 1e6) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

/// The metric a progress line shows: `train_loss`, else any `*loss*`, else the first.
pub(super) fn headline_metric(metrics: &BTreeMap<String, f64>) -> Option<String> {
    metrics
        .get_key_value("train_loss")
        .or_else(|| metrics.iter().find(|(k, _)| k.contains("loss")))
        .or_else(|| metrics.iter().next())
        .map(|(k, v)| format!("{k}={}", format_value(*v)))
}

/// `2 completed, 1 running`: finished work first, then active, then stopped,
/// in this fixed order so a live line does not jump around.
pub(super) fn state_counts(tasks: &[TaskJson]) -> String {
    const ORDER: [&str; 9] = [
        "completed",
        "running",
        "checkpointing",
        "queued",
        "failed",
        "cancelled",
        "interrupted",
        "unspecified",
        "unknown",
    ];
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for name in ORDER {
        let n = tasks.iter().filter(|t| t.state == name).count();
        if n > 0 {
            counts.push((name, n));
        }
    }
    if counts.is_empty() {
        return "no tasks".into();
    }
    counts
        .iter()
        .map(|(name, n)| format!("{n} {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The tone of a whole job: red if anything failed, yellow while anything is
/// queued or running, green when everything completed, grey otherwise.
pub(super) fn job_tone(tasks: &[TaskJson]) -> Tone {
    let any = |t: Tone| tasks.iter().any(|x| tone(x.state) == t);
    if tasks.is_empty() {
        Tone::Plain
    } else if any(Tone::Bad) {
        Tone::Bad
    } else if any(Tone::Busy) {
        Tone::Busy
    } else if tasks.iter().all(|t| t.state == "completed") {
        Tone::Good
    } else {
        Tone::Muted
    }
}

// ---- tables ----

/// `train start`: JOB, NAME, TASKS.
pub(super) fn started_table(job: &JobJson) -> Table {
    let mut table = new_table(vec!["JOB", "NAME", "TASKS"]);
    table.add_row(vec![
        job.job_id.to_string(),
        job.name.clone(),
        job.progress.tasks.len().to_string(),
    ]);
    table
}

/// `train status|stop|resume|watch`: one row per task.
pub(super) fn tasks_table(job: &JobJson) -> Table {
    let on = stdout_colours();
    let mut table = new_table(vec![
        "TASK", "PLUGIN", "ASSET", "STATE", "STEPS", "STEPS/S", "ETA", "METRICS",
    ]);
    for t in &job.progress.tasks {
        table.add_row(vec![
            Cell::new(t.task_id),
            Cell::new(&t.plugin),
            Cell::new(&t.asset),
            cell(t.state, tone(t.state), on),
            Cell::new(format!("{}/{}", t.steps_done, t.total_steps)),
            Cell::new(if t.steps_per_second > 0.0 {
                format!("{:.1}", t.steps_per_second)
            } else {
                "-".into()
            }),
            Cell::new(format_eta(t.eta_seconds)),
            Cell::new(format_metrics(&t.metrics)),
        ]);
    }
    table
}

/// The lines under a tasks table: the weighted progress and each task's error.
pub(super) fn job_summary(job: &JobJson) -> Vec<String> {
    let on = stdout_colours();
    let mut lines = vec![format!(
        "job {} ({}): {} done (weighted by estimated cost) · {}",
        job.job_id,
        job.name,
        format_percent(job.progress.weighted_fraction),
        state_counts(&job.progress.tasks)
    )];
    for t in job.progress.tasks.iter().filter(|t| t.error.is_some()) {
        lines.push(format!(
            "task {} {}: {}",
            t.task_id,
            paint(t.state, tone(t.state), on),
            t.error.as_deref().unwrap_or_default()
        ));
    }
    lines
}

pub(super) fn print_job(job: &JobJson) {
    println!("{}", tasks_table(job));
    for line in job_summary(job) {
        println!("{line}");
    }
}

/// `train list`: JOB, NAME, CREATED, TASKS, STATES, PROGRESS.
pub(super) fn jobs_table(jobs: &[JobJson]) -> Table {
    let on = stdout_colours();
    let mut table = new_table(vec![
        "JOB", "NAME", "CREATED", "TASKS", "STATES", "PROGRESS",
    ]);
    for j in jobs {
        table.add_row(vec![
            Cell::new(j.job_id),
            Cell::new(&j.name),
            Cell::new(format_time(j.created_unix_ms)),
            Cell::new(j.progress.tasks.len()),
            cell(
                state_counts(&j.progress.tasks),
                job_tone(&j.progress.tasks),
                on,
            ),
            Cell::new(format_percent(j.progress.weighted_fraction)),
        ]);
    }
    table
}

/// `resources`: a device table, and a reservations table when any.
pub(super) fn resources_tables(r: &ResourcesJson) -> Vec<Table> {
    let has_total = r.devices.iter().any(|d| d.total_bytes.is_some());
    let mut header = vec!["DEVICE", "BUDGET", "RESERVED", "STRATEGY"];
    if has_total {
        header.extend(["TOTAL", "FREE"]);
    }
    let opt = |b: Option<u64>| b.map_or_else(|| "-".to_string(), format_bytes);
    let mut devices = new_table(header);
    for d in &r.devices {
        let mut row = vec![
            d.name.clone(),
            format_bytes(d.budget_bytes),
            format_bytes(d.reserved_bytes),
            d.strategy.clone(),
        ];
        if has_total {
            row.extend([opt(d.total_bytes), opt(d.free_bytes)]);
        }
        devices.add_row(row);
    }
    let mut tables = vec![devices];
    if r.devices.iter().any(|d| !d.reservations.is_empty()) {
        let mut reservations = new_table(vec!["DEVICE", "TASK", "RESERVED", "MEASURED"]);
        for d in &r.devices {
            for res in &d.reservations {
                reservations.add_row(vec![
                    d.name.clone(),
                    res.task_id.to_string(),
                    format_bytes(res.reserved_bytes),
                    opt(res.measured_bytes),
                ]);
            }
        }
        tables.push(reservations);
    }
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: u64, state: pb::TaskState) -> pb::TaskProgress {
        pb::TaskProgress {
            task_id: id,
            plugin: "template".into(),
            asset: "synthetic-ar1:100:1".into(),
            state: state as i32,
            steps_done: 5,
            total_steps: 10,
            steps_per_second: 2.5,
            eta_seconds: Some(2.0),
            metrics: vec![pb::Metric {
                name: "train_loss".into(),
                value: 0.5,
            }],
            error: String::new(),
            estimate_bytes: 1024,
            measured_bytes: None,
        }
    }

    #[test]
    fn json_shapes_are_snake_case_with_state_names() {
        let job = pb::Job {
            job_id: 7,
            name: "n".into(),
            created_unix_ms: 1_700_000_000_000,
            progress: Some(pb::JobProgress {
                job_id: 7,
                weighted_fraction: 0.25,
                tasks: vec![task(1, pb::TaskState::Running)],
            }),
        };
        let v = serde_json::to_value(JobJson::from(&job)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "job_id": 7, "name": "n", "created_unix_ms": 1_700_000_000_000i64,
                "progress": {"job_id": 7, "weighted_fraction": 0.25, "tasks": [{
                    "task_id": 1, "plugin": "template", "asset": "synthetic-ar1:100:1",
                    "state": "running", "steps_done": 5, "total_steps": 10,
                    "steps_per_second": 2.5, "eta_seconds": 2.0,
                    "metrics": {"train_loss": 0.5}, "error": null,
                    "estimate_bytes": 1024, "measured_bytes": null
                }]}
            })
        );
        let changed = pb::watch_training_response::Event::StateChanged(pb::TaskStateChanged {
            job_id: 7,
            task_id: 3,
            from: pb::TaskState::Running as i32,
            to: pb::TaskState::Completed as i32,
            reason: "completed 400 steps".into(),
            at_unix_ms: 5,
        });
        let line = serde_json::to_string(&EventJson::from(&changed)).unwrap();
        assert_eq!(
            line,
            r#"{"event":"state_changed","job_id":7,"task_id":3,"from":"running","to":"completed","reason":"completed 400 steps","at_unix_ms":5}"#
        );
        let progress = pb::watch_training_response::Event::Progress(pb::JobProgress {
            job_id: 7,
            weighted_fraction: 0.5,
            tasks: vec![],
        });
        let line = serde_json::to_string(&EventJson::from(&progress)).unwrap();
        assert_eq!(
            line,
            r#"{"event":"progress","job_id":7,"weighted_fraction":0.5,"tasks":[]}"#
        );
        let finished = pb::watch_training_response::Event::Finished(job);
        let v = serde_json::to_value(EventJson::from(&finished)).unwrap();
        assert_eq!(v["event"], "finished");
        assert_eq!(v["job"]["job_id"], 7);
    }

    #[test]
    fn formatting_helpers() {
        assert_eq!(format_eta(None), "-");
        assert_eq!(format_eta(Some(42.4)), "42s");
        assert_eq!(format_eta(Some(200.0)), "3m 20s");
        assert_eq!(format_eta(Some(7300.0)), "2h 01m");
        assert_eq!(format_percent(0.4213), "42.1%");
        assert_eq!(format_time(0), "-");
        assert_eq!(format_time(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
        let tasks: Vec<TaskJson> = [
            pb::TaskState::Completed,
            pb::TaskState::Running,
            pb::TaskState::Completed,
        ]
        .iter()
        .enumerate()
        .map(|(i, s)| TaskJson::from(&task(i as u64, *s)))
        .collect();
        assert_eq!(state_counts(&tasks), "2 completed, 1 running");
        assert_eq!(job_tone(&tasks), Tone::Busy);
        assert_eq!(paint("x", Tone::Good, false), "x");
        assert_eq!(paint("x", Tone::Bad, true), "\x1b[31mx\x1b[0m");
        let mut m = BTreeMap::new();
        m.insert("accuracy".to_string(), 0.9);
        m.insert("valid_loss".to_string(), 0.25);
        assert_eq!(headline_metric(&m).unwrap(), "valid_loss=0.2500");
        m.insert("train_loss".to_string(), 0.00001);
        assert_eq!(headline_metric(&m).unwrap(), "train_loss=1.000e-5");
        m.insert("valid_skill".to_string(), 0.1);
        m.insert("b".to_string(), 2.0);
        assert_eq!(
            format_metrics(&m),
            "train_loss=1.000e-5 valid_loss=0.2500 valid_skill=0.1000 accuracy=0.9000 (+1 more)"
        );
        assert_eq!(format_metrics(&BTreeMap::new()), "-");
    }
}
