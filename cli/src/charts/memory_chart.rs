//! One device's memory while a job ran: the memory arbiter at work. x is
//! wall time since the job was created (seconds, or minutes past ten); each
//! of the job's tasks is a stacked band of the bytes reserved for it (other
//! jobs' reservations in grey at the bottom); the device budget is a black
//! line (named in the legend instead when it is far above what the tasks
//! used) and the measured total (the sum of the holding tasks' latest
//! measurements) a dashed one.

use super::font::FONT;
use super::{
    byte_unit, draw_error, draw_legend, short_number, task_color, task_label, DeviceHistory,
    JobHistory, PlotError, OTHER_JOBS,
};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// A budget more than this many times the tasks' peak is named in the
/// legend rather than drawn (the chart scales to what the tasks used).
const BUDGET_OFF_CHART_FACTOR: u64 = 4;

/// A stacked band: one task of the job, or the other jobs together.
struct Band {
    label: String,
    color: RGBColor,
    /// Bytes held during each interval of the timeline.
    bytes: Vec<u64>,
}

/// The device's memory as steps: every value holds from `times[i]` to
/// `times[i + 1]`.
struct Timeline {
    times: Vec<i64>,
    bands: Vec<Band>,
    budget: Vec<Option<u64>>,
    measured: Vec<Option<u64>>,
}

/// The chart's time window: the job's creation to the end of its last
/// reservation (now while one is held), at least a second.
fn window(history: &JobHistory, device: &DeviceHistory) -> (i64, i64) {
    let start = history.created_ms;
    let end_of = |any_job: bool| {
        device
            .reservations
            .iter()
            .filter(|r| any_job || r.job_id == history.job_id)
            .map(|r| r.to_ms.unwrap_or(history.now_ms))
            .max()
    };
    let end = end_of(false)
        .or_else(|| end_of(true))
        .unwrap_or(history.now_ms);
    (start, end.max(start + 1000))
}

fn timeline(history: &JobHistory, device: &DeviceHistory) -> Timeline {
    let (start, end) = window(history, device);
    let clamp = |t: i64| t.clamp(start, end);
    let mut times = vec![start, end];
    for r in &device.reservations {
        times.push(clamp(r.from_ms));
        times.push(clamp(r.to_ms.unwrap_or(end)));
    }
    times.extend(device.budget.iter().map(|b| clamp(b.at_ms)));
    times.sort_unstable();
    times.dedup();
    let intervals = times.len() - 1;
    let held = |from: i64, to: Option<i64>, t: i64| from <= t && to.is_none_or(|to| to > t);

    let task_index = |task_id| history.tasks.iter().position(|t| t.task_id == task_id);
    let mut bands = Vec::new();
    let others: Vec<_> = device
        .reservations
        .iter()
        .filter(|r| r.job_id != history.job_id || task_index(r.task_id).is_none())
        .collect();
    if !others.is_empty() {
        bands.push(Band {
            label: "other jobs".into(),
            color: OTHER_JOBS,
            bytes: (0..intervals)
                .map(|i| {
                    others
                        .iter()
                        .filter(|r| held(r.from_ms, r.to_ms, times[i]))
                        .map(|r| r.bytes)
                        .sum()
                })
                .collect(),
        });
    }
    for (index, task) in history.tasks.iter().enumerate() {
        let spans: Vec<_> = device
            .reservations
            .iter()
            .filter(|r| r.job_id == history.job_id && r.task_id == task.task_id)
            .collect();
        if spans.is_empty() {
            continue;
        }
        bands.push(Band {
            label: task_label(task),
            color: task_color(index),
            bytes: (0..intervals)
                .map(|i| {
                    spans
                        .iter()
                        .filter(|r| held(r.from_ms, r.to_ms, times[i]))
                        .map(|r| r.bytes)
                        .sum()
                })
                .collect(),
        });
    }
    let budget = (0..intervals)
        .map(|i| {
            device
                .budget
                .iter()
                .rev()
                .find(|b| b.at_ms <= times[i])
                .map(|b| b.bytes)
        })
        .collect();
    let measured = (0..intervals)
        .map(|i| {
            let mut open = device
                .reservations
                .iter()
                .filter(|r| held(r.from_ms, r.to_ms, times[i]))
                .filter_map(|r| r.measured_bytes)
                .peekable();
            open.peek().is_some().then(|| open.sum())
        })
        .collect();
    Timeline {
        times,
        bands,
        budget,
        measured,
    }
}

