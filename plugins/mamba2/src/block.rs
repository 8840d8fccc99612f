//! The Mamba-2 mixer block (Dao & Gu 2024; `mamba_ssm` `Mamba2`, non-fused
//! reference path):
//!
//! ```text
//! [z, x, B, C, dt] = in_proj(u)                         (no bias)
//! [x, B, C] = SiLU(causal depthwise conv1d([x, B, C]))  (kernel d_conv, with bias)
//! dt = softplus(dt + dt_bias); A = −exp(A_log)
//! y = SSD(x, dt, A, B, C) + D·x
//! y = RMSNorm_groups(y · SiLU(z)) · weight              (norm_before_gate = false, eps 1e-5)
//! out = out_proj(y)                                     (no bias)
//! ```
//!
//! Three paths compute the same function: [`Mamba2Block::forward`] (chunked
//! SSD, for training; [`Mamba2Block::forward_with_state`] also starts from
//! and returns a [`State`]), [`Mamba2Block::forward_sequential`] (the
//! recurrence) and [`Mamba2Block::step`] (one bar at a time from a
//! [`State`], O(1) per bar).

use crate::norm::{gated_rms_norm, RMS_EPS};
use crate::ssd::{ssd_chunked, ssd_sequential, ssd_step};
use crate::{cast, leaf, uniform_leaf};
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;
use tli_plugin_kit::nn::{join, Linear, Parameters};
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::TchResultExt;

/// The reference chunk size of the chunked SSD.
pub const DEFAULT_CHUNK_SIZE: usize = 256;

/// Block hyper-parameters; [`Mamba2Config::new`] gives `mamba_ssm`'s defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Mamba2Config {
    pub d_model: usize,
    /// `N`, the state size per head channel (default 128).
    pub d_state: usize,
    /// Convolution kernel (default 4).
    pub d_conv: usize,
    /// `d_inner = expand · d_model` (default 2).
    pub expand: usize,
    /// `P`, channels per head; `H = d_inner / P` (default 64).
    pub headdim: usize,
    /// `G`, groups sharing B and C; divides `H` (default 1).
    pub ngroups: usize,
    /// `A` starts at `−U[lo, hi]` (default (1, 16)).
    pub a_init_range: (f64, f64),
    /// `dt` starts log-uniform in `[dt_min, dt_max]` (defaults 1e-3, 0.1),
    /// floored at `dt_init_floor` (1e-4).
    pub dt_min: f64,
    pub dt_max: f64,
    pub dt_init_floor: f64,
}

impl Mamba2Config {
    pub fn new(d_model: usize) -> Self {
        Self {
            d_model,
            d_state: 128,
            d_conv: 4,
            expand: 2,
            headdim: 64,
            ngroups: 1,
            a_init_range: (1.0, 16.0),
            dt_min: 1e-3,
            dt_max: 0.1,
            dt_init_floor: 1e-4,
        }
    }

    pub fn d_inner(&self) -> usize {
        self.expand * self.d_model
    }

    pub fn nheads(&self) -> usize {
        self.d_inner() / self.headdim
    }

    /// Channels through the convolution: `x`, `B` and `C`.
    pub fn conv_dim(&self) -> usize {
        self.d_inner() + 2 * self.ngroups * self.d_state
    }

