//! `--config` values for one or several plugins (`train local`, `train
//! start`), and the one rule of which applies: the last `PLUGIN=JSON` naming
//! the plugin, else the last plain `JSON`, else none (the plugin's default
//! config). Values are JSON text, or `@file` to read it from a file.

use std::path::PathBuf;

/// Why a `--config` value was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigArgError {
    #[error("--config {0:?}: expected JSON, @file, PLUGIN=JSON or PLUGIN=@file")]
    Form(String),
    #[error("--config: cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--config {arg:?} is not valid JSON: {source}")]
    Json {
        arg: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("--config {name}=…: {name:?} is not one of the --plugin values ({plugins})")]
    UnknownPlugin { name: String, plugins: String },
}

/// The `--config` values in the order given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PluginConfigs {
    /// (plugin name or `None` for every plugin, JSON text)
    entries: Vec<(Option<String>, String)>,
}

impl PluginConfigs {
    /// Parses the values (reading `@file`s) and checks that every named
    /// plugin is one of `plugins`.
    pub fn parse(args: &[String], plugins: &[String]) -> Result<Self, ConfigArgError> {
        let entries = args
            .iter()
            .map(|a| parse_one(a))
            .collect::<Result<Vec<_>, _>>()?;
        for name in entries.iter().filter_map(|(n, _)| n.as_ref()) {
            if !plugins.iter().any(|p| p == name) {
                return Err(ConfigArgError::UnknownPlugin {
                    name: name.clone(),
                    plugins: plugins.join(", "),
                });
            }
        }
        Ok(Self { entries })
    }

    /// The config JSON given for `plugin` (see the module docs), `None` for
    /// the plugin's default.
    pub fn for_plugin(&self, plugin: &str) -> Option<&str> {
        let named = self
            .entries
            .iter()
            .rev()
            .find(|(n, _)| n.as_deref() == Some(plugin));
        let general = self.entries.iter().rev().find(|(n, _)| n.is_none());
        named.or(general).map(|(_, json)| json.as_str())
    }
}

/// Splits a `--config` value into (plugin, JSON text), reading an `@file`.
fn parse_one(arg: &str) -> Result<(Option<String>, String), ConfigArgError> {
    let trimmed = arg.trim_start();
    let (plugin, value) = if trimmed.starts_with('{') || trimmed.starts_with('@') {
        (None, trimmed)
    } else {
        match trimmed.split_once('=') {
            Some((name, value)) => (Some(name.trim().to_string()), value.trim_start()),
            None => return Err(ConfigArgError::Form(arg.to_string())),
        }
    };
    let json = match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|source| ConfigArgError::Read {
            path: PathBuf::from(path),
            source,
        })?,
        None => value.to_string(),
    };
    serde_json::from_str::<serde_json::Value>(&json).map_err(|source| ConfigArgError::Json {
        arg: arg.to_string(),
        source,
    })?;
    Ok((plugin, json))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_last_named_value_wins_then_the_last_general_one() {
        let plugins = strings(&["dqn", "ppo", "template"]);
        let c = PluginConfigs::parse(
            &strings(&[
                r#"{"a":1}"#,
                r#"dqn={"b":2}"#,
                r#"{"a":3}"#,
                r#"dqn = {"b":4}"#,
            ]),
            &plugins,
        )
        .unwrap();
        assert_eq!(c.for_plugin("dqn"), Some(r#"{"b":4}"#));
        assert_eq!(c.for_plugin("ppo"), Some(r#"{"a":3}"#));
        let none = PluginConfigs::parse(&[], &plugins).unwrap();
        assert_eq!(none.for_plugin("ppo"), None);
    }

    #[test]
    fn bad_values_say_what_was_wrong() {
        let plugins = strings(&["dqn"]);
        let e = PluginConfigs::parse(&strings(&["ppo={}"]), &plugins).unwrap_err();
        assert!(
            e.to_string()
                .contains("\"ppo\" is not one of the --plugin values (dqn)"),
            "{e}"
        );
        let e = PluginConfigs::parse(&strings(&["lr"]), &plugins).unwrap_err();
        assert!(e.to_string().contains("expected JSON"), "{e}");
        let e = PluginConfigs::parse(&strings(&["{nope"]), &plugins).unwrap_err();
        assert!(e.to_string().contains("not valid JSON"), "{e}");
        let e = PluginConfigs::parse(&strings(&["@/no/such/file.json"]), &plugins).unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot read config file /no/such/file.json"),
            "{e}"
        );
    }

    #[test]
    fn config_args_are_routed_and_checked() {
        assert_eq!(parse_one("{\"a\":1}").unwrap(), (None, "{\"a\":1}".into()));
        let (p, j) = parse_one("template={\"batch_size\": 8}").unwrap();
        assert_eq!(p.as_deref(), Some("template"));
        assert_eq!(j, "{\"batch_size\": 8}");
        assert!(parse_one("template={oops").is_err());
        assert!(parse_one("nonsense").is_err());
        assert!(parse_one("@/definitely/not/here.json").is_err());
        assert_eq!(crate::byte_size::format_bytes(1536), "1.5 KiB");
    }
}
