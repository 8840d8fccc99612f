//! Property and scenario tests of the memory arbiter
//! (`tli_host::orchestrator::arbiter`): budget never exceeded by admission,
//! strategy limits, Auto packing with bounded skips (no starvation),
//! priorities, re-measurement, error messages and strategy parsing.

use std::collections::{HashMap, HashSet};
use tli_host::orchestrator::arbiter::{
    Arbiter, Budget, Candidate, Remeasure, Strategy, StrategyParseError, DEFAULT_MAX_SKIPS,
};
use tli_host::orchestrator::TaskId;
use tli_testkit::SplitMix64 as Rng;

fn budget(total: u64) -> Budget {
    Budget {
        device: tli_plugin_api::Device::Cuda(0),
        total_bytes: total,
    }
}

fn cand(task: TaskId, bytes: u64) -> Candidate {
    Candidate {
        task,
        priority: 0,
        order: task as u64,
        bytes,
    }
}

/// The arbiter's ordering: priority desc, order asc, task asc.
fn rank(c: &Candidate) -> (i32, u64, TaskId) {
    (-c.priority, c.order, c.task)
}

fn assert_consistent(a: &Arbiter) {
    let sum: u64 = a.running().iter().map(|&(_, b)| b).sum();
    assert_eq!(
        a.reserved(),
        sum,
        "reserved is the sum of running reservations"
    );
    assert_eq!(a.free(), a.budget().total_bytes.saturating_sub(sum));
}

#[test]
fn eight_equal_tasks_two_at_a_time() {
    for strategy in [Strategy::Auto, Strategy::Parallel(4), Strategy::Parallel(2)] {
        let size = 1_000;
        let mut a = Arbiter::new(strategy, budget(2 * size), 0.0);
        let mut queue: Vec<Candidate> = (0..8).map(|t| cand(t, size)).collect();
        let mut finished = Vec::new();
        let mut started = Vec::new();
        let mut steps = 0;
        while finished.len() < 8 {
            steps += 1;
            assert!(steps <= 100, "{strategy}: no progress");
            let now = a.select(&queue);
            queue.retain(|c| !now.contains(&c.task));
            started.extend(now);
            assert!(a.reserved() <= a.budget().total_bytes, "{strategy}");
            assert_consistent(&a);
            let remaining = 8 - finished.len();
            if remaining >= 2 {
                assert_eq!(a.running_count(), 2, "{strategy}: step {steps}");
            } else {
                assert_eq!(a.running_count(), remaining, "{strategy}");
            }
            // Complete the oldest running task.
            let (oldest, _) = a.running()[0];
            a.release(oldest);
            finished.push(oldest);
            assert!(a.reserved() <= a.budget().total_bytes);
        }
        assert_eq!(finished, (0..8).collect::<Vec<_>>(), "{strategy}");
        assert_eq!(started, (0..8).collect::<Vec<_>>(), "{strategy}");
        assert_eq!(a.reserved(), 0);
        assert!(queue.is_empty());
    }
}

/// Random sizes and random completions; checks the strategy's count limit,
/// the budget, and that the limit is reached whenever enough is queued and
/// it fits.
fn random_run(strategy: Strategy, total: u64, max_size: u64, seed: u64) -> usize {
    let mut rng = Rng(seed);
    let mut a = Arbiter::new(strategy, budget(total), 0.0);
    let mut queue: Vec<Candidate> = (0..200).map(|t| cand(t, rng.range(1, max_size))).collect();
    let mut max_running = 0;
    let mut done = 0;
    while done < 200 {
        a.select(&queue);
        queue.retain(|c| !a.is_running(c.task));
        assert!(a.reserved() <= total);
        assert_consistent(&a);
        max_running = max_running.max(a.running_count());
        if let Some(limit) = strategy.max_running() {
            assert!(a.running_count() <= limit, "{strategy}");
            // Nothing else fits or the limit is reached.
            if a.running_count() < limit {
                if let Some(head) = queue.iter().min_by_key(|c| rank(c)) {
                    assert!(a.reserved() + head.bytes > total, "{strategy}: head fits");
                }
            }
        }
        let running = a.running();
        let (victim, _) = running[rng.range(0, running.len() as u64 - 1) as usize];
        a.release(victim);
        done += 1;
    }
    max_running
}

