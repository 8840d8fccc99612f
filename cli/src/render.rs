//! How the client draws what it shows ([`crate::view`]'s shapes): tables,
//! state colours (only on a terminal, never with NO_COLOR), and numbers,
//! times and metrics formatted for people.

use crate::new_table;
use crate::view::{JobJson, ResourcesJson, TaskJson, WireState};
use comfy_table::{Cell, Color, Table};
use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use tli_core::byte_size::format_bytes;
use tli_core::state::TaskState;

// ---- colours ----

/// Colour for one state: green done, yellow in progress or waiting, red failed,
/// grey stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    Good,
    Busy,
    Bad,
    Muted,
    Plain,
}

pub fn tone(state: WireState) -> Tone {
    match state {
        WireState::Known(TaskState::Completed) => Tone::Good,
        WireState::Known(TaskState::Running | TaskState::Checkpointing | TaskState::Queued) => {
            Tone::Busy
        }
        WireState::Known(TaskState::Failed) => Tone::Bad,
        WireState::Known(TaskState::Cancelled | TaskState::Interrupted) => Tone::Muted,
        WireState::Unspecified | WireState::Unknown => Tone::Plain,
    }
}

/// Colours only for a terminal, and never when NO_COLOR is set.
fn colours_for(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none()
}

pub fn stdout_colours() -> bool {
    colours_for(std::io::stdout().is_terminal())
}

pub fn stderr_colours() -> bool {
    colours_for(std::io::stderr().is_terminal())
}

