//! The plugin listing as `tli plugins list` prints it, one shape whether it
//! comes from this process's scan of a directory (`--local`, `tli doctor`) or
//! from a host over the API: the JSON fields and the table.

use crate::new_table;
use serde::Serialize;
use tli_proto::v1 as pb;

/// One loaded plugin.
#[derive(Debug, Clone, Serialize)]
pub struct PluginJson {
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
    /// Plugin API capabilities: `pooled` (1.1), `predict` (1.2; without it a
    /// plugin is "train only").
    pub capabilities: Vec<String>,
    /// The metrics tables show first for its tasks (plugin API 1.5).
    pub headline_metrics: Vec<String>,
    /// Where the library was loaded from (`path`, or a host's private copy
    /// of a file found by a rescan).
    pub loaded_from: String,
    /// SHA-256 of the library.
    pub checksum: String,
    /// When it was loaded (Unix ms).
    pub loaded_unix_ms: i64,
    /// Tasks on this version not yet ended, and all tasks recorded on it
    /// (from a host; `null` for a local scan).
    pub active_tasks: Option<u64>,
    pub tasks: Option<u64>,
}

/// A file that was not loaded, and why.
#[derive(Debug, Clone, Serialize)]
pub struct RefusedJson {
    pub path: String,
    pub reason: String,
}

/// A plugin directory's loaded plugins and refused files.
#[derive(Debug, Clone, Serialize)]
pub struct PluginListingJson {
    pub plugin_dir: String,
    pub host_plugin_api: String,
    pub plugins: Vec<PluginJson>,
    pub refused: Vec<RefusedJson>,
}

impl PluginJson {
    /// `train, predict` when the plugin can apply its models (plugin API 1.2,
    /// the `predict` capability), else `train only`.
    pub fn use_label(&self) -> &'static str {
        if self.capabilities.iter().any(|c| c == "predict") {
            "train, predict"
        } else {
            "train only"
        }
    }
}

impl From<&pb::Plugin> for PluginJson {
    fn from(p: &pb::Plugin) -> Self {
        // The host sends configs and schemas as JSON text it produced itself.
        let parse = |text: &str| {
            serde_json::from_str::<serde_json::Value>(text).unwrap_or(serde_json::Value::Null)
        };
        Self {
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
            headline_metrics: p.headline_metrics.clone(),
            loaded_from: p.loaded_from.clone(),
            checksum: p.checksum.clone(),
            loaded_unix_ms: p.loaded_unix_ms,
            active_tasks: Some(p.active_tasks),
            tasks: Some(p.tasks),
        }
    }
}

impl From<&pb::RefusedPlugin> for RefusedJson {
    fn from(f: &pb::RefusedPlugin) -> Self {
        Self {
            path: f.path.clone(),
            reason: f.reason.clone(),
        }
    }
}

impl From<&pb::ListPluginsResponse> for PluginListingJson {
    fn from(r: &pb::ListPluginsResponse) -> Self {
        Self {
            plugin_dir: r.plugin_dir.clone(),
            host_plugin_api: r.host_plugin_api.clone(),
            plugins: r.plugins.iter().map(PluginJson::from).collect(),
            refused: r.refused.iter().map(RefusedJson::from).collect(),
        }
    }
}

/// The table of loaded plugins, then one line per refused file.
pub fn print_plugin_listing(listing: &PluginListingJson, dir_label: &str) {
    crate::outln!("{dir_label}: {}", listing.plugin_dir);
    // A host's listing also says when each version was loaded and how many tasks use it.
    let from_host = listing.plugins.iter().any(|p| p.tasks.is_some());
    let mut header = vec!["NAME", "VERSION", "API", "FAMILY", "USE", "CAPABILITIES"];
    if from_host {
        header.extend(["LOADED", "TASKS (ACTIVE/ALL)"]);
    }
    header.push("DESCRIPTION");
    let mut table = new_table(header);
    for p in &listing.plugins {
        let mut row = vec![
            p.name.clone(),
            p.version.clone(),
            p.api_version.clone(),
            p.family.clone(),
            p.use_label().to_string(),
            if p.capabilities.is_empty() {
                "-".to_string()
            } else {
                p.capabilities.join(",")
            },
        ];
        if from_host {
            row.push(crate::render::format_time(p.loaded_unix_ms));
            row.push(format!(
                "{}/{}",
                p.active_tasks.unwrap_or(0),
                p.tasks.unwrap_or(0)
            ));
        }
        row.push(p.description.clone());
        table.add_row(row);
    }
    crate::outln!("{table}");
    print_refused(listing);
}

/// One line per refused file.
pub fn print_refused(listing: &PluginListingJson) {
    for r in &listing.refused {
        crate::outln!("refused {}: {}", r.path, r.reason);
    }
}

/// What `tli plugins rescan` reports.
#[derive(Debug, Clone, Serialize)]
pub struct RescanJson {
    pub loaded: Vec<PluginJson>,
    pub refused: Vec<RefusedJson>,
    pub unchanged: u32,
    pub warnings: Vec<String>,
}

impl From<&pb::RescanPluginsResponse> for RescanJson {
    fn from(r: &pb::RescanPluginsResponse) -> Self {
        Self {
            loaded: r.loaded.iter().map(PluginJson::from).collect(),
            refused: r.refused.iter().map(RefusedJson::from).collect(),
            unchanged: r.unchanged,
            warnings: r.warnings.clone(),
        }
    }
}

/// One line per library loaded, file refused and warning, then a count.
pub fn print_rescan(report: &RescanJson) {
    for p in &report.loaded {
        crate::outln!("loaded {}@{} from {}", p.name, p.version, p.path);
    }
    for r in &report.refused {
        crate::outln!("refused {}: {}", r.path, r.reason);
    }
    for w in &report.warnings {
        crate::outln!("warning: {w}");
    }
    crate::outln!(
        "{} loaded, {} refused, {} unchanged",
        report.loaded.len(),
        report.refused.len(),
        report.unchanged
    );
}
