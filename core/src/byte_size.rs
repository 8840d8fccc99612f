//! Byte sizes for people: formatting (`1.5 GiB`) and parsing (`512MiB`, `8GiB`, `1.5GB`).

/// Bytes for people: `512 B`, `1.5 KiB`, `3.2 MiB`, `2.0 GiB` (one decimal,
/// binary units, GiB the largest).
pub fn format_bytes(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    for (i, unit) in UNITS.iter().enumerate() {
        value /= 1024.0;
        // Move up a unit when one decimal would round to 1024.0.
        if i == UNITS.len() - 1 || (value * 10.0).round() < 10_240.0 {
            return format!("{value:.1} {unit}");
        }
    }
    unreachable!("the loop returns at the last unit")
}

/// Why a text is not a byte size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ByteSizeError {
    #[error("{0:?} is not a size like 512MiB or 8GiB")]
    NotASize(String),
    #[error("{text:?}: unknown unit {unit:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")]
    UnknownUnit { text: String, unit: String },
    #[error("{0:?}: a size must be positive")]
    NotPositive(String),
}

/// `512MiB`, `8GiB`, `1.5GB`, `1000000` → bytes.
pub fn parse_bytes(text: &str) -> Result<u64, ByteSizeError> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| ByteSizeError::NotASize(text.to_string()))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1e12,
        "tib" => 1024f64.powi(4),
        other => {
            return Err(ByteSizeError::UnknownUnit {
                text: text.to_string(),
                unit: other.to_string(),
            })
        }
    };
    if !(value.is_finite() && value > 0.0) {
        return Err(ByteSizeError::NotPositive(text.to_string()));
    }
    Ok((value * scale).round() as u64)
}

/// A byte count as people write it (`512MiB`, `8GiB`): what options such as
/// `--memory-budget` parse into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl std::str::FromStr for ByteSize {
    type Err = ByteSizeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_bytes(text).map(ByteSize)
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_bytes(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_format() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(150_118_227_968), "139.8 GiB");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 * 1024 * 1024);
        assert_eq!(parse_bytes("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_bytes("1000").unwrap(), 1000);
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("-1GiB").is_err());
    }
}
