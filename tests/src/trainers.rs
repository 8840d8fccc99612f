//! Driving one plugin's trainers in-process through the host's registry, as
//! the plugin tests do: a registry holding just that plugin, task specs on a
//! synthetic dataset, trainers from checked configs, metrics as a map.

use crate::PluginDir;
use abi_stable::std_types::RArc;
use std::collections::BTreeMap;
use tli_host::registry::{LoadedPlugin, PluginRegistry, TrainerHandle};
use tli_host::services::TaskServices;
use tli_plugin_api::{Dataset, MemoryBreakdown, Metric, TaskSpec};
use tli_testkit::cpu_task;

/// The synthetic AR(1) dataset (a planted predictable component) with `rows`
/// rows, as the host's benchmarks use it.
pub use tli_testkit::synthetic;

/// One libtorch intra-op thread on the calling thread (CI budget: one core).
pub fn one_thread() {
    // SAFETY: plain libtorch call with no pointers.
    unsafe { torch_sys::at_set_num_threads(1) };
}

/// A registry that loaded library `lib_name` as plugin `name` and nothing else.
pub fn registry_of(lib_name: &str, name: &str) -> (PluginDir, PluginRegistry) {
    let dir = PluginDir::new();
    dir.add(lib_name, name);
    let registry = PluginRegistry::scan(dir.path()).expect("scan the plugin directory");
    assert!(registry.refused.is_empty(), "{:?}", registry.refused);
    (dir, registry)
}

/// A CPU task `test-<seed>` of `max_steps` steps with an already checked `config`.
pub fn task_spec(config: &str, seed: u64, max_steps: u64, dataset: &RArc<Dataset>) -> TaskSpec {
    cpu_task(&format!("test-{seed}"), config, seed, max_steps, dataset)
}

/// A trainer of `plugin` for `config` (checked by the plugin first).
pub fn trainer(
    plugin: &LoadedPlugin,
    config: &str,
    seed: u64,
    max_steps: u64,
    dataset: &RArc<Dataset>,
) -> TrainerHandle {
    let config = plugin
        .validate_config(config)
        .unwrap_or_else(|e| panic!("config {config} refused: {e}"));
    let name = plugin.manifest.name.clone();
    plugin
        .create_trainer(
            task_spec(&config, seed, max_steps, dataset),
            TaskServices::new(&name, "t"),
        )
        .unwrap_or_else(|e| panic!("trainer of {name} not created: {e}"))
}

/// The JSON object `base` with the keys of `extra` set over it (configs in tests).
pub fn with(base: &str, extra: &str) -> String {
    let mut a: serde_json::Value = serde_json::from_str(base).expect("base config is JSON");
    let b: serde_json::Value = serde_json::from_str(extra).expect("extra keys are JSON");
    for (k, v) in b.as_object().expect("extra keys are an object") {
        a[k] = v.clone();
    }
    a.to_string()
}

/// Trains `steps` in calls of `slice`; returns the last call's metrics.
pub fn train(t: &mut TrainerHandle, steps: u64, slice: u64) -> BTreeMap<String, f64> {
    let mut done = 0;
    let mut last = BTreeMap::new();
    while done < steps {
        let report = t.step(slice.min(steps - done)).unwrap();
        assert!(report.steps_done > 0);
        done += report.steps_done;
        last = as_map(&report.metrics);
    }
    last
}

/// Metrics by name.
pub fn as_map(metrics: &[Metric]) -> BTreeMap<String, f64> {
    metrics
        .iter()
        .map(|m| (m.name.to_string(), m.value))
        .collect()
}

/// Checkpoint equivalence: N+M steps in one trainer equal N steps, a
/// checkpoint, a fresh trainer that loads it, and M steps — the last call's
/// step metrics and the evaluation agree exactly — and one `step(N+M)` call
/// evaluates the same. Returns the straight run's last step metrics and its
/// evaluation for further checks.
pub fn assert_resumes_exactly(
    plugin: &LoadedPlugin,
    config: &str,
    data: &RArc<Dataset>,
    n: u64,
    m: u64,
) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let total = n + m;
    let mut straight = trainer(plugin, config, 3, total, data);
    assert_eq!(straight.step(n).expect("step").steps_done, n);
    let last = straight.step(m).expect("step");
    assert_eq!(last.steps_done, m);
    assert_eq!(straight.total_steps().expect("total steps"), total);
    let expected_eval = as_map(&straight.evaluate().expect("evaluate").metrics);
    let expected_step = as_map(&last.metrics);
    assert!(
        expected_step.contains_key("train_loss"),
        "no gradient step happened in the last call: {expected_step:?}"
    );

    let mut one_call = trainer(plugin, config, 3, total, data);
    one_call.step(total).expect("step");
    assert_eq!(
        as_map(&one_call.evaluate().expect("evaluate").metrics),
        expected_eval
    );

    let ckpt = tempfile::tempdir().expect("temporary directory");
    let mut first = trainer(plugin, config, 3, total, data);
    first.step(n).expect("step");
    first
        .save_checkpoint(ckpt.path())
        .expect("save a checkpoint");
    drop(first);
    let mut resumed = trainer(plugin, config, 3, total, data);
    resumed
        .load_checkpoint(ckpt.path())
        .expect("load the checkpoint");
    assert_eq!(resumed.total_steps().expect("total steps"), n);
    let after = resumed.step(m).expect("step");
    assert_eq!(as_map(&after.metrics), expected_step);
    assert_eq!(
        as_map(&resumed.evaluate().expect("evaluate").metrics),
        expected_eval
    );
    (expected_step, expected_eval)
}

