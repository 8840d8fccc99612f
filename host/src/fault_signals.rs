//! I/O faults become errors, not deaths: a write past the file-size limit
//! (`ulimit -f`, RLIMIT_FSIZE) raises SIGXFSZ, whose default action kills the
//! whole host with every running task. Ignored, the write fails with `EFBIG`
//! instead, which the checkpoint and store code report and handle like a full
//! disk. (Rust's runtime already ignores SIGPIPE the same way.)

/// Ignores SIGXFSZ for the whole process; call once at start-up.
pub fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler
    // code; it is async-signal-safe and valid at any time.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}
