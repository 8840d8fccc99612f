//! The forecasting building blocks against reference computations: layer
//! norm by formula and libtorch's op, embedding as a one-hot product, the
//! LSTM against a step loop of the gate equations and libtorch's multi-layer
//! op, GLU and GRN by hand, attention in plain f64 loops, causality by
//! perturbation; gradients reach every parameter.

use tch::{Device, Kind, Tensor};
use tli_plugin_kit::counter_rng::CounterRng;
use tli_plugin_kit::nn::{
    AttentionKind, Embedding, Glu, Grn, LayerNorm, Linear, Lstm, LstmState, MultiHeadAttention,
    Parameters,
};
use tli_plugin_kit::rng::Rng;

const CPU: Device = Device::Cpu;

fn randn(shape: &[i64], seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let n: i64 = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
    Tensor::from_slice(&v).reshape(shape)
}

fn set(param: &Tensor, value: &Tensor) {
    tch::no_grad(|| {
        param.shallow_clone().copy_(value);
    });
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    (a - b).abs().max().double_value(&[])
}

/// Backward from a random projection of `outputs`; every parameter gets a
/// finite, non-zero gradient.
fn assert_gradients_flow(params: Vec<(String, &Tensor)>, outputs: &[&Tensor]) {
    let mut loss = Tensor::zeros([], (Kind::Float, CPU));
    for (i, out) in outputs.iter().enumerate() {
        loss += (*out * randn(&out.size(), 900 + i as u64)).sum(Kind::Float);
    }
    loss.backward();
    for (name, p) in params {
        let g = p.grad();
        assert!(g.defined(), "{name} has no gradient");
        let norm = g.norm().double_value(&[]);
        assert!(
            norm.is_finite() && norm > 0.0,
            "{name} gradient norm {norm}"
        );
    }
}

fn manual_layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Tensor {
    let dim = [-1i64].as_slice();
    let mean = x.mean_dim(dim, true, Kind::Float);
    let centred = x - mean;
    let var = centred
        .pow_tensor_scalar(2)
        .mean_dim(dim, true, Kind::Float);
    centred / (var + eps).sqrt() * w + b
}

#[test]
fn layer_norm_matches_the_formula_and_libtorch() {
    let ln = LayerNorm::new(5, 1e-5, CPU).unwrap();
    set(&ln.weight, &randn(&[5], 1));
    set(&ln.bias, &randn(&[5], 2));
    let x = randn(&[3, 4, 5], 3) * 3.0 + 1.0;
    let y = ln.forward(&x).unwrap();
    let hand = manual_layer_norm(&x, &ln.weight, &ln.bias, 1e-5);
    let op = x.layer_norm([5], Some(&ln.weight), Some(&ln.bias), 1e-5, false);
    assert!(max_diff(&y, &hand) < 1e-5);
    assert!(max_diff(&y, &op) < 1e-6);
    assert!(ln.forward(&randn(&[2, 4], 4)).is_err());
    assert!(LayerNorm::new(4, 0.0, CPU).is_err());
    assert_gradients_flow(ln.named_parameters("ln"), &[&y]);
}

#[test]
fn embedding_is_a_one_hot_product() {
    let emb = Embedding::new(7, 3, &mut Rng::new(1), CPU).unwrap();
    let ids = Tensor::from_slice(&[0i64, 6, 2, 2, 2, 5]).reshape([2, 3]);
    let y = emb.forward(&ids).unwrap();
    assert_eq!(y.size(), [2, 3, 3]);
    let hand = ids.one_hot(7).to_kind(Kind::Float).matmul(&emb.weight);
    assert!(max_diff(&y, &hand) < 1e-7);
    assert!(emb.forward(&Tensor::from_slice(&[7i64])).is_err());
    assert!(emb.forward(&Tensor::from_slice(&[-1i64])).is_err());
    assert!(emb.forward(&Tensor::from_slice(&[1.0f32])).is_err());
    assert!(emb.forward(&Tensor::from_slice(&[1i32, 4])).is_ok());
    assert_gradients_flow(emb.named_parameters(""), &[&y]);
    // Only the rows looked up receive gradient.
    let g = emb
        .weight
        .grad()
        .abs()
        .sum_dim_intlist([1i64].as_slice(), false, Kind::Float);
    let used: Vec<bool> = Vec::<f32>::try_from(g)
        .unwrap()
        .iter()
        .map(|v| *v > 0.0)
        .collect();
    assert_eq!(used, [true, false, true, false, false, true, true]);
}