/// Runs of a step function's defined values as chart points.
fn step_runs(times: &[f64], values: &[Option<u64>], scale: f64) -> Vec<Vec<(f64, f64)>> {
    let mut runs = Vec::new();
    let mut run = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match v {
            Some(v) => {
                let y = *v as f64 / scale;
                run.push((times[i], y));
                run.push((times[i + 1], y));
            }
            None if !run.is_empty() => runs.push(std::mem::take(&mut run)),
            None => {}
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    runs
}

/// Draws `device`'s memory timeline for `history`'s job to `path`.
pub fn draw(
    path: &Path,
    history: &JobHistory,
    device: &DeviceHistory,
    size: (u32, u32),
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| draw_error(path, e);
    let line = timeline(history, device);
    let start = line.times[0];
    let seconds = (line.times[line.times.len() - 1] - start) as f64 / 1000.0;
    let (time_unit, per_unit) = if seconds > 600.0 {
        ("minutes", 60_000.0)
    } else {
        ("seconds", 1000.0)
    };
    let xs: Vec<f64> = line
        .times
        .iter()
        .map(|&t| (t - start) as f64 / per_unit)
        .collect();
    let intervals = xs.len() - 1;
    let stacked: Vec<u64> = (0..intervals)
        .map(|i| line.bands.iter().map(|b| b.bytes[i]).sum())
        .collect();
    let usage_top = stacked
        .iter()
        .chain(line.measured.iter().flatten())
        .copied()
        .max()
        .unwrap_or(0);
    let budget_top = line.budget.iter().flatten().copied().max().unwrap_or(0);
    // A budget far above what the tasks used would flatten their bands to a
    // sliver: the chart then scales to the usage and names the budget instead.
    let budget_off_chart = usage_top > 0 && budget_top > BUDGET_OFF_CHART_FACTOR * usage_top;
    let top = if budget_off_chart {
        usage_top
    } else {
        usage_top.max(budget_top)
    } as f64;
    let (byte_unit_name, scale) = byte_unit(top);
    // Room above the highest line for the legend (about 20 px an entry).
    let entries = line.bands.len() + 2;
    let plot_px = f64::from(size.1.saturating_sub(140).max(100));
    let legend = ((20 * entries + 24) as f64 / plot_px).min(0.6);
    let y_top = (top / scale / (1.0 - legend - 0.04)).max(1.0);

    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let budget_note = if device.budget.is_empty() {
        " (budget not recorded)"
    } else {
        ""
    };
    let caption = format!(
        "job {} \u{201c}{}\u{201d}: memory on {}{budget_note}",
        history.job_id, history.name, device.device
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (FONT, 24))
        .margin(18)
        .x_label_area_size(55)
        .y_label_area_size(85)
        .build_cartesian_2d(0f64..xs[intervals], 0f64..y_top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(format!("{time_unit} since the job was created"))
        .y_desc(format!("memory ({byte_unit_name})"))
        .x_label_formatter(&|v| short_number(*v))
        .y_label_formatter(&|v| short_number(*v))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .light_line_style(RGBColor(246, 246, 246))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(|e| err(&e))?;

    let mut below = vec![0u64; intervals];
    for band in &line.bands {
        let mut upper = Vec::with_capacity(intervals * 2);
        let mut lower = Vec::with_capacity(intervals * 2);
        for i in 0..intervals {
            let (lo, hi) = (below[i], below[i] + band.bytes[i]);
            for x in [xs[i], xs[i + 1]] {
                upper.push((x, hi as f64 / scale));
                lower.push((x, lo as f64 / scale));
            }
            below[i] = hi;
        }
        lower.reverse();
        upper.extend(lower);
        let fill = band.color.mix(0.85).filled();
        chart
            .draw_series(std::iter::once(Polygon::new(upper, fill)))
            .map_err(|e| err(&e))?
            .label(format!("{} (reserved)", band.label))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 22, y + 6)], fill));
    }
    let budget_style = BLACK.stroke_width(2);
    if budget_off_chart {
        // An invisible point carries the legend entry.
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(xs[0], 0.0)],
                budget_style,
            )))
            .map_err(|e| err(&e))?
            .label(format!(
                "budget {} (above the chart)",
                tli_core::byte_size::format_bytes(budget_top)
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], budget_style));
    }
    let budget_runs = if budget_off_chart {
        Vec::new()
    } else {
        step_runs(&xs, &line.budget, scale)
    };
    for (k, run) in budget_runs.into_iter().enumerate() {
        let drawn = chart
            .draw_series(std::iter::once(PathElement::new(run, budget_style)))
            .map_err(|e| err(&e))?;
        if k == 0 {
            drawn
                .label("budget")
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], budget_style));
        }
    }
    let measured_style = RGBColor(90, 90, 90).stroke_width(2);
    for (k, run) in step_runs(&xs, &line.measured, scale)
        .into_iter()
        .enumerate()
    {
        let drawn = chart
            .draw_series(std::iter::once(DashedPathElement::new(
                run,
                8,
                5,
                measured_style,
            )))
            .map_err(|e| err(&e))?;
        if k == 0 {
            drawn.label("measured total").legend(move |(x, y)| {
                DashedPathElement::new(vec![(x, y), (x + 22, y)], 6, 4, measured_style)
            });
        }
    }
    if device.reservations.is_empty() && device.budget.is_empty() {
        let (w, h) = root.dim_in_pixel();
        let grey = BLACK.mix(0.6);
        let style = TextStyle::from((FONT, 18).into_font())
            .pos(Pos::new(HPos::Center, VPos::Center))
            .color(&grey);
        root.draw(&Text::new(
            "nothing recorded on this device for this job",
            (w as i32 / 2, h as i32 / 2),
            style,
        ))
        .map_err(|e| err(&e))?;
    } else {
        draw_legend(&mut chart, path)?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::charts::{BudgetChange, ReservationSpan, TaskHistory};

    fn span(task_id: i64, job_id: i64, bytes: u64, from: i64, to: Option<i64>) -> ReservationSpan {
        ReservationSpan {
            task_id,
            job_id,
            bytes,
            measured_bytes: (task_id == 1).then_some(bytes / 2),
            from_ms: from,
            to_ms: to,
        }
    }

    #[test]
    fn the_timeline_stacks_tasks_and_steps_the_budget() {
        let task = |task_id| TaskHistory {
            task_id,
            ordinal: task_id as u32 - 1,
            plugin: "template".into(),
            asset: "A".into(),
            device: "cpu".into(),
            series: vec![],
        };
        let history = JobHistory {
            job_id: 5,
            name: "j".into(),
            created_ms: 1000,
            now_ms: 9000,
            metric_names: vec![],
            tasks: vec![task(1), task(2)],
            devices: vec![],
        };
        let device = DeviceHistory {
            device: "cpu".into(),
            budget: vec![
                BudgetChange {
                    at_ms: 0,
                    bytes: 100,
                },
                BudgetChange {
                    at_ms: 3000,
                    bytes: 80,
                },
            ],
            reservations: vec![
                span(1, 5, 40, 1000, Some(4000)),
                span(9, 4, 10, 500, Some(2000)),
                span(2, 5, 30, 2000, None),
            ],
        };
        let t = timeline(&history, &device);
        // The window ends now, while task 2 still holds its reservation.
        assert_eq!(t.times, [1000, 2000, 3000, 4000, 9000]);
        let labels: Vec<&str> = t.bands.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(
            labels,
            ["other jobs", "task 1 template/A", "task 2 template/A"]
        );
        assert_eq!(t.bands[0].bytes, [10, 0, 0, 0]);
        assert_eq!(t.bands[1].bytes, [40, 40, 40, 0]);
        assert_eq!(t.bands[2].bytes, [0, 30, 30, 30]);
        assert_eq!(t.budget, [Some(100), Some(100), Some(80), Some(80)]);
        assert_eq!(t.measured, [Some(20), Some(20), Some(20), None]);
        let runs = step_runs(&[0.0, 1.0, 2.0, 3.0, 8.0], &t.measured, 1.0);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].first(), Some(&(0.0, 20.0)));
        assert_eq!(runs[0].last(), Some(&(3.0, 20.0)));
    }
}
