//! AdamW state below 8 bits for INT8 weights, in two formats (the
//! [`StateFormat`]s besides 8-bit):
//!
//! * **`4bit`** (Li, Chen & Zhu, "Memory Efficient Optimizers with 4-bit
//!   States", NeurIPS 2023): the first moment in blocks of 128 elements, each
//!   element a 4-bit code of a signed dynamic-exponent map ([`Map16::signed`])
//!   relative to its block's absolute maximum; the second moment as 4-bit
//!   codes of a **linear map without zero** ([`Map16::unsigned`]:
//!   `(k + 1) / 16`), normalized **rank-1**: element `(i, j)` relative to
//!   `min(max of row i, max of column j)`. Excluding zero matters because
//!   `1 / √v` explodes for a second moment rounded to 0 (the paper's
//!   "zero-point problem"); rank-1 normalization follows outliers that sit
//!   in a row or a column better than fixed blocks do.
//! * **`factored`**: the same 4-bit first moment, and the second moment
//!   factored as in Adafactor (Shazeer & Stern, ICML 2018): exponential
//!   moving averages of the row means `r` and column means `c` of `g²`, and
//!   `v̂ᵢⱼ = rᵢ cⱼ / mean(r)`, i.e. `R + C` floats for an `R × C` matrix
//!   (the paper's "4-bit Factor").
//!
//! Per parameter that is 0.5 + 0.5 + 4/128 bytes (`4bit`) or 0.5 + 4/128
//! (`factored`), against 2 + 8/256 for 8-bit state.
//!
//! Two 4-bit codes share a byte, element `2k` in the low nibble. One update
//! of a weight `[R, C]`:
//!
//! ```text
//! g = grad · grad_scale
//! m = decode(m) ;  m ← m + (1 − β1)(g − m)                 (per block of 128)
//! 4bit:      v = decode(v)·min(rowmax_i, colmax_j) ;  v ← v + (1 − β2)(g² − v)
//!            rowmax_i = maxⱼ v ;  colmax_j = maxᵢ v ;  codes = nearest(v / min(rowmax_i, colmax_j))
//! factored:  r ← r + (1 − β2)(meanⱼ g² − r) ;  c ← c + (1 − β2)(meanᵢ g² − c) ;  v = r_i c_j / mean(r)
//! w ← w − lr · (m / b1 / (√v / √b2 + ε) + λ·w) ;  requantize w (stochastic, as 8-bit)
//! ```
//!
//! As for 8-bit state there are two implementations that agree up to
//! floating-point rounding: [`update_host`] (a fused pass over host memory:
//! one sweep for the row and column statistics, one for the moments and the
//! weight, one for the re-quantization; parallel, and independent of the
//! thread count bit for bit: column sums are added in fixed row chunks) and
//! [`update_tensors`] (libtorch ops, any device).

use super::blockwise_adam::{
    abs_max, nonzero_or_one, requantize_parallel, DeviceMaps, UpdateScalars,
};
use super::weight::Int8Weight;
use crate::counter_rng::CounterRng;
use crate::errors::TchResultExt;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

/// Elements per block of the 4-bit first moment (the paper's B128).
pub const BLOCK4: usize = 128;

/// How the AdamW moments of INT8 weights are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StateFormat {
    /// Two 8-bit moments in blocks of 256 (Dettmers et al., ICLR 2022).
    #[default]
    #[serde(rename = "8bit")]
    Bits8,
    /// Two 4-bit moments: B128 first moment, rank-1 normalized second (Li et al., 2023).
    #[serde(rename = "4bit")]
    Bits4,
    /// 4-bit first moment, factored second moment (Adafactor's row and column averages).
    #[serde(rename = "factored")]
    Factored,
}

impl StateFormat {
    /// The names a config uses, in order.
    pub const NAMES: [&'static str; 3] = ["8bit", "4bit", "factored"];

    pub fn name(self) -> &'static str {
        match self {
            StateFormat::Bits8 => "8bit",
            StateFormat::Bits4 => "4bit",
            StateFormat::Factored => "factored",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "8bit" => Some(StateFormat::Bits8),
            "4bit" => Some(StateFormat::Bits4),
            "factored" => Some(StateFormat::Factored),
            _ => None,
        }
    }

