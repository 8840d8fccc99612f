//! [`super::ManualTd`] against autograd on the same minibatches, on both of
//! its paths.

use super::cpu::first_argmax;
use super::*;
use crate::{qnet, replay::Replay};
use tli_plugin_kit::{adam::AdamConfig, rng::Rng};

struct Case {
    online: QNet,
    target: QNet,
    optimizer: FlatAdamW,
    batch: MinibatchTensors,
}

/// Two networks with different weights, a replay of random transitions
/// (some terminal, rewards large enough that some TD errors pass δ) and
/// one minibatch drawn from it.
fn case(hidden: &[usize], dueling: bool, seed: u64) -> Case {
    let (obs, actions, batch_size) = (5, 3, 16);
    let layout = qnet::layout(obs, hidden, actions, dueling);
    let mut rng = Rng::new(seed);
    let online = QNet::new(&layout, &mut rng.fork(1), Device::Cpu).unwrap();
    let target = QNet::new(&layout, &mut rng.fork(2), Device::Cpu).unwrap();
    let optimizer = FlatAdamW::new(AdamConfig::default(), &online.parameters()).unwrap();
    let mut replay = Replay::new(64, obs);
    let mut draw = |scale: f64| (rng.uniform() * 2.0 - 1.0) as f32 * scale as f32;
    for i in 0..40 {
        let o: Vec<f32> = (0..obs).map(|_| draw(2.0)).collect();
        let n: Vec<f32> = (0..obs).map(|_| draw(2.0)).collect();
        let discount = if i % 7 == 0 { 0.0 } else { 0.95 };
        replay.push(&o, (i % actions) as u32, draw(3.0), &n, discount);
    }
    let mut batch = MinibatchTensors::new(batch_size, obs, Device::Cpu).unwrap();
    batch.fill(&replay, &mut Rng::new(seed + 100)).unwrap();
    Case {
        online,
        target,
        optimizer,
        batch,
    }
}

fn values(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-3);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * scale.max(1.0),
            "{what}[{i}]: hand-written {g}, autograd {w}"
        );
    }
}

fn stat(s: &Stat) -> Vec<f32> {
    match s {
        Stat::Host(v) => vec![*v as f32],
        Stat::Device(t) => values(t),
    }
}

/// A hand-written update on `hidden`, on the CPU path (plain Rust between
/// the matrix products) or as libtorch operations throughout (as on a GPU).
fn check_against_autograd(libtorch_ops: bool) {
    for (hidden, double_q, delta, seed) in [
        (vec![8, 6], true, 1.0, 1),
        (vec![8, 6], false, 1.0, 2),
        (vec![7], true, 0.3, 3),
        (vec![9, 4, 6], true, 2.0, 4),
    ] {
        let mut c = case(&hidden, false, seed);
        let mut manual = ManualTd::new(
            &c.online,
            &c.target,
            &c.optimizer,
            &c.batch,
            double_q,
            delta,
        )
        .unwrap()
        .expect("a plain network");
        if libtorch_ops {
            manual = manual.with_libtorch_ops();
        }
        let (loss, q_mean) = manual.gradient(&c.batch).unwrap();
        let (want_loss, want_q) =
            autograd_loss(&c.online, &c.target, &c.batch, double_q, delta).unwrap();
        let want_grad = c.optimizer.gradients(&want_loss).unwrap();
        let what =
            format!("hidden {hidden:?}, double {double_q}, δ {delta}, libtorch {libtorch_ops}");
        assert_close(&values(manual.flat_gradient()), &values(&want_grad), &what);
        assert_close(&stat(&loss), &values(&want_loss), "loss");
        assert_close(&stat(&q_mean), &values(&want_q.mean(Kind::Float)), "mean Q");
        // The same update through both paths moves the parameters alike.
        let before = c.optimizer.params().values().copy();
        let stats = manual
            .update(&c.batch, &mut c.optimizer, 0.01, 0.5)
            .unwrap();
        let after_manual = c.optimizer.params().values().copy();
        let mut reference = case(&hidden, false, seed);
        let want = autograd_update(
            &reference.online,
            &reference.target,
            &mut reference.optimizer,
            &reference.batch,
            double_q,
            delta,
            0.01,
            0.5,
        )
        .unwrap();
        assert_close(&stat(&stats.grad_norm), &stat(&want.grad_norm), "norm");
        assert_close(
            &values(&after_manual),
            &values(reference.optimizer.params().values()),
            "parameters after one update",
        );
        assert!(values(&(&after_manual - &before)).iter().any(|d| *d != 0.0));
    }
}

#[test]
fn the_hand_written_gradient_is_autograds() {
    check_against_autograd(false);
}

#[test]
fn as_libtorch_operations_it_is_autograds_too() {
    check_against_autograd(true);
}

#[test]
fn argmax_takes_the_first_maximum_and_nan_as_largest() {
    assert_eq!(first_argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    assert_eq!(first_argmax(&[5.0]), 0);
    assert_eq!(first_argmax(&[1.0, f32::NAN, 9.0]), 1);
    let t = Tensor::from_slice(&[1.0f32, 3.0, 3.0, 2.0]);
    assert_eq!(t.argmax(0, false).int64_value(&[]), 1);
}

#[test]
fn the_target_network_is_read_through_its_views() {
    let c = case(&[8], false, 5);
    let mut manual = ManualTd::new(&c.online, &c.target, &c.optimizer, &c.batch, true, 1.0)
        .unwrap()
        .unwrap();
    c.target.update_from(&c.online, 1.0).unwrap();
    let (_loss, _q) = manual.gradient(&c.batch).unwrap();
    let (want_loss, _) = autograd_loss(&c.online, &c.target, &c.batch, true, 1.0).unwrap();
    let want_grad = c.optimizer.gradients(&want_loss).unwrap();
    assert_close(
        &values(manual.flat_gradient()),
        &values(&want_grad),
        "after a target copy",
    );
}

#[test]
fn a_dueling_network_takes_the_autograd_path() {
    let c = case(&[8], true, 6);
    let manual = ManualTd::new(&c.online, &c.target, &c.optimizer, &c.batch, true, 1.0).unwrap();
    assert!(manual.is_none());
}
