//! The TFT plugin's config: keys, defaults, range checks (each error names
//! its key) and the JSON Schema. `plugins/tft/README.md` explains every key.
//!
//! Defaults are sized for a CPU (hidden 64, 4 heads, one LSTM layer,
//! lookback 64, horizons 1..5); the paper's models use hidden 160–320 and
//! encoder lengths 90–252 (Lim et al., Temporal Fusion Transformers for
//! Interpretable Multi-horizon Time Series Forecasting, IJF 2021).

use serde::{Deserialize, Serialize};
use tli_plugin_api::PluginError;
use tli_plugin_kit::int8::StateFormat;
use tli_plugin_kit::schedule::LrSchedule;

/// Longest lookback accepted (encoder bars per window).
pub const MAX_LOOKBACK: usize = 4096;

/// How weights and optimizer state are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// f32 weights, f32 AdamW moments.
    Fp32,
    /// Matrices of at least `int8_min_elements` as int8 with per-row scales,
    /// their moments as 8-bit blockwise codes, no f32 master copy.
    Int8,
}

/// How a training step holds its f32 transient (INT8 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepMemory {
    /// Every f32 weight copy and gradient at once (one backward pass).
    Full,
    /// One block's f32 weights and gradients at a time: the forward pass
    /// keeps no autograd graph and each block is recomputed in the backward
    /// sweep (two sweeps with clipping); slower, a fraction of the memory.
    Staged,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TftConfig {
    pub precision: Precision,
    /// `d`: width of every hidden layer.
    pub hidden_size: usize,
    /// Attention heads (divides `hidden_size`).
    pub attention_heads: usize,
    pub lstm_layers: usize,
    pub dropout: f64,
    /// Encoder bars per window.
    pub lookback: usize,
    /// Decoder bars: forecasts 1..=`horizons` bars ahead.
    pub horizons: usize,
    /// Quantile levels of the forecasts, strictly increasing in (0, 1).
    pub quantiles: Vec<f64>,
    /// Which target column of the dataset gives the 1-bar return.
    pub target_index: usize,
    pub learning_rate: f64,
    pub lr_schedule: LrSchedule,
    /// Linear warm-up from 0 over the first steps.
    pub warmup_steps: u64,
    pub batch_size: usize,
    /// Decoupled weight decay on weight matrices (never biases, norms,
    /// input transforms or the asset embedding).
    pub weight_decay: f64,
    /// Global gradient-norm clip; 0 disables it.
    pub max_grad_norm: f64,
    /// Windows per evaluation forward pass.
    pub eval_batch_size: usize,
    /// With `precision: "int8"`: matrices with fewer elements stay f32
    /// (bitsandbytes' `min_8bit_size`: 4096).
    pub int8_min_elements: usize,
    /// With `precision: "int8"`: `"staged"` trains (and evaluates) holding
    /// one block's f32 weights and gradients at a time.
    pub step_memory: StepMemory,
    /// With `precision: "int8"`: how the int8 matrices' AdamW moments are
    /// stored: `"8bit"` (blockwise, 2 bytes per parameter), `"4bit"`
    /// (1 byte) or `"factored"` (4-bit first moment, factored second
    /// moment: ½ byte).
    #[serde(default)]
    pub optimizer_state: StateFormat,
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

impl Default for TftConfig {
    fn default() -> Self {
        Self {
            precision: Precision::Fp32,
            hidden_size: 64,
            attention_heads: 4,
            lstm_layers: 1,
            dropout: 0.1,
            lookback: 64,
            horizons: 5,
            quantiles: vec![0.1, 0.5, 0.9],
            target_index: 0,
            learning_rate: 1e-3,
            lr_schedule: LrSchedule::Cosine,
            warmup_steps: 0,
            batch_size: 64,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
            eval_batch_size: 256,
            int8_min_elements: 4096,
            step_memory: StepMemory::Full,
            optimizer_state: StateFormat::Bits8,
            valid_every: default_valid_every(),
        }
    }
}

impl TftConfig {
    /// Parses JSON (missing keys take defaults) and checks every range.
    pub fn parse(json: &str) -> Result<Self, PluginError> {
        let config: Self =
            tli_plugin_kit::config::parse_layered("tft", json, &[], |_| Ok(Self::default()))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), PluginError> {
        let bad =
            |key: &str, why: String| Err(PluginError::invalid_config(format!("{key}: {why}")));
        let ranges: [(&str, usize, usize, usize); 9] = [
            ("hidden_size", self.hidden_size, 1, 16_384),
            ("attention_heads", self.attention_heads, 1, 256),
            ("lstm_layers", self.lstm_layers, 1, 16),
            ("lookback", self.lookback, 1, MAX_LOOKBACK),
            ("horizons", self.horizons, 1, 1024),
            ("target_index", self.target_index, 0, 1 << 16),
            ("batch_size", self.batch_size, 1, 1 << 16),
            ("eval_batch_size", self.eval_batch_size, 1, 1 << 16),
            ("int8_min_elements", self.int8_min_elements, 1, 1 << 30),
        ];
        for (key, value, lo, hi) in ranges {
            if value < lo || value > hi {
                return bad(key, format!("{value} is outside {lo}..={hi}"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.attention_heads) {
            return bad(
                "attention_heads",
                format!(
                    "{} must divide hidden_size {}",
                    self.attention_heads, self.hidden_size
                ),
            );
        }
        if self.step_memory == StepMemory::Staged && self.precision != Precision::Int8 {
            return bad(
                "step_memory",
                "\"staged\" needs precision \"int8\" (an fp32 step keeps its weights in f32 \
                 anyway): set precision to \"int8\" or step_memory to \"full\""
                    .into(),
            );
        }
        if self.optimizer_state != StateFormat::Bits8 && self.precision != Precision::Int8 {
            return bad(
                "optimizer_state",
                format!(
                    "{:?} needs precision \"int8\" (fp32 weights keep f32 moments): set \
                     precision to \"int8\" or leave optimizer_state at \"8bit\"",
                    self.optimizer_state.name()
                ),
            );
        }
        if self.quantiles.is_empty() {
            return bad("quantiles", "at least one level is needed".into());
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

    pub fn schema() -> serde_json::Value {
        let int = |lo: usize, hi: usize, default: usize| serde_json::json!({"type": "integer", "minimum": lo, "maximum": hi, "default": default});
        let d = Self::default();
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "tft plugin config",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "precision": {"enum": ["fp32", "int8"], "default": "fp32"},
                "hidden_size": int(1, 16_384, d.hidden_size),
                "attention_heads": int(1, 256, d.attention_heads),
                "lstm_layers": int(1, 16, d.lstm_layers),
                "dropout": {"type": "number", "minimum": 0, "exclusiveMaximum": 1, "default": d.dropout},
                "lookback": int(1, MAX_LOOKBACK, d.lookback),
                "horizons": int(1, 1024, d.horizons),
                "quantiles": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, "minItems": 1, "maxItems": 32, "default": d.quantiles},
                "target_index": int(0, 1 << 16, d.target_index),
                "learning_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": d.learning_rate},
                "lr_schedule": {"enum": ["constant", "cosine"], "default": "cosine"},
                "warmup_steps": {"type": "integer", "minimum": 0, "maximum": 1_000_000_000u64, "default": 0},
                "batch_size": int(1, 1 << 16, d.batch_size),
                "weight_decay": {"type": "number", "minimum": 0, "maximum": 1, "default": d.weight_decay},
                "max_grad_norm": {"type": "number", "minimum": 0, "default": d.max_grad_norm},
                "eval_batch_size": int(1, 1 << 16, d.eval_batch_size),
                "int8_min_elements": int(1, 1 << 30, d.int8_min_elements),
                "step_memory": {"enum": ["full", "staged"], "default": "full"},
                "optimizer_state": {"enum": StateFormat::NAMES, "default": "8bit", "description": "with precision int8: how the int8 matrices' AdamW moments are stored (8bit: 2 bytes per parameter; 4bit: 1 byte; factored: 4-bit first moment and factored second moment, half a byte)"},
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
        assert_eq!(TftConfig::parse("{}").unwrap(), TftConfig::default());
        let int8 = TftConfig::parse(r#"{"precision": "int8"}"#).unwrap();
        assert_eq!(int8.precision, Precision::Int8);
        let four = TftConfig::parse(r#"{"precision": "int8", "optimizer_state": "4bit"}"#).unwrap();
        assert_eq!(four.optimizer_state, StateFormat::Bits4);
        let refused = [
            (r#"{"precision": "int4"}"#, "precision"),
            (r#"{"hidden_size": 0}"#, "hidden_size"),
            (r#"{"attention_heads": 3}"#, "attention_heads"),
            (r#"{"lstm_layers": 0}"#, "lstm_layers"),
            (r#"{"dropout": 1.0}"#, "dropout"),
            (r#"{"lookback": 0}"#, "lookback"),
            (r#"{"lookback": 5000}"#, "lookback"),
            (r#"{"horizons": 0}"#, "horizons"),
            (r#"{"quantiles": []}"#, "quantiles"),
            (r#"{"quantiles": [0.9, 0.1]}"#, "quantiles"),
            (r#"{"quantiles": [0.5, 1.0]}"#, "quantiles"),
            (r#"{"learning_rate": 0}"#, "learning_rate"),
            (r#"{"lr_schedule": "linear"}"#, "lr_schedule"),
            (r#"{"batch_size": 0}"#, "batch_size"),
            (r#"{"weight_decay": 2}"#, "weight_decay"),
            (r#"{"max_grad_norm": -1}"#, "max_grad_norm"),
            (r#"{"eval_batch_size": 0}"#, "eval_batch_size"),
            (r#"{"int8_min_elements": 0}"#, "int8_min_elements"),
            (r#"{"warmup_steps": 2000000000}"#, "warmup_steps"),
            (r#"{"hidden": 10}"#, "hidden"),
            (r#"{"step_memory": "staged"}"#, "step_memory"),
            (r#"{"step_memory": "half"}"#, "step_memory"),
            (r#"{"valid_every": -1}"#, "valid_every"),
            (r#"{"optimizer_state": "4bit"}"#, "optimizer_state"),
            (
                r#"{"precision": "int8", "optimizer_state": "2bit"}"#,
                "optimizer_state",
            ),
        ];
        for (json, key) in refused {
            let e = TftConfig::parse(json).unwrap_err();
            assert!(e.message.contains(key), "{json}: {}", e.message);
        }
    }

    #[test]
    fn the_schema_lists_every_key() {
        let schema = TftConfig::schema();
        let keys = serde_json::to_value(TftConfig::default()).unwrap();
        for key in keys.as_object().unwrap().keys() {
            assert!(schema["properties"].get(key).is_some(), "{key}");
        }
    }
}
