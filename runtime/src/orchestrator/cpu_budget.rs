//! The `cpu` device's memory budget: a fraction of `MemTotal` from
//! `/proc/meminfo` (the arbiter's only I/O, kept apart from its pure
//! bookkeeping in `arbiter.rs`, which re-exports these).

/// The default fraction of `MemTotal` given to the `cpu` device.
pub const DEFAULT_CPU_BUDGET_FRACTION: f64 = 0.5;

/// Why the `cpu` budget could not be sized.
#[derive(Debug, thiserror::Error)]
pub enum MeminfoError {
    /// `/proc/meminfo` could not be read.
    #[error("cannot read /proc/meminfo: {0}")]
    Io(#[from] std::io::Error),
    /// No parsable `MemTotal:` line.
    #[error("/proc/meminfo has no parsable \"MemTotal: <n> kB\" line")]
    NoMemTotal,
    /// The fraction is not in (0, 1].
    #[error("the cpu budget fraction must be in (0, 1], got {0}")]
    BadFraction(f64),
}

/// `MemTotal` in bytes from the text of `/proc/meminfo` (`None` if absent).
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim();
    let (number, unit) = match rest.split_once(char::is_whitespace) {
        Some((n, u)) => (n, u.trim()),
        None => (rest, ""),
    };
    let n: u64 = number.parse().ok()?;
    let scale = match unit {
        "kB" | "KB" | "kiB" | "KiB" => 1024,
        "" | "B" => 1,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// The `cpu` device's budget: `fraction` (in (0, 1];
/// [`DEFAULT_CPU_BUDGET_FRACTION`] = 0.5 by default) of `MemTotal` from
/// `/proc/meminfo`, rounded down. The only function here that does I/O.
pub fn cpu_budget_from_meminfo(fraction: f64) -> Result<u64, MeminfoError> {
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(MeminfoError::BadFraction(fraction));
    }
    let text = std::fs::read_to_string("/proc/meminfo")?;
    let total = parse_meminfo_total(&text).ok_or(MeminfoError::NoMemTotal)?;
    Ok((total as f64 * fraction) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo() {
        let text = "MemFree:  10 kB\nMemTotal:       131891196 kB\n";
        assert_eq!(parse_meminfo_total(text), Some(131_891_196 * 1024));
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: x kB\n"), None);
    }

    #[test]
    fn cpu_budget_is_positive_on_linux() {
        let half = cpu_budget_from_meminfo(DEFAULT_CPU_BUDGET_FRACTION).expect("meminfo");
        assert!(half > 0);
        let all = cpu_budget_from_meminfo(1.0).expect("meminfo");
        assert!(half <= all);
        assert!(cpu_budget_from_meminfo(0.0).is_err());
        assert!(cpu_budget_from_meminfo(f64::NAN).is_err());
    }
}
