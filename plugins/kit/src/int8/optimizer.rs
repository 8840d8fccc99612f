//! [`Int8AdamW`]: training with INT8 weights and 8-bit optimizer state, no
//! f32 master copy (Dettmers et al., 8-bit Optimizers via Block-wise
//! Quantization, ICLR 2022; torchao's int8 quantized training).
//!
//! At construction every 2-D parameter with at least
//! [`Int8Options::min_numel`] elements is quantized ([`Int8Weight`],
//! round-to-nearest) and its f32 data is released: the model's parameter
//! tensor stays the same autograd leaf but holds no elements. The others
//! (biases, norms, small matrices) keep f32 values and f32 AdamW state in
//! a [`FlatAdamW`]; they are counted in every byte figure.
//!
//! A training step:
//! 1. [`materialize`](Int8AdamW::materialize): each quantized leaf's data
//!    becomes its dequantized f32 weight (transient);
//! 2. the plugin's forward pass and loss, as in f32;
//! 3. [`backward_step`](Int8AdamW::backward_step): one backward pass for
//!    every leaf, global-norm clipping over all gradients, the f32 AdamW
//!    update of the small tensors, and for each quantized weight the
//!    8-bit blockwise Adam update and stochastic re-quantization
//!    ([`blockwise_adam`](super::blockwise_adam): a fused host pass on CPU,
//!    tensor ops elsewhere). On the CPU the fused pass leaves each gradient
//!    buffer holding the new codes dequantized, and that buffer becomes the
//!    leaf's data: the weights stay materialized for the next step (whose
//!    `materialize` is then free) at no more memory than the backward pass
//!    held. Elsewhere the f32 weights and gradients are released.
//!
//! Call [`release`](Int8AdamW::release) to give the f32 copies back
//! between steps (a staged step does so itself). Evaluation calls `materialize` too (and [`release`](Int8AdamW::release)
//! after). The stochastic rounding draws from the optimizer's own
//! [`CounterRng`], whose state travels in [`Int8AdamWState`].
//!
//! The moments of the quantized weights are kept in one of three
//! [`StateFormat`]s ([`Int8Options::state`]): 8-bit blockwise (the default),
//! or below 8 bits ([`low_bit`](super::low_bit): 4-bit with a rank-1
//! normalized second moment, or a 4-bit first moment with a factored second).
//!
//! Checkpoint tensors ([`named_tensors`](Int8AdamW::named_tensors)): each
//! quantized weight as `<name>.int8` and `<name>.scale`, every other
//! parameter under its own name, the 8-bit state as `adam8.{m,v}_codes` and
//! `adam8.{m,v}_absmax` (4-bit: `adam4.{m_codes, m_absmax, v_codes,
//! v_rowmax, v_colmax}`; factored: `adam4f.{m_codes, m_absmax, v_rows,
//! v_cols}`), the small tensors' moments as `adamw.{m,v}`.

use super::blockwise_adam::{
    blocks_for, update_host, update_tensors, DeviceMaps, HostState, TensorState, UpdateScalars,
};
use super::low_bit::{self, packed_fill, Map16, StateFormat, BLOCK4};
use super::weight::Int8Weight;

#[path = "staged_step.rs"]
pub mod staged_step;
use super::dynamic_map::DynamicMap;
use crate::adam::AdamConfig;
use crate::counter_rng::{CounterRng, CounterRngState};
use crate::errors::TchResultExt;
use crate::flat_adamw::FlatAdamW;
use crate::host_slice::host_slice_mut;
use crate::mlp::{copy_checked, find};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

/// Checkpoint names of the 8-bit state.
pub const M_CODES: &str = "adam8.m_codes";
pub const V_CODES: &str = "adam8.v_codes";
pub const M_ABSMAX: &str = "adam8.m_absmax";
pub const V_ABSMAX: &str = "adam8.v_absmax";

