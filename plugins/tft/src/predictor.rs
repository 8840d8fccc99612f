//! The TFT predictor (plugin API 1.2): the trained network applied to new
//! bars, in FP32 or INT8 as it was trained.
//!
//! A forecast from row `e` reads what the trainer's windows read: the
//! `lookback` encoder rows `e − T + 1 … e` (observed and known inputs), the
//! static inputs of row `e`, the asset, and, when the model has
//! known-future inputs, those inputs on the decoder rows `e + 1 … e + H`.
//! So **`predict`** forecasts every row whose window (encoder rows, and the
//! decoder rows when there are known-future inputs) lies in one run of rows
//! without a gap or roll marker; without known-future inputs the decoder
//! reads only its relative positions and the newest row is forecast too.
//! Splits are ignored (a batch has none); rows before the batch's
//! `predict_from` are context only (no output).
//!
//! **`stream`** keeps, per dataset, the last `lookback` rows (plus `H` with
//! known-future inputs) since the last gap or roll and runs the window
//! whenever a new row completes one: the forecast of row `e` comes with row
//! `e` (with known-future inputs, with row `e + H`, the first that carries
//! its decoder inputs), numbered by rows streamed so far and equal to
//! `predict`'s. `predict_from`, when a call gives it, counts rows of the
//! stream: earlier rows are kept as context but get no output.
//!
//! INT8 weights stay int8 codes with per-row scales (as the trainer stores
//! them); a `predict` or `stream` call dequantizes them for its forward
//! passes and drops the f32 copies before it returns.
//!
//! Outputs (trained units): `<target>:p<NN>` with `horizons = 1`,
//! `<target>:h<k>:p<NN>` for the return of the `k`-th bar ahead otherwise.

use crate::config::{Precision, TftConfig};
use crate::memory;
use crate::model::{InputGroups, Tft, TftBatch, TftShape};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::predict::quantile_column;
use tli_plugin_api::task_inputs::column;
use tli_plugin_api::{
    Dataset, DatasetShape, FeatureRole, Host, MemoryBreakdown, PluginError, Predictions, Predictor,
    PredictorSpec, SplitBounds, TaskInputs,
};
use tli_plugin_kit::data::{self, Split};
use tli_plugin_kit::device::parse_device;
use tli_plugin_kit::flat_adamw::{FIRST_MOMENT, SECOND_MOMENT};
use tli_plugin_kit::int8::optimizer::is_state_tensor;
use tli_plugin_kit::int8::{Int8Options, Int8Weight};
use tli_plugin_kit::mlp::copy_checked;
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::windows::{window_batch, RowRuns, BREAK_ON_DEFAULT};
use tli_plugin_kit::{tensor_bytes, weights, TchResultExt};

const F32: u64 = 4;

/// Whether a checkpoint tensor is part of the model: everything but the
/// optimizer's moments (f32, 8-bit or below). INT8 weights are kept as
/// stored, `<name>.int8` codes and `<name>.scale` row scales.
pub fn is_weight(name: &str) -> bool {
    ![FIRST_MOMENT, SECOND_MOMENT].contains(&name) && !is_state_tensor(name)
}

/// The output columns: per horizon (`:h<k>` when there are several), one
/// column per quantile level.
pub fn output_columns(target: &str, horizons: usize, quantiles: &[f64]) -> Vec<String> {
    let mut out = Vec::new();
    for k in 1..=horizons {
        let name = match horizons {
            1 => target.to_string(),
            _ => format!("{target}:h{k}"),
        };
        out.extend(quantiles.iter().map(|&q| quantile_column(&name, q)));
    }
    out
}

