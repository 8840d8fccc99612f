//! One metric of a job over steps: a line per task that reported it (x =
//! step, y = the value), labelled `task M plugin/asset`. A NaN breaks the
//! line; short series (validation scores every so many steps) get markers.
//! A training metric's chart (`train_loss`) also draws its validation twin
//! (`valid_loss`) dashed in the same colour, so overfitting shows where the
//! two part.

use super::font::FONT;
use super::{
    draw_error, draw_legend, draw_step_mesh, short_number, task_color, task_label, Chart,
    JobHistory, MetricSeries, PlotError, SeriesSummary,
};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::path::Path;

/// Series with at most this many points also get a marker per point.
pub(crate) const MARKERS_UP_TO: usize = 60;

/// The value range with 5 % room, or a unit range around a constant.
pub(crate) fn value_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        (0.0, 1.0)
    } else if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let pad = (lo.abs() * 0.1).max(1e-3);
        (lo - pad, hi + pad)
    } else {
        let pad = (hi - lo) * 0.05;
        (lo - pad, hi + pad)
    }
}

/// The runs of finite points of a series, as (step, value).
pub(crate) fn segments(s: &MetricSeries) -> Vec<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    let mut run = Vec::new();
    for (&step, &value) in s.steps.iter().zip(&s.values) {
        if value.is_finite() {
            run.push((step as f64, value));
        } else if !run.is_empty() {
            out.push(std::mem::take(&mut run));
        }
    }
    if !run.is_empty() {
        out.push(run);
    }
    out
}

/// Steps are whole numbers: ticks between them (a short range) stay unlabelled.
pub(crate) fn step_label(v: &f64) -> String {
    if (v - v.round()).abs() > 1e-9 {
        String::new()
    } else {
        short_number(v.round())
    }
}

/// The lines of one metric's chart: per task that reported it (its index
/// in the job, its label, the series), and the validation twin of a
/// training metric (`valid_loss` for `train_loss`) with each task's series.
pub(crate) struct MetricLines<'a> {
    pub lines: Vec<(usize, String, &'a MetricSeries)>,
    pub twin: Option<String>,
    pub twins: Vec<(usize, &'a MetricSeries)>,
}

impl<'a> MetricLines<'a> {
    pub fn of(history: &'a JobHistory, metric: &str) -> Self {
        let lines: Vec<(usize, String, &MetricSeries)> = history
            .tasks
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                t.series
                    .iter()
                    .find(|s| s.name == metric)
                    .map(|s| (i, task_label(t), s))
            })
            .collect();
        let twin = twin_of(metric).filter(|t| history.metric_names.contains(t));
        let twins = match &twin {
            Some(t) => lines
                .iter()
                .filter_map(|(i, _, _)| {
                    history.tasks[*i]
                        .series
                        .iter()
                        .find(|s| &s.name == t)
                        .map(|s| (*i, s))
                })
                .collect(),
            None => Vec::new(),
        };
        MetricLines { lines, twin, twins }
    }
}

/// The validation twin's name of a training metric (`train_x` → `valid_x`).
pub(crate) fn twin_of(metric: &str) -> Option<String> {
    metric
        .strip_prefix("train_")
        .map(|rest| format!("valid_{rest}"))
}

/// The value range of the lines and their twins (5 % room).
pub(crate) fn lines_value_range(
    lines: &[(usize, String, &MetricSeries)],
    twins: &[(usize, &MetricSeries)],
) -> (f64, f64) {
    value_range(
        lines
            .iter()
            .flat_map(|(_, _, s)| s.values.iter().copied())
            .chain(twins.iter().flat_map(|(_, s)| s.values.iter().copied())),
    )
}

/// The steps the lines span (a unit range around a single step).
pub(crate) fn step_range(lines: &[(usize, String, &MetricSeries)]) -> (f64, f64) {
    lines
        .iter()
        .flat_map(|(_, _, s)| s.steps.iter().map(|&x| x as f64))
        .fold(None, |acc: Option<(f64, f64)>, x| {
            Some(acc.map_or((x, x), |(lo, hi)| (lo.min(x), hi.max(x))))
        })
        .map(|(lo, hi)| {
            if hi > lo {
                (lo, hi)
            } else {
                (lo - 1.0, hi + 1.0)
            }
        })
        .unwrap_or((0.0, 1.0))
}