    /// Below 8 bits per moment (the packed 4-bit layout).
    pub fn is_low_bit(self) -> bool {
        self != StateFormat::Bits8
    }

    /// Bytes of optimizer state of one quantized `[rows, cols]` matrix.
    pub fn bytes_for(self, rows: u64, cols: u64) -> u64 {
        let n = rows * cols;
        match self {
            StateFormat::Bits8 => 2 * n + 8 * super::blockwise_adam::blocks_for(n as usize) as u64,
            StateFormat::Bits4 => {
                2 * n.div_ceil(2) + 4 * n.div_ceil(BLOCK4 as u64) + 4 * (rows + cols)
            }
            StateFormat::Factored => {
                n.div_ceil(2) + 4 * n.div_ceil(BLOCK4 as u64) + 4 * (rows + cols)
            }
        }
    }
}

/// A sorted 16-value quantization map; nearest-value encoding (the lower
/// code on a tie) by counting the midpoints below `x`: 15 comparisons,
/// branch-free.
pub struct Map16 {
    values: [f32; 16],
    midpoints: [f32; 15],
}

impl Map16 {
    /// The signed dynamic-exponent map of the first moment: for the decades
    /// 10⁻², 10⁻¹ and 1, the midpoints of `[0.1, 1]` cut into 1, 2 and 4
    /// equal parts, scaled by the decade, both signs; then 0 and 1 — the
    /// 8-bit map's construction with three exponent decades.
    pub fn signed() -> &'static Map16 {
        static MAP: OnceLock<Map16> = OnceLock::new();
        MAP.get_or_init(|| {
            let mut values = vec![0.0f32, 1.0];
            for i in 0..3 {
                let decade = 10f32.powi(i - 2);
                let parts = 1 << i;
                let bound = |k: i32| 0.1f32 + 0.9f32 * k as f32 / parts as f32;
                for k in 0..parts {
                    let mean = (bound(k) + bound(k + 1)) / 2.0;
                    values.push(decade * mean);
                    values.push(-decade * mean);
                }
            }
            Map16::from_values(values)
        })
    }

    /// The unsigned linear map without zero of the second moment: `(k + 1) / 16`.
    pub fn unsigned() -> &'static Map16 {
        static MAP: OnceLock<Map16> = OnceLock::new();
        MAP.get_or_init(|| Map16::from_values((1..=16).map(|k| k as f32 / 16.0).collect()))
    }

    fn from_values(mut values: Vec<f32>) -> Map16 {
        values.sort_by(f32::total_cmp);
        let mut v = [0f32; 16];
        v.copy_from_slice(&values);
        let mut midpoints = [0f32; 15];
        for (k, m) in midpoints.iter_mut().enumerate() {
            *m = (v[k] + v[k + 1]) / 2.0;
        }
        Map16 {
            values: v,
            midpoints,
        }
    }

    pub fn values(&self) -> &[f32; 16] {
        &self.values
    }

    pub fn midpoints(&self) -> &[f32; 15] {
        &self.midpoints
    }

    #[inline(always)]
    pub fn decode(&self, code: u8) -> f32 {
        self.values[(code & 15) as usize]
    }

    /// The code of the value nearest `x` (the lower one on a tie; NaN gets 0).
    #[inline(always)]
    pub fn encode(&self, x: f32) -> u8 {
        let mut code = 0u8;
        for &m in &self.midpoints {
            code += (m < x) as u8;
        }
        code
    }

    /// The code of the value nearest 0 (an empty first moment).
    pub fn zero_code(&self) -> u8 {
        self.encode(0.0)
    }
}

/// The 4-bit code of element `e` in a packed buffer.
#[inline(always)]
pub fn nibble(packed: &[u8], e: usize) -> u8 {
    (packed[e >> 1] >> ((e & 1) * 4)) & 15
}