/// Prefixes of every checkpoint tensor that is optimizer state rather than
/// model (the quantized moments of each format and the f32 AdamW moments).
pub const STATE_PREFIXES: [&str; 4] = ["adam8.", "adam4.", "adam4f.", "adamw."];

/// Is checkpoint tensor `name` optimizer state (not part of the model)?
pub fn is_state_tensor(name: &str) -> bool {
    STATE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Fewest elements per thread of the fused host update.
const MIN_ELEMENTS_PER_THREAD: usize = 1 << 18;

/// Which tensors are quantized.
#[derive(Clone, Copy, Debug)]
pub struct Int8Options {
    /// 2-D parameters with fewer elements keep f32 weights and state
    /// (bitsandbytes' `min_8bit_size` is 4096).
    pub min_numel: usize,
    /// Seed of the stochastic-rounding stream.
    pub seed: u64,
    /// How the quantized weights' moments are stored.
    pub state: StateFormat,
}

impl Default for Int8Options {
    fn default() -> Self {
        Self {
            min_numel: 4096,
            seed: 0,
            state: StateFormat::Bits8,
        }
    }
}

impl Int8Options {
    /// Is `t` stored as int8 (a matrix of at least `min_numel` elements)?
    pub fn quantizes(&self, t: &Tensor) -> bool {
        t.dim() == 2 && t.numel() >= self.min_numel
    }
}

/// Matrices quantized as the model is built, block by block
/// ([`take`](Self::take) after each block), for
/// [`Int8AdamW::with_prequantized`]: the f32 values of a block are released
/// before the next is allocated, so building never holds the whole model
/// in f32.
pub struct Prequantized {
    options: Int8Options,
    weights: std::collections::HashMap<String, Int8Weight>,
}

impl Prequantized {
    pub fn new(options: Int8Options) -> Self {
        Self {
            options,
            weights: Default::default(),
        }
    }

    /// Quantizes (round to nearest) and releases every parameter of the
    /// block `params` that the optimizer will store as int8.
    pub fn take(&mut self, params: Vec<(String, &Tensor)>) -> Result<(), PluginError> {
        for (name, t) in params {
            if self.weights.contains_key(&name) {
                return Err(PluginError::other(format!(
                    "int8 optimizer: parameter {name:?} was handed over twice while building"
                )));
            }
            if !self.options.quantizes(t) {
                continue;
            }
            let weight = Int8Weight::quantize_nearest(t)?;
            release_leaf(t)?;
            self.weights.insert(name, weight);
        }
        Ok(())
    }
}

/// Gives a parameter empty storage (its values live in an [`Int8Weight`]).
fn release_leaf(t: &Tensor) -> Result<(), PluginError> {
    let ctx = "releasing a quantized parameter's f32 values";
    let empty = Tensor::f_empty([0], (Kind::Float, t.device())).plugin_err(ctx)?;
    // A shallow clone shares the parameter's tensor: its storage changes for every handle.
    let mut handle = t.shallow_clone();
    tch::no_grad(|| handle.f_set_data(&empty)).plugin_err(ctx)
}

/// What a checkpoint's JSON keeps of the optimizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Int8AdamWState {
    pub step: u64,
    pub rounding_rng: CounterRngState,
    /// Absent in checkpoints written before sub-8-bit state: 8-bit.
    #[serde(default, skip_serializing_if = "is_bits8")]
    pub state_format: StateFormat,
}

fn is_bits8(format: &StateFormat) -> bool {
    *format == StateFormat::Bits8
}

struct Quantized {
    name: String,
    /// The model's parameter (a shallow clone: same tensor).
    leaf: Tensor,
    weight: Int8Weight,
    decayed: bool,
    /// First element of this tensor in the layout (its first rounding draw).
    offset: i64,
    /// First byte of this tensor in the flat code buffers (8-bit: = `offset`).
    code_offset: i64,
    /// First block of this tensor in the flat absmax buffers.
    block_offset: i64,
    /// First row and column statistic in the flat `v_rows`/`v_cols` buffers (sub-8-bit).
    row_offset: i64,
    col_offset: i64,
}

