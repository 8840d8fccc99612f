//! Plugin configuration helpers: JSON layered over per-plugin defaults with
//! the offending key named in errors, normalized JSON for the host, and the
//! keys that differ between a checkpoint's config and the trainer's.

use serde::{de::DeserializeOwned, Serialize};
use serde_json::{Map, Value};
use tli_plugin_api::PluginError;

/// The normalized JSON of `config` (what `validate_config` hands back).
pub fn to_json<T: Serialize>(config: &T) -> Result<String, PluginError> {
    serde_json::to_string(config).map_err(|e| PluginError::other(e.to_string()))
}

/// The JSON of a manifest's default config (`{}` should it not serialize).
pub fn default_json<T: Serialize>(config: &T) -> String {
    serde_json::to_string(config).unwrap_or_else(|_| "{}".into())
}

/// Parses `json` (empty = `{}`), a JSON object, laid key by key over the
/// defaults that `defaults` picks from the user's object; the objects under
/// the keys in `nested` are merged one level deeper. Errors are
/// invalid-config errors prefixed `"{plugin} config: "`; a value serde
/// refuses is reported with its key (the first key that fails on its own).
/// Range checks are the caller's.
pub fn parse_layered<T: Serialize + DeserializeOwned>(
    plugin: &str,
    json: &str,
    nested: &[&str],
    defaults: impl FnOnce(&Map<String, Value>) -> Result<T, String>,
) -> Result<T, PluginError> {
    let invalid = |e: String| PluginError::invalid_config(format!("{plugin} config: {e}"));
    let json = if json.trim().is_empty() { "{}" } else { json };
    let user: Value = serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
    let Value::Object(user) = user else {
        return Err(invalid(format!("expected a JSON object, got {user}")));
    };
    let Value::Object(defaults) = serde_json::to_value(defaults(&user).map_err(invalid)?)
        .map_err(|e| invalid(e.to_string()))?
    else {
        return Err(invalid("defaults did not serialize to an object".into()));
    };
    let overlay = |config: &mut Map<String, Value>, key: &String, value: &Value| match (
        value,
        config.get_mut(key),
    ) {
        (Value::Object(sub), Some(Value::Object(base))) if nested.contains(&key.as_str()) => {
            for (k, v) in sub {
                base.insert(k.clone(), v.clone());
            }
        }
        _ => {
            config.insert(key.clone(), value.clone());
        }
    };
    let mut merged = defaults.clone();
    for (key, value) in &user {
        overlay(&mut merged, key, value);
    }
    match serde_json::from_value(Value::Object(merged)) {
        Ok(config) => Ok(config),
        Err(e) => {
            // serde's message lacks the key for type errors: name the first
            // key whose value alone makes the defaults fail.
            for (key, value) in &user {
                let mut one = defaults.clone();
                overlay(&mut one, key, value);
                if let Err(e) = serde_json::from_value::<T>(Value::Object(one)) {
                    return Err(invalid(format!("{key}: {e}")));
                }
            }
            Err(invalid(e.to_string()))
        }
    }
}

/// Why [`check_quantiles`] or [`check_optimisation`] refused a config's
/// values. The quantile messages do not name the key (the caller does); the
/// optimisation ones start with it (`"key: what is wrong"`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// More than 32 quantile levels.
    #[error("{count} levels; at most 32")]
    TooManyQuantiles {
        /// How many levels were given.
        count: usize,
    },
    /// A quantile level not in (0, 1).
    #[error("{level} is outside (0, 1)")]
    QuantileOutOfRange {
        /// The first such level.
        level: f64,
    },
    /// Quantile levels not strictly increasing.
    #[error("{levels:?} must be strictly increasing")]
    QuantilesNotIncreasing {
        /// The levels given.
        levels: Vec<f64>,
    },
    /// `learning_rate` not in (0, 1].
    #[error("learning_rate: {value} is outside (0, 1]")]
    LearningRate {
        /// The value given.
        value: f64,
    },
    /// `dropout` not in [0, 1).
    #[error("dropout: {value} is outside [0, 1)")]
    Dropout {
        /// The value given.
        value: f64,
    },
    /// `weight_decay` not in [0, 1].
    #[error("weight_decay: {value} is outside [0, 1]")]
    WeightDecay {
        /// The value given.
        value: f64,
    },
    /// `max_grad_norm` negative, infinite or NaN.
    #[error("max_grad_norm: {value} is not a finite number ≥ 0")]
    MaxGradNorm {
        /// The value given.
        value: f64,
    },
    /// `warmup_steps` above 1e9.
    #[error("warmup_steps: {steps} is above 1e9")]
    WarmupSteps {
        /// The value given.
        steps: u64,
    },
}

