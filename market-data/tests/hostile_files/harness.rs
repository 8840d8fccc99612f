//! The guarded read every generated case goes through: the reader runs on its
//! own thread inside `catch_unwind`, under a time limit, with the bytes that
//! thread allocates counted by this test binary's global allocator; the
//! outcome is checked against the properties (no panic, no hang, memory
//! bounded, a refusal names the file, what is accepted is valid) and tallied
//! for the summary line the long run (`scripts/fuzz-inputs.sh`) reports.

use proptest::test_runner::{Config, TestCaseError};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tli_data::contracts::ContractBook;
use tli_data::features::{build_annotated_dataset, FeatureConfig};
use tli_data::{read_bars, BarTable};

/// Cases per property in CI; `PROPTEST_CASES` overrides it (the long run).
const CI_CASES: u32 = 48;
/// One read may take at most this long.
pub const TIME_LIMIT: Duration = Duration::from_secs(10);
/// Slack for fixed buffers (read buffers, zstd windows, Parquet page buffers).
const SLACK_BYTES: usize = 64 << 20;

/// The memory one read of a `file_len`-byte file may hold at its peak.
pub fn memory_bound(file_len: usize) -> usize {
    file_len.saturating_mul(64).saturating_add(SLACK_BYTES)
}

/// The proptest configuration of every property here.
pub fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CASES);
    Config {
        cases,
        // Failures become plain regression tests in main.rs, not files in the tree.
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    }
}

// ----- counting allocator ----------------------------------------------------

/// Counts the bytes live on a thread that asked for it ([`meter_start`]).
/// Per thread, so the other tests running in parallel do not count.
pub struct Counting;

struct Meter {
    on: Cell<bool>,
    live: Cell<usize>,
    peak: Cell<usize>,
}

thread_local! {
    // Const-initialized and without a destructor: usable inside the allocator.
    static METER: Meter = const {
        Meter { on: Cell::new(false), live: Cell::new(0), peak: Cell::new(0) }
    };
}

/// Far above any bound here: a read that holds this much is stopped before
/// it takes the machine (and the other tests on it) down with it.
const HARD_CAP: usize = 4 << 30;

fn note_alloc(size: usize) {
    let _ = METER.try_with(|m| {
        if m.on.get() {
            let live = m.live.get().saturating_add(size);
            m.live.set(live);
            m.peak.set(m.peak.get().max(live));
            if live > HARD_CAP {
                use std::io::Write;
                // No allocation here: a fixed message, then abort.
                let _ = std::io::stderr().write_all(
                    b"hostile_files: one read holds more than 4 GiB; aborting \
                      (HOSTILE_LAST_CASE_DIR keeps the case)\n",
                );
                std::process::abort();
            }
        }
    });
}

fn note_free(size: usize) {
    let _ = METER.try_with(|m| {
        if m.on.get() {
            m.live.set(m.live.get().saturating_sub(size));
        }
    });
}

// SAFETY: every call is passed on unchanged to the system allocator; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note_free(layout.size());
        // SAFETY: `ptr` came from this allocator, i.e. from the system allocator, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; `new_size` is the caller's, checked by the caller.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note_free(layout.size());
            note_alloc(new_size);
        }
        p
    }
}

fn meter_start() {
    METER.with(|m| {
        m.live.set(0);
        m.peak.set(0);
        m.on.set(true);
    });
}

/// The peak so far (the meter keeps counting, for [`HARD_CAP`]).
fn meter_peak() -> usize {
    METER.with(|m| m.peak.get())
}

fn meter_stop() {
    METER.with(|m| m.on.set(false));
}

// ----- the guarded read -------------------------------------------------------

/// Reads that have not answered within [`TIME_LIMIT`] (their threads run on).
static HUNG: AtomicUsize = AtomicUsize::new(0);

/// The name of the threads reads run on.
const READER_THREAD: &str = "hostile-read";

/// What one read came to.
pub enum Outcome {
    /// Accepted (and found valid again).
    Read { bars: usize },
    /// Refused, with the error's text.
    Refused(String),
}

/// What a thread reports back: the outcome (or the panic), the peak bytes, the time.
type Report = (Result<Outcome, String>, usize, Duration);