#[test]
fn sequential_never_runs_more_than_one() {
    for seed in 1..=5 {
        assert_eq!(random_run(Strategy::Sequential, 1 << 40, 1 << 30, seed), 1);
        assert_eq!(random_run(Strategy::Sequential, 100, 100, seed), 1);
    }
}

#[test]
fn parallel_three_never_runs_more_than_three() {
    for seed in 1..=5 {
        // A big budget: the count is the only limit, and it is reached.
        assert_eq!(random_run(Strategy::Parallel(3), 1 << 40, 1 << 30, seed), 3);
        // A tight budget: the budget limits too.
        assert!(random_run(Strategy::Parallel(3), 100, 60, seed) <= 3);
    }
}

#[test]
fn auto_packs_mixed_sizes_with_backfill() {
    let sizes = [6, 3, 3, 2, 8, 1];
    let queue: Vec<Candidate> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| cand(i as TaskId, s))
        .collect();

    // Auto: 6 + 3 fit, the second 3, the 2 and the 8 do not, the 1 fills up.
    let mut auto = Arbiter::new(Strategy::Auto, budget(10), 0.0);
    assert_eq!(auto.select(&queue), vec![0, 1, 5]);
    assert_eq!(auto.reserved(), 10);
    assert_eq!(auto.free(), 0);
    for passed in [2, 3, 4] {
        assert_eq!(
            auto.skip_count(passed),
            1,
            "task {passed} was passed over once"
        );
    }
    assert_eq!(auto.running(), vec![(0, 6), (1, 3), (5, 1)]);

    // Freeing the 6 lets the 3 and the 2 in (3 + 1 + 3 + 2 = 9); the 8 is
    // passed over again.
    auto.release(0);
    let rest: Vec<Candidate> = queue
        .iter()
        .copied()
        .filter(|c| !auto.is_running(c.task) && c.task != 0)
        .collect();
    assert_eq!(auto.select(&rest), vec![2, 3]);
    assert_eq!(auto.reserved(), 9);
    assert_eq!(auto.skip_count(4), 1, "nothing behind the 8 started");

    // Parallel and Sequential take the ordering strictly: no backfill.
    let mut par = Arbiter::new(Strategy::Parallel(10), budget(10), 0.0);
    assert_eq!(par.select(&queue), vec![0, 1]);
    let mut seq = Arbiter::new(Strategy::Sequential, budget(10), 0.0);
    assert_eq!(seq.select(&queue), vec![0]);
    assert_eq!(seq.select(&queue), Vec::<TaskId>::new(), "one at a time");
}

#[test]
fn big_head_is_not_starved_by_a_stream_of_small_tasks() {
    for max_skips in [0, 1, 3, 5] {
        let mut a = Arbiter::new(Strategy::Auto, budget(10), 0.0).with_max_skips(max_skips);
        // Two small tasks already running, then the big one, then a stream.
        let mut queue = vec![cand(0, 2), cand(1, 2)];
        assert_eq!(a.select(&queue), vec![0, 1]);
        queue.clear();
        queue.push(cand(2, 9));
        let mut next: TaskId = 3;
        let mut rounds = 0;
        let running_at_start = a.running_count() as u32;
        loop {
            // Small tasks keep arriving behind the big one.
            for _ in 0..2 {
                queue.push(cand(next, 1));
                next += 1;
            }
            let started = a.select(&queue);
            queue.retain(|c| !started.contains(&c.task));
            assert!(a.reserved() <= 10);
            assert!(a.skip_count(2) <= max_skips);
            if started.contains(&2) {
                break;
            }
            rounds += 1;
            // Complete the oldest running task.
            let (oldest, _) = a.running()[0];
            a.release(oldest);
            // Once the skips are spent, nothing may start behind it; small
            // tasks drain, one per round, until it fits.
            let bound = max_skips + running_at_start + 2 * (max_skips + 1);
            assert!(rounds <= bound, "max_skips {max_skips}: big task starved");
        }
        assert!(a.is_running(2));
    }
}

