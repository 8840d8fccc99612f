//! A forecaster's forecasts against what happened (`tli backtest --plots
//! DIR`, `forecast.png`): the realized return of each bar's next bar as
//! points, the model's P50 as a line and its P10–P90 band shaded, over the
//! last bars of the backtest (a few hundred stay readable).

use super::font::FONT;
use super::{date_label, draw_error, draw_legend, PlotError, NS_PER_DAY, PALETTE};
use plotters::prelude::*;
use std::path::Path;

/// One value per bar; `p10`/`p90` empty for a point forecaster.
#[derive(Clone, Debug)]
pub struct ForecastSeries<'a> {
    pub title: String,
    pub ts: &'a [i64],
    pub p50: &'a [f64],
    pub p10: &'a [f64],
    pub p90: &'a [f64],
    pub actual: &'a [f64],
}

/// Bars drawn at most (the last ones).
pub const MAX_BARS: usize = 300;

/// Draws `series` (its last [`MAX_BARS`] bars) to `path`.
pub fn draw(path: &Path, series: &ForecastSeries<'_>, size: (u32, u32)) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| draw_error(path, e);
    super::font::register_font()?;
    let n = series.ts.len();
    let banded = series.p10.len() == n && series.p90.len() == n;
    if n < 2 || series.p50.len() != n || series.actual.len() != n {
        return Err(err(
            &"a forecast chart needs at least 2 bars and one value per bar",
        ));
    }
    let from = n.saturating_sub(MAX_BARS);
    let x: Vec<f64> = series.ts[from..]
        .iter()
        .map(|&t| t as f64 / NS_PER_DAY)
        .collect();
    let pick = |v: &[f64]| -> Vec<(f64, f64)> {
        x.iter()
            .copied()
            .zip(v[from..].iter().copied())
            .filter(|(_, y)| y.is_finite())
            .collect()
    };
    let all: Vec<f64> = [series.p50, series.actual, series.p10, series.p90]
        .iter()
        .filter(|v| v.len() == n)
        .flat_map(|v| v[from..].iter().copied())
        .filter(|v| v.is_finite())
        .collect();
    let (lo, hi) = all
        .iter()
        .fold((0.0f64, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let pad = ((hi - lo) * 0.05).max(1e-6);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&series.title, (FONT, 22))
        .margin(18)
        .x_label_area_size(45)
        .y_label_area_size(90)
        .build_cartesian_2d(x[0]..x[x.len() - 1].max(x[0] + 1.0), (lo - pad)..(hi + pad))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .y_desc("log return of the next bar")
        .x_label_formatter(&date_label)
        .y_label_formatter(&|v| format!("{:.1}%", v * 100.0))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(246, 246, 246))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(|e| err(&e))?;
    if banded {
        let mut band = pick(series.p90);
        let mut lower = pick(series.p10);
        lower.reverse();
        band.extend(lower);
        chart
            .draw_series(std::iter::once(Polygon::new(
                band,
                PALETTE[1].mix(0.3).filled(),
            )))
            .map_err(|e| err(&e))?
            .label("P10–P90")
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 5), (x + 22, y + 5)], PALETTE[1].mix(0.3).filled())
            });
    }
    chart
        .draw_series(
            pick(series.actual)
                .into_iter()
                .map(|p| Circle::new(p, 2, BLACK.mix(0.6).filled())),
        )
        .map_err(|e| err(&e))?
        .label("realized")
        .legend(|(x, y)| Circle::new((x + 11, y), 3, BLACK.mix(0.6).filled()));
    let style = PALETTE[4].stroke_width(2);
    chart
        .draw_series(std::iter::once(PathElement::new(pick(series.p50), style)))
        .map_err(|e| err(&e))?
        .label(if banded { "P50" } else { "forecast" })
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
    draw_legend(&mut chart, path)?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
