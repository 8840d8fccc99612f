//! The tli template plugin: an MLP that forecasts a forward-return target from
//! the features the host hands it, trained with AdamW on mean squared error.
//!
//! It is small on purpose and complete on purpose: config validation with a
//! JSON Schema, a memory estimate that matches what it allocates, seeded and
//! exactly resumable training, evaluation against a zero forecast, host
//! logging and cancellation. Copy this crate to start a new plugin
//! (docs/writing-a-plugin.md).

mod config;
mod pooled;
mod predictor;

use config::TemplateConfig;
use serde::{Deserialize, Serialize};
use std::path::Path;
use tch::{Device, Kind, Tensor};
use tli_plugin_api::{
    abi_stable::std_types::RArc, capability, export_plugin, Dataset, DatasetShape, EvalReport,
    Host, Manifest, MemoryBreakdown, Metric, Plugin, PluginError, Predictor, PredictorSpec,
    StepReport, TaskInputs, TaskSpec, Trainer,
};
use tli_plugin_kit::schedule::learning_rate_at;
use tli_plugin_kit::trade_report::{self, Market};
use tli_plugin_kit::validation::validation_due;
use tli_plugin_kit::{
    adam::AdamConfig,
    checkpoint,
    data::{self, Split},
    device::{parse_device, parse_device_name},
    flat_adamw::FlatAdamW,
    forecast_metrics,
    mlp::Mlp,
    rng::Rng,
    tensor_bytes, TchResultExt,
};

pub struct TemplatePlugin;

export_plugin!(TemplatePlugin);

const F32: u64 = 4;

impl Plugin for TemplatePlugin {
    type Trainer = TemplateTrainer;

    fn manifest() -> Manifest {
        Manifest {
            name: "template".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            family: "mlp".into(),
            description: "MLP forecaster of forward returns (the plugin to copy)".into(),
            default_config: tli_plugin_kit::config::default_json(&TemplateConfig::default()),
            config_schema: TemplateConfig::schema().to_string(),
        }
    }

    fn validate_config(config_json: &str) -> Result<String, PluginError> {
        let config = TemplateConfig::parse(config_json)?;
        tli_plugin_kit::config::to_json(&config)
    }

    fn estimate_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let config = TemplateConfig::parse(config_json)?;
        parse_device_name(device)?;
        let params = Mlp::parameter_count_for(&config.layer_sizes(shape.features as usize)) * F32;
        Ok(MemoryBreakdown {
            parameters: params,
            gradients: params,
            optimizer_state: 2 * params,
            activations: data_bytes(shape) + batch_activation_bytes(&config, shape.features),
        })
    }

    fn create_trainer(spec: TaskSpec, host: Host) -> Result<TemplateTrainer, PluginError> {
        TemplateTrainer::new(spec, None, host)
    }

    fn capabilities() -> Vec<String> {
        vec![
            capability::POOLED.to_string(),
            capability::PREDICT.to_string(),
        ]
    }

    /// Compared by: validation loss and skill, Sharpe of trading it, loss.
    fn headline_metrics() -> Vec<String> {
        tli_plugin_kit::headline::forecaster("valid_loss")
    }

    /// A pooled task trains one MLP across every asset, the asset index a
    /// one-hot static input; a per-asset task is the 1.0 trainer.
    fn create_trainer_with_inputs(
        spec: TaskSpec,
        inputs: TaskInputs,
        host: Host,
    ) -> Result<TemplateTrainer, PluginError> {
        TemplateTrainer::new(spec, Some(&inputs), host)
    }

    fn export_weights(
        config_json: &str,
        checkpoint_dir: &Path,
        weights_path: &Path,
    ) -> Result<(), PluginError> {
        TemplateConfig::parse(config_json)?;
        tli_plugin_kit::weights::export_from_checkpoint(
            checkpoint_dir,
            weights_path,
            predictor::is_weight,
        )
    }

    fn estimate_predictor_memory(
        config_json: &str,
        shape: DatasetShape,
        device: &str,
    ) -> Result<MemoryBreakdown, PluginError> {
        let config = TemplateConfig::parse(config_json)?;
        parse_device_name(device)?;
        Ok(predictor::estimate_memory(&config, shape))
    }

    fn create_predictor(
        spec: PredictorSpec,
        host: Host,
    ) -> Result<Box<dyn Predictor>, PluginError> {
        Ok(Box::new(predictor::TemplatePredictor::new(spec, host)?))
    }

    fn export_torchscript(
        spec: PredictorSpec,
        example: &TaskInputs,
        out_dir: &std::path::Path,
        host: Host,
    ) -> Result<String, PluginError> {
        predictor::TemplatePredictor::new(spec, host)?.export_torchscript(example, out_dir)
    }
}

