//! The Q-network: a kit [`Mlp`] torso, optionally with a dueling head
//! (Wang et al. 2016: `Q = V + A − mean_a A`).

use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::{
    mlp::{copy_checked, find, Mlp},
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
