//! The Mamba-2 plugin's config: keys, defaults, range checks (each error
//! names its key) and the JSON Schema. `plugins/mamba2/README.md` explains
//! every key.
//!
//! Defaults are sized for a CPU or a shared GPU (d_model 64, 2 layers,
//! d_state 32, headdim 32, chunk 64, lookback 256); `mamba_ssm`'s reference
//! block uses d_state 128, headdim 64 and chunk 256 (models.md §3).

use crate::block::Mamba2Config;
use serde::{Deserialize, Serialize};
use tli_plugin_api::PluginError;

/// Longest lookback accepted (bars per window).
pub const MAX_LOOKBACK: usize = 16_384;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForecasterConfig {
    /// Width of the residual stream.
    pub d_model: usize,
    /// Mamba-2 blocks.
    pub layers: usize,
    /// `N`: SSM state size per head channel.
    pub d_state: usize,
    /// `P`: channels per head (`expand·d_model / headdim` heads).
    pub headdim: usize,
    pub expand: usize,
    /// Causal depthwise convolution kernel.
    pub d_conv: usize,
    /// Groups sharing `B` and `C` (divides the number of heads).
    pub ngroups: usize,
    /// `A` starts at `−U[lo, hi]` per head (`mamba_ssm`: [1, 16]). Smaller
    /// values start heads with slower decay (longer memory).
    pub a_init_range: [f64; 2],
    /// `dt` starts log-uniform in `[min, max]` per head (`mamba_ssm`: [0.001, 0.1]).
    pub dt_init_range: [f64; 2],
    /// Chunk length of the chunked SSD (any value gives the same result; speed differs).
    pub chunk_size: usize,
    /// Bars per window the model reads.
    pub lookback: usize,
    /// Forecasts from the last `loss_positions` bars of each window enter the
    /// training loss (1: only the window's last bar).
    pub loss_positions: usize,
    /// Forecast horizons 1..=`horizons` bars ahead (cumulative returns).
    pub horizons: usize,
    /// Empty: point forecasts (MSE). Otherwise quantile forecasts (pinball
    /// loss) at these levels, strictly increasing in (0, 1).
    pub quantiles: Vec<f64>,
    /// Which target column of the dataset to forecast.
    pub target_index: usize,
    pub learning_rate: f64,
    pub lr_schedule: LrSchedule,
    /// Linear warm-up from 0 over the first steps.
    pub warmup_steps: u64,
    /// Dropout on the input projection and before the head.
    pub dropout: f64,
    pub batch_size: usize,
    /// Decoupled weight decay on projection and convolution weights (never on
    /// biases, norms, `dt_bias`, `A_log`, `D`).
    pub weight_decay: f64,
    /// Global gradient-norm clip; 0 disables it.
    pub max_grad_norm: f64,
    /// Windows per evaluation forward pass.
    pub eval_batch_size: usize,
    /// Steps between validations during training: a `step` call that
    /// crosses a multiple of it reports the validation split's metrics at
    /// its end (0: none, only the final evaluation).
    #[serde(default = "default_valid_every")]
    pub valid_every: u64,
}

/// The default of `valid_every` (also for checkpoints written before the key).
fn default_valid_every() -> u64 {
    100
}

pub use tli_plugin_kit::schedule::LrSchedule;

impl Default for ForecasterConfig {
    fn default() -> Self {
        Self {
            d_model: 64,
            layers: 2,
            d_state: 32,
            headdim: 32,
            expand: 2,
            d_conv: 4,
            ngroups: 1,
            a_init_range: [1.0, 16.0],
            dt_init_range: [0.001, 0.1],
            chunk_size: 64,
            lookback: 256,
            loss_positions: 1,
            horizons: 1,
            quantiles: Vec::new(),
            target_index: 0,
            learning_rate: 1e-3,
            lr_schedule: LrSchedule::Cosine,
            warmup_steps: 0,
            dropout: 0.0,
            batch_size: 32,
            weight_decay: 0.01,
            max_grad_norm: 1.0,
            eval_batch_size: 64,
            valid_every: default_valid_every(),
        }
    }
}

impl ForecasterConfig {
    /// Parses JSON (missing keys take defaults) and checks every range.
    pub fn parse(json: &str) -> Result<Self, PluginError> {
        let config: Self =
            tli_plugin_kit::config::parse_layered("mamba2", json, &[], |_| Ok(Self::default()))?;
        config.check()?;
        Ok(config)
    }

