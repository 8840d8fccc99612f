//! A plugin's config checked against the JSON Schema in its own manifest,
//! before the plugin is asked: the host names the key that is wrong, the
//! same way for a plugin built here or one written anywhere else.
//!
//! The schema is the plugin's, served unchanged over `ListPlugins` (the
//! Python client builds its typed helpers from the same text). This checks
//! the part of JSON Schema (draft 2020-12) that describes config objects:
//!
//! * `type` (one name or a list; `integer` accepts `1.0`), `enum`, `const`;
//! * objects: `properties`, `required`, `additionalProperties` (`false` or a
//!   schema);
//! * arrays: `items` (one schema for every element), `minItems`, `maxItems`;
//! * numbers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`;
//! * strings: `minLength`, `maxLength` (in characters);
//! * `allOf`, `anyOf`, `oneOf`, `not`.
//!
//! Other keywords (`$ref`, `pattern`, `format`, `default`, `description` …)
//! are not checked here: the plugin's own `validate_config` still has the
//! last word on every config, so a keyword left out can only let through what
//! the plugin then refuses itself. A schema that is not an object (or is
//! `true`) accepts everything; `false` accepts nothing.

use serde_json::{Map, Value};
use std::fmt;

/// What was wrong with a config, at which key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SchemaViolation {
    /// Where: `learning_rate`, `trading.window`, `hidden_sizes[2]`; empty for
    /// the config as a whole.
    pub path: String,
    /// What: "-1 is less than the minimum 0".
    pub problem: String,
}

impl fmt::Display for SchemaViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "config: {} (the plugin's config schema)", self.problem)
        } else {
            write!(
                f,
                "config key `{}`: {} (the plugin's config schema)",
                self.path, self.problem
            )
        }
    }
}

/// Checks `config` against `schema`; the first violation found, in key order.
pub fn check(schema: &Value, config: &Value) -> Result<(), SchemaViolation> {
    check_at(schema, config, &mut String::new())
}

fn fail(path: &str, problem: impl Into<String>) -> Result<(), SchemaViolation> {
    Err(SchemaViolation {
        path: path.to_string(),
        problem: problem.into(),
    })
}

/// A value as it reads in a message: short, one line.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}…")
    } else {
        text
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn is_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => match value {
            Value::Number(n) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|x| x.fract() == 0.0)
            }
            _ => false,
        },
        // An unknown type name cannot be checked: let the plugin decide.
        _ => true,
    }
}

fn check_at(schema: &Value, value: &Value, path: &mut String) -> Result<(), SchemaViolation> {
    let rules = match schema {
        Value::Bool(false) => return fail(path, "no value is allowed here"),
        Value::Object(rules) => rules,
        _ => return Ok(()),
    };
    check_type(rules, value, path)?;
    if let Some(choices) = rules.get("enum").and_then(Value::as_array) {
        if !choices.contains(value) {
            let list: Vec<String> = choices.iter().map(shown).collect();
            return fail(
                path,
                format!("{} is not one of {}", shown(value), list.join(", ")),
            );
        }
    }
    if let Some(expected) = rules.get("const") {
        if expected != value {
            return fail(
                path,
                format!("must be {}, not {}", shown(expected), shown(value)),
            );
        }
    }
    match value {
        Value::Object(object) => check_object(rules, object, path)?,
        Value::Array(items) => check_array(rules, items, path)?,
        Value::Number(_) => check_number(rules, value, path)?,
        Value::String(text) => check_string(rules, text, path)?,
        _ => {}
    }
    check_combinators(rules, value, path)
}

