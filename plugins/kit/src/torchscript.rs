//! TorchScript export (plugin API 1.3): a model's forward pass traced with
//! libtorch's tracer (`CModule::create_by_tracing`) on example inputs,
//! saved as `model.pt` beside those inputs (`input<i>.bin`, little-endian,
//! row-major) and described by a signature (see
//! `tli_plugin_api::Plugin::export_torchscript`).
//!
//! Tracing records the tensor operations one call performs: the weights
//! become constants of the module (their gradients are turned off first),
//! Rust control flow is unrolled as it ran (a fixed look-back unrolls to
//! the same steps every time), and sizes read from tensors into Rust
//! numbers become constants. A plugin keeps its traced closure to tensor
//! operations on its inputs so that the batch size stays free.

use crate::TchResultExt;
use std::path::Path;
use tch::{CModule, Kind, Tensor};
use tli_plugin_api::PluginError;

/// One input of a traced module.
pub struct Input {
    pub name: &'static str,
    pub tensor: Tensor,
}

thread_local! {
    /// Whether this thread is tracing a module now ([`export`]).
    static TRACING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is inside [`export`]'s trace: a forward pass that
/// picks one of two computations by its data must then take the one that
/// holds for every input, since the trace keeps only the branch it saw.
pub fn is_tracing() -> bool {
    TRACING.with(|t| t.get())
}

/// Marks this thread as tracing until dropped.
struct TracingGuard;

impl TracingGuard {
    fn enter() -> Self {
        TRACING.with(|t| t.set(true));
        TracingGuard
    }
}

impl Drop for TracingGuard {
    fn drop(&mut self) {
        TRACING.with(|t| t.set(false));
    }
}

/// Traces `forward` over `inputs` (with `params` frozen: no gradients), and
/// writes `model.pt` and the inputs into `out_dir`. Returns the signature
/// JSON with `columns`, per output row its `[dataset, row]`, and `batch`:
/// `null` when the module takes any batch size, or the one size it was
/// traced for (`fixed_batch`: traced on the inputs' first rows; callers send
/// that many windows per call).
pub fn export(
    out_dir: &Path,
    params: &[&Tensor],
    inputs: &[Input],
    columns: &[String],
    rows: &[(u32, u64)],
    fixed_batch: Option<usize>,
    mut forward: impl FnMut(&[Tensor]) -> Result<Tensor, PluginError>,
) -> Result<String, PluginError> {
    for p in params {
        let _ = p.set_requires_grad(false);
    }
    let traced_rows = fixed_batch.unwrap_or(rows.len()).min(rows.len());
    let tensors: Vec<Tensor> = inputs
        .iter()
        .map(|i| i.tensor.f_narrow(0, 0, traced_rows as i64))
        .collect::<Result<_, _>>()
        .plugin_err("the example inputs")?;
    let mut failure = None;
    let tracing = TracingGuard::enter();
    let module = tch::no_grad(|| {
        CModule::create_by_tracing("tli_model", "forward", &tensors, &mut |xs: &[Tensor]| {
            match forward(xs) {
                Ok(y) => vec![y],
                Err(e) => {
                    failure = Some(e);
                    vec![xs[0].shallow_clone()]
                }
            }
        })
    })
    .plugin_err("tracing the model")?;
    drop(tracing);
    if let Some(e) = failure {
        return Err(e);
    }
    // The module must answer its example inputs with one row per window.
    let check =
        tch::no_grad(|| module.forward_ts(&tensors)).plugin_err("running the traced module")?;
    if check.size().first().copied() != Some(traced_rows as i64) {
        return Err(PluginError::other(format!(
            "the traced module gives {:?} for {traced_rows} windows",
            check.size(),
        )));
    }
    module
        .save(out_dir.join("model.pt"))
        .plugin_err("writing model.pt")?;
    let mut described = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let file = format!("input{i}.bin");
        let (bytes, dtype) = raw_bytes(&input.tensor)?;
        std::fs::write(out_dir.join(&file), bytes)
            .map_err(|e| PluginError::io(format!("writing {file}: {e}")))?;
        described.push(serde_json::json!({
            "name": input.name,
            "file": file,
            "dtype": dtype,
            "shape": input.tensor.size(),
        }));
    }
    Ok(serde_json::json!({
        "inputs": described,
        "columns": columns,
        "rows": rows,
        "batch": fixed_batch,
    })
    .to_string())
}

/// A tensor's values as little-endian bytes, row-major, and its dtype name.
fn raw_bytes(t: &Tensor) -> Result<(Vec<u8>, &'static str), PluginError> {
    let t = t
        .f_to_device(tch::Device::Cpu)
        .and_then(|t| t.f_contiguous())
        .plugin_err("reading an input")?;
    let flat = t.f_reshape([-1]).plugin_err("reading an input")?;
    match t.kind() {
        Kind::Int64 => {
            let values = Vec::<i64>::try_from(&flat).plugin_err("reading an input")?;
            Ok((
                values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                "int64",
            ))
        }
        _ => {
            let values =
                Vec::<f32>::try_from(&flat.f_to_kind(Kind::Float).plugin_err("reading an input")?)
                    .plugin_err("reading an input")?;
            Ok((
                values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                "float32",
            ))
        }
    }
}