/// Each `(config, key)` is refused as INVALID_CONFIG with a message naming
/// `key`; a normalized config validates to itself; the manifest's default
/// config is valid and its schema refuses unknown keys.
pub fn assert_config_checks(plugin: &LoadedPlugin, refused: &[(&str, &str)], normal: &str) {
    for (config, key) in refused {
        let error = plugin
            .validate_config(config)
            .expect_err("a bad config was accepted");
        assert_eq!(
            error.code,
            tli_plugin_api::ErrorCode::INVALID_CONFIG,
            "{config}"
        );
        assert!(error.message.contains(key), "{config}: {error}");
    }
    let normalized = plugin.validate_config(normal).expect("a good config");
    assert_eq!(
        plugin
            .validate_config(&normalized)
            .expect("normalized config"),
        normalized
    );
    plugin
        .validate_config(&plugin.manifest.default_config.to_string())
        .expect("the manifest's default config");
    assert_eq!(plugin.manifest.config_schema["additionalProperties"], false);
}

/// The trainer's measured tensor bytes are within 25% of `estimate`, with
/// gradients and optimizer state among them.
pub fn assert_estimate_close(config: &str, estimate: &MemoryBreakdown, t: &TrainerHandle) {
    let measured = t.memory().expect("memory");
    let (e, m) = (estimate.total() as f64, measured.total() as f64);
    eprintln!("estimate {e} bytes, measured {m} bytes");
    assert!(
        (e - m).abs() <= 0.25 * m,
        "{config}: estimate {estimate:?} vs measured {measured:?}"
    );
    assert!(measured.gradients > 0 && measured.optimizer_state > 0);
}

/// Renames the tensors of the checkpoint in `dir` (`tensors.safetensors`,
/// header only: shapes and data stay), e.g. to fake an older layout.
pub fn rename_checkpoint_tensors(dir: &std::path::Path, renames: &[(&str, &str)]) {
    let path = dir.join("tensors.safetensors");
    let bytes = std::fs::read(&path).expect("read the checkpoint tensors");
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[..8]);
    let header_len = u64::from_le_bytes(len) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + header_len]).expect("safetensors header");
    for (from, to) in renames {
        let entry = header
            .remove(*from)
            .unwrap_or_else(|| panic!("no tensor {from} in the checkpoint"));
        header.insert(to.to_string(), entry);
    }
    let mut text = serde_json::to_vec(&header).expect("header");
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(&bytes[8 + header_len..]);
    std::fs::write(&path, out).expect("write the checkpoint tensors");
}

/// A checkpoint written with the per-tensor Adam layout (`adam.m.<i>`,
/// `adam.v.<i>`, before the flat AdamW) is refused as an I/O error that says
/// so, and leaves the trainer as it was: it then steps exactly like a fresh one.
pub fn assert_per_tensor_adam_checkpoint_refused(
    plugin: &LoadedPlugin,
    config: &str,
    data: &RArc<Dataset>,
    steps: u64,
) {
    let ckpt = tempfile::tempdir().expect("temporary directory");
    let mut first = trainer(plugin, config, 3, 4 * steps, data);
    first.step(steps).expect("step");
    first
        .save_checkpoint(ckpt.path())
        .expect("save a checkpoint");
    rename_checkpoint_tensors(
        ckpt.path(),
        &[("adamw.m", "adam.m.0"), ("adamw.v", "adam.v.0")],
    );
    let mut refused = trainer(plugin, config, 3, 4 * steps, data);
    let error = refused
        .load_checkpoint(ckpt.path())
        .expect_err("an old-layout checkpoint was loaded");
    assert_eq!(error.code, tli_plugin_api::ErrorCode::IO, "{error}");
    assert!(error.message.contains("per-tensor Adam"), "{error}");
    let mut fresh = trainer(plugin, config, 3, 4 * steps, data);
    assert_eq!(
        as_map(&refused.step(steps).expect("step").metrics),
        as_map(&fresh.step(steps).expect("step").metrics)
    );
}
