//! The selective state-space recurrence of Mamba-2 (the "SSD" layer), in
//! two exact forms:
//!
//! * [`ssd_chunked`]: the chunked algorithm (Dao & Gu 2024, `ssd_minimal`):
//!   quadratic attention-like form inside each chunk, chunk-end states,
//!   a state-passing recurrence over chunks, and the states' contribution to
//!   the outputs. Few, large kernels; the training path.
//! * [`ssd_sequential`]: the recurrence itself, one step per position,
//!   per head `h_t = exp(dt_t·A)·h_{t−1} + dt_t·x_t ⊗ B_t`,
//!   `y_t = h_t·C_t` (state `(P, N)`). The ground truth, and what the
//!   streaming `step` of the block computes one bar at a time.
//!
//! Shapes: `x (B, L, H, P)`, `dt (B, L, H)` (already through softplus,
//! positive), `a (H)` (negative), `b` and `c (B, L, G, N)` with `G` groups
//! dividing `H` (head `h` reads group `h / (H/G)`), an optional initial state
//! `(B, H, P, N)`. Both return `(y (B, L, H, P), final_state (B, H, P, N))`.
//!
//! The `D·x` skip connection is **not** applied here: the caller (the block)
//! adds it.

use tch::{Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::TchResultExt;

/// The chunked SSD. `L` need not be a multiple of `chunk`: the sequence is
/// padded at the end with `dt = 0` (so the padding neither decays the state
/// nor adds to it) and the outputs are cut back to `L`; the final state is
/// the state after position `L`.
pub fn ssd_chunked(
    x: &Tensor,
    dt: &Tensor,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    initial_state: Option<&Tensor>,
    chunk: usize,
) -> Result<(Tensor, Tensor), PluginError> {
    let dims = check_shapes(x, dt, a, b, c, initial_state)?;
    if chunk == 0 {
        return Err(PluginError::invalid_config(
            "SSD chunk size must be at least 1",
        ));
    }
    chunked(x, dt, a, b, c, initial_state, chunk as i64, dims).plugin_err("chunked SSD")
}

/// The sequential recurrence (ground truth). Same arguments and results as
/// [`ssd_chunked`].
pub fn ssd_sequential(
    x: &Tensor,
    dt: &Tensor,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    initial_state: Option<&Tensor>,
) -> Result<(Tensor, Tensor), PluginError> {
    let dims = check_shapes(x, dt, a, b, c, initial_state)?;
    sequential(x, dt, a, b, c, initial_state, dims).plugin_err("sequential SSD")
}

/// One step of the recurrence: `x (B, H, P)`, `dt (B, H)`, `a (H)`,
/// `b`, `c (B, G, N)`, `state (B, H, P, N)` → `(y (B, H, P), new state)`.
pub fn ssd_step(
    x: &Tensor,
    dt: &Tensor,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    state: &Tensor,
) -> Result<(Tensor, Tensor), PluginError> {
    step(x, dt, a, b, c, state).plugin_err("SSD step")
}

/// The stable segment sum over the last dimension `T`:
/// `out[..., i, j] = Σ_{k=j+1..i} a_k` for `i ≥ j`, `−∞` for `i < j`.
/// Computed by masking then a cumulative sum (no differences of cumulative
/// sums, which lose precision far from the diagonal).
pub fn segsum(a: &Tensor) -> Result<Tensor, PluginError> {
    segsum_inner(a).plugin_err("segment sum")
}

/// The naive segment sum `cumsum_i − cumsum_j` (masked the same way); for tests.
pub fn segsum_naive(a: &Tensor) -> Result<Tensor, PluginError> {
    (|| {
        let t = *a.size().last().unwrap_or(&0);
        let cs = a.f_cumsum(-1, None::<Kind>)?;
        let diff = cs.f_unsqueeze(-1)?.f_sub(&cs.f_unsqueeze(-2)?)?;
        diff.f_masked_fill(&upper_mask(t, 0, a)?, f64::NEG_INFINITY)
    })()
    .plugin_err("naive segment sum")
}

/// `(batch, length, heads, headdim, groups, d_state)`.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: i64,
    len: i64,
    heads: i64,
    headdim: i64,
    groups: i64,
    state: i64,
}

