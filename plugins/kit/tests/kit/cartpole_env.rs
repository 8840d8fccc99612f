//! CartPole-v1 against reference values computed independently of this crate.
//!
//! Reference numbers come from a 12-line Python transcription of Gymnasium's
//! `CartPoleEnv.step` equations (python3 3.11, `math.sin`/`math.cos`, floats),
//! run once and pasted here; they are not produced by the Rust code under test.

use tli_plugin_kit::env::cartpole::{self, CartPole, State, OBS_DIM};
use tli_plugin_kit::env::VecCartPole;

fn assert_state(got: State, want: [f64; 4]) {
    for k in 0..4 {
        assert!(
            (got[k] - want[k]).abs() < 1e-12,
            "component {k}: got {got:?}, want {want:?}"
        );
    }
}

#[test]
fn constants_are_gymnasiums() {
    assert_eq!(cartpole::THETA_THRESHOLD, 0.20943951023931953);
    assert_eq!(cartpole::TOTAL_MASS, 1.1);
    assert_eq!(cartpole::POLEMASS_LENGTH, 0.05);
}

#[test]
fn one_step_matches_published_equations() {
    let s = [0.01, 0.02, 0.03, 0.04];
    let (left, done) = CartPole::step_from(s, 0).unwrap();
    assert!(!done);
    assert_state(
        left,
        [0.0104, -0.17553901710278938, 0.0308, 0.34199522377603914],
    );
    let (right, done) = CartPole::step_from(s, 1).unwrap();
    assert!(!done);
    assert_state(
        right,
        [0.0104, 0.21467919574755523, 0.0308, -0.2430687179600081],
    );
}

#[test]
fn more_independent_vectors() {
    // python3: step((-1.2, 0.5, -0.15, 1.1), 1), step((2.3, -1.7, 0.19, -2.5), 0),
    // step((0.3, -0.4, 0.1, -0.6), 1) with the transcription described above.
    let cases: [(State, u32, [f64; 4]); 3] = [
        (
            [-1.2, 0.5, -0.15, 1.1],
            1,
            [-1.19, 0.6967431530539726, -0.128, 0.7642642797701935],
        ),
        (
            [2.3, -1.7, 0.19, -2.5],
            0,
            [2.266, -1.8961183082385564, 0.14, -2.155591970965464],
        ),
        (
            [0.3, -0.4, 0.1, -0.6],
            1,
            [
                0.292,
                -0.20640877038081423,
                0.08800000000000001,
                -0.8595850952544094,
            ],
        ),
    ];
    for (s, a, want) in cases {
        let (got, done) = CartPole::step_from(s, a).unwrap();
        assert!(!done, "{s:?}");
        assert_state(got, want);
    }
    // python3: 20 steps from all zeros with actions 0, 1, 0, 1, …
    let mut s = [0.0; 4];
    for i in 0..20 {
        s = CartPole::step_from(s, i % 2).unwrap().0;
    }
    assert_state(
        s,
        [
            -0.0399708163987961,
            -0.0087012987975644,
            0.07947813973730947,
            0.19252484806683934,
        ],
    );
}

#[test]
fn pushing_right_from_rest_tips_the_pole_left_and_ends_after_nine_steps() {
    let mut s = [0.0; 4];
    let mut steps = 0;
    loop {
        let (next, done) = CartPole::step_from(s, 1).unwrap();
        s = next;
        steps += 1;
        if done {
            break;
        }
        assert!(steps < 100);
    }
    assert_eq!(steps, 9);
    // The cart accelerates right, so the pole falls left: theta goes negative.
    assert!((s[2] - (-0.21518604988500967)).abs() < 1e-9, "{s:?}");
    assert!(s[2] < -cartpole::THETA_THRESHOLD && s[0] > 0.0);
}

#[test]
fn invalid_actions_are_errors_and_move_nothing() {
    let e = CartPole::step_from([0.0; 4], 2).unwrap_err();
    assert!(e.message.contains("action 2"), "{e}");
    let mut one = CartPole::new(1);
    let before = one.clone();
    assert!(one.step(7).is_err());
    assert_eq!(one, before);

    let mut v = VecCartPole::new(3, 1).unwrap();
    let before = v.clone();
    let (mut obs, mut r, mut te, mut tr) = (vec![0.0; 12], vec![0.0; 3], [false; 3], [false; 3]);
    let e = v
        .step(&[1, 0, 5], &mut obs, &mut r, &mut te, &mut tr)
        .unwrap_err();
    assert!(e.message.contains("environment 2"), "{e}");
    assert!(v.step(&[1, 0], &mut obs, &mut r, &mut te, &mut tr).is_err());
    assert!(v
        .step(&[1, 0, 1], &mut obs[..8], &mut r, &mut te, &mut tr)
        .is_err());
    assert_eq!(v, before);
    assert!(VecCartPole::new(0, 1).is_err());
}

/// A linear bang-bang controller that balances for 500 steps.
fn balance(s: &[f32]) -> u32 {
    u32::from(s[0] + 1.5 * s[1] + 18.0 * s[2] + 3.0 * s[3] > 0.0)
}

