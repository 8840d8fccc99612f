//! The vectorized trading environment: hand-computed rewards, observations,
//! split boundaries, errors, determinism and checkpoints.

// Expected values are written as the explicit hand arithmetic (`-1.0 * 50.0 * …`).
#![allow(clippy::neg_multiply, clippy::identity_op, clippy::erasing_op)]

use tli_plugin_api::{ContractTerms, Dataset, SplitBounds};
use tli_plugin_kit::data::Split;
use tli_plugin_kit::env::{TradingConfig, TradingState, VecTradingEnv};
use tli_plugin_kit::metrics::{evaluate_strategy, ewma_volatility, CostTerms};

fn es() -> ContractTerms {
    ContractTerms {
        tick_size: 0.25,
        point_value: 50.0,
        ..ContractTerms::default()
    }
}

/// One environment over `close`, one feature per row equal to the row index.
fn tiny(close: &[f64], config: TradingConfig) -> VecTradingEnv {
    let features: Vec<f32> = (0..close.len()).map(|i| i as f32).collect();
    VecTradingEnv::from_slices(&features, 1, close, &es(), config, 1, 0).unwrap()
}

#[test]
fn hand_computed_rewards_with_costs() {
    let close = [100.0, 101.0, 99.0, 102.0, 102.5, 103.0];
    let config = TradingConfig {
        window: 1,
        episode_len: 5,
        commission_per_contract: 2.0,
        slippage_ticks: 1.0,
        ..TradingConfig::default()
    };
    let mut env = tiny(&close, config);
    let cost = 2.0 + 1.0 * 0.25 * 50.0;
    assert_eq!(env.cost_per_contract(), cost);
    let mut obs = [0f32; 2];
    env.observe(&mut obs).unwrap();
    assert_eq!(obs, [0.0, 0.0], "starts at row 0, flat");

    // flat → long → short → short → flat (actions: 0 short, 1 flat, 2 long).
    let actions = [1u32, 2, 0, 0, 1];
    let expected = [
        0.0 * 50.0 * (101.0 - 100.0) - cost * 0.0,
        1.0 * 50.0 * (99.0 - 101.0) - cost * 1.0,
        -1.0 * 50.0 * (102.0 - 99.0) - cost * 2.0,
        -1.0 * 50.0 * (102.5 - 102.0) - cost * 0.0,
        0.0 * 50.0 * (103.0 - 102.5) - cost * 1.0,
    ];
    let positions_after = [0.0f32, 1.0, -1.0, -1.0, 0.0];
    let (mut r, mut d) = ([0f32], [false]);
    let mut cumulative = 0.0;
    for k in 0..5 {
        env.step(&actions[k..k + 1], &mut obs, &mut r, &mut d)
            .unwrap();
        assert_eq!(r[0], expected[k] as f32, "step {k}");
        cumulative += expected[k];
        assert_eq!(d[0], k == 4, "step {k}");
        if k < 4 {
            let s = env.running().next().unwrap();
            assert!((s.pnl - cumulative).abs() < 1e-9, "step {k}: {s:?}");
            assert_eq!(obs, [(k + 1) as f32, positions_after[k]]);
        }
    }
    assert_eq!(expected, [0.0, -114.5, -179.0, -25.0, -14.5]);
    let done: Vec<_> = env.drain_completed().collect();
    assert_eq!(done.len(), 1);
    let e = done[0];
    assert!((e.pnl - cumulative).abs() < 1e-9);
    assert!((e.reward - cumulative).abs() < 1e-9);
    assert_eq!(
        (e.costs, e.turnover, e.position, e.steps),
        (cost * 4.0, 4, 0, 5)
    );
    // After the auto-reset it is flat at row 0 again; the final observation is row 5.
    assert_eq!(obs, [0.0, 0.0]);
    let mut fin = [0f32; 2];
    env.final_observation(0, &mut fin).unwrap();
    assert_eq!(fin, [5.0, 0.0]);

    // The metrics module computes the same P&L from prices and positions.
    let report = evaluate_strategy(
        &close,
        &[0.0, 1.0, -1.0, -1.0, 0.0],
        CostTerms::new(50.0, cost).unwrap(),
        252.0,
        None,
    )
    .unwrap();
    assert!((report.total_pnl - cumulative).abs() < 1e-9);
    assert_eq!(report.costs, Some(e.costs));
}