fn check_shapes(
    x: &Tensor,
    dt: &Tensor,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    initial_state: Option<&Tensor>,
) -> Result<Dims, PluginError> {
    let bad = |what: &str| {
        PluginError::invalid_data(format!(
            "SSD: {what} (x {:?}, dt {:?}, A {:?}, B {:?}, C {:?})",
            x.size(),
            dt.size(),
            a.size(),
            b.size(),
            c.size()
        ))
    };
    let [batch, len, heads, headdim] = x.size()[..] else {
        return Err(bad("x must be (batch, length, heads, headdim)"));
    };
    let [_, _, groups, state] = b.size()[..] else {
        return Err(bad("B must be (batch, length, groups, d_state)"));
    };
    if dt.size() != [batch, len, heads] || a.size() != [heads] {
        return Err(bad("dt must be (batch, length, heads) and A (heads)"));
    }
    if b.size() != [batch, len, groups, state] || c.size() != b.size() {
        return Err(bad("B and C must both be (batch, length, groups, d_state)"));
    }
    if groups == 0 || heads % groups != 0 {
        return Err(bad("the number of groups must divide the number of heads"));
    }
    if let Some(s) = initial_state {
        if s.size() != [batch, heads, headdim, state] {
            return Err(bad(&format!(
                "the initial state {:?} must be (batch, heads, headdim, d_state)",
                s.size()
            )));
        }
    }
    Ok(Dims {
        batch,
        len,
        heads,
        headdim,
        groups,
        state,
    })
}

/// `(..., G, N)` → `(..., H, N)`: head `h` reads group `h / (H/G)`.
fn heads_of_groups(t: &Tensor, heads: i64) -> Result<Tensor, tch::TchError> {
    let size = t.size();
    let n = size.len();
    let (groups, state) = (size[n - 2], size[n - 1]);
    if groups == heads {
        return Ok(t.shallow_clone());
    }
    let mut expanded = size[..n - 2].to_vec();
    expanded.extend([groups, heads / groups, state]);
    let mut out = size[..n - 2].to_vec();
    out.extend([heads, state]);
    t.f_unsqueeze(-2)?
        .f_expand(&expanded, false)?
        .f_reshape(&out)
}

/// Boolean `(T, T)` mask of the entries strictly above diagonal `diagonal`
/// (`j > i + diagonal`), on `like`'s device.
fn upper_mask(t: i64, diagonal: i64, like: &Tensor) -> Result<Tensor, tch::TchError> {
    Tensor::f_ones([t, t], (Kind::Bool, like.device()))?
        .f_tril(diagonal)?
        .f_logical_not()
}

fn segsum_inner(a: &Tensor) -> Result<Tensor, tch::TchError> {
    let t = *a.size().last().unwrap_or(&0);
    let mut rep = a.size();
    rep.push(t);
    // rep[..., i, j] = a_i, kept where i > j, then summed over i ≤ row.
    let x = a.f_unsqueeze(-1)?.f_expand(&rep, false)?;
    let x = x.f_masked_fill(&upper_mask(t, -1, a)?, 0.0)?;
    let s = x.f_cumsum(-2, None::<Kind>)?;
    s.f_masked_fill(&upper_mask(t, 0, a)?, f64::NEG_INFINITY)
}

