//! Between the wire (`tli.v1` messages) and the orchestrator's own types:
//! a `StartTrainingRequest` becomes a checked [`JobSpec`], stored progress
//! becomes `Job` / `JobProgress`, task states map both ways, and orchestrator
//! and store errors become `Status` codes whose messages name the field.
//!
//! Zero values follow the proto's comments: seed 0 → 1, device "" → `cpu`,
//! slice_steps 0 → 10, checkpoint `every_steps`/`every_seconds` 0 → never,
//! `keep` 0 → 3 (an absent checkpoint message gives the job-spec defaults),
//! synthetic seed 0 → 1, `features_json` "" → the default features.

use crate::data::features::FeatureConfig;
use crate::orchestrator::engine::{HostError, SubmitError};
use crate::orchestrator::job::{self, AssetSpec, CheckpointPolicy, JobSpec, SyntheticAsset};
use crate::orchestrator::progress::{JobProgress, TaskProgress};
use crate::orchestrator::state::TaskState;
use crate::orchestrator::store::{JobRow, StoreError, TransitionRow};
use crate::orchestrator::{JobId, TaskId};
use std::path::PathBuf;
use tli_proto::v1 as pb;
use tonic::Status;

/// Steps per slice when the request leaves `slice_steps` at 0.
pub const DEFAULT_SLICE_STEPS: u64 = 10;
/// Checkpoints kept per task when the request leaves `keep` at 0.
pub const DEFAULT_KEEP: usize = 3;

