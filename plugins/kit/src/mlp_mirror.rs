//! A plain-Rust copy of a small multi-layer perceptron's weights, for acting:
//! a forward pass over a handful of rows (one per environment) without
//! libtorch. At these sizes libtorch's cost is its per-operation dispatch (a
//! CartPole step's forward of 3 layers took tens of microseconds through
//! tensors; the same arithmetic here takes about one), so an agent that acts
//! every environment step keeps a mirror of its network and refreshes it when
//! the weights change (after a training round, after a checkpoint is loaded).
//!
//! The mirror holds each layer's weight transposed (`[in][out]`), so a row's
//! output is a sum of scaled weight rows: a loop the compiler vectorises
//! without reordering any floating-point sum. Results agree with libtorch's
//! to rounding (the unit tests allow 1e-5 relative).

use crate::errors::TchResultExt;
use tch::{Kind, Tensor};
use tli_plugin_api::PluginError;

/// The hidden layers' nonlinearity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Relu,
    Tanh,
}

struct Layer {
    inputs: usize,
    outputs: usize,
    /// `[inputs][outputs]`, row-major.
    weight_t: Vec<f32>,
    bias: Vec<f32>,
}

/// A copy of `(weight [out, in], bias [out])` layers with `activation`
/// between them and none after the last.
pub struct MlpMirror {
    layers: Vec<Layer>,
    activation: Activation,
    /// Two activation buffers, reused across calls.
    scratch: [Vec<f32>; 2],
}

/// A tensor's values on the host, in row-major order (`copy_data` moves
/// them off the device and out of any strides itself).
fn host_values(t: &Tensor, what: &str) -> Result<Vec<f32>, PluginError> {
    let ctx = "copying network weights for acting";
    let converted;
    let t = if t.kind() == Kind::Float {
        t
    } else {
        converted = tch::no_grad(|| t.f_to_kind(Kind::Float)).plugin_err(ctx)?;
        &converted
    };
    let n = t.numel();
    let mut out = vec![0f32; n];
    t.f_copy_data(&mut out, n)
        .map_err(|e| PluginError::other(format!("{ctx} ({what}): {e}")))?;
    Ok(out)
}

impl MlpMirror {
    /// Copies `layers` (`(weight [out, in], bias [out])`, in order, each
    /// layer's inputs the previous one's outputs) from any device.
    pub fn new(layers: &[(&Tensor, &Tensor)], activation: Activation) -> Result<Self, PluginError> {
        let mut mirrored = Vec::with_capacity(layers.len());
        for (i, (weight, bias)) in layers.iter().enumerate() {
            let size = weight.size();
            let (outputs, inputs) = match size.as_slice() {
                [o, i] if *o > 0 && *i > 0 => (*o as usize, *i as usize),
                _ => {
                    return Err(PluginError::other(format!(
                        "layer {i}: weight of shape {size:?}, expected [outputs, inputs]"
                    )))
                }
            };
            if bias.size() != [outputs as i64] {
                return Err(PluginError::other(format!(
                    "layer {i}: bias of shape {:?} for {outputs} outputs",
                    bias.size()
                )));
            }
            if let Some(previous) = mirrored.last() {
                let previous: &Layer = previous;
                if previous.outputs != inputs {
                    return Err(PluginError::other(format!(
                        "layer {i} takes {inputs} inputs, the layer before gives {}",
                        previous.outputs
                    )));
                }
            }
            let w = host_values(weight, "weight")?;
            let mut weight_t = vec![0f32; inputs * outputs];
            for o in 0..outputs {
                for k in 0..inputs {
                    weight_t[k * outputs + o] = w[o * inputs + k];
                }
            }
            mirrored.push(Layer {
                inputs,
                outputs,
                weight_t,
                bias: host_values(bias, "bias")?,
            });
        }
        if mirrored.is_empty() {
            return Err(PluginError::other(
                "a network mirror needs at least one layer",
            ));
        }
        Ok(Self {
            layers: mirrored,
            activation,
            scratch: [Vec::new(), Vec::new()],
        })
    }

    pub fn inputs(&self) -> usize {
        self.layers[0].inputs
    }

    pub fn outputs(&self) -> usize {
        self.layers[self.layers.len() - 1].outputs
    }