/// AdamW with INT8 weights and 8-bit blockwise moments (see the module docs).
pub struct Int8AdamW {
    pub config: AdamConfig,
    step: u64,
    quantized: Vec<Quantized>,
    /// Unquantized parameters: `(name, leaf)` in the dense optimizer's layout order.
    dense: Vec<(String, Tensor)>,
    dense_optimizer: Option<FlatAdamW>,
    format: StateFormat,
    /// The moments, flat over the quantized tensors (see [`StateFormat`]);
    /// the buffers a format does not use are empty.
    m_codes: Tensor,
    v_codes: Tensor,
    m_absmax: Tensor,
    v_absmax: Tensor,
    v_rows: Tensor,
    v_cols: Tensor,
    maps: DeviceMaps,
    maps16: DeviceMaps,
    rng: CounterRng,
    device: Device,
    materialized: bool,
    /// Peak f32 bytes of weight copies and gradients held by the last
    /// staged step (0 before one).
    last_step_transient: u64,
}

impl Int8AdamW {
    /// Takes the model's parameters, `(name, tensor)`, split into those
    /// weight decay applies to and the rest; quantizes the large 2-D ones
    /// (releasing their f32 data) and adopts the others into a flat f32
    /// AdamW. All must be f32 leaves requiring gradients on one device.
    pub fn new(
        config: AdamConfig,
        decayed: &[(String, &Tensor)],
        not_decayed: &[(String, &Tensor)],
        options: Int8Options,
    ) -> Result<Self, PluginError> {
        Self::with_prequantized(config, decayed, not_decayed, Prequantized::new(options))
    }