/// `text` in the tone's ANSI colour when `on`.
pub fn paint(text: &str, tone: Tone, on: bool) -> String {
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

pub fn format_percent(fraction: f64) -> String {
    format!("{:.1}%", fraction.clamp(0.0, 1.0) * 100.0)
}

pub fn format_eta(seconds: Option<f64>) -> String {
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
pub fn format_time(unix_ms: i64) -> String {
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

/// The first few metrics for a table: the plugin's `headline` metrics in its
/// order; without those, losses, skills, a forecaster's trading Sharpe and
/// P&L, then the rest (each group by name); and how many were left out.
pub fn format_metrics(metrics: &BTreeMap<String, f64>, headline: &[String]) -> String {
    format_metrics_first(metrics, None, headline)
}

/// The first `max` metrics in [`format_metrics`]' order, without the count
/// of those left out: for tables with one short cell of results.
pub fn format_metrics_at_most(
    metrics: &BTreeMap<String, f64>,
    headline: &[String],
    max: usize,
) -> String {
    if metrics.is_empty() || max == 0 {
        return "-".into();
    }
    joined(metrics, &ordered_names(metrics, None, headline), max)
}

/// The first `max` of `names` as `name=value`, space-separated.
fn joined(metrics: &BTreeMap<String, f64>, names: &[&String], max: usize) -> String {
    names
        .iter()
        .take(max)
        .map(|k| metric_item(metrics, k))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `name=value` for a table cell.
fn metric_item(metrics: &BTreeMap<String, f64>, name: &str) -> String {
    format!("{name}={}", format_value(metrics[name]))
}

/// [`format_metrics`] with `first` (a ranking metric) before all others.
fn format_metrics_first(
    metrics: &BTreeMap<String, f64>,
    first: Option<&str>,
    headline: &[String],
) -> String {
    if metrics.is_empty() {
        return "-".into();
    }
    let names = ordered_names(metrics, first, headline);
    let mut text = joined(metrics, &names, TABLE_METRICS);
    if names.len() > TABLE_METRICS {
        text.push_str(&format!(" (+{} more)", names.len() - TABLE_METRICS));
    }
    text
}

/// Metric names in the order tables show them (see [`format_metrics`]).
fn ordered_names<'a>(
    metrics: &'a BTreeMap<String, f64>,
    first: Option<&str>,
    headline: &[String],
) -> Vec<&'a String> {
    let rank = |name: &str| {
        if Some(name) == first {
            (0, 0)
        } else if let Some(i) = headline.iter().position(|h| h == name) {
            (1, i)
        } else if name.contains("loss") {
            (2, 0)
        } else if name.contains("skill") {
            (3, 0)
        } else if name.ends_with("_trade_sharpe") || name.ends_with("_trade_net_pnl") {
            (4, 0)
        } else {
            (5, 0)
        }
    };
    let mut names: Vec<&String> = metrics.keys().collect();
    names.sort_by_key(|n| rank(n));
    names
}

/// An asset as a table shows it: relative to the working directory when it
/// lies below it, else its last two path components after `…/` when it is
/// long (`-o json` keeps the whole path). A pooled task's assets (`a+b`) are
/// shortened each.
pub fn short_asset(asset: &str) -> String {
    short_asset_in(asset, std::env::current_dir().ok().as_deref())
}

/// [`short_asset`] relative to `cwd`.
fn short_asset_in(asset: &str, cwd: Option<&std::path::Path>) -> String {
    asset
        .split('+')
        .map(|one| shorten_path(one, cwd))
        .collect::<Vec<_>>()
        .join("+")
}

/// Paths longer than this are cut to their last two components.
const LONG_ASSET: usize = 32;

fn shorten_path(path: &str, cwd: Option<&std::path::Path>) -> String {
    let p = std::path::Path::new(path);
    if let Some(rel) = cwd
        .filter(|_| p.is_absolute())
        .and_then(|cwd| p.strip_prefix(cwd).ok())
        .filter(|rel| !rel.as_os_str().is_empty())
    {
        return rel.display().to_string();
    }
    if path.chars().count() <= LONG_ASSET {
        return path.to_string();
    }
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    match parts.as_slice() {
        [.., dir, file] => format!("…/{dir}/{file}"),
        _ => path.to_string(),
    }
}

fn format_value(v: f64) -> String {
    if v != 0.0 && (v.abs() < 1e-3 || v.abs() >= 1e6) {
        format!("{v:.3e}")
    } else if v.abs() >= 1e3 || v.fract() == 0.0 {
        // Counts, and P&L in points or dollars: decimals add width, not information.
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
    }
}

/// Whether a smaller value of `metric` is better: losses, errors, risks,
/// drawdowns, costs and turnover (the rule `keep_best` uses by default).
pub use tli_core::selection::lower_is_better;

/// Orders `tasks` by `metric`, best first (tasks without a finite value
/// last, in their order); says which way is better ("lower" or "higher").
/// Refuses a metric no task reports, naming those they do.
pub fn rank_tasks(tasks: &mut [TaskJson], metric: &str) -> anyhow::Result<&'static str> {
    let value = |t: &TaskJson| t.metrics.get(metric).copied().filter(|v| v.is_finite());
    if !tasks.iter().any(|t| value(t).is_some()) {
        let mut known: Vec<&str> = tasks
            .iter()
            .flat_map(|t| t.metrics.keys().map(String::as_str))
            .collect();
        known.sort_unstable();
        known.dedup();
        // Names sharing a word with the one asked for ("sharpe"), else all.
        let words: Vec<&str> = metric
            .split(['_', '@'])
            .filter(|w| w.len() >= 4 && !["valid", "test", "train"].contains(w))
            .collect();
        let similar: Vec<&str> = known
            .iter()
            .copied()
            .filter(|k| words.iter().any(|w| k.contains(w)))
            .collect();
        let (label, names) = match similar.is_empty() {
            true => ("they report", known),
            false => ("similar ones they report", similar),
        };
        let shown = names
            .iter()
            .take(12)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        anyhow::bail!(
            "no task reports {metric}; {label}: {}{}",
            if shown.is_empty() {
                "nothing yet"
            } else {
                &shown
            },
            if names.len() > 12 { ", …" } else { "" }
        );
    }
    let lower = lower_is_better(metric);
    tasks.sort_by(|a, b| match (value(a), value(b)) {
        (Some(x), Some(y)) if lower => x.total_cmp(&y),
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    Ok(if lower { "lower" } else { "higher" })
}

/// The metric a progress line shows: `train_loss`, else any `*loss*`, else the first.
pub fn headline_metric(metrics: &BTreeMap<String, f64>) -> Option<String> {
    metrics
        .get_key_value("train_loss")
        .or_else(|| metrics.iter().find(|(k, _)| k.contains("loss")))
        .or_else(|| metrics.iter().next())
        .map(|(k, v)| format!("{k}={}", format_value(*v)))
}

/// `2 completed, 1 running`: finished work first, then active, then stopped,
/// in this fixed order so a live line does not jump around.
pub fn state_counts(tasks: &[TaskJson]) -> String {
    use TaskState::*;
    const ORDER: [WireState; 9] = [
        WireState::Known(Completed),
        WireState::Known(Running),
        WireState::Known(Checkpointing),
        WireState::Known(Queued),
        WireState::Known(Failed),
        WireState::Known(Cancelled),
        WireState::Known(Interrupted),
        WireState::Unspecified,
        WireState::Unknown,
    ];
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for state in ORDER {
        let n = tasks.iter().filter(|t| t.state == state).count();
        if n > 0 {
            counts.push((state.name(), n));
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
pub fn job_tone(tasks: &[TaskJson]) -> Tone {
    let any = |t: Tone| tasks.iter().any(|x| tone(x.state) == t);
    if tasks.is_empty() {
        Tone::Plain
    } else if any(Tone::Bad) {
        Tone::Bad
    } else if any(Tone::Busy) {
        Tone::Busy
    } else if tasks
        .iter()
        .all(|t| t.state == WireState::Known(TaskState::Completed))
    {
        Tone::Good
    } else {
        Tone::Muted
    }
}

// ---- tables ----

/// `train start`: JOB, NAME, TASKS.
pub fn started_table(job: &JobJson) -> Table {
    let mut table = new_table(vec!["JOB", "NAME", "TASKS"]);
    table.add_row(vec![
        job.job_id.to_string(),
        job.name.clone(),
        job.progress.tasks.len().to_string(),
    ]);
    table
}

/// `train status|stop|resume|watch`: one row per task.
pub fn tasks_table(job: &JobJson) -> Table {
    tasks_table_ranked(job, None)
}

/// [`tasks_table`] with the ranking metric first in each METRICS cell.
///
/// Built to keep a task on one line: a plugin's version shows only when the
/// job runs two versions of it (the line under the table names the
/// libraries), assets are shortened ([`short_assets`]), STEPS/S and ETA are
/// left out once no task has either, and on a terminal the METRICS cell
/// holds as many metrics as fit beside the other columns (at least one, with
/// a count of the rest). Elsewhere (a pipe, a log) it holds
/// [`TABLE_METRICS`].
pub fn tasks_table_ranked(job: &JobJson, rank: Option<&str>) -> Table {
    let on = stdout_colours();
    let tasks = &job.progress.tasks;
    let two_versions = |plugin: &str| {
        let mut versions = tasks
            .iter()
            .filter(|t| t.plugin == plugin)
            .filter_map(|t| t.plugin_version.as_deref());
        versions
            .next()
            .is_some_and(|first| versions.any(|v| v != first))
    };
    let assets = short_assets(tasks.iter().map(|t| t.asset.as_str()));
    let rates: Vec<String> = tasks
        .iter()
        .map(|t| match t.steps_per_second {
            r if r > 0.0 => format!("{r:.1}"),
            _ => "-".into(),
        })
        .collect();
    let etas: Vec<String> = tasks.iter().map(|t| format_eta(t.eta_seconds)).collect();
    let mut columns: Vec<(&str, Vec<String>)> = vec![
        (
            "TASK",
            tasks.iter().map(|t| t.task_id.to_string()).collect(),
        ),
        (
            "PLUGIN",
            tasks
                .iter()
                .map(|t| match &t.plugin_version {
                    Some(version) if two_versions(&t.plugin) => format!("{}@{version}", t.plugin),
                    _ => t.plugin.clone(),
                })
                .collect(),
        ),
        ("ASSET", assets),
        (
            "STATE",
            tasks.iter().map(|t| t.state.name().to_string()).collect(),
        ),
    ];
    // Slurm tasks show their Slurm job and node.
    if tasks.iter().any(|t| t.slurm.is_some()) {
        let placement = |t: &TaskJson| match &t.slurm {
            Some(s) => match &s.node {
                Some(node) => format!("{} on {node}", s.job_id),
                None => format!("{} (not started)", s.job_id),
            },
            None => "-".into(),
        };
        columns.push(("SLURM JOB", tasks.iter().map(placement).collect()));
    }
    columns.push((
        "STEPS",
        tasks
            .iter()
            .map(|t| format!("{}/{}", t.steps_done, t.total_steps))
            .collect(),
    ));
    if rates.iter().chain(&etas).any(|c| c != "-") {
        columns.push(("STEPS/S", rates));
        columns.push(("ETA", etas));
    }
    let header: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    let rows: Vec<Vec<String>> = (0..tasks.len())
        .map(|i| columns.iter().map(|(_, cells)| cells[i].clone()).collect())
        .collect();
    let mut table = new_table(header.iter().copied().chain(["METRICS"]).collect());
    let room = table
        .width()
        .map(|width| metrics_room(width as usize, &header, &rows));
    for (t, texts) in tasks.iter().zip(rows) {
        let mut row: Vec<Cell> = texts
            .into_iter()
            .zip(&header)
            .map(|(text, h)| match *h {
                "STATE" => cell(&text, tone(t.state), on),
                _ => Cell::new(text),
            })
            .collect();
        row.push(Cell::new(match room {
            Some(room) => metrics_within(&t.metrics, rank, &t.headline_metrics, room),
            None => format_metrics_first(&t.metrics, rank, &t.headline_metrics),
        }));
        table.add_row(row);
    }
    table
}

/// Bar-file suffixes a table leaves out of an asset's name when no two of
/// its assets would then read the same.
const BAR_FILE_SUFFIXES: [&str; 7] = [
    ".dbn.zst", ".dbn", ".csv.gz", ".csv", ".parquet", ".zst", ".gz",
];

/// Assets as a table shows them: each through [`short_asset`], then without
/// its bar-file suffix (`es.dbn.zst` → `es`) unless that would make two of
/// them read the same.
pub fn short_assets<'a>(assets: impl Iterator<Item = &'a str>) -> Vec<String> {
    let cwd = std::env::current_dir().ok();
    let short: Vec<String> = assets.map(|a| short_asset_in(a, cwd.as_deref())).collect();
    let bare: Vec<String> = short
        .iter()
        .map(|a| {
            a.split('+')
                .map(|one| {
                    BAR_FILE_SUFFIXES
                        .iter()
                        .find_map(|s| one.strip_suffix(s).filter(|b| !b.is_empty()))
                        .unwrap_or(one)
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    // Two different assets reading the same once bare: keep the suffixes.
    let mut seen: HashMap<&str, &str> = HashMap::new();
    let clash = short
        .iter()
        .zip(&bare)
        .any(|(a, b)| *seen.entry(b.as_str()).or_insert(a.as_str()) != a.as_str());
    if clash {
        short
    } else {
        bare
    }
}

/// Characters left for the METRICS cell in a table `width` wide, beside
/// columns holding `header` and `rows` (one space of padding each side and a
/// separator per column, a border at each end).
fn metrics_room(width: usize, header: &[&str], rows: &[Vec<String>]) -> usize {
    let columns: usize = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
                + 3
        })
        .sum();
    width.saturating_sub(columns + 4)
}

/// A METRICS cell of at most `room` characters: metrics in table order while
/// they fit (at least one), then how many were left out when that fits too.
fn metrics_within(
    metrics: &BTreeMap<String, f64>,
    first: Option<&str>,
    headline: &[String],
    room: usize,
) -> String {
    if metrics.is_empty() {
        return "-".into();
    }
    let names = ordered_names(metrics, first, headline);
    let items: Vec<String> = names
        .iter()
        .take(TABLE_METRICS)
        .map(|k| metric_item(metrics, k))
        .collect();
    // The first metric always shows: with two decimals when four do not fit.
    let first_item = match items.first() {
        Some(item) if item.chars().count() > room => {
            let (name, value) = (names[0], metrics[names[0]]);
            let short = format!("{name}={value:.2}");
            if value.abs() < 1e3 && value.fract() != 0.0 && short.len() < item.len() {
                short
            } else {
                item.clone()
            }
        }
        Some(item) => item.clone(),
        None => return "-".into(),
    };
    let mut text = first_item;
    let mut shown = 1;
    for item in items.iter().skip(1) {
        if text.chars().count() + 1 + item.chars().count() > room {
            break;
        }
        text.push(' ');
        text.push_str(item);
        shown += 1;
    }
    let more = format!(" (+{})", names.len() - shown);
    if names.len() > shown && text.chars().count() + more.len() <= room {
        text.push_str(&more);
    }
    text
}

/// The lines under a tasks table: the weighted progress and each task's error.
pub fn job_summary(job: &JobJson) -> Vec<String> {
    let on = stdout_colours();
    let mut lines = vec![format!(
        "job {} ({}): {} done (weighted by estimated cost) · {}",
        job.job_id,
        job.name,
        format_percent(job.progress.weighted_fraction),
        state_counts(&job.progress.tasks)
    )];
    // Which library ran the tasks (several versions of a plugin may be loaded).
    let mut libraries: Vec<String> = Vec::new();
    for t in &job.progress.tasks {
        if let (Some(version), Some(sum)) = (&t.plugin_version, &t.plugin_checksum) {
            let line = format!(
                "{}@{version} (sha256 {})",
                t.plugin,
                &sum[..sum.len().min(12)]
            );
            if !libraries.contains(&line) {
                libraries.push(line);
            }
        }
    }
    if !libraries.is_empty() {
        lines.push(format!("plugin libraries: {}", libraries.join(", ")));
    }
    for t in job.progress.tasks.iter().filter(|t| t.error.is_some()) {
        lines.push(format!(
            "task {} {}: {}",
            t.task_id,
            paint(t.state.name(), tone(t.state), on),
            t.error.as_deref().unwrap_or_default()
        ));
    }
    for t in &job.progress.tasks {
        if let Some(detail) = &t.detail {
            lines.push(format!("task {}: {detail}", t.task_id));
        }
        if let Some(s) = t.slurm.as_ref().filter(|s| s.cpu_seconds > 0.0) {
            lines.push(format!(
                "task {}: {} Slurm job{}, {:.2} CPU-h, {:.2} GPU-h",
                t.task_id,
                s.jobs,
                if s.jobs == 1 { "" } else { "s" },
                s.cpu_seconds / 3600.0,
                s.gpu_seconds / 3600.0
            ));
        }
        if let Some(why) = &t.stopped_early {
            lines.push(format!("task {}: {why}", t.task_id));
        }
        if let Some(b) = &t.best {
            lines.push(format!(
                "task {}: model = best checkpoint, step {} ({} {}); `ID:last` for the newest",
                t.task_id,
                b.step,
                b.metric,
                format_value(b.value)
            ));
        }
    }
    lines
}

pub fn print_job(job: &JobJson) {
    print_job_ranked(job, None);
}

/// [`print_job`] with `rank`'s metric first in each task's METRICS cell.
pub fn print_job_ranked(job: &JobJson, rank: Option<&str>) {
    crate::outln!("{}", tasks_table_ranked(job, rank));
    for line in job_summary(job) {
        crate::outln!("{line}");
    }
}

/// `train list`: JOB, NAME, CREATED, TASKS, STATES, PROGRESS.
pub fn jobs_table(jobs: &[JobJson]) -> Table {
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
pub fn resources_tables(r: &ResourcesJson) -> Vec<Table> {
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
        let mut reservations = new_table(vec!["DEVICE", "HELD BY", "RESERVED", "MEASURED"]);
        for d in &r.devices {
            for res in &d.reservations {
                reservations.add_row(vec![
                    d.name.clone(),
                    match &res.model {
                        Some(model) => format!("model {model}"),
                        None => format!("task {}", res.task_id),
                    },
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
    use crate::view::tests::task;
    use tli_proto::v1 as pb;

    #[test]
    fn slurm_tasks_show_their_slurm_job_and_node() {
        let mut ran = task(1, pb::TaskState::Running);
        ran.slurm = Some(pb::SlurmPlacement {
            job_id: "41".into(),
            node: "gpu-07".into(),
            jobs: 2,
            cpu_seconds: 7200.0,
            gpu_seconds: 1800.0,
        });
        let mut pending = task(2, pb::TaskState::Queued);
        pending.slurm = Some(pb::SlurmPlacement {
            job_id: "42".into(),
            node: String::new(),
            jobs: 1,
            ..Default::default()
        });
        pending.detail = "Slurm job 42 pending: Resources".into();
        let job = |tasks| {
            JobJson::from(&pb::Job {
                job_id: 3,
                name: "j".into(),
                created_unix_ms: 0,
                progress: Some(pb::JobProgress {
                    job_id: 3,
                    weighted_fraction: 0.0,
                    tasks,
                }),
            })
        };
        let table = tasks_table(&job(vec![
            ran.clone(),
            pending.clone(),
            task(3, pb::TaskState::Queued),
        ]))
        .to_string();
        assert!(table.contains("SLURM JOB"), "{table}");
        assert!(table.contains("41 on gpu-07"), "{table}");
        assert!(table.contains("42 (not started)"), "{table}");
        let lines = job_summary(&job(vec![ran, pending])).join("\n");
        assert!(
            lines.contains("task 1: 2 Slurm jobs, 2.00 CPU-h, 0.50 GPU-h"),
            "{lines}"
        );
        assert!(
            lines.contains("task 2: Slurm job 42 pending: Resources"),
            "{lines}"
        );
        let local = tasks_table(&job(vec![task(1, pb::TaskState::Running)])).to_string();
        assert!(
            !local.contains("SLURM"),
            "a local job's table is as before: {local}"
        );
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
            format_metrics(&m, &[]),
            "train_loss=1.000e-5 valid_loss=0.2500 valid_skill=0.1000 accuracy=0.9000 (+1 more)"
        );
        assert_eq!(format_metrics(&BTreeMap::new(), &[]), "-");
    }

    #[test]
    fn a_plugins_headline_metrics_come_first_in_its_order_then_the_usual_ones() {
        let m: BTreeMap<String, f64> = [
            ("episodes", 12.0),
            ("td_loss", 0.5),
            ("train_loss", 0.25),
            ("valid_sharpe", 1.5),
            ("valid_total_pnl", 0.125),
            ("valid_turnover", 3.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        // A headline the task has not reported (yet) is skipped.
        let headline = ["valid_sharpe", "test_sharpe", "valid_total_pnl"].map(String::from);
        assert_eq!(
            format_metrics(&m, &headline),
            "valid_sharpe=1.5000 valid_total_pnl=0.1250 td_loss=0.5000 train_loss=0.2500 \
             (+2 more)"
        );
        // A ranking metric goes before the headline.
        assert!(format_metrics_first(&m, Some("valid_turnover"), &headline)
            .starts_with("valid_turnover=3 valid_sharpe=1.5000"));
    }

    #[test]
    fn a_metrics_cell_on_a_narrow_terminal_keeps_what_fits_and_counts_the_rest() {
        let m: BTreeMap<String, f64> = [
            ("train_loss", 0.25),
            ("valid_sharpe", 1.5),
            ("valid_total_pnl", 25_441.27),
            ("test_sharpe", 0.75),
            ("episodes", 3.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let headline = [
            "train_loss",
            "valid_sharpe",
            "valid_total_pnl",
            "test_sharpe",
        ]
        .map(String::from);
        assert_eq!(
            metrics_within(&m, None, &headline, 200),
            "train_loss=0.2500 valid_sharpe=1.5000 valid_total_pnl=25441 test_sharpe=0.7500 (+1)"
        );
        let two = metrics_within(&m, None, &headline, 42);
        assert_eq!(two, "train_loss=0.2500 valid_sharpe=1.5000 (+3)");
        assert!(two.chars().count() <= 42);
        // More metrics rather than the count.
        assert_eq!(
            metrics_within(&m, None, &headline, 41),
            "train_loss=0.2500 valid_sharpe=1.5000"
        );
        // At least one metric, however narrow (two decimals when four do not
        // fit); the count only where it fits.
        assert_eq!(
            metrics_within(&m, None, &headline, 22),
            "train_loss=0.2500 (+4)"
        );
        assert_eq!(metrics_within(&m, None, &headline, 15), "train_loss=0.25");
        assert_eq!(metrics_within(&m, None, &headline, 5), "train_loss=0.25");
        // The other columns are measured by their widest cell or header.
        let rows = vec![vec!["12".to_string(), "tft@0.3.0".to_string()]];
        assert_eq!(
            metrics_room(100, &["TASK", "PLUGIN"], &rows),
            100 - (4 + 3) - (9 + 3) - 4
        );
    }

    #[test]
    fn bar_file_suffixes_are_left_out_unless_two_assets_would_read_the_same() {
        assert_eq!(
            short_assets(["es.dbn.zst", "cl.csv", "ES=nq.parquet", "a.csv+b.dbn"].into_iter()),
            ["es", "cl", "ES=nq", "a+b"]
        );
        assert_eq!(
            short_assets(["es.dbn.zst", "es.csv", "es.csv"].into_iter()),
            ["es.dbn.zst", "es.csv", "es.csv"]
        );
        assert_eq!(
            short_assets(["synthetic:300:1"].into_iter()),
            ["synthetic:300:1"]
        );
    }

    #[test]
    fn assets_are_shown_relative_to_the_working_dir_or_cut_to_their_last_two_parts() {
        let cwd = std::path::Path::new("/home/me/work");
        assert_eq!(
            shorten_path("/home/me/work/data/es.dbn.zst", Some(cwd)),
            "data/es.dbn.zst"
        );
        assert_eq!(shorten_path("es.dbn.zst", Some(cwd)), "es.dbn.zst");
        assert_eq!(
            shorten_path(
                "/srv/market/databento/glbx-mdp3/ohlcv-1m/es.dbn.zst",
                Some(cwd)
            ),
            "…/ohlcv-1m/es.dbn.zst"
        );
        assert_eq!(shorten_path("/short/es.dbn", None), "/short/es.dbn");
        let here = std::env::current_dir().unwrap();
        let a = here.join("a.csv").display().to_string();
        let b = here.join("b.csv").display().to_string();
        assert_eq!(short_asset(&format!("{a}+{b}")), "a.csv+b.csv");
    }

    #[test]
    fn tasks_rank_by_a_metric_best_first_and_a_metric_nobody_reports_is_refused() {
        let mut tasks: Vec<TaskJson> = (0..4)
            .map(|i| TaskJson::from(&task(i, pb::TaskState::Completed)))
            .collect();
        for (t, (sharpe, qrisk)) in
            tasks
                .iter_mut()
                .zip([(0.5, 0.3), (1.5, 0.2), (f64::NAN, 0.1), (-1.0, 0.4)])
        {
            t.metrics.insert("valid_trade_sharpe".into(), sharpe);
            t.metrics.insert("valid_qrisk_p50".into(), qrisk);
        }
        let ids = |tasks: &[TaskJson]| tasks.iter().map(|t| t.task_id).collect::<Vec<_>>();
        assert_eq!(
            rank_tasks(&mut tasks, "valid_trade_sharpe").unwrap(),
            "higher"
        );
        assert_eq!(ids(&tasks), [1, 0, 3, 2], "NaN last");
        assert_eq!(rank_tasks(&mut tasks, "valid_qrisk_p50").unwrap(), "lower");
        assert_eq!(ids(&tasks), [2, 1, 0, 3]);
        assert!(
            lower_is_better("test_trade_max_drawdown@ES") && !lower_is_better("test_trade_net_pnl")
        );
        let e = rank_tasks(&mut tasks, "valid_sharp")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no task reports valid_sharp; similar ones they report: valid_trade_sharpe"),
            "{e}"
        );
        let e = rank_tasks(&mut tasks, "x").unwrap_err().to_string();
        assert!(
            e.contains("they report: train_loss, valid_qrisk_p50, valid_trade_sharpe"),
            "{e}"
        );
        let m: BTreeMap<String, f64> = tasks[0].metrics.clone();
        assert!(format_metrics_first(&m, Some("valid_trade_sharpe"), &[])
            .starts_with("valid_trade_sharpe="));
    }
}