/// Bytes a predictor holds for batches of `shape.rows` rows: the weights as
/// stored (INT8: codes and scales), and as activations the batch's rows,
/// one evaluation batch of windows, the f32 copies of INT8 weights during a
/// call, and one streamed dataset's rows.
pub fn estimate_memory(config: &TftConfig, shape: DatasetShape) -> MemoryBreakdown {
    let s = crate::assumed_shape(config, shape.features as usize);
    let windows = shape.rows.clamp(1, config.eval_batch_size as u64);
    let bars = (config.lookback + config.horizons) as u64;
    MemoryBreakdown {
        parameters: memory::breakdown(config, &s).parameters,
        gradients: 0,
        optimizer_state: 0,
        activations: shape.rows * shape.features * F32
            + windows * bars * shape.features * F32
            + memory::evaluation_bytes(config, &s, windows)
            + memory::dequantized_bytes(config, &s)
            + bars * shape.features * F32,
    }
}

/// An INT8 matrix of the model: its (emptied) parameter and its codes.
struct Quantized {
    leaf: Tensor,
    weight: Int8Weight,
}

/// The rows one streamed dataset keeps (see the module docs).
#[derive(Default)]
struct Rolling {
    rows: VecDeque<Vec<f32>>,
    /// Rows streamed so far (the row number of the next one).
    streamed: u64,
    /// The first stream row to give a forecast for (`predict_from`).
    from: u64,
}

/// Windows to forecast: the `lookback + ahead` rows of `source` ending at
/// each of `last_rows`, their asset index, and the output row each belongs to.
struct Windows {
    /// `[rows, features]`.
    source: Tensor,
    last_rows: Vec<usize>,
    asset: i64,
    outputs: Vec<(u32, u64)>,
}

pub struct TftPredictor {
    config: TftConfig,
    model: Tft,
    device: Device,
    columns: Vec<String>,
    feature_names: Vec<String>,
    roles: Vec<FeatureRole>,
    /// Feature columns of the encoder (observed, then known), the known
    /// inputs and the static reals.
    past_columns: Tensor,
    known_columns: Tensor,
    static_columns: Tensor,
    known: usize,
    /// A pooled model's asset count (else 1 category, index 0).
    assets: Option<usize>,
    quantized: Vec<Quantized>,
    streams: Vec<Rolling>,
}

