//! A seeded, counter-based random number generator that runs on the
//! tensor's device (dropout masks, stochastic rounding), whose whole state
//! is a `(seed, counter)` pair that fits in a checkpoint.
//!
//! Value number `n` of the stream is SplitMix64's output for the state
//! `base + (n + 1)·γ` (γ = 0x9E3779B97F4A7C15, `base` a hash of the seed),
//! i.e. exactly what [`tli_rng::Rng::from_state`]`(base + n·γ).next_u64()`
//! gives. On the device it is computed for all elements at once with int64
//! tensor ops (wrapping add and multiply, xor, shifts), so a draw is one
//! batch of elementwise kernels: no host round trip, no dependence on the
//! CPU thread count, and libtorch's global generator is never touched (it is
//! shared by every plugin in the host process). A draw of `n` values
//! advances the counter by `n`.

use crate::errors::TchResultExt;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

/// SplitMix64's Weyl increment γ.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
const MIX1: u64 = 0xBF58_476D_1CE4_E5B9;
const MIX2: u64 = 0x94D0_49BB_1331_11EB;
/// Bits kept for an `f32` uniform (its mantissa holds 24 exactly).
const FLOAT_BITS: u32 = 24;

/// The whole state of a [`CounterRng`]: save it, restore it with
/// [`CounterRng::from_state`], and the stream continues identically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CounterRngState {
    pub seed: u64,
    /// Values drawn so far.
    pub counter: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterRng {
    seed: u64,
    counter: u64,
    /// SplitMix64 state just before value 0 (derived from the seed).
    base: u64,
}

impl CounterRng {
    pub fn new(seed: u64) -> Self {
        Self::from_state(CounterRngState { seed, counter: 0 })
    }

    pub fn from_state(state: CounterRngState) -> Self {
        Self {
            seed: state.seed,
            counter: state.counter,
            base: seed_base(state.seed),
        }
    }

    pub fn state(&self) -> CounterRngState {
        CounterRngState {
            seed: self.seed,
            counter: self.counter,
        }
    }

    /// SplitMix64 state just before value 0: the reference stream is
    /// `Rng::from_state(base_state() + n·γ).next_u64()` for value `n`.
    pub fn base_state(&self) -> u64 {
        self.base
    }

    /// Value `counter + index` of the stream as a uniform `f32` in `[0, 1)`,
    /// computed on the host: exactly the element `index` of the next
    /// [`uniform`](Self::uniform) draw. Does not advance the counter (see
    /// [`skip`](Self::skip)); host kernels that draw in parallel use it.
    #[inline(always)]
    pub fn uniform_at(&self, index: u64) -> f32 {
        let state = self.base.wrapping_add(
            self.counter
                .wrapping_add(index)
                .wrapping_add(1)
                .wrapping_mul(GAMMA),
        );
        (mix64(state) >> (64 - FLOAT_BITS)) as f32 * (1.0 / (1u64 << FLOAT_BITS) as f32)
    }

    /// Advances the counter by `n`, as a draw of `n` values would (after a
    /// host kernel has used them through [`uniform_at`](Self::uniform_at)).
    pub fn skip(&mut self, n: u64) {
        self.counter = self.counter.wrapping_add(n);
    }

    /// Raw 64-bit values `[counter, counter + numel)` as an int64 tensor of
    /// `shape` (the bits of the `u64`s), on `device`; advances the counter.
    pub fn bits(&mut self, shape: &[i64], device: Device) -> Result<Tensor, PluginError> {
        let ctx = "drawing random bits";
        let numel = numel_of(shape)?;
        // Weyl state of each element: base + (counter + i + 1)·γ, wrapping.
        let first = self
            .base
            .wrapping_add(self.counter.wrapping_add(1).wrapping_mul(GAMMA));
        let mut z = Tensor::f_arange(numel as i64, (Kind::Int64, device))
            .and_then(|t| t.f_mul_scalar(GAMMA as i64))
            .and_then(|t| t.f_add_scalar(first as i64))
            .plugin_err(ctx)?;
        // z ^= z >> 30; z *= MIX1; z ^= z >> 27; z *= MIX2; z ^= z >> 31
        xor_shift_right(&mut z, 30)?;
        let _ = z.f_mul_scalar_(MIX1 as i64).plugin_err(ctx)?;
        xor_shift_right(&mut z, 27)?;
        let _ = z.f_mul_scalar_(MIX2 as i64).plugin_err(ctx)?;
        xor_shift_right(&mut z, 31)?;
        self.counter = self.counter.wrapping_add(numel);
        z.f_reshape(shape).plugin_err(ctx)
    }

