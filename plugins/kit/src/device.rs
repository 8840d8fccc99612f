//! Device strings as they cross the ABI (`cpu`, `cuda:N`) → `tch::Device`.

use tli_plugin_api::{ErrorCode, PluginError};

/// Parses a device string and checks that the device exists in this process.
pub fn parse_device(device: &str) -> Result<tch::Device, PluginError> {
    let unsupported = |why: String| PluginError::new(ErrorCode::UNSUPPORTED_DEVICE, why);
    match device.trim() {
        "cpu" => Ok(tch::Device::Cpu),
        other => {
            let index = other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    unsupported(format!(
                        "device {other:?} is not understood; use \"cpu\" or \"cuda:N\""
                    ))
                })?;
            let count = tch::Cuda::device_count() as usize;
            if index >= count {
                return Err(unsupported(format!(
                    "device {other} requested but this process sees {count} CUDA device(s)"
                )));
            }
            Ok(tch::Device::Cuda(index))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_parses_and_nonsense_is_refused() {
        assert_eq!(parse_device("cpu").unwrap(), tch::Device::Cpu);
        let e = parse_device("tpu:0").unwrap_err();
        assert_eq!(e.code, ErrorCode::UNSUPPORTED_DEVICE);
        assert!(e.message.contains("\"tpu:0\""));
    }
}
