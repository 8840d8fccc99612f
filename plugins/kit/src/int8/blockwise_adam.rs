//! One AdamW update of an INT8 weight whose moments are 8-bit blockwise
//! state (Dettmers et al., 8-bit Optimizers via Block-wise Quantization, ICLR 2022), in two interchangeable
//! implementations:
//!
//! * [`update_host`]: a fused pass in Rust over the tensors' host memory
//!   (CPU), parallel over blocks and then over rows. Per element it reads
//!   the gradient, the weight code and the two moment codes once and writes
//!   them once — memory-bound, no temporaries beyond the gradient it
//!   overwrites.
//! * [`update_tensors`]: the same arithmetic as libtorch tensor ops, for
//!   any device (CUDA), with whole-tensor temporaries.
//!
//! The state of a tensor of `N` elements is `⌈N / 256⌉` blocks of 256
//! consecutive elements (row-major; the last block may be short): a code
//! per element and moment (signed [`DynamicMap`] for `m`, unsigned for
//! `v`) and an f32 absolute maximum per block and moment. One update:
//!
//! ```text
//! g = grad · grad_scale                        (global-norm clipping)
//! m = decode(m) ;  m ← m + (1 − β1)(g − m)     (torch.lerp's formula)
//! v = decode(v) ;  v ← v + (1 − β2)(g² − v)
//! w = q · s_row
//! w ← w − lr · (m / b1 / (√v / √b2 + ε) + λ·w)   (λ = 0 for undecayed tensors)
//! absmax_block = max |m|, max v ;  codes = nearest(m / absmax), nearest(v / absmax)
//! s_row = max_row |w| / 127 ;  q = clamp(⌊w / s_row + u⌋, ±127)   (u from the CounterRng)
//! ```
//!
//! `b1 = 1 − β1ᵗ`, `b2 = 1 − β2ᵗ`. Both implementations draw `u` for
//! element `j` as value `counter + j` of the plugin's [`CounterRng`], so
//! they agree up to floating-point rounding differences of libtorch's
//! vectorised kernels (a tie in an encoding can then land on the other code).

use super::dynamic_map::DynamicMap;
use super::weight::{Int8Weight, MAX_CODE};
use crate::counter_rng::CounterRng;
use crate::errors::TchResultExt;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

/// Elements per block of 8-bit state (bitsandbytes' default since 2024).
pub const BLOCK: usize = 256;

/// Blocks of state for a tensor of `numel` elements.
pub fn blocks_for(numel: usize) -> usize {
    numel.div_ceil(BLOCK)
}

/// The scalars of one update (f32, as libtorch computes with them on f32 tensors).
#[derive(Clone, Copy, Debug)]
pub struct UpdateScalars {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub lr: f32,
    /// The decoupled weight decay for this tensor (0 when it is not decayed).
    pub weight_decay: f32,
    /// `1 − β1ᵗ`.
    pub bias1: f32,
    /// `√(1 − β2ᵗ)`.
    pub sqrt_bias2: f32,
    /// The clipping coefficient applied to the gradient (1: none).
    pub grad_scale: f32,
}

/// One tensor's 8-bit moments, as host slices (for [`update_host`]).
pub struct HostState<'a> {
    pub m_codes: &'a mut [u8],
    pub v_codes: &'a mut [u8],
    pub m_absmax: &'a mut [f32],
    pub v_absmax: &'a mut [f32],
}

/// One tensor's 8-bit moments as tensors (views into the flat buffers), for
/// [`update_tensors`]: codes `[N]` (`Uint8`), absmax `[⌈N/256⌉]` (f32).
pub struct TensorState<'a> {
    pub m_codes: &'a Tensor,
    pub v_codes: &'a Tensor,
    pub m_absmax: &'a Tensor,
    pub v_absmax: &'a Tensor,
}

