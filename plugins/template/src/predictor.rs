//! The template's predictor (plugin API 1.2): the trained MLP applied to
//! feature rows, one point forecast of its target per row (`<target>:mean`,
//! in the target's trained units). A pooled model appends each dataset's
//! asset one-hot exactly as in training.

use crate::config::TemplateConfig;
use std::path::Path;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::{
    predict::mean_column, Dataset, DatasetShape, Host, MemoryBreakdown, PluginError, Predictions,
    Predictor, PredictorSpec, TaskInputs,
};
use tli_plugin_kit::{
    data, device::parse_device, mlp::Mlp, rng::Rng, tensor_bytes, weights, TchResultExt,
};

const F32: u64 = 4;

/// Tensor names of the model's weights in a checkpoint (the optimizer's are not).
pub fn is_weight(name: &str) -> bool {
    name.starts_with("layer")
}

/// The input width of the model: features, and a pooled model's one-hot.
fn input_width(schema: &TaskInputs) -> (usize, Option<usize>) {
    let features = schema.datasets[0].feature_names.len();
    if schema.pooled {
        let assets = schema.asset_count().max(schema.datasets.len());
        (features + assets, Some(assets))
    } else {
        (features, None)
    }
}

pub fn estimate_memory(config: &TemplateConfig, shape: DatasetShape) -> MemoryBreakdown {
    let sizes = config.layer_sizes(shape.features as usize);
    let widths: u64 = sizes.iter().map(|w| *w as u64).sum();
    MemoryBreakdown {
        parameters: Mlp::parameter_count_for(&sizes) * F32,
        gradients: 0,
        optimizer_state: 0,
        // The batch's rows and every layer's output (no gradients kept).
        activations: shape.rows * widths * F32,
    }
}

pub struct TemplatePredictor {
    model: Mlp,
    device: Device,
    /// The output column (`<target>:mean`).
    column: String,
    feature_names: Vec<String>,
    /// A pooled model's asset count (the one-hot width).
    assets: Option<usize>,
    /// Rows streamed so far, per dataset index.
    streamed: Vec<u64>,
}

impl TemplatePredictor {
    pub fn new(spec: PredictorSpec, host: Host) -> Result<Self, PluginError> {
        let config = TemplateConfig::parse(&spec.config_json)?;
        let device = parse_device(&spec.device)?;
        let first: &Dataset = &spec.schema.datasets[0];
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
        let (width, assets) = input_width(&spec.schema);
        let mut model = Mlp::new(&config.layer_sizes(width), &mut Rng::new(0), device)?;
        let tensors = weights::load(Path::new(spec.weights_path.as_str()), device)?;
        model.load_named(&tensors).map_err(|e| {
            PluginError::io(format!(
                "{} does not hold this model's weights: {}",
                spec.weights_path, e.message
            ))
        })?;
        host.info(&format!(
            "model {}: MLP {:?} forecasting {target}",
            spec.model_id,
            config.layer_sizes(width)
        ));
        Ok(Self {
            model,
            device,
            column: mean_column(&target),
            feature_names: first.feature_names.iter().map(|s| s.to_string()).collect(),
            assets,
            streamed: Vec::new(),
        })
    }

    /// The MLP traced into TorchScript on the rows of the example's first
    /// dataset (plugin API 1.3): `forward(x: float32[rows, inputs]) ->
    /// float32[rows, 1]`, `x` the z-scored features (and a pooled model's
    /// asset one-hot), the output the forecast in the target's trained units.
    pub fn export_torchscript(
        &self,
        example: &TaskInputs,
        out_dir: &Path,
    ) -> Result<String, PluginError> {
        let x = self.inputs(example, 0)?;
        let from = example.predict_from(0).min(example.datasets[0].rows());
        let rows: Vec<(u32, u64)> = (0..x.size()[0] as usize)
            .map(|i| (0, (from + i) as u64))
            .collect();
        let model = &self.model;
        tli_plugin_kit::torchscript::export(
            out_dir,
            &model.parameters(),
            &[tli_plugin_kit::torchscript::Input {
                name: "x",
                tensor: x,
            }],
            std::slice::from_ref(&self.column),
            &rows,
            None,
            |xs| model.forward(&xs[0]),
        )
    }

    /// The MLP's input for the rows of dataset `index` of `batch` from its
    /// `predict_from` on: features, and a pooled model's asset one-hot.
    fn inputs(&self, batch: &TaskInputs, index: usize) -> Result<Tensor, PluginError> {
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
        let from = batch.predict_from(index).min(dataset.rows());
        let rows = dataset.rows() - from;
        let mut x = data::features(dataset, from..dataset.rows(), self.device)?;
        if let Some(assets) = self.assets {
            let asset = batch.annex(index)?.asset_index as usize;
            let one_hot = data::one_hot_rows(rows, assets, asset, self.device)?;
            x = Tensor::f_cat(&[x, one_hot], 1).plugin_err("appending the asset one-hot")?;
        }
        Ok(x)
    }

    /// Forecasts of the rows of dataset `index` of `batch` from its
    /// `predict_from` on (a row needs no context), and that first row.
    fn forecast(&self, batch: &TaskInputs, index: usize) -> Result<(usize, Vec<f32>), PluginError> {
        let dataset = &batch.datasets[index];
        let from = batch.predict_from(index).min(dataset.rows());
        if dataset.rows() == from {
            return Ok((from, Vec::new()));
        }
        let x = self.inputs(batch, index)?;
        let y = tch::no_grad(|| self.model.forward(&x))?;
        let values = y
            .f_to_kind(Kind::Float)
            .and_then(|t| t.f_reshape([-1]))
            .and_then(Vec::<f32>::try_from)
            .plugin_err("reading forecasts")?;
        Ok((from, values))
    }
}

impl Predictor for TemplatePredictor {
    fn predict(&mut self, batch: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = Predictions::with_columns(&[&self.column]);
        for index in 0..batch.datasets.len() {
            let (from, values) = self.forecast(batch, index)?;
            for (i, value) in values.into_iter().enumerate() {
                out.push(index as u32, (from + i) as u64, &[f64::from(value)])?;
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
            ..MemoryBreakdown::default()
        })
    }

    /// One row needs no past: each streamed row is forecast on its own.
    fn stream(&mut self, bars: &TaskInputs) -> Result<Predictions, PluginError> {
        let mut out = self.predict(bars)?;
        if self.streamed.len() < bars.datasets.len() {
            self.streamed.resize(bars.datasets.len(), 0);
        }
        for (d, row) in out.dataset.iter().zip(out.rows.iter_mut()) {
            *row += self.streamed[*d as usize];
        }
        for (i, dataset) in bars.datasets.iter().enumerate() {
            self.streamed[i] += dataset.rows() as u64;
        }
        Ok(out)
    }

    fn reset(&mut self) -> Result<(), PluginError> {
        self.streamed.clear();
        Ok(())
    }
}