/// Checks quantile levels: at most 32, each in (0, 1), strictly
/// increasing; the message (without the key) says what is wrong.
pub fn check_quantiles(levels: &[f64]) -> Result<(), ConfigError> {
    if levels.len() > 32 {
        return Err(ConfigError::TooManyQuantiles {
            count: levels.len(),
        });
    }
    if let Some(&level) = levels.iter().find(|q| !(**q > 0.0 && **q < 1.0)) {
        return Err(ConfigError::QuantileOutOfRange { level });
    }
    if levels.windows(2).any(|w| w[0] >= w[1]) {
        return Err(ConfigError::QuantilesNotIncreasing {
            levels: levels.to_vec(),
        });
    }
    Ok(())
}

/// The optimisation keys the forecasting plugins share.
#[derive(Clone, Copy, Debug)]
pub struct Optimisation {
    pub learning_rate: f64,
    pub dropout: f64,
    pub weight_decay: f64,
    pub max_grad_norm: f64,
    pub warmup_steps: u64,
}

/// Range checks of [`Optimisation`]; the error is `"key: what is wrong"`.
pub fn check_optimisation(o: &Optimisation) -> Result<(), ConfigError> {
    if !(o.learning_rate > 0.0 && o.learning_rate <= 1.0) {
        return Err(ConfigError::LearningRate {
            value: o.learning_rate,
        });
    }
    if !(0.0..1.0).contains(&o.dropout) {
        return Err(ConfigError::Dropout { value: o.dropout });
    }
    if !(0.0..=1.0).contains(&o.weight_decay) {
        return Err(ConfigError::WeightDecay {
            value: o.weight_decay,
        });
    }
    if !(o.max_grad_norm >= 0.0 && o.max_grad_norm.is_finite()) {
        return Err(ConfigError::MaxGradNorm {
            value: o.max_grad_norm,
        });
    }
    if o.warmup_steps > 1_000_000_000 {
        return Err(ConfigError::WarmupSteps {
            steps: o.warmup_steps,
        });
    }
    Ok(())
}

