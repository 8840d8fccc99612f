//! Benchmark of reading DBN bar files (run with
//! `cargo bench -p tli-host --bench dbn_read`):
//!
//! 1,000,000 one-minute bars of one instrument (a deterministic random walk
//! on a 0.25 tick grid) are written as plain `.dbn` and as `.dbn.zst` into a
//! temporary directory; each is then read with `dbn_format::read` once to
//! warm up and five times timed. Prints a Markdown table (file size, median
//! read time, bars per second) for docs/benchmarks.md. Target: under 1 s per
//! million bars.

use std::path::Path;
use std::time::Instant;
use tli_host::data::{dbn_format, timefmt, BarInterval, BarTable};

const BARS: usize = 1_000_000;
const RUNS: usize = 5;

/// A deterministic random walk on a 0.25 grid (xorshift64, no RNG crate).
fn bars(n: usize) -> BarTable {
    let mut t = BarTable::new("ESM4", BarInterval::Minute);
    let start = timefmt::parse("2020-01-02T00:00:00Z").expect("fixed date");
    let minute = 60 * timefmt::NANOS_PER_SECOND;
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut price = 3000.0_f64;
    for i in 0..n {
        let open = price;
        let close = (open + ((next() % 9) as f64 - 4.0) * 0.25).max(100.0);
        let high = open.max(close) + (next() % 4) as f64 * 0.25;
        let low = open.min(close) - (next() % 4) as f64 * 0.25;
        t.push(
            start + i as i64 * minute,
            open,
            high,
            low,
            close,
            1 + next() % 2000,
        );
        price = close;
    }
    t
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn time_read(path: &Path, expected: &BarTable) -> f64 {
    let warm = dbn_format::read(path).expect("warm-up read");
    assert_eq!(
        &warm,
        expected,
        "{} does not read back as written",
        path.display()
    );
    let times: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t0 = Instant::now();
            let table = dbn_format::read(path).expect("timed read");
            let elapsed = t0.elapsed().as_secs_f64();
            assert_eq!(table.len(), expected.len());
            elapsed
        })
        .collect();
    median(times)
}

fn main() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let table = bars(BARS);
    println!(
        "| file ({} one-minute bars) | size | read (median of {RUNS}) | bars/s |",
        BARS
    );
    println!("|---|---:|---:|---:|");
    for name in ["bars.dbn", "bars.dbn.zst"] {
        let path = dir.path().join(name);
        let t0 = Instant::now();
        dbn_format::write(&path, &table).expect("write");
        let write_s = t0.elapsed().as_secs_f64();
        let size = std::fs::metadata(&path).expect("written file").len();
        let read_s = time_read(&path, &table);
        println!(
            "| `{name}` | {:.1} MiB | {:.1} ms | {:.1} M |",
            size as f64 / (1024.0 * 1024.0),
            read_s * 1e3,
            BARS as f64 / read_s / 1e6
        );
        eprintln!("({name}: written in {:.0} ms)", write_s * 1e3);
    }
    // The share of the read spent in the final check.
    let validate_s = median(
        (0..RUNS)
            .map(|_| {
                let t0 = Instant::now();
                table.validate(Path::new("bars")).expect("valid bars");
                t0.elapsed().as_secs_f64()
            })
            .collect(),
    );
    println!();
    println!(
        "`BarTable::validate` alone on the same bars (part of every read): {:.1} ms",
        validate_s * 1e3
    );
}
