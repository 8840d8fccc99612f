//! The Mamba-2 predictor (plugin API 1.2): the trained forecaster applied
//! to new bars.
//!
//! **`predict`** forecasts every row that ends a window of `lookback` rows
//! with no gap or roll marker inside it (the rows after a marker start a new
//! run, as in training), as `evaluate()` does (exactly so with
//! `loss_positions = 1`; README, "Predicting"): the window is read from a
//! zero state by the chunked forward pass and the head's output at its last
//! bar is the forecast. Splits are ignored (a batch has none).
//! Rows before the batch's `predict_from` are look-back only (no output).
//!
//! **`stream`** gives the same forecasts bar by bar with the O(1) recurrent
//! [`step`](crate::model::Forecaster::step). A forecast reads only its own
//! window (the model was trained on windows that start from a zero state),
//! so a single state carried from the first bar would read more than the
//! window; instead each dataset keeps one recurrent state per window in
//! flight: every new bar starts a window from a zero state and advances
//! every window in flight by one step; the window that has then read
//! `lookback` bars gives the bar's forecast and is dropped. Per bar that is
//! one batched step over at most `lookback` states (no window is
//! recomputed), and a gap or roll marker drops every window in flight.
//! `predict_from`, when a call gives it, counts rows of the stream: earlier
//! streamed rows advance the windows but get no output.
//!
//! Outputs (in the target's trained units): `<target>:mean` or
//! `<target>:p<NN>` with `horizons = 1`; `<target>:h<k>:mean` /
//! `<target>:h<k>:p<NN>` for the cumulative return over the next `k` bars
//! with `horizons > 1`.

use crate::block::State;
use crate::config::ForecasterConfig;
use crate::memory;
use crate::model::Forecaster;
use crate::stack::StackState;
use std::path::Path;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::predict::{mean_column, quantile_column};
use tli_plugin_api::task_inputs::column;
use tli_plugin_api::{
    Dataset, DatasetAnnex, DatasetShape, Host, MemoryBreakdown, PluginError, Predictions,
    Predictor, PredictorSpec, SplitBounds, TaskInputs,
};
use tli_plugin_kit::data::{self, Split};
use tli_plugin_kit::device::parse_device;
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::windows::{window_batch, RowRuns, BREAK_ON_DEFAULT};
use tli_plugin_kit::{tensor_bytes, weights, TchResultExt};

const F32: u64 = 4;

