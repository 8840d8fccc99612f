//! How many tasks may share a device (`--strategy`, a host's admission
//! rule), and the range of the safety margin added to memory estimates
//! (`--margin`), parsed here so the command line and the arbiter agree.

use std::fmt;
use std::str::FromStr;

/// The largest safety margin, as a fraction of an estimate (10 = 1,000 %).
/// The command line refuses more; the arbiter never uses more.
pub const MAX_MARGIN: f64 = 10.0;

/// A margin as the command line gives it: a fraction in `0..=MAX_MARGIN`.
pub fn parse_margin(text: &str) -> Result<f64, MarginError> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| MarginError(text.to_string()))?;
    if (0.0..=MAX_MARGIN).contains(&value) {
        Ok(value)
    } else {
        Err(MarginError(text.to_string()))
    }
}

/// A margin outside `0..=MAX_MARGIN` or not a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a margin: give a fraction of the estimate from 0 to {MAX_MARGIN} (0.1 = 10 %)"
)]
pub struct MarginError(pub String);

/// How many tasks may share a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// One task at a time.
    Sequential,
    /// At most this many at a time, in strict order, within the budget.
    Parallel(usize),
    /// As many as fit, backfilling smaller tasks without starving big ones.
    Auto,
}

impl Strategy {
    /// The most tasks this strategy lets run at once (`None`: no limit).
    pub fn max_running(&self) -> Option<usize> {
        match *self {
            Strategy::Sequential => Some(1),
            Strategy::Parallel(n) => Some(n.max(1)),
            Strategy::Auto => None,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Sequential => f.write_str("sequential"),
            Strategy::Parallel(n) => write!(f, "parallel:{n}"),
            Strategy::Auto => f.write_str("auto"),
        }
    }
}

/// Why a strategy name did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategyParseError {
    /// Not one of the known names.
    #[error("unknown strategy {0:?}: expected \"sequential\", \"parallel:N\" (N ≥ 1) or \"auto\"")]
    Unknown(String),
    /// `parallel` without `:N`, or `N` is not a number.
    #[error("bad parallel count in {0:?}: expected \"parallel:N\" with N a whole number ≥ 1")]
    BadCount(String),
    /// `parallel:0`.
    #[error("\"parallel:0\" would never run anything: the count must be at least 1")]
    Zero,
}

impl FromStr for Strategy {
    type Err = StrategyParseError;

    /// `"sequential"`, `"parallel:4"`, `"auto"`; case-insensitive, surrounding
    /// whitespace ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        match lower.as_str() {
            "sequential" => return Ok(Strategy::Sequential),
            "auto" => return Ok(Strategy::Auto),
            "parallel" => return Err(StrategyParseError::BadCount(s.to_string())),
            _ => {}
        }
        let Some(count) = lower.strip_prefix("parallel:") else {
            return Err(StrategyParseError::Unknown(s.to_string()));
        };
        match count.trim().parse::<usize>() {
            Ok(0) => Err(StrategyParseError::Zero),
            Ok(n) => Ok(Strategy::Parallel(n)),
            Err(_) => Err(StrategyParseError::BadCount(s.to_string())),
        }
    }
}