/// Fills a packed buffer of `n` elements with one code.
pub fn packed_fill(code: u8) -> u8 {
    (code & 15) | ((code & 15) << 4)
}

/// One tensor's sub-8-bit moments, as host slices (for [`update_host`]).
pub struct HostState<'a> {
    /// `⌈N/2⌉` bytes, two codes each.
    pub m_codes: &'a mut [u8],
    /// `⌈N/128⌉`.
    pub m_absmax: &'a mut [f32],
    /// `4bit`: `⌈N/2⌉` bytes; `factored`: empty.
    pub v_codes: &'a mut [u8],
    /// `R` and `C`: row and column maxima (`4bit`) or averages (`factored`).
    pub v_rows: &'a mut [f32],
    pub v_cols: &'a mut [f32],
}

/// Rows per chunk of the statistics sweep: a function of the shape only,
/// so column sums are added in the same order whatever the thread count.
fn chunk_rows(rows: usize) -> usize {
    rows.div_ceil(16).max(1)
}

/// The decoded second moment `(i, j)` before this step (`4bit`).
#[inline(always)]
fn old_v(v_codes: &[u8], e: usize, row_max: f32, col_max: f32) -> f32 {
    Map16::unsigned().decode(nibble(v_codes, e)) * row_max.min(col_max)
}

/// The fused host update of a `[rows, cols]` INT8 weight with `format`'s
/// state (not `Bits8`: that is [`super::blockwise_adam::update_host`]).
/// `grad` is overwritten with the updated f32 weight, then `codes`/`scales`
/// receive its stochastic re-quantization and `grad` the dequantized result
/// (`code · scale`); the draw advances `rng` by `N`.
#[allow(clippy::too_many_arguments)]
pub fn update_host(
    format: StateFormat,
    grad: &mut [f32],
    codes: &mut [i8],
    scales: &mut [f32],
    cols: usize,
    state: HostState<'_>,
    s: &UpdateScalars,
    rng: &mut CounterRng,
    threads: usize,
) -> Result<(), PluginError> {
    let n = grad.len();
    let rows = scales.len();
    let half = n.div_ceil(2);
    let blocks = n.div_ceil(BLOCK4);
    let v_len = if format == StateFormat::Bits4 {
        half
    } else {
        0
    };
    if format == StateFormat::Bits8
        || codes.len() != n
        || rows * cols != n
        || state.m_codes.len() != half
        || state.m_absmax.len() != blocks
        || state.v_codes.len() != v_len
        || state.v_rows.len() != rows
        || state.v_cols.len() != cols
    {
        return Err(PluginError::other(format!(
            "{} update: inconsistent sizes (gradient {n}, codes {}, {rows}×{cols} weight, \
             moment codes {}/{}, absmax {}, rows {}, columns {})",
            format.name(),
            codes.len(),
            state.m_codes.len(),
            state.v_codes.len(),
            state.m_absmax.len(),
            state.v_rows.len(),
            state.v_cols.len()
        )));
    }
    let threads = threads.max(1);
    // Sweep 1: the new row and column statistics of the second moment.
    let (new_rows, new_cols) = row_col_stats(format, grad, cols, &state, s, threads);
    let mean_rows = if format == StateFormat::Factored {
        new_rows.iter().map(|&r| r as f64).sum::<f64>() as f32 / rows.max(1) as f32
    } else {
        0.0
    };
    let stats = Stats {
        format,
        cols,
        old_rows: &*state.v_rows,
        old_cols: &*state.v_cols,
        new_rows: &new_rows,
        new_cols: &new_cols,
        mean_rows,
    };
    // Sweep 2, parallel over blocks: moments and the f32 weight update.
    let blocks_per_thread = if threads == 1 {
        blocks.max(1)
    } else {
        blocks.div_ceil(threads).max(1)
    };
    let chunk = blocks_per_thread * BLOCK4;
    {
        let stats = &stats;
        let scales_ro: &[f32] = scales;
        let codes_ro: &[i8] = codes;
        let v_chunks: Vec<&mut [u8]> = if v_len > 0 {
            state.v_codes.chunks_mut(chunk / 2).collect()
        } else {
            Vec::new()
        };
        let mut v_chunks = v_chunks.into_iter();
        let parts: Vec<_> = grad
            .chunks_mut(chunk)
            .zip(state.m_codes.chunks_mut(chunk / 2))
            .zip(state.m_absmax.chunks_mut(blocks_per_thread))
            .enumerate()
            .map(|(t, ((g, mc), ma))| Part {
                first: t * chunk,
                grad: g,
                m_codes: mc,
                m_absmax: ma,
                v_codes: v_chunks.next().unwrap_or_default(),
            })
            .collect();
        if parts.len() == 1 {
            for part in parts {
                update_part(part, codes_ro, scales_ro, stats, s);
            }
        } else {
            std::thread::scope(|scope| {
                for part in parts {
                    scope.spawn(move || update_part(part, codes_ro, scales_ro, stats, s));
                }
            });
        }
    }
    state.v_rows.copy_from_slice(&new_rows);
    state.v_cols.copy_from_slice(&new_cols);
    // Sweep 3: new scales and stochastic rounding (as for 8-bit state).
    requantize_parallel(grad, codes, scales, cols, rng, threads);
    Ok(())
}

