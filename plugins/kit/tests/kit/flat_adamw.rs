//! The fused flat-parameter AdamW against the per-tensor reference
//! (`adam::Adam`) on the template plugin's network, gradient clipping by
//! hand, and exact checkpoints.

use tch::{Device, Kind, Tensor};
use tli_plugin_kit::adam::{Adam, AdamConfig};
use tli_plugin_kit::checkpoint;
use tli_plugin_kit::flat_adamw::FlatAdamW;
use tli_plugin_kit::flat_params::FlatParams;
use tli_plugin_kit::grad_clip::clip_grad_norm;
use tli_plugin_kit::mlp::Mlp;
use tli_plugin_kit::rng::Rng;

/// The template plugin's default network on the synthetic dataset's 8 features.
const SIZES: [usize; 4] = [8, 64, 64, 1];
const ROWS: i64 = 1024;
const BATCH: usize = 256;

/// Synthetic regression data: a linear signal plus noise, drawn from `Rng`.
fn data() -> (Tensor, Tensor) {
    let mut rng = Rng::new(11);
    let f = SIZES[0];
    let x: Vec<f32> = (0..ROWS as usize * f)
        .map(|_| rng.normal() as f32)
        .collect();
    let w: Vec<f32> = (0..f).map(|_| rng.normal() as f32 * 0.3).collect();
    let y: Vec<f32> = x
        .chunks(f)
        .map(|row| row.iter().zip(&w).map(|(a, b)| a * b).sum::<f32>() + rng.normal() as f32)
        .collect();
    (
        Tensor::from_slice(&x).reshape([ROWS, f as i64]),
        Tensor::from_slice(&y).reshape([ROWS, 1]),
    )
}

