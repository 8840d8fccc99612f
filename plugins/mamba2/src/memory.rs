//! The memory model: bytes of the tensors one training step keeps alive for
//! its backward pass, from the config alone (`estimate_memory` has no
//! trainer). It follows the forward pass tensor by tensor, per token (batch
//! × padded lookback) and layer; the chunked SSD adds its within-chunk
//! matrices (`H × chunk` per token) and its chunk states (`H·P·N` per
//! chunk). The backward pass holds the gradients of about a third of a
//! layer's activations on top.
//!
//! Two weights (2 `H × chunk` matrices per token — the in-chunk decays and
//! the scores; `C·Bᵀ` is per group — and a third of a layer for the backward
//! pass) were fitted to the CPU heap peaks of `benches/activation_memory.rs`
//! over ten configs. The model follows the SSD's plain form, which builds
//! those per-head matrices: the factored form (most batches) does not, but
//! which form runs depends on the data, so the estimate covers the larger.
//! Measured now: 1–20 % over the plain form's peaks, 10–46 % over the
//! factored form's (docs/benchmarks.md, "Mamba-2"); `scripts/gpu-check.sh`
//! compares with the CUDA allocator's peak.

use crate::config::ForecasterConfig;

const F32: u64 = 4;

/// Tokens of one step's windows and the chunk the SSD uses on them.
fn tokens_and_chunk(config: &ForecasterConfig, windows: u64) -> (u64, u64) {
    let length = config.lookback as u64;
    let chunk = (config.chunk_size as u64).min(length).max(1);
    let padded = length.div_ceil(chunk) * chunk;
    (windows * padded, chunk)
}

/// Floats saved per token by one Mamba-2 layer at chunk size `chunk`.
fn layer_floats_per_token(config: &ForecasterConfig, chunk: u64) -> u64 {
    let (per_tensor, within_chunk_heads) = layer_terms(config, chunk);
    // Two per head: the in-chunk decays and the scores (decays × C·Bᵀ).
    per_tensor + within_chunk_heads * 2
}

/// `(the per-token tensors of a layer but the within-chunk matrices, H × chunk)`.
fn layer_terms(config: &ForecasterConfig, chunk: u64) -> (u64, u64) {
    let c = config.block();
    let (d, di, h) = (c.d_model as u64, c.d_inner() as u64, c.nheads() as u64);
    let (g, n, p) = (c.ngroups as u64, c.d_state as u64, c.headdim as u64);
    let conv_dim = c.conv_dim() as u64;
    let norm_and_residual = 4 * d;
    let in_proj = 2 * di + 2 * g * n + h;
    let conv = 3 * conv_dim;
    let dt = 4 * h;
    let ssd_inputs = di + 2 * g * n;
    let group_scores = g * chunk;
    let chunk_states = (3 * h * p * n).div_ceil(chunk);
    let ssd_outputs = 3 * di;
    let gate_norm = 4 * di;
    let per_tensor = norm_and_residual
        + in_proj
        + conv
        + dt
        + ssd_inputs
        + group_scores
        + chunk_states
        + ssd_outputs
        + gate_norm;
    (per_tensor, h * chunk)
}

/// Activation bytes of one training step over inputs of `width` features.
pub fn step_activation_bytes(config: &ForecasterConfig, width: u64) -> u64 {
    let (tokens, chunk) = tokens_and_chunk(config, config.batch_size as u64);
    let layer = layer_floats_per_token(config, chunk);
    // Every layer, plus a third of one for the gradients in flight.
    let layers_thirds = 3 * config.layers as u64 + 1;
    let input = width + 2 * config.d_model as u64;
    let head =
        (config.loss_positions * config.horizons * (config.outputs_per_horizon() + 2)) as u64;
    F32 * (tokens * (layers_thirds * layer / 3 + input) + config.batch_size as u64 * head)
}

/// Activation bytes of one evaluation batch (no graph: the largest layer's
/// tensors at once).
pub fn eval_activation_bytes(config: &ForecasterConfig, width: u64) -> u64 {
    let (tokens, chunk) = tokens_and_chunk(config, config.eval_batch_size as u64);
    F32 * tokens * (layer_floats_per_token(config, chunk) + width + 2 * config.d_model as u64)
}

/// The larger of a training step's and an evaluation batch's activations.
pub fn activation_bytes(config: &ForecasterConfig, width: u64) -> u64 {
    step_activation_bytes(config, width).max(eval_activation_bytes(config, width))
}