/// Each task's line in its colour (markers on short series and lone
/// points, `marker` pixels), then the validation twins dashed in the same
/// colours; `path` names the chart in errors.
pub(crate) fn draw_lines(
    chart: &mut Chart<'_, '_>,
    lines: &[(usize, String, &MetricSeries)],
    twins: &[(usize, &MetricSeries)],
    marker: u32,
    path: &Path,
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| draw_error(path, e);
    for (index, _, series) in lines {
        let color = task_color(*index);
        for run in segments(series) {
            if series.steps.len() <= MARKERS_UP_TO || run.len() == 1 {
                chart
                    .draw_series(run.iter().map(|&p| Circle::new(p, marker, color.filled())))
                    .map_err(|e| err(&e))?;
            }
            chart
                .draw_series(std::iter::once(PathElement::new(
                    run,
                    color.stroke_width(2),
                )))
                .map_err(|e| err(&e))?;
        }
    }
    for (index, series) in twins {
        let color = task_color(*index);
        for run in segments(series) {
            chart
                .draw_series(run.iter().map(|&p| Circle::new(p, marker, color.filled())))
                .map_err(|e| err(&e))?;
            chart
                .draw_series(std::iter::once(DashedPathElement::new(
                    run,
                    7,
                    5,
                    color.stroke_width(2),
                )))
                .map_err(|e| err(&e))?;
        }
    }
    Ok(())
}

/// Draws `metric` of every task of `history` to `path`; returns a summary
/// of each line drawn.
pub fn draw(
    path: &Path,
    history: &JobHistory,
    metric: &str,
    size: (u32, u32),
) -> Result<Vec<SeriesSummary>, PlotError> {
    let err = |e: &dyn std::fmt::Display| draw_error(path, e);
    let MetricLines { lines, twin, twins } = MetricLines::of(history, metric);
    let (y0, y1) = lines_value_range(&lines, &twins);
    let (x0, x1) = step_range(&lines);

    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let caption = match &twin {
        Some(t) if !twins.is_empty() => format!(
            "job {} \u{201c}{}\u{201d}: {metric} (solid) and {t} (dashed) by step, per task",
            history.job_id, history.name
        ),
        _ => format!(
            "job {} \u{201c}{}\u{201d}: {metric} by step, per task",
            history.job_id, history.name
        ),
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (FONT, 24))
        .margin(18)
        .x_label_area_size(55)
        .y_label_area_size(85)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    draw_step_mesh(&mut chart, metric, path)?;

    let mut summaries = Vec::with_capacity(lines.len());
    for (index, label, series) in &lines {
        let style = task_color(*index).stroke_width(2);
        // An empty series carries the legend entry; the lines follow.
        chart
            .draw_series(std::iter::once(PathElement::new(
                Vec::<(f64, f64)>::new(),
                style,
            )))
            .map_err(|e| err(&e))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
        summaries.push(SeriesSummary {
            task_id: history.tasks[*index].task_id,
            label: label.clone(),
            points: series.steps.len(),
            recorded_points: series.recorded_points,
            first_step: series.steps.first().copied(),
            last_step: series.steps.last().copied(),
            last_value: series.values.last().copied().filter(|v| v.is_finite()),
        });
    }
    draw_lines(&mut chart, &lines, &twins, 3, path)?;
    if !lines.is_empty() {
        draw_legend(&mut chart, path)?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(summaries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_runs() {
        assert_eq!(value_range([].into_iter()), (0.0, 1.0));
        assert_eq!(value_range([f64::NAN].into_iter()), (0.0, 1.0));
        let (lo, hi) = value_range([2.0, 2.0].into_iter());
        assert!(lo < 2.0 && hi > 2.0);
        assert_eq!(value_range([0.0, 10.0, f64::NAN].into_iter()), (-0.5, 10.5));
        let s = MetricSeries {
            name: "loss".into(),
            steps: vec![1, 2, 3, 4, 5],
            values: vec![1.0, f64::NAN, 3.0, 4.0, f64::INFINITY],
            at_ms: vec![0; 5],
            recorded_points: 5,
        };
        assert_eq!(step_label(&1500.0), "1500");
        assert_eq!(step_label(&1499.8), "");
        assert_eq!(step_label(&25_000.0), "25k");
        assert_eq!(
            segments(&s),
            vec![vec![(1.0, 1.0)], vec![(3.0, 3.0), (4.0, 4.0)]]
        );
    }
}