fn loss(model: &Mlp, x: &Tensor, y: &Tensor, rng: &mut Rng) -> Tensor {
    let idx: Vec<i64> = (0..BATCH).map(|_| rng.below(ROWS as u64) as i64).collect();
    let idx = Tensor::from_slice(&idx);
    let p = model.forward(&x.index_select(0, &idx)).unwrap();
    p.mse_loss(&y.index_select(0, &idx), tch::Reduction::Mean)
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

fn model(seed: u64) -> Mlp {
    Mlp::new(&SIZES, &mut Rng::new(seed), Device::Cpu).unwrap()
}

/// Learning rate varying per step, as the template's cosine schedule does.
fn lr(step: usize) -> f64 {
    let progress = step as f64 / 100.0;
    1e-4 + (1e-3 - 1e-4) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
}

#[test]
fn fused_adamw_matches_the_per_tensor_adam_over_100_steps() {
    let (x, y) = data();
    for weight_decay in [0.0, 0.01] {
        let config = AdamConfig {
            weight_decay,
            ..AdamConfig::default()
        };
        let reference = model(3);
        let fused = model(3);
        let mut adam = Adam::new(config, &reference.parameters()).unwrap();
        let mut flat = FlatAdamW::new(config, &fused.parameters()).unwrap();
        let (mut rng_a, mut rng_b) = (Rng::new(5), Rng::new(5));
        for step in 0..100 {
            let l = loss(&reference, &x, &y, &mut rng_a);
            l.backward();
            adam.apply(&reference.parameters(), lr(step)).unwrap();
            let l = loss(&fused, &x, &y, &mut rng_b);
            let grad = flat.gradients(&l).unwrap();
            flat.apply(&grad, lr(step)).unwrap();
        }
        let mut worst: f64 = 0.0;
        for (a, b) in reference.parameters().iter().zip(fused.parameters()) {
            worst = worst.max(max_abs_diff(a, b));
        }
        eprintln!("weight decay {weight_decay}: largest parameter difference {worst:e}");
        assert!(
            worst < 1e-6,
            "weight decay {weight_decay}: parameters differ by {worst:e}"
        );
        // The moments too, slice by slice.
        let state = adam.named_state();
        let n = reference.parameters().len();
        for (k, flat_name) in [(0, "adamw.m"), (1, "adamw.v")] {
            let flat_state = flat.named_state();
            let whole = flat_state
                .iter()
                .find(|(name, _)| name == flat_name)
                .unwrap()
                .1;
            for i in 0..n {
                let slice = flat.params().view_of(whole, i).unwrap();
                let d = max_abs_diff(state[k * n + i].1, &slice);
                assert!(d < 1e-6, "{flat_name} slice {i} differs by {d:e}");
            }
        }
        assert_eq!(flat.step, 100);
    }
}

fn refs(v: &[Tensor]) -> Vec<&Tensor> {
    v.iter().collect()
}

/// Decay groups: weights decayed, biases not (laid out after the weights),
/// against two per-tensor optimizers, one for each group.
#[test]
fn decay_groups_spare_the_undecayed_parameters() {
    let (x, y) = data();
    let decayed = AdamConfig {
        weight_decay: 0.05,
        ..AdamConfig::default()
    };
    let plain = AdamConfig {
        weight_decay: 0.0,
        ..AdamConfig::default()
    };
    let reference = model(3);
    let fused = model(3);
    let split = |m: &Mlp| -> (Vec<Tensor>, Vec<Tensor>) {
        let (w, b): (Vec<_>, Vec<_>) = m
            .named_parameters()
            .into_iter()
            .partition(|(n, _)| n.ends_with("weight"));
        (
            w.into_iter().map(|(_, t)| t.shallow_clone()).collect(),
            b.into_iter().map(|(_, t)| t.shallow_clone()).collect(),
        )
    };
    let (ref_w, ref_b) = split(&reference);
    let (fused_w, fused_b) = split(&fused);
    let mut adam_w = Adam::new(decayed, &refs(&ref_w)).unwrap();
    let mut adam_b = Adam::new(plain, &refs(&ref_b)).unwrap();
    let mut flat = FlatAdamW::with_decay_groups(decayed, &refs(&fused_w), &refs(&fused_b)).unwrap();
    let (mut rng_a, mut rng_b) = (Rng::new(5), Rng::new(5));
    for step in 0..50 {
        let l = loss(&reference, &x, &y, &mut rng_a);
        l.backward();
        adam_w.apply(&refs(&ref_w), lr(step)).unwrap();
        adam_b.apply(&refs(&ref_b), lr(step)).unwrap();
        let l = loss(&fused, &x, &y, &mut rng_b);
        let grad = flat.gradients(&l).unwrap();
        flat.apply(&grad, lr(step)).unwrap();
    }
    for (a, b) in ref_w
        .iter()
        .chain(&ref_b)
        .zip(fused_w.iter().chain(&fused_b))
    {
        let d = max_abs_diff(a, b);
        assert!(d < 1e-6, "parameters differ by {d:e}");
    }
    // Against decaying everything, the biases differ (the groups matter).
    let all = model(3);
    let mut everything = FlatAdamW::new(decayed, &all.parameters()).unwrap();
    let mut rng_c = Rng::new(5);
    for step in 0..50 {
        let l = loss(&all, &x, &y, &mut rng_c);
        let grad = everything.gradients(&l).unwrap();
        everything.apply(&grad, lr(step)).unwrap();
    }
    let (_, all_b) = split(&all);
    let d = max_abs_diff(&all_b[0], &fused_b[0]);
    assert!(d > 1e-7, "decaying the biases changed nothing ({d:e})");
}

#[test]
fn adopted_parameters_are_views_of_the_flat_buffer() {
    let net = model(7);
    let x = Tensor::ones([3, SIZES[0] as i64], (Kind::Float, Device::Cpu));
    let out_before = net.forward(&x).unwrap();
    let before: Vec<Tensor> = net.parameters().iter().map(|t| t.copy()).collect();
    let flat = FlatParams::adopt(&net.parameters()).unwrap();
    assert_eq!(flat.numel() as u64, net.parameter_count());
    for (p, b) in net.parameters().iter().zip(&before) {
        assert!(p.equal(b), "values change on adoption");
        assert!(p.is_leaf() && p.requires_grad());
    }
    // The forward pass sees the views; the flat gradient is each parameter's
    // gradient in the layout's order.
    assert!(net.forward(&x).unwrap().equal(&out_before));
    let out = net.forward(&x).unwrap().sum(Kind::Float);
    let grad = flat.gradients(&out).unwrap();
    let out = net.forward(&x).unwrap().sum(Kind::Float);
    out.backward();
    for (i, p) in net.parameters().iter().enumerate() {
        let slice = flat.view_of(&grad, i).unwrap();
        assert!(slice.equal(&p.grad()), "gradient slice {i}");
    }
    // Writing the buffer writes the model's parameters.
    let _ = tch::no_grad(|| flat.values().shallow_clone().fill_(0.5));
    for p in net.parameters() {
        assert_eq!(p.min().double_value(&[]), 0.5);
        assert_eq!(p.max().double_value(&[]), 0.5);
    }
}

#[test]
fn a_parameter_the_loss_ignores_gets_a_zero_gradient() {
    let net = model(8);
    let unused = Tensor::ones([5], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let mut params = net.parameters();
    params.push(&unused);
    let flat = FlatParams::adopt(&params).unwrap();
    let x = Tensor::ones([2, SIZES[0] as i64], (Kind::Float, Device::Cpu));
    let g = flat
        .gradients(&net.forward(&x).unwrap().sum(Kind::Float))
        .unwrap();
    let last = flat.view_of(&g, params.len() - 1).unwrap();
    assert_eq!(last.abs().sum(Kind::Float).double_value(&[]), 0.0);
}

#[test]
fn adoption_refuses_what_it_cannot_flatten() {
    let no_grad = Tensor::ones([3], (Kind::Float, Device::Cpu));
    assert!(FlatParams::adopt(&[&no_grad]).is_err());
    let double = Tensor::ones([3], (Kind::Double, Device::Cpu)).set_requires_grad(true);
    assert!(FlatParams::adopt(&[&double]).is_err());
    assert!(FlatParams::adopt(&[]).is_err());
}

#[test]
fn clipping_follows_clip_grad_norm() {
    let g = Tensor::from_slice(&[3.0f32, 0.0, -4.0]);
    // Below the limit: the norm, and the gradient unchanged bit for bit.
    let norm = clip_grad_norm(&g, 10.0).unwrap();
    assert_eq!(norm.double_value(&[]), 5.0);
    assert!(g.equal(&Tensor::from_slice(&[3.0f32, 0.0, -4.0])));
    // 0 = measure only.
    let _ = clip_grad_norm(&g, 0.0).unwrap();
    assert!(g.equal(&Tensor::from_slice(&[3.0f32, 0.0, -4.0])));
    // Above: scaled by max / (norm + 1e-6); the returned norm is the one before.
    let norm = clip_grad_norm(&g, 1.0).unwrap();
    assert_eq!(norm.double_value(&[]), 5.0);
    let coef = 1.0 / (5.0 + 1e-6);
    for (i, want) in [3.0 * coef, 0.0, -4.0 * coef].iter().enumerate() {
        assert!((g.double_value(&[i as i64]) - want).abs() < 1e-7);
    }
    assert!((g.norm().double_value(&[]) - 5.0 * coef).abs() < 1e-6);
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tli-kit-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Ten steps, a checkpoint through the kit's files, ten more: identical to
/// twenty uninterrupted steps, bit for bit.
#[test]
fn checkpoints_resume_exactly() {
    let (x, y) = data();
    let config = AdamConfig {
        weight_decay: 0.01,
        ..AdamConfig::default()
    };
    let run = |net: &Mlp, opt: &mut FlatAdamW, rng: &mut Rng, steps: usize| {
        for s in 0..steps {
            let l = loss(net, &x, &y, rng);
            let _ = opt.backward_step(&l, lr(s), 1.0).unwrap();
        }
    };
    let whole = model(4);
    let mut whole_opt = FlatAdamW::new(config, &whole.parameters()).unwrap();
    let mut whole_rng = Rng::new(9);
    run(&whole, &mut whole_opt, &mut whole_rng, 10);

    let dir = temp_dir("flat-adamw");
    let mut named = whole.named_parameters();
    named.extend(whole_opt.named_state());
    checkpoint::save(&dir, &named, &whole_opt.step).unwrap();
    run(&whole, &mut whole_opt, &mut whole_rng, 10);

    let mut resumed = model(99);
    let mut resumed_opt = FlatAdamW::new(config, &resumed.parameters()).unwrap();
    let (tensors, step): (_, u64) = checkpoint::load(&dir, Device::Cpu).unwrap();
    resumed.load_named(&tensors).unwrap();
    resumed_opt.load_named(&tensors, step).unwrap();
    let mut resumed_rng = Rng::new(9);
    for _ in 0..10 {
        let _ = loss(&resumed, &x, &y, &mut resumed_rng); // the same batches as the first run drew
    }
    run(&resumed, &mut resumed_opt, &mut resumed_rng, 10);
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(resumed_opt.step, 20);
    for (a, b) in whole.parameters().iter().zip(resumed.parameters()) {
        assert!(a.equal(b), "parameters differ after resuming");
    }
    for ((_, a), (_, b)) in whole_opt
        .named_state()
        .iter()
        .zip(resumed_opt.named_state())
    {
        assert!(a.equal(b), "moments differ after resuming");
    }
}

#[test]
fn a_per_tensor_adam_checkpoint_is_refused_with_a_clear_error() {
    let net = model(1);
    let old = Adam::new(AdamConfig::default(), &net.parameters()).unwrap();
    let tensors: Vec<(String, Tensor)> = old
        .named_state()
        .into_iter()
        .map(|(n, t)| (n, t.copy()))
        .collect();
    let mut flat = FlatAdamW::new(AdamConfig::default(), &net.parameters()).unwrap();
    let err = flat.load_named(&tensors, 3).unwrap_err();
    assert!(err.message.contains("per-tensor Adam"), "{}", err.message);
    // A model of another size: the moments' shapes are refused.
    let small = Mlp::new(&[2, 3, 1], &mut Rng::new(1), Device::Cpu).unwrap();
    let small_opt = FlatAdamW::new(AdamConfig::default(), &small.parameters()).unwrap();
    let tensors: Vec<(String, Tensor)> = small_opt
        .named_state()
        .into_iter()
        .map(|(n, t)| (n, t.copy()))
        .collect();
    let err = flat.load_named(&tensors, 3).unwrap_err();
    assert!(err.message.contains("adamw.m"), "{}", err.message);
    assert_eq!(flat.step, 0);
}

/// `backward_step` walks the layout in pieces (a matrix larger than a piece
/// split into views, small tensors concatenated, the decayed prefix ending
/// inside a piece): the same update as the flat gradient's `clip_grad_norm`
/// + `apply`, up to the rounding of the norm.
#[test]
fn the_pieced_step_matches_the_flat_one() {
    use tli_plugin_kit::flat_adamw::PIECE;
    let mut rng = Rng::new(5);
    let mut normal = |shape: &[i64], scale: f64| {
        let n: i64 = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| (rng.normal() * scale) as f32).collect();
        Tensor::from_slice(&v).reshape(shape)
    };
    let (rows, cols) = (PIECE / 1000 + 100, 1000);
    let init = [
        normal(&[rows, cols], 0.03),
        normal(&[10, cols], 0.03),
        normal(&[cols], 0.1),
    ];
    let x = normal(&[64, cols], 1.0);
    let config = AdamConfig {
        weight_decay: 0.1,
        ..AdamConfig::default()
    };
    let build = || {
        let p: Vec<Tensor> = init
            .iter()
            .map(|t| t.copy().set_requires_grad(true))
            .collect();
        let opt = FlatAdamW::with_decay_groups(config, &[&p[0], &p[1]], &[&p[2]]).unwrap();
        (p, opt)
    };
    let loss = |p: &[Tensor]| {
        let h = x.matmul(&p[0].tr()).tanh().mean_dim(1, true, Kind::Float);
        (h * x.matmul(&p[1].tr()) + x.matmul(&p[2].unsqueeze(1)))
            .square()
            .mean(Kind::Float)
    };
    let (pieced, mut pieced_opt) = build();
    let (flat, mut flat_opt) = build();
    for max_norm in [0.5, 0.0, 1e9] {
        let n1 = pieced_opt
            .backward_step(&loss(&pieced), 1e-3, max_norm)
            .unwrap();
        let grad = flat_opt.gradients(&loss(&flat)).unwrap();
        let n2 = clip_grad_norm(&grad, max_norm).unwrap();
        flat_opt.apply(&grad, 1e-3).unwrap();
        let (n1, n2) = (n1.double_value(&[]), n2.double_value(&[]));
        assert!((n1 - n2).abs() <= 1e-5 * n2, "norms {n1} vs {n2}");
    }
    for (a, b) in pieced.iter().zip(&flat) {
        let diff = (a - b).abs().max().double_value(&[]);
        assert!(diff < 1e-7, "parameters {:?} differ by {diff}", a.size());
        assert!(a.abs().max().double_value(&[]) > 0.0);
    }
    assert_eq!(pieced_opt.step, 3);
}
