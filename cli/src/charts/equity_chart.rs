//! A backtest as a picture (`tli backtest --plot FILE`): the model's equity
//! (cumulative net P&L) against buy-and-hold's on the same bars above, and
//! the model's drawdown (equity below its running peak) as a filled area
//! beneath, on one time axis.

use super::font::FONT;
use super::{date_label, draw_error, draw_legend, short_number, PlotError, NS_PER_DAY, PALETTE};
use plotters::prelude::*;
use std::path::Path;

/// The series a backtest chart draws; one value per bar.
#[derive(Clone, Debug)]
pub struct EquityCurves<'a> {
    pub title: String,
    /// Bar times, UTC nanoseconds.
    pub ts: &'a [i64],
    pub model: &'a [f64],
    pub buy_and_hold: &'a [f64],
    /// The currency of the P&L.
    pub currency: String,
    /// Times to mark with a vertical line (where walk-forward folds start).
    pub marks: &'a [i64],
}

fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let pad = ((hi - lo) * 0.05).max(1e-9);
    (lo - pad, hi + pad)
}

/// Draws `curves` to `path` (PNG, `size` pixels).
pub fn draw(path: &Path, curves: &EquityCurves<'_>, size: (u32, u32)) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| draw_error(path, e);
    super::font::register_font()?;
    let n = curves.ts.len();
    if n < 2 || curves.model.len() != n || curves.buy_and_hold.len() != n {
        return Err(err(
            &"an equity chart needs at least 2 bars and one value per bar",
        ));
    }
    let x: Vec<f64> = curves.ts.iter().map(|&t| t as f64 / NS_PER_DAY).collect();
    let (x0, x1) = (x[0], x[n - 1].max(x[0] + 1.0));
    let mut peak = f64::NEG_INFINITY;
    let drawdown: Vec<f64> = curves
        .model
        .iter()
        .map(|&e| {
            peak = peak.max(e);
            e - peak
        })
        .collect();

    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically((size.1 as f64 * 0.68) as u32);
    let (y0, y1) = range(curves.model.iter().chain(curves.buy_and_hold).copied());
    let mut chart = ChartBuilder::on(&top)
        .caption(&curves.title, (FONT, 22))
        .margin(18)
        .x_label_area_size(30)
        .y_label_area_size(90)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .y_desc(format!("net P&L ({})", curves.currency))
        .x_label_formatter(&date_label)
        .y_label_formatter(&|v| short_number(*v))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(246, 246, 246))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(|e| err(&e))?;
    let line = |values: &[f64]| -> Vec<(f64, f64)> {
        x.iter().copied().zip(values.iter().copied()).collect()
    };
    for (label, values, color) in [
        (
            "buy and hold (1 contract)",
            curves.buy_and_hold,
            RGBColor(150, 150, 150),
        ),
        ("model", curves.model, PALETTE[4]),
    ] {
        if label == "model" {
            // Under the model's curve: the fold starts, one thin line each.
            let mark = RGBColor(120, 120, 120).stroke_width(1);
            for (i, &t) in curves.marks.iter().enumerate() {
                let at = t as f64 / NS_PER_DAY;
                let drawn = chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(at, y0), (at, y1)],
                        mark,
                    )))
                    .map_err(|e| err(&e))?;
                if i == 0 {
                    drawn
                        .label("a new fold's model from here")
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x + 11, y - 7), (x + 11, y + 7)], mark)
                        });
                }
            }
        }
        let style = color.stroke_width(2);
        chart
            .draw_series(std::iter::once(PathElement::new(line(values), style)))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
    }
    draw_legend(&mut chart, path)?;

    let (d0, _) = range(drawdown.iter().copied());
    let mut lower = ChartBuilder::on(&bottom)
        .margin(18)
        .x_label_area_size(40)
        .y_label_area_size(90)
        .build_cartesian_2d(x0..x1, d0..0.0)
        .map_err(|e| err(&e))?;
    lower
        .configure_mesh()
        .y_desc("drawdown")
        .x_label_formatter(&date_label)
        .y_label_formatter(&|v| short_number(*v))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(246, 246, 246))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(|e| err(&e))?;
    // The area between the drawdown and 0, as one polygon, then its edge.
    let mut area = line(&drawdown);
    area.extend([(x[n - 1], 0.0), (x[0], 0.0)]);
    lower
        .draw_series(std::iter::once(Polygon::new(
            area,
            PALETTE[5].mix(0.35).filled(),
        )))
        .map_err(|e| err(&e))?;
    lower
        .draw_series(std::iter::once(PathElement::new(
            line(&drawdown),
            PALETTE[5].stroke_width(1),
        )))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
