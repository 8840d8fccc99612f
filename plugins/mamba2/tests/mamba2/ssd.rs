//! The SSD function: chunked against sequential, a hand computation, segsum.

use crate::common::{grads, randn, rel_err, CHUNKS, LEN};
use tch::{Kind, Tensor};
use tli_plugin_kit::rng::Rng;
use tli_plugin_mamba2::ssd::{segsum, segsum_naive, ssd_chunked, ssd_sequential};

/// `(x, dt, A, B, C, initial state)` for batch 2, 4 heads of 3, 2 groups, N = 5.
fn inputs(rng: &mut Rng, len: i64, kind: Kind) -> Vec<Tensor> {
    let (b, h, p, g, n) = (2, 4, 3, 2, 5);
    let x = randn(rng, &[b, len, h, p], kind);
    let dt = randn(rng, &[b, len, h], kind).softplus();
    let a = -randn(rng, &[h], kind).g_mul_scalar(0.5).exp();
    let bm = randn(rng, &[b, len, g, n], kind);
    let cm = randn(rng, &[b, len, g, n], kind);
    let init = randn(rng, &[b, h, p, n], kind);
    [x, dt, a, bm, cm, init]
        .into_iter()
        .map(|t| t.set_requires_grad(true))
        .collect()
}

fn check_chunked_vs_sequential(kind: Kind, tol: f64) {
    let mut rng = Rng::new(11);
    let v = inputs(&mut rng, LEN, kind);
    compare_with_sequential(&v, &mut rng, &CHUNKS, kind, tol, "SSD");
}

/// The chunked SSD over `v` (as [`inputs`] gives) at each of `chunks`
/// against the recurrence: outputs, final state and every input's gradient
/// within `tol`.
fn compare_with_sequential(
    v: &[Tensor],
    rng: &mut Rng,
    chunks: &[usize],
    kind: Kind,
    tol: f64,
    what: &str,
) {
    let refs: Vec<&Tensor> = v.iter().collect();
    let (y_seq, s_seq) = ssd_sequential(&v[0], &v[1], &v[2], &v[3], &v[4], Some(&v[5])).unwrap();
    let wy = randn(rng, &y_seq.size(), kind);
    let ws = randn(rng, &s_seq.size(), kind);
    let loss_seq = (&y_seq * &wy).sum(kind) + (&s_seq * &ws).sum(kind);
    let g_seq = Tensor::run_backward(&[loss_seq], &refs, false, false);
    for &chunk in chunks {
        let (y, s) = ssd_chunked(&v[0], &v[1], &v[2], &v[3], &v[4], Some(&v[5]), chunk).unwrap();
        let (ey, es) = (rel_err(&y, &y_seq), rel_err(&s, &s_seq));
        let loss = (&y * &wy).sum(kind) + (&s * &ws).sum(kind);
        let g = Tensor::run_backward(&[loss], &refs, false, false);
        let eg = g
            .iter()
            .zip(&g_seq)
            .map(|(a, b)| rel_err(a, b))
            .fold(0.0, f64::max);
        eprintln!(
            "{what} {kind:?} chunk {chunk}: y {ey:.2e}, final state {es:.2e}, grads {eg:.2e}"
        );
        assert!(
            ey < tol && es < tol && eg < tol,
            "{what} chunk {chunk}: {ey} {es} {eg}"
        );
    }
}

#[test]
fn chunked_matches_sequential_f64_with_initial_state() {
    check_chunked_vs_sequential(Kind::Double, 1e-10);
}

#[test]
fn chunked_matches_sequential_f32() {
    check_chunked_vs_sequential(Kind::Float, 1e-4);
}

#[test]
fn chunked_without_initial_state_matches_sequential() {
    let mut rng = Rng::new(12);
    let v = inputs(&mut rng, 9, Kind::Double);
    let (y_seq, s_seq) = ssd_sequential(&v[0], &v[1], &v[2], &v[3], &v[4], None).unwrap();
    for chunk in [2, 4, 9, 16] {
        let (y, s) = ssd_chunked(&v[0], &v[1], &v[2], &v[3], &v[4], None, chunk).unwrap();
        assert!(rel_err(&y, &y_seq) < 1e-12 && rel_err(&s, &s_seq) < 1e-12);
    }
}

