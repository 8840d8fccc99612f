//! Device memory facts for the arbiter and `tli doctor`, from the CUDA
//! runtime and libtorch's caching allocator, through the C++ shim in
//! `runtime/cuda_shim/shim.cpp` (compiled by `runtime/build.rs`).
//!
//! * [`device_count`]: CUDA devices libtorch sees (0 without a driver or GPU).
//! * [`mem_info`]: free and total device memory (`cudaMemGetInfo`).
//! * [`allocator_stats`]: bytes the caching allocator has handed out
//!   (`allocated`) and holds from CUDA (`reserved`), current and peak. The
//!   allocator is process-wide: every plugin in the process shares it.
//! * [`empty_cache`], [`reset_peak`]: return cached blocks to CUDA; restart
//!   peak tracking (e.g. before measuring one task).
//! * [`device_name`], [`describe`]: for humans.
//!
//! On a machine without a GPU every call reports that cleanly: the count is
//! 0 and any device index is [`CudaError::NoSuchDevice`]. When libtorch has no
//! CUDA at build time, the shim is not compiled (`cfg(tli_no_cuda_shim)`) and
//! calls return [`CudaError::NotBuilt`]. Note that [`mem_info`] (like any CUDA
//! call) creates the device's primary CUDA context if there is none yet.

use thiserror::Error;
use tli_core::byte_size::format_bytes;

/// Free and total memory of one device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemInfo {
    pub free: u64,
    pub total: u64,
}

/// libtorch's caching-allocator statistics for one device, in bytes
/// (`allocated_bytes` / `reserved_bytes`, aggregate pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct AllocatorStats {
    /// Bytes in tensors now.
    pub allocated: u64,
    /// Most bytes in tensors since start or the last [`reset_peak`].
    pub allocated_peak: u64,
    /// Bytes the allocator holds from CUDA now (allocated plus cached).
    pub reserved: u64,
    /// Most bytes held since start or the last [`reset_peak`].
    pub reserved_peak: u64,
}

/// Why a CUDA query failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CudaError {
    /// The index names no device this process can see.
    #[error(
        "cuda:{device} does not exist: this process sees {count} CUDA device(s){}",
        if *count == 0 {
            " (no GPU, no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides them); use cpu".to_string()
        } else {
            format!("; use cuda:0 to cuda:{}", count - 1)
        }
    )]
    NoSuchDevice { device: usize, count: usize },
    /// tli was built against a libtorch without CUDA.
    #[error(
        "no CUDA support in this build: libtorch at build time had no libtorch_cuda.so; \
         install a CUDA build of torch (scripts/bootstrap.sh) and rebuild tli"
    )]
    NotBuilt,
    /// The CUDA runtime or libtorch reported an error.
    #[error("{call} on cuda:{device} failed: {message}")]
    Call {
        call: &'static str,
        device: usize,
        message: String,
    },
}

#[cfg(not(tli_no_cuda_shim))]
mod ffi {
    use std::os::raw::{c_char, c_int};

    /// Status codes of the shim's functions.
    pub const OK: c_int = 0;
    pub const NO_DEVICE: c_int = 1;

