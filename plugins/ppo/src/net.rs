//! The actor and the critic: two separate tanh MLPs (CleanRL `ppo.py` and
//! SB3's default `MlpPolicy` both keep them separate), orthogonally
//! initialised from the kit [`Rng`] with CleanRL's gains: √2 for hidden
//! layers, 0.01 for the policy head, 1.0 for the value head; biases zero.

use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::{
    mlp::{copy_checked, find},
    rng::Rng,
    TchResultExt,
};

/// A `rows × cols` matrix with orthonormal rows (or columns, whichever are
/// fewer) times `gain`, as `torch.nn.init.orthogonal_` builds it: QR of a
/// standard Gaussian matrix (drawn from `rng`), with Q's columns multiplied by
/// the signs of R's diagonal so the result is uniformly distributed.
/// Computed in `f64` on the CPU, returned as `f32` on the CPU.
pub fn orthogonal(
    rows: usize,
    cols: usize,
    gain: f64,
    rng: &mut Rng,
) -> Result<Tensor, PluginError> {
    let values: Vec<f64> = (0..rows * cols).map(|_| rng.normal()).collect();
    (|| -> Result<Tensor, tch::TchError> {
        let mut a = Tensor::f_from_slice(&values)?.f_reshape([rows as i64, cols as i64])?;
        let transpose = rows < cols;
        if transpose {
            a = a.f_t_()?.f_contiguous()?;
        }
        let (q, r) = Tensor::f_linalg_qr(&a, "reduced")?;
        let signs = r.f_diagonal(0, 0, 1)?.f_sign()?;
        // A zero on R's diagonal has probability 0; keep the column as is then.
        let signs = signs.f_where_scalarother(&signs.f_ne(0.0)?, 1.0)?;
        let mut q = q.f_mul(&signs.f_unsqueeze(0)?)?;
        if transpose {
            q = q.f_t_()?;
        }
        q.f_mul_scalar(gain)?.f_to_kind(Kind::Float)?.f_contiguous()
    })()
    .plugin_err("orthogonal initialisation")
}

/// Tanh hidden layers, linear output; parameters are plain leaf tensors.
pub struct TanhMlp {
    /// `(weight [out, in], bias [out])` per layer.
    layers: Vec<(Tensor, Tensor)>,
    prefix: &'static str,
}

impl TanhMlp {
    /// `sizes` = `[inputs, hidden…, outputs]`.
    pub fn new(
        prefix: &'static str,
        sizes: &[usize],
        output_gain: f64,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        if sizes.len() < 2 || sizes.contains(&0) {
            return Err(PluginError::invalid_config(format!(
                "MLP layer sizes {sizes:?} need an input and an output, all non-zero"
            )));
        }
        let last = sizes.len() - 2;
        let mut layers = Vec::with_capacity(sizes.len() - 1);
        for (i, pair) in sizes.windows(2).enumerate() {
            let gain = if i == last {
                output_gain
            } else {
                std::f64::consts::SQRT_2
            };
            let weight = orthogonal(pair[1], pair[0], gain, rng)?
                .f_to_device(device)
                .plugin_err("allocating network weights")?
                .set_requires_grad(true);
            let bias = Tensor::f_zeros([pair[1] as i64], (Kind::Float, device))
                .plugin_err("allocating network biases")?
                .set_requires_grad(true);
            layers.push((weight, bias));
        }
        Ok(Self { layers, prefix })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        let mut h = x.shallow_clone();
        let last = self.layers.len() - 1;
        for (i, (w, b)) in self.layers.iter().enumerate() {
            h = h.f_linear(w, Some(b))?;
            if i < last {
                h = h.f_tanh()?;
            }
        }
        Ok(h)
    }

    pub fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        let p = self.prefix;
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, (w, b))| {
                [
                    (format!("{p}.layer{i}.weight"), w),
                    (format!("{p}.layer{i}.bias"), b),
                ]
            })
            .collect()
    }

    /// Copies this network's tensors (named as [`named_parameters`](Self::named_parameters)
    /// names them) from `tensors`, refusing a missing name or another shape.
    pub fn load_named(&self, tensors: &[(String, Tensor)]) -> Result<(), PluginError> {
        for (name, param) in self.named_parameters() {
            copy_checked(param, find(tensors, &name)?, &name)?;
        }
        Ok(())
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        self.layers.iter().flat_map(|(w, b)| [w, b]).collect()
    }
}

/// The policy (logits over discrete actions) and the value function.
pub struct ActorCritic {
    pub actor: TanhMlp,
    pub critic: TanhMlp,
}

impl ActorCritic {
    pub fn new(
        actor_sizes: &[usize],
        critic_sizes: &[usize],
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        Ok(Self {
            actor: TanhMlp::new("actor", actor_sizes, 0.01, &mut rng.fork(1), device)?,
            critic: TanhMlp::new("critic", critic_sizes, 1.0, &mut rng.fork(2), device)?,
        })
    }

    /// Actor parameters, then critic parameters, with stable names.
    pub fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        let mut all = self.actor.named_parameters();
        all.extend(self.critic.named_parameters());
        all
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    pub fn load_named(&self, tensors: &[(String, Tensor)]) -> Result<(), PluginError> {
        for (name, param) in self.named_parameters() {
            copy_checked(param, find(tensors, &name)?, &name)?;
        }
        Ok(())
    }

    /// `(log-probabilities [n, actions], values [n])`.
    pub fn forward(&self, obs: &Tensor) -> Result<(Tensor, Tensor), tch::TchError> {
        let logits = self.actor.forward(obs)?;
        let value = self.critic.forward(obs)?.f_squeeze_dim(-1)?;
        Ok((logits.f_log_softmax(-1, Kind::Float)?, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_abs_diff_from_identity(m: &Tensor) -> f64 {
        let n = m.size()[0];
        (m - Tensor::eye(n, (Kind::Float, Device::Cpu)))
            .abs()
            .max()
            .double_value(&[])
    }

    #[test]
    fn orthogonal_matrices_are_orthogonal_scaled_and_seeded() {
        for (rows, cols) in [(64usize, 4usize), (2, 64), (64, 64), (1, 1)] {
            let gain = 2f64.sqrt();
            let w = orthogonal(rows, cols, gain, &mut Rng::new(3)).unwrap();
            assert_eq!(w.size(), vec![rows as i64, cols as i64]);
            let w = w / gain;
            let gram = if rows >= cols {
                w.tr().matmul(&w)
            } else {
                w.matmul(&w.tr())
            };
            assert!(max_abs_diff_from_identity(&gram) < 1e-5, "{rows}x{cols}");
        }
        let a = orthogonal(8, 5, 1.0, &mut Rng::new(9)).unwrap();
        let b = orthogonal(8, 5, 1.0, &mut Rng::new(9)).unwrap();
        let c = orthogonal(8, 5, 1.0, &mut Rng::new(10)).unwrap();
        assert!(a.equal(&b));
        assert!(!a.equal(&c));
    }

    #[test]
    fn heads_start_small() {
        let net = ActorCritic::new(
            &[4, 64, 64, 2],
            &[4, 64, 64, 1],
            &mut Rng::new(1),
            Device::Cpu,
        )
        .unwrap();
        let x = Tensor::from_slice(&[0.1f32, -0.2, 0.03, 0.5]).reshape([1, 4]);
        let (logp, _) = net.forward(&x).unwrap();
        // Policy head gain 0.01: nearly uniform at the start.
        let p = logp.exp();
        assert!((p.double_value(&[0, 0]) - 0.5).abs() < 0.02);
    }
}
