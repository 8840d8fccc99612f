//! `tli profile memory`: what a plugin's trainer holds in memory, measured.
//!
//! The parent ([`run_children`]) starts one child process per config — this
//! same binary with `profile memory --child` — so that one config's peak
//! cannot hide in another's and every measurement starts from the same kind
//! of baseline. A child ([`probe::measure`]) builds the trainer, runs a few
//! steps and reports three independent views of the same memory:
//!
//! * the trainer's count of its own tensors ([`Trainer::memory`]: parameters,
//!   gradients, optimizer state, activations),
//! * the plugin's estimate for the same config and dataset shape
//!   (`estimate_memory`, what the memory arbiter admits tasks by), and
//! * a figure the plugin has no part in: on CPU the process's peak resident
//!   memory above the baseline taken just before the trainer was built
//!   (Linux `VmHWM`, reset through `/proc/self/clear_refs`); on CUDA the
//!   caching allocator's peak of allocated bytes above its baseline.
//!
//! [`chart`] draws the comparison as a PNG bar chart.
//!
//! [`Trainer::memory`]: tli_plugin_api::Trainer::memory

pub mod chart;
pub mod probe;

use crate::local_train::MemoryBytes;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};
use thiserror::Error;
use tli_cli::args::ProfileMemoryArgs;

/// The measurement of one config (what a child prints as JSON).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemoryProfile {
    pub label: String,
    pub plugin: String,
    /// The config as the plugin validated it (defaults filled in).
    pub config: serde_json::Value,
    /// The fractions the plugin reported with its last step (metrics named
    /// `*_fraction`, e.g. the share of parameters held as int8).
    #[serde(default)]
    pub fractions: Vec<(String, f64)>,
    pub device: String,
    pub steps: u64,
    /// Wall time of one training step, mean over the measured steps.
    pub seconds_per_step: f64,
    /// The plugin's `estimate_memory` for this config and dataset shape.
    pub estimate: MemoryBytes,
    /// The trainer's count of its own tensors after the steps (`memory()`).
    pub tensors: MemoryBytes,
    pub process: ProcessMemory,
    /// The CUDA caching allocator's view (on a `cuda:N` device only).
    pub cuda: Option<CudaPeak>,
}

/// Resident memory of the profiling process (Linux `/proc/self/status`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ProcessMemory {
    /// Resident bytes just before the trainer was built (libtorch, the plugins
    /// and the dataset loaded; after the warm-up trainer, if any, was dropped).
    pub baseline: u64,
    /// Peak resident bytes while the trainer was built and stepped.
    pub peak: u64,
    /// `peak - baseline`: the trainer's memory as the kernel saw it.
    pub peak_over_baseline: u64,
    /// The peak while the trainer was being built, before its first step.
    pub build_peak_over_baseline: u64,
    /// `peak_over_baseline` less the trainer's parameters, gradients and
    /// optimizer state: activations and workspace as measured, not estimated.
    pub activations: u64,
    /// Whether the kernel's peak counter could be reset at the baseline; if
    /// not, `peak` may be an earlier, higher peak (e.g. of the warm-up).
    pub peak_reset: bool,
    /// Whether a warm-up trainer ran before the baseline.
    pub warmup: bool,
    /// `peak_over_baseline / tensors.total`.
    pub ratio_to_tensors: f64,
}

/// The CUDA caching allocator's allocated bytes around the measurement.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct CudaPeak {
    pub baseline_allocated: u64,
    pub peak_allocated: u64,
    /// `peak_allocated - baseline_allocated`.
    pub peak_over_baseline: u64,
    /// Peak bytes held from CUDA (allocated plus cached).
    pub peak_reserved: u64,
    /// `peak_over_baseline` less the trainer's parameters, gradients and
    /// optimizer state.
    pub activations: u64,
    /// `peak_over_baseline / tensors.total`.
    pub ratio_to_tensors: f64,
}