/// The fused host update. `grad` holds the weight's gradient (row-major,
/// `codes.len()` elements) and is overwritten with the updated weight as its
/// new codes give it back (`code · scale`, what a dequantization gives);
/// `codes`/`scales` are the weight (`cols` columns per row) and receive
/// its stochastic re-quantization; the draw advances `rng` by `N`.
#[allow(clippy::too_many_arguments)]
pub fn update_host(
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
    let blocks = blocks_for(n);
    if codes.len() != n
        || rows * cols != n
        || state.m_codes.len() != n
        || state.v_codes.len() != n
        || state.m_absmax.len() != blocks
        || state.v_absmax.len() != blocks
    {
        return Err(PluginError::other(format!(
            "int8 update: inconsistent sizes (gradient {n}, codes {}, {rows}×{cols} weight, \
             moment codes {}/{}, absmax {}/{} for {blocks} blocks)",
            codes.len(),
            state.m_codes.len(),
            state.v_codes.len(),
            state.m_absmax.len(),
            state.v_absmax.len()
        )));
    }
    let threads = threads.max(1);
    if cols > 0 && cols.is_multiple_of(BLOCK) {
        update_whole_rows(grad, codes, scales, cols, state, s, rng, threads);
    } else {
        update_two_phases(grad, codes, scales, cols, state, s, rng, threads);
    }
    Ok(())
}

/// Phase 1 over blocks (moments, f32 weights), then phase 2 over rows
/// (re-quantization): for rows that are not whole blocks.
#[allow(clippy::too_many_arguments)]
fn update_two_phases(
    grad: &mut [f32],
    codes: &mut [i8],
    scales: &mut [f32],
    cols: usize,
    state: HostState<'_>,
    s: &UpdateScalars,
    rng: &mut CounterRng,
    threads: usize,
) {
    let n = grad.len();
    let blocks = blocks_for(n);
    if threads == 1 {
        // No threads to start (their start and join cost more than a small tensor's update).
        let range = BlockRange {
            first: 0,
            grad: &mut *grad,
            codes: &*codes,
            scales: &*scales,
            cols,
            state,
        };
        update_blocks(range, s);
        requantize_rows(grad, codes, scales, cols, rng, 0);
        rng.skip(n as u64);
        return;
    }
    // Phase 1, parallel over blocks: moments and the f32 weight update.
    let blocks_per_thread = blocks.div_ceil(threads).max(1);
    let chunk = blocks_per_thread * BLOCK;
    let scales_ro: &[f32] = scales;
    std::thread::scope(|scope| {
        let parts = grad
            .chunks_mut(chunk)
            .zip(codes.chunks(chunk))
            .zip(state.m_codes.chunks_mut(chunk))
            .zip(state.v_codes.chunks_mut(chunk))
            .zip(state.m_absmax.chunks_mut(blocks_per_thread))
            .zip(state.v_absmax.chunks_mut(blocks_per_thread))
            .enumerate();
        for (t, (((((g, q), mc), vc), ma), va)) in parts {
            let state = HostState {
                m_codes: mc,
                v_codes: vc,
                m_absmax: ma,
                v_absmax: va,
            };
            let range = BlockRange {
                first: t * chunk,
                grad: g,
                codes: q,
                scales: scales_ro,
                cols,
                state,
            };
            scope.spawn(move || update_blocks(range, s));
        }
    });
    // Phase 2, parallel over rows: new scales, stochastic rounding.
    requantize_parallel(grad, codes, scales, cols, rng, threads);
}