/// Bytes of the dataset copies the trainer keeps on the device: all feature
/// rows and one target column.
fn data_bytes(shape: DatasetShape) -> u64 {
    shape.rows * (shape.features + 1) * F32
}

/// Peak bytes of one batch's forward and backward pass (inputs, every layer's
/// output, and a gradient of the same size for each).
fn batch_activation_bytes(config: &TemplateConfig, features: u64) -> u64 {
    let widths: u64 = config
        .layer_sizes(features as usize)
        .iter()
        .map(|w| *w as u64)
        .sum();
    2 * config.batch_size as u64 * widths * F32
}

/// What `state.json` holds besides the tensors.
#[derive(Serialize, Deserialize)]
struct SavedState {
    config: TemplateConfig,
    steps: u64,
    optimizer_steps: u64,
    rng: Rng,
}

pub struct TemplateTrainer {
    config: TemplateConfig,
    host: Host,
    device: Device,
    max_steps: u64,
    steps: u64,
    rng: Rng,
    model: Mlp,
    /// AdamW over the model's parameters, adopted into one flat buffer.
    optimizer: FlatAdamW,
    /// All feature rows and the chosen target column, on the device.
    features: Tensor,
    targets: Tensor,
    train_rows: u64,
    shape: DatasetShape,
    valid_rows: std::ops::Range<usize>,
    /// Test rows of a per-asset task (empty for a pooled one).
    test_rows: std::ops::Range<usize>,
    /// A pooled task's assets: symbol and validation rows (empty otherwise).
    pooled_valid: Vec<(String, std::ops::Range<usize>)>,
    /// Each asset's market and the first row of its validation split in its
    /// own dataset (the trading metrics' rows).
    markets: Vec<(Option<Market>, usize)>,
}

