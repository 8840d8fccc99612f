//! A whole backtest's outcome, as the host computes it and every client
//! shows it: the strategy's report beside buy-and-hold and flat on the same
//! bars, the costs applied, the per-bar ledger and (for a forecaster) the
//! forecasts it traded on.

use crate::ledger::{BacktestReport, LedgerRow};
use serde::Serialize;

/// A backtest's results. Serialized (`-o json`) without the per-bar series.
#[derive(Clone, Debug, Serialize)]
pub struct Backtest {
    pub symbol: String,
    /// `"agent"` or the rule's name.
    pub positions_from: String,
    /// The forecast column the rule read (`None` for an agent).
    pub forecast: Option<String>,
    pub commission: f64,
    pub slippage_ticks: f64,
    pub cost_per_contract: f64,
    pub point_value: f64,
    /// The contract's currency (P&L and costs are in it).
    pub currency: String,
    pub strategy: BacktestReport,
    pub buy_and_hold: BacktestReport,
    pub flat: BacktestReport,
    #[serde(skip)]
    pub ledger: Vec<LedgerRow>,
    /// Buy-and-hold's equity on the same bars (for charts).
    #[serde(skip)]
    pub buy_and_hold_equity: Vec<f64>,
    /// A forecaster's forecasts and the realized returns (for charts).
    #[serde(skip)]
    pub forecasts: Option<Forecasts>,
}

/// A forecaster's output rows as the backtest read them: one value per
/// output row (`p10`/`p90` empty for a point forecast), log returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Forecasts {
    pub ts: Vec<i64>,
    pub p50: Vec<f64>,
    pub p10: Vec<f64>,
    pub p90: Vec<f64>,
    pub actual: Vec<f64>,
}
