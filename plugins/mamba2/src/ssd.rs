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
    let (bs, h, p, n) = (d.batch, d.heads, d.headdim, d.state);
    let nchunks = ((d.len + chunk - 1) / chunk).max(1);
    let padded = nchunks * chunk;
    let pad = padded - d.len;
    // Zero padding at the end of the length dimension (dim 1).
    let x = x.f_constant_pad_nd([0, 0, 0, 0, 0, pad])?;
    let dt = dt.f_constant_pad_nd([0, 0, 0, pad])?;
    let b = heads_of_groups(&b.f_constant_pad_nd([0, 0, 0, 0, 0, pad])?, h)?;
    let c = heads_of_groups(&c.f_constant_pad_nd([0, 0, 0, 0, 0, pad])?, h)?;

    // Discretised inputs, in chunks: X (b, c, l, h, p), A (b, h, c, l),
    // B and C (b, c, l, h, n).
    let xd = x.f_mul(&dt.f_unsqueeze(-1)?)?;
    let xd = xd.f_reshape([bs, nchunks, chunk, h, p])?;
    let ad = dt.f_mul(a)?;
    let ad = ad
        .f_reshape([bs, nchunks, chunk, h])?
        .f_permute([0, 3, 1, 2])?;
    let b = b.f_reshape([bs, nchunks, chunk, h, n])?;
    let c = c.f_reshape([bs, nchunks, chunk, h, n])?;
    let a_cum = ad.f_cumsum(-1, None::<Kind>)?;

    // 1. Inside each chunk: Y[l] = Σ_{s ≤ l} (C_l·B_s) exp(A_{s+1} + … + A_l) X_s.
    let decay = segsum_inner(&ad)?.f_exp()?;
    let y_diag = Tensor::f_einsum(
        "bclhn,bcshn,bhcls,bcshp->bclhp",
        &[&c, &b, &decay, &xd],
        None::<i64>,
    )?;

    // 2. Each chunk's own end state (from a zero start).
    let last = a_cum.f_narrow(-1, chunk - 1, 1)?;
    let decay_states = last.f_sub(&a_cum)?.f_exp()?;
    let states = Tensor::f_einsum(
        "bclhn,bhcl,bclhp->bchpn",
        &[&b, &decay_states, &xd],
        None::<i64>,
    )?;

    // 3. State passing over chunks, from the initial state.
    let init = match initial_state {
        Some(s) => s.f_unsqueeze(1)?,
        None => Tensor::f_zeros([bs, 1, h, p, n], (x.kind(), x.device()))?,
    };
    let states = Tensor::f_cat(&[&init, &states], 1)?;
    let chunk_totals = last.f_squeeze_dim(-1)?.f_constant_pad_nd([1, 0])?;
    let decay_chunk = segsum_inner(&chunk_totals)?.f_exp()?;
    let new_states = Tensor::f_einsum("bhzc,bchpn->bzhpn", &[&decay_chunk, &states], None::<i64>)?;
    let states = new_states.f_narrow(1, 0, nchunks)?;
    let final_state = new_states.f_select(1, nchunks)?;

    // 4. The state entering each chunk, read out by C and decayed to position l.
    let state_decay = a_cum.f_exp()?;
    let y_off = Tensor::f_einsum(
        "bclhn,bchpn,bhcl->bclhp",
        &[&c, &states, &state_decay],
        None::<i64>,
    )?;

    let y = y_diag
        .f_add(&y_off)?
        .f_reshape([bs, padded, h, p])?
        .f_narrow(1, 0, d.len)?;
    Ok((y, final_state))
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