/// Sweep 1: per row chunk, the new row statistic and the chunk's partial
/// column statistic; the partials are then combined in chunk order.
fn row_col_stats(
    format: StateFormat,
    grad: &[f32],
    cols: usize,
    state: &HostState<'_>,
    s: &UpdateScalars,
    threads: usize,
) -> (Vec<f32>, Vec<f32>) {
    let rows = state.v_rows.len();
    let per_chunk = chunk_rows(rows);
    let chunks = rows.div_ceil(per_chunk);
    let mut new_rows = vec![0f32; rows];
    let mut partial = vec![0f32; chunks * cols];
    let (v_codes, old_rows, old_cols): (&[u8], &[f32], &[f32]) =
        (state.v_codes, state.v_rows, state.v_cols);
    let work = |first_chunk: usize, row_out: &mut [f32], col_out: &mut [f32]| {
        for (c, (rows_c, cols_c)) in row_out
            .chunks_mut(per_chunk)
            .zip(col_out.chunks_mut(cols))
            .enumerate()
        {
            let first_row = (first_chunk + c) * per_chunk;
            for (k, row_stat) in rows_c.iter_mut().enumerate() {
                let i = first_row + k;
                let g_row = &grad[i * cols..(i + 1) * cols];
                *row_stat = match format {
                    StateFormat::Bits4 => {
                        let mut row_max = 0f32;
                        for (j, (&gj, col)) in g_row.iter().zip(cols_c.iter_mut()).enumerate() {
                            let v = new_v(v_codes, i * cols + j, old_rows[i], old_cols[j], gj, s);
                            row_max = row_max.max(v);
                            *col = col.max(v);
                        }
                        row_max
                    }
                    _ => {
                        let mut sum = 0f32;
                        for (&gj, col) in g_row.iter().zip(cols_c.iter_mut()) {
                            let g = gj * s.grad_scale;
                            sum += g * g;
                            *col += g * g;
                        }
                        let mean = sum / cols as f32;
                        old_rows[i] + (1.0 - s.beta2) * (mean - old_rows[i])
                    }
                };
            }
        }
    };
    let chunks_per_thread = chunks.div_ceil(threads).max(1);
    if threads == 1 || chunks == 1 {
        work(0, &mut new_rows, &mut partial);
    } else {
        let work = &work;
        std::thread::scope(|scope| {
            for (t, (r, p)) in new_rows
                .chunks_mut(chunks_per_thread * per_chunk)
                .zip(partial.chunks_mut(chunks_per_thread * cols))
                .enumerate()
            {
                scope.spawn(move || work(t * chunks_per_thread, r, p));
            }
        });
    }
    let mut new_cols = vec![0f32; cols];
    for p in partial.chunks(cols) {
        for (c, &x) in new_cols.iter_mut().zip(p) {
            *c = match format {
                StateFormat::Bits4 => c.max(x),
                _ => *c + x,
            };
        }
    }
    if format == StateFormat::Factored {
        for (c, &old) in new_cols.iter_mut().zip(old_cols) {
            let mean = *c / rows as f32;
            *c = old + (1.0 - s.beta2) * (mean - old);
        }
    }
    (new_rows, new_cols)
}