/// Tensor names of the model's weights in a checkpoint (the optimizer's,
/// `adamw.*`, are not).
pub fn is_weight(name: &str) -> bool {
    ["input.", "backbone.", "head."]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// The output columns: per horizon (`:h<k>` when there are several), the
/// point forecast or one column per quantile level.
pub fn output_columns(target: &str, horizons: usize, quantiles: &[f64]) -> Vec<String> {
    let mut out = Vec::new();
    for k in 1..=horizons {
        let name = match horizons {
            1 => target.to_string(),
            _ => format!("{target}:h{k}"),
        };
        if quantiles.is_empty() {
            out.push(mean_column(&name));
        } else {
            out.extend(quantiles.iter().map(|&q| quantile_column(&name, q)));
        }
    }
    out
}

/// Floats of one window's recurrent state (every layer's convolution and SSM state).
fn state_floats(config: &ForecasterConfig) -> u64 {
    let c = config.block();
    let per_layer = c.conv_dim() * c.d_conv + c.nheads() * c.headdim * c.d_state;
    (config.layers * per_layer) as u64
}

/// Bytes a predictor holds for batches of `shape.rows` rows: the weights,
/// the batch's rows on the device, one evaluation batch of windows and the
/// recurrent states of one streamed dataset.
pub fn estimate_memory(config: &ForecasterConfig, shape: DatasetShape) -> MemoryBreakdown {
    let windows = shape.rows.clamp(1, config.eval_batch_size as u64) as usize;
    let batch = ForecasterConfig {
        eval_batch_size: windows,
        ..config.clone()
    };
    let stream = F32 * config.lookback as u64 * state_floats(config);
    MemoryBreakdown {
        parameters: Forecaster::parameter_count_for(config, shape.features as usize) * F32,
        gradients: 0,
        optimizer_state: 0,
        activations: shape.rows * shape.features * F32
            + memory::eval_activation_bytes(&batch, shape.features)
            + stream,
    }
}

/// The rows of a dataset of `rows` rows (markers `markers`) that end a full
/// window of `lookback` rows with no gap or roll inside it.
pub fn window_rows(
    rows: usize,
    markers: &[u8],
    lookback: usize,
) -> Result<Vec<usize>, PluginError> {
    let runs = RowRuns::new(rows, markers, BREAK_ON_DEFAULT, &SplitBounds::default())?;
    // Default bounds put every row in the test split.
    Ok(runs.window_ends(Split::Test, lookback, 0))
}

/// The windows in flight of one streamed dataset.
#[derive(Default)]
struct Flight {
    /// One state per window in flight, oldest first (`None`: none in flight).
    state: Option<StackState>,
    in_flight: usize,
    /// Rows streamed so far (the row number of the next one).
    streamed: u64,
    /// The first stream row to give a forecast for (`predict_from`).
    from: u64,
}

impl Flight {
    fn bytes(&self) -> u64 {
        self.state.as_ref().map_or(0, |s| {
            s.layers
                .iter()
                .map(|l| tensor_bytes(&l.conv) + tensor_bytes(&l.ssm))
                .sum()
        })
    }
}

pub struct Mamba2Predictor {
    config: ForecasterConfig,
    model: Forecaster,
    device: Device,
    columns: Vec<String>,
    feature_names: Vec<String>,
    /// A pooled model's asset count (the one-hot width).
    assets: Option<usize>,
    width: usize,
    /// Streaming state per dataset index.
    flights: Vec<Flight>,
}

impl Mamba2Predictor {
    pub fn new(spec: PredictorSpec, host: Host) -> Result<Self, PluginError> {
        let config = ForecasterConfig::parse(&spec.config_json)?;
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
        let features = first.feature_names.len();
        if features == 0 {
            return Err(PluginError::invalid_data(
                "the model's schema has no feature columns",
            ));
        }
        let assets = schema
            .pooled
            .then(|| schema.asset_count().max(schema.datasets.len()));
        let width = features + assets.unwrap_or(0);
        let model = Forecaster::new(&config, width, &mut Rng::new(0), device)?;
        let path = spec.weights_path.as_str();
        let tensors = weights::load(Path::new(path), device)?;
        load_weights(&model, &tensors, path)?;
        host.info(&format!(
            "model {}: Mamba-2 {} layers × d_model {} over {width} inputs, lookback {}, \
             forecasting {target} {} horizon(s) ahead",
            spec.model_id, config.layers, config.d_model, config.lookback, config.horizons
        ));
        Ok(Self {
            columns: output_columns(&target, config.horizons, &config.quantiles),
            feature_names: first.feature_names.iter().map(|s| s.to_string()).collect(),
            config,
            model,
            device,
            assets,
            width,
            flights: Vec::new(),
        })
    }

    /// `[rows, width]` inputs of dataset `index` of `batch` (its features,
    /// and a pooled model's asset one-hot), with its annex.
    fn inputs(
        &self,
        batch: &TaskInputs,
        index: usize,
    ) -> Result<(Tensor, DatasetAnnex), PluginError> {
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
        let rows = dataset.rows();
        let mut x = data::features(dataset, 0..rows, self.device)?;
        if let Some(assets) = self.assets {
            let one_hot =
                data::one_hot_rows(rows, assets, annex.asset_index as usize, self.device)?;
            x = Tensor::f_cat(&[x, one_hot], 1).plugin_err("appending the asset one-hot")?;
        }
        Ok((x, annex))
    }

    /// The Mamba-2 forecaster traced into TorchScript on the windows of the
    /// example's first dataset (plugin API 1.3): `forward(windows:
    /// float32[1, lookback, inputs]) -> float32[1, horizons × quantiles]`,
    /// one window per call (its chunked scan sizes its tensors by the batch,
    /// so the module is traced for batches of one), each window the z-scored
    /// rows (and a pooled model's asset one-hot) ending at the bar it
    /// forecasts, outputs in the target's trained units.
    pub fn export_torchscript(
        &self,
        example: &TaskInputs,
        out_dir: &Path,
    ) -> Result<String, PluginError> {
        let lookback = self.config.lookback;
        let rows = example.datasets[0].rows();
        let (x, annex) = self.inputs(example, 0)?;
        let from = example.predict_from(0);
        let mut ends = window_rows(rows, &annex.row_markers, lookback)?;
        ends.retain(|&e| e >= from);
        if ends.is_empty() {
            return Err(PluginError::invalid_data(format!(
                "{}: no row from predict_from {from} on has a full window of {lookback} rows",
                example.datasets[0].symbol
            )));
        }
        let windows = window_batch(&x, lookback, &ends)?;
        let outputs: Vec<(u32, u64)> = ends.iter().map(|&e| (0, e as u64)).collect();
        let params: Vec<&Tensor> = self
            .model
            .named_parameters("")
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        let model = &self.model;
        tli_plugin_kit::torchscript::export(
            out_dir,
            &params,
            &[tli_plugin_kit::torchscript::Input {
                name: "windows",
                tensor: windows,
            }],
            &self.columns,
            &outputs,
            Some(1),
            |xs| {
                model
                    .forward(&xs[0], 1, None)?
                    .f_flatten(1, -1)
                    .plugin_err("flattening the forecast")
            },
        )
    }

    /// One streamed bar `x_t [1, width]` of a dataset: advances its windows
    /// in flight; the forecast `[horizons, outputs]` once a window is full.
    fn stream_bar(
        &self,
        flight: &mut Flight,
        x_t: &Tensor,
        marker: u8,
    ) -> Result<Option<Tensor>, PluginError> {
        let ctx = "streaming a bar";
        if marker & BREAK_ON_DEFAULT != 0 {
            flight.state = None;
            flight.in_flight = 0;
        }
        let fresh = StackState::zeros(&self.model.stack, 1)?;
        let mut state = match flight.state.take() {
            None => fresh,
            Some(old) => append_window(&old, &fresh)?,
        };
        let k = flight.in_flight + 1;
        let x = x_t
            .f_expand([k as i64, self.width as i64], false)
            .plugin_err(ctx)?;
        let y = tch::no_grad(|| self.model.step(&x, &mut state))?;
        if k < self.config.lookback {
            flight.state = Some(state);
            flight.in_flight = k;
            return Ok(None);
        }
        // The oldest window has read `lookback` bars: its forecast, then it goes.
        let forecast = y.f_select(0, 0).plugin_err(ctx)?;
        flight.in_flight = k - 1;
        flight.state = match k - 1 {
            0 => None,
            n => Some(drop_oldest(&state, n)?),
        };
        Ok(Some(forecast))
    }
}

/// `windows` with the state of one more window (`fresh`, batch 1) appended.
fn append_window(windows: &StackState, fresh: &StackState) -> Result<StackState, PluginError> {
    let layers = windows
        .layers
        .iter()
        .zip(&fresh.layers)
        .map(|(s, f)| {
            Ok(State {
                conv: Tensor::f_cat(&[&s.conv, &f.conv], 0)?,
                ssm: Tensor::f_cat(&[&s.ssm, &f.ssm], 0)?,
            })
        })
        .collect::<Result<Vec<_>, tch::TchError>>()
        .plugin_err("starting a streamed window")?;
    Ok(StackState { layers })
}

/// `windows` without its oldest window, `keep` windows left.
fn drop_oldest(windows: &StackState, keep: usize) -> Result<StackState, PluginError> {
    let rest = |t: &Tensor| t.f_narrow(0, 1, keep as i64)?.f_contiguous();
    let layers = windows
        .layers
        .iter()
        .map(|s| {
            Ok(State {
                conv: rest(&s.conv)?,
                ssm: rest(&s.ssm)?,
            })
        })
        .collect::<Result<Vec<_>, tch::TchError>>()
        .plugin_err("ending a streamed window")?;
    Ok(StackState { layers })
}

/// Forecasts as host values, row-major.
fn to_values(t: &Tensor) -> Result<Vec<f64>, PluginError> {
    t.f_to_kind(Kind::Double)
        .and_then(|t| t.f_reshape([-1]))
        .and_then(|t| Vec::<f64>::try_from(&t))
        .plugin_err("reading forecasts")
}

/// Copies the weights file's tensors into `model`, refusing a file that
/// lacks one of its tensors, holds others, or holds one of another shape.
fn load_weights(
    model: &Forecaster,
    tensors: &[(String, Tensor)],
    path: &str,
) -> Result<(), PluginError> {
    let own = model.named_parameters("");
    let missing: Vec<&str> = own
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !tensors.iter().any(|(t, _)| t == n))
        .collect();
    let mut unknown: Vec<&str> = tensors
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !own.iter().any(|(o, _)| o == n))
        .collect();
    // A file's tensors come in no fixed order: sorted, the message is stable.
    unknown.sort_unstable();
    if !missing.is_empty() || !unknown.is_empty() {
        let list = |names: &[&str]| {
            let shown: Vec<&str> = names.iter().take(4).copied().collect();
            let more = names.len().saturating_sub(shown.len());
            match more {
                0 => shown.join(", "),
                n => format!("{} and {n} more", shown.join(", ")),
            }
        };
        let mut why = Vec::new();
        if !missing.is_empty() {
            why.push(format!("it lacks {}", list(&missing)));
        }
        if !unknown.is_empty() {
            why.push(format!(
                "it holds tensors this model has not ({})",
                list(&unknown)
            ));
        }
        return Err(PluginError::io(format!(
            "{path} does not hold the weights of this Mamba-2 model: {}; export the weights \
             from a checkpoint of this model and config (it is a model of another plugin or \
             config)",
            why.join("; ")
        )));
    }
    model.load_named("", tensors).map_err(|e| {
        PluginError::io(format!(
            "{path} does not hold the weights of this Mamba-2 model: {}",
            e.message
        ))
    })
}