/// The LSTM as a loop over time of the gate equations; dropout between
/// layers from `rng` exactly as the module draws it.
fn lstm_reference(
    lstm: &Lstm,
    x: &Tensor,
    state: &LstmState,
    p: f64,
    mut rng: Option<&mut CounterRng>,
) -> (Tensor, Tensor, Tensor) {
    let mut input = x.shallow_clone();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for (l, w) in lstm.layers().iter().enumerate() {
        if l > 0 {
            if let Some(r) = rng.as_deref_mut() {
                input = r.dropout(&input, p, true).unwrap();
            }
        }
        let (mut h, mut c) = (state.h.get(l as i64), state.c.get(l as i64));
        let mut outs = Vec::new();
        for t in 0..x.size()[1] {
            let xt = input.select(1, t);
            let gates = xt.matmul(&w.w_ih.tr()) + &w.b_ih + h.matmul(&w.w_hh.tr()) + &w.b_hh;
            let g = gates.chunk(4, 1);
            c = g[1].sigmoid() * &c + g[0].sigmoid() * g[2].tanh();
            h = g[3].sigmoid() * c.tanh();
            outs.push(h.shallow_clone());
        }
        input = Tensor::stack(&outs, 1);
        hs.push(h);
        cs.push(c);
    }
    (input, Tensor::stack(&hs, 0), Tensor::stack(&cs, 0))
}

#[test]
fn lstm_matches_the_gate_equations_with_an_initial_state() {
    let lstm = Lstm::new(3, 4, 2, 0.5, &mut Rng::new(7), CPU).unwrap();
    let x = randn(&[2, 5, 3], 1);
    let state = LstmState {
        h: randn(&[2, 2, 4], 2).set_requires_grad(true),
        c: randn(&[2, 2, 4], 3).set_requires_grad(true),
    };
    // Evaluation: no dropout.
    let (out, last) = lstm.forward(&x, Some(&state), None).unwrap();
    let (r_out, r_h, r_c) = lstm_reference(&lstm, &x, &state, 0.5, None);
    assert_eq!(out.size(), [2, 5, 4]);
    assert_eq!(last.h.size(), [2, 2, 4]);
    assert!(max_diff(&out, &r_out) < 1e-5);
    assert!(max_diff(&last.h, &r_h) < 1e-5);
    assert!(max_diff(&last.c, &r_c) < 1e-5);
    // The last layer's final h is the last output.
    assert!(max_diff(&last.h.get(1), &out.select(1, 4)) < 1e-7);

    // libtorch's own two-layer op with the same weights agrees.
    let params: Vec<&Tensor> = lstm.parameters();
    let (o2, h2, c2) = x.lstm(
        &[&state.h, &state.c],
        &params,
        true,
        2,
        0.0,
        false,
        false,
        true,
    );
    assert!(max_diff(&out, &o2) < 1e-6);
    assert!(max_diff(&last.h, &h2) < 1e-6 && max_diff(&last.c, &c2) < 1e-6);

    // A zero state is the default.
    let zero = lstm.zero_state(2, CPU).unwrap();
    let (a, _) = lstm.forward(&x, None, None).unwrap();
    let (b, _) = lstm.forward(&x, Some(&zero), None).unwrap();
    assert!(a.equal(&b));

    // Training: inter-layer dropout from the plugin's RNG, replayable.
    let mut rng = CounterRng::new(11);
    let mut replay = rng.clone();
    let (t_out, t_last) = lstm.forward(&x, Some(&state), Some(&mut rng)).unwrap();
    let (r_out, r_h, _) = lstm_reference(&lstm, &x, &state, 0.5, Some(&mut replay));
    assert!(max_diff(&t_out, &r_out) < 1e-5 && max_diff(&t_last.h, &r_h) < 1e-5);
    assert!(max_diff(&t_out, &out) > 1e-3, "dropout changed nothing");
    assert_eq!(
        rng.state().counter,
        2 * 5 * 4,
        "one mask between the two layers"
    );
    assert_eq!(rng.state(), replay.state());

    let mut names = lstm.named_parameters("enc");
    names.truncate(5);
    let names: Vec<String> = names.into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "enc.layer0.w_ih",
            "enc.layer0.w_hh",
            "enc.layer0.b_ih",
            "enc.layer0.b_hh",
            "enc.layer1.w_ih"
        ]
    );
    assert_eq!(
        lstm.parameter_count(),
        (16 * 3 + 16 * 4 + 32) + (16 * 4 + 16 * 4 + 32)
    );

    assert_gradients_flow(lstm.named_parameters(""), &[&t_out, &t_last.h, &t_last.c]);
    assert!(
        state.h.grad().norm().double_value(&[]) > 0.0,
        "gradient reaches h0"
    );
    assert!(
        state.c.grad().norm().double_value(&[]) > 0.0,
        "gradient reaches c0"
    );

    let bad = LstmState {
        h: randn(&[1, 2, 4], 4),
        c: randn(&[1, 2, 4], 5),
    };
    assert!(lstm.forward(&x, Some(&bad), None).is_err());
    assert!(lstm.forward(&randn(&[2, 5, 2], 6), None, None).is_err());
    assert!(Lstm::new(3, 4, 1, 1.0, &mut Rng::new(1), CPU).is_err());
}

