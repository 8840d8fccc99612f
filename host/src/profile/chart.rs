//! `tli profile memory --chart FILE.png`: the measured comparison as a
//! grouped bar chart (plotters, bitmap backend).
//!
//! One group per quantity (parameters, optimizer state, both together,
//! gradients, activations, the tensor total, and the independent peak: the
//! CUDA allocator's on a GPU, resident memory's on a CPU), one bar per
//! config, in MiB, each labelled with its size. With two configs or more a
//! second panel below draws each one's ratio to the first
//! as bars on their own axis (1× marked), so a saving on a small quantity —
//! INT8's parameters and optimizer state beside much larger activations —
//! is as visible as one on a large one. Text needs a TrueType font, found
//! at run time ([`tli_cli::charts::font`]).

use super::MemoryProfile;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;
use thiserror::Error;
use tli_cli::charts::font::{register_font, FontError, FONT};

#[derive(Clone, Debug, Error)]
pub enum ChartError {
    /// No usable font (`NoFont`, `BadFont`).
    #[error(transparent)]
    Font(#[from] FontError),
    #[error("nothing to chart: no profiles")]
    Empty,
    #[error("drawing the chart {path}: {reason}")]
    Draw { path: String, reason: String },
}

const MIB: f64 = (1u64 << 20) as f64;
const COLORS: [RGBColor; 6] = [
    RGBColor(70, 110, 180),
    RGBColor(230, 140, 40),
    RGBColor(80, 160, 90),
    RGBColor(190, 70, 70),
    RGBColor(140, 100, 170),
    RGBColor(120, 120, 120),
];

/// The quantities drawn, with each profile's value in bytes.
fn groups(profiles: &[MemoryProfile]) -> Vec<(String, Vec<u64>)> {
    let on_gpu = profiles.iter().all(|p| p.cuda.is_some());
    let peak_name = if on_gpu {
        "CUDA peak over baseline"
    } else {
        "peak RSS over baseline"
    };
    let column = |f: &dyn Fn(&MemoryProfile) -> u64| profiles.iter().map(f).collect::<Vec<_>>();
    vec![
        ("parameters".into(), column(&|p| p.tensors.parameters)),
        (
            "optimizer state".into(),
            column(&|p| p.tensors.optimizer_state),
        ),
        (
            "params + optimizer".into(),
            column(&|p| p.tensors.parameters + p.tensors.optimizer_state),
        ),
        ("gradients".into(), column(&|p| p.tensors.gradients)),
        ("activations".into(), column(&|p| p.tensors.activations)),
        ("tensor total".into(), column(&|p| p.tensors.total)),
        (
            peak_name.into(),
            column(&|p| match (&p.cuda, on_gpu) {
                (Some(c), true) => c.peak_over_baseline,
                _ => p.process.peak_over_baseline,
            }),
        ),
    ]
}

/// Writes the chart of `profiles` (ratios to the first) to `path` as PNG.
pub fn write_chart(path: &Path, profiles: &[MemoryProfile]) -> Result<(), ChartError> {
    let first = profiles.first().ok_or(ChartError::Empty)?;
    register_font()?;
    let draw_err = |e: &dyn std::fmt::Display| ChartError::Draw {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let groups = groups(profiles);
    let top = groups
        .iter()
        .flat_map(|(_, v)| v.iter())
        .fold(0u64, |a, &b| a.max(b)) as f64
        / MIB;
    let bars = profiles.len() as f64;
    let width = 0.8 / bars;

    let compared = profiles.len() > 1;
    let height = if compared { 1000 } else { 650 };
    let whole = BitMapBackend::new(path, (1200, height)).into_drawing_area();
    whole.fill(&WHITE).map_err(|e| draw_err(&e))?;
    let (root, below) = whole.split_vertically(650);
    let caption = format!(
        "{}: memory of one training task, measured after {} step(s) on {}",
        first.plugin, first.steps, first.device
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (FONT, 22))
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..groups.len() as f64, 0f64..(top * 1.15).max(1.0))
        .map_err(|e| draw_err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("MiB")
        .label_style((FONT, 15))
        .draw()
        .map_err(|e| draw_err(&e))?;

    for (k, profile) in profiles.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let left = |g: usize| g as f64 + 0.1 + k as f64 * width;
        let rects = groups.iter().enumerate().map(|(g, (_, values))| {
            let mib = values[k] as f64 / MIB;
            Rectangle::new(
                [(left(g), 0.0), (left(g) + width * 0.92, mib)],
                color.filled(),
            )
        });
        chart
            .draw_series(rects)
            .map_err(|e| draw_err(&e))?
            .label(profile.label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        // Beyond three configs a bar is too narrow for its label: every
        // other one is raised so that neighbours do not overlap.
        let crowded = profiles.len() > 3;
        let value_style = TextStyle::from((FONT, if crowded { 12 } else { 13 }).into_font())
            .pos(Pos::new(HPos::Center, VPos::Bottom))
            .color(&BLACK);
        let raise = if crowded && k % 2 == 1 { 0.04 } else { 0.0 };
        let labels = groups.iter().enumerate().map(|(g, (_, values))| {
            let mib = values[k] as f64 / MIB;
            let size = if mib < 10.0 {
                format!("{mib:.1}")
            } else {
                format!("{mib:.0}")
            };
            // Ratios are in the panel below (two configs or more).
            Text::new(
                size,
                (left(g) + width * 0.46, mib + top * (0.01 + raise)),
                value_style.clone(),
            )
        });
        chart.draw_series(labels).map_err(|e| draw_err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw_err(&e))?;

    let name_style = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (g, (name, _)) in groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
        root.draw(&Text::new(name.clone(), (x, y + 8), name_style.clone()))
            .map_err(|e| draw_err(&e))?;
    }
    if compared {
        draw_ratios(&below, &groups, profiles).map_err(|e| draw_err(&e))?;
    }
    whole.present().map_err(|e| draw_err(&e))?;
    Ok(())
}

/// The ratio panel: per quantity, each config after the first as a bar of
/// its ratio to the first (none where the first is 0), the 1× line dashed.
fn draw_ratios(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    groups: &[(String, Vec<u64>)],
    profiles: &[MemoryProfile],
) -> Result<(), Box<dyn std::error::Error>> {
    let ratio = |values: &[u64], k: usize| match values[0] {
        0 => None,
        base => Some(values[k] as f64 / base as f64),
    };
    let top = groups
        .iter()
        .flat_map(|(_, v)| (1..profiles.len()).filter_map(|k| ratio(v, k)))
        .fold(1.0f64, f64::max);
    let others = (profiles.len() - 1) as f64;
    let width = 0.8 / others;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("ratio to {} (1× = the same)", profiles[0].label),
            (FONT, 18),
        )
        .margin(20)
        .x_label_area_size(10)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..groups.len() as f64, 0f64..top * 1.2)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("×")
        .y_label_formatter(&|v| format!("{v:.2}"))
        .label_style((FONT, 15))
        .draw()?;
    let label_style = TextStyle::from((FONT, 13).into_font())
        .pos(Pos::new(HPos::Center, VPos::Bottom))
        .color(&BLACK);
    for k in 1..profiles.len() {
        let color = COLORS[k % COLORS.len()];
        let left = |g: usize| g as f64 + 0.1 + (k - 1) as f64 * width;
        let bars: Vec<(usize, f64)> = groups
            .iter()
            .enumerate()
            .filter_map(|(g, (_, v))| ratio(v, k).map(|r| (g, r)))
            .collect();
        chart.draw_series(bars.iter().map(|&(g, r)| {
            Rectangle::new(
                [(left(g), 0.0), (left(g) + width * 0.92, r)],
                color.filled(),
            )
        }))?;
        chart.draw_series(bars.iter().map(|&(g, r)| {
            Text::new(
                format!("{r:.2}×"),
                (left(g) + width * 0.46, r + top * 0.02),
                label_style.clone(),
            )
        }))?;
    }
    chart.draw_series(std::iter::once(DashedPathElement::new(
        vec![(0.0, 1.0), (groups.len() as f64, 1.0)],
        6,
        4,
        BLACK.stroke_width(1),
    )))?;
    Ok(())
}
