//! The TFT's parameter tensors and memory, computed from its shape alone
//! (no model is built: a seed-size TFT has ~175 M parameters), for
//! `estimate_memory` and the INT8/FP32 comparison.
//!
//! [`tensor_shapes`] lists every parameter tensor's shape in the order the
//! model names them (a test checks it against a built model). From it
//! [`breakdown`] counts, per precision, the bytes of weights, gradients and
//! optimizer state the kit's optimizers hold (FP32: f32 weights, f32 AdamW
//! moments; INT8: int8 codes + one f32 scale per row and the moments in the
//! config's `optimizer_state` format — 8-bit codes + one f32 maximum per
//! 256-element block, or below 8 bits, see the kit's `StateFormat` — for
//! matrices of at least `int8_min_elements`, f32 for the rest). Gradients exist only during a
//! step: f32 for every parameter, and with INT8 also the dequantized f32
//! weights; with `step_memory: "staged"` only the largest stage's weight
//! copies and gradients (plus the small f32 tensors' gradients), from
//! [`stage_shapes`]. Activations: bytes per window, bar and hidden unit,
//! one-pass or staged (`ACTIVATION_*` below, fitted to measured peaks), for
//! a training batch or an evaluation batch, whichever is larger.

use crate::config::{Precision, StepMemory, TftConfig};
use crate::model::TftShape;

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

/// A variable selection network: the selector's input projection (its
/// `fc1` weight and bias), the rest of the selector, then one GRN per
/// variable (a stage each).
fn selection(count: i64, d: i64, context: Option<i64>, stages: &mut Vec<Vec<Vec<i64>>>) {
    let mut selector = block(|out| grn(count * d, d, count, context, out));
    let rest = selector.split_off(2);
    stages.push(selector);
    stages.push(rest);
    for _ in 0..count {
        stages.push(block(|out| grn(d, d, d, None, out)));
    }
}

/// The shapes one builder pushes.
fn block(build: impl FnOnce(&mut Vec<Vec<i64>>)) -> Vec<Vec<i64>> {
    let mut out = Vec::new();
    build(&mut out);
    out
}

fn lstm(d: i64, layers: usize, out: &mut Vec<Vec<i64>>) {
    for _ in 0..layers {
        out.extend([vec![4 * d, d], vec![4 * d, d], vec![4 * d], vec![4 * d]]);
    }
}

/// Every parameter tensor's shape by stage of the model's forward pass
/// (`Tft::forward_graph`), in the model's naming order: each tensor once,
/// with the block that owns it (the input transforms, which the selection
/// networks' stages also enter, as blocks of their own).
pub fn stage_shapes(s: &TftShape) -> Vec<Vec<Vec<i64>>> {
    let d = s.hidden as i64;
    let (past, future) = (s.past_inputs() as i64, s.future_inputs() as i64);
    let (past_vars, future_vars, static_vars) = (
        s.past_variables() as i64,
        s.future_variables() as i64,
        s.static_variables() as i64,
    );
    let mut stages = Vec::new();
    let mut embeddings = vec![vec![s.assets as i64, d]];
    if s.static_reals > 0 {
        let reals = vec![s.static_reals as i64, d];
        embeddings.extend([reals.clone(), reals]);
    }
    stages.push(embeddings);
    stages.push(vec![vec![past, d], vec![past, d]]);
    stages.push(vec![vec![future, d], vec![future, d]]);
    selection(static_vars, d, None, &mut stages);
    selection(past_vars, d, Some(d), &mut stages);
    selection(future_vars, d, Some(d), &mut stages);
    for _ in 0..4 {
        stages.push(block(|out| grn(d, d, d, None, out)));
    }
    stages.push(block(|out| lstm(d, s.lstm_layers, out)));
    stages.push(block(|out| lstm(d, s.lstm_layers, out)));
    stages.push(block(|out| gate_add_norm(d, d, out)));
    stages.push(block(|out| grn(d, d, d, Some(d), out)));
    let dk = d / s.heads as i64;
    stages.push(vec![
        vec![d, d],
        vec![d],
        vec![d, d],
        vec![d],
        vec![dk, d],
        vec![dk],
        vec![d, dk],
        vec![d],
    ]);
    stages.push(block(|out| gate_add_norm(d, d, out)));
    stages.push(block(|out| grn(d, d, d, None, out)));
    stages.push(block(|out| {
        gate_add_norm(d, d, out);
        out.extend([vec![s.outputs as i64, d], vec![s.outputs as i64]]);
    }));
    stages
}

