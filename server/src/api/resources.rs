//! `ResourceService`: the host's device with its memory budget, admission
//! strategy and reservations (per running task, with its measured bytes when
//! known); on CUDA also the device's total and free memory.

use super::{blocking, convert};
use std::sync::Arc;
use tli_proto::v1 as pb;
use tli_proto::v1::resource_service_server::ResourceService;
use tli_runtime::orchestrator::cuda;
use tli_runtime::orchestrator::engine::Orchestrator;
use tonic::{Request, Response, Status};

pub struct ResourceApi {
    orchestrator: Arc<Orchestrator>,
}

impl ResourceApi {
    pub fn new(orchestrator: Arc<Orchestrator>) -> Self {
        Self { orchestrator }
    }
}

/// The device as a message (reads the store and, on CUDA, the runtime).
pub fn device(orchestrator: &Orchestrator) -> Result<pb::Device, Status> {
    let r = orchestrator.resources().map_err(convert::store_error)?;
    let mut reservations: Vec<pb::Reservation> = r
        .running
        .iter()
        .map(|held| pb::Reservation {
            task_id: convert::id_to_proto(held.task),
            reserved_bytes: held.reserved_bytes,
            measured_bytes: held.measured_bytes,
            measured_memory: held.measured_memory.as_ref().map(convert::measured_memory),
            model: String::new(),
        })
        .collect();
    reservations.extend(r.held.iter().map(|(model, bytes)| pb::Reservation {
        task_id: 0,
        reserved_bytes: *bytes,
        measured_bytes: None,
        measured_memory: None,
        model: model.clone(),
    }));
    let cuda_info = r
        .budget
        .device
        .cuda_index()
        .and_then(|index| cuda::mem_info(index).ok());
    Ok(pb::Device {
        name: r.budget.device.to_string(),
        budget_bytes: r.budget.total_bytes,
        reserved_bytes: r.reserved_bytes,
        strategy: r.strategy.to_string(),
        reservations,
        total_bytes: cuda_info.as_ref().map(|i| i.total),
        free_bytes: cuda_info.as_ref().map(|i| i.free),
    })
}

#[tonic::async_trait]
impl ResourceService for ResourceApi {
    async fn get_resources(
        &self,
        _request: Request<pb::GetResourcesRequest>,
    ) -> Result<Response<pb::GetResourcesResponse>, Status> {
        let orchestrator = self.orchestrator.clone();
        let device = blocking(move || device(&orchestrator)).await?;
        Ok(Response::new(pb::GetResourcesResponse {
            devices: vec![device],
        }))
    }
}
