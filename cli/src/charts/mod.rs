//! PNG charts of a job (`tli train plot JOB`, `tli plot --state-dir DIR --job N`):
//! an overview with a panel per model (its main curve), a figure per model
//! with a panel per metric curve its tasks report ([`overview_chart`]; a
//! training metric's validation twin dashed on its panel), the metrics
//! reported once (evaluation scores) as a table, `scalars.csv`, and one
//! memory timeline per device; `--metric`/`--all`: one chart per metric, a
//! line per task over steps ([`metrics_chart`]). A memory timeline: each task's
//! reservation as a stacked band over wall time, the device budget and the
//! measured total as lines ([`memory_chart`]) — the memory arbiter at work.
//!
//! The charts draw a [`JobHistory`], whatever it came from: the store read
//! directly ([`tli_store::Store::job_history`]) or a
//! `GetTrainingHistory` response ([`tli_wire::history::history_from_proto`]).
//! Colours are the Okabe–Ito palette (distinguishable with the common colour
//! vision deficiencies); a task has the same colour in every chart of a job.
//! Text needs a TrueType font found at run time ([`font`]).

pub mod equity_chart;
pub mod font;
pub mod forecast_chart;
pub mod memory_chart;
pub mod metrics_chart;
pub mod overview_chart;
pub mod sweep_chart;

pub use overview_chart::Panel;

pub use tli_store::{
    BudgetChange, DeviceHistory, JobHistory, MetricSeries, ReservationSpan, TaskHistory,
};

use font::FontError;
use plotters::style::RGBColor;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Chart size when none is asked for.
pub const DEFAULT_WIDTH: u32 = 1200;
pub const DEFAULT_HEIGHT: u32 = 700;
/// The smallest and largest chart side accepted.
pub const MIN_SIDE: u32 = 320;
pub const MAX_SIDE: u32 = 8000;

/// Okabe & Ito (2008), without black (kept for the budget line): orange,
/// sky blue, bluish green, yellow, blue, vermillion, reddish purple.
pub const PALETTE: [RGBColor; 7] = [
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(240, 228, 66),
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
];
/// Reservations of other jobs on the same device.
pub const OTHER_JOBS: RGBColor = RGBColor(190, 190, 190);

#[derive(Debug, Error)]
pub enum PlotError {
    #[error(transparent)]
    Font(#[from] FontError),
    #[error("no task of job {job} reported a metric named {name:?}; {}", available_text(.available))]
    UnknownMetric {
        job: i64,
        name: String,
        available: Vec<String>,
    },
    #[error("cannot write charts to {}: {source}", path.display())]
    OutDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("chart size {width}×{height} is outside {MIN_SIDE}..={MAX_SIDE} pixels per side")]
    Size { width: u32, height: u32 },
    #[error("drawing the chart {}: {reason}", path.display())]
    Draw { path: PathBuf, reason: String },
}

fn available_text(available: &[String]) -> String {
    if available.is_empty() {
        "its tasks reported no metrics yet".into()
    } else {
        format!("the metrics reported are: {}", available.join(", "))
    }
}

/// What to draw and where.
#[derive(Clone, Debug)]
pub struct PlotOptions {
    /// Only these metrics (in this order), each as a chart; empty = the
    /// overview, a figure per model and the table of single values.
    pub metrics: Vec<String>,
    /// A chart for every metric reported, single values included.
    pub all: bool,
    pub out_dir: PathBuf,
    pub width: u32,
    pub height: u32,
}

/// A file written: where, what, and a summary of what it shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WrittenChart {
    pub path: PathBuf,
    /// `overview`, `model`, `metric`, `memory` (PNG files) or `table` (CSV).
    pub kind: &'static str,
    /// The plugin, the metric name, the device, `overview` or `scalars`.
    pub name: String,
    /// A PNG's size in pixels (none for the table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// The metrics of a figure's panels, or those the table lists.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<String>,
    /// The table's rows (one per task and metric).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<usize>,
    /// Metric charts: one line per task that reported the metric.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<SeriesSummary>,
    /// Memory charts: the reservations drawn (all jobs) and the last budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservations: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_bytes: Option<u64>,
}

