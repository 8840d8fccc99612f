//! The host's state for one Prometheus scrape: counts from the store, the
//! arbiter's figures, and the running tasks' live progress.

use crate::telemetry::{loss_of, DeviceSample, RunningTaskSample, StateSample};
use tli_runtime::orchestrator::engine::Orchestrator;
use tli_runtime::orchestrator::store::StoreError;

/// Samples everything the state gauges show.
pub(super) fn state_sample(orchestrator: &Orchestrator) -> Result<StateSample, StoreError> {
    let counts = orchestrator.state_counts()?;
    let resources = orchestrator.resources()?;
    let running = orchestrator.running_progress()?;
    let measured_bytes = resources
        .running
        .iter()
        .filter_map(|r| r.measured_bytes)
        .sum();
    Ok(StateSample {
        jobs: counts.jobs,
        tasks: counts.tasks,
        devices: vec![DeviceSample {
            device: resources.budget.device.to_string(),
            budget_bytes: resources.budget.total_bytes,
            reserved_bytes: resources.reserved_bytes,
            measured_bytes,
        }],
        running: running
            .into_iter()
            .map(|(job, t)| RunningTaskSample {
                job,
                task: t.task,
                plugin: t.plugin,
                asset: t.asset,
                steps_per_second: t.steps_per_second,
                progress: t.fraction,
                loss: loss_of(&t.metrics),
            })
            .collect(),
    })
}