/// Rows of whole blocks in one sweep: each group of rows gets its moments
/// and f32 update, then is re-quantized while it is still in cache (the
/// two-phase path reads every updated weight back from memory). Parallel
/// over rows; the same bits as the two phases (the draws are numbered by
/// element, not by order).
#[allow(clippy::too_many_arguments)]
fn update_whole_rows(
    grad: &mut [f32],
    codes: &mut [i8],
    scales: &mut [f32],
    cols: usize,
    state: HostState<'_>,
    s: &UpdateScalars,
    rng: &mut CounterRng,
    threads: usize,
) {
    /// Elements per group: 64 KiB of f32 weights, within a core's L2.
    const GROUP: usize = 16 * 1024;
    let n = grad.len();
    let rows = scales.len();
    let rows_per_thread = rows.div_ceil(threads).max(1);
    let rows_per_group = (GROUP / cols).clamp(1, rows_per_thread);
    let blocks_per_row = cols / BLOCK;
    let rng_ro: &CounterRng = rng;
    // One thread's rows, group by group.
    let run =
        |first_row: usize, g: &mut [f32], q: &mut [i8], sc: &mut [f32], state: HostState<'_>| {
            let HostState {
                m_codes,
                v_codes,
                m_absmax,
                v_absmax,
            } = state;
            let step = rows_per_group * cols;
            let groups = g
                .chunks_mut(step)
                .zip(q.chunks_mut(step))
                .zip(sc.chunks_mut(rows_per_group))
                .zip(m_codes.chunks_mut(step))
                .zip(v_codes.chunks_mut(step))
                .zip(m_absmax.chunks_mut(rows_per_group * blocks_per_row))
                .zip(v_absmax.chunks_mut(rows_per_group * blocks_per_row));
            for (k, ((((((g, q), sc), mc), vc), ma), va)) in groups.enumerate() {
                let first = (first_row + k * rows_per_group) * cols;
                let range = BlockRange {
                    first: 0,
                    grad: &mut *g,
                    codes: &*q,
                    scales: &*sc,
                    cols,
                    state: HostState {
                        m_codes: mc,
                        v_codes: vc,
                        m_absmax: ma,
                        v_absmax: va,
                    },
                };
                update_blocks(range, s);
                requantize_rows(g, q, sc, cols, rng_ro, first as u64);
            }
        };
    if threads == 1 {
        run(0, grad, codes, scales, state);
    } else {
        let step = rows_per_thread * cols;
        let blocks = rows_per_thread * blocks_per_row;
        std::thread::scope(|scope| {
            let parts = grad
                .chunks_mut(step)
                .zip(codes.chunks_mut(step))
                .zip(scales.chunks_mut(rows_per_thread))
                .zip(state.m_codes.chunks_mut(step))
                .zip(state.v_codes.chunks_mut(step))
                .zip(state.m_absmax.chunks_mut(blocks))
                .zip(state.v_absmax.chunks_mut(blocks))
                .enumerate();
            for (t, ((((((g, q), sc), mc), vc), ma), va)) in parts {
                let state = HostState {
                    m_codes: mc,
                    v_codes: vc,
                    m_absmax: ma,
                    v_absmax: va,
                };
                let run = &run;
                scope.spawn(move || run(t * rows_per_thread, g, q, sc, state));
            }
        });
    }
    rng.skip(n as u64);
}

/// The stochastic re-quantization of updated f32 weights (`weights`,
/// row-major, `cols` per row) into `codes` and `scales`, parallel over rows
/// (none for one thread); element `j` draws value `counter + j` of `rng`,
/// which then moves past all of them. Each weight is then overwritten with
/// its dequantized code (`code · scale`), so the buffer can serve as the
/// next forward pass's f32 copy without another pass over the codes.
pub(super) fn requantize_parallel(
    weights: &mut [f32],
    codes: &mut [i8],
    scales: &mut [f32],
    cols: usize,
    rng: &mut CounterRng,
    threads: usize,
) {
    let n = weights.len();
    let rows = scales.len();
    if threads <= 1 {
        requantize_rows(weights, codes, scales, cols, rng, 0);
    } else {
        let rows_per_thread = rows.div_ceil(threads).max(1);
        let rng_ro: &CounterRng = rng;
        std::thread::scope(|scope| {
            let parts = weights
                .chunks_mut(rows_per_thread * cols)
                .zip(codes.chunks_mut(rows_per_thread * cols))
                .zip(scales.chunks_mut(rows_per_thread))
                .enumerate();
            for (t, ((w, q), sc)) in parts {
                let first = (t * rows_per_thread * cols) as u64;
                scope.spawn(move || requantize_rows(w, q, sc, cols, rng_ro, first));
            }
        });
    }
    rng.skip(n as u64);
}

/// One thread's share of phase 1: whole blocks from element `first` on
/// (the gradient, weight codes and moments of those elements; every row's scale).
struct BlockRange<'a> {
    first: usize,
    grad: &'a mut [f32],
    codes: &'a [i8],
    scales: &'a [f32],
    cols: usize,
    state: HostState<'a>,
}

