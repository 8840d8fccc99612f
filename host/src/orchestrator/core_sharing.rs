//! How runner threads share the cores with the host's other threads: they
//! run at a lower priority, and they offer their core between slices once
//! they have used a few milliseconds of CPU (docs/reliability.md, "Load").

use std::time::Duration;

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

/// Offers the calling thread's core once it has used [`OFFER_EVERY_CPU`]
/// since the last offer. Create and use it on the runner's own thread.
pub struct CoreOffer {
    used_at_last_offer: Duration,
}

impl CoreOffer {
    pub fn new() -> Self {
        Self {
            used_at_last_offer: thread_cpu_time(),
        }
    }

    /// Between slices: yields the core if this thread has used
    /// [`OFFER_EVERY_CPU`] since the last time (`sched_yield` returns at
    /// once when nothing else waits for the core). Returns whether it did.
    pub fn between_slices(&mut self) -> bool {
        let used = thread_cpu_time();
        if used.saturating_sub(self.used_at_last_offer) < OFFER_EVERY_CPU {
            return false;
        }
        std::thread::yield_now();
        self.used_at_last_offer = thread_cpu_time();
        true
    }
}

impl Default for CoreOffer {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_core_is_offered_only_after_enough_cpu() {
        let mut offer = CoreOffer::new();
        assert!(!offer.between_slices(), "no CPU used yet");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while thread_cpu_time().saturating_sub(offer.used_at_last_offer) < OFFER_EVERY_CPU {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            assert!(start.elapsed() < Duration::from_secs(10), "{x}");
        }
        assert!(offer.between_slices());
        assert!(!offer.between_slices(), "the count starts again");
    }

    #[test]
    fn sleeping_is_not_cpu() {
        let mut offer = CoreOffer::new();
        std::thread::sleep(OFFER_EVERY_CPU * 3);
        assert!(!offer.between_slices());
    }
}