    /// As [`new`](Self::new), taking the matrices `prequantized` already
    /// quantized (and released) while the model was being built, so that
    /// the model never existed whole in f32.
    pub fn with_prequantized(
        config: AdamConfig,
        decayed: &[(String, &Tensor)],
        not_decayed: &[(String, &Tensor)],
        prequantized: Prequantized,
    ) -> Result<Self, PluginError> {
        let Prequantized {
            options,
            weights: mut ready,
        } = prequantized;
        let device = decayed
            .iter()
            .chain(not_decayed)
            .map(|(_, t)| t.device())
            .next()
            .ok_or_else(|| PluginError::other("int8 optimizer: no parameters given"))?;
        let mut quantized = Vec::new();
        let (mut dense_decayed, mut dense_rest) = (Vec::new(), Vec::new());
        let format = options.state;
        let (mut offset, mut code_offset, mut block_offset) = (0i64, 0i64, 0i64);
        let (mut row_offset, mut col_offset) = (0i64, 0i64);
        for (group, is_decayed) in [(decayed, true), (not_decayed, false)] {
            for (name, t) in group {
                let weight = match ready.remove(name.as_str()) {
                    Some(weight) => Some(weight),
                    None => {
                        if t.kind() != Kind::Float || !t.requires_grad() || t.device() != device {
                            return Err(PluginError::other(format!(
                                "int8 optimizer: parameter {name:?} is a {:?} tensor on {:?} \
                                 (requires grad: {}); all must be f32 leaves requiring \
                                 gradients on {device:?}",
                                t.kind(),
                                t.device(),
                                t.requires_grad()
                            )));
                        }
                        if options.quantizes(t) {
                            let weight = Int8Weight::quantize_nearest(t)?;
                            release_leaf(t)?;
                            Some(weight)
                        } else {
                            None
                        }
                    }
                };
                if let Some(weight) = weight {
                    let numel = weight.numel();
                    let shape = weight.shape();
                    quantized.push(Quantized {
                        name: name.clone(),
                        leaf: t.shallow_clone(),
                        weight,
                        decayed: is_decayed,
                        offset,
                        code_offset,
                        block_offset,
                        row_offset,
                        col_offset,
                    });
                    offset += numel;
                    if format.is_low_bit() {
                        code_offset += (numel as u64).div_ceil(2) as i64;
                        block_offset += (numel as u64).div_ceil(BLOCK4 as u64) as i64;
                        row_offset += shape[0];
                        col_offset += shape[1];
                    } else {
                        code_offset += numel;
                        block_offset += blocks_for(numel as usize) as i64;
                    }
                } else if is_decayed {
                    dense_decayed.push((name.clone(), t.shallow_clone()));
                } else {
                    dense_rest.push((name.clone(), t.shallow_clone()));
                }
            }
        }
        if let Some(name) = ready.keys().next() {
            return Err(PluginError::other(format!(
                "int8 optimizer: {name:?} was quantized while building the model but is not \
                 one of its parameters"
            )));
        }
        let dense_optimizer = if dense_decayed.is_empty() && dense_rest.is_empty() {
            None
        } else {
            fn refs(v: &[(String, Tensor)]) -> Vec<&Tensor> {
                v.iter().map(|(_, t)| t).collect()
            }
            Some(FlatAdamW::with_decay_groups(
                config,
                &refs(&dense_decayed),
                &refs(&dense_rest),
            )?)
        };
        let ctx = "allocating the optimizer state of the int8 weights";
        let codes = |len: i64, fill: u8| {
            Tensor::f_full([len], fill as i64, (Kind::Uint8, device)).plugin_err(ctx)
        };
        let floats = |len: i64| Tensor::f_zeros([len], (Kind::Float, device)).plugin_err(ctx);
        let (m_codes, v_codes, m_absmax, v_absmax, v_rows, v_cols) = match format {
            StateFormat::Bits8 => (
                codes(code_offset, DynamicMap::signed().zero_code())?,
                codes(code_offset, DynamicMap::unsigned().zero_code())?,
                floats(block_offset)?,
                floats(block_offset)?,
                floats(0)?,
                floats(0)?,
            ),
            StateFormat::Bits4 | StateFormat::Factored => (
                codes(code_offset, packed_fill(Map16::signed().zero_code()))?,
                // Code 0 is 1/16 of a zero row/column maximum: 0.
                codes(
                    if format == StateFormat::Bits4 {
                        code_offset
                    } else {
                        0
                    },
                    0,
                )?,
                floats(block_offset)?,
                floats(0)?,
                floats(row_offset)?,
                floats(col_offset)?,
            ),
        };
        let mut optimizer = Self {
            config,
            step: 0,
            quantized,
            dense: dense_decayed.into_iter().chain(dense_rest).collect(),
            dense_optimizer,
            format,
            m_codes,
            v_codes,
            m_absmax,
            v_absmax,
            v_rows,
            v_cols,
            maps: DeviceMaps::new(device)?,
            maps16: low_bit::device_maps(device)?,
            rng: CounterRng::new(options.seed),
            device,
            materialized: true,
            last_step_transient: 0,
        };
        optimizer.release()?;
        Ok(optimizer)
    }

    /// Updates applied so far.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Names of the quantized parameters, in layout order.
    pub fn quantized_names(&self) -> Vec<&str> {
        self.quantized.iter().map(|q| q.name.as_str()).collect()
    }

    /// Makes every quantized parameter hold its dequantized f32 weight (for
    /// a forward pass); a no-op when it already does.
    pub fn materialize(&mut self) -> Result<(), PluginError> {
        if self.materialized {
            return Ok(());
        }
        for q in &mut self.quantized {
            let w = q.weight.dequantize()?;
            tch::no_grad(|| q.leaf.f_set_data(&w)).plugin_err("materializing int8 weights")?;
        }
        self.materialized = true;
        Ok(())
    }

    /// Drops the f32 copies made by [`materialize`](Self::materialize): the
    /// quantized parameters hold no elements until the next one.
    pub fn release(&mut self) -> Result<(), PluginError> {
        if !self.materialized {
            return Ok(());
        }
        let ctx = "releasing int8 weights";
        for q in &mut self.quantized {
            let empty = Tensor::f_empty([0], (Kind::Float, self.device)).plugin_err(ctx)?;
            tch::no_grad(|| q.leaf.f_set_data(&empty)).plugin_err(ctx)?;
        }
        self.materialized = false;
        Ok(())
    }

