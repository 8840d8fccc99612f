//! `tli-plugin-tft`: the Temporal Fusion Transformer forecaster (issue 13),
//! quantile forecasts of returns 1..H bars ahead from observed-past,
//! known-future and static inputs, with FP32 or INT8 weights and optimizer
//! state (the kit's [`int8`](tli_plugin_kit::int8)).
//!
//! * [`config`]: the plugin's config keys (`precision: "fp32" | "int8"`,
//!   sizes, horizons, quantiles, optimisation), checks and JSON Schema.
//! * [`vsn`]: per-input transforms and the variable selection network.
//! * [`model`]: the network — static covariate encoders, LSTM
//!   encoder–decoder, static enrichment, interpretable multi-head attention,
//!   gated skip connections, quantile head — returning forecasts with the
//!   selection and attention weights.
//!
//! Built from the kit's blocks ([`tli_plugin_kit::nn`]); parameters are
//! plain leaf tensors from the kit's seeded RNG under stable names.

pub mod config;
pub mod model;
pub mod vsn;

pub use model::{Tft, TftBatch, TftOutput, TftShape};