impl TftPredictor {
    pub fn new(spec: PredictorSpec, host: Host) -> Result<Self, PluginError> {
        let config = TftConfig::parse(&spec.config_json)?;
        let device = parse_device(&spec.device)?;
        let schema = &spec.schema;
        let first: &Dataset = &schema.datasets[0];
        let target = first
            .target_names
            .get(config.target_index)
            .ok_or_else(|| {
                PluginError::invalid_config(format!(
                    "target_index {} but the model's schema has {} target(s)",
                    config.target_index,
                    first.target_names.len()
                ))
            })?
            .to_string();
        if first.feature_names.is_empty() {
            return Err(PluginError::invalid_data(
                "the model's schema has no feature columns",
            ));
        }
        let annex = schema.annex(0)?;
        let (roles, variables) = (annex.feature_roles.clone(), annex.variables());
        let of_role = |role: FeatureRole| -> Vec<usize> {
            (0..roles.len()).filter(|&j| roles[j] == role).collect()
        };
        let (observed, known, statics) = (
            of_role(FeatureRole::ObservedPast),
            of_role(FeatureRole::KnownFuture),
            of_role(FeatureRole::Static),
        );
        let assets = schema
            .pooled
            .then(|| schema.asset_count().max(schema.datasets.len()));
        let past: Vec<usize> = observed.iter().chain(&known).copied().collect();
        let groups = InputGroups {
            past: InputGroups::relabel(&variables, &past),
            future: InputGroups::relabel(&variables, &known),
            statics: InputGroups::relabel(&variables, &statics),
        };
        let shape = TftShape {
            hidden: config.hidden_size,
            heads: config.attention_heads,
            lstm_layers: config.lstm_layers,
            dropout: config.dropout,
            observed: observed.len(),
            known: known.len(),
            static_reals: statics.len(),
            assets: assets.unwrap_or(1),
            horizons: config.horizons,
            outputs: config.quantiles.len(),
            groups,
        };
        // INT8: the matrices the trainer quantized lose their f32 storage
        // as soon as their block exists.
        let options = Int8Options {
            min_numel: config.int8_min_elements,
            seed: 0,
            ..Int8Options::default()
        };
        let int8 = config.precision == Precision::Int8;
        let mut quantized_shapes: HashMap<String, Vec<i64>> = HashMap::new();
        let model = Tft::build(&shape, &mut Rng::new(0), device, &mut |block| {
            for (name, t) in block {
                if int8 && options.quantizes(t) {
                    quantized_shapes.insert(name, t.size());
                    release(t)?;
                }
            }
            Ok(())
        })?;
        let path = spec.weights_path.as_str();
        let tensors = weights::load(Path::new(path), device)?;
        let quantized = load_weights(&model, &quantized_shapes, &tensors, path)?;
        let index = |cols: &[usize]| {
            let cols: Vec<i64> = cols.iter().map(|&c| c as i64).collect();
            Tensor::f_from_slice(&cols)
                .and_then(|t| t.f_to_device(device))
                .plugin_err("indexing features by role")
        };
        host.info(&format!(
            "model {}: TFT hidden {} × {} heads ({}), inputs {} observed / {} known / {} static, \
             lookback {}, forecasting {target} {} bar(s) ahead",
            spec.model_id,
            config.hidden_size,
            config.attention_heads,
            if int8 { "int8" } else { "fp32" },
            observed.len(),
            known.len(),
            statics.len(),
            config.lookback,
            config.horizons
        ));
        Ok(Self {
            columns: output_columns(&target, config.horizons, &config.quantiles),
            feature_names: first.feature_names.iter().map(|s| s.to_string()).collect(),
            past_columns: index(&past)?,
            known_columns: index(&known)?,
            static_columns: index(&statics)?,
            known: known.len(),
            roles,
            config,
            model,
            device,
            assets,
            quantized,
            streams: Vec::new(),
        })
    }

    /// Decoder rows a window needs after its last row.
    fn ahead(&self) -> usize {
        if self.known > 0 {
            self.config.horizons
        } else {
            0
        }
    }