/// One task's line in a metric chart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesSummary {
    pub task_id: i64,
    pub label: String,
    /// Points drawn (after thinning) and recorded.
    pub points: usize,
    pub recorded_points: u64,
    pub first_step: Option<u64>,
    pub last_step: Option<u64>,
    /// `null` for NaN.
    pub last_value: Option<f64>,
}

/// A task's name in legends: `task 3 template/ES`; an asset that is a file
/// path is shown by its file name, a pooled task's assets by their number
/// (`pooled ×3`), a synthetic asset by its label.
pub fn task_label(task: &TaskHistory) -> String {
    let asset = match task.asset.strip_prefix("pooled[") {
        Some(inner) => format!("pooled ×{}", inner.split(',').count()),
        None if task.asset.starts_with("synthetic") => task.asset.clone(),
        None => task
            .asset
            .rsplit('/')
            .next()
            .unwrap_or(&task.asset)
            .to_string(),
    };
    format!("task {} {}/{}", task.task_id, task.plugin, asset)
}

/// The colour of the task at `index` (its position in the job): the
/// palette's seven, then hues a golden angle apart at four lightnesses, so
/// no two of a job's first 60 tasks come close in colour (a legend stays
/// unambiguous past seven tasks).
pub fn task_color(index: usize) -> RGBColor {
    if let Some(color) = PALETTE.get(index) {
        return *color;
    }
    let n = index - PALETTE.len();
    let hue = (n as f64 * 137.507_764 + 15.0) % 360.0;
    let lightness = [0.32, 0.45, 0.58, 0.70][n % 4];
    hsl(hue, 0.70, lightness)
}

/// An RGB colour from hue (degrees), saturation and lightness (0..1).
fn hsl(hue: f64, saturation: f64, lightness: f64) -> RGBColor {
    let chroma = (1.0 - (2.0 * lightness - 1.0).abs()) * saturation;
    let h = hue / 60.0;
    let x = chroma * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (chroma, x, 0.0),
        1 => (x, chroma, 0.0),
        2 => (0.0, chroma, x),
        3 => (0.0, x, chroma),
        4 => (x, 0.0, chroma),
        _ => (chroma, 0.0, x),
    };
    let m = lightness - chroma / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    RGBColor(byte(r), byte(g), byte(b))
}

/// The metrics to chart: those asked for (each must have been reported by
/// some task), or every one reported.
pub fn chosen_metrics(history: &JobHistory, asked: &[String]) -> Result<Vec<String>, PlotError> {
    if asked.is_empty() {
        return Ok(history.metric_names.clone());
    }
    let mut seen = BTreeSet::new();
    let mut chosen = Vec::new();
    for name in asked {
        if !history.metric_names.contains(name) {
            return Err(PlotError::UnknownMetric {
                job: history.job_id,
                name: name.clone(),
                available: history.metric_names.clone(),
            });
        }
        if seen.insert(name.as_str()) {
            chosen.push(name.clone());
        }
    }
    Ok(chosen)
}

/// A file name part from a metric or device name: letters, digits, `.`,
/// `-` and `_` kept, anything else `_` (`cuda:0` → `cuda_0`).
pub fn file_stem(name: &str) -> String {
    let stem: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match stem.trim_matches('.') {
        "" => "unnamed".into(),
        s => s.to_string(),
    }
}

/// What a default plot draws.
#[derive(Debug, Default, PartialEq)]
pub struct PlotPlan {
    /// The overview: a panel per model (plugin), its main curve (a training
    /// loss where it reports one) for its tasks.
    pub overview: Vec<Panel>,
    /// A figure per model, in task order: a panel per metric curve its tasks
    /// report ([`model_curves`]).
    pub models: Vec<(String, Vec<Panel>)>,
    /// The metrics no task reported at more than one step (the table).
    pub scalars: Vec<String>,
}

