//! Tests of the TFT network: shapes and interpretability outputs, causality
//! over the decoder bars, and learning a planted effect in FP32 and INT8.

mod network;