    /// The block hyper-parameters (the published initialisation ranges).
    pub fn block(&self) -> Mamba2Config {
        Mamba2Config {
            d_state: self.d_state,
            d_conv: self.d_conv,
            expand: self.expand,
            headdim: self.headdim,
            ngroups: self.ngroups,
            a_init_range: (self.a_init_range[0], self.a_init_range[1]),
            dt_min: self.dt_init_range[0],
            dt_max: self.dt_init_range[1],
            ..Mamba2Config::new(self.d_model)
        }
    }

    /// Outputs per forecast: one, or one per quantile.
    pub fn outputs_per_horizon(&self) -> usize {
        self.quantiles.len().max(1)
    }

    fn check(&self) -> Result<(), PluginError> {
        let bad =
            |key: &str, why: String| Err(PluginError::invalid_config(format!("{key}: {why}")));
        let ranges: [(&str, usize, usize, usize); 13] = [
            ("d_model", self.d_model, 1, 8192),
            ("layers", self.layers, 1, 64),
            ("d_state", self.d_state, 1, 1024),
            ("headdim", self.headdim, 1, 1024),
            ("expand", self.expand, 1, 8),
            ("d_conv", self.d_conv, 1, 16),
            ("ngroups", self.ngroups, 1, 64),
            ("chunk_size", self.chunk_size, 1, 4096),
            ("lookback", self.lookback, 1, MAX_LOOKBACK),
            ("horizons", self.horizons, 1, 1024),
            ("target_index", self.target_index, 0, 1 << 16),
            ("batch_size", self.batch_size, 1, 1 << 16),
            ("eval_batch_size", self.eval_batch_size, 1, 1 << 16),
        ];
        for (key, value, lo, hi) in ranges {
            if value < lo || value > hi {
                return bad(key, format!("{value} is outside {lo}..={hi}"));
            }
        }
        if self.loss_positions == 0 || self.loss_positions > self.lookback {
            return bad(
                "loss_positions",
                format!(
                    "{} is outside 1..=lookback ({})",
                    self.loss_positions, self.lookback
                ),
            );
        }
        if !self.block_dims_fit() {
            let d_inner = self.expand * self.d_model;
            if !d_inner.is_multiple_of(self.headdim) {
                return bad(
                    "headdim",
                    format!("{} must divide expand·d_model = {d_inner}", self.headdim),
                );
            }
            return bad(
                "ngroups",
                format!(
                    "{} must divide the number of heads expand·d_model/headdim = {}",
                    self.ngroups,
                    d_inner / self.headdim
                ),
            );
        }
        let [a_lo, a_hi] = self.a_init_range;
        if !(a_lo > 0.0 && a_hi >= a_lo && a_hi <= 1e4) {
            return bad(
                "a_init_range",
                format!("{:?} needs 0 < lo ≤ hi ≤ 1e4", self.a_init_range),
            );
        }
        let [dt_lo, dt_hi] = self.dt_init_range;
        if !(dt_lo > 0.0 && dt_hi >= dt_lo && dt_hi <= 10.0) {
            return bad(
                "dt_init_range",
                format!("{:?} needs 0 < min ≤ max ≤ 10", self.dt_init_range),
            );
        }
        if let Err(why) = tli_plugin_kit::config::check_quantiles(&self.quantiles) {
            return bad("quantiles", why.to_string());
        }
        tli_plugin_kit::config::check_optimisation(&tli_plugin_kit::config::Optimisation {
            learning_rate: self.learning_rate,
            dropout: self.dropout,
            weight_decay: self.weight_decay,
            max_grad_norm: self.max_grad_norm,
            warmup_steps: self.warmup_steps,
        })
        .map_err(|e| PluginError::invalid_config(e.to_string()))
    }

    fn block_dims_fit(&self) -> bool {
        let d_inner = self.expand * self.d_model;
        d_inner.is_multiple_of(self.headdim)
            && (d_inner / self.headdim).is_multiple_of(self.ngroups)
    }

