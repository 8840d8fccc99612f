//! How runner threads share the cores with the host's other threads: they
//! run at a lower priority, and they offer their core once they have used a
//! few milliseconds of CPU (docs/reliability.md, "Load"): between slices,
//! and inside a slice whenever the plugin asks the host whether it is
//! cancelled (most plugins do, once per step), so a slice longer than that
//! does not hold a core through an API thread's wake-up.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How much lower than the host's other threads runners are scheduled
/// (Linux nice increment). Training saturates the cores; at equal priority a
/// status call waited for time slices behind every busy trainer (tens of ms
/// on 2 cores with 8 tasks, docs/benchmarks.md). Alone on a machine a
/// runner still gets all the CPU it can use.
pub const RUNNER_NICE: i32 = 10;

/// CPU time a runner uses between two offers of its core. The kernel does
/// not always preempt a busy thread when another wakes: with every core
/// training, an API thread woken by a request waited until the running
/// trainer's time slice ended, up to a 4 ms scheduler tick, several times
/// per request. Offering the core (`sched_yield`) gives it a scheduling
/// point. Offering after every slice, however short, made a task crawl
/// when other processes kept the cores busy (a yield gives up the rest of
/// the time slice; 1-step slices gave it up every few microseconds), so the
/// offer waits for this much CPU, about one time slice of the kernel's.
pub const OFFER_EVERY_CPU: Duration = Duration::from_millis(2);

/// Lowers the calling thread's priority by [`RUNNER_NICE`] (threads it
/// starts, e.g. libtorch's, inherit it). Failure only costs responsiveness.
pub fn lower_own_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscalls on the calling thread's own id.
        let result = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, current + RUNNER_NICE)
        };
        if result != 0 {
            tracing::debug!(
                "could not lower the runner's priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: an out-parameter of the right type for a clock every Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Wall time between two readings of the thread's CPU clock in
/// [`offer_if_due`] (a system call; the monotonic clock is not), so that a
/// plugin polling cancellation in a tight loop pays next to nothing.
const CHECK_EVERY_WALL: Duration = Duration::from_micros(250);

/// One runner thread's offer state.
#[derive(Clone, Copy)]
struct Offer {
    used_at_last_offer: Duration,
    checked_at: Instant,
}

thread_local! {
    /// Set while this thread is a runner's ([`share_this_thread`]).
    static OFFER: Cell<Option<Offer>> = const { Cell::new(None) };
}

/// Makes the calling thread a runner's: [`offer_if_due`] offers its core
/// until the returned guard is dropped (on the same thread).
#[must_use = "the thread stops sharing its core when the guard is dropped"]
pub fn share_this_thread() -> SharingThisThread {
    let offer = Offer {
        used_at_last_offer: thread_cpu_time(),
        checked_at: Instant::now(),
    };
    let _ = OFFER.try_with(|o| o.set(Some(offer)));
    SharingThisThread {
        _not_send: std::marker::PhantomData,
    }
}

/// While alive, its thread offers its core ([`share_this_thread`]).
pub struct SharingThisThread {
    /// The state is the creating thread's: the guard stays on it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for SharingThisThread {
    fn drop(&mut self) {
        let _ = OFFER.try_with(|o| o.set(None));
    }
}

/// On a runner thread ([`share_this_thread`]), yields the core if the thread
/// has used [`OFFER_EVERY_CPU`] since its last offer (`sched_yield` returns
/// at once when nothing else waits for the core); on any other thread,
/// nothing. Returns whether it yielded. Cheap enough to call once per
/// plugin step; never panics (it runs inside plugin callbacks).
pub fn offer_if_due() -> bool {
    OFFER
        .try_with(|cell| {
            let Some(mut offer) = cell.get() else {
                return false;
            };
            let now = Instant::now();
            if now.saturating_duration_since(offer.checked_at) < CHECK_EVERY_WALL {
                return false;
            }
            offer.checked_at = now;
            let used = thread_cpu_time();
            let due = used.saturating_sub(offer.used_at_last_offer) >= OFFER_EVERY_CPU;
            if due {
                std::thread::yield_now();
                offer.used_at_last_offer = thread_cpu_time();
                offer.checked_at = Instant::now();
            }
            cell.set(Some(offer));
            due
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burn_cpu(at_least: Duration) {
        let start = thread_cpu_time();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut x = 0u64;
        while thread_cpu_time().saturating_sub(start) < at_least {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            assert!(Instant::now() < deadline, "{x}");
        }
    }

    #[test]
    fn the_core_is_offered_only_after_enough_cpu() {
        let _sharing = share_this_thread();
        assert!(!offer_if_due(), "no CPU used yet");
        burn_cpu(OFFER_EVERY_CPU + CHECK_EVERY_WALL);
        assert!(offer_if_due());
        assert!(!offer_if_due(), "the count starts again");
    }

    #[test]
    fn sleeping_is_not_cpu() {
        let _sharing = share_this_thread();
        std::thread::sleep(OFFER_EVERY_CPU * 3);
        assert!(!offer_if_due());
    }

    #[test]
    fn threads_that_are_not_runners_never_yield() {
        drop(share_this_thread());
        burn_cpu(OFFER_EVERY_CPU * 2);
        assert!(!offer_if_due());
    }
}
