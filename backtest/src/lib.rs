//! `tli-backtest`: the arithmetic of trading a futures contract, shared by
//! the RL plugins (their environments' reported P&L and evaluation, through
//! the plugin kit) and the host (backtests of any model's predictions), so
//! that both price positions with one piece of code.
//!
//! * [`metrics`]: positions → per-period P&L under a contract's costs, and
//!   the performance report (Sharpe, Sortino, drawdown, turnover, hit rate)
//!   beside buy-and-hold and flat.
//! * [`ledger`]: a backtest bar by bar (the environment's timing, rolls),
//!   and its report (gross, costs, trades, exposure, drawdown duration).
//! * [`rules`]: forecasts → positions (sign of P50, sized by the P10–P90
//!   width, a threshold).
//! * [`outcome`]: a whole backtest's result as clients see it (reports,
//!   costs, ledger, forecasts).
//!
//! Pure arithmetic: no libtorch, no I/O (checked by `scripts/check-layers.sh`).

pub mod ledger;
pub mod metrics;
pub mod outcome;
pub mod rules;

use tli_plugin_api::PluginError;

/// The trading environment's commission per contract traded (currency),
/// used wherever nobody said otherwise: forecasters' trading metrics,
/// backtests of models without a trading config.
pub const DEFAULT_COMMISSION: f64 = 2.0;
/// The trading environment's slippage, in ticks per contract traded.
pub const DEFAULT_SLIPPAGE_TICKS: f64 = 0.5;

/// Why a series could not be priced or evaluated: one line naming the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    /// The data cannot be evaluated (a non-finite price, mismatched lengths).
    #[error("{0}")]
    Data(String),
    /// A setting is out of range (a negative cost, a non-positive capital).
    #[error("{0}")]
    Config(String),
}

impl MetricsError {
    pub(crate) fn data(message: impl Into<String>) -> Self {
        Self::Data(message.into())
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::Config(message.into())
    }
}

/// Plugins report these errors with the ABI's codes: `INVALID_DATA` and
/// `INVALID_CONFIG`.
impl From<MetricsError> for PluginError {
    fn from(e: MetricsError) -> Self {
        match e {
            MetricsError::Data(m) => PluginError::invalid_data(m),
            MetricsError::Config(m) => PluginError::invalid_config(m),
        }
    }
}
