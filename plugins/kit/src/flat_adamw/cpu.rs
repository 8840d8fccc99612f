//! [`FlatAdamW`]'s update on the CPU as two plain-Rust passes over memory:
//! the gradient's norm, then clipping and the whole AdamW step element by
//! element. The libtorch path ([`FlatAdamW::apply`] after
//! [`clip_grad_norm`](crate::grad_clip::clip_grad_norm)) runs ten or so
//! kernels, each a dispatched operation of a few microseconds and a pass over
//! the flat buffers; for a small model (DQN's 17k parameters) that is most of
//! the optimizer's time. Same formulas and `f32` arithmetic, with the
//! operations in a different order, so results agree to rounding (the tests
//! compare the two paths), not bit for bit.

use super::FlatAdamW;
use crate::grad_clip::host_clip_factor;
use crate::host_slice::host_slice_mut;
use tch::Tensor;
use tli_plugin_api::PluginError;

impl FlatAdamW {
    /// Clips `grad` (a flat gradient in this optimizer's layout) to a global
    /// L2 norm of `max_grad_norm` (≤ 0 or not finite: no clipping; the
    /// coefficient `min(1, max / (norm + 1e-6))` as `clip_grad_norm_`) and
    /// applies one AdamW update at learning rate `lr`; returns the norm
    /// before clipping. `grad` is read, not modified. The parameters and the
    /// moments must live on the CPU (an error says so otherwise: use
    /// [`apply`](Self::apply) there).
    pub fn apply_on_cpu(
        &mut self,
        grad: &[f32],
        lr: f64,
        max_grad_norm: f64,
    ) -> Result<f32, PluginError> {
        let total = self.params().numel() as usize;
        if grad.len() != total {
            return Err(PluginError::other(format!(
                "optimizer update: gradient of {} values, the parameters have {total}",
                grad.len()
            )));
        }
        // Handles to the buffers (not borrows of `self`, whose step counter
        // advances below).
        let [values, first, second] = [
            self.params.values(),
            &self.first_moment,
            &self.second_moment,
        ]
        .map(Tensor::shallow_clone);
        // SAFETY: the three are distinct tensors this optimizer owns
        // (`host_slice_mut` checks each is contiguous CPU f32); nothing else
        // runs on them while `&mut self` is held.
        let (p, m, v) = unsafe {
            (
                host_slice_mut::<f32>(&values)?,
                host_slice_mut::<f32>(&first)?,
                host_slice_mut::<f32>(&second)?,
            )
        };
        let norm = l2_norm(grad);
        let clip = host_clip_factor(norm, max_grad_norm).unwrap_or(1.0);
        let s = self.next_step(lr);
        let c = self.config;
        let decayed = if c.weight_decay != 0.0 {
            self.decayed_numel as usize
        } else {
            0
        };
        let (w1, w2) = ((1.0 - c.beta1) as f32, (1.0 - c.beta2) as f32);
        for ((m, v), g) in m.iter_mut().zip(v.iter_mut()).zip(grad) {
            let g = g * clip;
            *m += w1 * (g - *m);
            *v += w2 * (g * g - *v);
        }
        if s.lr == 0.0 {
            return Ok(norm);
        }
        // p ← p − lr·(m̂ / (√v̂ + ε) + λ·p), m̂ = m/b1, v̂ = v/b2, written as
        // p + m / d with d = −(√v·(b1/(lr·√b2)) + ε·b1/lr), as the libtorch path.
        let scale = (-s.bias1 / (s.lr * s.bias2.sqrt())) as f32;
        let shift = (c.eps * s.bias1 / s.lr) as f32;
        let decay = (-s.lr * c.weight_decay) as f32;
        // The decayed prefix and the rest in two loops without a branch
        // inside, so that each vectorizes.
        let (p_decayed, p_rest) = p.split_at_mut(decayed);
        let (m_decayed, m_rest) = m.split_at(decayed);
        let (v_decayed, v_rest) = v.split_at(decayed);
        for ((p, m), v) in p_decayed.iter_mut().zip(m_decayed).zip(v_decayed) {
            *p += *p * decay + m / (v.sqrt() * scale - shift);
        }
        for ((p, m), v) in p_rest.iter_mut().zip(m_rest).zip(v_rest) {
            *p += m / (v.sqrt() * scale - shift);
        }
        Ok(norm)
    }
}