#[derive(Debug, Error)]
pub enum ProfileError {
    #[error("could not start the profiling child process {exe}")]
    Spawn { exe: String, source: std::io::Error },
    #[error("profiling {label:?} failed ({status}); its messages are above")]
    ChildFailed {
        label: String,
        status: std::process::ExitStatus,
    },
    #[error("profiling {label:?} printed no readable result")]
    BadOutput {
        label: String,
        source: serde_json::Error,
    },
    #[error("{labels} labels given for {configs} configs: give one --label per --config, or none")]
    Labels { labels: usize, configs: usize },
    #[error("{0}")]
    Features(String),
}

/// The configs to profile as (label, `--config` value); `None` means the
/// plugin's default config.
pub fn configs_with_labels(
    args: &ProfileMemoryArgs,
) -> Result<Vec<(String, Option<String>)>, ProfileError> {
    let configs: Vec<Option<String>> = if args.config.is_empty() {
        vec![None]
    } else {
        args.config.iter().cloned().map(Some).collect()
    };
    if !args.label.is_empty() && args.label.len() != configs.len() {
        return Err(ProfileError::Labels {
            labels: args.label.len(),
            configs: configs.len(),
        });
    }
    Ok(configs
        .into_iter()
        .enumerate()
        .map(|(i, config)| {
            let label = args
                .label
                .get(i)
                .cloned()
                .unwrap_or_else(|| format!("config {}", i + 1));
            (label, config)
        })
        .collect())
}

/// The arguments of the child that measures one config.
fn child_args(
    args: &ProfileMemoryArgs,
    label: &str,
    config: Option<&str>,
    global: &[OsString],
) -> Vec<OsString> {
    let mut out: Vec<OsString> = global.to_vec();
    let mut push = |a: &str| out.push(a.into());
    for a in ["profile", "memory", "--child", "-o", "json", "--plugin"] {
        push(a);
    }
    push(&args.plugin);
    push("--label");
    push(label);
    if let Some(config) = config {
        push("--config");
        push(config);
    }
    for (flag, value) in [
        ("--steps", args.steps.to_string()),
        ("--seed", args.run.seed.to_string()),
        ("--device", args.run.device.to_string()),
        ("--rows", args.data.rows.to_string()),
    ] {
        push(flag);
        push(&value);
    }
    if let Some(threads) = args.run.threads {
        push("--threads");
        push(&threads.to_string());
    }
    if args.no_warmup {
        push("--no-warmup");
    }
    // Checked by `run_children` before any child starts.
    if let Ok(Some(features)) = args.data.features.to_json() {
        push("--features");
        push(&features);
    }
    if let Some(data) = &args.data.data {
        out.push("--data".into());
        out.push(data.arg().into());
    }
    if let Some(tz) = &args.data.tz {
        out.push("--tz".into());
        out.push(tz.into());
    }
    out
}

/// Measures every config in its own child process (`exe`, normally this
/// binary; `global` are the global flags to pass on, e.g. `--plugin-dir`),
/// one after another. The children's stderr (progress) is passed through.
pub fn run_children(
    exe: &Path,
    global: &[OsString],
    args: &ProfileMemoryArgs,
) -> Result<Vec<MemoryProfile>, ProfileError> {
    args.data
        .features
        .to_json()
        .map_err(|e| ProfileError::Features(e.to_string()))?;
    let mut profiles = Vec::new();
    for (label, config) in configs_with_labels(args)? {
        eprintln!("profiling {label} in a child process…");
        let output = Command::new(exe)
            .args(child_args(args, &label, config.as_deref(), global))
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|source| ProfileError::Spawn {
                exe: exe.display().to_string(),
                source,
            })?;
        if !output.status.success() {
            return Err(ProfileError::ChildFailed {
                label,
                status: output.status,
            });
        }
        let profile = serde_json::from_slice(&output.stdout)
            .map_err(|source| ProfileError::BadOutput { label, source })?;
        profiles.push(profile);
    }
    Ok(profiles)
}
