//! INT8 weight storage with one scale per output channel (row), the
//! weight-only scheme of torchao's (pytorch/ao) int8 quantized training: a weight `W [out, in]` is kept as
//! `Q [out, in]` (int8, symmetric, `|q| ≤ 127`) and `s [out]` (f32) with
//! `W ≈ Q · s` row by row, `s_r = max_j |W_rj| / 127`. There is no f32
//! master copy: the f32 weight exists only while a training step runs
//! ([`Int8Weight::dequantize`]), and after the update the new row values
//! are re-quantized with stochastic rounding (`q = ⌊w/s + u⌋`, `u ~ U[0,1)`)
//! so that updates smaller than half a quantization step still move the
//! weight in expectation (round-to-nearest would discard them).

use crate::counter_rng::CounterRng;
use crate::errors::TchResultExt;
use tch::{Kind, Tensor};
use tli_plugin_api::PluginError;

/// The largest code magnitude (symmetric: −127…127, −128 unused).
pub const MAX_CODE: f64 = 127.0;

/// An `[out, in]` weight as int8 codes and per-row f32 scales.
pub struct Int8Weight {
    /// `[out, in]`, `Kind::Int8`, contiguous.
    pub codes: Tensor,
    /// `[out]`, `Kind::Float`: the value of one code step in each row.
    pub scales: Tensor,
}

impl Int8Weight {
    /// Quantizes `weight` (2-D f32) with round-to-nearest (the initial weights).
    pub fn quantize_nearest(weight: &Tensor) -> Result<Self, PluginError> {
        Self::quantize_with(weight, None)
    }

    /// Quantizes `weight` with stochastic rounding, one uniform value per
    /// element drawn from `rng` (row-major order).
    pub fn quantize_stochastic(weight: &Tensor, rng: &mut CounterRng) -> Result<Self, PluginError> {
        Self::quantize_with(weight, Some(rng))
    }

    fn quantize_with(weight: &Tensor, rng: Option<&mut CounterRng>) -> Result<Self, PluginError> {
        let ctx = "quantizing a weight to int8";
        if weight.dim() != 2 || weight.kind() != Kind::Float {
            return Err(PluginError::other(format!(
                "{ctx}: expected a 2-D f32 tensor, got {:?} of shape {:?}",
                weight.kind(),
                weight.size()
            )));
        }
        let noise = match rng {
            Some(rng) => Some(rng.uniform(&weight.size(), weight.device())?),
            None => None,
        };
        tch::no_grad(|| -> Result<Self, tch::TchError> {
            let w = weight.f_detach()?;
            let scales = w
                .f_abs()?
                .f_amax([1i64].as_slice(), false)?
                .f_div_scalar(MAX_CODE)?;
            // A zero row keeps scale 0 and codes 0; divide by 1 there.
            let safe = scales.f_where_scalarother(&scales.f_gt(0.0)?, 1.0)?;
            let ratio = w.f_div(&safe.f_unsqueeze(1)?)?;
            let rounded = match noise {
                Some(u) => ratio.f_add(&u)?.f_floor()?,
                None => ratio.f_round()?,
            };
            let codes = rounded
                .f_clamp(-MAX_CODE, MAX_CODE)?
                .f_to_kind(Kind::Int8)?
                .f_contiguous()?;
            Ok(Self { codes, scales })
        })
        .plugin_err(ctx)
    }

    /// `[out, in]` f32: `codes · scales` row by row (a new tensor that does
    /// not require gradients).
    pub fn dequantize(&self) -> Result<Tensor, PluginError> {
        tch::no_grad(|| {
            self.codes
                .f_to_kind(Kind::Float)?
                .f_mul(&self.scales.f_unsqueeze(1)?)
        })
        .plugin_err("dequantizing an int8 weight")
    }

    pub fn shape(&self) -> Vec<i64> {
        self.codes.size()
    }

    pub fn numel(&self) -> i64 {
        self.codes.numel() as i64
    }

    /// Bytes held: one per code plus four per row.
    pub fn bytes(&self) -> u64 {
        crate::tensor_bytes(&self.codes) + crate::tensor_bytes(&self.scales)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }

    #[test]
    fn nearest_rounding_is_within_half_a_step_per_row() {
        let w = Tensor::from_slice(&[0.5f32, -1.0, 0.25, 0.0, 0.0, 0.0, 3.0, 1.0, -2.0])
            .reshape([3, 3]);
        let q = Int8Weight::quantize_nearest(&w).unwrap();
        assert_eq!(q.codes.kind(), Kind::Int8);
        let scales = Vec::<f32>::try_from(&q.scales).unwrap();
        assert_eq!(scales, vec![1.0 / 127.0, 0.0, 3.0 / 127.0]);
        let back = q.dequantize().unwrap();
        for r in 0..3 {
            let err = max_abs_diff(&back.get(r), &w.get(r));
            assert!(
                err <= scales[r as usize] as f64 / 2.0 + 1e-7,
                "row {r}: {err}"
            );
        }
        // The row maximum is exact.
        assert_eq!(back.double_value(&[0, 1]), -1.0);
        assert_eq!(q.bytes(), 9 + 12);
    }

    #[test]
    fn stochastic_rounding_is_unbiased() {
        // One row whose largest element fixes the scale at 1/127; the rest sit
        // between codes, where nearest rounding would always go the same way.
        let n = 10_000i64;
        let value = 0.3 / 127.0; // 0.3 of a step above zero
        let mut row = vec![value as f32; n as usize];
        row[0] = 1.0;
        let w = Tensor::from_slice(&row).reshape([1, n]);
        let mut rng = CounterRng::new(3);
        let q = Int8Weight::quantize_stochastic(&w, &mut rng).unwrap();
        let back = q.dequantize().unwrap().narrow(1, 1, n - 1);
        let mean = back.mean(Kind::Double).double_value(&[]);
        // Each element is 0 or one step: a Bernoulli(0.3) times the step.
        let step = 1.0 / 127.0;
        let sigma = step * (0.3f64 * 0.7 / (n - 1) as f64).sqrt();
        assert!(
            (mean - value).abs() < 3.0 * sigma,
            "mean {mean}, want {value} ± {}",
            3.0 * sigma
        );
        assert_eq!(rng.state().counter, n as u64, "one draw per element");
        let nearest = Int8Weight::quantize_nearest(&w)
            .unwrap()
            .dequantize()
            .unwrap();
        assert_eq!(
            nearest
                .narrow(1, 1, n - 1)
                .abs()
                .sum(Kind::Double)
                .double_value(&[]),
            0.0
        );
    }
}
