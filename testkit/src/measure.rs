//! Small measuring helpers the benchmarks share: numbers from the
//! environment, percentiles, a process's memory and threads from `/proc`.

/// `name` from the environment as a whole number, `default` when unset;
/// anything else set there is a mistake worth stopping for.
pub fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?}: not a whole number")),
        Err(_) => default,
    }
}

/// The `p` quantile (0..=1, nearest rank) of an ascending slice; NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// A process's memory and threads, from `/proc/PID/status` (zeros for a
/// process that is gone).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessStatus {
    /// `VmRSS`: resident memory now.
    pub rss_bytes: u64,
    /// `VmHWM`: the most it was resident.
    pub peak_rss_bytes: u64,
    pub threads: u64,
}

impl ProcessStatus {
    pub fn of(pid: u32) -> Self {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Self {
            rss_bytes: field("VmRSS:") * 1024,
            peak_rss_bytes: field("VmHWM:") * 1024,
            threads: field("Threads:"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 0.99), 5.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn this_process_has_memory_and_threads() {
        let me = ProcessStatus::of(std::process::id());
        assert!(me.rss_bytes > 0 && me.peak_rss_bytes >= me.rss_bytes && me.threads >= 1);
    }
}
