//! The stack: chunked == sequential (outputs and gradients), step == forward.

use crate::common::{grads, randn, rel_err, small_config, CHUNKS, LEN};
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_mamba2::{Mamba2Stack, StackState};

fn stack(kind: Kind) -> Mamba2Stack {
    let mut rng = Rng::new(21);
    Mamba2Stack::new(&small_config(), 2, &mut rng, Device::Cpu)
        .unwrap()
        .to_kind(kind)
        .unwrap()
}

#[test]
fn chunked_matches_sequential_outputs_and_gradients() {
    for (kind, tol) in [(Kind::Double, 1e-10), (Kind::Float, 1e-4)] {
        let s = stack(kind);
        let mut rng = Rng::new(22);
        let u = randn(&mut rng, &[2, LEN, 8], kind);
        let params = s.parameters();
        let y_seq = s.forward_sequential(&u).unwrap();
        let w = randn(&mut rng, &y_seq.size(), kind);
        let g_seq = grads(&y_seq, &w, &params);
        let names: Vec<String> = s.named_parameters("").into_iter().map(|(n, _)| n).collect();
        for chunk in CHUNKS {
            let y = s.forward(&u, chunk).unwrap();
            let ey = rel_err(&y, &y_seq);
            let g = grads(&y, &w, &params);
            let mut worst = 0.0f64;
            for ((a, b), name) in g.iter().zip(&g_seq).zip(&names) {
                let e = rel_err(a, b);
                assert!(
                    e < tol,
                    "{kind:?} chunk {chunk}: gradient of {name}: {e:.2e}"
                );
                worst = worst.max(e);
            }
            eprintln!("stack {kind:?} chunk {chunk}: y {ey:.2e}, worst grad {worst:.2e}");
            assert!(ey < tol, "{kind:?} chunk {chunk}: outputs {ey:.2e}");
        }
    }
}

#[test]
fn streaming_step_reproduces_the_chunked_forward() {
    let s = stack(Kind::Double);
    let mut rng = Rng::new(23);
    let u = randn(&mut rng, &[2, LEN, 8], Kind::Double);
    tch::no_grad(|| {
        let y = s.forward(&u, 4).unwrap();
        let mut state = StackState::zeros(&s, 2).unwrap();
        let mut worst = 0.0f64;
        for t in 0..LEN {
            let yt = s.step(&u.select(1, t), &mut state).unwrap();
            worst = worst.max(rel_err(&yt, &y.select(1, t)));
        }
        eprintln!("stack step vs chunked: worst bar {worst:.2e}");
        assert!(worst < 1e-10);
    });
}

#[test]
fn parameter_names() {
    let s = stack(Kind::Float);
    let names: Vec<String> = s.named_parameters("").into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 2 * (1 + 8) + 1);
    assert_eq!(names[0], "layers.0.norm.weight");
    assert_eq!(names[1], "layers.0.mixer.in_proj.weight");
    assert_eq!(names[10], "layers.1.mixer.in_proj.weight");
    assert_eq!(names[18], "norm_f.weight");
}

#[test]
fn forward_with_state_continues_a_sequence_exactly() {
    let s = stack(Kind::Double);
    let mut rng = Rng::new(24);
    let u = randn(&mut rng, &[2, LEN, 8], Kind::Double);
    tch::no_grad(|| {
        let (y, end) = s.forward_with_state(&u, 8, None).unwrap();
        let t0 = 13;
        let (y1, mid) = s.forward_with_state(&u.narrow(1, 0, t0), 8, None).unwrap();
        let (y2, end2) = s
            .forward_with_state(&u.narrow(1, t0, LEN - t0), 8, Some(&mid))
            .unwrap();
        let e = rel_err(&Tensor::cat(&[y1, y2], 1), &y);
        // The state after the forward equals the state after stepping every bar.
        let mut stepped = StackState::zeros(&s, 2).unwrap();
        for t in 0..LEN {
            let _ = s.step(&u.select(1, t), &mut stepped).unwrap();
        }
        let mut es = 0.0f64;
        for ((a, b), c) in end.layers.iter().zip(&end2.layers).zip(&stepped.layers) {
            es = es
                .max(rel_err(&a.conv, &c.conv))
                .max(rel_err(&a.ssm, &c.ssm));
            es = es
                .max(rel_err(&b.conv, &c.conv))
                .max(rel_err(&b.ssm, &c.ssm));
        }
        eprintln!("stack split forward vs whole: y {e:.2e}, states vs stepped {es:.2e}");
        assert!(e < 1e-10 && es < 1e-10);
    });
}