    /// Checks dataset `index` of `batch` against the model's inputs; its
    /// row markers and asset index.
    fn check(&self, batch: &TaskInputs, index: usize) -> Result<(Vec<u8>, i64), PluginError> {
        let dataset = &batch.datasets[index];
        if dataset
            .feature_names
            .iter()
            .map(|s| s.as_str())
            .ne(self.feature_names.iter().map(String::as_str))
        {
            return Err(PluginError::invalid_data(format!(
                "{}: the rows have features [{}] but the model was trained on [{}]",
                dataset.symbol,
                dataset.feature_names.join(", "),
                self.feature_names.join(", ")
            )));
        }
        let annex = batch.annex(index)?;
        // Rows that give no roles are read with the model's.
        let given = batch.column(index as u32, column::FEATURE_ROLE).is_some();
        if given && annex.feature_roles != self.roles {
            let names = |roles: &[FeatureRole]| {
                roles
                    .iter()
                    .map(|r| r.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(PluginError::invalid_data(format!(
                "{}: the rows give the features the roles [{}] but the model was trained with \
                 [{}]",
                dataset.symbol,
                names(&annex.feature_roles),
                names(&self.roles)
            )));
        }
        let asset = match self.assets {
            None => 0,
            Some(n) if (annex.asset_index as usize) < n => annex.asset_index as i64,
            Some(n) => {
                return Err(PluginError::invalid_data(format!(
                    "{}: asset index {} is outside the model's {n} assets",
                    dataset.symbol, annex.asset_index
                )))
            }
        };
        Ok((annex.row_markers, asset))
    }

    /// Forecasts of `windows`, row-major `[n, horizons × quantiles]`, in
    /// batches of `eval_batch_size` (INT8 weights dequantized by the caller).
    fn forecast(&self, windows: &Windows) -> Result<Vec<f64>, PluginError> {
        let ctx = "assembling TFT windows";
        let (t, h) = (self.config.lookback as i64, self.config.horizons as i64);
        let span = self.config.lookback + self.ahead();
        let mut values = Vec::with_capacity(windows.outputs.len() * self.columns.len());
        for chunk in windows.last_rows.chunks(self.config.eval_batch_size) {
            let b = chunk.len() as i64;
            let rows = window_batch(&windows.source, span, chunk)?;
            let pick = |from: i64, len: i64, columns: &Tensor| {
                rows.f_narrow(1, from, len)
                    .and_then(|r| r.f_index_select(2, columns))
                    .plugin_err(ctx)
            };
            let future = if self.known > 0 {
                pick(t, h, &self.known_columns)?
            } else {
                Tensor::f_zeros([b, h, 0], (Kind::Float, self.device)).plugin_err(ctx)?
            };
            let batch = TftBatch {
                past: pick(0, t, &self.past_columns)?,
                future,
                static_reals: pick(t - 1, 1, &self.static_columns)?
                    .f_squeeze_dim(1)
                    .plugin_err(ctx)?,
                asset: Tensor::f_full([b], windows.asset, (Kind::Int64, self.device))
                    .plugin_err(ctx)?,
            };
            let out = tch::no_grad(|| self.model.forward(&batch, None))?;
            values.extend(
                out.forecast
                    .f_to_kind(Kind::Double)
                    .and_then(|f| f.f_reshape([-1]))
                    .and_then(|f| Vec::<f64>::try_from(&f))
                    .plugin_err("reading forecasts")?,
            );
        }
        Ok(values)
    }

    /// The FP32 TFT traced into TorchScript on the windows of the example's
    /// first dataset (plugin API 1.3):
    /// `forward(windows: float32[n, lookback+ahead, features], asset: int64[n])
    /// -> float32[n, horizons × quantiles]`. Each window is the z-scored rows
    /// ending `ahead` rows (the known-future decoder rows; 0 without known
    /// features) after the bar it forecasts; outputs are in the target's
    /// trained units, in `columns` order.
    pub fn export_torchscript(
        &self,
        example: &TaskInputs,
        out_dir: &Path,
    ) -> Result<String, PluginError> {
        if !self.quantized.is_empty() || self.config.precision == Precision::Int8 {
            return Err(PluginError::unsupported(
                "an INT8 TFT keeps int8 codes and row scales and dequantizes them at every call; \
                 TorchScript export is for FP32 models (train with \"precision\": \"fp32\")",
            ));
        }
        let ctx = "assembling TFT windows";
        let (markers, asset) = self.check(example, 0)?;
        let dataset = &example.datasets[0];
        let (lookback, ahead) = (self.config.lookback, self.ahead());
        let from = example.predict_from(0);
        let mut ends = window_rows(dataset.rows(), &markers, lookback, ahead)?;
        ends.retain(|&e| e >= from);
        if ends.is_empty() {
            return Err(PluginError::invalid_data(format!(
                "{}: no row from predict_from {from} on has a full window of {} rows",
                dataset.symbol,
                lookback + ahead
            )));
        }
        let source = data::features(dataset, 0..dataset.rows(), self.device)?;
        let last: Vec<usize> = ends.iter().map(|e| e + ahead).collect();
        let windows = window_batch(&source, lookback + ahead, &last)?;
        let assets = Tensor::f_full([ends.len() as i64], asset, (Kind::Int64, self.device))
            .plugin_err(ctx)?;
        let rows: Vec<(u32, u64)> = ends.iter().map(|&e| (0, e as u64)).collect();
        let (t, h) = (self.config.lookback as i64, self.config.horizons as i64);
        let known = self.known;
        let params: Vec<&Tensor> = self
            .model
            .named_parameters("")
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        tli_plugin_kit::torchscript::export(
            out_dir,
            &params,
            &[
                tli_plugin_kit::torchscript::Input {
                    name: "windows",
                    tensor: windows,
                },
                tli_plugin_kit::torchscript::Input {
                    name: "asset",
                    tensor: assets,
                },
            ],
            &self.columns,
            &rows,
            None,
            |xs| {
                let rows = &xs[0];
                let pick = |from: i64, len: i64, columns: &Tensor| {
                    rows.f_narrow(1, from, len)
                        .and_then(|r| r.f_index_select(2, columns))
                        .plugin_err(ctx)
                };
                let future = if known > 0 {
                    pick(t, h, &self.known_columns)?
                } else {
                    // [n, h, 0] without reading n into a number (the batch stays free).
                    rows.f_narrow(1, 0, 1)
                        .and_then(|r| r.f_narrow(2, 0, 0))
                        .and_then(|r| r.f_expand([-1, h, 0], false))
                        .plugin_err(ctx)?
                };
                let batch = TftBatch {
                    past: pick(0, t, &self.past_columns)?,
                    future,
                    static_reals: pick(t - 1, 1, &self.static_columns)?
                        .f_squeeze_dim(1)
                        .plugin_err(ctx)?,
                    asset: xs[1].shallow_clone(),
                };
                let out = self.model.forward(&batch, None)?;
                out.forecast.f_flatten(1, -1).plugin_err(ctx)
            },
        )
    }

    /// Runs `windows` with the INT8 weights dequantized for the call, and
    /// appends their outputs to `out`.
    fn run(&mut self, windows: &[Windows], out: &mut Predictions) -> Result<(), PluginError> {
        if windows.iter().all(|w| w.outputs.is_empty()) {
            return Ok(());
        }
        self.materialize()?;
        let result = (|| {
            for w in windows {
                let values = self.forecast(w)?;
                let width = self.columns.len();
                for (i, &(dataset, row)) in w.outputs.iter().enumerate() {
                    out.push(dataset, row, &values[i * width..(i + 1) * width])?;
                }
            }
            Ok(())
        })();
        let released = self.release();
        result.and(released)
    }

    fn materialize(&mut self) -> Result<(), PluginError> {
        for q in &mut self.quantized {
            let w = q.weight.dequantize()?;
            tch::no_grad(|| q.leaf.f_set_data(&w)).plugin_err("dequantizing int8 weights")?;
        }
        Ok(())
    }

    fn release(&mut self) -> Result<(), PluginError> {
        for q in &self.quantized {
            release(&q.leaf)?;
        }
        Ok(())
    }
}

/// Gives a parameter empty storage (its values live in int8 codes).
fn release(t: &Tensor) -> Result<(), PluginError> {
    let ctx = "releasing f32 copies of int8 weights";
    let empty = Tensor::f_empty([0], (Kind::Float, t.device())).plugin_err(ctx)?;
    let mut handle = t.shallow_clone();
    tch::no_grad(|| handle.f_set_data(&empty)).plugin_err(ctx)
}

/// The names a weights file of `model` holds: `<name>.int8` and
/// `<name>.scale` for the INT8 matrices, `<name>` for the rest.
fn expected_names(model: &Tft, quantized: &HashMap<String, Vec<i64>>) -> Vec<String> {
    model
        .named_parameters("")
        .into_iter()
        .flat_map(|(name, _)| match quantized.contains_key(&name) {
            true => vec![format!("{name}.int8"), format!("{name}.scale")],
            false => vec![name],
        })
        .collect()
}

/// Loads the weights file's tensors into `model` (f32 parameters) and
/// returns its INT8 matrices; refuses a file that lacks one of the model's
/// tensors, holds others, or holds one of another shape or kind.
fn load_weights(
    model: &Tft,
    quantized_shapes: &HashMap<String, Vec<i64>>,
    tensors: &[(String, Tensor)],
    path: &str,
) -> Result<Vec<Quantized>, PluginError> {
    let expected = expected_names(model, quantized_shapes);
    let missing: Vec<&str> = expected
        .iter()
        .map(String::as_str)
        .filter(|n| !tensors.iter().any(|(t, _)| t == n))
        .collect();
    let mut unknown: Vec<&str> = tensors
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !expected.iter().any(|e| e == n))
        .collect();
    // A file's tensors come in no fixed order: sort, so that the message
    // is the same every time.
    unknown.sort_unstable();
    let refuse = |why: String| {
        PluginError::io(format!(
            "{path} does not hold the weights of this TFT model: {why}; export the weights from \
             a checkpoint of this model, config and precision (it is a model of another plugin, \
             config or precision)"
        ))
    };
    if !missing.is_empty() || !unknown.is_empty() {
        let list = |names: &[&str]| {
            let shown: Vec<&str> = names.iter().take(4).copied().collect();
            match names.len() - shown.len() {
                0 => shown.join(", "),
                n => format!("{} and {n} more", shown.join(", ")),
            }
        };
        let mut why = Vec::new();
        let holds_int8 = tensors.iter().any(|(n, _)| n.ends_with(".int8"));
        let wants_int8 = !quantized_shapes.is_empty();
        if holds_int8 != wants_int8 {
            let (file, config) = match holds_int8 {
                true => ("INT8 (<name>.int8 codes with <name>.scale)", "FP32"),
                false => ("FP32", "INT8 (<name>.int8 codes with <name>.scale)"),
            };
            why.push(format!(
                "its weights are {file} but the config's precision is {config}"
            ));
        }
        if !missing.is_empty() {
            why.push(format!("it lacks {}", list(&missing)));
        }
        if !unknown.is_empty() {
            why.push(format!(
                "it holds tensors this model has not ({})",
                list(&unknown)
            ));
        }
        return Err(refuse(why.join("; ")));
    }
    let find = |name: &str| {
        tensors
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| refuse(format!("it lacks {name}")))
    };
    let mut quantized = Vec::new();
    for (name, leaf) in model.named_parameters("") {
        match quantized_shapes.get(&name) {
            None => {
                let saved = find(&name)?;
                if saved.kind() != Kind::Float {
                    return Err(refuse(format!("{name} is {:?}, not f32", saved.kind())));
                }
                copy_checked(leaf, saved, &name).map_err(|e| refuse(e.message.to_string()))?;
            }
            Some(shape) => {
                let codes = find(&format!("{name}.int8"))?;
                let scales = find(&format!("{name}.scale"))?;
                let fits = codes.kind() == Kind::Int8
                    && codes.size() == *shape
                    && scales.kind() == Kind::Float
                    && scales.size() == [shape[0]];
                if !fits {
                    return Err(refuse(format!(
                        "{name} is stored as {:?} codes of shape {:?} and {:?} scales of shape \
                         {:?}; this model has int8 codes of shape {shape:?} and f32 scales of \
                         shape [{}]",
                        codes.kind(),
                        codes.size(),
                        scales.kind(),
                        scales.size(),
                        shape[0]
                    )));
                }
                let copy = |t: &Tensor| t.f_contiguous();
                quantized.push(Quantized {
                    leaf: leaf.shallow_clone(),
                    weight: Int8Weight {
                        codes: copy(codes).plugin_err("reading int8 weights")?,
                        scales: copy(scales).plugin_err("reading int8 weights")?,
                    },
                });
            }
        }
    }
    Ok(quantized)
}