/// The second moment `(i, j)` after this step (`4bit`): the same
/// expression in both sweeps, so they agree bit for bit.
#[inline(always)]
fn new_v(
    v_codes: &[u8],
    e: usize,
    row_max: f32,
    col_max: f32,
    grad: f32,
    s: &UpdateScalars,
) -> f32 {
    let v = old_v(v_codes, e, row_max, col_max);
    let g = grad * s.grad_scale;
    v + (1.0 - s.beta2) * (g * g - v)
}

/// What sweep 2 reads of the second moment's statistics.
struct Stats<'a> {
    format: StateFormat,
    cols: usize,
    old_rows: &'a [f32],
    old_cols: &'a [f32],
    new_rows: &'a [f32],
    new_cols: &'a [f32],
    mean_rows: f32,
}

/// One thread's whole blocks from element `first` on.
struct Part<'a> {
    first: usize,
    grad: &'a mut [f32],
    m_codes: &'a mut [u8],
    m_absmax: &'a mut [f32],
    v_codes: &'a mut [u8],
}

fn update_part(part: Part<'_>, codes: &[i8], scales: &[f32], stats: &Stats<'_>, s: &UpdateScalars) {
    #[cfg(target_arch = "x86_64")]
    if super::blockwise_adam::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { update_part_avx2(part, codes, scales, stats, s) };
    }
    update_part_body(part, codes, scales, stats, s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn update_part_avx2(
    part: Part<'_>,
    codes: &[i8],
    scales: &[f32],
    stats: &Stats<'_>,
    s: &UpdateScalars,
) {
    update_part_body(part, codes, scales, stats, s)
}

#[inline(always)]
fn update_part_body(
    part: Part<'_>,
    codes: &[i8],
    scales: &[f32],
    stats: &Stats<'_>,
    s: &UpdateScalars,
) {
    let Part {
        first,
        grad,
        m_codes,
        m_absmax,
        v_codes,
    } = part;
    let (smap, umap) = (Map16::signed(), Map16::unsigned());
    let cols = stats.cols;
    let w1 = 1.0 - s.beta1;
    let mut m = [0f32; BLOCK4];
    let mut v = [0f32; BLOCK4];
    // A block's new second-moment codes (its old ones are read until the block is done).
    let mut v_new = [0u8; BLOCK4 / 2];
    for (b, start) in (0..grad.len()).step_by(BLOCK4).enumerate() {
        let end = (start + BLOCK4).min(grad.len());
        let len = end - start;
        let (g, m, v) = (&mut grad[start..end], &mut m[..len], &mut v[..len]);
        let old_m = m_absmax[b];
        for (k, mk) in m.iter_mut().enumerate() {
            *mk = smap.decode(nibble(m_codes, start + k)) * old_m;
        }
        for k in 0..len {
            m[k] += w1 * (g[k] * s.grad_scale - m[k]);
        }
        let new_m = abs_max(m);
        m_absmax[b] = new_m;
        // The second moment and the weight update, one row segment at a time.
        let mut k = 0;
        while k < len {
            let e0 = first + start + k;
            let row = e0 / cols;
            let col0 = e0 - row * cols;
            let seg_end = ((row + 1) * cols - first - start).min(len);
            let scale = scales[row];
            match stats.format {
                StateFormat::Bits4 => {
                    let (old_r, new_r) = (stats.old_rows[row], stats.new_rows[row]);
                    for i in k..seg_end {
                        let j = col0 + i - k;
                        v[i] = new_v(&*v_codes, start + i, old_r, stats.old_cols[j], g[i], s);
                        let norm = nonzero_or_one(new_r.min(stats.new_cols[j]));
                        let code = umap.encode(v[i] / norm);
                        let slot = &mut v_new[i >> 1];
                        *slot = if i & 1 == 0 {
                            code
                        } else {
                            *slot | (code << 4)
                        };
                    }
                }
                _ => {
                    let r = stats.new_rows[row];
                    let cols_here = &stats.new_cols[col0..col0 + seg_end - k];
                    for (vi, &c) in v[k..seg_end].iter_mut().zip(cols_here) {
                        *vi = if stats.mean_rows > 0.0 {
                            r * c / stats.mean_rows
                        } else {
                            0.0
                        };
                    }
                }
            }
            for i in k..seg_end {
                let w = codes[first + start + i] as f32 * scale;
                let denom = v[i].sqrt() / s.sqrt_bias2 + s.eps;
                g[i] = w - s.lr * (m[i] / s.bias1 / denom + s.weight_decay * w);
            }
            k = seg_end;
        }
        if stats.format == StateFormat::Bits4 {
            let bytes = len.div_ceil(2);
            v_codes[start / 2..start / 2 + bytes].copy_from_slice(&v_new[..bytes]);
        }
        // Encode the first moment relative to its block maximum.
        let dm = nonzero_or_one(new_m);
        let packed = &mut m_codes[start / 2..(start + len).div_ceil(2)];
        for (p, pair) in packed.iter_mut().zip(m.chunks(2)) {
            let low = smap.encode(pair[0] / dm);
            let high = pair.get(1).map_or(0, |&x| smap.encode(x / dm));
            *p = low | (high << 4);
        }
    }
}

/// The two 16-value maps on one device, for [`update_tensors`].
pub fn device_maps(device: Device) -> Result<DeviceMaps, PluginError> {
    let (s, u) = (Map16::signed(), Map16::unsigned());
    DeviceMaps::of(
        device,
        [s.values(), s.midpoints(), u.values(), u.midpoints()],
        "copying the 4-bit maps to the device",
    )
}

/// One tensor's sub-8-bit moments as tensors (views into the flat buffers).
pub struct TensorState<'a> {
    pub m_codes: &'a Tensor,
    pub m_absmax: &'a Tensor,
    /// Empty for `factored`.
    pub v_codes: &'a Tensor,
    pub v_rows: &'a Tensor,
    pub v_cols: &'a Tensor,
}

