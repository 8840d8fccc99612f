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

/// Checks quantile levels: at most 32, each in (0, 1), strictly
/// increasing; the message (without the key) says what is wrong.
pub fn check_quantiles(levels: &[f64]) -> Result<(), String> {
    if levels.len() > 32 {
        return Err(format!("{} levels; at most 32", levels.len()));
    }
    if let Some(q) = levels.iter().find(|q| !(**q > 0.0 && **q < 1.0)) {
        return Err(format!("{q} is outside (0, 1)"));
    }
    if levels.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("{levels:?} must be strictly increasing"));
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
pub fn check_optimisation(o: &Optimisation) -> Result<(), String> {
    if !(o.learning_rate > 0.0 && o.learning_rate <= 1.0) {
        return Err(format!(
            "learning_rate: {} is outside (0, 1]",
            o.learning_rate
        ));
    }
    if !(0.0..1.0).contains(&o.dropout) {
        return Err(format!("dropout: {} is outside [0, 1)", o.dropout));
    }
    if !(0.0..=1.0).contains(&o.weight_decay) {
        return Err(format!(
            "weight_decay: {} is outside [0, 1]",
            o.weight_decay
        ));
    }
    if !(o.max_grad_norm >= 0.0 && o.max_grad_norm.is_finite()) {
        return Err(format!(
            "max_grad_norm: {} is not a finite number ≥ 0",
            o.max_grad_norm
        ));
    }
    if o.warmup_steps > 1_000_000_000 {
        return Err(format!("warmup_steps: {} is above 1e9", o.warmup_steps));
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
