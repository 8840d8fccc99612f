//! glibc malloc settings for a process that trains models: whether resident
//! memory follows live tensors, at some cost in speed.
//!
//! By default glibc serves a block of 128 KiB or more from its own mapping
//! only until such a block is freed; then it raises the threshold to that
//! block's size (up to 32 MiB), and later tensors of that size come from the
//! heap arenas, which keep freed memory. With several tasks stepping on
//! their own threads (each with its own arena) a host can then hold about
//! twice what its tasks do: 8 staged INT8 TFTs reserving 4 GiB made a
//! 9.9 GiB process, and 4.1 GiB (4,168 MiB) with the threshold fixed at 1 MiB. Fixing it
//! costs page faults on every large allocation: one default TFT trained 20
//! steps in 13.3 s with glibc's threshold and 20.9 s with 1 MiB (peak RSS
//! 878 → 655 MiB). So `tli` leaves glibc's default unless
//! `TLI_MMAP_THRESHOLD` asks otherwise (docs/orchestrator.md); profiling
//! children always fix it (`tli profile memory`).

/// The setting of `TLI_MMAP_THRESHOLD` at start-up: a byte count fixes the
/// threshold there (1048576 for a host packing many tasks into a memory
/// budget); unset, `0` or unreadable leaves glibc's adaptive threshold.
pub fn configure_from_env() {
    let threshold = std::env::var("TLI_MMAP_THRESHOLD")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if threshold > 0 {
        map_large_allocations(threshold);
    }
}

/// Allocations of `threshold` bytes or more get a mapping of their own,
/// returned to the kernel when freed; fixing the threshold also stops glibc
/// from raising it. Call before other threads start allocating.
pub fn map_large_allocations(threshold: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's malloc parameters.
    unsafe {
        libc::mallopt(
            libc::M_MMAP_THRESHOLD,
            threshold.min(i32::MAX as usize) as libc::c_int,
        );
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = threshold;
}