/// Phase 1 on one thread's blocks: the AVX2 + FMA build of
/// [`update_blocks_body`] where the CPU has them (checked at run time: the
/// crate itself targets baseline x86-64), else the baseline build. Both give
/// the same bits (no fused multiply-adds are formed; `sqrt`, `/` and `floor`
/// are exact in either).
fn update_blocks(range: BlockRange<'_>, s: &UpdateScalars) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512 F/DQ/VL, AVX2 and FMA (checked just above).
        return unsafe { update_blocks_avx512(range, s) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { update_blocks_avx2(range, s) };
    }
    update_blocks_body(range, s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn update_blocks_avx512(range: BlockRange<'_>, s: &UpdateScalars) {
    update_blocks_with::<true>(range, s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn update_blocks_avx2(range: BlockRange<'_>, s: &UpdateScalars) {
    update_blocks_with::<true>(range, s)
}

/// Whether this CPU runs the AVX2 + FMA builds of the host kernels.
#[cfg(target_arch = "x86_64")]
pub(super) fn has_avx2_fma() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    })
}

#[inline(always)]
fn update_blocks_body(range: BlockRange<'_>, s: &UpdateScalars) {
    update_blocks_with::<false>(range, s)
}

/// Phase 1 with the moments decoded and encoded by AVX2 gathers
/// (`GATHER`; only in a build with AVX2 enabled) or one element at a time.
#[inline(always)]
fn update_blocks_with<const GATHER: bool>(range: BlockRange<'_>, s: &UpdateScalars) {
    let BlockRange {
        first,
        grad,
        codes,
        scales,
        cols,
        state:
            HostState {
                m_codes,
                v_codes,
                m_absmax,
                v_absmax,
            },
    } = range;
    let (smap, umap) = (DynamicMap::signed(), DynamicMap::unsigned());
    let (svals, uvals) = (smap.values(), umap.values());
    // Per-block scratch; simple loops over it vectorise.
    let mut m = [0f32; BLOCK];
    let mut v = [0f32; BLOCK];
    let (w1, w2) = (1.0 - s.beta1, 1.0 - s.beta2);
    for (b, start) in (0..grad.len()).step_by(BLOCK).enumerate() {
        let end = (start + BLOCK).min(grad.len());
        let len = end - start;
        let (g, m, v) = (&mut grad[start..end], &mut m[..len], &mut v[..len]);
        let (mc, vc) = (&mut m_codes[start..end], &mut v_codes[start..end]);
        // Decode and advance the moments.
        let (old_m, old_v) = (m_absmax[b], v_absmax[b]);
        if GATHER && cfg!(target_arch = "x86_64") {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `GATHER` is set only by the builds with AVX2 enabled;
            // `m` and `v` are as long as the codes.
            unsafe {
                smap.decode_scaled_avx2(mc, old_m, m);
                umap.decode_scaled_avx2(vc, old_v, v);
            }
        } else {
            for k in 0..len {
                m[k] = svals[mc[k] as usize] * old_m;
                v[k] = uvals[vc[k] as usize] * old_v;
            }
        }
        for k in 0..len {
            let gk = g[k] * s.grad_scale;
            m[k] += w1 * (gk - m[k]);
            v[k] += w2 * (gk * gk - v[k]);
        }
        let (new_m, new_v) = (abs_max(m), abs_max(v));
        m_absmax[b] = new_m;
        v_absmax[b] = new_v;
        // The f32 weight update, one row segment at a time (one scale each).
        let mut k = 0;
        while k < len {
            let row = (first + start + k) / cols;
            let seg_end = ((row + 1) * cols - first - start).min(len);
            let scale = scales[row];
            for i in k..seg_end {
                let w = codes[start + i] as f32 * scale;
                let denom = v[i].sqrt() / s.sqrt_bias2 + s.eps;
                g[i] = w - s.lr * (m[i] / s.bias1 / denom + s.weight_decay * w);
            }
            k = seg_end;
        }
        // Encode the new moments relative to their block maxima.
        let (dm, dv) = (nonzero_or_one(new_m), nonzero_or_one(new_v));
        for k in 0..len {
            m[k] /= dm;
            v[k] /= dv;
        }
        if GATHER && cfg!(target_arch = "x86_64") {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as for the decoding above.
            unsafe {
                smap.encode_all_avx2(m, mc);
                umap.encode_all_avx2(v, vc);
            }
        } else {
            for k in 0..len {
                mc[k] = smap.encode(m[k]);
                vc[k] = umap.encode(v[k]);
            }
        }
    }
}

/// `max |x|` (0 for an empty slice), in eight lanes so that it vectorises.
#[inline(always)]
pub(super) fn abs_max(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l = l.max(v.abs());
        }
    }
    let tail = chunks.remainder().iter().fold(0f32, |a, v| a.max(v.abs()));
    lanes.iter().fold(tail, |a, &l| a.max(l))
}