    /// Backward pass from `loss` (computed with the weights materialized),
    /// global-norm clipping at `max_grad_norm` (≤ 0: none) and one update at
    /// learning rate `lr`. On the CPU the weights stay materialized (as the
    /// new codes dequantize, bit for bit); elsewhere they are released.
    /// Returns the gradient norm before clipping (a host value).
    pub fn backward_step(
        &mut self,
        loss: &Tensor,
        lr: f64,
        max_grad_norm: f64,
    ) -> Result<f64, PluginError> {
        if !self.materialized {
            return Err(PluginError::other(
                "int8 optimizer: backward_step without materialize (the loss cannot depend on \
                 the quantized weights)",
            ));
        }
        let leaves: Vec<&Tensor> = self
            .quantized
            .iter()
            .map(|q| &q.leaf)
            .chain(self.dense.iter().map(|(_, t)| t))
            .collect();
        let grads = Tensor::f_run_backward(&[loss], &leaves, false, false)
            .plugin_err("int8 optimizer backward pass")?;
        let (q_grads, d_grads) = grads.split_at(self.quantized.len());
        let ctx = "int8 optimizer update";
        // The global norm from each gradient's norm (one pass each, no temporaries).
        let norm = {
            let norms = grads
                .iter()
                .map(|g| g.f_norm())
                .collect::<Result<Vec<_>, _>>()
                .and_then(|n| Tensor::f_stack(&n, 0))
                .and_then(|n| n.f_to_kind(Kind::Double))
                .plugin_err(ctx)?;
            norms
                .f_square()
                .and_then(|s| s.f_sum(Kind::Double))
                .plugin_err(ctx)?
                .double_value(&[])
                .sqrt()
        };
        let grad_scale = if max_grad_norm > 0.0 && max_grad_norm.is_finite() {
            (max_grad_norm / (norm + 1e-6)).min(1.0)
        } else {
            1.0
        };
        // The weights are about to change. On the CPU each f32 copy is replaced
        // by the updated gradient buffer, which the fused update leaves holding
        // the new codes dequantized: the next forward pass needs no
        // dequantization, and the old copy goes as its replacement arrives.
        // Elsewhere the copies go first (the update reads the codes, not them).
        let on_host = self.device == Device::Cpu;
        if !on_host {
            self.release()?;
        }
        if let Some(dense) = &mut self.dense_optimizer {
            let flat = d_grads
                .iter()
                .map(|g| g.f_reshape([-1]))
                .collect::<Result<Vec<_>, _>>()
                .and_then(|gs| Tensor::f_cat(&gs, 0))
                .and_then(|g| g.f_mul_scalar(grad_scale))
                .plugin_err(ctx)?;
            dense.apply(&flat, lr)?;
        }
        self.step += 1;
        let first_draw = self.rng.state().counter;
        for (index, grad) in q_grads.iter().enumerate() {
            let updated = self.update_quantized(index, grad, lr, grad_scale, first_draw);
            let adopted = updated.and_then(|weight| match weight {
                Some(w) if on_host => tch::no_grad(|| self.quantized[index].leaf.f_set_data(&w))
                    .plugin_err("keeping the updated int8 weights"),
                _ => Ok(()),
            });
            if let Err(e) = adopted {
                // Some copies are stale now: none is kept.
                let _ = self.release();
                return Err(e);
            }
        }
        self.finish_draws(first_draw);
        Ok(norm)
    }

