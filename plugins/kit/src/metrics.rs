//! Evaluation metrics for a trading strategy: `tli-backtest`'s, re-exported
//! so that an agent's reported P&L and a host's backtest are one code (the
//! definitions are in [`tli_backtest::metrics`]). Its errors convert into
//! `PluginError` (`INVALID_DATA`, `INVALID_CONFIG`) with `?`.

pub use tli_backtest::metrics::*;