/// `x`, or 1 where `x` is 0 (a block or row of zeros divides by 1).
#[inline(always)]
pub(super) fn nonzero_or_one(x: f32) -> f32 {
    if x > 0.0 {
        x
    } else {
        1.0
    }
}

/// Phase 2 on one thread's rows (AVX2 + FMA build where the CPU has them,
/// as [`update_blocks`]).
fn requantize_rows(
    weights: &mut [f32],
    codes: &mut [i8],
    scales: &mut [f32],
    cols: usize,
    rng: &CounterRng,
    first: u64,
) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512 F/DQ/VL, AVX2 and FMA (checked just above).
        return unsafe { requantize_rows_avx512(weights, codes, scales, cols, rng, first) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { requantize_rows_avx2(weights, codes, scales, cols, rng, first) };
    }
    requantize_rows_body(weights, codes, scales, cols, rng, first)
}

/// The AVX-512 build: the counter RNG's 64-bit multiplications are single
/// instructions there (`vpmullq`), not three 32-bit ones. Same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn requantize_rows_avx512(
    weights: &mut [f32],
    codes: &mut [i8],
    scales: &mut [f32],
    cols: usize,
    rng: &CounterRng,
    first: u64,
) {
    requantize_rows_body(weights, codes, scales, cols, rng, first)
}

/// Whether this CPU runs the AVX-512 build of the re-quantization.
#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        has_avx2_fma()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn requantize_rows_avx2(
    weights: &mut [f32],
    codes: &mut [i8],
    scales: &mut [f32],
    cols: usize,
    rng: &CounterRng,
    first: u64,
) {
    requantize_rows_body(weights, codes, scales, cols, rng, first)
}

#[inline(always)]
fn requantize_rows_body(
    weights: &mut [f32],
    codes: &mut [i8],
    scales: &mut [f32],
    cols: usize,
    rng: &CounterRng,
    first: u64,
) {
    let max_code = MAX_CODE as f32;
    for (r, (w, q)) in weights
        .chunks_mut(cols)
        .zip(codes.chunks_mut(cols))
        .enumerate()
    {
        let scale = abs_max(w) / max_code;
        scales[r] = scale;
        let divisor = nonzero_or_one(scale);
        let row_first = first + (r * cols) as u64;
        for (k, (wk, qk)) in w.iter_mut().zip(q.iter_mut()).enumerate() {
            let u = rng.uniform_at(row_first + k as u64);
            // `max`/`min` (not `clamp`) return the number when one side is NaN, so
            // `y` is always within ±127 and converts without a saturating cast's
            // per-lane fix-ups: the loop stays vectorised (about 40% less time).
            let y = (*wk / divisor + u).floor().max(-max_code).min(max_code);
            // SAFETY: `y` is finite and within ±127, so it fits an i32 exactly.
            let code = unsafe { y.to_int_unchecked::<i32>() } as i8;
            *qk = code;
            // The weight as the next forward pass reads it: `code · scale`, the
            // bits `Int8Weight::dequantize` gives (one f32 product each).
            *wk = code as f32 * scale;
        }
    }
}

/// Lookup tensors of a signed and an unsigned map on one device (values,
/// and midpoints for `searchsorted`), built once per optimizer: the 8-bit
/// maps ([`new`](Self::new)) or the 4-bit ones
/// ([`low_bit::device_maps`](super::low_bit::device_maps)).
pub struct DeviceMaps {
    pub(super) signed: Tensor,
    pub(super) signed_mid: Tensor,
    pub(super) unsigned: Tensor,
    pub(super) unsigned_mid: Tensor,
}

impl DeviceMaps {
    /// The 8-bit dynamic maps.
    pub fn new(device: Device) -> Result<Self, PluginError> {
        let (s, u) = (DynamicMap::signed(), DynamicMap::unsigned());
        Self::of(
            device,
            [s.values(), s.midpoints(), u.values(), u.midpoints()],
            "copying the 8-bit maps to the device",
        )
    }

