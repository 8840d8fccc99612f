//! glibc malloc settings for a process that trains models: resident memory
//! should follow live tensors, or the memory arbiter's accounting (what
//! tasks hold) and the machine's (what the process holds) part ways.
//!
//! By default glibc serves a block of 128 KiB or more from its own mapping
//! only until such a block is freed; then it raises the threshold to that
//! block's size (up to 32 MiB), and later tensors of that size come from the
//! heap arenas, which keep freed memory. With several tasks stepping on
//! their own threads (each with its own arena) the host then held about
//! twice what its tasks did: 8 staged INT8 TFTs reserving 4 GiB made a
//! 9.9 GiB process. A fixed threshold keeps large tensors in their own
//! mappings, returned to the kernel when freed.

/// The threshold of a training host: tensors of 1 MiB and more get their
/// own mappings (smaller ones, frequent in RL plugins, stay in the arenas).
pub const HOST_MMAP_THRESHOLD: usize = 1 << 20;

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