#[allow(clippy::too_many_arguments)]
fn chunked(
    x: &Tensor,
    dt: &Tensor,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    initial_state: Option<&Tensor>,
    chunk: i64,
    d: Dims,
) -> Result<(Tensor, Tensor), tch::TchError> {
    let (bs, h, p, n, g) = (d.batch, d.heads, d.headdim, d.state, d.groups);
    let hg = h / g;
    let q = chunk;
    let nchunks = ((d.len + chunk - 1) / chunk).max(1);
    let padded = nchunks * chunk;
    let pad = padded - d.len;
    // Zero padding at the end of the length dimension (dim 1), only where
    // needed (padding by nothing would still copy).
    let pad_len = |t: &Tensor, dims: usize| -> Result<Tensor, tch::TchError> {
        match pad {
            0 => Ok(t.shallow_clone()),
            _ => {
                let mut spec = vec![0; 2 * (dims - 2)];
                spec.extend([0, pad]);
                t.f_constant_pad_nd(&spec)
            }
        }
    };
    let x = pad_len(x, 4)?;
    let dt = pad_len(dt, 3)?;
    // B and C stay per group, (b, c, g, l, n): a group's `C·Bᵀ` is computed
    // once and shared by its heads, never copied per head.
    let by_group = |t: &Tensor| -> Result<Tensor, tch::TchError> {
        pad_len(t, 4)?
            .f_reshape([bs, nchunks, q, g, n])?
            .f_permute([0, 1, 3, 2, 4])
    };
    let (b, c) = (by_group(b)?, by_group(c)?);

    // Inputs in chunks, x (b, c, l, h, p) and dt (b, c, l, h); A·dt and its
    // cumulative sum within each chunk (b, c, h, l). The discretised inputs
    // X = x·dt are formed only where used, each as x times one per-(position,
    // head) factor (dt with the decay that follows it), not x·dt first and
    // the decay after: one pass over x fewer each way.
    let x = x.f_reshape([bs, nchunks, q, h, p])?;
    let dt_chunks = dt.f_reshape([bs, nchunks, q, h])?;
    // x scaled by `factor (b, c, h, l)` per position and head → (b, c, l, h, p).
    let x_times = |factor: &Tensor| -> Result<Tensor, tch::TchError> {
        x.f_mul(
            &factor
                .f_transpose(2, 3)?
                .f_mul(&dt_chunks)?
                .f_unsqueeze(-1)?,
        )
    };
    let a_cum = dt
        .f_mul(a)?
        .f_reshape([bs, nchunks, q, h])?
        .f_transpose(2, 3)?
        .f_cumsum(-1, None::<Kind>)?;

    // 1. Inside each chunk: Y[l] = Σ_{s ≤ l} (C_l·B_s) exp(A_{s+1} + … + A_l) X_s.
    //    Factored through the chunk's first exponent where that stays in
    //    range (`diagonal_factored`: no per-head (l, s) decay matrix), else
    //    the decay as a difference of the chunk's cumulative sums (as the
    //    reference's fused chunk-scan kernels compute it; a chunk is short, so
    //    the difference keeps its precision), masked to s ≤ l before `exp`.
    let cb = c.f_matmul(&b.f_transpose(-1, -2)?)?; // (b, c, g, l, s)
    let last = a_cum.f_narrow(-1, q - 1, 1)?;
    // (b, c, l, g, hg, p).
    let y_diag = if factored_decay_holds(&a_cum, &last)? {
        diagonal_factored(&cb, &a_cum, &x_times, d, nchunks, q)?
    } else {
        let decay = a_cum
            .f_unsqueeze(-1)?
            .f_sub(&a_cum.f_unsqueeze(-2)?)?
            // In place on the fresh difference: neither backward needs the input.
            .f_masked_fill_(&upper_mask(q, 0, &a_cum)?, f64::NEG_INFINITY)?
            .f_exp_()?; // (b, c, h, l, s)
        let scores = decay
            .f_view([bs, nchunks, g, hg, q, q])?
            .f_mul(&cb.f_unsqueeze(3)?)?
            .f_view([bs, nchunks, h, q, q])?;
        let xd = x.f_mul(&dt_chunks.f_unsqueeze(-1)?)?; // (b, c, l, h, p)
        scores
            .f_matmul(&xd.f_permute([0, 1, 3, 2, 4])?)? // (b, c, h, l, p)
            .f_view([bs, nchunks, g, hg, q, p])?
            .f_permute([0, 1, 4, 2, 3, 5])?
    };

    // 2. Each chunk's own end state (from a zero start), per group as
    //    (b, c, g, n, hg·p): Bᵀ times the inputs decayed to the chunk's end.
    let to_end = last.f_sub(&a_cum)?.f_exp()?; // (b, c, h, l)
    let xs = x_times(&to_end)?
        .f_reshape([bs, nchunks, q, g, hg * p])?
        .f_permute([0, 1, 3, 2, 4])?;
    let states = b
        .f_transpose(-1, -2)?
        .f_matmul(&xs)?
        .f_view([bs, nchunks, g, n, hg, p])?;

    // 3. State passing over chunks, from the initial state (b, h, p, n).
    let init = match initial_state {
        Some(s) => s
            .f_view([bs, g, hg, p, n])?
            .f_permute([0, 1, 4, 2, 3])?
            .f_unsqueeze(1)?,
        None => Tensor::f_zeros([bs, 1, g, n, hg, p], (x.kind(), x.device()))?,
    };
    let states = Tensor::f_cat(&[&init, &states], 1)?;
    let chunk_totals = last
        .f_squeeze_dim(-1)?
        .f_transpose(1, 2)?
        .f_constant_pad_nd([1, 0])?; // (b, h, c + 1)
    let decay_chunk =
        segsum_inner(&chunk_totals)?
            .f_exp()?
            .f_view([bs, g, hg, nchunks + 1, nchunks + 1])?;
    let new_states = Tensor::f_einsum(
        "bgjzc,bcgnjp->bzgnjp",
        &[&decay_chunk, &states],
        None::<i64>,
    )?;
    let states = new_states.f_narrow(1, 0, nchunks)?;
    let final_state = new_states
        .f_select(1, nchunks)?
        .f_permute([0, 1, 3, 4, 2])?
        .f_reshape([bs, h, p, n])?;

    // 4. The state entering each chunk, read out by C and decayed to position l.
    let y_off = c
        .f_matmul(&states.f_reshape([bs, nchunks, g, n, hg * p])?)?
        .f_view([bs, nchunks, g, q, hg, p])?
        .f_mul(
            &a_cum
                .f_exp()?
                .f_view([bs, nchunks, g, hg, q])?
                .f_transpose(3, 4)?
                .f_unsqueeze(-1)?,
        )?
        .f_permute([0, 1, 3, 2, 4, 5])?; // (b, c, l, g, hg, p)

    let y = y_diag
        .f_add(&y_off)?
        .f_reshape([bs, padded, h, p])?
        .f_narrow(1, 0, d.len)?;
    Ok((y, final_state))
}