    /// `[signed values, signed midpoints, unsigned values, unsigned midpoints]`.
    pub(super) fn of(
        device: Device,
        tables: [&[f32]; 4],
        what: &'static str,
    ) -> Result<Self, PluginError> {
        let on = |v: &[f32]| {
            Tensor::f_from_slice(v)
                .and_then(|t| t.f_to_device(device))
                .plugin_err(what)
        };
        let [s, s_mid, u, u_mid] = tables;
        Ok(Self {
            signed: on(s)?,
            signed_mid: on(s_mid)?,
            unsigned: on(u)?,
            unsigned_mid: on(u_mid)?,
        })
    }
}

/// The same update as [`update_host`] with tensor ops (any device).
/// `grad` is the weight's gradient (same shape as the weight); `weight` is
/// replaced by its stochastic re-quantization.
pub fn update_tensors(
    grad: &Tensor,
    weight: &mut Int8Weight,
    state: TensorState<'_>,
    maps: &DeviceMaps,
    s: &UpdateScalars,
    rng: &mut CounterRng,
) -> Result<(), PluginError> {
    let n = weight.numel();
    let blocks = blocks_for(n as usize) as i64;
    let pad = blocks * BLOCK as i64 - n;
    let updated = tch::no_grad(|| -> Result<Tensor, tch::TchError> {
        // Flat [n] → [blocks, 256], the tail padded with zeros.
        let blocked = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            t.f_reshape([n])?
                .f_constant_pad_nd([0, pad].as_slice())?
                .f_reshape([blocks, BLOCK as i64])
        };
        // Decoded moments, blocked (padding decodes to 0, so it never sets an absmax).
        let decode = |codes: &Tensor, map: &Tensor, absmax: &Tensor| {
            let values = map.f_index_select(0, &codes.f_to_kind(Kind::Int64)?)?;
            let per_element = absmax
                .f_unsqueeze(1)?
                .f_expand([blocks, BLOCK as i64], false)?
                .f_reshape([-1])?
                .f_narrow(0, 0, n)?;
            blocked(&values.f_mul(&per_element)?)
        };
        let g = blocked(&grad.f_mul_scalar(s.grad_scale as f64)?)?;
        let mut m = decode(state.m_codes, &maps.signed, state.m_absmax)?;
        let mut v = decode(state.v_codes, &maps.unsigned, state.v_absmax)?;
        let _ = m.f_lerp_(&g, (1.0 - s.beta1) as f64)?;
        let _ = v.f_lerp_(&g.f_square()?, (1.0 - s.beta2) as f64)?;
        let new_m = m.f_abs()?.f_amax([1i64].as_slice(), false)?;
        let new_v = v.f_amax([1i64].as_slice(), false)?;
        let encode = |x: &Tensor, absmax: &Tensor, mid: &Tensor| -> Result<Tensor, tch::TchError> {
            let safe = absmax.f_where_scalarother(&absmax.f_gt(0.0)?, 1.0)?;
            let ratio = x.f_div(&safe.f_unsqueeze(1)?)?.f_reshape([-1])?;
            ratio
                .f_searchsorted(mid, false, false, "left", None::<Tensor>)?
                .f_narrow(0, 0, n)?
                .f_to_kind(Kind::Uint8)
        };
        let m_codes = encode(&m, &new_m, &maps.signed_mid)?;
        let v_codes = encode(&v, &new_v, &maps.unsigned_mid)?;
        state.m_codes.shallow_clone().f_copy_(&m_codes)?;
        state.v_codes.shallow_clone().f_copy_(&v_codes)?;
        state.m_absmax.shallow_clone().f_copy_(&new_m)?;
        state.v_absmax.shallow_clone().f_copy_(&new_v)?;
        let flat = |t: Tensor| t.f_reshape([-1])?.f_narrow(0, 0, n);
        let (m, v) = (flat(m)?, flat(v)?);
        let w = weight
            .codes
            .f_to_kind(Kind::Float)?
            .f_mul(&weight.scales.f_unsqueeze(1)?)?
            .f_reshape([n])?;
        let denom = v
            .f_sqrt()?
            .f_div_scalar(s.sqrt_bias2 as f64)?
            .f_add_scalar(s.eps as f64)?;
        let step = m
            .f_div_scalar(s.bias1 as f64)?
            .f_div(&denom)?
            .f_add(&w.f_mul_scalar(s.weight_decay as f64)?)?;
        w.f_sub(&step.f_mul_scalar(s.lr as f64)?)?
            .f_reshape(weight.shape().as_slice())
    })
    .plugin_err("8-bit Adam update")?;
    *weight = Int8Weight::quantize_stochastic(&updated, rng)?;
    Ok(())
}