    /// The network's output for `rows` rows of `x` (`rows × inputs`, row-major),
    /// `rows × outputs`, valid until the next call.
    pub fn forward(&mut self, x: &[f32], rows: usize) -> Result<&[f32], PluginError> {
        if x.len() != rows * self.inputs() {
            return Err(PluginError::other(format!(
                "acting on {} values as {rows} rows of {} inputs",
                x.len(),
                self.inputs()
            )));
        }
        let last = self.layers.len() - 1;
        let [a, b] = &mut self.scratch;
        let (mut input, mut output): (&mut Vec<f32>, &mut Vec<f32>) = (a, b);
        input.clear();
        input.extend_from_slice(x);
        for (l, layer) in self.layers.iter().enumerate() {
            output.clear();
            output.resize(rows * layer.outputs, 0.0);
            for r in 0..rows {
                let row_in = &input[r * layer.inputs..(r + 1) * layer.inputs];
                let row_out = &mut output[r * layer.outputs..(r + 1) * layer.outputs];
                row_out.copy_from_slice(&layer.bias);
                for (k, &xk) in row_in.iter().enumerate() {
                    let w = &layer.weight_t[k * layer.outputs..(k + 1) * layer.outputs];
                    for (o, &wk) in row_out.iter_mut().zip(w) {
                        *o += xk * wk;
                    }
                }
                if l < last {
                    match self.activation {
                        Activation::Relu => row_out.iter_mut().for_each(|v| *v = v.max(0.0)),
                        Activation::Tanh => row_out.iter_mut().for_each(|v| *v = v.tanh()),
                    }
                }
            }
            std::mem::swap(&mut input, &mut output);
        }
        Ok(&input[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mlp::Mlp;
    use crate::rng::Rng;
    use tch::Device;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} vs {y}");
        }
    }

    fn tensor_forward(mlp: &Mlp, x: &[f32], rows: usize, dim: usize) -> Vec<f32> {
        let t = Tensor::from_slice(x).reshape([rows as i64, dim as i64]);
        let out = tch::no_grad(|| mlp.forward(&t)).unwrap().contiguous();
        let mut v = vec![0f32; out.numel()];
        out.copy_data(&mut v, out.numel());
        v
    }

    #[test]
    fn agrees_with_the_tensor_forward_pass() {
        let mut rng = Rng::new(3);
        let mlp = Mlp::new(&[4, 32, 16, 2], &mut rng, Device::Cpu).unwrap();
        let mut mirror = mlp.mirror().unwrap();
        assert_eq!((mirror.inputs(), mirror.outputs()), (4, 2));
        for rows in [1, 3, 8] {
            let x: Vec<f32> = (0..rows * 4)
                .map(|_| rng.uniform() as f32 * 4.0 - 2.0)
                .collect();
            let expected = tensor_forward(&mlp, &x, rows, 4);
            close(mirror.forward(&x, rows).unwrap(), &expected);
        }
    }

    #[test]
    fn tanh_hidden_layers() {
        let w1 = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25]).reshape([2, 2]);
        let b1 = Tensor::from_slice(&[0.1f32, -0.2]);
        let w2 = Tensor::from_slice(&[1.0f32, -3.0]).reshape([1, 2]);
        let b2 = Tensor::from_slice(&[0.5f32]);
        let mut mirror = MlpMirror::new(&[(&w1, &b1), (&w2, &b2)], Activation::Tanh).unwrap();
        let x = [0.3f32, -0.7];
        let h = [
            (0.5f32 * 0.3 + -1.0 * -0.7 + 0.1).tanh(),
            (2.0f32 * 0.3 + 0.25 * -0.7 - 0.2).tanh(),
        ];
        close(mirror.forward(&x, 1).unwrap(), &[h[0] - 3.0 * h[1] + 0.5]);
    }

    #[test]
    fn mismatched_shapes_are_refused() {
        let w1 = Tensor::zeros([3, 2], (Kind::Float, Device::Cpu));
        let b1 = Tensor::zeros([3], (Kind::Float, Device::Cpu));
        let w2 = Tensor::zeros([1, 4], (Kind::Float, Device::Cpu));
        let b2 = Tensor::zeros([1], (Kind::Float, Device::Cpu));
        let err = MlpMirror::new(&[(&w1, &b1), (&w2, &b2)], Activation::Relu)
            .err()
            .unwrap();
        assert!(err.to_string().contains("takes 4 inputs"), "{err}");
        let mut ok = MlpMirror::new(&[(&w1, &b1)], Activation::Relu).unwrap();
        let err = ok.forward(&[1.0, 2.0, 3.0], 1).err().unwrap();
        assert!(
            err.to_string().contains("3 values as 1 rows of 2 inputs"),
            "{err}"
        );
    }
}
