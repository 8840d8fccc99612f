//! INT8 training: weights stored as int8 with per-row scales and AdamW
//! moments stored as 8-bit blockwise codes, with no f32 master copy
//! (Dettmers et al., ICLR 2022, for the moments; torchao's int8 quantized training for
//! the weights; the TFT plugin's `precision: "int8"`).
//!
//! * [`dynamic_map`]: the signed and unsigned 256-value dynamic maps of
//!   8-bit Adam and an exact table-driven nearest-value encoder.
//! * [`weight`]: [`Int8Weight`], an `[out, in]` weight as int8 codes and
//!   per-row scales; round-to-nearest and stochastic quantization.
//! * [`blockwise_adam`]: one AdamW update of an int8 weight with 8-bit
//!   moments in blocks of 256, as a fused host pass (CPU) or tensor ops
//!   (any device), both drawing the stochastic rounding from a [`CounterRng`].
//! * [`low_bit`]: the same update with moments below 8 bits ([`StateFormat`]
//!   `4bit`: 4-bit moments, rank-1 normalized second moment; `factored`:
//!   4-bit first moment, Adafactor-factored second moment).
//! * [`optimizer`]: [`Int8AdamW`], the whole-model optimizer: quantizes the
//!   large matrices, keeps small tensors in f32 ([`FlatAdamW`]), materializes
//!   f32 weights for a step and releases them after, checkpoints exactly;
//!   its staged step ([`StagedStep`]) holds one stage's f32 weights and
//!   gradients at a time (a [`staged`](crate::staged) forward pass).
//!
//! [`CounterRng`]: crate::counter_rng::CounterRng
//! [`FlatAdamW`]: crate::flat_adamw::FlatAdamW

pub mod blockwise_adam;
pub mod dynamic_map;
pub mod low_bit;
pub mod optimizer;
pub mod weight;

pub use dynamic_map::DynamicMap;
pub use low_bit::StateFormat;
pub use optimizer::staged_step::StagedStep;
pub use optimizer::{Int8AdamW, Int8AdamWState, Int8Options, Prequantized};
pub use weight::Int8Weight;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod staged_tests;

#[cfg(test)]
mod low_bit_tests;
