//! `tli-plugin-kit`: what tli model plugins share, so each plugin holds only
//! its model and training loop.
//!
//! * [`errors`]: `tch` errors → [`PluginError`](tli_plugin_api::PluginError), out-of-memory recognised.
//! * [`device`]: `cpu` / `cuda:N` strings → `tch::Device`, with availability checks.
//! * [`rng`]: a small deterministic RNG whose state fits in a checkpoint
//!   (libtorch's global generator is shared by every plugin in the process);
//!   the `tli-rng` crate, re-exported.
//! * [`mlp`]: a multi-layer perceptron with seeded initialisation.
//! * [`adam`]: Adam/AdamW with explicit per-tensor state tensors, so a resumed
//!   run is bit-identical to an uninterrupted one (the reference for [`flat_adamw`]).
//! * [`flat_params`]: a model's parameters as views into one flat buffer;
//!   flat gradients from one backward pass.
//! * [`flat_adamw`]: fused AdamW over flat parameters (a fixed handful of
//!   kernels per update whatever the number of tensors), exact checkpoints.
//! * [`grad_clip`]: global-norm gradient clipping on a flat gradient.
//! * [`checkpoint`]: named tensors (safetensors) + a JSON state file.
//! * [`weights`]: a model's weights alone (plugin API 1.2): exported from a
//!   checkpoint, read by predictors.
//! * [`config`]: JSON config layered over defaults, normalized JSON, and the
//!   keys a checkpoint's config differs in.
//! * [`data`]: dataset rows → tensors.
//! * [`env`]: CartPole-v1 and a futures trading environment, vectorized, checkpointable.
//! * [`epochs`]: seeded shuffled epochs over training examples, resumable
//!   from a `(epoch, position)` cursor.
//! * [`metrics`]: Sharpe, Sortino, drawdown, turnover, hit rate; baselines.
//! * [`forecast_loss`]: the masked MSE / pinball training loss.
//! * [`forecast_metrics`]: MSE, skill over the zero forecast, hit rate,
//!   correlation, pinball loss, q-risk, interval coverage, per-horizon MSE.
//! * [`forecast_report`]: a split's forecasts → the metrics every
//!   forecasting plugin reports (point, per horizon, per quantile, coverage,
//!   per asset).
//! * [`rl`]: what the RL plugins share: one environment wrapper over CartPole
//!   and trading, greedy CartPole evaluation, a greedy walk over a trading split.
//! * [`nn`]: building blocks for the forecasting plugins: layer norm,
//!   embedding, LSTM, GLU, gated residual network, multi-head attention
//!   (causal; standard or the TFT's interpretable variant).
//! * [`schedule`]: learning-rate warm-up and constant or cosine schedules.
//! * [`staged`]: a forward pass written as stages, run directly or staged
//!   (weights usable one stage at a time, gradients stage by stage).
//! * [`task_rows`]: a sequence model's task data on the device: every
//!   asset's rows, feature roles, multi-horizon targets (cumulative or per
//!   bar), window ends per split.
//! * [`windows`]: sliding windows over rows and multi-horizon targets that
//!   never span a gap, a roll or a split boundary; windows are tensor views.
//! * [`int8`]: INT8 weights with per-row scales and 8-bit blockwise AdamW
//!   state, no f32 master copy (the TFT's `precision: "int8"`).
//! * [`counter_rng`]: a seeded counter-based RNG that draws on the device
//!   (dropout masks, stochastic rounding); its state is `(seed, counter)`.
//! * [`validation`]: when a trainer validates during training (the
//!   `valid_*` step metrics' contract).

pub mod adam;
#[doc(hidden)]
pub mod bench_timing;
pub mod checkpoint;
pub mod config;
pub mod counter_rng;
pub mod data;
pub mod device;
pub mod env;
pub mod epochs;
pub mod errors;
pub mod flat_adamw;
pub mod flat_params;
pub mod forecast_loss;
pub mod forecast_metrics;
pub mod forecast_report;
pub mod grad_clip;
pub mod headline;
pub mod host_slice;
pub mod int8;
pub mod metrics;
pub mod mlp;
pub mod mlp_mirror;
pub mod nn;
pub mod rl;
pub mod schedule;
pub mod staged;
pub mod task_rows;
pub mod torchscript;
pub mod trade_report;
pub mod validation;
pub mod weights;
pub mod windows;
pub use tli_rng as rng;

pub use errors::TchResultExt;

/// Bytes held by a tensor's data (`numel × element size`).
pub fn tensor_bytes(t: &tch::Tensor) -> u64 {
    (t.numel() * t.kind().elt_size_in_bytes()) as u64
}
