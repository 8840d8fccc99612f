//! Figures of small panels: one metric each, a line per task of the
//! panel's (a training metric's validation twin dashed in the same colour),
//! the tasks' colours named once below the grid. `tli train plot` draws the
//! job's overview with them (a panel per model: its training loss) and a
//! figure per model (a panel per metric curve it reports).

use super::font::FONT;
use super::metrics_chart::{draw_lines, lines_value_range, step_label, step_range, MetricLines};
use super::{draw_error, short_number, task_color, task_label, JobHistory, PlotError, MAX_SIDE};
use plotters::prelude::*;
use std::path::Path;

/// Panels in one figure; further metrics have their own charts only.
pub const MAX_PANELS: usize = 12;

/// One panel: `metric`'s lines for the tasks at `tasks` (indices in the job).
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    pub title: String,
    pub metric: String,
    pub tasks: Vec<usize>,
}
/// Height of one row of panels, in pixels.
const PANEL_HEIGHT: u32 = 300;
const TITLE_HEIGHT: u32 = 48;
/// Legend entries per line and the height of a line.
const LEGEND_COLUMNS: usize = 3;
const LEGEND_LINE: u32 = 24;

/// The overview's size for `panels` metrics and `tasks` legend entries at
/// `width`: rows of [`PANEL_HEIGHT`], at least `min_height`.
pub fn size(panels: usize, tasks: usize, width: u32, min_height: u32) -> (u32, u32) {
    let (_, rows) = grid(panels);
    let legend = legend_height(tasks);
    let height = (TITLE_HEIGHT + rows as u32 * PANEL_HEIGHT + legend)
        .max(min_height)
        .min(MAX_SIDE);
    (width, height)
}

/// Columns and rows for `panels` panels: up to three side by side.
fn grid(panels: usize) -> (usize, usize) {
    let cols = panels.clamp(1, 3);
    (cols, panels.div_ceil(cols).max(1))
}

fn legend_height(tasks: usize) -> u32 {
    tasks.div_ceil(LEGEND_COLUMNS) as u32 * LEGEND_LINE + 16
}

/// Draws `panels` (at most [`MAX_PANELS`]) under `heading` to `path` at `size`.
pub fn draw(
    path: &Path,
    history: &JobHistory,
    heading: &str,
    panels: &[Panel],
    size: (u32, u32),
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| draw_error(path, e);
    let panels = &panels[..panels.len().min(MAX_PANELS)];
    let mut shown: Vec<usize> = panels.iter().flat_map(|p| p.tasks.clone()).collect();
    shown.sort_unstable();
    shown.dedup();
    shown.retain(|&i| {
        panels.iter().any(|p| {
            p.tasks.contains(&i) && history.tasks[i].series.iter().any(|s| s.name == p.metric)
        })
    });
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (title, rest) = root.split_vertically(TITLE_HEIGHT);
    let legend_top = size
        .1
        .saturating_sub(TITLE_HEIGHT + legend_height(shown.len()));
    let (panels_area, legend) = rest.split_vertically(legend_top);
    title.titled(heading, (FONT, 22)).map_err(|e| err(&e))?;
    let (cols, rows) = grid(panels.len());
    for (panel, area) in panels.iter().zip(panels_area.split_evenly((rows, cols))) {
        let MetricLines {
            mut lines,
            mut twins,
            ..
        } = MetricLines::of(history, &panel.metric);
        lines.retain(|(i, _, _)| panel.tasks.contains(i));
        twins.retain(|(i, _)| panel.tasks.contains(i));
        let (y0, y1) = lines_value_range(&lines, &twins);
        let (x0, x1) = step_range(&lines);
        let mut chart = ChartBuilder::on(&area)
            .caption(&panel.title, (FONT, 17))
            .margin(10)
            .x_label_area_size(26)
            .y_label_area_size(58)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_labels(4)
            .y_labels(5)
            .x_label_formatter(&step_label)
            .y_label_formatter(&|v| tick_label(*v, y1 - y0))
            .label_style((FONT, 12))
            .light_line_style(RGBColor(246, 246, 246))
            .bold_line_style(RGBColor(215, 215, 215))
            .draw()
            .map_err(|e| err(&e))?;
        draw_lines(&mut chart, &lines, &twins, 2, path)?;
    }
    // The legend: a swatch and the task's label, three to a line.
    let column_width = (size.0 / LEGEND_COLUMNS as u32) as i32;
    for (n, &index) in shown.iter().enumerate() {
        let x = 24 + (n % LEGEND_COLUMNS) as i32 * column_width;
        let y = 8 + (n / LEGEND_COLUMNS) as i32 * LEGEND_LINE as i32;
        let color = task_color(index);
        legend
            .draw(&Rectangle::new(
                [(x, y + 4), (x + 26, y + 10)],
                color.filled(),
            ))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(
                task_label(&history.tasks[index]),
                (x + 34, y),
                (FONT, 15),
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// An axis number with the decimals its axis needs: ticks over a narrow
/// range (1.002 … 1.018) keep the digits that tell them apart, where
/// [`short_number`] would print 1, 1.01, 1.01.
pub fn tick_label(v: f64, span: f64) -> String {
    if !(span.is_finite() && span > 0.0) || v.abs() >= 1e4 || v.abs() < 1e-12 {
        return short_number(v);
    }
    let decimals = (-(span / 5.0).log10()).ceil().clamp(0.0, 8.0) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_and_size_follow_the_panels_and_tasks() {
        assert_eq!(grid(1), (1, 1));
        assert_eq!(grid(2), (2, 1));
        assert_eq!(grid(4), (3, 2));
        assert_eq!(grid(12), (3, 4));
        assert_eq!(size(4, 2, 1200, 700), (1200, 700));
        let (_, tall) = size(12, 9, 1200, 700);
        assert_eq!(tall, TITLE_HEIGHT + 4 * PANEL_HEIGHT + 3 * LEGEND_LINE + 16);
        assert_eq!(size(12, 5000, 1200, 700).1, MAX_SIDE);
    }

    #[test]
    fn ticks_keep_the_digits_that_tell_them_apart() {
        assert_eq!(tick_label(1.005, 0.02), "1.005");
        assert_eq!(tick_label(1.01, 0.02), "1.01");
        assert_eq!(tick_label(0.5, 1.0), "0.5");
        assert_eq!(tick_label(250.0, 400.0), "250");
        assert_eq!(tick_label(20_000.0, 40_000.0), "20k");
        assert_eq!(tick_label(-2.8e-17, 1.0), "0");
        assert_eq!(tick_label(0.25, 0.0), short_number(0.25));
    }
}