#[test]
fn truncates_at_500_steps() {
    let mut env = CartPole::new(3);
    let mut obs = env.observation();
    for step in 1..=500 {
        let out = env.step(balance(&obs)).unwrap();
        assert!(!out.terminated, "fell at step {step}");
        assert_eq!(out.truncated, step == 500, "step {step}");
        assert_eq!(out.reward, 1.0);
        obs = out.observation;
    }
    assert!(env.step(1).is_err(), "a finished episode needs reset()");
    env.reset();
    assert_eq!(env.elapsed_steps(), 0);

    let n = 4;
    let mut v = VecCartPole::new(n, 9).unwrap();
    let mut obs = vec![0.0; n * OBS_DIM];
    v.observe(&mut obs).unwrap();
    let (mut r, mut te, mut tr) = (vec![0.0; n], vec![false; n], vec![false; n]);
    for step in 1..=500 {
        let acts: Vec<u32> = obs.chunks(OBS_DIM).map(balance).collect();
        v.step(&acts, &mut obs, &mut r, &mut te, &mut tr).unwrap();
        assert!(te.iter().all(|t| !t));
        assert!(tr.iter().all(|&t| t == (step == 500)), "step {step}");
    }
    let eps: Vec<_> = v.drain_completed().collect();
    assert_eq!(eps.len(), n);
    for (i, e) in eps.iter().enumerate() {
        assert_eq!(
            (e.env, e.length, e.episode_return, e.terminated),
            (i, 500, 500.0, false)
        );
    }
    assert!(v.running_lengths().iter().all(|&l| l == 0));
}

#[test]
fn resets_are_within_bounds_and_auto_reset_keeps_the_final_observation() {
    let n = 8;
    let mut v = VecCartPole::new(n, 5).unwrap();
    let mut obs = vec![0.0; n * OBS_DIM];
    let (mut r, mut te, mut tr) = (vec![0.0; n], vec![false; n], vec![false; n]);
    let (mut dones, mut neg, mut pos) = (0, 0, 0);
    for _ in 0..2000 {
        v.step(&vec![1; n], &mut obs, &mut r, &mut te, &mut tr)
            .unwrap();
        for i in 0..n {
            if te[i] {
                dones += 1;
                let fin = &v.final_observations()[i * 4..i * 4 + 4];
                assert!(fin[2] < -0.2094 || fin[0].abs() > 2.4, "{fin:?}");
                let new = &obs[i * 4..i * 4 + 4];
                for &x in new {
                    assert!((-0.05..0.05).contains(&x), "{new:?}");
                    if x < 0.0 {
                        neg += 1
                    } else {
                        pos += 1
                    }
                }
                assert_eq!(v.running_lengths()[i], 0);
            }
        }
    }
    assert!(dones > 100 && neg > 50 && pos > 50, "{dones} {neg} {pos}");
    let eps: Vec<_> = v.drain_completed().collect();
    assert_eq!(eps.len(), dones);
    assert!(eps
        .iter()
        .all(|e| e.terminated && e.episode_return == e.length as f64));
    assert_eq!(v.drain_completed().count(), 0);
}

#[test]
fn same_seed_same_run_and_env_zero_matches_the_single_env() {
    let n = 5;
    let run = |seed: u64| {
        let mut v = VecCartPole::new(n, seed).unwrap();
        let mut obs = vec![0.0; n * OBS_DIM];
        let (mut r, mut te, mut tr) = (vec![0.0; n], vec![false; n], vec![false; n]);
        let mut trace = Vec::new();
        for k in 0..300u32 {
            let acts: Vec<u32> = (0..n as u32).map(|i| (k * 7 + i * 3) % 5 % 2).collect();
            v.step(&acts, &mut obs, &mut r, &mut te, &mut tr).unwrap();
            trace.extend_from_slice(&obs);
        }
        trace
    };
    assert_eq!(run(11), run(11));
    assert_ne!(run(11), run(12));

    let single = CartPole::new(11);
    let v = VecCartPole::new(n, 11).unwrap();
    assert_eq!(v.states()[0], single.state());
    assert_ne!(v.states()[1], single.state());
}

#[test]
fn serde_round_trip_continues_identically() {
    let n = 6;
    let mut a = VecCartPole::new(n, 21).unwrap();
    let mut obs = vec![0.0; n * OBS_DIM];
    let (mut r, mut te, mut tr) = (vec![0.0; n], vec![false; n], vec![false; n]);
    let acts = |k: usize| -> Vec<u32> {
        (0..n)
            .map(|i| u32::from((k + i).is_multiple_of(3)))
            .collect()
    };
    for k in 0..137 {
        a.step(&acts(k), &mut obs, &mut r, &mut te, &mut tr)
            .unwrap();
        // Every intermediate state survives JSON bit for bit.
        let back: VecCartPole = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a, "step {k}");
    }
    let json = serde_json::to_string(&a).unwrap();
    let mut b: VecCartPole = serde_json::from_str(&json).unwrap();
    assert_eq!(a, b);
    let mut obs_b = obs.clone();
    let (mut r_b, mut te_b, mut tr_b) = (r.clone(), te.clone(), tr.clone());
    for k in 137..1000 {
        a.step(&acts(k), &mut obs, &mut r, &mut te, &mut tr)
            .unwrap();
        b.step(&acts(k), &mut obs_b, &mut r_b, &mut te_b, &mut tr_b)
            .unwrap();
        assert_eq!(
            (&obs, &r, &te, &tr),
            (&obs_b, &r_b, &te_b, &tr_b),
            "step {k}"
        );
    }
    assert_eq!(a.final_observations(), b.final_observations());
    assert!(a.drain_completed().eq(b.drain_completed()));

    let mut one = CartPole::new(4);
    one.step(1).unwrap();
    let mut two: CartPole = serde_json::from_str(&serde_json::to_string(&one).unwrap()).unwrap();
    for k in 0..5 {
        assert_eq!(one.step(k % 2).unwrap(), two.step(k % 2).unwrap());
    }

    let broken = json.replacen("\"lengths\":[", "\"lengths\":[3,", 1);
    let err = serde_json::from_str::<VecCartPole>(&broken).unwrap_err();
    assert!(err.to_string().contains("inconsistent"), "{err}");
}