/// [`PlotPlan`] of `history`.
pub fn plan(history: &JobHistory) -> PlotPlan {
    let points = |name: &str, tasks: &[usize]| {
        tasks
            .iter()
            .filter_map(|&i| history.tasks[i].series.iter().find(|s| s.name == name))
            .map(|s| s.steps.len())
            .max()
            .unwrap_or(0)
    };
    let all: Vec<usize> = (0..history.tasks.len()).collect();
    let scalars = history
        .metric_names
        .iter()
        .filter(|m| points(m, &all) <= 1)
        .cloned()
        .collect();
    let mut plugins: Vec<&str> = Vec::new();
    for t in &history.tasks {
        if !plugins.contains(&t.plugin.as_str()) {
            plugins.push(&t.plugin);
        }
    }
    let mut plan = PlotPlan {
        scalars,
        ..PlotPlan::default()
    };
    for plugin in plugins {
        let tasks: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&i| history.tasks[i].plugin == plugin)
            .collect();
        let curves: Vec<String> = history
            .metric_names
            .iter()
            .filter(|m| points(m, &tasks) > 1)
            .cloned()
            .collect();
        let curves = model_curves(&curves);
        let panel = |metric: &String, title: String| Panel {
            title,
            metric: metric.clone(),
            tasks: tasks.clone(),
        };
        if let Some(first) = curves.first() {
            plan.overview
                .push(panel(first, format!("{plugin}: {first}")));
            let panels = curves.iter().map(|m| panel(m, m.clone())).collect();
            plan.models.push((plugin.to_string(), panels));
        }
    }
    plan
}

/// The curves a model's figure shows, in order: a training loss first,
/// then validation metrics, other training metrics, the rest. Left out: a
/// validation metric drawn on its training twin's panel (`valid_loss` with
/// `train_loss`), and breakdowns — a metric that extends another one's
/// name (`valid_mse_h1` of `valid_mse`), or one of five or more sharing
/// their first two name parts (`valid_vsn_…`, `valid_trade_…`) that no
/// other metric extends. `--metric` and `--all` draw those.
pub fn model_curves(curves: &[String]) -> Vec<String> {
    let twins: BTreeSet<String> = curves
        .iter()
        .filter_map(|m| metrics_chart::twin_of(m))
        .collect();
    let extends = |m: &str, base: &str| {
        m.len() > base.len() + 1 && m.starts_with(base) && m.as_bytes()[base.len()] == b'_'
    };
    let is_parent = |m: &str| curves.iter().any(|c| extends(c, m));
    let is_child = |m: &str| curves.iter().any(|c| extends(m, c));
    let family = |m: &str| m.splitn(3, '_').take(2).collect::<Vec<_>>().join("_");
    let family_size = |m: &str| curves.iter().filter(|c| family(c) == family(m)).count();
    let mut kept: Vec<String> = curves
        .iter()
        .filter(|m| !twins.contains(*m))
        .filter(|m| !is_child(m))
        .filter(|m| is_parent(m) || family_size(m) < 5)
        .cloned()
        .collect();
    kept.sort_by_key(|m| {
        if m.starts_with("train_") && m.ends_with("loss") {
            0
        } else if m.starts_with("valid_") {
            1
        } else if m.starts_with("train_") {
            2
        } else {
            3
        }
    });
    kept
}

