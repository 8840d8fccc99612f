//! The TrueType font every chart's text is drawn with (`tli profile memory
//! --chart`, `tli train plot`), found at run time — no font library is
//! linked: `TLI_CHART_FONT`, else a usual system path, else the first `.ttf`
//! under `/usr/share/fonts`. It is registered with plotters once per process
//! under the family [`FONT`].

use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use thiserror::Error;

/// The font family charts name in their text styles.
pub const FONT: &str = "sans-serif";

#[derive(Clone, Debug, Error)]
pub enum FontError {
    #[error(
        "no TrueType font found for the chart's text: set TLI_CHART_FONT to a .ttf file \
         (e.g. install the fonts-dejavu-core package)"
    )]
    NoFont,
    #[error("the font {path} could not be used: {reason}")]
    BadFont { path: String, reason: String },
}

/// Registers a TrueType font for charts' text, once per process (the
/// outcome of the first call is every call's).
pub fn register_font() -> Result<(), FontError> {
    static REGISTERED: OnceLock<Result<(), FontError>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let path = find_font().ok_or(FontError::NoFont)?;
            let bad = |reason: String| FontError::BadFont {
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

/// `TLI_CHART_FONT`, else a usual system font, else the first `.ttf` found.
pub fn find_font() -> Option<PathBuf> {
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