/// Reads `path` with [`read_bars`] under the guards and checks the
/// properties; an accepted table is validated again and fed through the
/// feature pipeline (the host's next step), which must not panic either.
pub fn read_checked(path: &Path, stats: &Stats) -> Result<Outcome, TestCaseError> {
    let file_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) as usize;
    let (tx, rx) = mpsc::channel::<Report>();
    let owned = path.to_path_buf();
    std::thread::Builder::new()
        .name(READER_THREAD.into())
        .spawn(move || {
            let started = Instant::now();
            meter_start();
            let read = std::panic::catch_unwind(|| read_bars(&owned));
            let peak = meter_peak();
            let elapsed = started.elapsed();
            let outcome = match read {
                Err(panic) => Err(panic_text(&panic)),
                Ok(Err(e)) => Ok(Outcome::Refused(e.to_string())),
                Ok(Ok(table)) => std::panic::catch_unwind(|| after_read(&owned, &table))
                    .map_err(|panic| format!("after the read: {}", panic_text(&panic)))
                    .and_then(|checked| checked.map(|()| Outcome::Read { bars: table.len() })),
            };
            meter_stop();
            let _ = tx.send((outcome, peak, elapsed));
        })
        .map_err(|e| TestCaseError::fail(format!("cannot start a reader thread: {e}")))?;
    let (outcome, peak, elapsed) = match rx.recv_timeout(TIME_LIMIT) {
        Ok(report) => report,
        Err(_) => {
            stats.hangs.set(stats.hangs.get() + 1);
            // A hung read keeps its thread; while proptest shrinks, a few may
            // pile up, but not enough to take the machine's memory or CPUs.
            if HUNG.fetch_add(1, Ordering::SeqCst) >= 8 {
                eprintln!("hostile_files: 8 reads hang at once; aborting (last: {path:?})");
                std::process::abort();
            }
            return Err(TestCaseError::fail(format!(
                "{}: no answer within {TIME_LIMIT:?} (a hang)",
                path.display()
            )));
        }
    };
    stats.note(file_len, peak, elapsed);
    let outcome = outcome.map_err(|panic| {
        stats.panics.set(stats.panics.get() + 1);
        TestCaseError::fail(format!("{}: panicked: {panic}", path.display()))
    })?;
    if peak > memory_bound(file_len) {
        return Err(TestCaseError::fail(format!(
            "{}: the read of a {file_len}-byte file allocated {peak} bytes at its peak (bound {})",
            path.display(),
            memory_bound(file_len)
        )));
    }
    match &outcome {
        Outcome::Read { .. } => stats.read.set(stats.read.get() + 1),
        Outcome::Refused(message) => {
            stats.refused.set(stats.refused.get() + 1);
            check_refusal(path, message)?;
        }
    }
    Ok(outcome)
}

/// A refusal names the file and says something after it.
pub fn check_refusal(path: &Path, message: &str) -> Result<(), TestCaseError> {
    let name = path.display().to_string();
    let Some(at) = message.find(&name) else {
        return Err(TestCaseError::fail(format!(
            "refusal does not name the file {name}: {message}"
        )));
    };
    let rest = message[at + name.len()..].trim_start_matches([':', ' ']);
    if rest.len() < 8 {
        return Err(TestCaseError::fail(format!(
            "refusal names the file but not the problem: {message}"
        )));
    }
    // A message is for people: a few kilobytes at most.
    if message.len() > 4096 {
        return Err(TestCaseError::fail(format!(
            "refusal is {} bytes long: {}…",
            message.len(),
            message.chars().take(300).collect::<String>()
        )));
    }
    Ok(())
}

/// What the host does next with an accepted table must not panic, and the
/// table must pass the checks every reader promises.
fn after_read(path: &Path, table: &BarTable) -> Result<(), String> {
    table
        .validate(path)
        .map_err(|e| format!("accepted a table that fails validation: {e}"))?;
    let _ = table.gaps();
    let book = ContractBook::builtin();
    let contract = book.lookup("ES").map_err(|e| e.to_string())?;
    // Refusing is fine (too few bars); panicking is not.
    let _ = build_annotated_dataset(table, contract, &FeatureConfig::default());
    Ok(())
}

/// A reader's panic is reported as the case's failure (with its message);
/// the default hook's message and backtrace for each one would drown the
/// summary, so it is kept for the other threads only.
pub fn quiet_reader_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() != Some(READER_THREAD) {
                default(info);
            }
        }));
    });
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

// ----- figures ----------------------------------------------------------------

/// Tallies of one property, printed as one line at its end.
#[derive(Default)]
pub struct Stats {
    pub cases: Cell<u64>,
    pub read: Cell<u64>,
    pub refused: Cell<u64>,
    pub panics: Cell<u64>,
    pub hangs: Cell<u64>,
    /// Largest peak and the largest share of the bound any read used.
    peak: Cell<usize>,
    budget_share: Cell<f64>,
    slowest: Cell<Duration>,
}

impl Stats {
    fn note(&self, file_len: usize, peak: usize, elapsed: Duration) {
        self.cases.set(self.cases.get() + 1);
        self.peak.set(self.peak.get().max(peak));
        let share = peak as f64 / memory_bound(file_len) as f64;
        self.budget_share.set(self.budget_share.get().max(share));
        self.slowest.set(self.slowest.get().max(elapsed));
    }

    /// The summary line `scripts/fuzz-inputs.sh` collects.
    pub fn print(&self, name: &str) {
        println!(
            "hostile-inputs {name}: cases {} read {} refused {} panics {} hangs {} \
             peak-alloc {:.1} MiB ({:.1}% of bound) slowest {} ms",
            self.cases.get(),
            self.read.get(),
            self.refused.get(),
            self.panics.get(),
            self.hangs.get(),
            self.peak.get() as f64 / f64::from(1 << 20),
            100.0 * self.budget_share.get(),
            self.slowest.get().as_millis()
        );
    }
}
