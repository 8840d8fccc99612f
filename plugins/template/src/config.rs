//! The template plugin's config: parsing, defaults, range checks and its JSON Schema.

use serde::{Deserialize, Serialize};
use tli_plugin_api::PluginError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TemplateConfig {
    /// Widths of the hidden layers.
    pub hidden_sizes: Vec<usize>,
    pub learning_rate: f64,
    /// Decoupled (AdamW) weight decay.
    pub weight_decay: f64,
    pub batch_size: usize,
    /// Which target column to forecast.
    pub target_index: usize,
    /// `constant` or `cosine` (decays to 10% of `learning_rate` over the task's step budget).
    pub lr_schedule: LrSchedule,
    /// Steps between validations during training: a `step` call that
    /// crosses a multiple of it reports the validation metrics at its end
    /// (0: none, only the final evaluation).
    pub valid_every: u64,
}

/// The default of `valid_every`.
pub const DEFAULT_VALID_EVERY: u64 = 100;

pub use tli_plugin_kit::schedule::LrSchedule;

impl Default for TemplateConfig {
    fn default() -> Self {
        Self {
            hidden_sizes: vec![64, 64],
            learning_rate: 1e-3,
            weight_decay: 0.0,
            batch_size: 256,
            target_index: 0,
            lr_schedule: LrSchedule::Constant,
            valid_every: DEFAULT_VALID_EVERY,
        }
    }
}

impl TemplateConfig {
    /// Parses JSON (missing fields take defaults) and checks every range.
    pub fn parse(json: &str) -> Result<Self, PluginError> {
        let json = if json.trim().is_empty() { "{}" } else { json };
        let config: Self = serde_json::from_str(json)
            .map_err(|e| PluginError::invalid_config(format!("template config: {e}")))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), PluginError> {
        let bad =
            |field: &str, why: String| Err(PluginError::invalid_config(format!("{field}: {why}")));
        if self.hidden_sizes.len() > 8 {
            return bad(
                "hidden_sizes",
                format!("{} layers; at most 8", self.hidden_sizes.len()),
            );
        }
        if let Some(w) = self.hidden_sizes.iter().find(|w| **w == 0 || **w > 8192) {
            return bad("hidden_sizes", format!("width {w} is outside 1..=8192"));
        }
        if !(self.learning_rate > 0.0 && self.learning_rate <= 1.0) {
            return bad(
                "learning_rate",
                format!("{} is outside (0, 1]", self.learning_rate),
            );
        }
        if !(0.0..=1.0).contains(&self.weight_decay) {
            return bad(
                "weight_decay",
                format!("{} is outside [0, 1]", self.weight_decay),
            );
        }
        if self.batch_size == 0 || self.batch_size > 1 << 20 {
            return bad(
                "batch_size",
                format!("{} is outside 1..=1048576", self.batch_size),
            );
        }
        Ok(())
    }

    /// `[inputs, hidden…, 1]`.
    pub fn layer_sizes(&self, features: usize) -> Vec<usize> {
        let mut sizes = vec![features];
        sizes.extend(&self.hidden_sizes);
        sizes.push(1);
        sizes
    }

    pub fn schema() -> serde_json::Value {
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "template plugin config",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "hidden_sizes": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 8192}, "maxItems": 8, "default": [64, 64]},
                "learning_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 0.001},
                "weight_decay": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.0},
                "batch_size": {"type": "integer", "minimum": 1, "maximum": 1048576, "default": 256},
                "target_index": {"type": "integer", "minimum": 0, "default": 0},
                "lr_schedule": {"enum": ["constant", "cosine"], "default": "constant"},
                "valid_every": {"type": "integer", "minimum": 0, "default": DEFAULT_VALID_EVERY, "description": "steps between validations during training: a step call that crosses a multiple of it reports the valid_* metrics measured at its end (0 = none, only the final evaluation)"}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_gets_defaults_and_bad_values_name_the_field() {
        assert_eq!(
            TemplateConfig::parse("{}").unwrap(),
            TemplateConfig::default()
        );
        let e = TemplateConfig::parse(r#"{"learning_rate": -1}"#).unwrap_err();
        assert!(e.message.contains("learning_rate"), "{}", e.message);
        let e = TemplateConfig::parse(r#"{"learnin_rate": 0.1}"#).unwrap_err();
        assert!(e.message.contains("unknown field"), "{}", e.message);
        let e = TemplateConfig::parse(r#"{"hidden_sizes": [0]}"#).unwrap_err();
        assert!(e.message.contains("hidden_sizes"), "{}", e.message);
        assert!(TemplateConfig::parse(r#"{"valid_every": -1}"#).is_err());
    }

    #[test]
    fn the_schema_lists_every_key() {
        let schema = TemplateConfig::schema();
        let keys = serde_json::to_value(TemplateConfig::default()).unwrap();
        for key in keys.as_object().unwrap().keys() {
            assert!(schema["properties"].get(key).is_some(), "{key}");
        }
        assert_eq!(keys["valid_every"], 100);
    }
}
