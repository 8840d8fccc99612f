//! glibc malloc settings for a process that trains models: resident memory
//! that follows live tensors, without slowing training.
//!
//! By default glibc serves a block of 128 KiB or more from its own mapping
//! only until such a block is freed; then it raises the threshold to that
//! block's size (up to 32 MiB), and later tensors of that size come from the
//! heap arenas, which keep freed memory. A host runs its tasks' slices on
//! pool threads and libtorch's workers allocate too, each thread in its
//! own arena, so every arena comes to hold the high-water mark of whatever
//! ran on it: 8 staged INT8 TFTs reserving 4 GiB made a 9.9 GiB process.
//!
//! Two remedies:
//!
//! * [`release_free_memory`] (`malloc_trim`) after a task's slice hands the
//!   free pages of every arena back to the kernel, at most once per
//!   [`TRIM_INTERVAL`]: the default, since it costs one walk of the free
//!   lists per slice and leaves glibc's fast path alone (docs/benchmarks.md
//!   has the eight-task figures with and without it).
//! * `TLI_MMAP_THRESHOLD=BYTES` fixes the mmap threshold (every large block
//!   gets a mapping of its own and is unmapped when freed): the tightest
//!   resident memory, but a page fault on every large allocation — one
//!   default TFT trained 20 steps in 13.3 s with glibc's threshold and
//!   20.9 s with 1 MiB. Profiling children always fix it (`tli profile
//!   memory`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Least time between two trims of the heap.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// Returns the free pages of every malloc arena to the kernel
/// (`malloc_trim(0)`), unless another call did within [`TRIM_INTERVAL`].
/// Returns whether it trimmed.
pub fn release_free_memory() -> bool {
    static START: OnceLock<Instant> = OnceLock::new();
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    let now = START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1;
    let last = LAST_MS.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < TRIM_INTERVAL.as_millis() as u64 {
        return false;
    }
    if LAST_MS
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    trim_now();
    true
}

/// `malloc_trim(0)` now, unthrottled.
pub fn trim_now() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_are_at_least_an_interval_apart() {
        let first = release_free_memory();
        let second = release_free_memory();
        assert!(!(first && second), "two trims within {TRIM_INTERVAL:?}");
        // After the interval one call trims again (unless another thread just did).
        std::thread::sleep(TRIM_INTERVAL + Duration::from_millis(50));
        let _ = release_free_memory();
        assert!(!release_free_memory());
    }
}
