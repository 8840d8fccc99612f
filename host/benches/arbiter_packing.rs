//! Benchmark of the memory arbiter's strategies (run with
//! `cargo bench -p tli-host --bench arbiter_packing`):
//!
//! 500 tasks are queued at time 0 on one device; their reservations are drawn
//! log-uniformly between 1 % and 60 % of the budget, their durations are
//! `100 × sqrt(size / budget) × U(0.5, 1.5)` time units (a seeded splitmix64,
//! `tli_testkit::SplitMix64`, as in the arbiter's property tests). An
//! event-driven simulation (select; advance to the next completion; release;
//! repeat) runs the queue under Sequential, Parallel(4)
//! and Auto and reports the time-averaged fraction of the budget reserved
//! (utilization), the makespan, the mean and maximum wait (start − submission)
//! and the largest skip count any task reached. Then the mean wall-clock time
//! of one `select()` over a queue of 1000 candidates on an idle device (the
//! arbiter cloned before each timed call, the clone not timed). Prints
//! Markdown tables for docs/benchmarks.md.

use std::hint::black_box;
use std::time::Instant;
use tli_host::orchestrator::arbiter::{Arbiter, Budget, Candidate, Strategy};
use tli_host::orchestrator::TaskId;
use tli_testkit::SplitMix64 as Rng;

const TASKS: usize = 500;
const BUDGET: u64 = 80 << 30; // 80 GiB
const SELECT_QUEUE: usize = 1000;
const SELECT_RUNS: usize = 2000;

struct Task {
    bytes: u64,
    duration: f64,
}

fn tasks(n: usize, seed: u64) -> Vec<Task> {
    let mut rng = Rng(seed);
    let (lo, hi) = (0.01_f64.ln(), 0.60_f64.ln());
    (0..n)
        .map(|_| {
            let frac = (lo + (hi - lo) * rng.unit()).exp();
            Task {
                bytes: (frac * BUDGET as f64) as u64,
                duration: 100.0 * frac.sqrt() * (0.5 + rng.unit()),
            }
        })
        .collect()
}

fn candidates(tasks: &[Task]) -> Vec<Candidate> {
    tasks
        .iter()
        .enumerate()
        .map(|(i, t)| Candidate {
            task: i as TaskId,
            priority: 0,
            order: i as u64,
            bytes: t.bytes,
        })
        .collect()
}

fn arbiter(strategy: Strategy) -> Arbiter {
    Arbiter::new(
        strategy,
        Budget {
            device: tli_plugin_api::Device::Cuda(0),
            total_bytes: BUDGET,
        },
        0.0,
    )
}

struct Outcome {
    utilization: f64,
    makespan: f64,
    mean_wait: f64,
    max_wait: f64,
    max_skips: u32,
    max_running: usize,
}

fn simulate(strategy: Strategy, tasks: &[Task]) -> Outcome {
    let mut a = arbiter(strategy);
    let mut queue = candidates(tasks);
    let mut ends: Vec<(TaskId, f64)> = Vec::new();
    let mut waits = Vec::with_capacity(tasks.len());
    let (mut now, mut reserved_time, mut max_skips, mut max_running) = (0.0, 0.0, 0, 0);
    loop {
        let started = a.select(&queue);
        for &t in &started {
            waits.push(now);
            ends.push((t, now + tasks[t as usize].duration));
        }
        queue.retain(|c| !started.contains(&c.task));
        assert!(a.reserved() <= BUDGET, "{strategy}: over budget");
        max_running = max_running.max(a.running_count());
        for c in &queue {
            max_skips = max_skips.max(a.skip_count(c.task));
        }
        if ends.is_empty() {
            assert!(queue.is_empty(), "{strategy}: stuck with nothing running");
            break;
        }
        let next = ends.iter().map(|&(_, e)| e).fold(f64::INFINITY, f64::min);
        reserved_time += a.reserved() as f64 * (next - now);
        now = next;
        ends.retain(|&(t, e)| {
            if e <= now {
                a.release(t);
                false
            } else {
                true
            }
        });
    }
    assert_eq!(waits.len(), tasks.len());
    Outcome {
        utilization: reserved_time / (BUDGET as f64 * now),
        makespan: now,
        mean_wait: waits.iter().sum::<f64>() / waits.len() as f64,
        max_wait: waits.iter().copied().fold(0.0, f64::max),
        max_skips,
        max_running,
    }
}

fn select_ns(strategy: Strategy, queue: &[Candidate]) -> f64 {
    let base = arbiter(strategy);
    // Warm up.
    for _ in 0..100 {
        black_box(base.clone().select(queue));
    }
    let mut total = std::time::Duration::ZERO;
    for _ in 0..SELECT_RUNS {
        let mut a = base.clone();
        let t0 = Instant::now();
        let started = a.select(black_box(queue));
        total += t0.elapsed();
        black_box(started);
    }
    total.as_nanos() as f64 / SELECT_RUNS as f64
}

fn main() {
    let strategies = [Strategy::Sequential, Strategy::Parallel(4), Strategy::Auto];
    let work = tasks(TASKS, 0x5EED_0001);
    let mean_size =
        work.iter().map(|t| t.bytes as f64).sum::<f64>() / work.len() as f64 / BUDGET as f64;
    println!(
        "{TASKS} tasks queued at t = 0, sizes log-uniform in [1 %, 60 %] of the budget \
         (mean {:.1} %), durations 100·sqrt(size)·U(0.5, 1.5)\n",
        mean_size * 100.0
    );
    println!(
        "| strategy | utilization | makespan | mean wait | max wait | max skips | max running |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for s in strategies {
        let o = simulate(s, &work);
        println!(
            "| {s} | {:.1} % | {:.0} | {:.0} | {:.0} | {} | {} |",
            o.utilization * 100.0,
            o.makespan,
            o.mean_wait,
            o.max_wait,
            o.max_skips,
            o.max_running
        );
    }

    let queue = candidates(&tasks(SELECT_QUEUE, 0x5EED_0002));
    println!("\nOne `select()` over {SELECT_QUEUE} candidates on an idle device (mean of {SELECT_RUNS}):\n");
    println!("| strategy | ns per select |");
    println!("|---|---:|");
    for s in strategies {
        println!("| {s} | {:.0} |", select_ns(s, &queue));
    }
}