/// `‖x‖₂` with sixteen running sums (vectorizable), each in `f32`.
fn l2_norm(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (acc, v) in lanes.iter_mut().zip(chunk) {
            *acc += v * v;
        }
    }
    let tail: f32 = rest.iter().map(|v| v * v).sum();
    (lanes.iter().sum::<f32>() + tail).sqrt()
}

#[cfg(test)]
mod tests {
    use super::FlatAdamW;
    use crate::adam::AdamConfig;
    use crate::grad_clip::clip_grad_norm;
    use crate::rng::Rng;
    use tch::{Device, Kind, Tensor};

    fn leaf(rng: &mut Rng, shape: &[i64]) -> Tensor {
        let n: i64 = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
        Tensor::from_slice(&v)
            .reshape(shape)
            .set_requires_grad(true)
    }

    fn values(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
    }

    #[test]
    fn the_cpu_update_follows_the_libtorch_one() {
        for (weight_decay, max_norm, lr) in [
            (0.0, 10.0, 1e-2),
            (0.1, 0.5, 3e-3),
            (0.0, 0.0, 1e-3),
            (0.05, 1.0, 0.0),
        ] {
            let mut rng = Rng::new(5);
            let shapes: [&[i64]; 3] = [&[7, 5], &[7], &[3, 7]];
            let make = |rng: &mut Rng| shapes.map(|s| leaf(rng, s));
            let a = make(&mut rng.fork(1));
            let b = make(&mut rng.fork(1));
            let config = AdamConfig {
                weight_decay,
                ..AdamConfig::default()
            };
            let (decayed, kept) = (&[&a[0], &a[2]], &[&a[1]]);
            let mut reference = FlatAdamW::with_decay_groups(config, decayed, kept).unwrap();
            let mut fused =
                FlatAdamW::with_decay_groups(config, &[&b[0], &b[2]], &[&b[1]]).unwrap();
            for step in 0..20 {
                let n = reference.params().numel();
                let g: Vec<f32> = (0..n).map(|_| rng.normal() as f32 * 3.0).collect();
                let torch_grad = Tensor::from_slice(&g);
                let want_norm = clip_grad_norm(&torch_grad, max_norm).unwrap();
                reference.apply(&torch_grad, lr).unwrap();
                let norm = fused.apply_on_cpu(&g, lr, max_norm).unwrap();
                let what = format!("decay {weight_decay}, clip {max_norm}, lr {lr}, step {step}");
                let want = want_norm.double_value(&[]) as f32;
                assert!(
                    (norm - want).abs() <= 1e-5 * want,
                    "{what}: norm {norm} vs {want}"
                );
                for (x, y) in values(fused.params().values())
                    .iter()
                    .zip(values(reference.params().values()))
                {
                    assert!(
                        (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                        "{what}: {x} vs {y}"
                    );
                }
                for ((_, m1), (_, m2)) in fused.named_state().iter().zip(reference.named_state()) {
                    let d = (*m1 - m2).abs().max().double_value(&[]);
                    assert!(d <= 1e-5, "{what}: moments differ by {d}");
                }
            }
            assert_eq!(fused.step, 20);
        }
    }

    #[test]
    fn the_cpu_update_refuses_a_gradient_of_another_size() {
        let p = Tensor::zeros([4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let mut opt = FlatAdamW::new(AdamConfig::default(), &[&p]).unwrap();
        let err = opt.apply_on_cpu(&[1.0; 3], 1e-3, 1.0).unwrap_err();
        assert!(err.to_string().contains("3 values"), "{err}");
        assert_eq!(opt.step, 0);
    }
}
