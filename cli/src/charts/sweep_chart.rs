//! A sweep's metric against steps (`tli sweep results --plot`): one line per
//! trial. Trials that trained to the end are coloured and named by their
//! searched values in the legend (the best one thicker, with a star);
//! trials stopped early are grey and end in a cross at the rung that
//! stopped them; dashed vertical lines mark the rungs.

use super::font::FONT;
use super::metrics_chart::value_range;
use super::{draw_error, draw_legend, draw_step_mesh, task_color, PlotError};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::path::Path;

/// Stopped trials' lines.
const STOPPED: RGBColor = RGBColor(170, 170, 170);

/// One trial's curve.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialLine {
    /// `trial 7: dropout=0, hidden_size=32`.
    pub label: String,
    pub points: Vec<(u64, f64)>,
    /// It trained to `max_steps`.
    pub finished: bool,
    pub best: bool,
}

/// Draws `lines` to `path`.
pub fn draw(
    path: &Path,
    title: &str,
    metric: &str,
    rungs: &[u64],
    lines: &[TrialLine],
    size: (u32, u32),
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| draw_error(path, e);
    let finite = |l: &TrialLine| -> Vec<(f64, f64)> {
        l.points
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|&(s, v)| (s as f64, v))
            .collect()
    };
    let (y0, y1) = value_range(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)));
    let x1 = rungs
        .iter()
        .copied()
        .chain(lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(18)
        .x_label_area_size(55)
        .y_label_area_size(85)
        .build_cartesian_2d(0.0..x1 * 1.02, y0..y1)
        .map_err(|e| err(&e))?;
    draw_step_mesh(&mut chart, metric, path)?;
    for &r in rungs {
        chart
            .draw_series(std::iter::once(DashedPathElement::new(
                vec![(r as f64, y0), (r as f64, y1)],
                6,
                4,
                BLACK.mix(0.35).stroke_width(1),
            )))
            .map_err(|e| err(&e))?;
    }
    // Stopped trials first (underneath), one legend entry for all of them.
    let stopped: Vec<&TrialLine> = lines.iter().filter(|l| !l.finished).collect();
    for (i, line) in stopped.iter().enumerate() {
        let points = finite(line);
        let style = STOPPED.stroke_width(1);
        let series = chart
            .draw_series(std::iter::once(PathElement::new(points.clone(), style)))
            .map_err(|e| err(&e))?;
        if i == 0 {
            series
                .label(format!(
                    "{} trial(s) stopped early (× where)",
                    stopped.len()
                ))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
        }
        if let Some(&last) = points.last() {
            chart
                .draw_series(std::iter::once(Cross::new(
                    last,
                    5,
                    STOPPED.stroke_width(2),
                )))
                .map_err(|e| err(&e))?;
        }
    }
    for (i, line) in lines.iter().filter(|l| l.finished).enumerate() {
        let color = task_color(i);
        let style = color.stroke_width(if line.best { 4 } else { 2 });
        let label = if line.best {
            format!("{} ★ best", line.label)
        } else {
            line.label.clone()
        };
        let points = finite(line);
        chart
            .draw_series(std::iter::once(PathElement::new(points.clone(), style)))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    if !lines.is_empty() {
        draw_legend(&mut chart, path)?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