/// Top-level keys whose values differ between the config a checkpoint was
/// written with (`saved`) and this trainer's (`current`), sorted, each as
/// `key (checkpoint …, this trainer …)`.
pub fn differing_keys<T: Serialize>(saved: &T, current: &T) -> Vec<String> {
    let (Ok(Value::Object(saved)), Ok(Value::Object(current))) =
        (serde_json::to_value(saved), serde_json::to_value(current))
    else {
        return vec!["<unserializable config>".into()];
    };
    let mut keys: Vec<String> = current
        .iter()
        .filter(|(k, v)| saved.get(*k) != Some(v))
        .map(|(k, v)| {
            let old = saved.get(k).unwrap_or(&Value::Null);
            format!("{k} (checkpoint {old}, this trainer {v})")
        })
        .collect();
    keys.sort();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sub {
        a: u32,
        b: u32,
    }

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Config {
        rate: f64,
        sub: Sub,
    }

    fn parse(json: &str) -> Result<Config, PluginError> {
        parse_layered("test", json, &["sub"], |_| {
            Ok(Config {
                rate: 0.5,
                sub: Sub { a: 1, b: 2 },
            })
        })
    }

    #[test]
    fn user_keys_lie_over_the_defaults_and_errors_name_the_key() {
        assert_eq!(parse("").unwrap().rate, 0.5);
        let c = parse(r#"{"sub": {"b": 7}}"#).unwrap();
        assert_eq!(c.sub, Sub { a: 1, b: 7 });
        let e = parse(r#"{"rate": "fast"}"#).unwrap_err();
        assert!(
            e.message.starts_with("test config: rate: "),
            "{}",
            e.message
        );
        assert!(parse(r#"{"sub": {"c": 1}}"#)
            .unwrap_err()
            .message
            .contains("unknown field"));
        assert!(parse("[1]").unwrap_err().message.contains("object"));
    }

    #[test]
    fn quantile_levels_are_checked() {
        assert_eq!(check_quantiles(&[0.1, 0.5, 0.9]), Ok(()));
        let e = check_quantiles(&[0.5; 33]).unwrap_err();
        assert_eq!(e, ConfigError::TooManyQuantiles { count: 33 });
        assert_eq!(e.to_string(), "33 levels; at most 32");
        let e = check_quantiles(&[0.5, 1.0]).unwrap_err();
        assert_eq!(e, ConfigError::QuantileOutOfRange { level: 1.0 });
        assert_eq!(e.to_string(), "1 is outside (0, 1)");
        let e = check_quantiles(&[0.5, 0.1]).unwrap_err();
        assert_eq!(
            e,
            ConfigError::QuantilesNotIncreasing {
                levels: vec![0.5, 0.1]
            }
        );
        assert_eq!(e.to_string(), "[0.5, 0.1] must be strictly increasing");
    }

    #[test]
    fn optimisation_ranges_are_checked_and_name_the_key() {
        let good = Optimisation {
            learning_rate: 1e-3,
            dropout: 0.1,
            weight_decay: 0.01,
            max_grad_norm: 1.0,
            warmup_steps: 100,
        };
        assert_eq!(check_optimisation(&good), Ok(()));
        let cases = [
            (
                Optimisation {
                    learning_rate: 0.0,
                    ..good
                },
                ConfigError::LearningRate { value: 0.0 },
                "learning_rate: 0 is outside (0, 1]",
            ),
            (
                Optimisation {
                    dropout: 1.0,
                    ..good
                },
                ConfigError::Dropout { value: 1.0 },
                "dropout: 1 is outside [0, 1)",
            ),
            (
                Optimisation {
                    weight_decay: 1.5,
                    ..good
                },
                ConfigError::WeightDecay { value: 1.5 },
                "weight_decay: 1.5 is outside [0, 1]",
            ),
            (
                Optimisation {
                    max_grad_norm: f64::INFINITY,
                    ..good
                },
                ConfigError::MaxGradNorm {
                    value: f64::INFINITY,
                },
                "max_grad_norm: inf is not a finite number ≥ 0",
            ),
            (
                Optimisation {
                    warmup_steps: 1_000_000_001,
                    ..good
                },
                ConfigError::WarmupSteps {
                    steps: 1_000_000_001,
                },
                "warmup_steps: 1000000001 is above 1e9",
            ),
        ];
        for (o, variant, message) in cases {
            let e = check_optimisation(&o).unwrap_err();
            assert_eq!(e, variant);
            assert_eq!(e.to_string(), message);
        }
    }

    #[test]
    fn differing_keys_name_both_values() {
        let a = Config::default();
        let b = Config {
            rate: 1.0,
            ..Config::default()
        };
        assert_eq!(
            differing_keys(&a, &b),
            vec!["rate (checkpoint 0.0, this trainer 1.0)".to_string()]
        );
        assert!(differing_keys(&a, &a).is_empty());
    }
}
