//! glibc malloc settings for a process that trains models: resident memory
//! that follows live tensors, without page faults in every step.
//!
//! glibc's defaults fit neither. It serves a block of 128 KiB or more from
//! its own mapping only until such a block is freed; then it raises the
//! threshold to that block's size (up to 32 MiB) and the trim threshold to
//! twice that, later blocks come from the heap arenas, and a heap whose top
//! is free beyond the trim threshold is shrunk. Two costs follow:
//!
//! * **Memory.** A host runs its tasks' slices on pool threads and
//!   libtorch's workers allocate too, each thread in its own arena, so every
//!   arena comes to hold the high-water mark of whatever ran on it: 8 staged
//!   INT8 TFTs reserving 4 GiB made a 9.9 GiB process.
//! * **Page faults.** A step that frees most of what it allocated (an INT8
//!   step drops its f32 weight copies and gradients) leaves the heap's top
//!   free, glibc trims it, and the next step faults every page back in: at
//!   the seed's size the INT8 backward pass took 0.9–1.7 s against FP32's
//!   0.7 s, with 30,000–110,000 page faults per step.
//!
//! The default, [`MallocPolicy::Reuse`], fixes both thresholds: blocks
//! under 32 MiB come from the heaps and stay there between steps (glibc
//! trims a heap itself only beyond 1 GiB of free top), larger ones are
//! mapped (transparent huge pages make those cheap to fault), and
//! [`release_free_memory`] (`malloc_trim`) after a task's slice — at most
//! once per [`TRIM_INTERVAL`] — hands every arena's free pages back to the
//! kernel, so resident memory follows the tasks at slice granularity.
//! `TLI_MMAP_THRESHOLD=BYTES` instead maps every block from that size on
//! (the tightest memory, a page fault on every large allocation: one default
//! TFT trained 20 steps in 13.3 s with glibc's threshold and 20.9 s with
//! 1 MiB), and `TLI_MALLOC=glibc` keeps glibc's defaults. Profiling
//! children always map blocks of 128 KiB and more (`tli profile memory`).
//! docs/benchmarks.md has the figures.

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

/// glibc's largest mmap threshold on 64-bit Linux (`DEFAULT_MMAP_THRESHOLD_MAX`).
pub const MMAP_THRESHOLD_MAX: usize = 32 << 20;

/// Free bytes a heap may keep at its top before glibc trims it by itself
/// (under [`MallocPolicy::Reuse`]; the trims after slices return the rest).
pub const TRIM_THRESHOLD: usize = 1 << 30;

/// How this process's malloc is set up (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MallocPolicy {
    /// Blocks under 32 MiB from the heaps, kept there between steps (no page
    /// faults to refill them); larger ones mapped; freed pages handed back
    /// by the trims after slices. The default.
    Reuse,
    /// glibc's own adaptive thresholds (`TLI_MALLOC=glibc`).
    Glibc,
    /// A fixed mmap threshold of this many bytes (`TLI_MMAP_THRESHOLD`).
    Fixed(usize),
}

/// Sets malloc up from `TLI_MMAP_THRESHOLD` (a byte count > 0: a fixed
/// threshold) and `TLI_MALLOC` (`glibc`: glibc's defaults), else
/// [`MallocPolicy::Reuse`]. Call before other threads start allocating.
pub fn configure_from_env() -> MallocPolicy {
    let threshold = std::env::var("TLI_MMAP_THRESHOLD")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let policy = if threshold > 0 {
        MallocPolicy::Fixed(threshold)
    } else if std::env::var("TLI_MALLOC").is_ok_and(|v| v.trim() == "glibc") {
        MallocPolicy::Glibc
    } else {
        MallocPolicy::Reuse
    };
    apply(policy);
    policy
}

/// Applies `policy` to this process's malloc.
pub fn apply(policy: MallocPolicy) {
    match policy {
        MallocPolicy::Glibc => {}
        MallocPolicy::Fixed(threshold) => map_large_allocations(threshold),
        MallocPolicy::Reuse => {
            map_large_allocations(MMAP_THRESHOLD_MAX);
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: mallopt only changes glibc's malloc parameters.
            unsafe {
                libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as libc::c_int);
            }
        }
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