/// 1000 tasks of random sizes (and, optionally, random priorities) arrive
/// over time; running tasks end after random durations. An independent
/// observer counts, for every select, each queued task passed over while a
/// task ranked behind it started.
fn auto_simulation(seed: u64, priorities: bool) {
    const TASKS: i64 = 1000;
    let total: u64 = 1_000_000;
    let max_skips = DEFAULT_MAX_SKIPS;
    let mut rng = Rng(seed);
    let mut a = Arbiter::new(Strategy::Auto, budget(total), 0.0);
    let mut queue: Vec<Candidate> = Vec::new();
    let mut ends: HashMap<TaskId, u64> = HashMap::new(); // task → end round
    let mut passed: HashMap<TaskId, u32> = HashMap::new();
    let mut started_ever: HashSet<TaskId> = HashSet::new();
    let mut submitted: i64 = 0;
    let mut round: u64 = 0;
    let mut max_parallel = 0;
    while started_ever.len() < TASKS as usize || !ends.is_empty() {
        round += 1;
        assert!(round < 1_000_000, "seed {seed}: no progress");
        // Arrivals: 0..=3 tasks a round; sizes mostly small, some huge.
        for _ in 0..rng.range(0, 3) {
            if submitted == TASKS {
                break;
            }
            let bytes = match rng.range(0, 9) {
                0 => rng.range(total / 2, total), // 10 % are big
                _ => rng.range(1, total / 5),
            };
            queue.push(Candidate {
                task: submitted,
                priority: if priorities {
                    rng.range(0, 2) as i32
                } else {
                    0
                },
                order: submitted as u64,
                bytes,
            });
            submitted += 1;
        }

        let started = a.select(&queue);
        // (a) never over budget.
        assert!(a.reserved() <= total, "seed {seed}: over budget");
        assert_consistent(&a);
        // Independent skip count.
        if let Some(last) = started
            .iter()
            .map(|t| rank(queue.iter().find(|c| c.task == *t).expect("queued")))
            .max()
        {
            for c in &queue {
                if !started.contains(&c.task) && rank(c) < last {
                    *passed.entry(c.task).or_insert(0) += 1;
                }
            }
        }
        for t in &started {
            assert!(started_ever.insert(*t), "task {t} started twice");
            ends.insert(*t, round + rng.range(1, 8));
        }
        queue.retain(|c| !started.contains(&c.task));
        max_parallel = max_parallel.max(a.running_count());
        // (c) no task passed over more than max_skips times.
        for (t, n) in &passed {
            assert!(
                *n <= max_skips,
                "seed {seed}: task {t} passed over {n} times"
            );
            if !started_ever.contains(t) {
                assert_eq!(a.skip_count(*t), *n, "arbiter and observer agree");
            }
        }

        // Completions.
        let finished: Vec<TaskId> = ends
            .iter()
            .filter(|&(_, &end)| end <= round)
            .map(|(&t, _)| t)
            .collect();
        for t in finished {
            ends.remove(&t);
            a.release(t);
        }
    }
    // (b) every task started (and ended).
    assert_eq!(started_ever.len(), TASKS as usize);
    assert!(queue.is_empty());
    assert_eq!(a.reserved(), 0);
    assert!(
        max_parallel > 2,
        "packing happened ({max_parallel} at once)"
    );
    assert!(
        passed.values().any(|&n| n == max_skips),
        "the skip limit was exercised"
    );
}

#[test]
fn auto_random_simulation_never_starves_or_overflows() {
    for seed in [1, 42, 0xDEAD_BEEF, 7_777] {
        auto_simulation(seed, false);
    }
}

#[test]
fn auto_random_simulation_with_priorities() {
    for seed in [3, 99] {
        auto_simulation(seed, true);
    }
}