/// `[n]` codes (Int64) of a packed `[⌈n/2⌉]` Uint8 tensor.
pub fn unpack(packed: &Tensor, n: i64) -> Result<Tensor, tch::TchError> {
    let p = packed.f_to_kind(Kind::Int64)?;
    let low = p.f_remainder(16)?;
    let high = p.f_floor_divide_scalar(16)?;
    Tensor::f_stack(&[low, high], 1)?
        .f_reshape([-1])?
        .f_narrow(0, 0, n)
}

/// Packs `[n]` codes (any integer kind, values 0..16) two per byte.
pub fn pack(codes: &Tensor) -> Result<Tensor, tch::TchError> {
    let n = codes.size()[0];
    let c = codes
        .f_to_kind(Kind::Int64)?
        .f_constant_pad_nd([0, n % 2].as_slice())?
        .f_reshape([-1, 2])?;
    c.f_select(1, 0)?
        .f_add(&c.f_select(1, 1)?.f_mul_scalar(16)?)?
        .f_to_kind(Kind::Uint8)
}

/// The same update as [`update_host`] with tensor ops (any device).
pub fn update_tensors(
    format: StateFormat,
    grad: &Tensor,
    weight: &mut Int8Weight,
    state: TensorState<'_>,
    maps: &DeviceMaps,
    s: &UpdateScalars,
    rng: &mut CounterRng,
) -> Result<(), PluginError> {
    let shape = weight.shape();
    let (rows, cols) = (shape[0], shape[1]);
    let n = rows * cols;
    let blocks = (n as u64).div_ceil(BLOCK4 as u64) as i64;
    let pad = blocks * BLOCK4 as i64 - n;
    let updated = tch::no_grad(|| -> Result<Tensor, tch::TchError> {
        let g = grad
            .f_mul_scalar(s.grad_scale as f64)?
            .f_reshape([rows, cols])?;
        // First moment, blocked [blocks, 128] (padding decodes to 0).
        let blocked = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            t.f_reshape([n])?
                .f_constant_pad_nd([0, pad].as_slice())?
                .f_reshape([blocks, BLOCK4 as i64])
        };
        let per_element = state
            .m_absmax
            .f_unsqueeze(1)?
            .f_expand([blocks, BLOCK4 as i64], false)?
            .f_reshape([-1])?
            .f_narrow(0, 0, n)?;
        let mut m = maps
            .signed
            .f_index_select(0, &unpack(state.m_codes, n)?)?
            .f_mul(&per_element)?;
        let _ = m.f_lerp_(&g.f_reshape([n])?, (1.0 - s.beta1) as f64)?;
        let m_blocked = blocked(&m)?;
        let new_m = m_blocked.f_abs()?.f_amax([1i64].as_slice(), false)?;
        let safe_m = new_m.f_where_scalarother(&new_m.f_gt(0.0)?, 1.0)?;
        let m_codes = m_blocked
            .f_div(&safe_m.f_unsqueeze(1)?)?
            .f_reshape([-1])?
            .f_narrow(0, 0, n)?
            .f_searchsorted(&maps.signed_mid, false, false, "left", None::<Tensor>)?;
        let g2 = g.f_square()?;
        let (v, new_rows, new_cols) = match format {
            StateFormat::Bits4 => {
                let norm_old = state
                    .v_rows
                    .f_unsqueeze(1)?
                    .f_minimum(&state.v_cols.f_unsqueeze(0)?)?;
                let mut v = maps
                    .unsigned
                    .f_index_select(0, &unpack(state.v_codes, n)?)?
                    .f_reshape([rows, cols])?
                    .f_mul(&norm_old)?;
                let _ = v.f_lerp_(&g2, (1.0 - s.beta2) as f64)?;
                let new_rows = v.f_amax([1i64].as_slice(), false)?;
                let new_cols = v.f_amax([0i64].as_slice(), false)?;
                let norm = new_rows
                    .f_unsqueeze(1)?
                    .f_minimum(&new_cols.f_unsqueeze(0)?)?;
                let safe = norm.f_where_scalarother(&norm.f_gt(0.0)?, 1.0)?;
                let v_codes = v.f_div(&safe)?.f_reshape([n])?.f_searchsorted(
                    &maps.unsigned_mid,
                    false,
                    false,
                    "left",
                    None::<Tensor>,
                )?;
                state.v_codes.shallow_clone().f_copy_(&pack(&v_codes)?)?;
                (v, new_rows, new_cols)
            }
            _ => {
                let new_rows = state.v_rows.f_lerp(
                    &g2.f_mean_dim([1i64].as_slice(), false, Kind::Float)?,
                    (1.0 - s.beta2) as f64,
                )?;
                let new_cols = state.v_cols.f_lerp(
                    &g2.f_mean_dim([0i64].as_slice(), false, Kind::Float)?,
                    (1.0 - s.beta2) as f64,
                )?;
                let mean = new_rows.f_mean(Kind::Float)?;
                let safe = mean.f_where_scalarother(&mean.f_gt(0.0)?, 1.0)?;
                let v = new_rows
                    .f_unsqueeze(1)?
                    .f_mul(&new_cols.f_unsqueeze(0)?)?
                    .f_div(&safe)?;
                (v, new_rows, new_cols)
            }
        };
        state.m_codes.shallow_clone().f_copy_(&pack(&m_codes)?)?;
        state.m_absmax.shallow_clone().f_copy_(&new_m)?;
        state.v_rows.shallow_clone().f_copy_(&new_rows)?;
        state.v_cols.shallow_clone().f_copy_(&new_cols)?;
        let w = weight
            .codes
            .f_to_kind(Kind::Float)?
            .f_mul(&weight.scales.f_unsqueeze(1)?)?;
        let denom = v
            .f_sqrt()?
            .f_div_scalar(s.sqrt_bias2 as f64)?
            .f_add_scalar(s.eps as f64)?;
        let step = m
            .f_reshape([rows, cols])?
            .f_div_scalar(s.bias1 as f64)?
            .f_div(&denom)?
            .f_add(&w.f_mul_scalar(s.weight_decay as f64)?)?;
        w.f_sub(&step.f_mul_scalar(s.lr as f64)?)
    })
    .plugin_err("sub-8-bit Adam update")?;
    *weight = Int8Weight::quantize_stochastic(&updated, rng)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_maps_have_sixteen_sorted_values() {
        let s = Map16::signed().values();
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert!(s.contains(&0.0) && s[15] == 1.0);
        // Symmetric apart from +1: 7 values of each sign over three decades.
        for k in 0..7 {
            assert_eq!(s[k], -s[14 - k]);
        }
        assert!((s[8] - 0.0055).abs() < 1e-7, "smallest positive {}", s[8]);
        let u = Map16::unsigned().values();
        assert_eq!(u[0], 1.0 / 16.0, "no zero in the second moment's map");
        assert_eq!(u[15], 1.0);
        assert_eq!(Map16::signed().decode(Map16::signed().zero_code()), 0.0);
    }

    #[test]
    fn encoding_is_the_nearest_value() {
        let mut rng = crate::rng::Rng::new(3);
        for map in [Map16::signed(), Map16::unsigned()] {
            for _ in 0..20_000 {
                let x = (rng.uniform() * 2.2 - 1.1) as f32;
                let code = map.encode(x);
                let best = map
                    .values()
                    .iter()
                    .map(|v| (v - x).abs())
                    .fold(f32::INFINITY, f32::min);
                assert_eq!((map.decode(code) - x).abs(), best, "x = {x}");
            }
            for (k, &v) in map.values().iter().enumerate() {
                assert_eq!(map.encode(v) as usize, k);
            }
        }
    }

    #[test]
    fn packing_round_trips_odd_lengths() {
        let codes = Tensor::from_slice(&[1i64, 15, 0, 7, 9]);
        let packed = pack(&codes).unwrap();
        assert_eq!(packed.size(), [3]);
        let mut bytes = [0u8; 3];
        packed.copy_data(&mut bytes, 3);
        assert_eq!(bytes, [1 | (15 << 4), 7 << 4, 9]);
        for e in 0..5 {
            assert_eq!(nibble(&bytes, e) as i64, [1, 15, 0, 7, 9][e]);
        }
        let back = unpack(&packed, 5).unwrap();
        assert!(back.equal(&codes));
    }

    #[test]
    fn state_bytes_per_format() {
        // A 1024 × 13312 matrix: 8-bit 2.031, 4-bit 1.036, factored 0.536 bytes per element.
        let (r, c) = (1024u64, 13312u64);
        let per = |f: StateFormat| f.bytes_for(r, c) as f64 / (r * c) as f64;
        assert!((per(StateFormat::Bits8) - 2.03125).abs() < 1e-9);
        assert!((per(StateFormat::Bits4) - 1.0355).abs() < 1e-3);
        assert!((per(StateFormat::Factored) - 0.5355).abs() < 1e-3);
        for f in [
            StateFormat::Bits8,
            StateFormat::Bits4,
            StateFormat::Factored,
        ] {
            assert_eq!(StateFormat::parse(f.name()), Some(f));
            assert_eq!(
                serde_json::to_string(&f).unwrap(),
                format!("\"{}\"", f.name())
            );
        }
    }
}
