//! Unit tests of the arbiter's bookkeeping (its module is `arbiter.rs`).

use super::*;

#[test]
fn formats_bytes() {
    assert_eq!(format_bytes(0), "0 B");
    assert_eq!(format_bytes(1023), "1023 B");
    assert_eq!(format_bytes(1536), "1.5 KiB");
    assert_eq!(format_bytes(1024 * 1024 - 1), "1.0 MiB");
    assert_eq!(format_bytes(2 << 30), "2.0 GiB");
    assert_eq!(format_bytes(5000 << 30), "5000.0 GiB");
}

#[test]
fn the_memory_cap_is_the_largest_measurement_that_fits_alone() {
    let budget = Budget {
        device: Device::Cpu,
        total_bytes: 1_000_000,
    };
    let arbiter = Arbiter::new(Strategy::Auto, budget, 0.1);
    let cap = arbiter.memory_cap();
    assert!(arbiter.with_margin(cap) <= 1_000_000);
    assert!(arbiter.with_margin(cap + 1) > 1_000_000);
    assert_eq!(cap, 909_090);
}

#[test]
fn an_abandoned_task_keeps_its_bytes_but_not_its_place() {
    let budget = Budget {
        device: Device::Cpu,
        total_bytes: 100,
    };
    let mut arbiter = Arbiter::new(Strategy::Sequential, budget, 0.0);
    let c = |task, bytes| Candidate {
        task,
        priority: 0,
        order: task as u64,
        bytes,
    };
    assert_eq!(arbiter.select(&[c(1, 30)]), vec![1]);
    assert!(arbiter.select(&[c(2, 30)]).is_empty(), "one at a time");
    arbiter.abandon(1);
    assert_eq!(
        arbiter.select(&[c(2, 30)]),
        vec![2],
        "the stuck one lost its place"
    );
    assert_eq!(arbiter.reserved(), 60, "but not its bytes");
    assert!(arbiter.select(&[c(3, 30)]).is_empty());
    arbiter.release(1);
    arbiter.release(2);
    assert_eq!(arbiter.select(&[c(3, 30)]), vec![3]);
    assert!(
        arbiter.select(&[c(4, 30)]).is_empty(),
        "abandonment ended with release"
    );
}

#[test]
fn an_auto_limit_caps_auto_only() {
    let budget = Budget {
        device: Device::Cpu,
        total_bytes: 1_000,
    };
    let c = |task| Candidate {
        task,
        priority: 0,
        order: task as u64,
        bytes: 10,
    };
    let queue: Vec<Candidate> = (1..=6).map(c).collect();
    let mut auto = Arbiter::new(Strategy::Auto, budget.clone(), 0.0).with_auto_limit(2);
    assert_eq!(auto.max_running(), Some(2));
    assert_eq!(auto.select(&queue), vec![1, 2]);
    assert!(auto.select(&queue).is_empty(), "two at once");
    auto.release(1);
    assert_eq!(auto.select(&queue[2..]), vec![3]);
    let mut unlimited = Arbiter::new(Strategy::Auto, budget.clone(), 0.0);
    assert_eq!(unlimited.select(&queue).len(), 6, "as many as fit");
    let mut parallel = Arbiter::new(Strategy::Parallel(4), budget, 0.0).with_auto_limit(2);
    assert_eq!(parallel.select(&queue).len(), 4, "an explicit count wins");
}

#[test]
fn holds_take_memory_from_tasks_but_no_place_in_the_count() {
    let budget = Budget {
        device: Device::Cpu,
        total_bytes: 100,
    };
    let c = |task, bytes| Candidate {
        task,
        priority: 0,
        order: task as u64,
        bytes,
    };
    let mut arbiter = Arbiter::new(Strategy::Sequential, budget, 0.0);
    arbiter.hold(HoldId(1), 60).unwrap();
    assert_eq!(arbiter.reserved(), 60);
    // A held model does not count as the sequential strategy's one task...
    assert_eq!(arbiter.select(&[c(1, 40)]), vec![1]);
    // ...but its bytes do: nothing more fits, and a second hold is refused, not queued.
    let refused = arbiter.hold(HoldId(2), 1).unwrap_err();
    assert_eq!(
        (refused.needed, refused.free, refused.reserved),
        (1, 0, 100)
    );
    assert!(refused.to_string().contains("unload a model"), "{refused}");
    assert!(arbiter.hold(HoldId(1), 0).is_err(), "an id is held once");
    arbiter.release(1);
    assert!(arbiter.select(&[c(2, 41)]).is_empty(), "41 + 60 > 100");
    // A re-measured hold replaces its bytes (with the margin, 0 here).
    assert!(matches!(
        arbiter.update_hold(HoldId(1), 50),
        Remeasure::WithinBudget {
            previous: 60,
            now: 50
        }
    ));
    assert_eq!(arbiter.select(&[c(2, 41)]), vec![2]);
    assert_eq!(arbiter.holds(), vec![(HoldId(1), 50)]);
    arbiter.release_hold(HoldId(1));
    arbiter.release_hold(HoldId(9));
    assert_eq!(arbiter.reserved(), 41);
    assert!(arbiter.holds().is_empty());
}

#[test]
fn a_hold_is_refused_while_the_device_is_over_budget() {
    let budget = Budget {
        device: Device::Cpu,
        total_bytes: 100,
    };
    let mut arbiter = Arbiter::new(Strategy::Auto, budget, 0.0);
    arbiter.hold(HoldId(1), 50).unwrap();
    assert!(matches!(
        arbiter.update_hold(HoldId(1), 120),
        Remeasure::OverBudget { over_by: 20, .. }
    ));
    assert!(
        arbiter.hold(HoldId(2), 0).is_err(),
        "over budget: nothing more"
    );
    assert_eq!(arbiter.free(), 0);
}
