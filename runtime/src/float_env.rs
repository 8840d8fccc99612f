//! The CPU's floating-point environment of a process that trains models:
//! subnormal ("denormal") floats flushed to zero.
//!
//! x86 cores take a slow microcode path for every arithmetic operation that
//! reads or produces a subnormal float (below 1.2·10⁻³⁸ in f32), often 50–100×
//! slower than a normal one. State-space models make them by the million: a
//! decay `exp(Σ A·dt)` over hundreds of bars lands in that range before it
//! reaches zero, and every matrix product over those decays then crawls. On the
//! bench machine a Mamba-2 training step at lookback 4,096 took 2.6× as long
//! with subnormals as without (docs/benchmarks.md, "Mamba-2"). PyTorch offers
//! the same switch (`torch.set_flush_denormal`); the result changes only in
//! values below 1.2·10⁻³⁸, which become 0.
//!
//! [`flush_denormals`] sets flush-to-zero and denormals-are-zero (x86-64:
//! MXCSR bits FTZ and DAZ; aarch64: FPCR.FZ) **for the calling thread and the
//! threads it starts afterwards** (a new thread inherits its creator's
//! floating-point control state), so `tli` calls it first thing in `main`,
//! before any other thread exists. `TLI_DENORMALS=keep` leaves the
//! environment as it was (to measure the difference).

/// Flushes subnormal floats to zero on this thread (and threads it starts
/// later). Returns whether the platform supports it and it was set.
pub fn flush_denormals() -> bool {
    if std::env::var("TLI_DENORMALS").is_ok_and(|v| v == "keep") {
        return false;
    }
    set_flush()
}

#[cfg(target_arch = "x86_64")]
const MXCSR_FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

#[cfg(target_arch = "x86_64")]
fn read_mxcsr() -> u32 {
    let mut value: u32 = 0;
    // SAFETY: stmxcsr stores the 32-bit MXCSR register to the given address,
    // a live local; it changes no register or flag.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut value, options(nostack, preserves_flags));
    }
    value
}

#[cfg(target_arch = "x86_64")]
fn set_flush() -> bool {
    let value = read_mxcsr() | MXCSR_FTZ_DAZ;
    // SAFETY: ldmxcsr loads MXCSR from a live local; only the FTZ and DAZ
    // bits differ from the current value (no exception is unmasked), which
    // affects the results of operations on subnormal floats only.
    unsafe {
        std::arch::asm!("ldmxcsr [{}]", in(reg) &value, options(nostack, preserves_flags, readonly));
    }
    read_flush()
}

#[cfg(target_arch = "x86_64")]
fn read_flush() -> bool {
    read_mxcsr() & MXCSR_FTZ_DAZ == MXCSR_FTZ_DAZ
}

#[cfg(target_arch = "aarch64")]
const FPCR_FZ: u64 = 1 << 24;

#[cfg(target_arch = "aarch64")]
fn read_fpcr() -> u64 {
    let value: u64;
    // SAFETY: reads the FPCR system register into a general register.
    unsafe {
        std::arch::asm!("mrs {}, fpcr", out(reg) value, options(nomem, nostack, preserves_flags));
    }
    value
}

#[cfg(target_arch = "aarch64")]
fn set_flush() -> bool {
    let value = read_fpcr() | FPCR_FZ;
    // SAFETY: writes FPCR with only the flush-to-zero bit added.
    unsafe {
        std::arch::asm!("msr fpcr, {}", in(reg) value, options(nomem, nostack, preserves_flags));
    }
    read_flush()
}

#[cfg(target_arch = "aarch64")]
fn read_flush() -> bool {
    read_fpcr() & FPCR_FZ != 0
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn set_flush() -> bool {
    read_flush()
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn read_flush() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subnormal product, computed at run time (not folded by the compiler).
    fn tiny_product() -> f32 {
        std::hint::black_box(1.0e-20_f32) * std::hint::black_box(1.0e-20_f32)
    }

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn flushing_makes_subnormal_results_zero_on_this_thread_and_its_children() {
        // A thread of its own, so the test harness's threads keep their environment.
        std::thread::spawn(|| {
            assert!(tiny_product() > 0.0, "subnormals exist before flushing");
            assert!(set_flush());
            assert!(read_flush());
            assert_eq!(tiny_product(), 0.0);
            let child = std::thread::spawn(|| (read_flush(), tiny_product()))
                .join()
                .expect("child thread");
            assert_eq!(
                child,
                (true, 0.0),
                "a thread started afterwards inherits it"
            );
        })
        .join()
        .expect("test thread");
        assert!(tiny_product() > 0.0, "other threads keep subnormals");
    }
}
