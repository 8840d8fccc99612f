//! Device strings as they cross the ABI (`cpu`, `cuda:N`, parsed by
//! [`tli_plugin_api::Device`]) → `tch::Device`, checked against this process.

use tli_plugin_api::{Device, ErrorCode, PluginError};

/// Parses a device string and checks that the device exists in this process.
pub fn parse_device(device: &str) -> Result<tch::Device, PluginError> {
    let unsupported = |why: String| PluginError::new(ErrorCode::UNSUPPORTED_DEVICE, why);
    match device
        .parse::<Device>()
        .map_err(|e| unsupported(e.to_string()))?
    {
        Device::Cpu => Ok(tch::Device::Cpu),
        Device::Cuda(index) => {
            let count = tch::Cuda::device_count() as usize;
            if index as usize >= count {
                return Err(unsupported(format!(
                    "device {device} requested but this process sees {count} CUDA device(s)"
                )));
            }
            Ok(tch::Device::Cuda(index as usize))
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