fn check_type(
    rules: &Map<String, Value>,
    value: &Value,
    path: &str,
) -> Result<(), SchemaViolation> {
    let names: Vec<&str> = match rules.get("type") {
        Some(Value::String(name)) => vec![name.as_str()],
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    if names.is_empty() || names.iter().any(|name| is_type(value, name)) {
        return Ok(());
    }
    let wanted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    fail(
        path,
        format!(
            "expected {}, got {} ({})",
            wanted.join(" or "),
            type_name(value),
            shown(value)
        ),
    )
}

fn check_object(
    rules: &Map<String, Value>,
    object: &Map<String, Value>,
    path: &mut String,
) -> Result<(), SchemaViolation> {
    let properties = rules.get("properties").and_then(Value::as_object);
    if let Some(required) = rules.get("required").and_then(Value::as_array) {
        for key in required.iter().filter_map(Value::as_str) {
            if !object.contains_key(key) {
                return fail(&join_key(path, key), "is required and missing");
            }
        }
    }
    for (key, item) in object {
        let known = properties.and_then(|p| p.get(key));
        let len = path.len();
        push_key(path, key);
        let result = match (known, rules.get("additionalProperties")) {
            (Some(sub), _) => check_at(sub, item, path),
            (None, Some(Value::Bool(false))) => {
                let keys: Vec<&str> = properties
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                let known = if keys.is_empty() {
                    "it takes no keys here".to_string()
                } else {
                    format!("its keys here are {}", keys.join(", "))
                };
                fail(
                    path,
                    format!("is not a key of this plugin's config; {known}"),
                )
            }
            (None, Some(extra)) => check_at(extra, item, path),
            (None, None) => Ok(()),
        };
        path.truncate(len);
        result?;
    }
    Ok(())
}

fn check_array(
    rules: &Map<String, Value>,
    items: &[Value],
    path: &mut String,
) -> Result<(), SchemaViolation> {
    if let Some(min) = rules.get("minItems").and_then(Value::as_u64) {
        if (items.len() as u64) < min {
            return fail(path, format!("has {} items, fewer than {min}", items.len()));
        }
    }
    if let Some(max) = rules.get("maxItems").and_then(Value::as_u64) {
        if items.len() as u64 > max {
            return fail(path, format!("has {} items, more than {max}", items.len()));
        }
    }
    if let Some(each) = rules.get("items") {
        for (i, item) in items.iter().enumerate() {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let result = check_at(each, item, path);
            path.truncate(len);
            result?;
        }
    }
    Ok(())
}

fn check_number(
    rules: &Map<String, Value>,
    value: &Value,
    path: &str,
) -> Result<(), SchemaViolation> {
    let Some(x) = value.as_f64() else {
        return Ok(());
    };
    let bound = |key: &str| rules.get(key).and_then(Value::as_f64);
    let number = shown(value);
    if let Some(min) = bound("minimum") {
        if x < min {
            return fail(
                path,
                format!(
                    "{number} is less than the minimum {}",
                    shown(&rules["minimum"])
                ),
            );
        }
    }
    if let Some(max) = bound("maximum") {
        if x > max {
            return fail(
                path,
                format!(
                    "{number} is more than the maximum {}",
                    shown(&rules["maximum"])
                ),
            );
        }
    }
    if let Some(min) = bound("exclusiveMinimum") {
        if x <= min {
            return fail(
                path,
                format!(
                    "{number} must be more than {}",
                    shown(&rules["exclusiveMinimum"])
                ),
            );
        }
    }
    if let Some(max) = bound("exclusiveMaximum") {
        if x >= max {
            return fail(
                path,
                format!(
                    "{number} must be less than {}",
                    shown(&rules["exclusiveMaximum"])
                ),
            );
        }
    }
    Ok(())
}

fn check_string(rules: &Map<String, Value>, text: &str, path: &str) -> Result<(), SchemaViolation> {
    let chars = text.chars().count() as u64;
    if let Some(min) = rules.get("minLength").and_then(Value::as_u64) {
        if chars < min {
            return fail(
                path,
                format!("is {chars} characters long, shorter than {min}"),
            );
        }
    }
    if let Some(max) = rules.get("maxLength").and_then(Value::as_u64) {
        if chars > max {
            return fail(
                path,
                format!("is {chars} characters long, longer than {max}"),
            );
        }
    }
    Ok(())
}

fn check_combinators(
    rules: &Map<String, Value>,
    value: &Value,
    path: &mut String,
) -> Result<(), SchemaViolation> {
    if let Some(all) = rules.get("allOf").and_then(Value::as_array) {
        for sub in all {
            check_at(sub, value, path)?;
        }
    }
    if let Some(any) = rules.get("anyOf").and_then(Value::as_array) {
        let mut first = None;
        for sub in any {
            match check_at(sub, value, path) {
                Ok(()) => {
                    first = None;
                    break;
                }
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first {
            return Err(e);
        }
    }
    if let Some(one) = rules.get("oneOf").and_then(Value::as_array) {
        let passed = one
            .iter()
            .filter(|sub| check_at(sub, value, path).is_ok())
            .count();
        if passed != 1 {
            return fail(
                path,
                format!(
                    "{} matches {passed} of the {} alternatives, not exactly one",
                    shown(value),
                    one.len()
                ),
            );
        }
    }
    if let Some(not) = rules.get("not") {
        if check_at(not, value, path).is_ok() {
            return fail(
                path,
                format!("{} is a value this key must not take", shown(value)),
            );
        }
    }
    Ok(())
}

fn join_key(path: &str, key: &str) -> String {
    let mut joined = path.to_string();
    push_key(&mut joined, key);
    joined
}

fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "hidden_sizes": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 3},
                "learning_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "lr_schedule": {"enum": ["constant", "cosine"]},
                "name": {"type": "string", "maxLength": 4},
                "trading": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["window"],
                    "properties": {"window": {"type": "integer", "minimum": 1}}
                },
                "target_kl": {"type": ["number", "null"]},
                "mode": {"oneOf": [{"const": "a"}, {"const": "b"}]}
            }
        })
    }

    fn refusal(config: Value) -> SchemaViolation {
        check(&schema(), &config).expect_err("refused")
    }

    #[test]
    fn good_configs_pass() {
        for config in [
            json!({}),
            json!({"hidden_sizes": [8, 16], "learning_rate": 0.5, "lr_schedule": "cosine"}),
            json!({"hidden_sizes": [8.0]}),
            json!({"trading": {"window": 4}, "target_kl": null, "mode": "b", "name": "ab"}),
        ] {
            assert_eq!(check(&schema(), &config), Ok(()), "{config}");
        }
    }

    #[test]
    fn every_refusal_names_the_key_and_what_is_wrong() {
        let cases = [
            (json!({"learnin_rate": 0.1}), "learnin_rate", "not a key"),
            (json!({"learning_rate": 0}), "learning_rate", "more than 0"),
            (json!({"learning_rate": 2}), "learning_rate", "maximum 1"),
            (
                json!({"learning_rate": "fast"}),
                "learning_rate",
                "expected number, got a string",
            ),
            (
                json!({"hidden_sizes": [8, 0]}),
                "hidden_sizes[1]",
                "minimum 1",
            ),
            (
                json!({"hidden_sizes": [8, 1.5]}),
                "hidden_sizes[1]",
                "expected integer",
            ),
            (
                json!({"hidden_sizes": [1, 2, 3, 4]}),
                "hidden_sizes",
                "more than 3",
            ),
            (
                json!({"lr_schedule": "linear"}),
                "lr_schedule",
                "not one of \"constant\", \"cosine\"",
            ),
            (json!({"trading": {}}), "trading.window", "required"),
            (
                json!({"trading": {"window": 2, "x": 1}}),
                "trading.x",
                "its keys here are window",
            ),
            (json!({"name": "abcde"}), "name", "longer than 4"),
            (json!({"target_kl": "no"}), "target_kl", "number or null"),
            (json!({"mode": "c"}), "mode", "0 of the 2"),
        ];
        for (config, path, problem) in cases {
            let e = refusal(config.clone());
            assert_eq!(e.path, path, "{config}: {e}");
            assert!(e.problem.contains(problem), "{config}: {e}");
            assert!(
                e.to_string().starts_with(&format!("config key `{path}`: ")),
                "{e}"
            );
        }
        let whole = check(&schema(), &json!([1])).expect_err("not an object");
        assert_eq!(whole.path, "");
        assert!(
            whole.to_string().starts_with("config: expected object"),
            "{whole}"
        );
    }

    #[test]
    fn schemas_that_say_nothing_accept_everything() {
        for schema in [
            json!({}),
            json!(true),
            json!({"type": "object"}),
            json!("odd"),
        ] {
            assert_eq!(
                check(&schema, &json!({"anything": [1, {"x": null}]})),
                Ok(())
            );
        }
        assert!(check(&json!(false), &json!({})).is_err());
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let e = refusal(json!({"lr_schedule": "x".repeat(500)}));
        assert!(e.to_string().len() < 200, "{e}");
    }
}
