//! The device a task runs on, as it crosses the ABI (`cpu`, `cuda:N`), parsed
//! in exactly one place.
//!
//! The string form is part of the contract ([`crate::TaskSpec::device`],
//! `estimate_memory`): the host writes it with [`Device`]'s `Display`, a
//! plugin reads it with [`str::parse`]. Plugins map a [`Device`] to their
//! framework's own type (the kit: `tch::Device`).

use std::fmt;
use std::str::FromStr;

/// A compute device: the CPU or one CUDA device by index.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    /// The host CPU.
    #[default]
    Cpu,
    /// CUDA device `N` (as numbered by the CUDA runtime of this process).
    Cuda(u32),
}

impl Device {
    /// The CUDA index, `None` for the CPU.
    pub fn cuda_index(self) -> Option<usize> {
        match self {
            Device::Cpu => None,
            Device::Cuda(n) => Some(n as usize),
        }
    }

    /// Whether this is a CUDA device.
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// A device name that is not `cpu` or `cuda:N`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceParseError {
    /// The text as given.
    pub text: String,
}

impl fmt::Display for DeviceParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {:?} is not understood; use \"cpu\" or \"cuda:N\" (N = 0, 1, …)",
            self.text
        )
    }
}

impl std::error::Error for DeviceParseError {}

impl FromStr for Device {
    type Err = DeviceParseError;

    /// `cpu` or `cuda:N` with `N` a decimal index; surrounding whitespace is
    /// ignored, nothing else is accepted (no `cuda` without an index, no sign).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        if trimmed == "cpu" {
            return Ok(Device::Cpu);
        }
        trimmed
            .strip_prefix("cuda:")
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
            .map(Device::Cuda)
            .ok_or_else(|| DeviceParseError {
                text: text.to_string(),
            })
    }
}

impl serde::Serialize for Device {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Device {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_nonsense_is_refused() {
        for (text, device) in [
            ("cpu", Device::Cpu),
            ("cuda:0", Device::Cuda(0)),
            ("cuda:12", Device::Cuda(12)),
        ] {
            assert_eq!(text.parse::<Device>(), Ok(device));
            assert_eq!(device.to_string(), text);
        }
        assert_eq!(" cpu ".parse::<Device>(), Ok(Device::Cpu));
        for bad in [
            "", "gpu", "cuda", "cuda:", "cuda:-1", "cuda:+1", "cuda:x", "CPU", "tpu:0",
        ] {
            let e = bad.parse::<Device>().unwrap_err();
            assert!(e.to_string().contains("\"cpu\" or \"cuda:N\""), "{e}");
        }
    }
}