/// Turns a request into a job spec and runs [`JobSpec::check`] on it; every
/// problem is `INVALID_ARGUMENT` naming the field (`models[1].steps: …`).
pub fn job_spec(req: &pb::StartTrainingRequest) -> Result<JobSpec, Status> {
    let models: Vec<&pb::ModelSpec> = match (&req.model, req.models.is_empty()) {
        (Some(m), true) => vec![m],
        (None, false) => req.models.iter().collect(),
        (Some(_), false) => {
            return Err(invalid(
                "model and models: give exactly one (both were given)",
            ))
        }
        (None, true) => {
            return Err(invalid(
                "model and models: give exactly one (neither was given)",
            ))
        }
    };
    let models = models
        .iter()
        .enumerate()
        .map(|(i, m)| model_spec(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    if req.assets.is_empty() {
        return Err(invalid("assets: at least one asset is needed"));
    }
    let assets = req
        .assets
        .iter()
        .enumerate()
        .map(|(i, a)| asset_spec(i, a))
        .collect::<Result<Vec<_>, _>>()?;
    let device = if req.device.is_empty() {
        "cpu".to_string()
    } else {
        check_device(&req.device)?;
        req.device.clone()
    };
    let features = if req.features_json.trim().is_empty() {
        FeatureConfig::default()
    } else {
        serde_json::from_str(&req.features_json)
            .map_err(|e| invalid(format!("features_json: {e}")))?
    };
    let spec = JobSpec {
        name: req.name.clone(),
        models,
        assets,
        seed: if req.seed == 0 { 1 } else { req.seed },
        device,
        features,
        checkpoint: checkpoint_policy(req.checkpoint.as_ref()),
        slice_steps: if req.slice_steps == 0 {
            DEFAULT_SLICE_STEPS
        } else {
            req.slice_steps
        },
    };
    spec.check().map_err(invalid)?;
    Ok(spec)
}

fn model_spec(i: usize, m: &pb::ModelSpec) -> Result<job::ModelSpec, Status> {
    let (plugin, config) = match &m.config {
        None => {
            return Err(invalid(format!(
                "models[{i}].config: set template or plugin"
            )))
        }
        Some(pb::model_spec::Config::Template(t)) => {
            ("template".to_string(), Some(template_config(i, t)?))
        }
        Some(pb::model_spec::Config::Plugin(p)) => {
            if p.plugin.trim().is_empty() {
                return Err(invalid(format!(
                    "models[{i}].plugin.plugin: the plugin name must not be empty"
                )));
            }
            let config = if p.config_json.trim().is_empty() {
                None
            } else {
                let value: serde_json::Value = serde_json::from_str(&p.config_json)
                    .map_err(|e| invalid(format!("models[{i}].plugin.config_json: {e}")))?;
                if !value.is_object() {
                    return Err(invalid(format!(
                        "models[{i}].plugin.config_json: must be a JSON object"
                    )));
                }
                Some(value)
            };
            (p.plugin.clone(), config)
        }
    };
    Ok(job::ModelSpec {
        plugin,
        steps: m.steps,
        config,
        priority: m.priority,
    })
}

/// The template plugin's config as a JSON object of the fields that are set
/// (the plugin fills in the rest).
fn template_config(i: usize, t: &pb::TemplateConfig) -> Result<serde_json::Value, Status> {
    let mut config = serde_json::Map::new();
    if !t.hidden_sizes.is_empty() {
        config.insert("hidden_sizes".into(), serde_json::json!(t.hidden_sizes));
    }
    let numbers = [
        ("learning_rate", t.learning_rate),
        ("weight_decay", t.weight_decay),
    ];
    for (name, value) in numbers {
        if let Some(v) = value {
            if !v.is_finite() {
                return Err(invalid(format!(
                    "models[{i}].template.{name}: {v} is not a finite number"
                )));
            }
            config.insert(name.into(), serde_json::json!(v));
        }
    }
    if let Some(b) = t.batch_size {
        config.insert("batch_size".into(), serde_json::json!(b));
    }
    if let Some(x) = t.target_index {
        config.insert("target_index".into(), serde_json::json!(x));
    }
    match pb::LrSchedule::try_from(t.lr_schedule) {
        Ok(pb::LrSchedule::Unspecified) => {}
        Ok(pb::LrSchedule::Constant) => {
            config.insert("lr_schedule".into(), "constant".into());
        }
        Ok(pb::LrSchedule::Cosine) => {
            config.insert("lr_schedule".into(), "cosine".into());
        }
        Err(_) => {
            return Err(invalid(format!(
                "models[{i}].template.lr_schedule: {} is not an LrSchedule",
                t.lr_schedule
            )))
        }
    }
    Ok(serde_json::Value::Object(config))
}

fn asset_spec(i: usize, a: &pb::AssetSpec) -> Result<AssetSpec, Status> {
    match &a.source {
        None => Err(invalid(format!("assets[{i}]: set data_path or synthetic"))),
        Some(pb::asset_spec::Source::DataPath(path)) => {
            if path.trim().is_empty() {
                return Err(invalid(format!("assets[{i}].data_path: must not be empty")));
            }
            Ok(AssetSpec {
                data: Some(PathBuf::from(path)),
                synthetic: None,
            })
        }
        Some(pb::asset_spec::Source::Synthetic(s)) => {
            let rows = usize::try_from(s.rows).map_err(|_| {
                invalid(format!(
                    "assets[{i}].synthetic.rows: {} is outside 64..=10000000",
                    s.rows
                ))
            })?;
            Ok(AssetSpec {
                data: None,
                synthetic: Some(SyntheticAsset {
                    rows,
                    seed: if s.seed == 0 { 1 } else { s.seed },
                }),
            })
        }
    }
}

fn checkpoint_policy(c: Option<&pb::CheckpointPolicy>) -> CheckpointPolicy {
    let Some(c) = c else {
        return CheckpointPolicy::default();
    };
    CheckpointPolicy {
        every_steps: (c.every_steps != 0).then_some(c.every_steps),
        // Negative or NaN values are kept so that `JobSpec::check` names them.
        every_seconds: (c.every_seconds != 0.0).then_some(c.every_seconds),
        keep: if c.keep == 0 {
            DEFAULT_KEEP
        } else {
            c.keep as usize
        },
    }
}

/// `cpu` or `cuda:N`.
fn check_device(device: &str) -> Result<(), Status> {
    let ok = device == "cpu"
        || device
            .strip_prefix("cuda:")
            .is_some_and(|n| !n.is_empty() && n.parse::<u32>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "device: {device:?} is not \"cpu\" or \"cuda:N\""
        )))
    }
}

// ----- states ---------------------------------------------------------------

