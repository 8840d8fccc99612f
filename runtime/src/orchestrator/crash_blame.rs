//! Which task killed the host. Plugins run inside the host process, so a
//! plugin that aborts (`std::process::abort`, a C++ `std::terminate`, a
//! failed libtorch check) or faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE) kills
//! the whole host: every running task is interrupted (docs/orchestrator.md,
//! "Misbehaving plugins"). Resuming everything at the next start would run
//! the culprit again and kill the host again, a crash loop.
//!
//! So [`install`] (called by `tli host serve|run`) handles those signals:
//! when one is raised by the process itself on a runner thread (the runner
//! says which task it runs with [`enter_task`]), the handler appends
//! `task <id> signal <n>` to `<state-dir>/crashed-tasks` and says so on
//! stderr, then lets the signal do what it did before (the process still
//! dies, with the same signal). At the next start the orchestrator
//! [`take`]s those lines and fails the named tasks instead of resuming
//! them; everything else resumes.
//!
//! Not attributed (every running task is interrupted and resumed, as after
//! a SIGKILL): a signal sent from outside (`kill -ABRT <pid>`), a crash on a
//! thread that is not a runner's (libtorch's own worker threads), and deaths
//! no handler sees (SIGKILL, the OOM killer).

use super::TaskId;
use std::cell::Cell;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The file in the state directory where a crash names its task.
pub const FILE_NAME: &str = "crashed-tasks";

/// The signals that are attributed to the thread they are raised on.
const SIGNALS: [libc::c_int; 5] = [
    libc::SIGABRT,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
];

thread_local! {
    /// The task this thread runs (0: none). Constant-initialized and
    /// without a destructor, so reading it in a signal handler is a plain
    /// thread-local load.
    static CURRENT_TASK: Cell<TaskId> = const { Cell::new(0) };
}

/// What the handler needs, set once before it is installed.
struct Installed {
    path: CString,
    /// The dispositions before ours, in the order of [`SIGNALS`].
    previous: [libc::sigaction; SIGNALS.len()],
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// A task named by a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blame {
    pub task: TaskId,
    pub signal: i32,
}

impl Blame {
    /// `SIGABRT`, `SIGSEGV` …, or `signal N`.
    pub fn signal_name(&self) -> String {
        match self.signal {
            libc::SIGABRT => "SIGABRT".into(),
            libc::SIGSEGV => "SIGSEGV".into(),
            libc::SIGBUS => "SIGBUS".into(),
            libc::SIGILL => "SIGILL".into(),
            libc::SIGFPE => "SIGFPE".into(),
            n => format!("signal {n}"),
        }
    }
}

/// Where the crash records of a state directory are.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE_NAME)
}

/// Says that the calling thread runs `task` from now on (a runner thread).
pub fn enter_task(task: TaskId) {
    CURRENT_TASK.with(|t| t.set(task));
}

/// Installs the handlers for this process, recording into `state_dir`. The
/// first call wins (one host per process); later calls do nothing.
pub fn install(state_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let file = std::path::absolute(path(state_dir))?;
    let path = CString::new(file.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, empty mask).
    let mut previous: [libc::sigaction; SIGNALS.len()] = unsafe { std::mem::zeroed() };
    for (signal, old) in SIGNALS.iter().zip(previous.iter_mut()) {
        // SAFETY: with a null new action sigaction only writes the old one.
        if unsafe { libc::sigaction(*signal, std::ptr::null(), old) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    if INSTALLED.set(Installed { path, previous }).is_err() {
        return Ok(()); // another thread installed them meanwhile
    }
    for signal in SIGNALS {
        // SAFETY: a zeroed sigaction filled in with a handler of the
        // SA_SIGINFO signature; sigemptyset initialises the mask.
        let result = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if result != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The crash records of `state_dir`, and the file removed; none when there
/// is no file. Lines that do not parse are skipped.
pub fn take(state_dir: &Path) -> std::io::Result<Vec<Blame>> {
    let file = path(state_dir);
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let blames = parse(&text);
    std::fs::remove_file(&file)?;
    Ok(blames)
}

/// `task <id> signal <n>` lines; others are skipped.
fn parse(text: &str) -> Vec<Blame> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next()?, words.next()?, words.next()?, words.next()?) {
                ("task", task, "signal", signal) => Some(Blame {
                    task: task.parse().ok()?,
                    signal: signal.parse().ok()?,
                }),
                _ => None,
            }
        })
        .collect()
}

