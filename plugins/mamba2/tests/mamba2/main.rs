//! The Mamba-2 numerical core against its ground truth: the chunked SSD
//! against the sequential recurrence (outputs, states, gradients), the
//! streaming step against the chunked forward, a hand-computed case, the
//! stable segment sum, seeding and causality.

mod block;
mod common;
mod forecaster;
mod ssd;
mod stack;
