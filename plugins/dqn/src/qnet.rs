//! The Q-network: a kit [`Mlp`] torso, optionally with a dueling head
//! (Wang et al. 2016: `Q = V + A − mean_a A`).

use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::{
    mlp::{copy_checked, find, Mlp},
    mlp_mirror::MlpMirror,
    rng::Rng,
    TchResultExt,
};

pub struct QNet {
    /// Plain: `[obs, hidden…, actions]`. Dueling: `[obs, hidden…]`, ReLU applied after it.
    torso: Mlp,
    /// Dueling heads: value `[h, 1]` and advantage `[h, actions]`.
    heads: Option<(Mlp, Mlp)>,
}

/// Layer sizes of each part: `(torso, optional (value, advantage))`.
pub type Layout = (Vec<usize>, Option<(Vec<usize>, Vec<usize>)>);

pub fn layout(obs: usize, hidden: &[usize], actions: usize, dueling: bool) -> Layout {
    let mut torso = vec![obs];
    torso.extend(hidden);
    if dueling {
        let h = *hidden.last().unwrap_or(&obs);
        (torso, Some((vec![h, 1], vec![h, actions])))
    } else {
        torso.push(actions);
        (torso, None)
    }
}

/// Scalar parameters of a network with this layout.
pub fn parameter_count(layout: &Layout) -> u64 {
    let (torso, heads) = layout;
    Mlp::parameter_count_for(torso)
        + heads
            .as_ref()
            .map(|(v, a)| Mlp::parameter_count_for(v) + Mlp::parameter_count_for(a))
            .unwrap_or(0)
}

impl QNet {
    pub fn new(layout: &Layout, rng: &mut Rng, device: Device) -> Result<Self, PluginError> {
        let (torso, heads) = layout;
        let torso = Mlp::new(torso, rng, device)?;
        let heads = match heads {
            Some((v, a)) => Some((Mlp::new(v, rng, device)?, Mlp::new(a, rng, device)?)),
            None => None,
        };
        Ok(Self { torso, heads })
    }

    /// `[batch, obs]` → `[batch, actions]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, PluginError> {
        let h = self.torso.forward(x)?;
        match &self.heads {
            None => Ok(h),
            Some((value, advantage)) => {
                let h = h.f_relu().plugin_err("dueling torso")?;
                let v = value.forward(&h)?;
                let a = advantage.forward(&h)?;
                a.f_mean_dim(1, true, Kind::Float)
                    .and_then(|m| a.f_sub(&m))
                    .and_then(|centred| centred.f_add(&v))
                    .plugin_err("dueling head")
            }
        }
    }

    pub fn is_dueling(&self) -> bool {
        self.heads.is_some()
    }

    /// A plain-Rust copy for acting (see [`QNetMirror`]).
    pub fn mirror(&self) -> Result<QNetMirror, PluginError> {
        let heads = match &self.heads {
            Some((value, advantage)) => Some((value.mirror()?, advantage.mirror()?)),
            None => None,
        };
        Ok(QNetMirror {
            torso: self.torso.mirror()?,
            heads,
            hidden: Vec::new(),
            value: Vec::new(),
            q: Vec::new(),
        })
    }

    /// Parameters in a fixed order with stable names (`torso.layer0.weight`, …).
    pub fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        let mut out: Vec<(String, &Tensor)> = self
            .torso
            .named_parameters()
            .into_iter()
            .map(|(n, t)| (format!("torso.{n}"), t))
            .collect();
        if let Some((value, advantage)) = &self.heads {
            for (prefix, part) in [("value", value), ("advantage", advantage)] {
                out.extend(
                    part.named_parameters()
                        .into_iter()
                        .map(|(n, t)| (format!("{prefix}.{n}"), t)),
                );
            }
        }
        out
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Copies parameters saved under `prefix` + this network's names.
    pub fn load_named(
        &self,
        tensors: &[(String, Tensor)],
        prefix: &str,
    ) -> Result<(), PluginError> {
        for (name, param) in self.named_parameters() {
            let full = format!("{prefix}{name}");
            copy_checked(param, find(tensors, &full)?, &full)?;
        }
        Ok(())
    }

    /// `self ← τ·source + (1 − τ)·self` (τ = 1: an exact copy).
    pub fn update_from(&self, source: &QNet, tau: f64) -> Result<(), PluginError> {
        tch::no_grad(|| {
            for (dst, src) in self.parameters().into_iter().zip(source.parameters()) {
                let mut d = dst.shallow_clone();
                let result = if tau >= 1.0 {
                    d.f_copy_(src).map(drop)
                } else {
                    d.f_mul_scalar_(1.0 - tau)
                        .and_then(|_| src.f_mul_scalar(tau))
                        .and_then(|s| d.f_add_(&s))
                        .map(drop)
                };
                result.plugin_err("updating the target network")?;
            }
            Ok(())
        })
    }
}

/// The Q-network's weights as plain Rust arrays: Q-values of the few
/// observations an agent acts on each step without libtorch's per-operation
/// dispatch (`tli_plugin_kit::mlp_mirror`). A copy: make a new one whenever
/// the network's weights change.
pub struct QNetMirror {
    torso: MlpMirror,
    heads: Option<(MlpMirror, MlpMirror)>,
    hidden: Vec<f32>,
    value: Vec<f32>,
    q: Vec<f32>,
}

impl QNetMirror {
    /// `rows × obs` observations → `rows × actions` Q-values.
    pub fn q_values(&mut self, obs: &[f32], rows: usize) -> Result<&[f32], PluginError> {
        let h = self.torso.forward(obs, rows)?;
        let Some((value, advantage)) = &mut self.heads else {
            self.q.clear();
            self.q.extend_from_slice(h);
            return Ok(&self.q);
        };
        self.hidden.clear();
        self.hidden.extend(h.iter().map(|v| v.max(0.0)));
        self.value.clear();
        self.value
            .extend_from_slice(value.forward(&self.hidden, rows)?);
        let a = advantage.forward(&self.hidden, rows)?;
        let actions = a.len() / rows.max(1);
        self.q.clear();
        for (row, v) in a.chunks_exact(actions.max(1)).zip(&self.value) {
            let mean = row.iter().sum::<f32>() / actions as f32;
            self.q.extend(row.iter().map(|x| x - mean + v));
        }
        Ok(&self.q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_gives_the_networks_q_values() {
        for dueling in [false, true] {
            let mut rng = Rng::new(11);
            let net = QNet::new(&layout(4, &[16, 8], 3, dueling), &mut rng, Device::Cpu).unwrap();
            let obs: Vec<f32> = (0..5 * 4)
                .map(|_| rng.uniform() as f32 * 2.0 - 1.0)
                .collect();
            let x = Tensor::from_slice(&obs).reshape([5, 4]);
            let expected = tch::no_grad(|| net.forward(&x)).unwrap().contiguous();
            let mut want = vec![0f32; 15];
            expected.copy_data(&mut want, 15);
            let mut mirror = net.mirror().unwrap();
            let got = mirror.q_values(&obs, 5).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-5, "dueling {dueling}: {g} vs {w}");
            }
        }
    }
}