    extern "C" {
        pub fn tli_cuda_device_count() -> c_int;
        pub fn tli_cuda_mem_get_info(
            dev: c_int,
            free: *mut u64,
            total: *mut u64,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn tli_cuda_device_name(
            dev: c_int,
            name: *mut c_char,
            name_len: usize,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn tli_cuda_allocator_stats(
            dev: c_int,
            allocated: *mut u64,
            allocated_peak: *mut u64,
            reserved: *mut u64,
            reserved_peak: *mut u64,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub fn tli_cuda_empty_cache(err: *mut c_char, err_len: usize) -> c_int;
        pub fn tli_cuda_reset_peak(dev: c_int, err: *mut c_char, err_len: usize) -> c_int;
    }
}

/// A buffer the shim writes a NUL-terminated message into.
#[cfg(not(tli_no_cuda_shim))]
struct MessageBuf([u8; 1024]);

#[cfg(not(tli_no_cuda_shim))]
impl MessageBuf {
    fn new() -> Self {
        MessageBuf([0; 1024])
    }
    fn ptr(&mut self) -> *mut std::os::raw::c_char {
        self.0.as_mut_ptr().cast()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn text(&self) -> String {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        let text = String::from_utf8_lossy(&self.0[..end]).trim().to_string();
        if text.is_empty() {
            "unknown error (the CUDA shim gave no message)".to_string()
        } else {
            text
        }
    }
}

/// The number of CUDA devices libtorch sees; 0 on a machine without a GPU or
/// driver, and in a build without CUDA.
pub fn device_count() -> usize {
    #[cfg(not(tli_no_cuda_shim))]
    {
        // SAFETY: takes no arguments; the shim catches every C++ exception.
        let n = unsafe { ffi::tli_cuda_device_count() };
        usize::try_from(n).unwrap_or(0)
    }
    #[cfg(tli_no_cuda_shim)]
    {
        0
    }
}

/// Checks `dev` against [`device_count`] and converts it for the shim.
#[cfg(not(tli_no_cuda_shim))]
fn device_index(dev: usize) -> Result<std::os::raw::c_int, CudaError> {
    let count = device_count();
    if dev >= count {
        return Err(CudaError::NoSuchDevice { device: dev, count });
    }
    std::os::raw::c_int::try_from(dev).map_err(|_| CudaError::NoSuchDevice { device: dev, count })
}

/// Maps a shim status code to a result.
#[cfg(not(tli_no_cuda_shim))]
fn check(
    rc: std::os::raw::c_int,
    call: &'static str,
    dev: usize,
    msg: &MessageBuf,
) -> Result<(), CudaError> {
    match rc {
        ffi::OK => Ok(()),
        ffi::NO_DEVICE => Err(CudaError::NoSuchDevice {
            device: dev,
            count: device_count(),
        }),
        _ => Err(CudaError::Call {
            call,
            device: dev,
            message: msg.text(),
        }),
    }
}

/// Free and total memory of device `dev` (`cudaMemGetInfo`).
pub fn mem_info(dev: usize) -> Result<MemInfo, CudaError> {
    #[cfg(not(tli_no_cuda_shim))]
    {
        let index = device_index(dev)?;
        let (mut free, mut total) = (0u64, 0u64);
        let mut msg = MessageBuf::new();
        // SAFETY: valid out-pointers and a buffer of the stated length; the
        // shim writes at most `len` bytes and catches every C++ exception.
        let rc = unsafe {
            ffi::tli_cuda_mem_get_info(index, &mut free, &mut total, msg.ptr(), msg.len())
        };
        check(rc, "cudaMemGetInfo", dev, &msg)?;
        Ok(MemInfo { free, total })
    }
    #[cfg(tli_no_cuda_shim)]
    {
        let _ = dev;
        Err(CudaError::NotBuilt)
    }
}

/// The device's name, e.g. "NVIDIA H200".
pub fn device_name(dev: usize) -> Result<String, CudaError> {
    #[cfg(not(tli_no_cuda_shim))]
    {
        let index = device_index(dev)?;
        let mut name = MessageBuf::new();
        let mut msg = MessageBuf::new();
        // SAFETY: two buffers of their stated lengths; see `mem_info`.
        let rc = unsafe {
            ffi::tli_cuda_device_name(index, name.ptr(), name.len(), msg.ptr(), msg.len())
        };
        check(rc, "cudaGetDeviceProperties", dev, &msg)?;
        let end = name.0.iter().position(|&b| b == 0).unwrap_or(name.0.len());
        Ok(String::from_utf8_lossy(&name.0[..end]).into_owned())
    }
    #[cfg(tli_no_cuda_shim)]
    {
        let _ = dev;
        Err(CudaError::NotBuilt)
    }
}

/// libtorch's caching-allocator statistics for device `dev`. Initializes
/// libtorch's CUDA state if nothing has used CUDA yet (then all are 0).
pub fn allocator_stats(dev: usize) -> Result<AllocatorStats, CudaError> {
    #[cfg(not(tli_no_cuda_shim))]
    {
        let index = device_index(dev)?;
        let mut s = AllocatorStats::default();
        let mut msg = MessageBuf::new();
        // SAFETY: valid out-pointers and buffer; see `mem_info`.
        let rc = unsafe {
            ffi::tli_cuda_allocator_stats(
                index,
                &mut s.allocated,
                &mut s.allocated_peak,
                &mut s.reserved,
                &mut s.reserved_peak,
                msg.ptr(),
                msg.len(),
            )
        };
        check(rc, "CUDACachingAllocator::getDeviceStats", dev, &msg)?;
        Ok(s)
    }
    #[cfg(tli_no_cuda_shim)]
    {
        let _ = dev;
        Err(CudaError::NotBuilt)
    }
}

/// Returns every unused cached block, on every device, to CUDA
/// (`CUDACachingAllocator::emptyCache`). Without CUDA devices there is
/// nothing to empty and this is `Ok`.
pub fn empty_cache() -> Result<(), CudaError> {
    #[cfg(not(tli_no_cuda_shim))]
    {
        if device_count() == 0 {
            return Ok(());
        }
        let mut msg = MessageBuf::new();
        // SAFETY: a buffer of its stated length; see `mem_info`.
        let rc = unsafe { ffi::tli_cuda_empty_cache(msg.ptr(), msg.len()) };
        check(rc, "CUDACachingAllocator::emptyCache", 0, &msg)
    }
    #[cfg(tli_no_cuda_shim)]
    {
        Ok(())
    }
}

/// Restarts peak tracking of device `dev` (`resetPeakStats`): the peaks
/// become the current values.
pub fn reset_peak(dev: usize) -> Result<(), CudaError> {
    #[cfg(not(tli_no_cuda_shim))]
    {
        let index = device_index(dev)?;
        let mut msg = MessageBuf::new();
        // SAFETY: a buffer of its stated length; see `mem_info`.
        let rc = unsafe { ffi::tli_cuda_reset_peak(index, msg.ptr(), msg.len()) };
        check(rc, "CUDACachingAllocator::resetPeakStats", dev, &msg)
    }
    #[cfg(tli_no_cuda_shim)]
    {
        let _ = dev;
        Err(CudaError::NotBuilt)
    }
}

/// One line per device for `tli doctor`, e.g. "cuda:0 NVIDIA H200, 139.8 GiB
/// total, 139.1 GiB free, allocator 0 B allocated / 0 B reserved"; or "no
/// CUDA devices" / "no CUDA support in this build". Creates each device's
/// CUDA context (see [`mem_info`]).
pub fn describe() -> String {
    if cfg!(tli_no_cuda_shim) {
        return "no CUDA support in this build (libtorch without CUDA)".to_string();
    }
    let count = device_count();
    if count == 0 {
        return "no CUDA devices".to_string();
    }
    (0..count)
        .map(|dev| {
            let name = device_name(dev).unwrap_or_else(|e| format!("(name unknown: {e})"));
            let mem = match mem_info(dev) {
                Ok(m) => format!(
                    "{} total, {} free",
                    format_bytes(m.total),
                    format_bytes(m.free)
                ),
                Err(e) => format!("memory unknown: {e}"),
            };
            let alloc = match allocator_stats(dev) {
                Ok(s) => format!(
                    "allocator {} allocated / {} reserved",
                    format_bytes(s.allocated),
                    format_bytes(s.reserved)
                ),
                Err(e) => format!("allocator unknown: {e}"),
            };
            format!("cuda:{dev} {name}, {mem}, {alloc}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the NVIDIA driver's device nodes exist: the machines this
    /// project is built and tested on have no GPU, a lent GPU machine has.
    fn machine_has_nvidia_gpu() -> bool {
        std::path::Path::new("/dev/nvidiactl").exists()
    }

    #[test]
    fn without_a_gpu_every_query_says_no_device() {
        if machine_has_nvidia_gpu() {
            eprintln!("skipped: this machine has an NVIDIA GPU (see with_a_gpu_...)");
            return;
        }
        // Expectation: this machine has no GPU.
        assert_eq!(device_count(), 0, "this machine has no GPU");
        let err = mem_info(0).expect_err("this machine has no GPU");
        if cfg!(tli_no_cuda_shim) {
            assert_eq!(err, CudaError::NotBuilt);
            return;
        }
        assert_eq!(
            err,
            CudaError::NoSuchDevice {
                device: 0,
                count: 0
            }
        );
        assert!(err.to_string().contains("use cpu"), "{err}");
        assert!(matches!(
            allocator_stats(0),
            Err(CudaError::NoSuchDevice { .. })
        ));
        assert!(matches!(reset_peak(0), Err(CudaError::NoSuchDevice { .. })));
        assert!(matches!(
            device_name(0),
            Err(CudaError::NoSuchDevice { .. })
        ));
        assert_eq!(empty_cache(), Ok(()));
        assert_eq!(describe(), "no CUDA devices");
    }

    #[test]
    fn with_a_gpu_memory_facts_are_consistent() {
        if !machine_has_nvidia_gpu() || cfg!(tli_no_cuda_shim) {
            eprintln!("skipped: this machine has no GPU");
            return;
        }
        let count = device_count();
        assert!(
            count > 0,
            "/dev/nvidiactl exists but libtorch sees no device"
        );
        let m = mem_info(0).expect("cuda:0 memory info");
        assert!(m.total > 0 && m.free <= m.total, "{m:?}");
        reset_peak(0).expect("reset peak");
        let s = allocator_stats(0).expect("allocator stats");
        assert!(s.allocated <= s.reserved, "{s:?}");
        assert!(s.allocated_peak >= s.allocated && s.reserved_peak >= s.reserved);
        empty_cache().expect("empty cache");
        assert!(!device_name(0).expect("name").is_empty());
        assert!(describe().starts_with("cuda:0 "), "{}", describe());
        assert!(matches!(
            mem_info(count),
            Err(CudaError::NoSuchDevice { .. })
        ));
    }

    #[test]
    fn an_index_past_the_last_device_is_refused() {
        let count = device_count();
        let err = mem_info(count).expect_err("one past the last device");
        if cfg!(tli_no_cuda_shim) {
            assert_eq!(err, CudaError::NotBuilt);
        } else {
            assert_eq!(
                err,
                CudaError::NoSuchDevice {
                    device: count,
                    count
                }
            );
        }
    }
}
