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

/// Bytes after the encoder's table, so that a 32-bit gather at any index
/// stays inside it.
const TABLE_PAD: usize = 4;

/// A sorted 256-value quantization map and its encoder.
pub struct DynamicMap {
    values: [f32; CODES],
    /// `(values[i] + values[i + 1]) / 2`.
    midpoints: [f32; CODES - 1],
    /// Code of the smallest `f32` whose top 16 bits are the index, and
    /// [`TABLE_PAD`] zero bytes (a gather reads four bytes per index).
    table: Box<[u8; (1 << 16) + TABLE_PAD]>,
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
        let mut table = Box::new([0u8; (1 << 16) + TABLE_PAD]);
        for (prefix, code) in (0u32..).zip(table[..1 << 16].iter_mut()) {
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
    /// [`decode`](Self::decode) of `codes[k]` times `scale` into `out[k]`,
    /// eight at a time with AVX2 gathers (the same products, bit for bit).
    ///
    /// # Safety
    /// The CPU must have AVX2; `out` is at least as long as `codes`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub unsafe fn decode_scaled_avx2(&self, codes: &[u8], scale: f32, out: &mut [f32]) {
        use std::arch::x86_64::*;
        let n = codes.len().min(out.len());
        let whole = n - n % 8;
        let factor = _mm256_set1_ps(scale);
        let mut k = 0;
        while k < whole {
            // SAFETY: `k + 8 <= n` bytes of `codes` and floats of `out`; the
            // indices are codes (< 256) into the 256 values.
            unsafe {
                let bytes = _mm_loadl_epi64(codes.as_ptr().add(k) as *const __m128i);
                let index = _mm256_cvtepu8_epi32(bytes);
                let value = _mm256_i32gather_ps::<4>(self.values.as_ptr(), index);
                _mm256_storeu_ps(out.as_mut_ptr().add(k), _mm256_mul_ps(value, factor));
            }
            k += 8;
        }
        for i in whole..n {
            out[i] = self.values[codes[i] as usize] * scale;
        }
    }

    /// [`encode`](Self::encode) of every `x[k]` into `codes[k]`, eight at a
    /// time with AVX2 gathers (the same codes, bit for bit).
    ///
    /// # Safety
    /// The CPU must have AVX2; `codes` is at least as long as `x`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub unsafe fn encode_all_avx2(&self, x: &[f32], codes: &mut [u8]) {
        use std::arch::x86_64::*;
        let n = x.len().min(codes.len());
        let whole = n - n % 8;
        let low_byte = _mm256_set1_epi32(0xFF);
        let mut lanes = [0i32; 8];
        let mut k = 0;
        while k < whole {
            // SAFETY: `k + 8 <= n` floats of `x`; a prefix index is below
            // 2¹⁶ and the table has `TABLE_PAD` bytes past it, so each 4-byte
            // read stays inside; a code (< 256) indexes the 256 bounds.
            unsafe {
                let v = _mm256_loadu_ps(x.as_ptr().add(k));
                let prefix = _mm256_srli_epi32::<16>(_mm256_castps_si256(v));
                let word = _mm256_i32gather_epi32::<1>(self.table.as_ptr() as *const i32, prefix);
                let code = _mm256_and_si256(word, low_byte);
                let bound = _mm256_i32gather_ps::<4>(self.upper_bounds.as_ptr(), code);
                // All ones (−1) where the bound lies below `x` (false for NaN, as `<`).
                let below = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LT_OQ>(bound, v));
                let code = _mm256_sub_epi32(code, below);
                _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, code);
            }
            for (c, &l) in codes[k..k + 8].iter_mut().zip(&lanes) {
                *c = l as u8;
            }
            k += 8;
        }
        for i in whole..n {
            codes[i] = self.encode(x[i]);
        }
    }

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

    /// The AVX2 gather encoder and decoder give the scalar ones' bits for
    /// every 16-bit prefix (with low bits 0, all ones and in between), NaN
    /// and infinities included, and for a length that is not a multiple of 8.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_gather_codec_matches_the_scalar_one() {
        if !(std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"))
        {
            return;
        }
        let mut xs: Vec<f32> = Vec::new();
        for prefix in 0..=u16::MAX as u32 {
            for low in [0u32, 0x7FFF, 0xFFFF] {
                xs.push(f32::from_bits((prefix << 16) | low));
            }
        }
        xs.push(0.5);
        for map in [DynamicMap::signed(), DynamicMap::unsigned()] {
            let mut codes = vec![0u8; xs.len()];
            // SAFETY: AVX2 and FMA checked above; `codes` is as long as `xs`.
            unsafe { map.encode_all_avx2(&xs, &mut codes) };
            for (x, c) in xs.iter().zip(&codes) {
                assert_eq!(*c, map.encode(*x), "{x:e} ({:#010x})", x.to_bits());
            }
            let all: Vec<u8> = (0..=255u8).chain([3, 200, 77]).collect();
            let mut out = vec![0f32; all.len()];
            // SAFETY: as above; `out` is as long as `all`.
            unsafe { map.decode_scaled_avx2(&all, 0.37, &mut out) };
            for (c, o) in all.iter().zip(&out) {
                assert_eq!(o.to_bits(), (map.decode(*c) * 0.37).to_bits());
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