/// Draws the charts of `history` into `options.out_dir` (created if
/// missing). By default: `overview.png` (a panel per model, when there are
/// two or more), a figure per
/// model (`model-<plugin>.png`: a panel per metric curve), `scalars.csv`
/// (metrics reported once), then `memory-<device>.png` per device; with
/// `options.metrics` or `options.all`, a chart per metric asked (or every
/// one) and the memory timelines. Returns what was written, in order.
pub fn write_charts(
    history: &JobHistory,
    options: &PlotOptions,
) -> Result<Vec<WrittenChart>, PlotError> {
    let (width, height) = (options.width, options.height);
    if !(MIN_SIDE..=MAX_SIDE).contains(&width) || !(MIN_SIDE..=MAX_SIDE).contains(&height) {
        return Err(PlotError::Size { width, height });
    }
    let (plan, charts) = if !options.metrics.is_empty() {
        let chosen = chosen_metrics(history, &options.metrics)?;
        (PlotPlan::default(), chosen)
    } else if options.all {
        (PlotPlan::default(), history.metric_names.clone())
    } else {
        (plan(history), Vec::new())
    };
    font::register_font()?;
    std::fs::create_dir_all(&options.out_dir).map_err(|source| PlotError::OutDir {
        path: options.out_dir.clone(),
        source,
    })?;
    let mut used = BTreeSet::new();
    let mut path_for = |prefix: &str, name: &str, extension: &str| {
        let stem = match prefix {
            "" => file_stem(name),
            _ => format!("{prefix}-{}", file_stem(name)),
        };
        let mut candidate = stem.clone();
        let mut n = 2;
        while !used.insert(candidate.clone()) {
            candidate = format!("{stem}-{n}");
            n += 1;
        }
        options.out_dir.join(format!("{candidate}.{extension}"))
    };
    let png = |path: PathBuf, kind: &'static str, name: String, size: (u32, u32)| WrittenChart {
        path,
        kind,
        name,
        width: Some(size.0),
        height: Some(size.1),
        metrics: Vec::new(),
        rows: None,
        series: Vec::new(),
        reservations: None,
        budget_bytes: None,
    };
    let job = format!("job {} \u{201c}{}\u{201d}", history.job_id, history.name);
    let mut figures: Vec<(&str, String, String, &[Panel])> = Vec::new();
    // One model: its figure says it all.
    if plan.models.len() >= 2 {
        let heading = format!("{job}: each model's main curve by step (validation dashed)");
        figures.push(("overview", "overview".into(), heading, &plan.overview));
    }
    for (plugin, panels) in &plan.models {
        let tasks = panels.first().map_or(0, |p| p.tasks.len());
        let more = match panels.len().saturating_sub(overview_chart::MAX_PANELS) {
            0 => String::new(),
            n => format!("; {n} more with --all"),
        };
        let heading = format!(
            "{job}: {plugin}, {tasks} task(s), each metric by step (validation dashed{more})"
        );
        figures.push(("model", plugin.clone(), heading, panels));
    }
    let mut written = Vec::new();
    for (kind, name, heading, panels) in figures {
        let path = match kind {
            "overview" => path_for("", "overview", "png"),
            _ => path_for("model", &name, "png"),
        };
        check_writable(&path)?;
        let shown = &panels[..panels.len().min(overview_chart::MAX_PANELS)];
        // The legend names each task of the panels once.
        let legend: BTreeSet<usize> = shown.iter().flat_map(|p| p.tasks.iter().copied()).collect();
        let size = overview_chart::size(shown.len(), legend.len(), width, height);
        overview_chart::draw(&path, history, &heading, shown, size)?;
        written.push(WrittenChart {
            metrics: shown.iter().map(|p| p.metric.clone()).collect(),
            ..png(path, kind, name, size)
        });
    }
    for metric in &charts {
        let path = path_for("metric", metric, "png");
        check_writable(&path)?;
        let series = metrics_chart::draw(&path, history, metric, (width, height))?;
        written.push(WrittenChart {
            series,
            ..png(path, "metric", metric.clone(), (width, height))
        });
    }
    if !plan.scalars.is_empty() {
        let path = path_for("", "scalars", "csv");
        let rows = write_scalars(&path, history, &plan.scalars)?;
        written.push(WrittenChart {
            width: None,
            height: None,
            metrics: plan.scalars.clone(),
            rows: Some(rows),
            ..png(path, "table", "scalars".into(), (0, 0))
        });
    }
    for device in &history.devices {
        let path = path_for("memory", &device.device, "png");
        check_writable(&path)?;
        memory_chart::draw(&path, history, device, (width, height))?;
        written.push(WrittenChart {
            reservations: Some(device.reservations.len()),
            budget_bytes: device.budget.last().map(|b| b.bytes),
            ..png(path, "memory", device.device.clone(), (width, height))
        });
    }
    Ok(written)
}

