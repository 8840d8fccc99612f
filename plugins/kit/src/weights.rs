//! A model's weights alone (plugin API 1.2): what `export_weights` writes
//! from a checkpoint and a predictor is made from. One safetensors file of
//! named tensors, always saved from CPU and contiguous; no optimizer state,
//! no counters, no RNG.

use crate::checkpoint::TENSORS_FILE;
use crate::errors::TchResultExt;
use std::path::Path;
use tch::{Device, Tensor};
use tli_plugin_api::PluginError;

/// Writes `tensors` to the safetensors file `path`.
pub fn save(path: &Path, tensors: &[(String, &Tensor)]) -> Result<(), PluginError> {
    let on_cpu = tensors
        .iter()
        .map(|(n, t)| {
            Ok((
                n.clone(),
                t.f_detach()?.f_to_device(Device::Cpu)?.f_contiguous()?,
            ))
        })
        .collect::<Result<Vec<(String, Tensor)>, tch::TchError>>()
        .plugin_err("copying weights")?;
    Tensor::write_safetensors(&on_cpu, path).plugin_err(&format!("writing {}", path.display()))
}

/// Reads the weights file `path`, tensors moved to `device`.
pub fn load(path: &Path, device: Device) -> Result<Vec<(String, Tensor)>, PluginError> {
    Tensor::read_safetensors(path)
        .map_err(|e| {
            PluginError::io(format!(
                "{} is not a readable weights file (safetensors): {e}",
                path.display()
            ))
        })?
        .into_iter()
        .map(|(n, t)| Ok((n, t.f_to_device(device)?)))
        .collect::<Result<Vec<_>, tch::TchError>>()
        .plugin_err("moving weights to the device")
}

/// Writes the tensors of the checkpoint in `checkpoint_dir` whose names
/// `keep` accepts to `weights_path`; refuses a checkpoint with none.
pub fn export_from_checkpoint(
    checkpoint_dir: &Path,
    weights_path: &Path,
    keep: impl Fn(&str) -> bool,
) -> Result<(), PluginError> {
    let path = checkpoint_dir.join(TENSORS_FILE);
    let tensors = Tensor::read_safetensors(&path).map_err(|e| {
        PluginError::io(format!(
            "{} is not a readable checkpoint: {e}",
            path.display()
        ))
    })?;
    let kept: Vec<(String, &Tensor)> = tensors
        .iter()
        .filter(|(n, _)| keep(n))
        .map(|(n, t)| (n.clone(), t))
        .collect();
    if kept.is_empty() {
        return Err(PluginError::io(format!(
            "the checkpoint in {} holds no weights of this model",
            checkpoint_dir.display()
        )));
    }
    save(weights_path, &kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_kept_tensors_are_exported_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        let m = Tensor::from_slice(&[9.0f32]);
        crate::checkpoint::save(
            dir.path(),
            &[("layer0.weight".into(), &w), ("adam.m".into(), &m)],
            &0u32,
        )
        .unwrap();
        let out = dir.path().join("weights.safetensors");
        export_from_checkpoint(dir.path(), &out, |n| n.starts_with("layer")).unwrap();
        let back = load(&out, Device::Cpu).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].0, "layer0.weight");
        assert_eq!(
            Vec::<f32>::try_from(&back[0].1).unwrap(),
            vec![1.0, 2.0, 3.0]
        );
        let none = export_from_checkpoint(dir.path(), &out, |_| false).unwrap_err();
        assert!(none.message.contains("holds no weights"), "{none}");
        std::fs::write(&out, b"not safetensors").unwrap();
        assert!(load(&out, Device::Cpu).is_err());
    }
}
