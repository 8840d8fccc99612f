//! The TFT's parameter tensors and memory, computed from its shape alone
//! (no model is built: a seed-size TFT has ~175 M parameters), for
//! `estimate_memory` and the INT8/FP32 comparison.
//!
//! [`tensor_shapes`] lists every parameter tensor's shape in the order the
//! model names them (a test checks it against a built model). From it
//! [`breakdown`] counts, per precision, the bytes of weights, gradients and
//! optimizer state the kit's optimizers hold (FP32: f32 weights, f32 AdamW
//! moments; INT8: int8 codes + one f32 scale per row and 8-bit moments + one
//! f32 maximum per 256-element block for matrices of at least
//! `int8_min_elements`, f32 for the rest). Gradients exist only during a
//! step: f32 for every parameter, and with INT8 also the dequantized f32
//! weights. Activations: the larger of a per-token model and one f32 copy
//! of the parameters (`ACTIVATION_*` below, fitted to measured peaks).

use crate::config::{Precision, TftConfig};
use crate::model::TftShape;
use tli_plugin_kit::int8::blockwise_adam::blocks_for;

/// The parameter shapes of a GRN (`input → hidden → output`, optional context).
fn grn(input: i64, hidden: i64, output: i64, context: Option<i64>, out: &mut Vec<Vec<i64>>) {
    out.push(vec![hidden, input]);
    out.push(vec![hidden]);
    if let Some(c) = context {
        out.push(vec![hidden, c]);
    }
    out.push(vec![hidden, hidden]);
    out.push(vec![hidden]);
    if input != output {
        out.push(vec![output, input]);
        out.push(vec![output]);
    }
    gate_add_norm(hidden, output, out);
}

fn gate_add_norm(input: i64, output: i64, out: &mut Vec<Vec<i64>>) {
    out.push(vec![2 * output, input]);
    out.push(vec![2 * output]);
    out.push(vec![output]);
    out.push(vec![output]);
}

fn selection(count: i64, d: i64, context: Option<i64>, out: &mut Vec<Vec<i64>>) {
    grn(count * d, d, count, context, out);
    for _ in 0..count {
        grn(d, d, d, None, out);
    }
}

fn lstm(d: i64, layers: usize, out: &mut Vec<Vec<i64>>) {
    for _ in 0..layers {
        out.extend([vec![4 * d, d], vec![4 * d, d], vec![4 * d], vec![4 * d]]);
    }
}

/// Every parameter tensor's shape, in the model's naming order.
pub fn tensor_shapes(s: &TftShape) -> Vec<Vec<i64>> {
    let d = s.hidden as i64;
    let (past, future, statics) = (
        s.past_inputs() as i64,
        s.future_inputs() as i64,
        s.static_inputs() as i64,
    );
    let mut out = vec![vec![s.assets as i64, d]];
    if s.static_reals > 0 {
        let reals = vec![s.static_reals as i64, d];
        out.extend([reals.clone(), reals]);
    }
    out.extend([
        vec![past, d],
        vec![past, d],
        vec![future, d],
        vec![future, d],
    ]);
    selection(statics, d, None, &mut out);
    selection(past, d, Some(d), &mut out);
    selection(future, d, Some(d), &mut out);
    for _ in 0..4 {
        grn(d, d, d, None, &mut out);
    }
    lstm(d, s.lstm_layers, &mut out);
    lstm(d, s.lstm_layers, &mut out);
    gate_add_norm(d, d, &mut out);
    grn(d, d, d, Some(d), &mut out);
    let dk = d / s.heads as i64;
    out.extend([
        vec![d, d],
        vec![d],
        vec![d, d],
        vec![d],
        vec![dk, d],
        vec![dk],
        vec![d, dk],
        vec![d],
    ]);
    gate_add_norm(d, d, &mut out);
    grn(d, d, d, None, &mut out);
    gate_add_norm(d, d, &mut out);
    out.extend([vec![s.outputs as i64, d], vec![s.outputs as i64]]);
    out
}

pub fn parameter_count(s: &TftShape) -> u64 {
    tensor_shapes(s)
        .iter()
        .map(|t| t.iter().product::<i64>() as u64)
        .sum()
}

/// Bytes per (batch window × bar × hidden unit) of the saved activations,
/// for each input of a selection network and for the rest of the network.
///
/// Fitted to `tli profile memory` (peak RSS over the baseline less weights,
/// gradients and state; docs/benchmarks.md, issue 13): hidden 32 and 64 with
/// batch 64–512 give 0.63× the first model's 48 and 240 bytes. From hidden
/// 512 up, with small batches, the measured peak instead holds about one more
/// f32 copy of the parameters beyond the gradients, whatever the batch, so
/// the estimate is the larger of the two (within 11% of the measurement at
/// hidden 32/64/512/1024, batch 8–512).
const ACTIVATION_PER_INPUT: u64 = 30;
const ACTIVATION_REST: u64 = 150;

/// Weights, gradients (transient), optimizer state and activations, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub activations: u64,
}

pub fn breakdown(config: &TftConfig, s: &TftShape) -> Bytes {
    let (mut parameters, mut gradients, mut optimizer_state) = (0u64, 0u64, 0u64);
    for shape in tensor_shapes(s) {
        let n = shape.iter().product::<i64>() as u64;
        gradients += 4 * n;
        let quantized = config.precision == Precision::Int8
            && shape.len() == 2
            && n >= config.int8_min_elements as u64;
        if quantized {
            parameters += n + 4 * shape[0] as u64;
            optimizer_state += 2 * n + 8 * blocks_for(n as usize) as u64;
            gradients += 4 * n; // the dequantized f32 weight of a step
        } else {
            parameters += 4 * n;
            optimizer_state += 8 * n;
        }
    }
    let bars = (config.lookback + config.horizons) as u64;
    let per_bar =
        ACTIVATION_PER_INPUT * (s.past_inputs() + s.future_inputs()) as u64 + ACTIVATION_REST;
    let attention = 4 * (s.heads * config.horizons) as u64 * bars;
    let batch_term = config.batch_size as u64 * (bars * s.hidden as u64 * per_bar + 3 * attention);
    let activations = batch_term.max(4 * parameter_count(s));
    Bytes {
        parameters,
        gradients,
        optimizer_state,
        activations,
    }
}
