//! A lookup table mapping category ids to learned vectors (the TFT's
//! categorical inputs).

use super::{check_sizes, join, normal_param, Parameters};
use crate::errors::TchResultExt;
use crate::rng::Rng;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

pub struct Embedding {
    /// `[count, dim]`, standard normal at the start (as PyTorch's).
    pub weight: Tensor,
}

impl Embedding {
    pub fn new(
        count: usize,
        dim: usize,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        check_sizes(
            &[("category count", count), ("dimension", dim)],
            "embedding",
        )?;
        Ok(Self {
            weight: normal_param(&[count as i64, dim as i64], rng, device)?,
        })
    }

    pub fn count(&self) -> usize {
        self.weight.size()[0] as usize
    }

    pub fn dim(&self) -> usize {
        self.weight.size()[1] as usize
    }

    /// Integer `indices [...]` → `[..., dim]`. Ids outside `[0, count)` are
    /// refused here (on CUDA libtorch would otherwise raise a device-side
    /// assert that poisons the whole process's CUDA context); the check costs
    /// one small reduction and a host sync.
    pub fn forward(&self, indices: &Tensor) -> Result<Tensor, PluginError> {
        let ctx = "embedding lookup";
        if !matches!(
            indices.kind(),
            Kind::Int64 | Kind::Int | Kind::Int16 | Kind::Int8 | Kind::Uint8
        ) {
            return Err(PluginError::invalid_data(format!(
                "embedding ids must be integers, got {:?}",
                indices.kind()
            )));
        }
        let indices = indices.f_to_kind(Kind::Int64).plugin_err(ctx)?;
        if indices.numel() > 0 {
            let lo = indices
                .f_min()
                .plugin_err(ctx)?
                .f_int64_value(&[])
                .plugin_err(ctx)?;
            let hi = indices
                .f_max()
                .plugin_err(ctx)?
                .f_int64_value(&[])
                .plugin_err(ctx)?;
            if lo < 0 || hi >= self.count() as i64 {
                return Err(PluginError::invalid_data(format!(
                    "embedding ids span [{lo}, {hi}], outside [0, {}) categories",
                    self.count()
                )));
            }
        }
        Tensor::f_embedding(&self.weight, &indices, -1, false, false).plugin_err(ctx)
    }
}

impl Parameters for Embedding {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        vec![(join(prefix, "weight"), &self.weight)]
    }
}
