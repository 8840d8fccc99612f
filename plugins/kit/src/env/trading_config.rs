//! The trading environment's settings ([`TradingConfig`]) and per-episode
//! statistics ([`EpisodeStats`]); the environment itself is in
//! [`super::trading`].

use serde::{Deserialize, Serialize};
use tli_plugin_api::PluginError;

/// Environment settings (JSON: every field optional, unknown fields rejected).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TradingConfig {
    /// Feature rows in one observation.
    pub window: usize,
    /// Largest absolute position, in contracts.
    pub max_contracts: u32,
    /// Currency per contract bought or sold.
    pub commission_per_contract: f64,
    /// Ticks of slippage per contract bought or sold.
    pub slippage_ticks: f64,
    /// Divide rewards by the current one-bar volatility of one contract.
    pub vol_scaled: bool,
    /// Steps per episode.
    pub episode_len: usize,
    /// Half-life, in bars, of the EWMA volatility used by `vol_scaled`.
    pub vol_halflife: f64,
    /// Lower bound on that volatility (per-bar log-return std).
    pub vol_floor: f64,
}

impl Default for TradingConfig {
    fn default() -> Self {
        Self {
            window: 32,
            max_contracts: 1,
            commission_per_contract: tli_backtest::DEFAULT_COMMISSION,
            slippage_ticks: tli_backtest::DEFAULT_SLIPPAGE_TICKS,
            vol_scaled: false,
            episode_len: 256,
            vol_halflife: 20.0,
            vol_floor: 1e-4,
        }
    }
}

/// Largest accepted `max_contracts` (keeps position arithmetic in `i32` exact).
pub const MAX_CONTRACTS_LIMIT: u32 = 1_000_000;

impl TradingConfig {
    /// Parses and validates a JSON object.
    pub fn from_json(json: &str) -> Result<Self, PluginError> {
        let config: Self = serde_json::from_str(json)
            .map_err(|e| PluginError::invalid_config(format!("trading environment config: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), PluginError> {
        let (window, len, max) = (self.window, self.episode_len, self.max_contracts);
        let (fee, slip) = (self.commission_per_contract, self.slippage_ticks);
        let (halflife, floor) = (self.vol_halflife, self.vol_floor);
        let checks = [
            ("window", window as f64, window >= 1, "≥ 1"),
            ("episode_len", len as f64, len >= 1, "≥ 1"),
            (
                "max_contracts",
                max as f64,
                (1..=MAX_CONTRACTS_LIMIT).contains(&max),
                "in 1..=1000000",
            ),
            ("commission_per_contract", fee, fee >= 0.0, "finite and ≥ 0"),
            ("slippage_ticks", slip, slip >= 0.0, "finite and ≥ 0"),
            ("vol_halflife", halflife, halflife > 0.0, "finite and > 0"),
            ("vol_floor", floor, floor > 0.0, "finite and > 0"),
        ];
        match checks.iter().find(|(_, v, ok, _)| !(*ok && v.is_finite())) {
            None => Ok(()),
            Some((name, v, _, rule)) => Err(PluginError::invalid_config(format!(
                "trading env {name} must be {rule}, got {v}"
            ))),
        }
    }

    /// `2 · max_contracts + 1`.
    pub fn num_actions(&self) -> usize {
        2 * self.max_contracts as usize + 1
    }

    /// Currency charged per contract traded.
    pub fn cost_per_contract(&self, tick_size: f64, point_value: f64) -> f64 {
        self.commission_per_contract + self.slippage_ticks * tick_size * point_value
    }
}

/// Statistics of one episode (in progress or completed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EpisodeStats {
    /// Which environment of the vector.
    pub env: usize,
    /// Dataset row of the episode's first decision.
    pub start_row: usize,
    pub steps: usize,
    /// Currency, net of costs, never vol-scaled.
    pub pnl: f64,
    /// Currency paid in commission and slippage (included in `pnl`).
    pub costs: f64,
    /// Contracts bought plus contracts sold.
    pub turnover: u64,
    /// Sum of rewards (equals `pnl` unless `vol_scaled`).
    pub reward: f64,
    /// Position held now (for a completed episode: at its end).
    pub position: i32,
}
