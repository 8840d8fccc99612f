//! The Mamba-2 numerical core against its ground truth: the chunked SSD
//! against the sequential recurrence (outputs, states, gradients), the
//! streaming step against the chunked forward, a hand-computed case, the
//! stable segment sum, seeding and causality; the predictor against the
//! trainer's evaluation and its streaming against its windows; validation
//! during training on its cadence, leaving training unchanged.

mod block;
mod common;
mod forecaster;
mod predictor;
mod ssd;
mod stack;
mod validation;
