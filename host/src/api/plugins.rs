//! `PluginService`: the plugins the host loaded (with their default config
//! and config schema as JSON text) and the files it refused, with why.

use crate::orchestrator::engine::Orchestrator;
use std::sync::Arc;
use tli_proto::v1 as pb;
use tli_proto::v1::plugin_service_server::PluginService;
use tonic::{Request, Response, Status};

pub struct PluginApi {
    orchestrator: Arc<Orchestrator>,
}

impl PluginApi {
    pub fn new(orchestrator: Arc<Orchestrator>) -> Self {
        Self { orchestrator }
    }

    /// The registry as a response (no I/O: the registry was scanned at start).
    pub fn list(&self) -> pb::ListPluginsResponse {
        let registry = self.orchestrator.registry();
        pb::ListPluginsResponse {
            plugins: registry
                .loaded
                .iter()
                .map(|p| pb::Plugin {
                    name: p.manifest.name.clone(),
                    version: p.manifest.version.clone(),
                    api_version: p.manifest.api_version.clone(),
                    family: p.manifest.family.clone(),
                    description: p.manifest.description.clone(),
                    default_config_json: p.manifest.default_config.to_string(),
                    config_schema_json: p.manifest.config_schema.to_string(),
                    path: p.path.display().to_string(),
                    capabilities: p.manifest.capabilities.clone(),
                })
                .collect(),
            refused: registry
                .refused
                .iter()
                .map(|r| pb::RefusedPlugin {
                    path: r.path.display().to_string(),
                    reason: r.reason.clone(),
                })
                .collect(),
            plugin_dir: registry.dir.display().to_string(),
            host_plugin_api: tli_plugin_api::PLUGIN_API_VERSION.to_string(),
        }
    }
}

#[tonic::async_trait]
impl PluginService for PluginApi {
    async fn list_plugins(
        &self,
        _request: Request<pb::ListPluginsRequest>,
    ) -> Result<Response<pb::ListPluginsResponse>, Status> {
        Ok(Response::new(self.list()))
    }
}