impl TemplateTrainer {
    fn new(spec: TaskSpec, inputs: Option<&TaskInputs>, host: Host) -> Result<Self, PluginError> {
        let pooled = inputs.filter(|i| i.pooled);
        let config = TemplateConfig::parse(&spec.config_json)?;
        let device = parse_device(&spec.device)?;
        let dataset: &RArc<Dataset> = &spec.dataset;
        let mut shape = dataset.shape();
        if shape.features == 0 {
            return Err(PluginError::invalid_data(
                "the dataset has no feature columns",
            ));
        }
        let train = data::split_rows(dataset, Split::Train);
        if train.len() < 2 {
            return Err(PluginError::invalid_data(format!(
                "the training split has {} row(s); at least 2 are needed",
                train.len()
            )));
        }
        let all = 0..dataset.rows();
        let test_rows = match pooled {
            None => data::split_rows(dataset, Split::Test),
            Some(_) => 0..0,
        };
        let (features, targets, train_rows, valid_rows, pooled_valid) = match pooled {
            None => (
                data::features(dataset, all.clone(), device)?,
                data::target_column(dataset, all, config.target_index, device)?,
                train.len() as u64,
                data::split_rows(dataset, Split::Validation),
                Vec::new(),
            ),
            Some(inputs) => {
                let p = pooled::pooled_data(inputs, config.target_index, device)?;
                shape.features = p.width as u64;
                shape.rows = p.features.size()[0] as u64;
                let first = p.valid.first().map(|(_, r)| r.start).unwrap_or(0);
                let last = p.valid.last().map(|(_, r)| r.end).unwrap_or(0);
                host.info(&format!(
                    "pooled over {} assets: {}",
                    p.valid.len(),
                    p.valid
                        .iter()
                        .map(|(s, _)| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                (p.features, p.targets, p.train_rows, first..last, p.valid)
            }
        };

        // Each asset's market (closes, rolls, contract) and the first row of
        // its validation split, for the trading metrics.
        let mut markets = Vec::new();
        match pooled {
            None => {
                let markers = match inputs {
                    Some(inputs) => inputs.annex(0)?.row_markers,
                    None => Vec::new(),
                };
                let valid = data::split_rows(dataset, Split::Validation).start;
                markets.push((Market::of(dataset, &markers)?, valid));
            }
            Some(inputs) => {
                for (i, d) in inputs.datasets.iter().enumerate() {
                    let valid = data::split_rows(d, Split::Validation).start;
                    markets.push((Market::of(d, &inputs.annex(i)?.row_markers)?, valid));
                }
            }
        }

        let rng = Rng::new(spec.seed);
        let model = Mlp::new(
            &config.layer_sizes(shape.features as usize),
            &mut rng.fork(1),
            device,
        )?;
        let optimizer = FlatAdamW::new(
            AdamConfig {
                learning_rate: config.learning_rate,
                weight_decay: config.weight_decay,
                ..AdamConfig::default()
            },
            &model.parameters(),
        )?;
        if config.valid_every > 0 && valid_rows.is_empty() {
            host.warn(
                "the validation split is empty: no validation during training (valid_every is \
                 ignored)",
            );
        }
        host.info(&format!(
            "task {}: MLP {:?} with {} parameters on {} ({} training rows of {}, target {:?})",
            spec.task_id,
            config.layer_sizes(shape.features as usize),
            model.parameter_count(),
            spec.device,
            train.len(),
            dataset.symbol,
            dataset
                .target_names
                .get(config.target_index)
                .map(|s| s.as_str())
                .unwrap_or("?"),
        ));
        Ok(Self {
            train_rows,
            shape,
            markets,
            valid_rows,
            test_rows,
            pooled_valid,
            config,
            host,
            device,
            max_steps: spec.max_steps.max(1),
            steps: 0,
            rng,
            model,
            optimizer,
            features,
            targets,
        })
    }

    fn learning_rate(&self) -> f64 {
        let c = &self.config;
        learning_rate_at(
            c.learning_rate,
            c.lr_schedule,
            0,
            self.steps,
            self.max_steps,
        )
    }

    fn train_one_batch(&mut self) -> Result<f64, PluginError> {
        let batch: Vec<i64> = (0..self.config.batch_size)
            .map(|_| self.rng.below(self.train_rows) as i64)
            .collect();
        let index = Tensor::f_from_slice(&batch)
            .and_then(|t| t.f_to_device(self.device))
            .plugin_err("building a batch index")?;
        let x = self
            .features
            .f_index_select(0, &index)
            .plugin_err("gathering a batch")?;
        let y = self
            .targets
            .f_index_select(0, &index)
            .plugin_err("gathering a batch")?;
        let prediction = self.model.forward(&x)?;
        let loss = prediction
            .f_mse_loss(&y, tch::Reduction::Mean)
            .plugin_err("computing the loss")?;
        let grad = self.optimizer.gradients(&loss)?;
        let lr = self.learning_rate();
        self.optimizer.apply(&grad, lr)?;
        loss.f_double_value(&[]).plugin_err("reading the loss")
    }

    /// Metrics over `rows` of the data tensors, named `{prefix}_…{suffix}`,
    /// and the forecasts of the rows.
    fn split_metrics(
        &self,
        prefix: &str,
        rows: std::ops::Range<usize>,
        suffix: &str,
    ) -> Result<(Vec<Metric>, Vec<f64>), PluginError> {
        let (start, len) = (rows.start as i64, rows.len() as i64);
        // Forecasts and targets of the validation split; the kit computes the metrics.
        let (forecast, target) = tch::no_grad(|| -> Result<(Vec<f32>, Vec<f32>), tch::TchError> {
            let x = self.features.f_narrow(0, start, len)?;
            let y = self.targets.f_narrow(0, start, len)?;
            let p = self
                .model
                .forward(&x)
                .map_err(|e| tch::TchError::Torch(e.to_string()))?;
            let flat = |t: &Tensor| -> Result<Vec<f32>, tch::TchError> {
                Vec::<f32>::try_from(t.f_to_kind(Kind::Float)?.f_reshape([-1])?)
            };
            Ok((flat(&p)?, flat(&y)?))
        })
        .plugin_err("evaluating a split")?;
        let m = forecast_metrics::point_metrics(&target, &forecast);
        let (mse, zero_mse) = (m.mse, m.mse_zero_forecast);
        self.host.debug(&format!(
            "{prefix}{suffix} mse {mse:.6e} vs zero forecast {zero_mse:.6e}"
        ));
        let metrics = vec![
            // The training loss (mean squared error) on the split.
            Metric::new(&format!("{prefix}_loss{suffix}"), mse),
            Metric::new(&format!("{prefix}_mse{suffix}"), mse),
            Metric::new(&format!("{prefix}_mse_zero_forecast{suffix}"), zero_mse),
            Metric::new(&format!("{prefix}_skill{suffix}"), m.skill),
            Metric::new(&format!("{prefix}_hit_rate{suffix}"), m.hit_rate),
            Metric::new(&format!("{prefix}_correlation{suffix}"), m.correlation),
            // The point forecast as a median: comparable with quantile models' P50 q-risk.
            Metric::new(
                &format!("{prefix}_qrisk_p50{suffix}"),
                forecast_metrics::quantile_risk(&target, &forecast, 0.5),
            ),
        ];
        Ok((metrics, forecast.iter().map(|&f| f64::from(f)).collect()))
    }

    /// The validation split's metrics (`valid_…`): forecast metrics of the
    /// whole split (a pooled task: also of each asset, `…@SYMBOL`) and the
    /// trading metrics of the default position rule. Used by `evaluate()`
    /// and by `step` when a validation falls due.
    fn validation_metrics(&self) -> Result<Vec<Metric>, PluginError> {
        let rows = self.valid_rows.clone();
        let (mut metrics, forecasts) = self.split_metrics("valid", rows.clone(), "")?;
        let markets: Vec<Option<Market>> = self.markets.iter().map(|(m, _)| m.clone()).collect();
        if self.pooled_valid.is_empty() {
            // A per-asset task: its tensors hold every row of its dataset.
            let traded = [(rows.collect(), forecasts)];
            metrics.extend(trade_report::task_metrics(&markets, &traded, "valid")?);
        } else {
            let mut traded = Vec::new();
            for (i, (symbol, rows)) in self.pooled_valid.iter().enumerate() {
                let (m, forecasts) =
                    self.split_metrics("valid", rows.clone(), &format!("@{symbol}"))?;
                metrics.extend(m);
                let first = self.markets.get(i).map_or(0, |(_, valid)| *valid);
                traded.push(((first..first + rows.len()).collect(), forecasts));
            }
            metrics.extend(trade_report::task_metrics(&markets, &traded, "valid")?);
        }
        Ok(metrics)
    }

    fn named_tensors(&self) -> Vec<(String, &Tensor)> {
        let mut all = self.model.named_parameters();
        all.extend(self.optimizer.named_state());
        all
    }
}

impl Trainer for TemplateTrainer {
    /// Trains `n` batches; then, when the call crossed a multiple of
    /// `valid_every` and was not cancelled, validates the model as it is now
    /// and reports the `valid_…` metrics (finite ones) with the call's.
    fn step(&mut self, n: u64) -> Result<StepReport, PluginError> {
        let before = self.steps;
        let mut loss_sum = 0.0;
        let mut done = 0;
        while done < n {
            if self.host.is_cancelled() {
                break;
            }
            loss_sum += self.train_one_batch()?;
            self.steps += 1;
            done += 1;
        }
        let mut metrics = vec![Metric::new("learning_rate", self.learning_rate())];
        if done > 0 {
            metrics.push(Metric::new("train_loss", loss_sum / done as f64));
        }
        if done == n
            && !self.valid_rows.is_empty()
            && validation_due(before, self.steps, self.config.valid_every)
        {
            metrics.extend(
                self.validation_metrics()?
                    .into_iter()
                    .filter(|m| m.value.is_finite()),
            );
        }
        Ok(StepReport {
            steps_done: done,
            metrics: metrics.into(),
        })
    }

    fn evaluate(&mut self) -> Result<EvalReport, PluginError> {
        if self.valid_rows.is_empty() {
            return Err(PluginError::invalid_data("the validation split is empty"));
        }
        let mut metrics = self.validation_metrics()?;
        let markets: Vec<Option<Market>> = self.markets.iter().map(|(m, _)| m.clone()).collect();
        // The test split of a per-asset task (its rows are on the device already).
        if self.pooled_valid.is_empty() && !self.test_rows.is_empty() {
            let rows = self.test_rows.clone();
            let (m, forecasts) = self.split_metrics("test", rows.clone(), "")?;
            metrics.extend(m);
            let traded = [(rows.collect(), forecasts)];
            metrics.extend(trade_report::task_metrics(&markets, &traded, "test")?);
        }
        Ok(EvalReport {
            metrics: metrics.into(),
        })
    }

    fn save_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        let state = SavedState {
            config: self.config.clone(),
            steps: self.steps,
            optimizer_steps: self.optimizer.step,
            rng: self.rng.clone(),
        };
        checkpoint::save(dir, &self.named_tensors(), &state)
    }

    fn load_checkpoint(&mut self, dir: &Path) -> Result<(), PluginError> {
        let (tensors, state): (_, SavedState) = checkpoint::load(dir, self.device)?;
        if state.config.layer_sizes(0) != self.config.layer_sizes(0) {
            checkpoint::refuse_mismatch(
                dir,
                "architecture",
                &[format!(
                    "hidden sizes {:?}, this trainer has {:?}",
                    state.config.hidden_sizes, self.config.hidden_sizes
                )],
            )?;
        }
        self.optimizer.check_named(&tensors)?;
        self.model.load_named(&tensors)?;
        self.optimizer.load_named(&tensors, state.optimizer_steps)?;
        self.steps = state.steps;
        self.rng = state.rng;
        Ok(())
    }

    fn memory(&self) -> Result<MemoryBreakdown, PluginError> {
        Ok(MemoryBreakdown {
            // Every parameter lives in the optimizer's flat buffer.
            parameters: self.optimizer.params().bytes(),
            // The flat gradient each step gathers.
            gradients: self.optimizer.gradient_bytes(),
            optimizer_state: self.optimizer.state_bytes(),
            activations: tensor_bytes(&self.features)
                + tensor_bytes(&self.targets)
                + batch_activation_bytes(&self.config, self.shape.features),
        })
    }

    fn total_steps(&self) -> u64 {
        self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tli_plugin_api::abi_stable::sabi_trait::TD_Opaque;
    use tli_plugin_api::abi_stable::std_types::RStr;
    use tli_plugin_api::{HostServicesApi, HostServicesApi_TO, LogLevel, SplitBounds};

    /// A host whose cancellation flag the test sets.
    struct TestHost(Arc<AtomicBool>);

    impl HostServicesApi for TestHost {
        fn log(&self, _: LogLevel, _: RStr<'_>) {}
        fn is_cancelled(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
    }

    /// A noisy linear target of three features; 300 rows, splits with an embargo.
    fn dataset() -> Dataset {
        let rows = 300;
        let mut rng = Rng::new(11);
        let (mut features, mut targets) = (Vec::new(), Vec::new());
        for _ in 0..rows {
            let x: Vec<f32> = (0..3).map(|_| rng.normal() as f32).collect();
            targets.push(0.5 * x[0] - 0.2 * x[2] + 0.1 * rng.normal() as f32);
            features.extend(x);
        }
        Dataset {
            symbol: "SYN".into(),
            timestamps: (0..rows as i64).map(|t| t * 86_400_000_000_000).collect(),
            features: features.into(),
            feature_names: vec!["a".into(), "b".into(), "c".into()].into(),
            targets: targets.into(),
            target_names: vec!["fwd".into()].into(),
            splits: SplitBounds {
                train_end: 200,
                valid_start: 205,
                valid_end: 250,
                test_start: 255,
            },
            close: (0..rows).map(|t| 100.0 + t as f64).collect(),
            periods_per_year: 252.0,
            ..Dataset::default()
        }
    }

    fn trainer(valid_every: u64) -> (TemplateTrainer, Arc<AtomicBool>) {
        let cancelled = Arc::new(AtomicBool::new(false));
        let host = Host::new(HostServicesApi_TO::from_ptr(
            RArc::new(TestHost(cancelled.clone())),
            TD_Opaque,
        ));
        let config =
            format!(r#"{{"hidden_sizes": [8], "batch_size": 16, "valid_every": {valid_every}}}"#);
        let spec = TaskSpec {
            task_id: "t".into(),
            config_json: TemplatePlugin::validate_config(&config).unwrap().into(),
            device: "cpu".into(),
            seed: 4,
            max_steps: 40,
            dataset: RArc::new(dataset()),
        };
        (
            TemplatePlugin::create_trainer(spec, host).unwrap(),
            cancelled,
        )
    }

    fn named(report: &StepReport) -> Vec<(String, f64)> {
        report
            .metrics
            .iter()
            .map(|m| (m.name.to_string(), m.value))
            .collect()
    }

    /// Validation metrics come exactly from the calls that cross a multiple
    /// of `valid_every` (not cancelled ones), and training is the same with
    /// and without them.
    #[test]
    fn validation_lands_on_the_cadence_and_leaves_training_alone() {
        let (mut with, cancelled) = trainer(10);
        let (mut without, _) = trainer(0);
        // (steps asked for, whether the call validates): 10, 15, 20, 27, 30, 30, 40.
        let calls = [
            (10, true),
            (5, false),
            (5, true),
            (7, false),
            (3, true),
            (0, false),
            (10, true),
        ];
        for (i, (n, due)) in calls.into_iter().enumerate() {
            let a = named(&with.step(n).unwrap());
            let b = named(&without.step(n).unwrap());
            let valid: Vec<&(String, f64)> =
                a.iter().filter(|(k, _)| k.starts_with("valid_")).collect();
            assert_eq!(!valid.is_empty(), due, "call {i}: {a:?}");
            assert!(!b.iter().any(|(k, _)| k.starts_with("valid_")), "{b:?}");
            // Everything else is identical, to the bit.
            let rest: Vec<&(String, f64)> =
                a.iter().filter(|(k, _)| !k.starts_with("valid_")).collect();
            assert_eq!(rest, b.iter().collect::<Vec<_>>(), "call {i}");
            if due {
                let get = |name: &str| valid.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
                assert_eq!(get("valid_loss"), get("valid_mse"), "{valid:?}");
                assert!(get("valid_loss").is_some_and(|v| v.is_finite() && v > 0.0));
                assert!(valid.iter().all(|(_, v)| v.is_finite()));
            }
        }
        for (p, q) in with
            .model
            .parameters()
            .iter()
            .zip(without.model.parameters())
        {
            assert!(p.equal(q), "weights differ after training");
        }
        // The final evaluation reports the loss too, and equals what the
        // last call measured (the same model).
        let eval: Vec<(String, f64)> = with
            .evaluate()
            .unwrap()
            .metrics
            .iter()
            .map(|m| (m.name.to_string(), m.value))
            .collect();
        assert!(eval.iter().any(|(k, _)| k == "valid_loss"));
        assert!(eval.iter().any(|(k, _)| k == "test_loss"));
        // A cancelled call does not validate, even across a multiple.
        cancelled.store(true, Ordering::Relaxed);
        let report = with.step(10).unwrap();
        assert_eq!(report.steps_done, 0);
        assert!(!named(&report).iter().any(|(k, _)| k.starts_with("valid_")));
    }
}