/// Every parameter tensor's shape, in the model's naming order.
pub fn tensor_shapes(s: &TftShape) -> Vec<Vec<i64>> {
    stage_shapes(s).concat()
}

pub fn parameter_count(s: &TftShape) -> u64 {
    tensor_shapes(s)
        .iter()
        .map(|t| t.iter().product::<i64>() as u64)
        .sum()
}

/// Bytes per (batch window × bar × hidden unit) of the activations at a
/// step's peak, for each input of a selection network and for the rest of
/// the network: `(per input, rest)`.
///
/// Fitted to `tli profile memory` on daily ES (22 selection inputs, 37 bars;
/// peak RSS over the baseline less weights, gradients and state;
/// docs/benchmarks.md, "TFT and INT8 training"). One-pass steps (FP32 and INT8 "full"):
/// 650 bytes at hidden 64 with batch 64 and 512 (measured 101.6 and 775.5
/// MiB: within 4%), fewer at hidden 256–1024 where the gradients outlive
/// the activations (measured 345 MiB at hidden 256 × batch 64: the
/// estimate is 9% over). Staged steps keep each block's outputs but no
/// autograd graph: 329–411 bytes measured from hidden 64 to 1024, batch 8
/// to 512.
const ACTIVATION_ONE_PASS: (u64, u64) = (25, 100);
const ACTIVATION_STAGED: (u64, u64) = (15, 30);

/// The same for an evaluation batch (no graph; the blocks' outputs of one
/// batch of `eval_batch_size` windows live until its forecasts are read):
/// `tli train local` (one step, then evaluation) at hidden 256 × 37 bars
/// peaked 419 MiB (FP32) and 400 MiB (staged INT8) higher with
/// `eval_batch_size` 256 than with 8: 187 bytes per window, bar and unit.
const ACTIVATION_EVALUATION: (u64, u64) = (8, 10);

/// Weights, gradients (transient), optimizer state and activations, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub activations: u64,
}

/// The f32 transient of a staged INT8 step: the largest stage's weight
/// copies and gradients, and the gradients of every f32 tensor (kept until
/// the dense update at the end of the sweep). A selection network's stages
/// also enter its input transform (`VariableSelection::forward_reals_graph`),
/// counted here beside every stage.
fn staged_transient(config: &TftConfig, s: &TftShape) -> u64 {
    let quantized = |shape: &Vec<i64>| {
        let n = shape.iter().product::<i64>() as u64;
        (shape.len() == 2 && n >= config.int8_min_elements as u64).then_some(n)
    };
    let d = s.hidden as i64;
    let transform = [s.past_inputs(), s.future_inputs()]
        .iter()
        .filter_map(|&n| quantized(&vec![n as i64, d]))
        .max()
        .unwrap_or(0);
    let largest_stage = stage_shapes(s)
        .iter()
        .map(|stage| stage.iter().filter_map(quantized).sum::<u64>())
        .max()
        .unwrap_or(0)
        + 2 * transform;
    let dense: u64 = tensor_shapes(s)
        .iter()
        .filter(|shape| quantized(shape).is_none())
        .map(|shape| shape.iter().product::<i64>() as u64)
        .sum();
    8 * largest_stage + 4 * dense
}

/// Activation bytes of one window at `(per input, rest)` bytes per bar and hidden unit.
fn per_window(config: &TftConfig, s: &TftShape, (per_input, rest): (u64, u64)) -> u64 {
    let bars = (config.lookback + config.horizons) as u64;
    let inputs = (s.past_inputs() + s.future_inputs()) as u64;
    let attention = 4 * (s.heads * config.horizons) as u64 * bars;
    bars * s.hidden as u64 * (per_input * inputs + rest) + 3 * attention
}

/// Activation bytes of a forward pass without autograd over `windows` windows.
pub fn evaluation_bytes(config: &TftConfig, s: &TftShape, windows: u64) -> u64 {
    windows * per_window(config, s, ACTIVATION_EVALUATION)
}

/// Windows per evaluation forward pass. One-pass precisions use
/// `eval_batch_size`. A staged INT8 pass dequantizes every block once
/// whatever its size, so it takes as many windows as fit in the memory a
/// training step holds and evaluation does not: the transient's gradient
/// half (a stage's f32 weights stay) and the training batch's activations —
/// never fewer than `eval_batch_size`, and the task's peak stays within
/// its estimate.
pub fn evaluation_windows(config: &TftConfig, s: &TftShape) -> usize {
    let staged = config.step_memory == StepMemory::Staged && config.precision == Precision::Int8;
    if !staged {
        return config.eval_batch_size;
    }
    let b = breakdown(config, s);
    let per_window = per_window(config, s, ACTIVATION_EVALUATION).max(1);
    let fit = (b.gradients / 2 + b.activations) / per_window;
    (fit.min(1 << 16) as usize).max(config.eval_batch_size)
}

