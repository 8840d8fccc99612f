//! Device strings as they cross the ABI (`cpu`, `cuda:N`, parsed by
//! [`tli_plugin_api::Device`]) → `tch::Device`, checked against this process.

use tli_plugin_api::{Device, ErrorCode, PluginError};

/// Parses a device string without asking whether this process has the
/// device: for memory estimates, which a host makes for devices of other
/// machines too (a Slurm host without GPUs estimates its CUDA tasks).
pub fn parse_device_name(device: &str) -> Result<Device, PluginError> {
    device
        .parse::<Device>()
        .map_err(|e| PluginError::new(ErrorCode::UNSUPPORTED_DEVICE, e.to_string()))
}

/// Parses a device string and checks that the device exists in this process.
pub fn parse_device(device: &str) -> Result<tch::Device, PluginError> {
    let unsupported = |why: String| PluginError::new(ErrorCode::UNSUPPORTED_DEVICE, why);
    match parse_device_name(device)? {
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
        // A device this process lacks can be named (estimates), not used.
        assert_eq!(parse_device_name("cuda:7").unwrap(), Device::Cuda(7));
        assert!(parse_device_name("tpu:0").is_err());
    }
}
