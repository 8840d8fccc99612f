//! Tests of the TFT network: shapes and interpretability outputs, causality
//! over the decoder bars, learning a planted effect in FP32 and INT8, and
//! INT8 on the available device (CUDA when present).

mod device;
mod network;