/// Bytes of the f32 copies of the INT8 matrices a forward pass uses (0 in FP32).
pub fn dequantized_bytes(config: &TftConfig, s: &TftShape) -> u64 {
    if config.precision != Precision::Int8 {
        return 0;
    }
    tensor_shapes(s)
        .iter()
        .filter(|shape| shape.len() == 2)
        .map(|shape| shape.iter().product::<i64>() as u64)
        .filter(|&n| n >= config.int8_min_elements as u64)
        .map(|n| 4 * n)
        .sum()
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
            optimizer_state += config
                .optimizer_state
                .bytes_for(shape[0] as u64, shape[1] as u64);
            gradients += 4 * n; // the dequantized f32 weight of a step
        } else {
            parameters += 4 * n;
            optimizer_state += 8 * n;
        }
    }
    let staged = config.step_memory == StepMemory::Staged && config.precision == Precision::Int8;
    if staged {
        gradients = staged_transient(config, s);
    }
    let step = if staged {
        ACTIVATION_STAGED
    } else {
        ACTIVATION_ONE_PASS
    };
    let training = config.batch_size as u64 * per_window(config, s, step);
    let evaluation = evaluation_bytes(config, s, config.eval_batch_size as u64);
    let activations = training.max(evaluation);
    Bytes {
        parameters,
        gradients,
        optimizer_state,
        activations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tli_plugin_kit::int8::StateFormat;

    /// The seed's size on daily bars: hidden 1024, 6 observed + 7 known inputs.
    fn seed_size(config: &TftConfig) -> TftShape {
        TftShape {
            hidden: config.hidden_size,
            heads: config.attention_heads,
            lstm_layers: config.lstm_layers,
            dropout: config.dropout,
            observed: 6,
            known: 7,
            static_reals: 0,
            assets: 1,
            horizons: config.horizons,
            outputs: config.quantiles.len(),
            groups: Default::default(),
        }
    }

    fn config(precision: Precision, state: StateFormat) -> TftConfig {
        TftConfig {
            precision,
            optimizer_state: state,
            hidden_size: 1024,
            lookback: 16,
            batch_size: 4,
            eval_batch_size: 4,
            step_memory: if precision == Precision::Int8 {
                StepMemory::Staged
            } else {
                StepMemory::Full
            },
            ..TftConfig::default()
        }
    }

    #[test]
    fn sub_8_bit_state_takes_parameters_and_state_below_a_seventh_of_fp32() {
        let fp32 = config(Precision::Fp32, StateFormat::Bits8);
        let s = seed_size(&fp32);
        assert!((175e6..179e6).contains(&(parameter_count(&s) as f64)));
        let held = |c: &TftConfig| {
            let b = breakdown(c, &s);
            (b.parameters + b.optimizer_state) as f64
        };
        let base = held(&fp32);
        let ratio = |state| held(&config(Precision::Int8, state)) / base;
        let (r8, r4, rf) = (
            ratio(StateFormat::Bits8),
            ratio(StateFormat::Bits4),
            ratio(StateFormat::Factored),
        );
        assert!((0.25..0.26).contains(&r8), "8bit {r8}");
        assert!((0.17..0.175).contains(&r4), "4bit {r4}");
        assert!(rf < 0.15, "factored {rf}");
    }

    #[test]
    fn a_staged_evaluation_pass_takes_what_a_training_step_frees() {
        let c = config(Precision::Int8, StateFormat::Factored);
        let s = seed_size(&c);
        let windows = evaluation_windows(&c, &s);
        assert!(
            windows > 4 * c.eval_batch_size,
            "{windows} windows per pass"
        );
        // A pass's activations and one stage's f32 weights stay within the estimate.
        let b = breakdown(&c, &s);
        let pass = evaluation_bytes(&c, &s, windows as u64) + b.gradients / 2;
        assert!(pass <= b.gradients + b.activations, "{pass} > {b:?}");
        // One-pass precisions keep eval_batch_size.
        let fp32 = config(Precision::Fp32, StateFormat::Bits8);
        assert_eq!(evaluation_windows(&fp32, &s), fp32.eval_batch_size);
    }
}