#[test]
fn higher_priority_starts_before_older_lower_priority() {
    for strategy in [Strategy::Auto, Strategy::Sequential, Strategy::Parallel(2)] {
        let mut a = Arbiter::new(strategy, budget(10), 0.0);
        let old_low = Candidate {
            task: 1,
            priority: 0,
            order: 1,
            bytes: 6,
        };
        let new_high = Candidate {
            task: 2,
            priority: 5,
            order: 2,
            bytes: 6,
        };
        let queue = [old_low, new_high];
        assert_eq!(a.select(&queue), vec![2], "{strategy}");
        a.release(2);
        assert_eq!(a.select(&queue[..1]), vec![1], "{strategy}");
    }
    // Equal priority: older first.
    let mut a = Arbiter::new(Strategy::Sequential, budget(10), 0.0);
    assert_eq!(a.select(&[cand(5, 1), cand(4, 1)]), vec![4]);
}

#[test]
fn margin_is_exact_and_rounds_up() {
    let a = Arbiter::new(Strategy::Auto, budget(1 << 40), 0.1);
    assert_eq!(a.with_margin(100), 110);
    assert_eq!(a.with_margin(1), 2);
    assert_eq!(a.with_margin(0), 0);
    assert_eq!(a.with_margin(1_000_000_000), 1_100_000_000);
    assert_eq!(a.with_margin(u64::MAX), u64::MAX);
    let none = Arbiter::new(Strategy::Auto, budget(1), -1.0);
    assert_eq!(none.with_margin(123), 123);
    let nan = Arbiter::new(Strategy::Auto, budget(1), f64::NAN);
    assert_eq!(nan.with_margin(123), 123);
}

#[test]
fn too_big_is_refused_with_both_sizes() {
    const GIB: u64 = 1 << 30;
    let a = Arbiter::new(Strategy::Auto, budget(2 * GIB), 0.1);
    let estimate = (2.9 * GIB as f64) as u64;
    let err = a.check_estimate(estimate).expect_err("too big");
    let msg = err.to_string();
    let needed = a.with_margin(estimate);
    assert_eq!(
        msg,
        format!(
            "needs 3.2 GiB ({needed} bytes: estimate 2.9 GiB + 10% margin) \
             but the cuda:0 budget is 2.0 GiB ({} bytes)",
            2 * GIB
        )
    );
    assert_eq!(err.needed, needed);
    assert_eq!(err.budget, 2 * GIB);

    let err = a.check_fits_alone(3 * GIB).expect_err("too big");
    let msg = err.to_string();
    assert!(
        msg.contains("3.0 GiB") && msg.contains(&(3 * GIB).to_string()),
        "{msg}"
    );
    assert!(
        msg.contains("2.0 GiB") && msg.contains(&(2 * GIB).to_string()),
        "{msg}"
    );
    assert!(
        msg.contains("10% margin") && msg.contains("cuda:0"),
        "{msg}"
    );

    assert!(
        a.check_fits_alone(2 * GIB).is_ok(),
        "exactly the budget fits"
    );
    assert_eq!(a.check_estimate(GIB), Ok(a.with_margin(GIB)));

    // Should one reach select anyway, it neither starts nor blocks.
    let mut a = Arbiter::new(Strategy::Parallel(2), budget(10), 0.0);
    assert_eq!(a.select(&[cand(0, 11), cand(1, 5)]), vec![1]);
}

