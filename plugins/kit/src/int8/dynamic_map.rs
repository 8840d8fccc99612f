//! The dynamic (tree) quantization maps of 8-bit Adam (Dettmers et al.,
//! ICLR 2022; the construction follows bitsandbytes'
//! `create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8)`), and a fast exact encoder.
//!
//! A map is 256 sorted `f32` values in `[−1, 1]` (signed, for Adam's first
//! moment) or `[0, 1]` (unsigned, for the second): for each decade
//! `10^(−6+i)`, `i = 0..7`, the midpoints of an even split of `[0.1, 1]`
//! into `2^i` (signed) or `2^(i+1)` (unsigned) parts, scaled by the decade;
//! then `0` and `1`. Small magnitudes get few, widely spaced codes and
//! values near the block's absolute maximum many — the dynamic range of
//! the moments is kept at 8 bits.
//!
//! Encoding is nearest-value (`argmin_j |map[j] − x|`, the lower code on a
//! tie): the number of midpoints between neighbouring codes that lie below
//! `x`. [`DynamicMap::encode`] finds it with a 65 536-entry table indexed
//! by the top 16 bits of `x`'s `f32` pattern (sign, exponent and 7 mantissa
//! bits), which gives the code of the smallest value with that prefix, and
//! then steps up past the midpoint still below `x`, if any (no prefix spans
//! two midpoints of these maps): exact, branch-free, a few nanoseconds.

use std::sync::OnceLock;

/// Codes per map (8 bits).
pub const CODES: usize = 256;

/// A sorted 256-value quantization map and its encoder.
pub struct DynamicMap {
    values: [f32; CODES],
    /// `(values[i] + values[i + 1]) / 2`.
    midpoints: [f32; CODES - 1],
    /// Code of the smallest `f32` whose top 16 bits are the index.
    table: Box<[u8; 1 << 16]>,
    /// The midpoints and `+∞`: the upper bound of each code's interval
    /// (the encoder never indexes past the end).
    upper_bounds: [f32; CODES],
}

