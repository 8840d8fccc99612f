//! The plugin listing as `tli plugins list` prints it, one shape whether it
//! comes from this process's scan of a directory (`--local`, `tli doctor`) or
//! from a host over the API: the JSON fields and the table.

use super::new_table;
use crate::registry::PluginRegistry;
use serde::Serialize;
use tli_proto::v1 as pb;

/// One loaded plugin.
#[derive(Debug, Clone, Serialize)]
pub(super) struct PluginJson {
    pub name: String,
    pub version: String,
    pub api_version: String,
    pub family: String,
    pub description: String,
    pub path: String,
    /// How long loading took (local scans only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_ms: Option<f64>,
    pub default_config: serde_json::Value,
    pub config_schema: serde_json::Value,
    /// Plugin API 1.1 capabilities (`pooled`, …).
    pub capabilities: Vec<String>,
}

/// A file that was not loaded, and why.
#[derive(Debug, Clone, Serialize)]
pub(super) struct RefusedJson {
    pub path: String,
    pub reason: String,
}

/// A plugin directory's loaded plugins and refused files.
#[derive(Debug, Clone, Serialize)]
pub(super) struct PluginListingJson {
    pub plugin_dir: String,
    pub host_plugin_api: String,
    pub plugins: Vec<PluginJson>,
    pub refused: Vec<RefusedJson>,
}

impl From<&PluginRegistry> for PluginListingJson {
    fn from(registry: &PluginRegistry) -> Self {
        Self {
            plugin_dir: registry.dir.display().to_string(),
            host_plugin_api: tli_plugin_api::PLUGIN_API_VERSION.to_string(),
            plugins: registry
                .loaded
                .iter()
                .map(|p| PluginJson {
                    name: p.manifest.name.clone(),
                    version: p.manifest.version.clone(),
                    api_version: p.manifest.api_version.clone(),
                    family: p.manifest.family.clone(),
                    description: p.manifest.description.clone(),
                    path: p.path.display().to_string(),
                    load_ms: Some(p.load_time.as_secs_f64() * 1e3),
                    default_config: p.manifest.default_config.clone(),
                    config_schema: p.manifest.config_schema.clone(),
                    capabilities: p.manifest.capabilities.clone(),
                })
                .collect(),
            refused: registry
                .refused
                .iter()
                .map(|r| RefusedJson {
                    path: r.path.display().to_string(),
                    reason: r.reason.clone(),
                })
                .collect(),
        }
    }
}

impl From<&pb::ListPluginsResponse> for PluginListingJson {
    fn from(r: &pb::ListPluginsResponse) -> Self {
        // The host sends configs and schemas as JSON text it produced itself.
        let parse = |text: &str| {
            serde_json::from_str::<serde_json::Value>(text).unwrap_or(serde_json::Value::Null)
        };
        Self {
            plugin_dir: r.plugin_dir.clone(),
            host_plugin_api: r.host_plugin_api.clone(),
            plugins: r
                .plugins
                .iter()
                .map(|p| PluginJson {
                    name: p.name.clone(),
                    version: p.version.clone(),
                    api_version: p.api_version.clone(),
                    family: p.family.clone(),
                    description: p.description.clone(),
                    path: p.path.clone(),
                    load_ms: None,
                    default_config: parse(&p.default_config_json),
                    config_schema: parse(&p.config_schema_json),
                    capabilities: p.capabilities.clone(),
                })
                .collect(),
            refused: r
                .refused
                .iter()
                .map(|f| RefusedJson {
                    path: f.path.clone(),
                    reason: f.reason.clone(),
                })
                .collect(),
        }
    }
}

/// The table of loaded plugins, then one line per refused file.
pub(super) fn print_plugin_listing(listing: &PluginListingJson, dir_label: &str) {
    crate::outln!("{dir_label}: {}", listing.plugin_dir);
    let mut table = new_table(vec![
        "NAME",
        "VERSION",
        "API",
        "FAMILY",
        "CAPABILITIES",
        "DESCRIPTION",
    ]);
    for p in &listing.plugins {
        table.add_row(vec![
            p.name.clone(),
            p.version.clone(),
            p.api_version.clone(),
            p.family.clone(),
            if p.capabilities.is_empty() {
                "-".to_string()
            } else {
                p.capabilities.join(",")
            },
            p.description.clone(),
        ]);
    }
    crate::outln!("{table}");
    print_refused(listing);
}

/// One line per refused file.
pub(super) fn print_refused(listing: &PluginListingJson) {
    for r in &listing.refused {
        crate::outln!("refused {}: {}", r.path, r.reason);
    }
}