#[test]
fn several_contracts_and_vol_scaling_by_hand() {
    let close = [100.0, 101.0, 99.0, 102.0];
    let config = TradingConfig {
        window: 1,
        episode_len: 3,
        max_contracts: 2,
        commission_per_contract: 2.0,
        slippage_ticks: 1.0,
        vol_scaled: true,
        vol_halflife: 1.0,
        vol_floor: 1e-4,
    };
    let cost = 2.0 + 1.0 * 0.25 * 50.0;
    let mut env = tiny(&close, config);
    assert_eq!(env.num_actions(), 5);
    // λ = 0.5 for a half-life of 1 bar.
    let r1 = (101.0f64 / 100.0).ln();
    let r2 = (99.0f64 / 101.0).ln();
    let sigma = [0.0, r1.abs(), ((0.5 * r1 * r1 + r2 * r2) / 1.5).sqrt()];
    let vol = ewma_volatility(&close, 1.0).unwrap();
    for k in 0..3 {
        assert!((vol[k] - sigma[k]).abs() < 1e-15, "{vol:?}");
    }
    // Positions +2, +2, −1 (action a ↦ a − 2).
    let expected = [
        (2.0 * 50.0 * (101.0 - 100.0) - cost * 2.0) / (1e-4 * 100.0 * 50.0),
        (2.0 * 50.0 * (99.0 - 101.0) - cost * 0.0) / (sigma[1] * 101.0 * 50.0),
        (-1.0 * 50.0 * (102.0 - 99.0) - cost * 3.0) / (sigma[2] * 99.0 * 50.0),
    ];
    let (mut obs, mut r, mut d) = ([0f32; 2], [0f32], [false]);
    for (k, a) in [4u32, 4, 1].into_iter().enumerate() {
        env.step(&[a], &mut obs, &mut r, &mut d).unwrap();
        let rel = (r[0] as f64 - expected[k]).abs() / expected[k].abs();
        assert!(rel < 1e-6, "step {k}: {} vs {}", r[0], expected[k]);
        if k == 0 {
            assert_eq!(obs, [1.0, 1.0], "position 2 of max 2 reads 1.0");
        }
    }
    let e = env.drain_completed().next().unwrap();
    let sum: f64 = expected.iter().sum();
    assert!((e.reward - sum).abs() < 1e-9 * sum.abs(), "{e:?}");
    let pnl = 2.0 * 50.0 * 1.0 - cost * 2.0 + 2.0 * 50.0 * -2.0 - 50.0 * 3.0 - cost * 3.0;
    assert!((e.pnl - pnl).abs() < 1e-9, "P&L stays in currency: {e:?}");
    assert_eq!((e.turnover, e.position), (5, -1));
}

/// `rows` rows of 2 features (row·10 + column) and a random-walk close.
fn market(rows: usize) -> (Vec<f32>, Vec<f64>) {
    let features = (0..rows * 2)
        .map(|i| ((i / 2) * 10 + i % 2) as f32)
        .collect();
    let close = (0..rows)
        .map(|i| 1000.0 + ((i * 7919) % 13) as f64 - 6.0)
        .collect();
    (features, close)
}

fn actions_for(step: usize, n: usize, num_actions: u32) -> Vec<u32> {
    (0..n)
        .map(|i| ((step * 31 + i * 17) % 97) as u32 % num_actions)
        .collect()
}

#[test]
fn observations_are_the_window_rows_and_position() {
    let (features, close) = market(300);
    let config = TradingConfig {
        window: 3,
        episode_len: 20,
        max_contracts: 2,
        ..TradingConfig::default()
    };
    let n = 4;
    let mut env = VecTradingEnv::from_slices(&features, 2, &close, &es(), config, n, 3).unwrap();
    let d = env.obs_dim();
    assert_eq!(d, 3 * 2 + 1);
    let mut obs = vec![0f32; n * d];
    let (mut r, mut dn) = (vec![0f32; n], vec![false; n]);
    env.observe(&mut obs).unwrap();
    for step in 0..500 {
        for (i, s) in env.running().enumerate() {
            let t = s.start_row + s.steps;
            let o = &obs[i * d..(i + 1) * d];
            let want: Vec<f32> = (t - 2..=t)
                .flat_map(|row| [(row * 10) as f32, (row * 10 + 1) as f32])
                .collect();
            assert_eq!(&o[..6], &want[..], "step {step} env {i}");
            assert_eq!(o[6], s.position as f32 / 2.0);
        }
        env.step(&actions_for(step, n, 5), &mut obs, &mut r, &mut dn)
            .unwrap();
    }
}