    /// The update of quantized tensor `index` from its gradient (this
    /// step's counter already advanced): 8-bit blockwise AdamW at `lr` with
    /// the gradient scaled by `grad_scale`, then stochastic re-quantization
    /// drawing values `first_draw + offset ..` of the rounding stream (so
    /// the draws do not depend on the order tensors are updated in).
    pub(super) fn update_quantized(
        &mut self,
        index: usize,
        grad: &Tensor,
        lr: f64,
        grad_scale: f64,
        first_draw: u64,
    ) -> Result<Option<Tensor>, PluginError> {
        let ctx = "int8 optimizer update";
        let c = self.config;
        let t = self.step as i32;
        let libtorch_threads = tch::get_num_threads().max(1) as usize;
        let q = &mut self.quantized[index];
        let s = UpdateScalars {
            beta1: c.beta1 as f32,
            beta2: c.beta2 as f32,
            eps: c.eps as f32,
            lr: lr as f32,
            weight_decay: if q.decayed {
                c.weight_decay as f32
            } else {
                0.0
            },
            bias1: (1.0 - c.beta1.powi(t)) as f32,
            sqrt_bias2: (1.0 - c.beta2.powi(t)).sqrt() as f32,
            grad_scale: grad_scale as f32,
        };
        let mut rng = CounterRng::from_state(CounterRngState {
            seed: self.rng.state().seed,
            counter: first_draw.wrapping_add(q.offset as u64),
        });
        let numel = q.weight.numel();
        if self.format.is_low_bit() {
            let shape = q.weight.shape();
            let bytes = (numel as u64).div_ceil(2) as i64;
            let blocks = (numel as u64).div_ceil(BLOCK4 as u64) as i64;
            let narrow = |t: &Tensor, at: i64, len: i64| t.f_narrow(0, at, len).plugin_err(ctx);
            let v_len = if self.format == StateFormat::Bits4 {
                bytes
            } else {
                0
            };
            let views = [
                narrow(&self.m_codes, q.code_offset, bytes)?,
                narrow(&self.m_absmax, q.block_offset, blocks)?,
                narrow(
                    &self.v_codes,
                    if v_len > 0 { q.code_offset } else { 0 },
                    v_len,
                )?,
                narrow(&self.v_rows, q.row_offset, shape[0])?,
                narrow(&self.v_cols, q.col_offset, shape[1])?,
            ];
            if self.device == Device::Cpu {
                let grad = grad.f_contiguous().plugin_err(ctx)?;
                let threads = libtorch_threads
                    .min(numel as usize / MIN_ELEMENTS_PER_THREAD)
                    .max(1);
                // SAFETY: as for the 8-bit update below: contiguous CPU tensors of
                // the kinds named, disjoint, touched by nothing else meanwhile.
                unsafe {
                    let [mc, ma, vc, vr, vcol] = &views;
                    low_bit::update_host(
                        self.format,
                        host_slice_mut::<f32>(&grad)?,
                        host_slice_mut::<i8>(&q.weight.codes)?,
                        host_slice_mut::<f32>(&q.weight.scales)?,
                        shape[1] as usize,
                        low_bit::HostState {
                            m_codes: host_slice_mut::<u8>(mc)?,
                            m_absmax: host_slice_mut::<f32>(ma)?,
                            v_codes: host_slice_mut::<u8>(vc)?,
                            v_rows: host_slice_mut::<f32>(vr)?,
                            v_cols: host_slice_mut::<f32>(vcol)?,
                        },
                        &s,
                        &mut rng,
                        threads,
                    )?
                };
                return Ok(Some(grad));
            }
            let [mc, ma, vc, vr, vcol] = &views;
            return low_bit::update_tensors(
                self.format,
                grad,
                &mut q.weight,
                low_bit::TensorState {
                    m_codes: mc,
                    m_absmax: ma,
                    v_codes: vc,
                    v_rows: vr,
                    v_cols: vcol,
                },
                &self.maps16,
                &s,
                &mut rng,
            )
            .map(|()| None);
        }
        let blocks = blocks_for(numel as usize) as i64;
        let codes = |t: &Tensor| t.f_narrow(0, q.code_offset, numel).plugin_err(ctx);
        let maxima = |t: &Tensor| t.f_narrow(0, q.block_offset, blocks).plugin_err(ctx);
        let views = [
            codes(&self.m_codes)?,
            codes(&self.v_codes)?,
            maxima(&self.m_absmax)?,
            maxima(&self.v_absmax)?,
        ];
        if self.device == Device::Cpu {
            let grad = grad.f_contiguous().plugin_err(ctx)?;
            let cols = q.weight.shape()[1] as usize;
            // Threads only where the work outweighs starting them (and competing
            // with libtorch's spinning OpenMP workers): one per 256 Ki elements.
            let threads = libtorch_threads
                .min(numel as usize / MIN_ELEMENTS_PER_THREAD)
                .max(1);
            // SAFETY: every tensor below is a contiguous CPU tensor of the
            // element type named, alive for this block; the gradient is our
            // own, and the codes, scales and state views are disjoint tensors
            // (or disjoint ranges of the flat buffers) that nothing else
            // touches while the update runs.
            unsafe {
                update_host(
                    host_slice_mut::<f32>(&grad)?,
                    host_slice_mut::<i8>(&q.weight.codes)?,
                    host_slice_mut::<f32>(&q.weight.scales)?,
                    cols,
                    {
                        let [mc, vc, ma, va] = &views;
                        HostState {
                            m_codes: host_slice_mut::<u8>(mc)?,
                            v_codes: host_slice_mut::<u8>(vc)?,
                            m_absmax: host_slice_mut::<f32>(ma)?,
                            v_absmax: host_slice_mut::<f32>(va)?,
                        }
                    },
                    &s,
                    &mut rng,
                    threads,
                )?
            }
            Ok(Some(grad))
        } else {
            update_tensors(
                grad,
                &mut q.weight,
                TensorState {
                    m_codes: &views[0],
                    v_codes: &views[1],
                    m_absmax: &views[2],
                    v_absmax: &views[3],
                },
                &self.maps,
                &s,
                &mut rng,
            )
            .map(|()| None)
        }
    }