    /// Uniform `f32` values in `[0, 1)` (24 random bits each) of `shape`.
    pub fn uniform(&mut self, shape: &[i64], device: Device) -> Result<Tensor, PluginError> {
        let z = self.bits(shape, device)?;
        logical_shift_right(&z, 64 - FLOAT_BITS)
            .and_then(|t| t.f_to_kind(Kind::Float))
            .and_then(|t| t.f_mul_scalar(1.0 / (1u64 << FLOAT_BITS) as f64))
            .plugin_err("drawing uniform values")
    }

    /// A boolean mask of `shape`, each element true with probability
    /// `keep_prob` (in `[0, 1]`).
    pub fn bernoulli_mask(
        &mut self,
        shape: &[i64],
        keep_prob: f64,
        device: Device,
    ) -> Result<Tensor, PluginError> {
        if !(0.0..=1.0).contains(&keep_prob) {
            return Err(PluginError::invalid_config(format!(
                "keep probability {keep_prob} is outside [0, 1]"
            )));
        }
        self.uniform(shape, device)?
            .f_lt(keep_prob)
            .plugin_err("drawing a Bernoulli mask")
    }

    /// Inverted dropout: each element of `x` is zeroed with probability `p`
    /// and the rest scaled by `1 / (1 − p)`. With `training` false (or
    /// `p == 0`) `x` comes back unchanged and nothing is drawn.
    pub fn dropout(&mut self, x: &Tensor, p: f64, training: bool) -> Result<Tensor, PluginError> {
        if !(0.0..=1.0).contains(&p) {
            return Err(PluginError::invalid_config(format!(
                "dropout probability {p} is outside [0, 1]"
            )));
        }
        if !training || p == 0.0 {
            return Ok(x.shallow_clone());
        }
        let ctx = "applying dropout";
        let mask = self.bernoulli_mask(&x.size(), 1.0 - p, x.device())?;
        if p == 1.0 {
            return x.f_mul_scalar(0.0).plugin_err(ctx);
        }
        mask.f_to_kind(x.kind())
            .and_then(|m| x.f_mul(&m))
            .and_then(|t| t.f_mul_scalar(1.0 / (1.0 - p)))
            .plugin_err(ctx)
    }
}

/// SplitMix64's finalizer, on the host.
#[inline(always)]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(MIX1);
    z = (z ^ (z >> 27)).wrapping_mul(MIX2);
    z ^ (z >> 31)
}

/// Spreads the seed so that nearby seeds start far apart in the Weyl sequence.
fn seed_base(seed: u64) -> u64 {
    mix64(seed ^ 0x5851_F42D_4C95_7F2D).wrapping_mul(GAMMA)
}

fn numel_of(shape: &[i64]) -> Result<u64, PluginError> {
    shape.iter().try_fold(1u64, |n, &d| {
        u64::try_from(d)
            .ok()
            .and_then(|d| n.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| {
                PluginError::invalid_config(format!("cannot draw random values of shape {shape:?}"))
            })
    })
}

/// `z >> k` on the bits as unsigned (libtorch shifts int64 arithmetically,
/// so the sign-extended top `k` bits are masked off).
fn logical_shift_right(z: &Tensor, k: u32) -> Result<Tensor, tch::TchError> {
    let mask = ((1u64 << (64 - k)) - 1) as i64;
    z.f_bitwise_right_shift_tensor_scalar(k as i64)?
        .f_bitwise_and(mask)
}

/// `z ^= z >> k` (unsigned shift), in place.
fn xor_shift_right(z: &mut Tensor, k: u32) -> Result<(), PluginError> {
    let shifted = logical_shift_right(z, k).plugin_err("drawing random bits")?;
    let _ = z
        .f_bitwise_xor_tensor_(&shifted)
        .plugin_err("drawing random bits")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn host_reference_is_splitmix64() {
        // Value n is Rng::from_state(base + n·γ).next_u64(): the kit Rng's stream.
        let r = CounterRng::new(11);
        let mut reference = Rng::from_state(r.base_state());
        for n in 0..5u64 {
            let state = r
                .base_state()
                .wrapping_add(n.wrapping_add(1).wrapping_mul(GAMMA));
            assert_eq!(mix64(state), reference.next_u64());
        }
    }

    #[test]
    fn host_values_are_the_device_draw() {
        let mut r = CounterRng::new(29);
        r.skip(1000);
        let host: Vec<f32> = (0..64).map(|i| r.uniform_at(i)).collect();
        let device = Vec::<f32>::try_from(&r.uniform(&[64], Device::Cpu).unwrap()).unwrap();
        assert_eq!(host, device);
        assert_eq!(r.state().counter, 1064);
    }
}
