//! What libtorch this process actually runs on: the library file the dynamic
//! loader mapped, its version, and whether CUDA support was linked in and
//! finds devices.

use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, Serialize)]
pub struct LibtorchInfo {
    /// Directory of the mapped `libtorch_cpu.so`.
    pub lib_dir: Option<PathBuf>,
    /// From `version.py` next to that directory (PyPI wheel layout).
    pub version: Option<String>,
    /// Whether `libtorch_cuda.so` is mapped into this process.
    pub torch_cuda_loaded: bool,
    pub cuda_available: bool,
    pub cuda_devices: i64,
    pub cudnn_available: bool,
    pub intra_op_threads: i32,
}

pub fn probe() -> LibtorchInfo {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mapped = |name: &str| {
        maps.lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.rsplit('/').next() == Some(name))
            .map(PathBuf::from)
    };
    let lib_dir = mapped("libtorch_cpu.so").and_then(|p| p.parent().map(PathBuf::from));
    let version = lib_dir.as_ref().and_then(|dir| {
        let text = std::fs::read_to_string(dir.parent()?.join("version.py")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("__version__ = "))
            .map(|v| v.trim().trim_matches('\'').trim_matches('"').to_string())
    });
    LibtorchInfo {
        lib_dir,
        version,
        torch_cuda_loaded: mapped("libtorch_cuda.so").is_some(),
        cuda_available: tch::Cuda::is_available(),
        cuda_devices: tch::Cuda::device_count(),
        cudnn_available: tch::Cuda::cudnn_is_available(),
        intra_op_threads: tch::get_num_threads(),
    }
}