/// `scalars.csv`: `task_id,task,metric,step,value`, a row per task and
/// metric of `metrics` it reported (its last value; empty for NaN).
/// Returns the rows written.
fn write_scalars(
    path: &Path,
    history: &JobHistory,
    metrics: &[String],
) -> Result<usize, PlotError> {
    let mut text = String::from("task_id,task,metric,step,value\n");
    let mut rows = 0;
    for task in &history.tasks {
        for metric in metrics {
            let Some(series) = task.series.iter().find(|s| &s.name == metric) else {
                continue;
            };
            let (Some(step), Some(value)) = (series.steps.last(), series.values.last()) else {
                continue;
            };
            let value = if value.is_finite() {
                value.to_string()
            } else {
                String::new()
            };
            text.push_str(&format!(
                "{},{},{},{step},{value}\n",
                task.task_id,
                csv_field(&task_label(task)),
                csv_field(metric)
            ));
            rows += 1;
        }
    }
    std::fs::write(path, text).map_err(|source| PlotError::OutDir {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(rows)
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Creates (or truncates) the file, so that an unwritable place is an
/// error naming it before anything is drawn.
fn check_writable(path: &Path) -> Result<(), PlotError> {
    std::fs::File::create(path)
        .map(drop)
        .map_err(|source| PlotError::OutDir {
            path: path.to_path_buf(),
            source,
        })
}

/// How a drawing error reads.
/// A chart of this module: bitmap, f64 on both axes.
pub(crate) type Chart<'a, 'b> = plotters::chart::ChartContext<
    'a,
    plotters::prelude::BitMapBackend<'b>,
    plotters::prelude::Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::types::RangedCoordf64,
    >,
>;

/// The axes of a chart by step: `step` on x, `metric` on y, a light grid
/// (the metric charts and the sweep chart).
pub(crate) fn draw_step_mesh(
    chart: &mut Chart<'_, '_>,
    metric: &str,
    path: &Path,
) -> Result<(), PlotError> {
    use plotters::prelude::*;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(metric)
        .x_label_formatter(&metrics_chart::step_label)
        .y_label_formatter(&|v| short_number(*v))
        .label_style((font::FONT, 15))
        .axis_desc_style((font::FONT, 17))
        .light_line_style(RGBColor(246, 246, 246))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(|e| draw_error(path, &e))
}

/// The legend every chart here draws: upper right, on a light box.
pub(crate) fn draw_legend<'a>(chart: &mut Chart<'a, 'a>, path: &Path) -> Result<(), PlotError> {
    use plotters::prelude::*;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((font::FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(|e| draw_error(path, &e))
}

pub(crate) fn draw_error(path: &Path, e: &dyn std::fmt::Display) -> PlotError {
    PlotError::Draw {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Nanoseconds per day: time axes in days since the epoch.
pub(crate) const NS_PER_DAY: f64 = 86_400e9;

/// A time axis label: the date (UTC) of `days` since the epoch.
pub(crate) fn date_label(days: &f64) -> String {
    tli_data::timefmt::format((*days * NS_PER_DAY) as i64)
        .split('T')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A byte count's unit for an axis whose top is `max` bytes: MiB up to
/// 4 GiB, GiB above.
pub fn byte_unit(max: f64) -> (&'static str, f64) {
    const MIB: f64 = (1u64 << 20) as f64;
    const GIB: f64 = (1u64 << 30) as f64;
    if max > 4.0 * GIB {
        ("GiB", GIB)
    } else {
        ("MiB", MIB)
    }
}

/// An axis number without noise: `1.5k`, `2M`, `250`, `0.125`; anything
/// closer to 0 than 1e-12 is `0`.
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e9 {
        format!("{}G", trim(format!("{:.2}", v / 1e9)))
    } else if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a < 1e-12 {
        // Axis ticks near zero carry float noise (-2.8e-17).
        "0".to_string()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.2}"))
    } else if a >= 1e-3 {
        trim(format!("{v:.4}"))
    } else {
        format!("{v:.1e}")
    }
}

#[cfg(test)]
mod tests;
