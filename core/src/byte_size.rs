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

/// `512MiB`, `8GiB`, `1.5GB`, `1000000` → bytes.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 512MiB or 8GiB"))?;
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
            return Err(format!(
                "{text:?}: unknown unit {other:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    if !(value.is_finite() && value > 0.0) {
        return Err(format!("{text:?}: a size must be positive"));
    }
    Ok((value * scale).round() as u64)
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
