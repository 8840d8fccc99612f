//! `PluginService`: the plugins the host loaded (every version, with its
//! default config and config schema as JSON text, its checksum, when it was
//! loaded and how many tasks use it), the files it refused with why, and
//! rescans of the plugin directory.

use std::sync::Arc;
use tli_proto::v1 as pb;
use tli_proto::v1::plugin_service_server::PluginService;
use tli_runtime::orchestrator::engine::Orchestrator;
use tli_runtime::orchestrator::store::PluginVersionUse;
use tli_runtime::registry::LoadedPlugin;
use tonic::{Request, Response, Status};

pub struct PluginApi {
    orchestrator: Arc<Orchestrator>,
}

impl PluginApi {
    pub fn new(orchestrator: Arc<Orchestrator>) -> Self {
        Self { orchestrator }
    }
}

/// The registry as a response, with each version's task counts from the store.
pub fn list(orchestrator: &Orchestrator) -> Result<pb::ListPluginsResponse, Status> {
    let registry = orchestrator.registry();
    let usage = orchestrator
        .plugin_version_use()
        .map_err(|e| Status::unavailable(format!("job store: {e}")))?;
    Ok(pb::ListPluginsResponse {
        plugins: registry
            .loaded
            .iter()
            .map(|p| plugin_message(p, &usage))
            .collect(),
        refused: registry.refused.iter().map(refused_message).collect(),
        plugin_dir: registry.dir.display().to_string(),
        host_plugin_api: tli_plugin_api::PLUGIN_API_VERSION.to_string(),
    })
}

/// Loads what is new in the plugin directory.
pub fn rescan(orchestrator: &Orchestrator) -> Result<pb::RescanPluginsResponse, Status> {
    let report = orchestrator
        .rescan_plugins()
        .map_err(|e| Status::failed_precondition(e.to_string()))?;
    Ok(pb::RescanPluginsResponse {
        loaded: report
            .loaded
            .iter()
            .map(|p| plugin_message(p, &[]))
            .collect(),
        refused: report.refused.iter().map(refused_message).collect(),
        unchanged: u32::try_from(report.unchanged).unwrap_or(u32::MAX),
        warnings: report.warnings,
    })
}

fn plugin_message(p: &LoadedPlugin, usage: &[PluginVersionUse]) -> pb::Plugin {
    let use_of = usage
        .iter()
        .find(|u| u.plugin == p.manifest.name && u.version == p.manifest.version);
    pb::Plugin {
        name: p.manifest.name.clone(),
        version: p.manifest.version.clone(),
        api_version: p.manifest.api_version.clone(),
        family: p.manifest.family.clone(),
        description: p.manifest.description.clone(),
        default_config_json: p.manifest.default_config.to_string(),
        config_schema_json: p.manifest.config_schema.to_string(),
        path: p.source.display().to_string(),
        capabilities: p.manifest.capabilities.clone(),
        headline_metrics: p.manifest.headline_metrics.clone(),
        loaded_from: p.path.display().to_string(),
        checksum: p.checksum.clone(),
        loaded_unix_ms: p.loaded_at_ms,
        active_tasks: use_of.map_or(0, |u| u.active_tasks),
        tasks: use_of.map_or(0, |u| u.tasks),
    }
}

fn refused_message(r: &tli_runtime::registry::RefusedPlugin) -> pb::RefusedPlugin {
    pb::RefusedPlugin {
        path: r.path.display().to_string(),
        reason: r.reason.clone(),
    }
}

#[tonic::async_trait]
impl PluginService for PluginApi {
    async fn list_plugins(
        &self,
        _request: Request<pb::ListPluginsRequest>,
    ) -> Result<Response<pb::ListPluginsResponse>, Status> {
        let orchestrator = self.orchestrator.clone();
        super::quick_read(move || list(&orchestrator))
            .await
            .map(Response::new)
    }

    async fn rescan_plugins(
        &self,
        _request: Request<pb::RescanPluginsRequest>,
    ) -> Result<Response<pb::RescanPluginsResponse>, Status> {
        // Reads, hashes, copies and loads libraries: blocking work.
        let orchestrator = self.orchestrator.clone();
        super::quick_read(move || rescan(&orchestrator))
            .await
            .map(Response::new)
    }
}
