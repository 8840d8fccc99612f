//! Benchmark of reading DBN bar files (run with
//! `cargo bench -p tli-data --bench dbn_read`):
//!
//! 1,000,000 one-minute bars of one instrument (a deterministic random walk
//! on a 0.25 tick grid) are written as plain `.dbn` and as `.dbn.zst` into a
//! temporary directory; each is then read with `dbn_format::read` once to
//! warm up and five times timed. Prints a Markdown table (file size, median
//! read time, bars per second) for docs/benchmarks.md. Target: under 1 s per
//! million bars.

#[path = "../tests/data/fixtures.rs"]
mod fixtures;

use fixtures::MinuteWalk;
use std::path::Path;
use std::time::Instant;
use tli_data::{dbn_format, BarTable};

const BARS: usize = 1_000_000;
const RUNS: usize = 5;

/// Minute bars of a deterministic random walk on a 0.25 grid.
fn bars(n: usize) -> BarTable {
    MinuteWalk {
        symbol: "ESM4",
        start: "2020-01-02T00:00:00Z",
        seed: 0x2545_F491_4F6C_DD1D,
        price: 3000.0,
        floor: 100.0,
        max_volume: 2000,
    }
    .bars(n)
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