fn linear_ref(x: &Tensor, l: &Linear) -> Tensor {
    let y = x.matmul(&l.weight.tr());
    match &l.bias {
        Some(b) => y + b,
        None => y,
    }
}

fn glu_ref(x: &Tensor, glu: &Glu) -> Tensor {
    let z = linear_ref(x, &glu.linear);
    let n = glu.output_size() as i64;
    z.narrow(-1, 0, n) * z.narrow(-1, n, n).sigmoid()
}

#[test]
fn glu_is_a_times_sigmoid_b() {
    let glu = Glu::new(4, 3, 0.0, &mut Rng::new(3), CPU).unwrap();
    let x = randn(&[2, 3, 4], 1);
    let y = glu.forward(&x, None).unwrap();
    assert_eq!(y.size(), [2, 3, 3]);
    assert!(max_diff(&y, &glu_ref(&x, &glu)) < 1e-6);
    assert_gradients_flow(glu.named_parameters("g"), &[&y]);
}

fn elu(x: &Tensor) -> Tensor {
    x.clamp_min(0.0) + (x.clamp_max(0.0).exp() - 1.0)
}

/// GRN by hand; `rng` replays the GLU's input dropout.
fn grn_ref(grn: &Grn, a: &Tensor, c: Option<&Tensor>, rng: Option<&mut CounterRng>) -> Tensor {
    let mut eta2 = linear_ref(a, &grn.fc1);
    if let (Some(w3), Some(c)) = (&grn.context, c) {
        let mut pc = c.matmul(&w3.weight.tr());
        if pc.dim() < eta2.dim() {
            pc = pc.unsqueeze(1);
        }
        eta2 += pc;
    }
    let mut eta1 = linear_ref(&elu(&eta2), &grn.fc2);
    if let Some(r) = rng {
        eta1 = r.dropout(&eta1, grn.gate.glu.dropout, true).unwrap();
    }
    let skip = match &grn.skip {
        Some(p) => linear_ref(a, p),
        None => a.shallow_clone(),
    };
    let norm = &grn.gate.norm;
    manual_layer_norm(
        &(glu_ref(&eta1, &grn.gate.glu) + skip),
        &norm.weight,
        &norm.bias,
        norm.eps,
    )
}