    /// After a step's updates: the rounding stream moves past every
    /// quantized element's draw.
    pub(super) fn finish_draws(&mut self, first_draw: u64) {
        let total: i64 = self.quantized.iter().map(|q| q.weight.numel()).sum();
        self.rng = CounterRng::from_state(CounterRngState {
            seed: self.rng.state().seed,
            counter: first_draw.wrapping_add(total as u64),
        });
    }

    /// The JSON part of a checkpoint.
    pub fn state(&self) -> Int8AdamWState {
        Int8AdamWState {
            step: self.step,
            rounding_rng: self.rng.state(),
            state_format: self.format,
        }
    }

    /// Bytes of the weights as stored: int8 codes and scales, f32 small tensors.
    pub fn parameter_bytes(&self) -> u64 {
        let q: u64 = self.quantized.iter().map(|q| q.weight.bytes()).sum();
        let d: u64 = self.dense.iter().map(|(_, t)| crate::tensor_bytes(t)).sum();
        q + d
    }

    /// Bytes of optimizer state: the quantized moments (codes, block
    /// maxima, row and column statistics), f32 moments of the small tensors.
    pub fn state_bytes(&self) -> u64 {
        self.quantized_state()
            .into_iter()
            .map(|(_, t)| crate::tensor_bytes(t))
            .sum::<u64>()
            + self.dense_optimizer.as_ref().map_or(0, |d| d.state_bytes())
    }

    /// How the quantized weights' moments are stored.
    pub fn state_format(&self) -> StateFormat {
        self.format
    }

    /// Parameters (elements) held as int8, and in all.
    pub fn parameter_counts(&self) -> (u64, u64) {
        let q: u64 = self.quantized.iter().map(|q| q.weight.numel() as u64).sum();
        let d: u64 = self.dense.iter().map(|(_, t)| t.numel() as u64).sum();
        (q, q + d)
    }

