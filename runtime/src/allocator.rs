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
//! The default, [`MallocPolicy::Adaptive`], follows the number of tasks
//! running in the process ([`TaskGuard`]):
//!
//! * **one task** (a `tli train local`, a worker, a host with one task
//!   running): every block comes from the heaps and stays there between
//!   steps (glibc trims a heap itself only beyond 1 GiB of free top; it
//!   maps only a block a thread's 64 MiB arena heap cannot hold);
//! * **several**: blocks of 1 MiB and more get mappings of their own,
//!   unmapped when freed, so no task's freed matrices stay resident while
//!   another runs.
//!
//! In both, [`release_free_memory`] (`malloc_trim`) after a task's slice —
//! at most once per [`TRIM_INTERVAL`] — hands every arena's free pages back
//! to the kernel. `TLI_MMAP_THRESHOLD=BYTES` fixes the threshold instead
//! (every block from that size on mapped), and `TLI_MALLOC=glibc` keeps
//! glibc's defaults; profiling children always map blocks of 128 KiB and
//! more (`tli profile memory`). docs/benchmarks.md has the figures: one
//! default TFT trained 20 steps in 6.6 s against 7.4–7.8 s with glibc's
//! defaults (16 s with a 1 MiB threshold throughout), and eight seed-size
//! INT8 TFTs held 3.7 GiB of RSS with several-task mapping against 9.8 GiB
//! with single-task reuse.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
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
/// while one task runs (the trims after slices return the rest).
pub const TRIM_THRESHOLD: usize = 1 << 30;

/// Blocks of this size and more get mappings of their own while several
/// tasks run (measured against 2 and 4 MiB on eight seed-size TFTs: 3.7
/// against 4.2 GiB of RSS at the same speed).
pub const SHARED_MMAP_THRESHOLD: usize = 1 << 20;

/// How this process's malloc is set up (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MallocPolicy {
    /// Reuse while one task runs, map blocks of 1 MiB and more while
    /// several do (see the module docs). The default.
    Adaptive,
    /// glibc's own adaptive thresholds (`TLI_MALLOC=glibc`).
    Glibc,
    /// A fixed mmap threshold of this many bytes (`TLI_MMAP_THRESHOLD`).
    Fixed(usize),
}

/// Sets malloc up from `TLI_MMAP_THRESHOLD` (a byte count > 0: a fixed
/// threshold) and `TLI_MALLOC` (`glibc`: glibc's defaults), else
/// [`MallocPolicy::Adaptive`]. Call before other threads start allocating.
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
        MallocPolicy::Adaptive
    };
    apply(policy);
    policy
}

/// The policy [`configure_from_env`] chose (`Glibc` before it ran).
static POLICY: Mutex<(Option<MallocPolicy>, usize)> = Mutex::new((None, 0));

/// Applies `policy` to this process's malloc.
pub fn apply(policy: MallocPolicy) {
    let mut state = POLICY.lock().unwrap_or_else(|e| e.into_inner());
    state.0 = Some(policy);
    match policy {
        MallocPolicy::Glibc => {}
        MallocPolicy::Fixed(threshold) => map_large_allocations(threshold),
        MallocPolicy::Adaptive => set_sharing(state.1 > 1),
    }
}

/// glibc's default cap on blocks mapped at once (`DEFAULT_MMAP_MAX`).
pub const MMAP_MAX_DEFAULT: i32 = 65536;

/// Malloc parameters for one task (`false`: reuse) or several (`true`: map
/// blocks of [`SHARED_MMAP_THRESHOLD`] and more).
fn set_sharing(shared: bool) {
    let (mmap, trim, mapped) = if shared {
        (
            SHARED_MMAP_THRESHOLD,
            2 * SHARED_MMAP_THRESHOLD,
            MMAP_MAX_DEFAULT,
        )
    } else {
        // No block gets a mapping of its own, not even one over glibc's
        // 32 MiB cap on the threshold (a hidden-256 TFT's selection
        // inputs): mapped, such blocks had their pages faulted in and
        // zeroed every step (96,000 minor faults, 9 % of the step's CPU
        // time). glibc still maps a block a thread's arena cannot hold.
        (MMAP_THRESHOLD_MAX, TRIM_THRESHOLD, 0)
    };
    map_large_allocations(mmap);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's malloc parameters.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim as libc::c_int);
        libc::mallopt(libc::M_MMAP_MAX, mapped);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (trim, mapped);
}

/// A task running in this process, for [`MallocPolicy::Adaptive`]: held by
/// the thread that runs it, from its start to its end.
pub struct TaskGuard(());

impl TaskGuard {
    pub fn enter() -> Self {
        running_tasks_changed(1);
        TaskGuard(())
    }

    /// Tasks running now.
    pub fn running() -> usize {
        POLICY.lock().map(|s| s.1).unwrap_or(0)
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        running_tasks_changed(-1);
    }
}

fn running_tasks_changed(delta: isize) {
    let mut state = POLICY.lock().unwrap_or_else(|e| e.into_inner());
    let before = state.1;
    state.1 = before.saturating_add_signed(delta);
    if state.0 != Some(MallocPolicy::Adaptive) {
        return;
    }
    if let Some(shared) = sharing_change(before, state.1) {
        set_sharing(shared);
        if shared {
            // What the reusing task left in the heaps goes back before the others grow.
            trim_now();
        }
    }
}

/// Whether the malloc parameters change when the running tasks go from
/// `before` to `after`: `Some(true)` to several-task mapping, `Some(false)`
/// back to one-task reuse.
fn sharing_change(before: usize, after: usize) -> Option<bool> {
    ((before > 1) != (after > 1)).then_some(after > 1)
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
        // Mapping allowed again, should the one-task policy have turned it off.
        libc::mallopt(libc::M_MMAP_MAX, MMAP_MAX_DEFAULT);
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

    #[test]
    fn the_parameters_change_when_a_second_task_starts_and_when_one_is_left() {
        assert_eq!(sharing_change(0, 1), None);
        assert_eq!(sharing_change(1, 2), Some(true));
        assert_eq!(sharing_change(2, 3), None);
        assert_eq!(sharing_change(3, 2), None);
        assert_eq!(sharing_change(2, 1), Some(false));
        assert_eq!(sharing_change(1, 0), None);
        // Guards count (other tests of this binary may run tasks meanwhile).
        let a = TaskGuard::enter();
        assert!(TaskGuard::running() >= 1);
        drop(a);
    }
}