/// A task state on the wire (`None` → UNSPECIFIED).
pub fn state_to_proto(state: Option<TaskState>) -> pb::TaskState {
    match state {
        None => pb::TaskState::Unspecified,
        Some(TaskState::Queued) => pb::TaskState::Queued,
        Some(TaskState::Running) => pb::TaskState::Running,
        Some(TaskState::Checkpointing) => pb::TaskState::Checkpointing,
        Some(TaskState::Completed) => pb::TaskState::Completed,
        Some(TaskState::Failed) => pb::TaskState::Failed,
        Some(TaskState::Cancelled) => pb::TaskState::Cancelled,
        Some(TaskState::Interrupted) => pb::TaskState::Interrupted,
    }
}

/// A task state from the wire: `None` for UNSPECIFIED and unknown numbers.
pub fn state_from_proto(value: i32) -> Option<TaskState> {
    match pb::TaskState::try_from(value).ok()? {
        pb::TaskState::Unspecified => None,
        pb::TaskState::Queued => Some(TaskState::Queued),
        pb::TaskState::Running => Some(TaskState::Running),
        pb::TaskState::Checkpointing => Some(TaskState::Checkpointing),
        pb::TaskState::Completed => Some(TaskState::Completed),
        pb::TaskState::Failed => Some(TaskState::Failed),
        pb::TaskState::Cancelled => Some(TaskState::Cancelled),
        pb::TaskState::Interrupted => Some(TaskState::Interrupted),
    }
}

// ----- progress -------------------------------------------------------------

/// Store ids are positive; anything else shows as 0.
pub fn id_to_proto(id: i64) -> u64 {
    u64::try_from(id).unwrap_or(0)
}

/// A job id from a request: 0 is "not given" (INVALID_ARGUMENT); ids beyond
/// the store's range cannot exist (NOT_FOUND).
pub fn job_id_from_proto(field: &str, id: u64) -> Result<JobId, Status> {
    if id == 0 {
        return Err(invalid(format!("{field}: a job id is required (got 0)")));
    }
    i64::try_from(id).map_err(|_| Status::not_found(format!("job {id} not found")))
}

/// A task id from a request (see [`job_id_from_proto`]); 0 is the caller's to interpret.
pub fn task_id_from_proto(job: JobId, id: u64) -> Result<TaskId, Status> {
    i64::try_from(id).map_err(|_| Status::not_found(format!("task {id} not found in job {job}")))
}

pub fn task_progress(t: &TaskProgress) -> pb::TaskProgress {
    pb::TaskProgress {
        task_id: id_to_proto(t.task),
        plugin: t.plugin.clone(),
        asset: t.asset.clone(),
        state: state_to_proto(Some(t.state)) as i32,
        steps_done: t.steps_done,
        total_steps: t.total_steps,
        steps_per_second: t.steps_per_second,
        eta_seconds: t.eta_seconds,
        metrics: t
            .metrics
            .iter()
            .map(|(name, value)| pb::Metric {
                name: name.clone(),
                value: *value,
            })
            .collect(),
        error: t.error.clone().unwrap_or_default(),
        estimate_bytes: t.estimate_bytes,
        measured_bytes: t.measured_bytes,
    }
}

pub fn job_progress(p: &JobProgress) -> pb::JobProgress {
    pb::JobProgress {
        job_id: id_to_proto(p.job),
        weighted_fraction: p.weighted_fraction,
        tasks: p.tasks.iter().map(task_progress).collect(),
    }
}

pub fn job(row: &JobRow, progress: &JobProgress) -> pb::Job {
    pb::Job {
        job_id: id_to_proto(row.id),
        name: row.name.clone(),
        created_unix_ms: row.created_ms,
        progress: Some(job_progress(progress)),
    }
}

pub fn state_changed(job: JobId, t: &TransitionRow) -> pb::TaskStateChanged {
    pb::TaskStateChanged {
        job_id: id_to_proto(job),
        task_id: id_to_proto(t.task_id),
        from: state_to_proto(t.from) as i32,
        to: state_to_proto(Some(t.to)) as i32,
        reason: t.reason.clone(),
        at_unix_ms: t.at_ms,
    }
}

// ----- errors ---------------------------------------------------------------

pub fn invalid(message: impl Into<String>) -> Status {
    Status::invalid_argument(message)
}

pub fn store_error(e: StoreError) -> Status {
    Status::internal(format!("job store: {e}"))
}

pub fn host_error(e: HostError) -> Status {
    Status::internal(e.to_string())
}