#[test]
fn tiny_case_matches_hand_computation() {
    // L = 3, H = P = N = G = 1, A = −1.
    let t = |v: &[f64], shape: &[i64]| Tensor::from_slice(v).reshape(shape);
    let x = t(&[1.0, 2.0, 3.0], &[1, 3, 1, 1]);
    let dt = t(&[0.5, 1.0, 0.25], &[1, 3, 1]);
    let a = t(&[-1.0], &[1]);
    let b = t(&[1.0, -1.0, 2.0], &[1, 3, 1, 1]);
    let c = t(&[2.0, 1.0, 0.5], &[1, 3, 1, 1]);
    // h1 = 0.5·1·1; h2 = e^{−1}·h1 + 1·2·(−1); h3 = e^{−0.25}·h2 + 0.25·3·2.
    let h1 = 0.5;
    let h2 = (-1.0f64).exp() * h1 - 2.0;
    let h3 = (-0.25f64).exp() * h2 + 1.5;
    let expected = [2.0 * h1, h2, 0.5 * h3];
    let check = |y: &Tensor, s: &Tensor, what: &str| {
        let y = Vec::<f64>::try_from(y.flatten(0, -1)).unwrap();
        for (got, want) in y.iter().zip(expected) {
            assert!((got - want).abs() < 1e-14, "{what}: {y:?} vs {expected:?}");
        }
        assert!(
            (s.double_value(&[0, 0, 0, 0]) - h3).abs() < 1e-14,
            "{what} state"
        );
    };
    let (y, s) = ssd_sequential(&x, &dt, &a, &b, &c, None).unwrap();
    check(&y, &s, "sequential");
    for chunk in [1, 2, 3, 4] {
        let (y, s) = ssd_chunked(&x, &dt, &a, &b, &c, None, chunk).unwrap();
        check(&y, &s, &format!("chunk {chunk}"));
    }
}

#[test]
fn stable_segsum_matches_naive() {
    let mut rng = Rng::new(13);
    let a = randn(&mut rng, &[2, 3, 7], Kind::Double);
    let stable = segsum(&a).unwrap();
    let naive = segsum_naive(&a).unwrap();
    assert_eq!(stable.size(), [2, 3, 7, 7]);
    let finite = stable.isfinite();
    assert_eq!(finite, naive.isfinite());
    // −∞ strictly above the diagonal, finite elsewhere; zero on the diagonal.
    assert_eq!(
        finite
            .to_kind(Kind::Int64)
            .sum(Kind::Int64)
            .int64_value(&[]),
        2 * 3 * 28
    );
    let diag = stable.diagonal(0, -2, -1);
    assert_eq!(diag.abs().max().double_value(&[]), 0.0);
    let err = (stable.masked_select(&finite) - naive.masked_select(&finite))
        .abs()
        .max()
        .double_value(&[]);
    eprintln!("segsum stable vs naive: max abs err {err:.2e}");
    assert!(err < 1e-12);
    // Entry (i, j) is a_{j+1} + … + a_i.
    let direct = a.narrow(-1, 2, 4).sum_dim_intlist(-1, false, Kind::Double);
    let got = stable.select(-1, 1).select(-1, 5);
    assert!(rel_err(&got, &direct) < 1e-12);
}

#[test]
fn gradient_helper_agrees_with_finite_differences() {
    // A sanity check of the gradient path through the chunked SSD itself.
    let mut rng = Rng::new(14);
    let v = inputs(&mut rng, 5, Kind::Double);
    let w = randn(&mut rng, &[2, 5, 4, 3], Kind::Double);
    let f = |dt: &Tensor| {
        let (y, _) = ssd_chunked(&v[0], dt, &v[2], &v[3], &v[4], Some(&v[5]), 2).unwrap();
        (&y * &w).sum(Kind::Double).double_value(&[])
    };
    let (y, _) = ssd_chunked(&v[0], &v[1], &v[2], &v[3], &v[4], Some(&v[5]), 2).unwrap();
    let g = grads(&y, &w, &[&v[1]]).remove(0);
    let eps = 1e-6;
    for idx in [[0, 0, 0], [1, 3, 2], [0, 4, 3]] {
        let bump = |s: f64| {
            let d = v[1].detach().copy();
            let _ = d.get(idx[0]).get(idx[1]).get(idx[2]).g_add_scalar_(s);
            f(&d)
        };
        let fd = (bump(eps) - bump(-eps)) / (2.0 * eps);
        let an = g.double_value(&idx);
        assert!(
            (fd - an).abs() < 1e-6 * (1.0 + an.abs()),
            "{idx:?}: {fd} vs {an}"
        );
    }
}

#[test]
fn chunked_matches_sequential_when_a_chunk_decays_beyond_the_factored_range() {
    // dt ≈ 4…6 with A ≈ −1.6…−0.6: a chunk of 16 spans e^{−150} and more, where
    // the within-chunk decay factored as e^{A_l − A_0}·e^{A_0 − A_s} would leave
    // f32 (the plain masked form runs); chunks of 2 stay within it (factored).
    let mut rng = Rng::new(14);
    let mut v = inputs(&mut rng, LEN, Kind::Float);
    v[1] = v[1].detach().g_add_scalar(4.0).set_requires_grad(true);
    let chunks = [2, 16, LEN as usize];
    compare_with_sequential(&v, &mut rng, &chunks, Kind::Float, 1e-4, "SSD strong decay");
}