#[cfg(test)]
mod sweeps {
    use super::*;

    /// A weight's codes, scales, gradient and 8-bit moments, random.
    pub(super) struct RandomState {
        pub grad: Vec<f32>,
        pub codes: Vec<i8>,
        pub scales: Vec<f32>,
        pub m_codes: Vec<u8>,
        pub v_codes: Vec<u8>,
        pub m_absmax: Vec<f32>,
        pub v_absmax: Vec<f32>,
    }

    impl RandomState {
        pub fn new(rows: usize, cols: usize, seed: u64) -> Self {
            let n = rows * cols;
            let mut rng = crate::rng::Rng::new(seed);
            let mut uniform = |scale: f32| (rng.uniform() as f32 - 0.5) * scale;
            let grad = (0..n).map(|_| uniform(0.02)).collect();
            let codes = (0..n).map(|_| uniform(250.0) as i8).collect();
            let scales = (0..rows).map(|_| 1e-3 + uniform(1e-3).abs()).collect();
            let m_codes = (0..n).map(|_| uniform(500.0).abs() as u8).collect();
            let v_codes = (0..n).map(|_| uniform(500.0).abs() as u8).collect();
            let blocks = blocks_for(n);
            let m_absmax = (0..blocks).map(|_| uniform(1e-2).abs()).collect();
            let v_absmax = (0..blocks).map(|_| uniform(1e-4).abs()).collect();
            RandomState {
                grad,
                codes,
                scales,
                m_codes,
                v_codes,
                m_absmax,
                v_absmax,
            }
        }

        /// The scalars of an update a few steps in, clipped.
        pub fn scalars() -> UpdateScalars {
            UpdateScalars {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                lr: 1e-3,
                weight_decay: 0.01,
                bias1: 0.271,
                sqrt_bias2: 0.0545,
                grad_scale: 0.8,
            }
        }
    }

