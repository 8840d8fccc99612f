//! Tests of the TFT network: shapes and interpretability outputs, causality
//! over the decoder bars, learning a planted effect in FP32 and INT8, and
//! INT8 on the available device (CUDA when present), and the staged INT8
//! step equal to the one-pass step; the predictor (FP32 and INT8) against
//! the trainer's evaluation, and its streaming against its windows;
//! validation during training on its cadence, leaving training unchanged.

mod device;
mod network;
mod predictor;
mod staged;
mod validation;
