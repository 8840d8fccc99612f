//! The Mamba-2 block: chunked == sequential (outputs and every parameter's
//! gradient), streaming step == chunked forward, seeding, causality, names.

use crate::common::{grads, randn, rel_err, small_config, CHUNKS, LEN};
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_mamba2::{Mamba2Block, State};

fn block(seed: u64, kind: Kind) -> Mamba2Block {
    let mut rng = Rng::new(seed);
    Mamba2Block::new(&small_config(), 2, &mut rng, Device::Cpu)
        .unwrap()
        .to_kind(kind)
        .unwrap()
}

fn check_chunked_vs_sequential(kind: Kind, tol: f64) {
    let m = block(1, kind);
    let mut rng = Rng::new(2);
    let u = randn(&mut rng, &[2, LEN, 8], kind).set_requires_grad(true);
    let mut inputs: Vec<&Tensor> = m.parameters();
    inputs.push(&u);
    let y_seq = m.forward_sequential(&u).unwrap();
    let w = randn(&mut rng, &y_seq.size(), kind);
    let g_seq = grads(&y_seq, &w, &inputs);
    let names: Vec<String> = m.named_parameters("").into_iter().map(|(n, _)| n).collect();
    for chunk in CHUNKS {
        let y = m.forward(&u, chunk).unwrap();
        let ey = rel_err(&y, &y_seq);
        let g = grads(&y, &w, &inputs);
        let mut worst = (0.0, "");
        for (i, (a, b)) in g.iter().zip(&g_seq).enumerate() {
            let e = rel_err(a, b);
            let name = names.get(i).map_or("input u", |s| s.as_str());
            assert!(e < tol, "chunk {chunk}: gradient of {name}: {e:.2e}");
            if e >= worst.0 {
                worst = (e, name);
            }
        }
        eprintln!(
            "block {kind:?} chunk {chunk}: y {ey:.2e}, worst grad {:.2e} ({})",
            worst.0, worst.1
        );
        assert!(ey < tol, "chunk {chunk}: outputs {ey:.2e}");
    }
}

#[test]
fn chunked_matches_sequential_f64_outputs_and_gradients() {
    check_chunked_vs_sequential(Kind::Double, 1e-10);
}

#[test]
fn chunked_matches_sequential_f32_outputs_and_gradients() {
    check_chunked_vs_sequential(Kind::Float, 1e-4);
}

#[test]
fn streaming_step_reproduces_the_chunked_forward() {
    let m = block(3, Kind::Double);
    let mut rng = Rng::new(4);
    let u = randn(&mut rng, &[2, LEN, 8], Kind::Double);
    let y = tch::no_grad(|| m.forward(&u, 16)).unwrap();
    let mut state = State::zeros(&m, 2).unwrap();
    assert_eq!(state.conv.size(), [2, 16 + 2 * 2 * 4, 4]);
    assert_eq!(state.ssm.size(), [2, 4, 4, 4]);
    let mut worst = 0.0f64;
    tch::no_grad(|| {
        for t in 0..LEN {
            let yt = m.step(&u.select(1, t), &mut state).unwrap();
            let e = rel_err(&yt, &y.select(1, t));
            worst = worst.max(e);
            assert!(e < 1e-10, "bar {t}: {e:.2e}");
        }
    });
    eprintln!("block step vs chunked: worst bar {worst:.2e}");
}

#[test]
fn outputs_are_causal() {
    let m = block(5, Kind::Double);
    let mut rng = Rng::new(6);
    let u = randn(&mut rng, &[1, LEN, 8], Kind::Double);
    let t0 = 20;
    let later = randn(&mut rng, &[1, LEN - t0 - 1, 8], Kind::Double);
    let v = Tensor::cat(&[u.narrow(1, 0, t0 + 1), later], 1);
    for chunk in [1, 4, 16, 64] {
        let (a, b) =
            tch::no_grad(|| (m.forward(&u, chunk).unwrap(), m.forward(&v, chunk).unwrap()));
        let before = rel_err(&a.narrow(1, 0, t0 + 1), &b.narrow(1, 0, t0 + 1));
        assert!(
            before < 1e-13,
            "chunk {chunk}: outputs up to {t0} moved by {before:.2e}"
        );
        assert!(rel_err(&a.narrow(1, t0 + 1, 1), &b.narrow(1, t0 + 1, 1)) > 1e-6);
    }
}

