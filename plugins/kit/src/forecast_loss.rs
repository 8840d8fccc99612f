//! The training loss of the forecasting plugins (Mamba-2, TFT): masked mean
//! squared error or pinball (quantile) loss, as a differentiable tensor.

use crate::TchResultExt;
use tch::{Kind, Tensor};
use tli_plugin_api::PluginError;

/// Masked training loss of `forecast [..., Q]` against `y [...]` where
/// `valid` (float, `y`'s shape) is 1: the mean squared error of the single
/// output for point forecasts (`quantiles` empty), else the pinball loss
/// averaged over the quantile levels; averaged over the valid targets.
pub fn masked_loss(
    forecast: &Tensor,
    y: &Tensor,
    valid: &Tensor,
    quantiles: &[f64],
) -> Result<Tensor, PluginError> {
    (|| -> Result<Tensor, tch::TchError> {
        let count = valid.f_sum(Kind::Float)?.f_clamp_min(1.0)?;
        let per_target = if quantiles.is_empty() {
            forecast.f_select(-1, 0)?.f_sub(y)?.f_square()?
        } else {
            let q = Tensor::f_from_slice(&quantiles.iter().map(|&q| q as f32).collect::<Vec<_>>())?
                .f_to_device(forecast.device())?;
            // QL = max(q·(y − ŷ), (q − 1)·(y − ŷ)), averaged over levels.
            let diff = y.f_unsqueeze(-1)?.f_sub(forecast)?;
            let above = diff.f_mul(&q)?;
            let below = diff.f_mul(&q.f_sub_scalar(1.0)?)?;
            above
                .f_maximum(&below)?
                .f_mean_dim(-1, false, Kind::Float)?
        };
        per_target.f_mul(valid)?.f_sum(Kind::Float)?.f_div(&count)
    })()
    .plugin_err("computing the loss")
}
