//! Conversion of libtorch errors into plugin errors.

use tli_plugin_api::{ErrorCode, PluginError};

/// Adds `.plugin_err("what was being done")` to `tch` results. A CUDA or CPU
/// allocation failure becomes `OUT_OF_MEMORY`, so the host can fail or
/// re-queue that task alone.
pub trait TchResultExt<T> {
    fn plugin_err(self, context: &str) -> Result<T, PluginError>;
}

impl<T> TchResultExt<T> for Result<T, tch::TchError> {
    fn plugin_err(self, context: &str) -> Result<T, PluginError> {
        self.map_err(|e| {
            let text = e.to_string();
            let code = if text.contains("out of memory") || text.contains("DefaultCPUAllocator") {
                ErrorCode::OUT_OF_MEMORY
            } else {
                ErrorCode::OTHER
            };
            // libtorch messages carry a long C++ backtrace after the first line.
            let first_line = text.lines().next().unwrap_or("").trim();
            PluginError::new(code, format!("{context}: {first_line}"))
        })
    }
}