impl Predictor for Mamba2Predictor {
    fn predict(&mut self, batch: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = Predictions::with_columns(&self.columns);
        let lookback = self.config.lookback;
        for index in 0..batch.datasets.len() {
            let rows = batch.datasets[index].rows();
            let (x, annex) = self.inputs(batch, index)?;
            let from = batch.predict_from(index);
            let mut ends = window_rows(rows, &annex.row_markers, lookback)?;
            ends.retain(|&e| e >= from);
            for chunk in ends.chunks(self.config.eval_batch_size) {
                let forecast = tch::no_grad(|| -> Result<Tensor, PluginError> {
                    let windows = window_batch(&x, lookback, chunk)?;
                    self.model.forward(&windows, 1, None)
                })?;
                let values = to_values(&forecast)?;
                let w = self.columns.len();
                for (i, &row) in chunk.iter().enumerate() {
                    out.push(index as u32, row as u64, &values[i * w..(i + 1) * w])?;
                }
            }
        }
        Ok(out)
    }

    fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        Ok(MemoryBreakdown {
            parameters: self
                .model
                .parameters()
                .iter()
                .map(|t| tensor_bytes(t))
                .sum(),
            activations: self.flights.iter().map(Flight::bytes).sum(),
            ..MemoryBreakdown::default()
        })
    }

    /// Each dataset's bars advance its windows in flight (see the module
    /// docs); a bar's forecast comes once a window of `lookback` bars ends
    /// at it, equal to `predict`'s for that bar.
    fn stream(&mut self, bars: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = Predictions::with_columns(&self.columns);
        if self.flights.len() < bars.datasets.len() {
            self.flights
                .resize_with(bars.datasets.len(), Flight::default);
        }
        for index in 0..bars.datasets.len() {
            let (x, annex) = self.inputs(bars, index)?;
            let mut flight = std::mem::take(&mut self.flights[index]);
            if bars.column(index as u32, column::PREDICT_FROM).is_some() {
                flight.from = bars.predict_from(index) as u64;
            }
            let result = (|| -> Result<(), PluginError> {
                for (r, &marker) in annex.row_markers.iter().enumerate() {
                    let x_t = x.f_narrow(0, r as i64, 1).plugin_err("streaming a bar")?;
                    // The first bar ever streamed starts a run whatever its marker.
                    let marker = if flight.streamed == 0 { 0 } else { marker };
                    let forecast = self.stream_bar(&mut flight, &x_t, marker)?;
                    if let Some(forecast) = forecast.filter(|_| flight.streamed >= flight.from) {
                        out.push(index as u32, flight.streamed, &to_values(&forecast)?)?;
                    }
                    flight.streamed += 1;
                }
                Ok(())
            })();
            self.flights[index] = flight;
            result?;
        }
        Ok(out)
    }

    fn reset(&mut self) -> Result<(), PluginError> {
        self.flights.clear();
        Ok(())
    }
}