    /// The quantized moments' checkpoint names and buffers, for this format.
    fn quantized_state(&self) -> Vec<(&'static str, &Tensor)> {
        match self.format {
            StateFormat::Bits8 => vec![
                (M_CODES, &self.m_codes),
                (V_CODES, &self.v_codes),
                (M_ABSMAX, &self.m_absmax),
                (V_ABSMAX, &self.v_absmax),
            ],
            StateFormat::Bits4 => vec![
                ("adam4.m_codes", &self.m_codes),
                ("adam4.m_absmax", &self.m_absmax),
                ("adam4.v_codes", &self.v_codes),
                ("adam4.v_rowmax", &self.v_rows),
                ("adam4.v_colmax", &self.v_cols),
            ],
            StateFormat::Factored => vec![
                ("adam4f.m_codes", &self.m_codes),
                ("adam4f.m_absmax", &self.m_absmax),
                ("adam4f.v_rows", &self.v_rows),
                ("adam4f.v_cols", &self.v_cols),
            ],
        }
    }

    /// Peak f32 bytes of weight copies and gradients the last staged step
    /// held (0 before one).
    pub fn last_staged_transient_bytes(&self) -> u64 {
        self.last_step_transient
    }

    /// Bytes that exist only during a (one-pass) step: the f32 copies of
    /// the quantized weights and the f32 gradient of every parameter.
    pub fn transient_bytes(&self) -> u64 {
        let quantized: u64 = self
            .quantized
            .iter()
            .map(|q| 4 * q.weight.numel() as u64)
            .sum();
        let dense: u64 = self.dense.iter().map(|(_, t)| crate::tensor_bytes(t)).sum();
        2 * quantized + dense
    }

    /// Every tensor a checkpoint needs (see the module docs), by name.
    pub fn named_tensors(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for q in &self.quantized {
            out.push((format!("{}.int8", q.name), q.weight.codes.shallow_clone()));
            out.push((format!("{}.scale", q.name), q.weight.scales.shallow_clone()));
        }
        for (name, t) in &self.dense {
            out.push((name.clone(), t.shallow_clone()));
        }
        for (name, t) in self.quantized_state() {
            out.push((name.to_string(), t.shallow_clone()));
        }
        if let Some(d) = &self.dense_optimizer {
            out.extend(
                d.named_state()
                    .into_iter()
                    .map(|(n, t)| (n, t.shallow_clone())),
            );
        }
        out
    }

    /// Restores what [`named_tensors`](Self::named_tensors) and
    /// [`state`](Self::state) saved. Every tensor is checked (present, same
    /// shape and kind) before anything changes, so a refused checkpoint
    /// leaves the optimizer and the model as they were.
    pub fn load(
        &mut self,
        tensors: &[(String, Tensor)],
        state: Int8AdamWState,
    ) -> Result<(), PluginError> {
        if state.state_format != self.format {
            return Err(PluginError::io(format!(
                "the checkpoint keeps its optimizer state as {:?}, this task as {:?}: resume \
                 with optimizer_state {:?} or start again",
                state.state_format.name(),
                self.format.name(),
                state.state_format.name()
            )));
        }
        let own = self.named_tensors();
        for (name, t) in &own {
            let saved = find(tensors, name).map_err(|_| {
                PluginError::io(format!(
                    "the checkpoint has no tensor {name:?}: it was not written by this model in \
                     int8 precision (different precision or config?)"
                ))
            })?;
            if saved.size() != t.size() || saved.kind() != t.kind() {
                return Err(PluginError::io(format!(
                    "checkpoint tensor {name:?} is {:?} of shape {:?}, this model expects {:?} of \
                     shape {:?} (different config?)",
                    saved.kind(),
                    saved.size(),
                    t.kind(),
                    t.size()
                )));
            }
        }
        let was_materialized = self.materialized;
        self.release()?;
        for (name, t) in &own {
            copy_checked(t, find(tensors, name)?, name)?;
        }
        if let Some(d) = &mut self.dense_optimizer {
            d.step = state.step;
        }
        self.step = state.step;
        self.rng = CounterRng::from_state(state.rounding_rng);
        if was_materialized {
            self.materialize()?;
        }
        Ok(())
    }
}