fn dataset(close: Vec<f64>, features: Vec<f32>, splits: SplitBounds) -> Dataset {
    let rows = close.len();
    Dataset {
        timestamps: (0..rows as i64).collect(),
        features: features.into(),
        feature_names: vec!["a".into(), "b".into()].into(),
        splits,
        close: close.into(),
        contract: es(),
        periods_per_year: 252.0,
        ..Dataset::default()
    }
}

#[test]
fn episodes_stay_inside_their_split() {
    let rows = 1000;
    let (mut features, mut close) = market(rows);
    let splits = SplitBounds {
        train_end: 500,
        valid_start: 550,
        valid_end: 750,
        test_start: 800,
    };
    // Poison everything outside the validation split: reading it would show.
    for row in (0..550).chain(750..rows) {
        close[row] = 1e12 * (row % 2) as f64;
        features[row * 2] = f32::NAN;
    }
    let config = TradingConfig {
        window: 8,
        episode_len: 40,
        ..TradingConfig::default()
    };
    let n = 16;
    let ds = dataset(close, features, splits);
    let mut env =
        VecTradingEnv::from_dataset(&ds, Split::Validation, config.clone(), n, 1).unwrap();
    let d = env.obs_dim();
    let mut obs = vec![0f32; n * d];
    let (mut r, mut dn) = (vec![0f32; n], vec![false; n]);
    let mut starts = std::collections::BTreeSet::new();
    for step in 0..6000 {
        env.step(&actions_for(step, n, 3), &mut obs, &mut r, &mut dn)
            .unwrap();
        assert!(obs.iter().all(|x| x.is_finite()));
        assert!(r.iter().all(|x| x.abs() < 1000.0), "{r:?}");
        for e in env.drain_completed() {
            assert!(e.start_row >= 550 + 8 - 1, "{e:?}");
            assert!(
                e.start_row + 40 <= 749,
                "last close read is start + len: {e:?}"
            );
            starts.insert(e.start_row);
        }
    }
    // Every admissible start (557..=709) gets drawn.
    assert_eq!(starts.len(), 709 - 557 + 1);

    let short = TradingConfig {
        episode_len: 195,
        ..config
    };
    let err = VecTradingEnv::from_dataset(&ds, Split::Validation, short, 1, 1).unwrap_err();
    assert!(
        err.message.contains("Validation split") && err.message.contains("200 rows are too few"),
        "{err}"
    );
    // The training split is poisoned itself, so building on it is an error.
    let err =
        VecTradingEnv::from_dataset(&ds, Split::Train, TradingConfig::default(), 1, 1).unwrap_err();
    assert!(err.message.contains("not finite"), "{err}");
}