    pub fn schema() -> serde_json::Value {
        let int = |lo: usize, hi: usize, default: usize| serde_json::json!({"type": "integer", "minimum": lo, "maximum": hi, "default": default});
        let d = Self::default();
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "mamba2 plugin config",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "d_model": int(1, 8192, d.d_model),
                "layers": int(1, 64, d.layers),
                "d_state": int(1, 1024, d.d_state),
                "headdim": int(1, 1024, d.headdim),
                "expand": int(1, 8, d.expand),
                "d_conv": int(1, 16, d.d_conv),
                "ngroups": int(1, 64, d.ngroups),
                "a_init_range": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 1e4}, "minItems": 2, "maxItems": 2, "default": d.a_init_range},
                "dt_init_range": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 10}, "minItems": 2, "maxItems": 2, "default": d.dt_init_range},
                "chunk_size": int(1, 4096, d.chunk_size),
                "lookback": int(1, MAX_LOOKBACK, d.lookback),
                "loss_positions": int(1, MAX_LOOKBACK, d.loss_positions),
                "horizons": int(1, 1024, d.horizons),
                "quantiles": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, "maxItems": 32, "default": []},
                "target_index": int(0, 1 << 16, d.target_index),
                "learning_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": d.learning_rate},
                "lr_schedule": {"enum": ["constant", "cosine"], "default": "cosine"},
                "warmup_steps": {"type": "integer", "minimum": 0, "maximum": 1_000_000_000u64, "default": 0},
                "dropout": {"type": "number", "minimum": 0, "exclusiveMaximum": 1, "default": d.dropout},
                "batch_size": int(1, 1 << 16, d.batch_size),
                "weight_decay": {"type": "number", "minimum": 0, "maximum": 1, "default": d.weight_decay},
                "max_grad_norm": {"type": "number", "minimum": 0, "default": d.max_grad_norm},
                "eval_batch_size": int(1, 1 << 16, d.eval_batch_size),
                "valid_every": {"type": "integer", "minimum": 0, "default": d.valid_every, "description": "steps between validations during training: a step call that crosses a multiple of it reports the valid_* metrics measured at its end (0 = none, only the final evaluation)"}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_every_bad_value_names_its_key() {
        assert_eq!(
            ForecasterConfig::parse("{}").unwrap(),
            ForecasterConfig::default()
        );
        let refused = [
            (r#"{"d_model": 0}"#, "d_model"),
            (r#"{"layers": 0}"#, "layers"),
            (r#"{"d_state": 0}"#, "d_state"),
            (r#"{"headdim": 48}"#, "headdim"),
            (r#"{"expand": 9}"#, "expand"),
            (r#"{"d_conv": 0}"#, "d_conv"),
            (r#"{"ngroups": 3}"#, "ngroups"),
            (r#"{"chunk_size": 0}"#, "chunk_size"),
            (r#"{"a_init_range": [2, 1]}"#, "a_init_range"),
            (r#"{"a_init_range": [1]}"#, "a_init_range"),
            (r#"{"dt_init_range": [0, 0.1]}"#, "dt_init_range"),
            (r#"{"lookback": 100000}"#, "lookback"),
            (r#"{"loss_positions": 300}"#, "loss_positions"),
            (r#"{"horizons": 0}"#, "horizons"),
            (r#"{"quantiles": [0.9, 0.1]}"#, "quantiles"),
            (r#"{"quantiles": [1.0]}"#, "quantiles"),
            (r#"{"learning_rate": 0}"#, "learning_rate"),
            (r#"{"lr_schedule": "linear"}"#, "lr_schedule"),
            (r#"{"dropout": 1.0}"#, "dropout"),
            (r#"{"batch_size": 0}"#, "batch_size"),
            (r#"{"weight_decay": -0.1}"#, "weight_decay"),
            (r#"{"max_grad_norm": -1}"#, "max_grad_norm"),
            (r#"{"eval_batch_size": 0}"#, "eval_batch_size"),
            (r#"{"warmup_steps": 2000000000}"#, "warmup_steps"),
            (r#"{"lookbak": 10}"#, "lookbak"),
            (r#"{"valid_every": -1}"#, "valid_every"),
        ];
        for (json, key) in refused {
            let e = ForecasterConfig::parse(json).unwrap_err();
            assert!(e.message.contains(key), "{json}: {}", e.message);
        }
    }

    #[test]
    fn the_schema_lists_every_key() {
        let schema = ForecasterConfig::schema();
        let keys = serde_json::to_value(ForecasterConfig::default()).unwrap();
        for key in keys.as_object().unwrap().keys() {
            assert!(schema["properties"].get(key).is_some(), "{key}");
        }
    }
}