impl DynamicMap {
    /// The signed map (first moment): 127 negative values, 0, 128 positive ones up to 1.
    pub fn signed() -> &'static DynamicMap {
        static MAP: OnceLock<DynamicMap> = OnceLock::new();
        MAP.get_or_init(|| DynamicMap::build(true))
    }

    /// The unsigned map (second moment): 0, 254 values in `(0, 1)`, and 1.
    pub fn unsigned() -> &'static DynamicMap {
        static MAP: OnceLock<DynamicMap> = OnceLock::new();
        MAP.get_or_init(|| DynamicMap::build(false))
    }

    fn build(signed: bool) -> DynamicMap {
        const MAX_EXPONENT_BITS: i32 = 7;
        let mut data: Vec<f32> = Vec::with_capacity(CODES);
        for i in 0..MAX_EXPONENT_BITS {
            let items = if signed {
                (1 << i) + 1
            } else {
                (1 << (i + 1)) + 1
            };
            let decade = 10f32.powi(-(MAX_EXPONENT_BITS - 1) + i);
            // torch.linspace(0.1, 1, items) in f32, then the means of neighbours.
            let boundary = |k: i32| 0.1f32 + (0.9f32 * k as f32) / (items - 1) as f32;
            for k in 0..items - 1 {
                let mean = (boundary(k) + boundary(k + 1)) / 2.0;
                data.push(decade * mean);
                if signed {
                    data.push(-decade * mean);
                }
            }
        }
        data.push(0.0);
        data.push(1.0);
        debug_assert_eq!(data.len(), CODES);
        data.sort_by(f32::total_cmp);
        let mut values = [0f32; CODES];
        values.copy_from_slice(&data);
        let mut midpoints = [0f32; CODES - 1];
        for (i, m) in midpoints.iter_mut().enumerate() {
            *m = (values[i] + values[i + 1]) / 2.0;
        }
        let slow = |x: f32| midpoints.partition_point(|&m| m < x) as u8;
        // A fixed-size table: an index of 16 bits needs no bounds check.
        let mut table = Box::new([0u8; 1 << 16]);
        for (prefix, code) in (0u32..).zip(table.iter_mut()) {
            // The smallest value with this prefix: the bottom bits all zero for a
            // positive pattern, all one for a negative (the most negative).
            let low_bits = if prefix & 0x8000 == 0 { 0 } else { 0xFFFF };
            *code = slow(f32::from_bits((prefix << 16) | low_bits));
        }
        let mut upper_bounds = [f32::INFINITY; CODES];
        upper_bounds[..CODES - 1].copy_from_slice(&midpoints);
        DynamicMap {
            values,
            midpoints,
            table,
            upper_bounds,
        }
    }

    /// The 256 values, ascending.
    pub fn values(&self) -> &[f32; CODES] {
        &self.values
    }

    /// The 255 midpoints between neighbouring values, ascending (the
    /// encoder's decision boundaries).
    pub fn midpoints(&self) -> &[f32; CODES - 1] {
        &self.midpoints
    }

    /// The value of `code`.
    #[inline]
    pub fn decode(&self, code: u8) -> f32 {
        self.values[code as usize]
    }

    /// The code of the value nearest `x` (the lower one on a tie); `x` is
    /// expected in the map's range (values beyond it get the end codes, NaN
    /// gets the code the table gives its bit pattern).
    #[inline(always)]
    pub fn encode(&self, x: f32) -> u8 {
        let bounds = &self.upper_bounds;
        let mut code = self.table[(x.to_bits() >> 16) as usize] as usize;
        // No prefix's range holds more than one midpoint (a test checks every
        // prefix of both maps), so one step without a branch finishes.
        code += (bounds[code] < x) as usize;
        code as u8
    }

    /// The code of 0 (what an all-zero block stores).
    pub fn zero_code(&self) -> u8 {
        self.encode(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn maps_have_256_sorted_values_with_zero_and_one() {
        for (map, low) in [
            (DynamicMap::signed(), -1.0f32),
            (DynamicMap::unsigned(), 0.0),
        ] {
            let v = map.values();
            assert_eq!(v.len(), 256);
            assert!(v.windows(2).all(|w| w[0] < w[1]), "strictly ascending");
            assert!(v.contains(&0.0) && v[255] == 1.0);
            assert!(v[0] >= low && v[0] < low + 0.01, "lowest value {}", v[0]);
            assert_eq!(map.decode(map.zero_code()), 0.0);
        }
        // The signed map is symmetric apart from +1 (codes 0..=126 mirror 128..=254).
        let s = DynamicMap::signed().values();
        for i in 0..127 {
            assert_eq!(s[i], -s[254 - i], "code {i}");
        }
        // The smallest non-zero magnitudes sit in the 1e-6 decade.
        let u = DynamicMap::unsigned().values();
        assert!(u[1] > 1e-7 && u[1] < 1e-6, "{}", u[1]);
    }

    /// The encoder's single step is enough: within every 16-bit prefix, the
    /// largest value lies at most one midpoint above the prefix's table code.
    #[test]
    fn no_prefix_spans_two_midpoints() {
        for map in [DynamicMap::signed(), DynamicMap::unsigned()] {
            for prefix in 0..=u16::MAX as u32 {
                let high_bits = if prefix & 0x8000 == 0 { 0xFFFF } else { 0 };
                let largest = f32::from_bits((prefix << 16) | high_bits);
                if largest.is_nan() {
                    continue;
                }
                let exact = map.midpoints.partition_point(|&m| m < largest);
                let from_table = map.table[prefix as usize] as usize;
                assert!(
                    exact - from_table <= 1,
                    "prefix {prefix:#06x}: {} midpoints",
                    exact - from_table
                );
                assert_eq!(map.encode(largest) as usize, exact);
            }
        }
    }

    #[test]
    fn the_table_encoder_is_exactly_the_nearest_value() {
        let mut rng = Rng::new(5);
        for map in [DynamicMap::signed(), DynamicMap::unsigned()] {
            let low = map.values()[0];
            let nearest = |x: f32| -> u8 {
                let mut best = 0;
                for j in 1..CODES {
                    if (map.values()[j] - x).abs() < (map.values()[best] - x).abs() {
                        best = j;
                    }
                }
                best as u8
            };
            // Uniform values, values spread over the decades, and the codes and midpoints themselves.
            let mut xs: Vec<f32> = (0..20_000)
                .map(|_| low + (1.0 - low) * rng.uniform() as f32)
                .collect();
            xs.extend((0..20_000).map(|_| {
                let magnitude = 10f64.powf(-8.0 * rng.uniform()) as f32;
                if low < 0.0 && rng.uniform() < 0.5 {
                    -magnitude
                } else {
                    magnitude
                }
            }));
            xs.extend(map.values().iter().copied());
            for &x in &xs {
                let code = map.encode(x);
                // Same distance as the brute-force argmin (ties may pick either side).
                let got = (map.decode(code) - x).abs();
                let want = (map.decode(nearest(x)) - x).abs();
                assert_eq!(got, want, "x = {x:e}: code {code}, nearest {}", nearest(x));
            }
            for (j, &v) in map.values().iter().enumerate() {
                assert_eq!(
                    map.encode(v) as usize,
                    j,
                    "a map value encodes to its own code"
                );
            }
        }
    }
}
