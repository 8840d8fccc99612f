//! A running task's memory, measured while it runs, not only once: the
//! runner's side of the memory arbiter's rules (docs/orchestrator.md,
//! "Memory arbiter").
//!
//! * After the first slice the task's measurement replaces its estimate (as
//!   before): the plugin's count of its tensors, and on CUDA, when the task
//!   was alone on the device, the caching allocator's peak.
//! * After that the runner measures again (the plugin's count) after a slice
//!   at most every [`REMEASURE_INTERVAL`], and reports a measurement that
//!   grew by more than a tenth ([`REPORT_GROWTH_DIVISOR`]) over the last one
//!   reported: the arbiter then raises the task's reservation to it (plus the
//!   margin), and while that takes the device over its budget nothing new
//!   starts. A smaller measurement is not reported (a reservation only grows
//!   after the first measurement), so reports stay rare.
//! * A task whose measurement exceeds its [`MemoryCap`] — with the margin it
//!   would not fit the device's budget even alone — fails at once with a
//!   message naming both figures and the plugin's estimate: it can never be
//!   admitted again on that budget, and keeping it would hold the device
//!   over budget until it ends.

use super::store::{MeasuredMemory, MemorySource};
use super::task_record::TaskRecord;
use crate::registry::TrainerHandle;
use std::time::{Duration, Instant};
use tli_core::byte_size::format_bytes;
use tli_plugin_api::{Device, MemoryBreakdown, PluginError};

/// How often a running task's memory is measured again at most.
pub const REMEASURE_INTERVAL: Duration = Duration::from_secs(1);

/// A new measurement is reported when it exceeds the last reported one by
/// more than `last / REPORT_GROWTH_DIVISOR` (10%).
pub const REPORT_GROWTH_DIVISOR: u64 = 10;

/// The most a task may measure on its device ([`Arbiter::memory_cap`]).
///
/// [`Arbiter::memory_cap`]: super::arbiter::Arbiter::memory_cap
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryCap {
    /// Above this, measurement plus margin exceeds the whole budget.
    pub max_measured: u64,
    /// The device's budget (for the message).
    pub budget: u64,
    pub device: Device,
}

/// When a runner measures its task and which measurements it reports.
#[derive(Debug, Default)]
pub struct MemoryWatch {
    last_reported: Option<u64>,
    last_measured_at: Option<Instant>,
}

impl MemoryWatch {
    /// Whether nothing was measured yet (the next slice is the first, whose
    /// allocator peak may be read).
    pub fn first(&self) -> bool {
        self.last_measured_at.is_none()
    }

    /// Whether a measurement is due after the slice that just ended.
    pub fn due(&self) -> bool {
        self.last_measured_at
            .is_none_or(|at| at.elapsed() >= REMEASURE_INTERVAL)
    }

    /// Whether `total` is worth reporting: the first measurement, or one
    /// that grew by more than a tenth over the last reported.
    pub fn worth_reporting(&self, total: u64) -> bool {
        self.last_reported
            .is_none_or(|last| total > last.saturating_add(last / REPORT_GROWTH_DIVISOR))
    }

    /// Measures the trainer (with the allocator's `peak` when the slice had
    /// the device to itself), reports it to `record` when worth it, and
    /// returns why the task must fail when it exceeds `cap`.
    pub fn measure(
        &mut self,
        trainer: &TrainerHandle,
        peak: Option<u64>,
        record: &dyn TaskRecord,
        cap: Option<MemoryCap>,
        estimate: u64,
        step: u64,
    ) -> Result<Option<String>, PluginError> {
        let memory = measured_memory(&trainer.memory()?, peak);
        self.last_measured_at = Some(Instant::now());
        let total = memory.total();
        if self.worth_reporting(total) {
            record
                .measured(&memory)
                .map_err(|e| PluginError::io(e.to_string()))?;
            self.last_reported = Some(total);
        }
        Ok(cap.and_then(|cap| over_cap(cap, total, estimate, step)))
    }
}

