//! Shared helpers: seeded random tensors, relative errors, gradients.

use tch::{Kind, Tensor};
use tli_plugin_kit::rng::Rng;
use tli_plugin_mamba2::Mamba2Config;

/// Standard normal values from the kit's seeded RNG (not libtorch's).
pub fn randn(rng: &mut Rng, shape: &[i64], kind: Kind) -> Tensor {
    let n: i64 = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    Tensor::from_slice(&v).reshape(shape).to_kind(kind)
}

/// `max|a − b| / max|b|` (b the reference).
pub fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shapes differ");
    let a = a.detach().to_kind(Kind::Double);
    let b = b.detach().to_kind(Kind::Double);
    let diff = (&a - &b).abs().max().double_value(&[]);
    let scale = b.abs().max().double_value(&[]).max(1e-300);
    diff / scale
}

/// Gradients of `Σ y·w` with respect to `inputs` (not accumulated anywhere).
pub fn grads(y: &Tensor, w: &Tensor, inputs: &[&Tensor]) -> Vec<Tensor> {
    let loss = (y * w).sum(y.kind());
    Tensor::run_backward(&[loss], inputs, false, false)
}

/// A small block: d_model 8, d_inner 16, 4 heads of 4, 2 groups, N = 4.
pub fn small_config() -> Mamba2Config {
    Mamba2Config {
        d_state: 4,
        headdim: 4,
        ngroups: 2,
        ..Mamba2Config::new(8)
    }
}

/// Sequence length not a multiple of any chunk size tested but 1.
pub const LEN: i64 = 37;
pub const CHUNKS: [usize; 4] = [1, 4, 16, 64];