/// Writes `task <id> signal <n>\n` into `buf` without allocating; returns
/// its length.
fn record_line(task: TaskId, signal: i32, buf: &mut [u8; 64]) -> usize {
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        buf[n..n + bytes.len()].copy_from_slice(bytes);
        n += bytes.len();
    };
    put(b"task ");
    put(digits(task.unsigned_abs(), &mut [0; 20]));
    put(b" signal ");
    put(digits(signal.unsigned_abs() as u64, &mut [0; 20]));
    put(b"\n");
    n
}

/// The decimal digits of `value`, in `scratch`.
fn digits(mut value: u64, scratch: &mut [u8; 20]) -> &[u8] {
    let mut start = scratch.len();
    loop {
        start -= 1;
        scratch[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &scratch[start..];
        }
    }
}

/// What the handler says on stderr before its record line.
const SAID: &[u8] = b"tli: a fatal signal on a task's runner thread kills the host: ";

/// The handler: only async-signal-safe calls (open, write, close,
/// sigaction, raise, getpid) and no allocation.
extern "C" fn on_fatal_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    let task = CURRENT_TASK.try_with(Cell::get).unwrap_or(0);
    let Some(installed) = INSTALLED.get() else {
        return;
    };
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let (code, sender) = unsafe { ((*info).si_code, (*info).si_pid()) };
    // A faulting instruction (code > 0), or abort()/raise() in this process.
    // SAFETY: getpid has no preconditions.
    let own = code > 0 || (code == libc::SI_TKILL && sender == unsafe { libc::getpid() });
    if task > 0 && own {
        let mut line = [0u8; 64];
        let len = record_line(task, signal, &mut line);
        // SAFETY: a NUL-terminated path; the buffers outlive the calls.
        unsafe {
            let fd = libc::open(
                installed.path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
                0o600,
            );
            if fd >= 0 {
                libc::write(fd, line.as_ptr().cast(), len);
                libc::fsync(fd);
                libc::close(fd);
            }
            // One write, so no other thread's log line lands inside it.
            let mut said = [0u8; SAID.len() + 64];
            said[..SAID.len()].copy_from_slice(SAID);
            said[SAID.len()..SAID.len() + len].copy_from_slice(&line[..len]);
            libc::write(2, said.as_ptr().cast(), SAID.len() + len);
        }
    }
    if let Some(i) = SIGNALS.iter().position(|&s| s == signal) {
        // SAFETY: restores the disposition saved at install.
        unsafe { libc::sigaction(signal, &installed.previous[i], std::ptr::null_mut()) };
    }
    if code <= 0 {
        // Sent, not a fault: send it again, to the previous disposition (it
        // is delivered when this handler returns). A fault repeats by itself
        // when its instruction runs again.
        // SAFETY: raise has no preconditions.
        unsafe { libc::raise(signal) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_line_is_written_without_allocating_and_read_back() {
        let mut buf = [0u8; 64];
        let len = record_line(1234567, libc::SIGABRT, &mut buf);
        let text = std::str::from_utf8(&buf[..len]).expect("ascii");
        assert_eq!(text, format!("task 1234567 signal {}\n", libc::SIGABRT));
        let read = parse(&format!("{text}garbage\ntask x signal 6\n{text}"));
        let blame = Blame {
            task: 1234567,
            signal: libc::SIGABRT,
        };
        assert_eq!(read, vec![blame, blame]);
        assert_eq!(blame.signal_name(), "SIGABRT");
        let mut buf = [0u8; 64];
        let len = record_line(TaskId::MAX, 0, &mut buf);
        assert_eq!(
            &buf[..len],
            format!("task {} signal 0\n", TaskId::MAX).as_bytes()
        );
    }

    #[test]
    fn taking_the_records_removes_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(take(dir.path()).expect("no file").is_empty());
        std::fs::write(path(dir.path()), "task 3 signal 11\n").expect("write");
        let blames = take(dir.path()).expect("read");
        assert_eq!(blames[0].task, 3);
        assert_eq!(blames[0].signal_name(), "SIGSEGV");
        assert!(!path(dir.path()).exists());
    }
}