/// Why a task measuring `total` at `step` cannot go on under `cap`.
pub fn over_cap(cap: MemoryCap, total: u64, estimate: u64, step: u64) -> Option<String> {
    (total > cap.max_measured).then(|| {
        format!(
            "uses more memory than the {} budget can ever hold: measured {} ({total} bytes) \
             at step {step}, the most a task may use there is {} (the budget {} less the \
             margin); the plugin estimated {} — fix the plugin's estimate or its config, or \
             give the host a larger --memory-budget",
            cap.device,
            format_bytes(total),
            format_bytes(cap.max_measured),
            format_bytes(cap.budget),
            format_bytes(estimate),
        )
    })
}

/// Restarts the device's peak counters; false when it has none (CPU) or fails.
pub fn restart_peak(device: Device) -> bool {
    device
        .cuda_index()
        .is_some_and(|i| super::cuda::reset_peak(i).is_ok())
}

/// The most bytes in tensors on the device since [`restart_peak`]. With the
/// task alone on the device that is its own footprint: parameters, optimizer
/// state and the slice's activations. Otherwise the plugin's own count of
/// its tensors stands (the process-wide counters mix tasks).
pub fn device_peak(device: Device) -> Option<u64> {
    super::cuda::allocator_stats(device.cuda_index()?)
        .ok()
        .map(|s| s.allocated_peak)
}

/// The plugin's own count by component; with an allocator peak (the task
/// alone on a CUDA device) the activations are what the peak holds beyond
/// parameters, gradients and optimizer state, when that is more. The total is
/// the larger of the peak and the plugin's count.
pub fn measured_memory(counted: &MemoryBreakdown, peak: Option<u64>) -> MeasuredMemory {
    let fixed = counted.parameters + counted.gradients + counted.optimizer_state;
    let (activations, source) = match peak {
        Some(peak) => (
            peak.saturating_sub(fixed).max(counted.activations),
            MemorySource::CudaAllocator,
        ),
        None => (counted.activations, MemorySource::PluginCount),
    };
    MeasuredMemory {
        parameters: counted.parameters,
        gradients: counted.gradients,
        optimizer_state: counted.optimizer_state,
        activations,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breakdown_sums_to_the_larger_of_the_peak_and_the_plugins_count() {
        let counted = MemoryBreakdown {
            parameters: 100,
            gradients: 100,
            optimizer_state: 200,
            activations: 50,
        };
        let cpu = measured_memory(&counted, None);
        assert_eq!((cpu.total(), cpu.source), (450, MemorySource::PluginCount));
        let cuda = measured_memory(&counted, Some(1000));
        assert_eq!((cuda.activations, cuda.total()), (600, 1000));
        assert_eq!(cuda.source, MemorySource::CudaAllocator);
        // A peak below the plugin's count keeps the count (the old max rule).
        assert_eq!(measured_memory(&counted, Some(300)).total(), 450);
    }

    #[test]
    fn only_the_first_measurement_and_growth_beyond_a_tenth_are_reported() {
        let mut watch = MemoryWatch::default();
        assert!(watch.first() && watch.due());
        assert!(watch.worth_reporting(0));
        watch.last_reported = Some(1000);
        watch.last_measured_at = Some(Instant::now());
        assert!(!watch.first());
        assert!(!watch.due(), "not again within the interval");
        assert!(!watch.worth_reporting(900), "shrinking is not reported");
        assert!(!watch.worth_reporting(1100), "a tenth is within the rule");
        assert!(watch.worth_reporting(1101));
    }

    #[test]
    fn a_measurement_above_the_cap_names_every_figure() {
        let cap = MemoryCap {
            max_measured: 930,
            budget: 1023,
            device: Device::Cpu,
        };
        assert_eq!(over_cap(cap, 930, 10, 5), None);
        let why = over_cap(cap, 2048, 10, 5).expect("over");
        for part in [
            "cpu budget",
            "2.0 KiB (2048 bytes)",
            "step 5",
            "930 B",
            "1023 B",
        ] {
            assert!(why.contains(part), "{part:?} missing from {why}");
        }
        assert!(why.contains("estimated 10 B"), "{why}");
    }
}