#[test]
fn grn_matches_a_hand_composition() {
    // in ≠ out (skip projection), a static context for a sequence input.
    let grn = Grn::new(4, 5, 3, Some(2), 0.3, &mut Rng::new(5), CPU).unwrap();
    set(&grn.gate.norm.weight, &randn(&[3], 1));
    set(&grn.gate.norm.bias, &randn(&[3], 2));
    let a = randn(&[2, 6, 4], 3);
    let c = randn(&[2, 2], 4);
    let y = grn.forward(&a, Some(&c), None).unwrap();
    assert_eq!(y.size(), [2, 6, 3]);
    assert!(max_diff(&y, &grn_ref(&grn, &a, Some(&c), None)) < 1e-5);
    // A per-step context works too.
    let c_seq = randn(&[2, 6, 2], 5);
    let y_seq = grn.forward(&a, Some(&c_seq), None).unwrap();
    assert!(max_diff(&y_seq, &grn_ref(&grn, &a, Some(&c_seq), None)) < 1e-5);
    assert!(grn.forward(&a, None, None).is_err(), "context required");

    // Training: the GLU's dropout from the plugin's RNG.
    let mut rng = CounterRng::new(8);
    let mut replay = rng.clone();
    let t = grn.forward(&a, Some(&c), Some(&mut rng)).unwrap();
    assert!(max_diff(&t, &grn_ref(&grn, &a, Some(&c), Some(&mut replay))) < 1e-5);
    assert!(max_diff(&t, &y) > 1e-3);
    assert_eq!(rng.state(), replay.state());

    let names: Vec<String> = grn
        .named_parameters("s")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "s.fc1.weight",
            "s.fc1.bias",
            "s.context.weight",
            "s.fc2.weight",
            "s.fc2.bias",
            "s.skip.weight",
            "s.skip.bias",
            "s.gate.glu.weight",
            "s.gate.glu.bias",
            "s.gate.norm.weight",
            "s.gate.norm.bias"
        ]
    );
    assert_gradients_flow(grn.named_parameters(""), &[&t]);

    // in = out, no context: the residual is the input itself.
    let plain = Grn::new(3, 4, 3, None, 0.0, &mut Rng::new(6), CPU).unwrap();
    assert!(plain.skip.is_none() && plain.context.is_none());
    let x = randn(&[5, 3], 7);
    let y = plain.forward(&x, None, None).unwrap();
    assert!(max_diff(&y, &grn_ref(&plain, &x, None, None)) < 1e-5);
    assert!(plain.forward(&x, Some(&c), None).is_err());
}

#[test]
fn parameters_are_seeded_and_load_by_name() {
    let a = Grn::new(4, 5, 3, Some(2), 0.1, &mut Rng::new(1), CPU).unwrap();
    let same = Grn::new(4, 5, 3, Some(2), 0.1, &mut Rng::new(1), CPU).unwrap();
    let b = Grn::new(4, 5, 3, Some(2), 0.1, &mut Rng::new(2), CPU).unwrap();
    for ((_, x), (_, y)) in a.named_parameters("").iter().zip(same.named_parameters("")) {
        assert!(x.equal(y));
    }
    assert!(!a.fc1.weight.equal(&b.fc1.weight));
    let saved: Vec<(String, Tensor)> = a
        .named_parameters("grn")
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect();
    b.load_named("grn", &saved).unwrap();
    for ((_, x), (_, y)) in a.named_parameters("").iter().zip(b.named_parameters("")) {
        assert!(x.equal(y));
    }
    assert!(b.load_named("other", &saved).is_err());
    assert!(b.fc1.weight.requires_grad());
}

type Mat = Vec<Vec<f64>>;

fn mat(t: &Tensor) -> Mat {
    let (r, c) = (t.size()[0], t.size()[1]);
    let v = Vec::<f64>::try_from(t.detach().to_kind(Kind::Double).reshape([-1])).unwrap();
    (0..r as usize)
        .map(|i| v[i * c as usize..(i + 1) * c as usize].to_vec())
        .collect()
}