/// The widest span of cumulative decay exponents within one chunk for which
/// [`diagonal_factored`] runs: its factors then stay within `e^±60`, far
/// from f32's overflow (`e^88.7`, with room for the sums they scale) and
/// from subnormals (flushed to zero).
const FACTORED_SPAN: f64 = 60.0;

/// Whether every chunk's decay exponents (`a_cum`, non-increasing along the
/// chunk: `dt > 0`, `A < 0`) span less than [`FACTORED_SPAN`]. One answer for
/// the whole call, so a batch with one strongly decaying chunk takes the
/// plain form throughout (its outputs then differ from the factored form's
/// in the last bits). Never while a module is traced for export: the trace
/// would freeze the branch it saw for every later input.
fn factored_decay_holds(a_cum: &Tensor, last: &Tensor) -> Result<bool, tch::TchError> {
    if tli_plugin_kit::torchscript::is_tracing() {
        return Ok(false);
    }
    let span = a_cum
        .f_narrow(-1, 0, 1)?
        .f_sub(last)?
        .f_abs()?
        .f_max()?
        .f_double_value(&[])?;
    Ok(span < FACTORED_SPAN)
}

/// The within-chunk outputs `Y_l = Σ_{s≤l} e^{A_l − A_s} (C_l·B_s) X_s`
/// with the decay factored as `e^{A_l − A_0} · e^{A_0 − A_s}` (`A_0` the
/// chunk's first exponent, a constant to autograd; an earlier position, so
/// no output reads a later one even in rounding): the `(l, s)` matrix is
/// then `C·Bᵀ` masked, shared by every head of a group, and one product per
/// group covers all its heads, where the plain form builds, exponentiates
/// and multiplies an `(l, s)` decay matrix per head. The same sums in
/// another order, equal to rounding; [`factored_decay_holds`] keeps both
/// factors in range. → `(b, c, l, g, hg, p)`.
fn diagonal_factored(
    cb: &Tensor,
    a_cum: &Tensor,
    x_times: &dyn Fn(&Tensor) -> Result<Tensor, tch::TchError>,
    d: Dims,
    nchunks: i64,
    q: i64,
) -> Result<Tensor, tch::TchError> {
    let (bs, h, p, g) = (d.batch, d.heads, d.headdim, d.groups);
    let hg = h / g;
    // (b, c, h, 1), outside the graph: the product does not depend on it.
    let first = a_cum.f_narrow(-1, 0, 1)?.f_detach()?;
    let into = first.f_sub(a_cum)?.f_exp()?; // e^{A_0 − A_s}: (b, c, h, s)
    let out = a_cum.f_sub(&first)?.f_exp()?; // e^{A_l − A_0}: (b, c, h, l)
    let masked = cb.f_masked_fill(&upper_mask(q, 0, cb)?, 0.0)?; // (b, c, g, l, s)
                                                                 // X (b, c, s, h, p) scaled per source → (b, c, g, s, hg·p).
    let scaled = x_times(&into)?
        .f_view([bs, nchunks, q, g, hg * p])?
        .f_permute([0, 1, 3, 2, 4])?;
    masked
        .f_matmul(&scaled)? // (b, c, g, l, hg·p)
        .f_view([bs, nchunks, g, q, hg, p])?
        .f_mul(
            &out.f_view([bs, nchunks, g, hg, q])?
                .f_transpose(3, 4)?
                .f_unsqueeze(-1)?,
        )? // (b, c, g, l, hg, p)
        .f_permute([0, 1, 3, 2, 4, 5])
}