#[test]
fn measured_shrink_lets_more_start_and_growth_blocks() {
    let mut a = Arbiter::new(Strategy::Auto, budget(10), 0.0);
    let queue = [cand(0, 4), cand(1, 4), cand(2, 4)];
    assert_eq!(a.select(&queue), vec![0, 1]);
    assert_eq!(
        a.select(&queue[2..]),
        Vec::<TaskId>::new(),
        "4 + 4 + 4 > 10"
    );

    // Task 0 turns out to need 1: the third fits.
    assert_eq!(
        a.update_measured(0, 1),
        Remeasure::WithinBudget {
            previous: 4,
            now: 1
        }
    );
    assert_eq!(a.reserved(), 5);
    assert_eq!(a.select(&queue[2..]), vec![2]);
    assert_eq!(a.reserved(), 9);

    // Task 1 grows to 8: kept, reported, nothing starts, not even 0 bytes.
    let r = a.update_measured(1, 8);
    assert_eq!(
        r,
        Remeasure::OverBudget {
            previous: 4,
            now: 8,
            over_by: 3
        }
    );
    assert!(r.to_string().contains("over budget by 3 B"), "{r}");
    assert_eq!(a.reserved(), 13);
    assert_eq!(a.free(), 0);
    assert_eq!(a.over_budget_by(), 3);
    assert!(a.running().contains(&(1, 8)));
    let small = [cand(3, 1), cand(4, 0)];
    assert_eq!(a.select(&small), Vec::<TaskId>::new(), "over budget");

    // Releasing task 2 (4) brings it back to 9: the 1 starts again.
    a.release(2);
    assert_eq!(a.over_budget_by(), 0);
    assert_eq!(a.select(&small), vec![3, 4]);
    assert_eq!(a.reserved(), 10);

    // Unknown task: nothing changes.
    assert_eq!(a.update_measured(99, 1), Remeasure::NotRunning);
    assert_eq!(a.reserved(), 10);

    // The margin applies to measurements too.
    let mut m = Arbiter::new(Strategy::Auto, budget(1000), 0.5);
    assert_eq!(m.select(&[cand(0, 300)]), vec![0]);
    assert_eq!(
        m.update_measured(0, 100),
        Remeasure::WithinBudget {
            previous: 300,
            now: 150
        }
    );
}

#[test]
fn release_and_select_edge_cases() {
    let mut a = Arbiter::new(Strategy::Auto, budget(10), 0.0);
    a.release(42); // unknown: no-op
    assert_eq!(a.reserved(), 0);
    assert_eq!(a.select(&[]), Vec::<TaskId>::new());
    assert_eq!(a.select(&[cand(0, 3)]), vec![0]);
    // Already running, or listed twice: reserved once.
    assert_eq!(a.select(&[cand(0, 3), cand(1, 3), cand(1, 3)]), vec![1]);
    assert_eq!(a.reserved(), 6);
    assert_eq!(a.running(), vec![(0, 3), (1, 3)]);
    a.release(0);
    a.release(0);
    assert_eq!(a.running(), vec![(1, 3)]);
    assert_eq!(a.reserved(), 3);
    assert_eq!(a.strategy(), Strategy::Auto);
    assert_eq!(a.budget().device.to_string(), "cuda:0");
    assert_eq!(a.max_skips(), DEFAULT_MAX_SKIPS);
}

#[test]
fn strategy_parsing() {
    assert_eq!("sequential".parse(), Ok(Strategy::Sequential));
    assert_eq!("SEQUENTIAL".parse(), Ok(Strategy::Sequential));
    assert_eq!(" Auto ".parse(), Ok(Strategy::Auto));
    assert_eq!("parallel:4".parse(), Ok(Strategy::Parallel(4)));
    assert_eq!("Parallel:16".parse(), Ok(Strategy::Parallel(16)));
    assert_eq!(
        "parallel:0".parse::<Strategy>(),
        Err(StrategyParseError::Zero)
    );
    for bad in [
        "parallel:x",
        "parallel",
        "parallel:",
        "parallel:-1",
        "parallel:1.5",
    ] {
        assert!(
            matches!(
                bad.parse::<Strategy>(),
                Err(StrategyParseError::BadCount(_))
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        "fifo".parse::<Strategy>(),
        Err(StrategyParseError::Unknown(_))
    ));
    assert!("parallel:0"
        .parse::<Strategy>()
        .unwrap_err()
        .to_string()
        .contains("at least 1"));
    for s in [Strategy::Sequential, Strategy::Parallel(4), Strategy::Auto] {
        assert_eq!(s.to_string().parse(), Ok(s), "Display round-trips");
    }
    assert_eq!(Strategy::Parallel(4).to_string(), "parallel:4");
}