/// The rows of a dataset of `rows` rows (markers `markers`) whose window of
/// `lookback` rows and `ahead` rows after it lie in one run (no gap or roll).
pub fn window_rows(
    rows: usize,
    markers: &[u8],
    lookback: usize,
    ahead: usize,
) -> Result<Vec<usize>, PluginError> {
    let runs = RowRuns::new(rows, markers, BREAK_ON_DEFAULT, &SplitBounds::default())?;
    // Default bounds put every row in the test split.
    Ok(runs.window_ends(Split::Test, lookback, ahead))
}

impl Predictor for TftPredictor {
    fn predict(&mut self, batch: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = Predictions::with_columns(&self.columns);
        let (lookback, ahead) = (self.config.lookback, self.ahead());
        let mut windows = Vec::new();
        for index in 0..batch.datasets.len() {
            let (markers, asset) = self.check(batch, index)?;
            let dataset = &batch.datasets[index];
            let from = batch.predict_from(index);
            let mut ends = window_rows(dataset.rows(), &markers, lookback, ahead)?;
            ends.retain(|&e| e >= from);
            if ends.is_empty() {
                continue;
            }
            windows.push(Windows {
                source: data::features(dataset, 0..dataset.rows(), self.device)?,
                last_rows: ends.iter().map(|e| e + ahead).collect(),
                asset,
                outputs: ends.iter().map(|&e| (index as u32, e as u64)).collect(),
            });
        }
        self.run(&windows, &mut out)?;
        Ok(out)
    }

    fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        let dense: u64 = self
            .model
            .parameters()
            .iter()
            .map(|t| tensor_bytes(t))
            .sum();
        let int8: u64 = self.quantized.iter().map(|q| q.weight.bytes()).sum();
        let streamed: usize = self
            .streams
            .iter()
            .flat_map(|s| s.rows.iter().map(Vec::len))
            .sum();
        Ok(MemoryBreakdown {
            parameters: dense + int8,
            activations: streamed as u64 * F32,
            ..MemoryBreakdown::default()
        })
    }

    /// Keeps each dataset's last rows and forecasts each window a new row
    /// completes (see the module docs).
    fn stream(&mut self, bars: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = Predictions::with_columns(&self.columns);
        let span = self.config.lookback + self.ahead();
        let ahead = self.ahead() as u64;
        if self.streams.len() < bars.datasets.len() {
            self.streams
                .resize_with(bars.datasets.len(), Rolling::default);
        }
        // Check every dataset before any state changes.
        let checked = (0..bars.datasets.len())
            .map(|i| self.check(bars, i))
            .collect::<Result<Vec<_>, _>>()?;
        let mut windows = Vec::new();
        for (index, (markers, asset)) in checked.into_iter().enumerate() {
            let dataset = &bars.datasets[index];
            let width = dataset.feature_names.len();
            let stream = &mut self.streams[index];
            if bars.column(index as u32, column::PREDICT_FROM).is_some() {
                stream.from = bars.predict_from(index) as u64;
            }
            let mut values = Vec::new();
            let mut outputs = Vec::new();
            for (r, &marker) in markers.iter().enumerate() {
                if stream.streamed > 0 && marker & BREAK_ON_DEFAULT != 0 {
                    stream.rows.clear();
                }
                stream
                    .rows
                    .push_back(dataset.features[r * width..(r + 1) * width].to_vec());
                if stream.rows.len() > span {
                    stream.rows.pop_front();
                }
                // Full, so at least `span` rows were streamed and `streamed ≥ ahead`.
                if stream.rows.len() == span && stream.streamed - ahead >= stream.from {
                    values.extend(stream.rows.iter().flatten().copied());
                    outputs.push((index as u32, stream.streamed - ahead));
                }
                stream.streamed += 1;
            }
            if outputs.is_empty() {
                continue;
            }
            let source = Tensor::f_from_slice(&values)
                .and_then(|t| t.f_reshape([(outputs.len() * span) as i64, width as i64]))
                .and_then(|t| t.f_to_device(self.device))
                .plugin_err("copying streamed rows to the device")?;
            windows.push(Windows {
                source,
                last_rows: (1..=outputs.len()).map(|i| i * span - 1).collect(),
                asset,
                outputs,
            });
        }
        self.run(&windows, &mut out)?;
        Ok(out)
    }

    fn reset(&mut self) -> Result<(), PluginError> {
        self.streams.clear();
        Ok(())
    }
}