fn step(
    x: &Tensor,
    dt: &Tensor,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    state: &Tensor,
) -> Result<(Tensor, Tensor), tch::TchError> {
    let h = a.size()[0];
    let b = heads_of_groups(b, h)?.f_unsqueeze(-2)?; // (B, H, 1, N)
    let c = heads_of_groups(c, h)?.f_unsqueeze(-2)?;
    let decay = dt.f_mul(a)?.f_exp()?.f_unsqueeze(-1)?.f_unsqueeze(-1)?; // (B, H, 1, 1)
    let input = x.f_mul(&dt.f_unsqueeze(-1)?)?.f_unsqueeze(-1)?; // (B, H, P, 1)
    let state = state.f_mul(&decay)?.f_add(&input.f_mul(&b)?)?;
    let y = state
        .f_mul(&c)?
        .f_sum_dim_intlist(-1, false, None::<Kind>)?;
    Ok((y, state))
}

fn sequential(
    x: &Tensor,
    dt: &Tensor,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    initial_state: Option<&Tensor>,
    d: Dims,
) -> Result<(Tensor, Tensor), tch::TchError> {
    debug_assert!(d.groups > 0);
    let mut state = match initial_state {
        Some(s) => s.shallow_clone(),
        None => Tensor::f_zeros(
            [d.batch, d.heads, d.headdim, d.state],
            (x.kind(), x.device()),
        )?,
    };
    let mut ys = Vec::with_capacity(d.len as usize);
    for t in 0..d.len {
        let (y, next) = step(
            &x.f_select(1, t)?,
            &dt.f_select(1, t)?,
            a,
            &b.f_select(1, t)?,
            &c.f_select(1, t)?,
            &state,
        )?;
        ys.push(y);
        state = next;
    }
    let y = match ys.is_empty() {
        true => Tensor::f_zeros([d.batch, 0, d.heads, d.headdim], (x.kind(), x.device()))?,
        false => Tensor::f_stack(&ys, 1)?,
    };
    Ok((y, state))
}