    /// Refuses sizes the block cannot be built with.
    pub fn validate(&self) -> Result<(), PluginError> {
        let sizes = [
            ("d_model", self.d_model),
            ("d_state", self.d_state),
            ("d_conv", self.d_conv),
            ("expand", self.expand),
            ("headdim", self.headdim),
            ("ngroups", self.ngroups),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(PluginError::invalid_config(format!(
                "Mamba-2: {name} must be at least 1"
            )));
        }
        if !self.d_inner().is_multiple_of(self.headdim) {
            return Err(PluginError::invalid_config(format!(
                "Mamba-2: headdim {} must divide expand·d_model = {}",
                self.headdim,
                self.d_inner()
            )));
        }
        if !self.nheads().is_multiple_of(self.ngroups) {
            return Err(PluginError::invalid_config(format!(
                "Mamba-2: ngroups {} must divide the number of heads {}",
                self.ngroups,
                self.nheads()
            )));
        }
        let (lo, hi) = self.a_init_range;
        if !(lo > 0.0 && hi >= lo) {
            return Err(PluginError::invalid_config(format!(
                "Mamba-2: A_init_range ({lo}, {hi}) must satisfy 0 < lo ≤ hi"
            )));
        }
        if !(self.dt_min > 0.0 && self.dt_max >= self.dt_min && self.dt_init_floor > 0.0) {
            return Err(PluginError::invalid_config(format!(
                "Mamba-2: need 0 < dt_min ≤ dt_max and dt_init_floor > 0 (got {}, {}, {})",
                self.dt_min, self.dt_max, self.dt_init_floor
            )));
        }
        Ok(())
    }
}

/// A block's streaming state: the last `d_conv` convolution inputs and the
/// SSM state.
pub struct State {
    /// `(B, conv_dim, d_conv)`, oldest first.
    pub conv: Tensor,
    /// `(B, H, P, N)`.
    pub ssm: Tensor,
}

impl State {
    /// The state before the first bar, in the block's kind and device.
    pub fn zeros(block: &Mamba2Block, batch: usize) -> Result<Self, PluginError> {
        let c = &block.config;
        let options = (block.d.kind(), block.d.device());
        let b = batch as i64;
        Ok(Self {
            conv: Tensor::f_zeros([b, c.conv_dim() as i64, c.d_conv as i64], options)
                .plugin_err("allocating the Mamba-2 state")?,
            ssm: Tensor::f_zeros(
                [b, c.nheads() as i64, c.headdim as i64, c.d_state as i64],
                options,
            )
            .plugin_err("allocating the Mamba-2 state")?,
        })
    }
}

pub struct Mamba2Block {
    pub config: Mamba2Config,
    /// `d_model → [z, x, B, C, dt]`, no bias.
    pub in_proj: Linear,
    /// `(conv_dim, 1, d_conv)`, depthwise.
    pub conv_weight: Tensor,
    /// `(conv_dim)`.
    pub conv_bias: Tensor,
    /// `(H)`: `softplus⁻¹` of the initial `dt`.
    pub dt_bias: Tensor,
    /// `(H)`: `A = −exp(A_log)`.
    pub a_log: Tensor,
    /// `(H)`: the skip `D·x`, starts at 1.
    pub d: Tensor,
    /// `(d_inner)`: the gated RMSNorm's weight, starts at 1.
    pub norm_weight: Tensor,
    /// `d_inner → d_model`, no bias.
    pub out_proj: Linear,
}

