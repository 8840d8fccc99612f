//! Parameters as views into one flat buffer.
//!
//! [`FlatParams::adopt`] takes a model's leaf parameters (plain `f32` tensors
//! that require gradients, all on one device), copies them into one
//! contiguous 1-D tensor and makes each parameter's data a view of its slice
//! (`Tensor::set_data`: the parameter keeps its autograd identity, so the
//! model's forward pass, its checkpoint code and anything holding the tensor
//! see the view). Optimizers then update every parameter with one kernel per
//! operation whatever the number of tensors.
//!
//! Gradients come back as one flat tensor in the same layout:
//! [`FlatParams::gradients`] runs the backward pass for exactly these inputs
//! (`Tensor::run_backward`, nothing accumulates in `.grad`, so there is
//! nothing to zero) and concatenates the results (one `cat`);
//! [`FlatParams::tensor_gradients`] returns them per parameter instead (no
//! second copy of the gradient, for optimizers that walk the layout in pieces).

use crate::errors::TchResultExt;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

/// Where one parameter lives in the flat buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// First element in the flat buffer.
    pub offset: i64,
    pub numel: i64,
    /// The parameter's shape.
    pub shape: Vec<i64>,
}

pub struct FlatParams {
    /// Every parameter's values, 1-D, contiguous, `f32`.
    values: Tensor,
    /// The adopted leaves (shallow clones: the same tensors as the model's).
    params: Vec<Tensor>,
    slots: Vec<Slot>,
}

impl FlatParams {
    /// Moves `params` into one flat buffer, in the order given; their values
    /// are unchanged. Refuses parameters that are not `f32` leaves requiring
    /// gradients, that live on different devices, or that are empty.
    pub fn adopt(params: &[&Tensor]) -> Result<Self, PluginError> {
        let Some(first) = params.first() else {
            return Err(PluginError::other("flat parameters: no parameters given"));
        };
        let device = first.device();
        let mut slots = Vec::with_capacity(params.len());
        let mut offset = 0i64;
        for (i, p) in params.iter().enumerate() {
            let leaf = p.f_is_leaf().plugin_err("flat parameters")?;
            if p.kind() != Kind::Float || !p.requires_grad() || !leaf || p.device() != device {
                return Err(PluginError::other(format!(
                    "flat parameters: parameter {i} is a {:?} tensor on {:?} (requires grad: {}, \
                     leaf: {leaf}); all must be f32 leaves requiring gradients on {device:?}",
                    p.kind(),
                    p.device(),
                    p.requires_grad(),
                )));
            }
            let numel = p.numel() as i64;
            slots.push(Slot {
                offset,
                numel,
                shape: p.size(),
            });
            offset += numel;
        }
        let ctx = "moving parameters into a flat buffer";
        let values = Tensor::f_zeros([offset], (Kind::Float, device)).plugin_err(ctx)?;
        let adopted = tch::no_grad(|| -> Result<Vec<Tensor>, tch::TchError> {
            params
                .iter()
                .zip(&slots)
                .map(|(p, s)| {
                    let mut view = values.f_narrow(0, s.offset, s.numel)?.f_view(&*s.shape)?;
                    view.f_copy_(p)?;
                    let mut handle = p.shallow_clone();
                    handle.f_set_data(&view)?;
                    Ok(handle)
                })
                .collect()
        })
        .plugin_err(ctx)?;
        Ok(Self {
            values,
            params: adopted,
            slots,
        })
    }

    /// The flat buffer (writing to it writes the parameters).
    pub fn values(&self) -> &Tensor {
        &self.values
    }

    /// The adopted parameters, in order.
    pub fn params(&self) -> &[Tensor] {
        &self.params
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Scalar parameters in all.
    pub fn numel(&self) -> i64 {
        self.slots.last().map(|s| s.offset + s.numel).unwrap_or(0)
    }

    pub fn device(&self) -> Device {
        self.values.device()
    }

    /// Bytes of the flat buffer (and of one flat gradient).
    pub fn bytes(&self) -> u64 {
        crate::tensor_bytes(&self.values)
    }

    /// d`loss`/d(parameters), flat in this layout. The backward pass frees the
    /// graph; parameters' `.grad` fields are neither read nor written. A
    /// parameter the loss does not depend on gets zeros.
    pub fn gradients(&self, loss: &Tensor) -> Result<Tensor, PluginError> {
        let flat = self.tensor_gradients(loss)?;
        Tensor::f_cat(&flat, 0).plugin_err("gathering the gradients")
    }

    /// d`loss`/d(parameters), one 1-D tensor per parameter in layout order
    /// (zeros for a parameter the loss does not depend on): the backward
    /// pass's own tensors, without the copy [`gradients`](Self::gradients)
    /// makes.
    pub fn tensor_gradients(&self, loss: &Tensor) -> Result<Vec<Tensor>, PluginError> {
        (|| -> Result<Vec<Tensor>, tch::TchError> {
            let grads = Tensor::f_run_backward(&[loss], &self.params, false, false)?;
            grads
                .into_iter()
                .zip(&self.slots)
                .map(|(g, s)| match g.defined() {
                    true => g.f_reshape([-1]),
                    false => Tensor::f_zeros([s.numel], (Kind::Float, self.device())),
                })
                .collect()
        })()
        .plugin_err("backward pass")
    }

    /// The slice of a flat tensor (values, a gradient, a moment) that belongs
    /// to parameter `i`, in that parameter's shape (a view).
    pub fn view_of(&self, flat: &Tensor, i: usize) -> Result<Tensor, PluginError> {
        let s = self.slots.get(i).ok_or_else(|| {
            PluginError::other(format!(
                "flat parameters: no parameter {i} (of {})",
                self.slots.len()
            ))
        })?;
        flat.f_narrow(0, s.offset, s.numel)
            .and_then(|t| t.f_view(&*s.shape))
            .plugin_err("viewing a flat tensor")
    }
}
