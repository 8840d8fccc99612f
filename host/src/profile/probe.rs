//! The child side of `tli profile memory`: one config, measured in this
//! process (see the module above for what is measured and why in a child).
//!
//! Steps: tune the allocator so that resident memory follows live memory
//! ([`tune_allocator`]); validate the config and ask the plugin's estimate;
//! optionally build and step a warm-up trainer and drop it (libtorch's first
//! step touches code pages and creates thread pools, which are not the
//! trainer's memory); hand freed memory back to the kernel; take the
//! baseline and reset the kernel's peak; build the measured trainer, run the
//! steps, and read the trainer's tensor count, the peak resident memory and
//! (on CUDA) the caching allocator's peak.

use super::{CudaPeak, MemoryProfile, ProcessMemory};
use crate::local_train::MemoryBytes;
use crate::orchestrator::cuda;
use crate::registry::{LoadedPlugin, TrainerHandle};
use crate::services::TaskServices;
use abi_stable::std_types::RArc;
use std::time::Instant;
use thiserror::Error;
use tli_plugin_api::{Dataset, DatasetAnnex, Device, PluginError, TaskInputs, TaskSpec};

/// One measurement to make.
pub struct ProbeRequest<'a> {
    pub label: &'a str,
    /// Config JSON as given (validated here); `None`: the plugin's default.
    pub config: Option<&'a str>,
    pub steps: u64,
    pub seed: u64,
    pub device: Device,
    pub warmup: bool,
}

#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("{what}")]
    Plugin {
        what: &'static str,
        source: PluginError,
    },
    #[error("the trainer made no progress when asked for a step (after {done} steps)")]
    NoProgress { done: u64 },
    #[error("reading this process's memory from /proc/self/status: {0}")]
    ProcStatus(String),
    #[error("reading the CUDA allocator")]
    Cuda(#[from] cuda::CudaError),
    #[error("the validated config is not JSON")]
    Config(#[from] serde_json::Error),
}

fn plugin_err(what: &'static str) -> impl FnOnce(PluginError) -> ProbeError {
    move |source| ProbeError::Plugin { what, source }
}

/// Measures one config of `plugin` on `dataset`.
pub fn measure(
    plugin: &LoadedPlugin,
    request: &ProbeRequest<'_>,
    dataset: &RArc<Dataset>,
    annex: &DatasetAnnex,
) -> Result<MemoryProfile, ProbeError> {
    tune_allocator();
    let config_text = request
        .config
        .map(str::to_string)
        .unwrap_or_else(|| plugin.manifest.default_config.to_string());
    let config = plugin
        .validate_config(&config_text)
        .map_err(plugin_err("invalid config"))?;
    let device = request.device.to_string();
    let estimate: MemoryBytes = plugin
        .estimate_memory(&config, dataset.shape(), &device)
        .map_err(plugin_err("estimate_memory"))?
        .into();
    let create = |task_id: &str| {
        let spec = TaskSpec {
            task_id: task_id.into(),
            config_json: config.as_str().into(),
            device: device.as_str().into(),
            seed: request.seed,
            max_steps: request.steps,
            dataset: dataset.clone(),
        };
        let inputs = TaskInputs::new(vec![(dataset.clone(), annex.clone())], false, 1);
        plugin
            .create_trainer_with_inputs(spec, inputs, TaskServices::new(plugin.name(), task_id))
            .map_err(plugin_err("create_trainer"))
    };
    if request.warmup {
        eprintln!("{}: warm-up step (not measured)", request.label);
        let mut warm = create("profile-warmup")?;
        let _ = step_once(&mut warm, 0)?;
    }
    crate::allocator::trim_now();

    let cuda_index = match request.device {
        Device::Cuda(i) => Some(i as usize),
        Device::Cpu => None,
    };
    let cuda_baseline = match cuda_index {
        Some(i) => {
            cuda::empty_cache()?;
            cuda::reset_peak(i)?;
            Some(cuda::allocator_stats(i)?.allocated)
        }
        None => None,
    };
    let baseline = read_status()?.rss;
    let peak_reset = reset_peak_rss();

    let mut trainer = create("profile")?;
    let peak_after_build = read_status()?.peak.max(baseline) - baseline;
    let started = Instant::now();
    let mut fractions = Vec::new();
    for done in 0..request.steps {
        let t = Instant::now();
        let report = step_once(&mut trainer, done)?;
        // What the plugin says it holds (e.g. the share of parameters in int8).
        fractions = report
            .metrics
            .iter()
            .filter(|m| m.name.as_str().ends_with("_fraction") && m.value.is_finite())
            .map(|m| (m.name.to_string(), m.value))
            .collect();
        eprintln!(
            "{}: step {}/{} ({:.2} s)",
            request.label,
            done + 1,
            request.steps,
            t.elapsed().as_secs_f64()
        );
    }
    let seconds_per_step = started.elapsed().as_secs_f64() / request.steps as f64;
    let tensors: MemoryBytes = trainer.memory().map_err(plugin_err("memory"))?.into();
    let peak = read_status()?.peak.max(baseline);
    let ratio = |bytes: u64| bytes as f64 / tensors.total.max(1) as f64;
    let held = tensors.parameters + tensors.gradients + tensors.optimizer_state;
    let cuda = match (cuda_index, cuda_baseline) {
        (Some(i), Some(base)) => {
            let stats = cuda::allocator_stats(i)?;
            let over = stats.allocated_peak.saturating_sub(base);
            Some(CudaPeak {
                baseline_allocated: base,
                peak_allocated: stats.allocated_peak,
                peak_over_baseline: over,
                peak_reserved: stats.reserved_peak,
                activations: over.saturating_sub(held),
                ratio_to_tensors: ratio(over),
            })
        }
        _ => None,
    };
    Ok(MemoryProfile {
        label: request.label.to_string(),
        plugin: plugin.name().to_string(),
        config: serde_json::from_str(&config)?,
        fractions,
        device,
        steps: request.steps,
        seconds_per_step,
        estimate,
        tensors,
        process: ProcessMemory {
            baseline,
            peak,
            peak_over_baseline: peak - baseline,
            build_peak_over_baseline: peak_after_build,
            activations: (peak - baseline).saturating_sub(held),
            peak_reset,
            warmup: request.warmup,
            ratio_to_tensors: ratio(peak - baseline),
        },
        cuda,
    })
}

fn step_once(
    trainer: &mut TrainerHandle,
    done: u64,
) -> Result<tli_plugin_api::StepReport, ProbeError> {
    let report = trainer.step(1).map_err(plugin_err("step"))?;
    if report.steps_done == 0 {
        return Err(ProbeError::NoProgress { done });
    }
    Ok(report)
}

/// Resident memory now and at its peak, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct ProcStatus {
    pub rss: u64,
    pub peak: u64,
}

