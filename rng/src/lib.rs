//! A deterministic random number generator (SplitMix64) whose whole state is
//! one `u64`, so it can be saved in a checkpoint and restored exactly.
//!
//! Plugins must not rely on libtorch's global generator: every plugin in the
//! host process shares it, so concurrent tasks would perturb each other.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        // Mix the seed so that seeds 0, 1, 2… start far apart.
        let mut rng = Self {
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
        };
        rng.next_u64();
        rng
    }

    /// A generator whose next output is SplitMix64's from `state` exactly
    /// (no seed mixing): the reference sequence, for tests that replay it.
    pub fn from_state(state: u64) -> Self {
        Self { state }
    }

    /// The whole state (what [`from_state`](Self::from_state) takes back).
    pub fn state(&self) -> u64 {
        self.state
    }

    /// A generator for a named sub-stream, independent of this one's position.
    pub fn fork(&self, stream: u64) -> Self {
        Self::new(self.state ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `[0, n)`; `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0)");
        // Lemire's multiply-shift; the bias is < n / 2^64, negligible here.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_state_roundtrips() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let saved = serde_json::to_string(&a).unwrap();
        let mut c: Rng = serde_json::from_str(&saved).unwrap();
        assert_eq!(a.next_u64(), c.next_u64());
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn moments_are_plausible() {
        let mut r = Rng::new(3);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "var {var}");
        assert!((0..1000).all(|_| r.below(10) < 10));
    }
}
