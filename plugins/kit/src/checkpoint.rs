//! Plugin checkpoint files inside the directory the host hands over:
//! `tensors.safetensors` (named tensors, always saved from CPU) and
//! `state.json` (counters, RNG state, config). Atomicity, checksums and
//! retention are the host's job; this module only writes and reads the files.

use crate::errors::TchResultExt;
use serde::{de::DeserializeOwned, Serialize};
use std::path::Path;
use tch::{Device, Tensor};
use tli_plugin_api::PluginError;

pub const TENSORS_FILE: &str = "tensors.safetensors";
pub const STATE_FILE: &str = "state.json";

pub fn save<S: Serialize>(
    dir: &Path,
    tensors: &[(String, &Tensor)],
    state: &S,
) -> Result<(), PluginError> {
    crate::weights::save(&dir.join(TENSORS_FILE), tensors)?;
    let json = serde_json::to_vec_pretty(state)
        .map_err(|e| PluginError::io(format!("serializing trainer state: {e}")))?;
    let path = dir.join(STATE_FILE);
    std::fs::write(&path, json)
        .map_err(|e| PluginError::io(format!("writing {}: {e}", path.display())))
}

/// Reads what [`save`] wrote, with tensors moved to `device`.
pub fn load<S: DeserializeOwned>(
    dir: &Path,
    device: Device,
) -> Result<(Vec<(String, Tensor)>, S), PluginError> {
    let path = dir.join(STATE_FILE);
    let bytes = std::fs::read(&path)
        .map_err(|e| PluginError::io(format!("reading {}: {e}", path.display())))?;
    let state = serde_json::from_slice(&bytes).map_err(|e| {
        PluginError::io(format!(
            "{} is not a valid trainer state: {e}",
            path.display()
        ))
    })?;
    let path = dir.join(TENSORS_FILE);
    let tensors = Tensor::read_safetensors(&path)
        .plugin_err(&format!("reading {}", path.display()))?
        .into_iter()
        .map(|(n, t)| Ok((n, t.f_to_device(device)?)))
        .collect::<Result<Vec<_>, tch::TchError>>()
        .plugin_err("moving checkpoint tensors to the device")?;
    Ok((tensors, state))
}

/// Refuses a checkpoint in `dir` whose `what` (a config, hidden sizes, …)
/// differs from the trainer's: an I/O error listing `differing` when it is
/// not empty.
pub fn refuse_mismatch(dir: &Path, what: &str, differing: &[String]) -> Result<(), PluginError> {
    if differing.is_empty() {
        return Ok(());
    }
    Err(PluginError::io(format!(
        "checkpoint in {} was written with a different {what}: {}",
        dir.display(),
        differing.join("; ")
    )))
}