impl Mamba2Block {
    /// A block initialised as `mamba_ssm` does, from `rng`: projections and
    /// convolution with PyTorch's default (uniform `±1/√fan_in`); `dt_bias`
    /// the inverse softplus of a log-uniform `dt`; `A_log = log U[lo, hi]`;
    /// `D = 1`; `out_proj` divided by `√n_layer` (one residual per layer).
    pub fn new(
        config: &Mamba2Config,
        n_layer: usize,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self, PluginError> {
        config.validate()?;
        let c = config;
        let (d_inner, h) = (c.d_inner(), c.nheads());
        let proj_out = 2 * d_inner + 2 * c.ngroups * c.d_state + h;
        let in_proj = Linear::new(c.d_model, proj_out, false, rng, device)?;
        let conv_bound = 1.0 / (c.d_conv as f64).sqrt();
        let conv_shape = [c.conv_dim() as i64, 1, c.d_conv as i64];
        let conv_weight = uniform_leaf(&conv_shape, conv_bound, rng, device)?;
        let conv_bias = uniform_leaf(&[c.conv_dim() as i64], conv_bound, rng, device)?;
        let (ln_min, ln_max) = (c.dt_min.ln(), c.dt_max.ln());
        let dt_bias: Vec<f64> = (0..h)
            .map(|_| {
                let dt = (rng.uniform() * (ln_max - ln_min) + ln_min)
                    .exp()
                    .max(c.dt_init_floor);
                // softplus⁻¹(dt) = dt + log(1 − e^{−dt}).
                dt + (-(-dt).exp_m1()).ln()
            })
            .collect();
        let (lo, hi) = c.a_init_range;
        let a_log: Vec<f64> = (0..h)
            .map(|_| (lo + rng.uniform() * (hi - lo)).ln())
            .collect();
        let out_proj = Linear::new(d_inner, c.d_model, false, rng, device)?;
        let scale = 1.0 / (n_layer.max(1) as f64).sqrt();
        let out_weight = out_proj
            .weight
            .f_detach()
            .and_then(|w| w.f_mul_scalar(scale))
            .plugin_err("scaling out_proj")?
            .set_requires_grad(true);
        Ok(Self {
            config: c.clone(),
            in_proj,
            conv_weight,
            conv_bias,
            dt_bias: leaf(&dt_bias, &[h as i64], device)?,
            a_log: leaf(&a_log, &[h as i64], device)?,
            d: leaf(&vec![1.0; h], &[h as i64], device)?,
            norm_weight: leaf(&vec![1.0; d_inner], &[d_inner as i64], device)?,
            out_proj: Linear {
                weight: out_weight,
                bias: None,
            },
        })
    }

    /// A copy with parameters of `kind` (e.g. `Double` for exactness tests).
    pub fn to_kind(&self, kind: Kind) -> Result<Self, PluginError> {
        let linear = |l: &Linear| -> Result<Linear, PluginError> {
            Ok(Linear {
                weight: cast(&l.weight, kind)?,
                bias: l.bias.as_ref().map(|b| cast(b, kind)).transpose()?,
            })
        };
        Ok(Self {
            config: self.config.clone(),
            in_proj: linear(&self.in_proj)?,
            conv_weight: cast(&self.conv_weight, kind)?,
            conv_bias: cast(&self.conv_bias, kind)?,
            dt_bias: cast(&self.dt_bias, kind)?,
            a_log: cast(&self.a_log, kind)?,
            d: cast(&self.d, kind)?,
            norm_weight: cast(&self.norm_weight, kind)?,
            out_proj: linear(&self.out_proj)?,
        })
    }

    /// `u (B, L, d_model)` → `(B, L, d_model)` with the chunked SSD.
    pub fn forward(&self, u: &Tensor, chunk_size: usize) -> Result<Tensor, PluginError> {
        Ok(self.forward_with_state(u, chunk_size, None)?.0)
    }

    /// `u (B, L, d_model)` → `(B, L, d_model)` with the sequential recurrence.
    pub fn forward_sequential(&self, u: &Tensor) -> Result<Tensor, PluginError> {
        let (y, _) = self.mix(u, None, |x, dt, a, b, c, _| {
            Ok(ssd_sequential(x, dt, a, b, c, None)?.0)
        })?;
        Ok(y)
    }

    /// The chunked forward continuing from `state` (`None`: from zeros), and
    /// the state after the last position: stepping on from it continues the
    /// sequence exactly (e.g. a warm-up window, then bar by bar).
    pub fn forward_with_state(
        &self,
        u: &Tensor,
        chunk_size: usize,
        state: Option<&State>,
    ) -> Result<(Tensor, State), PluginError> {
        let ssm_state = std::cell::RefCell::new(None);
        let (y, conv) = self.mix(u, state, |x, dt, a, b, c, init| {
            let (y, last) = ssd_chunked(x, dt, a, b, c, init, chunk_size)?;
            *ssm_state.borrow_mut() = Some(last);
            Ok(y)
        })?;
        let ssm = ssm_state
            .into_inner()
            .ok_or_else(|| PluginError::invalid_data("Mamba-2: no SSM state"))?;
        Ok((y, State { conv, ssm }))
    }

    /// One bar: `u (B, d_model)` → `(B, d_model)`, advancing `state`.
    pub fn step(&self, u: &Tensor, state: &mut State) -> Result<Tensor, PluginError> {
        let c = &self.config;
        let parts = self.project(u)?;
        let [z, xbc, dt] = &parts[..] else {
            return Err(PluginError::invalid_data("Mamba-2: in_proj split failed"));
        };
        let (conv, xbc) = (|| {
            let k = c.d_conv as i64;
            let conv = Tensor::f_cat(
                &[&state.conv.f_narrow(-1, 1, k - 1)?, &xbc.f_unsqueeze(-1)?],
                -1,
            )?;
            let w = self.conv_weight.f_squeeze_dim(1)?;
            let out = conv
                .f_mul(&w)?
                .f_sum_dim_intlist(-1, false, None::<Kind>)?
                .f_add(&self.conv_bias)?
                .f_silu()?;
            Ok::<_, tch::TchError>((conv, out))
        })()
        .plugin_err("Mamba-2 step convolution")?;
        let (x, b, cm, dt, a) = self.ssm_inputs(&xbc, dt, &[])?;
        let (y, ssm) = ssd_step(&x, &dt, &a, &b, &cm, &state.ssm)?;
        let out = self.output(&y, &x, z)?;
        state.conv = conv;
        state.ssm = ssm;
        Ok(out)
    }

    /// `in_proj(u)` split into `[z, xBC, dt]`.
    fn project(&self, u: &Tensor) -> Result<Vec<Tensor>, PluginError> {
        let c = &self.config;
        let sizes = [c.d_inner() as i64, c.conv_dim() as i64, c.nheads() as i64];
        self.in_proj
            .forward(u)?
            .f_split_with_sizes(sizes, -1)
            .plugin_err("Mamba-2 in_proj split")
    }

    /// The shared body of the sequence paths; `ssm` maps
    /// `(x, dt, A, B, C, initial SSM state)` to the SSD output `(B, L, H, P)`
    /// (no `D` skip). Returns the output and the convolution state after the
    /// last position.
    fn mix(
        &self,
        u: &Tensor,
        state: Option<&State>,
        ssm: impl FnOnce(
            &Tensor,
            &Tensor,
            &Tensor,
            &Tensor,
            &Tensor,
            Option<&Tensor>,
        ) -> Result<Tensor, PluginError>,
    ) -> Result<(Tensor, Tensor), PluginError> {
        let size = u.size();
        let [batch, len, _] = size[..] else {
            return Err(PluginError::invalid_data(format!(
                "Mamba-2 block expects (batch, length, d_model), got {size:?}"
            )));
        };
        let parts = self.project(u)?;
        let [z, xbc, dt] = &parts[..] else {
            return Err(PluginError::invalid_data("Mamba-2: in_proj split failed"));
        };
        let k = self.config.d_conv as i64;
        let zeros;
        let history = match state {
            Some(s) => &s.conv,
            None => {
                zeros = State::zeros(self, batch as usize)?.conv;
                &zeros
            }
        };
        let (xbc, conv_state) = (|| {
            // The last k − 1 inputs seen so far, then this sequence: a causal
            // convolution without padding (zeros: the usual left padding).
            // Position-major throughout, (B, k − 1 + L, conv_dim): x, B and C
            // are slices of the last dimension, and the SSD's reshapes and
            // products want each position's channels adjacent.
            let seq = Tensor::f_cat(
                &[&history.f_narrow(-1, 1, k - 1)?.f_transpose(1, 2)?, xbc],
                1,
            )?;
            let conv_state = seq
                .f_narrow(1, len - 1, k)?
                .f_transpose(1, 2)?
                .f_contiguous()?;
            // The depthwise convolution as a 2-D one over (B, conv_dim, 1, ·)
            // in channels-last layout, which is the position-major storage
            // itself: no transposed copy on the way in or out, and oneDNN's
            // (cuDNN's) depthwise kernels for that layout instead of the
            // per-channel unfold-and-multiply the channel-major 1-D form ran
            // (forward + backward 2–4× faster at 16 × 1,024 bars). The same
            // sums, added in another order (equal to rounding).
            let out = seq
                .f_unsqueeze(1)?
                .f_permute([0, 3, 1, 2])?
                .f_conv2d(
                    &self.conv_weight.f_unsqueeze(2)?,
                    None::<Tensor>,
                    [1, 1],
                    [0, 0],
                    [1, 1],
                    self.config.conv_dim() as i64,
                )?
                .f_permute([0, 2, 3, 1])?
                .f_squeeze_dim(1)?
                // A no-op where the kernel kept the layout (it does on CPU).
                .f_contiguous()?
                // The bias added in place on the fresh output, not by the
                // kernel: oneDNN's bias gradient for this layout is a slow
                // loop (4 % of a step), autograd's sum over positions is not.
                .f_add_(&self.conv_bias)?
                // SiLU on the contiguous output: its backward then reads a
                // contiguous gradient beside a contiguous input.
                .f_silu()?;
            Ok::<_, tch::TchError>((out, conv_state))
        })()
        .plugin_err("Mamba-2 convolution")?;
        let (x, b, c, dt, a) = self.ssm_inputs(&xbc, dt, &[batch, len])?;
        let y = ssm(&x, &dt, &a, &b, &c, state.map(|s| &s.ssm))?;
        Ok((self.output(&y, &x, z)?, conv_state))
    }

    /// `xBC (lead…, conv_dim)` and raw `dt (lead…, H)` →
    /// `(x (lead…, H, P), B, C (lead…, G, N), dt = softplus(dt + dt_bias), A)`.
    #[allow(clippy::type_complexity)]
    fn ssm_inputs(
        &self,
        xbc: &Tensor,
        dt: &Tensor,
        lead: &[i64],
    ) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor), PluginError> {
        let c = &self.config;
        let lead: Vec<i64> = match lead.is_empty() {
            true => vec![xbc.size()[0]],
            false => lead.to_vec(),
        };
        let shape = |tail: [usize; 2]| {
            let mut s = lead.clone();
            s.extend(tail.map(|n| n as i64));
            s
        };
        (|| {
            let gn = (c.ngroups * c.d_state) as i64;
            let parts = xbc.f_split_with_sizes([c.d_inner() as i64, gn, gn], -1)?;
            let x = parts[0].f_reshape(shape([c.nheads(), c.headdim]))?;
            let b = parts[1].f_reshape(shape([c.ngroups, c.d_state]))?;
            let cm = parts[2].f_reshape(shape([c.ngroups, c.d_state]))?;
            let dt = dt.f_add(&self.dt_bias)?.f_softplus()?;
            let a = self.a_log.f_exp()?.f_neg()?;
            Ok::<_, tch::TchError>((x, b, cm, dt, a))
        })()
        .plugin_err("Mamba-2 SSM inputs")
    }

    /// `y + D·x` (both `(lead…, H, P)`), gated RMSNorm with `z`, `out_proj`.
    fn output(&self, y: &Tensor, x: &Tensor, z: &Tensor) -> Result<Tensor, PluginError> {
        let y = (|| {
            let y = y.f_add(&x.f_mul(&self.d.f_unsqueeze(-1)?)?)?;
            y.f_reshape(z.size())
        })()
        .plugin_err("Mamba-2 D skip")?;
        let y = gated_rms_norm(&y, z, &self.norm_weight, self.config.ngroups, RMS_EPS)?;
        self.out_proj.forward(&y)
    }
}

impl Parameters for Mamba2Block {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let mut out = self.in_proj.named_parameters(&join(prefix, "in_proj"));
        out.push((join(prefix, "conv1d.weight"), &self.conv_weight));
        out.push((join(prefix, "conv1d.bias"), &self.conv_bias));
        out.push((join(prefix, "dt_bias"), &self.dt_bias));
        out.push((join(prefix, "A_log"), &self.a_log));
        out.push((join(prefix, "D"), &self.d));
        out.push((join(prefix, "norm.weight"), &self.norm_weight));
        out.extend(self.out_proj.named_parameters(&join(prefix, "out_proj")));
        out
    }
}