fn lin(x: &Mat, l: &Linear) -> Mat {
    let w = mat(&l.weight);
    let b = l.bias.as_ref().map(|b| mat(&b.reshape([1, -1]))[0].clone());
    x.iter()
        .map(|row| {
            (0..w.len())
                .map(|o| {
                    let s: f64 = row.iter().zip(&w[o]).map(|(a, b)| a * b).sum();
                    s + b.as_ref().map_or(0.0, |b| b[o])
                })
                .collect()
        })
        .collect()
}

/// softmax(Q_h K_hᵀ / √d_k + M) V_h for one sequence, in f64 loops →
/// (output [T, d_model], weights [heads][T][T]).
fn attention_reference(m: &MultiHeadAttention, x: &Mat, causal: bool) -> (Mat, Vec<Mat>) {
    let (t, h, dk) = (x.len(), m.heads, m.d_k());
    let (q, k, v) = (lin(x, &m.query), lin(x, &m.key), lin(x, &m.value));
    let interpretable = m.kind == AttentionKind::Interpretable;
    let width = if interpretable { dk } else { h * dk };
    let mut mixed = vec![vec![0.0; width]; t];
    let mut weights = Vec::new();
    for head in 0..h {
        let mut a = vec![vec![0.0; t]; t];
        for i in 0..t {
            let scores: Vec<f64> = (0..t)
                .map(|j| {
                    if causal && j > i {
                        f64::NEG_INFINITY
                    } else {
                        (0..dk)
                            .map(|d| q[i][head * dk + d] * k[j][head * dk + d])
                            .sum::<f64>()
                            / (dk as f64).sqrt()
                    }
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = scores.iter().map(|s| (s - max).exp()).sum();
            for j in 0..t {
                a[i][j] = (scores[j] - max).exp() / z;
            }
            for d in 0..dk {
                let vcol = if interpretable { d } else { head * dk + d };
                let o: f64 = (0..t).map(|j| a[i][j] * v[j][vcol]).sum();
                if interpretable {
                    mixed[i][d] += o / h as f64;
                } else {
                    mixed[i][head * dk + d] = o;
                }
            }
        }
        weights.push(a);
    }
    (lin(&mixed, &m.output), weights)
}

#[test]
fn attention_matches_a_hand_computation() {
    for kind in [AttentionKind::Standard, AttentionKind::Interpretable] {
        for causal in [true, false] {
            let m = MultiHeadAttention::new(4, 2, kind, 0.1, &mut Rng::new(3), CPU).unwrap();
            let x = randn(&[2, 3, 4], 1);
            let (y, w) = m.forward(&x, &x, causal, None).unwrap();
            assert_eq!(y.size(), [2, 3, 4]);
            assert_eq!(w.size(), [2, 2, 3, 3]);
            for b in 0..2 {
                let (want, want_w) = attention_reference(&m, &mat(&x.get(b)), causal);
                let got = mat(&y.get(b));
                for (g, r) in got.iter().flatten().zip(want.iter().flatten()) {
                    assert!((g - r).abs() < 1e-5, "{kind:?} causal {causal}: {g} vs {r}");
                }
                for (head, want_head) in want_w.iter().enumerate() {
                    let got_w = mat(&w.get(b).get(head as i64));
                    for (g, r) in got_w.iter().flatten().zip(want_head.iter().flatten()) {
                        assert!((g - r).abs() < 1e-6);
                    }
                }
            }
        }
    }
    let interp = MultiHeadAttention::new(
        8,
        4,
        AttentionKind::Interpretable,
        0.0,
        &mut Rng::new(1),
        CPU,
    )
    .unwrap();
    assert_eq!(interp.value.output_size(), 2, "one value projection of d_k");
    assert_eq!(
        interp.parameter_count(),
        (8 * 8 + 8) * 2 + (8 * 2 + 2) + (2 * 8 + 8)
    );
    assert!(
        MultiHeadAttention::new(6, 4, AttentionKind::Standard, 0.0, &mut Rng::new(1), CPU).is_err()
    );
}

#[test]
fn causal_attention_ignores_the_future() {
    for kind in [AttentionKind::Standard, AttentionKind::Interpretable] {
        let m = MultiHeadAttention::new(8, 2, kind, 0.0, &mut Rng::new(9), CPU).unwrap();
        let x = randn(&[2, 6, 8], 2);
        let (y, w) = m.forward(&x, &x, true, None).unwrap();
        // Weights vanish above the diagonal and rows sum to one.
        let upper = w.masked_select(&Tensor::ones([6, 6], (Kind::Bool, CPU)).triu(1));
        assert_eq!(upper.abs().sum(Kind::Float).double_value(&[]), 0.0);
        let rows = w.sum_dim_intlist([-1i64].as_slice(), false, Kind::Float);
        assert!(max_diff(&rows, &Tensor::ones_like(&rows)) < 1e-6);
        for t in 0..5 {
            let noise = randn(&[2, 5 - t, 8], 10 + t as u64);
            let x2 = Tensor::cat(
                &[x.narrow(1, 0, t + 1), x.narrow(1, t + 1, 5 - t) + noise],
                1,
            );
            let (y2, _) = m.forward(&x2, &x2, true, None).unwrap();
            let past = max_diff(&y.narrow(1, 0, t + 1), &y2.narrow(1, 0, t + 1));
            assert!(past < 1e-6, "{kind:?}: output up to {t} moved by {past}");
            assert!(max_diff(&y.narrow(1, t + 1, 1), &y2.narrow(1, t + 1, 1)) > 1e-4);
            // Without the mask the past does see the future.
            let (n1, _) = m.forward(&x, &x, false, None).unwrap();
            let (n2, _) = m.forward(&x2, &x2, false, None).unwrap();
            assert!(max_diff(&n1.narrow(1, 0, t + 1), &n2.narrow(1, 0, t + 1)) > 1e-4);
        }
    }
}

#[test]
fn decoder_queries_align_with_the_last_keys_and_gradients_flow() {
    let m = MultiHeadAttention::new(
        4,
        2,
        AttentionKind::Interpretable,
        0.2,
        &mut Rng::new(4),
        CPU,
    )
    .unwrap();
    let memory = randn(&[3, 5, 4], 1);
    let queries = memory.narrow(1, 3, 2);
    let (y, w) = m.forward(&queries, &memory, true, None).unwrap();
    assert_eq!(y.size(), [3, 2, 4]);
    assert_eq!(w.size(), [3, 2, 2, 5]);
    // Query 0 is position 3: sees keys 0..=3; query 1 sees all five.
    assert_eq!(
        w.narrow(2, 0, 1)
            .narrow(3, 4, 1)
            .abs()
            .sum(Kind::Float)
            .double_value(&[]),
        0.0
    );
    assert!(w.narrow(2, 1, 1).narrow(3, 4, 1).min().double_value(&[]) > 0.0);
    // Same as the last two rows of full self-attention.
    let (full, _) = m.forward(&memory, &memory, true, None).unwrap();
    assert!(max_diff(&y, &full.narrow(1, 3, 2)) < 1e-6);
    assert!(
        m.forward(&memory, &queries, true, None).is_err(),
        "more queries than keys"
    );

    // Training: dropout on the weights, replayable; the weights returned are pre-dropout.
    let mut rng = CounterRng::new(3);
    let mut again = rng.clone();
    let (t1, tw) = m.forward(&queries, &memory, true, Some(&mut rng)).unwrap();
    let (t2, _) = m
        .forward(&queries, &memory, true, Some(&mut again))
        .unwrap();
    assert!(t1.equal(&t2));
    assert!(max_diff(&tw, &w) < 1e-7);
    assert_eq!(rng.state().counter, 3 * 2 * 2 * 5);
    assert_gradients_flow(m.named_parameters("attn"), &[&t1]);
}
