//! Timing for the plugins' bench binaries (`benches/*.rs`): not used by
//! training code.

use std::time::Instant;

/// Median seconds per call of `runs` timed runs of `f`, each about
/// `run_seconds` long; the call count is calibrated by untimed runs first
/// (growing ×4 from 10 calls until a run takes over 50 ms).
pub fn median_seconds_per_call(run_seconds: f64, runs: usize, mut f: impl FnMut()) -> f64 {
    let mut timed = |calls: usize| {
        let t0 = Instant::now();
        for _ in 0..calls {
            f();
        }
        t0.elapsed().as_secs_f64()
    };
    let mut calls = 10;
    loop {
        let secs = timed(calls);
        if secs > 0.05 {
            calls = ((calls as f64) * run_seconds / secs).ceil() as usize;
            break;
        }
        calls *= 4;
    }
    let mut per_call: Vec<f64> = (0..runs.max(1))
        .map(|_| timed(calls) / calls as f64)
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[per_call.len() / 2]
}