/// Bad specs, models (unknown plugin, refused config) and assets are the
/// caller's to fix; a task bigger than the whole budget is RESOURCE_EXHAUSTED.
pub fn submit_error(e: SubmitError) -> Status {
    match e {
        SubmitError::Spec(message) => invalid(message),
        e @ (SubmitError::Model { .. } | SubmitError::Asset { .. }) => invalid(e.to_string()),
        e @ SubmitError::TooBig { .. } => Status::resource_exhausted(e.to_string()),
        SubmitError::Store(e) => store_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> pb::StartTrainingRequest {
        pb::StartTrainingRequest {
            name: "t".into(),
            model: Some(pb::ModelSpec {
                steps: 10,
                priority: 0,
                config: Some(pb::model_spec::Config::Template(pb::TemplateConfig {
                    hidden_sizes: vec![8],
                    learning_rate: Some(0.01),
                    lr_schedule: pb::LrSchedule::Cosine as i32,
                    ..Default::default()
                })),
            }),
            assets: vec![pb::AssetSpec {
                source: Some(pb::asset_spec::Source::Synthetic(pb::SyntheticAsset {
                    rows: 200,
                    seed: 0,
                })),
            }],
            ..Default::default()
        }
    }

    fn message(req: &pb::StartTrainingRequest) -> String {
        let status = job_spec(req).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        status.message().to_string()
    }

    #[test]
    fn zero_values_take_the_documented_defaults() {
        let spec = job_spec(&request()).unwrap();
        assert_eq!(spec.seed, 1);
        assert_eq!(spec.device, "cpu");
        assert_eq!(spec.slice_steps, DEFAULT_SLICE_STEPS);
        assert_eq!(spec.checkpoint, CheckpointPolicy::default());
        assert_eq!(spec.models[0].plugin, "template");
        assert_eq!(
            spec.models[0].config,
            Some(
                serde_json::json!({"hidden_sizes": [8], "learning_rate": 0.01, "lr_schedule": "cosine"})
            )
        );
        assert_eq!(spec.assets[0].synthetic.as_ref().map(|s| s.seed), Some(1));

        let mut req = request();
        req.checkpoint = Some(pb::CheckpointPolicy::default());
        let spec = job_spec(&req).unwrap();
        assert_eq!(spec.checkpoint.every_steps, None);
        assert_eq!(spec.checkpoint.every_seconds, None);
        assert_eq!(spec.checkpoint.keep, DEFAULT_KEEP);
    }

    #[test]
    fn bad_requests_name_the_field() {
        let mut req = request();
        req.models = vec![pb::ModelSpec::default()];
        assert!(message(&req).starts_with("model and models: give exactly one"));

        let mut req = request();
        req.model = None;
        assert!(message(&req).starts_with("model and models: give exactly one"));

        let mut req = request();
        if let Some(m) = req.model.as_mut() {
            m.steps = 0;
        }
        assert_eq!(
            message(&req),
            "models[0].steps: 0 is outside 1..=1000000000"
        );

        let mut req = request();
        if let Some(m) = req.model.as_mut() {
            m.config = None;
        }
        assert_eq!(message(&req), "models[0].config: set template or plugin");

        let mut req = request();
        if let Some(m) = req.model.as_mut() {
            m.config = Some(pb::model_spec::Config::Plugin(pb::PluginConfig {
                plugin: "behaviour".into(),
                config_json: "[1]".into(),
            }));
        }
        assert_eq!(
            message(&req),
            "models[0].plugin.config_json: must be a JSON object"
        );

        let mut req = request();
        req.assets.push(pb::AssetSpec { source: None });
        assert_eq!(message(&req), "assets[1]: set data_path or synthetic");

        let mut req = request();
        req.features_json = "{\"colour\": 1}".into();
        assert!(message(&req).starts_with("features_json: unknown field"));

        let mut req = request();
        req.device = "gpu".into();
        assert!(message(&req).starts_with("device: "));
    }

    #[test]
    fn states_map_both_ways() {
        for s in TaskState::ALL {
            assert_eq!(state_from_proto(state_to_proto(Some(s)) as i32), Some(s));
        }
        assert_eq!(state_to_proto(None), pb::TaskState::Unspecified);
        assert_eq!(state_from_proto(0), None);
        assert_eq!(state_from_proto(99), None);
    }
}
