//! `tli profile memory --chart FILE.png`: the measured comparison as a
//! grouped bar chart (plotters, bitmap backend).
//!
//! One group per quantity (parameters, optimizer state, both together,
//! gradients, activations, the tensor total, and the independent peak: the
//! CUDA allocator's on a GPU, resident memory's on a CPU), one bar per
//! config, in MiB, each labelled with its size and its ratio to the first
//! config. Text needs a TrueType font, found at run time (no font library is
//! linked): `TLI_CHART_FONT`, else a usual system path, else the first
//! `.ttf` under `/usr/share/fonts`.

use super::MemoryProfile;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use thiserror::Error;

#[derive(Clone, Debug, Error)]
pub enum ChartError {
    #[error(
        "no TrueType font found for the chart's text: set TLI_CHART_FONT to a .ttf file \
         (e.g. install the fonts-dejavu-core package)"
    )]
    NoFont,
    #[error("the font {path} could not be used: {reason}")]
    BadFont { path: String, reason: String },
    #[error("nothing to chart: no profiles")]
    Empty,
    #[error("drawing the chart {path}: {reason}")]
    Draw { path: String, reason: String },
}

const FONT: &str = "sans-serif";
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

    let root = BitMapBackend::new(path, (1200, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(&e))?;
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
        let value_style = TextStyle::from((FONT, 13).into_font())
            .pos(Pos::new(HPos::Center, VPos::Bottom))
            .color(&BLACK);
        let labels = groups.iter().enumerate().map(|(g, (_, values))| {
            let mib = values[k] as f64 / MIB;
            let size = if mib < 10.0 {
                format!("{mib:.1}")
            } else {
                format!("{mib:.0}")
            };
            let text = match values[0] {
                _ if k == 0 => size,
                0 => format!("{size} (–)"),
                base => format!("{size} ({:.2}×)", values[k] as f64 / base as f64),
            };
            Text::new(
                text,
                (left(g) + width * 0.46, mib + top * 0.01),
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
    root.present().map_err(|e| draw_err(&e))?;
    Ok(())
}

/// Registers a TrueType font for the chart's text, once per process.
fn register_font() -> Result<(), ChartError> {
    static REGISTERED: OnceLock<Result<(), ChartError>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let path = find_font().ok_or(ChartError::NoFont)?;
            let bad = |reason: String| ChartError::BadFont {
                path: path.display().to_string(),
                reason,
            };
            let bytes = std::fs::read(&path).map_err(|e| bad(e.to_string()))?;
            // plotters keeps registered fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font(FONT, FontStyle::Normal, bytes)
                .map_err(|_| bad("not a TrueType/OpenType font".into()))
        })
        .clone()
}

fn find_font() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TLI_CHART_FONT") {
        return Some(PathBuf::from(path));
    }
    const USUAL: [&str; 5] = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    ];
    USUAL
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| first_ttf_under(Path::new("/usr/share/fonts"), 4))
}

fn first_ttf_under(dir: &Path, depth: usize) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    entries
        .iter()
        .find(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf")))
        .cloned()
        .or_else(|| {
            (depth > 0)
                .then(|| {
                    entries
                        .iter()
                        .filter(|p| p.is_dir())
                        .find_map(|p| first_ttf_under(p, depth - 1))
                })
                .flatten()
        })
}