#[test]
fn bad_inputs_are_errors_that_name_the_problem() {
    let (features, close) = market(100);
    let cfg = |c: TradingConfig| VecTradingEnv::from_slices(&features, 2, &close, &es(), c, 2, 0);
    let small = TradingConfig {
        window: 4,
        episode_len: 10,
        ..TradingConfig::default()
    };
    let mut env = cfg(small.clone()).unwrap();
    let before = env.state();
    let (mut obs, mut r, mut d) = (vec![0f32; 2 * env.obs_dim()], [0f32; 2], [false; 2]);
    let err = env.step(&[1, 3], &mut obs, &mut r, &mut d).unwrap_err();
    assert!(err.message.contains("action 3 for environment 1"), "{err}");
    assert!(env.step(&[1], &mut obs, &mut r, &mut d).is_err());
    assert!(env.step(&[1, 1], &mut obs[1..], &mut r, &mut d).is_err());
    assert_eq!(env.state(), before, "nothing moved");

    for (c, needle) in [
        (
            TradingConfig {
                window: 0,
                ..small.clone()
            },
            "window",
        ),
        (
            TradingConfig {
                max_contracts: 0,
                ..small.clone()
            },
            "max_contracts",
        ),
        (
            TradingConfig {
                slippage_ticks: -1.0,
                ..small.clone()
            },
            "slippage_ticks",
        ),
        (
            TradingConfig {
                vol_halflife: 0.0,
                ..small.clone()
            },
            "vol_halflife",
        ),
        (
            TradingConfig {
                episode_len: 97,
                ..small.clone()
            },
            "too few",
        ),
    ] {
        let err = cfg(c).unwrap_err();
        assert!(err.message.contains(needle), "{needle}: {err}");
    }
    let err = TradingConfig::from_json(r#"{"window": 8, "windw": 3}"#).unwrap_err();
    assert!(err.message.contains("windw"), "{err}");
    let parsed = TradingConfig::from_json(r#"{"window": 8}"#).unwrap();
    assert_eq!(
        parsed,
        TradingConfig {
            window: 8,
            ..TradingConfig::default()
        }
    );
    let bad_terms = ContractTerms {
        tick_size: 0.0,
        ..es()
    };
    assert!(
        VecTradingEnv::from_slices(&features, 2, &close, &bad_terms, small.clone(), 1, 0).is_err()
    );
    assert!(VecTradingEnv::from_slices(&features[1..], 2, &close, &es(), small, 1, 0).is_err());
}

fn run(env: &mut VecTradingEnv, from: usize, to: usize) -> Vec<f32> {
    let n = env.num_envs();
    let mut obs = vec![0f32; n * env.obs_dim()];
    let (mut r, mut d) = (vec![0f32; n], vec![false; n]);
    let mut trace = Vec::new();
    for step in from..to {
        env.step(&actions_for(step, n, 3), &mut obs, &mut r, &mut d)
            .unwrap();
        trace.extend_from_slice(&r);
        trace.extend(d.iter().map(|&x| x as u8 as f32));
        trace.extend_from_slice(&obs);
    }
    trace
}

#[test]
fn same_seed_same_run_and_checkpoints_continue_identically() {
    let (features, close) = market(2000);
    let config = TradingConfig {
        window: 16,
        episode_len: 64,
        vol_scaled: true,
        ..TradingConfig::default()
    };
    let make = |seed| {
        VecTradingEnv::from_slices(&features, 2, &close, &es(), config.clone(), 8, seed).unwrap()
    };
    assert_eq!(run(&mut make(5), 0, 400), run(&mut make(5), 0, 400));
    assert_ne!(run(&mut make(5), 0, 400), run(&mut make(6), 0, 400));

    let mut a = make(5);
    run(&mut a, 0, 333);
    let json = serde_json::to_string(&a.state()).unwrap();
    let saved: TradingState = serde_json::from_str(&json).unwrap();
    assert_eq!(saved, a.state(), "P&L sums survive JSON bit for bit");
    let mut b = make(99);
    b.restore(serde_json::from_str::<TradingState>(&json).unwrap())
        .unwrap();
    assert_eq!(run(&mut a, 333, 1000), run(&mut b, 333, 1000));
    assert!(a.drain_completed().eq(b.drain_completed()));

    let other = TradingConfig {
        window: 8,
        ..config.clone()
    };
    let mut c = VecTradingEnv::from_slices(&features, 2, &close, &es(), other, 8, 5).unwrap();
    let err = c.restore(serde_json::from_str(&json).unwrap()).unwrap_err();
    assert!(err.message.contains("config"), "{err}");
    let mut d =
        VecTradingEnv::from_slices(&features, 2, &close, &es(), config.clone(), 4, 5).unwrap();
    assert!(d.restore(serde_json::from_str(&json).unwrap()).is_err());
    // Same shape, other prices (e.g. another split of the same length): refused.
    let mut moved = close.clone();
    moved[1000] += 0.25;
    let mut e = VecTradingEnv::from_slices(&features, 2, &moved, &es(), config, 8, 5).unwrap();
    let err = e.restore(serde_json::from_str(&json).unwrap()).unwrap_err();
    assert!(err.message.contains("data hash"), "{err}");
}