    /// Rows of whole blocks updated in one sweep give the bits of the two
    /// phases (weights written back, codes, scales, moments), for any
    /// number of threads and a last group or thread share that is short.
    #[test]
    fn one_sweep_over_whole_rows_gives_the_bits_of_two_phases() {
        let (rows, cols) = (37usize, 2 * BLOCK);
        let RandomState {
            grad,
            codes,
            scales,
            m_codes,
            v_codes,
            m_absmax,
            v_absmax,
        } = RandomState::new(rows, cols, 4);
        let s = RandomState::scalars();
        type Out = (
            Vec<u32>,
            Vec<i8>,
            Vec<u32>,
            Vec<u8>,
            Vec<u8>,
            Vec<u32>,
            Vec<u32>,
            u64,
        );
        let run = |one_sweep: bool, threads: usize| -> Out {
            let (mut g, mut q, mut sc) = (grad.clone(), codes.clone(), scales.clone());
            let (mut mc, mut vc) = (m_codes.clone(), v_codes.clone());
            let (mut ma, mut va) = (m_absmax.clone(), v_absmax.clone());
            let state = HostState {
                m_codes: &mut mc,
                v_codes: &mut vc,
                m_absmax: &mut ma,
                v_absmax: &mut va,
            };
            let mut counter = CounterRng::new(23);
            if one_sweep {
                update_whole_rows(
                    &mut g,
                    &mut q,
                    &mut sc,
                    cols,
                    state,
                    &s,
                    &mut counter,
                    threads,
                );
            } else {
                update_two_phases(
                    &mut g,
                    &mut q,
                    &mut sc,
                    cols,
                    state,
                    &s,
                    &mut counter,
                    threads,
                );
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
            (
                bits(&g),
                q,
                bits(&sc),
                mc,
                vc,
                bits(&ma),
                bits(&va),
                counter.state().counter,
            )
        };
        let reference = run(false, 1);
        assert!(reference.1 != codes, "the update changed no code");
        for threads in [1, 2, 3] {
            assert!(
                run(true, threads) == reference,
                "{threads} thread(s): the bits differ"
            );
            assert!(
                run(false, threads) == reference,
                "{threads} thread(s), two phases"
            );
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod builds {
    use super::sweeps::RandomState;
    use super::*;

    /// The baseline, AVX2 (gathers) and AVX-512 builds of the moments'
    /// update give the same bits (each where this CPU runs it), short last
    /// block, zero block and NaN gradient included.
    #[test]
    fn every_build_of_the_moment_update_gives_the_same_bits() {
        let (rows, cols) = (5usize, 203usize);
        let RandomState {
            mut grad,
            codes,
            scales,
            m_codes,
            v_codes,
            mut m_absmax,
            v_absmax,
        } = RandomState::new(rows, cols, 9);
        grad[BLOCK..2 * BLOCK].fill(0.0);
        grad[7] = f32::NAN;
        grad[9] = 1e-30;
        m_absmax[1] = 0.0;
        let s = RandomState::scalars();
        let run = |build: u8| {
            let mut g = grad.clone();
            let (mut mc, mut vc) = (m_codes.clone(), v_codes.clone());
            let (mut ma, mut va) = (m_absmax.clone(), v_absmax.clone());
            let range = BlockRange {
                first: 0,
                grad: &mut g,
                codes: &codes,
                scales: &scales,
                cols,
                state: HostState {
                    m_codes: &mut mc,
                    v_codes: &mut vc,
                    m_absmax: &mut ma,
                    v_absmax: &mut va,
                },
            };
            match build {
                // SAFETY: called below only where the CPU has AVX2 and FMA.
                1 => unsafe { update_blocks_avx2(range, &s) },
                // SAFETY: called below only where the CPU has AVX-512 F/DQ/VL.
                2 => unsafe { update_blocks_avx512(range, &s) },
                _ => update_blocks_body(range, &s),
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
            (bits(&g), mc, vc, bits(&ma), bits(&va))
        };
        let baseline = run(0);
        assert!(baseline.1 != m_codes && baseline.2 != v_codes);
        if has_avx2_fma() {
            assert!(run(1) == baseline, "the AVX2 build differs");
        }
        if has_avx512() {
            assert!(run(2) == baseline, "the AVX-512 build differs");
        }
    }

    /// The baseline, AVX2 and AVX-512 builds of the re-quantization give
    /// the same codes and scales (each where this CPU runs it).
    #[test]
    fn every_build_of_the_re_quantization_gives_the_same_bits() {
        let (rows, cols) = (7usize, 300usize);
        let mut rng = crate::rng::Rng::new(8);
        let mut weights: Vec<f32> = (0..rows * cols)
            .map(|_| (rng.uniform() as f32 - 0.5) * 0.2)
            .collect();
        weights[5] = 0.0;
        weights[cols..2 * cols].fill(0.0); // a row of zeros divides by 1
        let counter = CounterRng::new(17);
        let run = |build: u8| {
            let (mut codes, mut scales) = (vec![0i8; rows * cols], vec![0f32; rows]);
            let mut written = weights.clone();
            let (w, q, sc) = (&mut written[..], &mut codes[..], &mut scales[..]);
            match build {
                // SAFETY: called below only where the CPU has AVX2 and FMA.
                1 => unsafe { requantize_rows_avx2(w, q, sc, cols, &counter, 11) },
                // SAFETY: called below only where the CPU has AVX-512 F/DQ/VL.
                2 => unsafe { requantize_rows_avx512(w, q, sc, cols, &counter, 11) },
                _ => requantize_rows_body(w, q, sc, cols, &counter, 11),
            }
            let bits: Vec<u32> = scales.iter().map(|s| s.to_bits()).collect();
            // The weights are overwritten with their dequantized codes.
            for (k, (&w, &q)) in written.iter().zip(&codes).enumerate() {
                assert_eq!(
                    w.to_bits(),
                    (q as f32 * scales[k / cols]).to_bits(),
                    "element {k}"
                );
            }
            let written: Vec<u32> = written.iter().map(|w| w.to_bits()).collect();
            (codes, bits, written)
        };
        let baseline = run(0);
        assert!(baseline.0.iter().any(|&c| c != 0));
        if has_avx2_fma() {
            assert!(run(1) == baseline, "the AVX2 build differs");
        }
        if has_avx512() {
            assert!(run(2) == baseline, "the AVX-512 build differs");
        }
    }
}