/// Reads `VmRSS` and `VmHWM` from `/proc/self/status`.
pub fn read_status() -> Result<ProcStatus, ProbeError> {
    let text = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| ProbeError::ProcStatus(e.to_string()))?;
    parse_status(&text)
}

fn parse_status(text: &str) -> Result<ProcStatus, ProbeError> {
    let field = |name: &str| -> Result<u64, ProbeError> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .ok_or_else(|| ProbeError::ProcStatus(format!("no {name} line")))?;
        let kib: u64 = line
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .map_err(|_| ProbeError::ProcStatus(format!("unreadable {name}{line}")))?;
        Ok(kib * 1024)
    };
    Ok(ProcStatus {
        rss: field("VmRSS:")?,
        peak: field("VmHWM:")?,
    })
}

/// Resets the kernel's peak resident memory to the current one (Linux ≥ 4.0:
/// `5` into `/proc/self/clear_refs`). False where that is not allowed.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Makes resident memory follow live memory: every allocation of 128 KiB or
/// more gets its own mapping, returned to the kernel when freed (glibc's
/// default raises that threshold as large blocks are freed, after which freed
/// tensors stay resident and hide a later peak). Profiling processes only.
fn tune_allocator() {
    crate::allocator::map_large_allocations(128 * 1024);
}

/// Hands memory freed by the warm-up back to the kernel, so the baseline is
/// what is live.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read_in_bytes() {
        let text = "Name:\ttli\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        let s = parse_status(text).unwrap();
        assert_eq!((s.rss, s.peak), (1024 * 1024, 2048 * 1024));
        assert!(parse_status("VmRSS:\t1 kB\n").is_err());
        assert!(parse_status("VmRSS:\tmany kB\nVmHWM:\t1 kB\n").is_err());
    }

    #[test]
    fn the_peak_follows_an_allocation_after_a_reset() {
        tune_allocator();
        let before = read_status().unwrap();
        if !reset_peak_rss() {
            return; // not allowed here: nothing to show
        }
        let block = std::hint::black_box(vec![1u8; 256 << 20]);
        let during = read_status().unwrap();
        drop(block);
        let after = read_status().unwrap();
        // The kernel syncs per-thread counters lazily: allow a few pages of slack.
        assert!(
            during.peak >= before.rss + (200 << 20),
            "{before:?} {during:?}"
        );
        assert!(
            after.peak >= before.rss + (200 << 20),
            "{before:?} {after:?}"
        );
        assert!(after.rss + (128 << 20) < after.peak, "the block was freed");
    }
}
