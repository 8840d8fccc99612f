//! A multi-layer perceptron (ReLU hidden layers, linear output) whose
//! parameters are plain leaf tensors, initialised from [`Rng`] so that a seed
//! fixes the initial weights regardless of what else runs in the process.

use crate::errors::TchResultExt;
use crate::mlp_mirror::{Activation, MlpMirror};
use crate::rng::Rng;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

pub struct Mlp {
    /// `(weight [out, in], bias [out])` per layer.
    layers: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    /// `sizes` = `[inputs, hidden…, outputs]`. Weights use Kaiming-uniform
    /// bounds (`sqrt(6 / fan_in)` for ReLU layers, `sqrt(1 / fan_in)` for the
    /// output layer); biases start at zero.
    pub fn new(sizes: &[usize], rng: &mut Rng, device: Device) -> Result<Self, PluginError> {
        if sizes.len() < 2 || sizes.contains(&0) {
            return Err(PluginError::invalid_config(format!(
                "MLP layer sizes {sizes:?} need at least an input and an output, all non-zero"
            )));
        }
        let mut layers = Vec::with_capacity(sizes.len() - 1);
        for (i, pair) in sizes.windows(2).enumerate() {
            let (fan_in, fan_out) = (pair[0], pair[1]);
            let is_output = i == sizes.len() - 2;
            let bound = if is_output { 1.0 } else { 6.0f64 }.sqrt() / (fan_in as f64).sqrt();
            let values: Vec<f32> = (0..fan_in * fan_out)
                .map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32)
                .collect();
            let weight =
                crate::nn::leaf_from_values(&values, &[fan_out as i64, fan_in as i64], device)?;
            let bias = Tensor::f_zeros([fan_out as i64], (Kind::Float, device))
                .plugin_err("allocating MLP biases")?
                .set_requires_grad(true);
            layers.push((weight, bias));
        }
        Ok(Self { layers })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, PluginError> {
        let mut h = x.shallow_clone();
        let last = self.layers.len() - 1;
        for (i, (w, b)) in self.layers.iter().enumerate() {
            h = h.f_linear(w, Some(b)).plugin_err("MLP forward")?;
            if i < last {
                h = h.f_relu().plugin_err("MLP forward")?;
            }
        }
        Ok(h)
    }

    /// A plain-Rust copy of the weights for acting (see [`MlpMirror`]).
    pub fn mirror(&self) -> Result<MlpMirror, PluginError> {
        let layers: Vec<(&Tensor, &Tensor)> = self.layers.iter().map(|(w, b)| (w, b)).collect();
        MlpMirror::new(&layers, Activation::Relu)
    }

    /// Parameters in a fixed order, with stable names for checkpoints.
    pub fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, (w, b))| {
                [
                    (format!("layer{i}.weight"), w),
                    (format!("layer{i}.bias"), b),
                ]
            })
            .collect()
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Number of scalar parameters.
    pub fn parameter_count(&self) -> u64 {
        self.parameters().iter().map(|t| t.numel() as u64).sum()
    }

    /// Scalar parameters of an MLP with these sizes, without building it.
    pub fn parameter_count_for(sizes: &[usize]) -> u64 {
        sizes.windows(2).map(|p| (p[0] * p[1] + p[1]) as u64).sum()
    }

    /// Copies values into the parameters (used when loading a checkpoint).
    pub fn load_named(&mut self, tensors: &[(String, Tensor)]) -> Result<(), PluginError> {
        for (name, param) in self.named_parameters() {
            let src = find(tensors, &name)?;
            copy_checked(param, src, &name)?;
        }
        Ok(())
    }
}

/// Finds a named tensor, or says which one is missing.
pub fn find<'a>(tensors: &'a [(String, Tensor)], name: &str) -> Result<&'a Tensor, PluginError> {
    tensors
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t)
        .ok_or_else(|| PluginError::io(format!("checkpoint has no tensor named {name:?}")))
}

/// Copies `src` into `dst` in place, refusing a shape mismatch.
pub fn copy_checked(dst: &Tensor, src: &Tensor, name: &str) -> Result<(), PluginError> {
    if dst.size() != src.size() {
        return Err(PluginError::io(format!(
            "checkpoint tensor {name:?} has shape {:?}, this model expects {:?} (different config?)",
            src.size(),
            dst.size()
        )));
    }
    tch::no_grad(|| {
        let mut d = dst.shallow_clone();
        d.f_copy_(src).plugin_err("restoring a checkpoint tensor")
    })
}