#[test]
fn seeded_construction_is_deterministic() {
    let (a, b, c) = (
        block(7, Kind::Float),
        block(7, Kind::Float),
        block(8, Kind::Float),
    );
    let (pa, pb, pc) = (
        a.named_parameters("m"),
        b.named_parameters("m"),
        c.named_parameters("m"),
    );
    assert_eq!(pa.len(), pb.len());
    for ((na, ta), (nb, tb)) in pa.iter().zip(&pb) {
        assert_eq!(na, nb);
        assert!(ta.equal(tb), "{na} differs for the same seed");
    }
    let differs = pa.iter().zip(&pc).any(|((_, ta), (_, tc))| !ta.equal(tc));
    assert!(differs, "another seed gave the same parameters");
}

#[test]
fn parameters_have_stable_names_shapes_and_init() {
    let m = block(9, Kind::Float);
    let named: Vec<(String, Vec<i64>)> = m
        .named_parameters("mixer")
        .into_iter()
        .map(|(n, t)| (n, t.size()))
        .collect();
    let expected: Vec<(String, Vec<i64>)> = [
        ("mixer.in_proj.weight", vec![2 * 16 + 2 * 2 * 4 + 4, 8]),
        ("mixer.conv1d.weight", vec![32, 1, 4]),
        ("mixer.conv1d.bias", vec![32]),
        ("mixer.dt_bias", vec![4]),
        ("mixer.A_log", vec![4]),
        ("mixer.D", vec![4]),
        ("mixer.norm.weight", vec![16]),
        ("mixer.out_proj.weight", vec![8, 16]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_string(), s))
    .collect();
    assert_eq!(named, expected);
    // dt = softplus(dt_bias) in [1e-3, 0.1]; −A in [1, 16]; D = 1.
    let dt = m.dt_bias.softplus();
    assert!(
        dt.min().double_value(&[]) >= 1e-3 * 0.999 && dt.max().double_value(&[]) <= 0.1 * 1.001
    );
    let a = m.a_log.exp();
    assert!(a.min().double_value(&[]) >= 1.0 - 1e-6 && a.max().double_value(&[]) <= 16.0 + 1e-5);
    assert_eq!(m.d.min().double_value(&[]), 1.0);
    // out_proj is PyTorch's default bound 1/√16 divided by √n_layer = √2.
    let bound = 0.25 / 2f64.sqrt();
    assert!(m.out_proj.weight.abs().max().double_value(&[]) <= bound * (1.0 + 1e-6));
    assert_eq!(
        m.parameter_count(),
        52 * 8 + 32 * 4 + 32 + 3 * 4 + 16 + 8 * 16
    );
}

#[test]
fn load_named_round_trips() {
    let (a, b) = (block(10, Kind::Float), block(11, Kind::Float));
    let saved: Vec<(String, Tensor)> = a
        .named_parameters("m")
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect();
    b.load_named("m", &saved).unwrap();
    for ((_, ta), (_, tb)) in a.named_parameters("m").iter().zip(b.named_parameters("m")) {
        assert!(ta.equal(tb));
    }
}

#[test]
fn chunked_matches_sequential_with_strong_decay() {
    // dt ≈ 0.5…3 (instead of 1e-3…0.1): exp(dt·A) down to e^{−48}, so the
    // intra- and inter-chunk decays matter.
    let mut m = block(12, Kind::Double);
    let mut rng = Rng::new(13);
    let dt_bias = randn(&mut rng, &[4], Kind::Double).g_add_scalar(1.0);
    m.dt_bias = dt_bias.set_requires_grad(true);
    let u = randn(&mut rng, &[2, LEN, 8], Kind::Double);
    let params = m.parameters();
    let y_seq = m.forward_sequential(&u).unwrap();
    let w = randn(&mut rng, &y_seq.size(), Kind::Double);
    let g_seq = grads(&y_seq, &w, &params);
    for chunk in CHUNKS {
        let y = m.forward(&u, chunk).unwrap();
        let g = grads(&y, &w, &params);
        let ey = rel_err(&y, &y_seq);
        let eg = g
            .iter()
            .zip(&g_seq)
            .map(|(a, b)| rel_err(a, b))
            .fold(0.0, f64::max);
        eprintln!("block strong decay chunk {chunk}: y {ey:.2e}, worst grad {eg:.2e}");
        assert!(ey < 1e-10 && eg < 1e-10);
    }
}
