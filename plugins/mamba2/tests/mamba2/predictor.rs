//! The predictor (plugin API 1.2): a small seeded model trained through the
//! plugin, its weights exported from a checkpoint, and its forecasts of the
//! whole dataset (given without targets) scored on the rows the trainer's
//! evaluation used: the test metrics come out the same. Streaming bar by bar
//! gives `predict`'s forecasts; damaged or foreign weights are refused.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use tli_plugin_api::abi_stable::sabi_trait::TD_Opaque;
use tli_plugin_api::abi_stable::std_types::{RArc, RStr};
use tli_plugin_api::task_inputs::column;
use tli_plugin_api::{
    capability, Column, Dataset, DatasetAnnex, DatasetShape, ErrorCode, FeatureRole, Host,
    HostServicesApi, HostServicesApi_TO, LogLevel, Plugin, Predictions, Predictor, PredictorSpec,
    SplitBounds, TaskInputs, TaskSpec, Trainer, GAP_BEFORE, ROLL_BEFORE,
};
use tli_plugin_kit::data::Split;
use tli_plugin_kit::forecast_report::{ForecastLayout, ForecastSet};
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::windows::{RowRuns, BREAK_ON_DEFAULT};
use tli_plugin_mamba2::config::ForecasterConfig;
use tli_plugin_mamba2::model::Forecaster;
use tli_plugin_mamba2::Mamba2Plugin;

const LOOKBACK: usize = 12;
const HORIZONS: usize = 2;
pub(crate) const CONFIG: &str = r#"{"d_model": 8, "layers": 2, "d_state": 4, "headdim": 4, "chunk_size": 8,
    "lookback": 12, "horizons": 2, "quantiles": [0.1, 0.5, 0.9], "batch_size": 16,
    "eval_batch_size": 16, "learning_rate": 0.01, "weight_decay": 0.0}"#;

struct QuietHost;

impl HostServicesApi for QuietHost {
    fn log(&self, _: LogLevel, _: RStr<'_>) {}
    fn is_cancelled(&self) -> bool {
        false
    }
}

pub(crate) fn host() -> Host {
    Host::new(HostServicesApi_TO::from_ptr(
        RArc::new(QuietHost),
        TD_Opaque,
    ))
}

/// A directory of its own under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "tli-mamba2-predictor-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const ROWS: usize = 320;

/// An AR(1) return series: features `[r_t, r_{t−1}, noise]`, targets the
/// next bar's return (NaN where unknown) and a 5-bar one; splits with an
/// embargo; a gap in the training, validation and test splits each (one a roll).
pub(crate) fn dataset() -> (Dataset, Vec<u8>) {
    let mut rng = Rng::new(17);
    let mut r = vec![0.0f64; ROWS + 6];
    for t in 1..r.len() {
        r[t] = 0.6 * r[t - 1] + 0.5 * rng.normal();
    }
    let mut features = Vec::new();
    let mut targets = Vec::new();
    for t in 0..ROWS {
        let previous = if t > 0 { r[t - 1] } else { 0.0 };
        features.extend([r[t] as f32, previous as f32, rng.normal() as f32]);
        let next = if t == ROWS - 1 || t == 310 {
            f32::NAN
        } else {
            r[t + 1] as f32
        };
        targets.extend([next, r[t + 1..t + 6].iter().sum::<f64>() as f32]);
    }
    let mut markers = vec![0u8; ROWS];
    markers[100] = GAP_BEFORE;
    markers[230] = ROLL_BEFORE;
    markers[290] = GAP_BEFORE;
    let dataset = Dataset {
        symbol: "AR.FUT".into(),
        timestamps: (0..ROWS as i64).map(|t| t * 86_400_000_000_000).collect(),
        features: features.into(),
        feature_names: vec!["r".into(), "r_prev".into(), "noise".into()].into(),
        targets: targets.into(),
        target_names: vec!["fwd_logret_1".into(), "fwd_logret_5".into()].into(),
        splits: SplitBounds {
            train_end: 200,
            valid_start: 205,
            valid_end: 255,
            test_start: 260,
        },
        close: (0..ROWS).map(|t| 100.0 + t as f64).collect(),
        periods_per_year: 252.0,
        ..Dataset::default()
    };
    (dataset, markers)
}

fn annex(dataset: &Dataset, markers: &[u8]) -> DatasetAnnex {
    DatasetAnnex {
        feature_roles: vec![FeatureRole::ObservedPast; dataset.feature_names.len()],
        feature_variables: Vec::new(),
        target_horizons: if dataset.target_names.is_empty() {
            Vec::new()
        } else {
            vec![1, 5]
        },
        target_scales: if dataset.target_names.is_empty() {
            Vec::new()
        } else {
            vec![0.01, 0.03]
        },
        bar_interval_ns: 86_400_000_000_000,
        row_markers: markers.to_vec(),
        asset_index: 0,
    }
}

pub(crate) fn inputs(dataset: Dataset, markers: &[u8]) -> TaskInputs {
    let annex = annex(&dataset, markers);
    TaskInputs::new(vec![(RArc::new(dataset), annex)], false, 1)
}

/// The training inputs without rows.
fn schema(dataset: &Dataset) -> TaskInputs {
    let empty = Dataset {
        symbol: dataset.symbol.clone(),
        feature_names: dataset.feature_names.clone(),
        target_names: dataset.target_names.clone(),
        periods_per_year: dataset.periods_per_year,
        ..Dataset::default()
    };
    inputs(empty, &[])
}

/// The dataset's rows as a prediction batch: no targets, no splits.
fn without_targets(dataset: &Dataset, rows: std::ops::Range<usize>, markers: &[u8]) -> TaskInputs {
    let f = dataset.feature_names.len();
    let batch = Dataset {
        symbol: dataset.symbol.clone(),
        timestamps: dataset.timestamps[rows.clone()].to_vec().into(),
        features: dataset.features[rows.start * f..rows.end * f]
            .to_vec()
            .into(),
        feature_names: dataset.feature_names.clone(),
        close: dataset.close[rows.clone()].to_vec().into(),
        periods_per_year: dataset.periods_per_year,
        ..Dataset::default()
    };
    inputs(batch, &markers[rows])
}

/// `batch` with rows before `from` as look-back only.
fn from_row(mut batch: TaskInputs, from: usize) -> TaskInputs {
    batch.columns.push(Column {
        dataset: 0,
        name: column::PREDICT_FROM.into(),
        integers: vec![from as i64].into(),
        ..Column::default()
    });
    batch
}

fn spec(config: &str, weights: &str, dataset: &Dataset) -> PredictorSpec {
    PredictorSpec {
        model_id: "m".into(),
        config_json: config.into(),
        device: "cpu".into(),
        weights_path: weights.into(),
        schema: schema(dataset),
    }
}

/// Trains the small model, evaluates it, and exports its weights into `dir`.
fn train_and_export(dir: &Path) -> (Vec<(String, f64)>, PathBuf) {
    let (dataset, markers) = dataset();
    let config = Mamba2Plugin::validate_config(CONFIG).unwrap();
    let task = TaskSpec {
        task_id: "t".into(),
        config_json: config.as_str().into(),
        device: "cpu".into(),
        seed: 5,
        max_steps: 40,
        dataset: RArc::new(dataset.clone()),
    };
    let mut trainer =
        Mamba2Plugin::create_trainer_with_inputs(task, inputs(dataset, &markers), host()).unwrap();
    let report = trainer.step(40).unwrap();
    assert_eq!(report.steps_done, 40);
    let metrics = trainer
        .evaluate()
        .unwrap()
        .metrics
        .iter()
        .map(|m| (m.name.to_string(), m.value))
        .collect();
    let checkpoint = dir.join("checkpoint");
    std::fs::create_dir_all(&checkpoint).unwrap();
    trainer.save_checkpoint(&checkpoint).unwrap();
    let weights = dir.join("weights.safetensors");
    Mamba2Plugin::export_weights(&config, &checkpoint, &weights).unwrap();
    (metrics, weights)
}

fn predictor(config: &str, weights: &Path, dataset: &Dataset) -> Box<dyn Predictor> {
    Mamba2Plugin::create_predictor(spec(config, weights.to_str().unwrap(), dataset), host())
        .unwrap()
}

/// Output row of `(dataset 0, row)`.
fn output_of(p: &Predictions, row: usize) -> Option<&[f64]> {
    (0..p.len())
        .find(|&i| p.dataset[i] == 0 && p.rows[i] == row as u64)
        .map(|i| p.row(i))
}

#[test]
fn predictions_of_the_test_windows_give_the_reported_test_metrics() {
    let dir = TempDir::new("consistency");
    let (reported, weights) = train_and_export(dir.path());
    let (dataset, markers) = dataset();
    // The weights alone: no optimizer moments.
    let exported = tli_plugin_kit::weights::load(&weights, tch::Device::Cpu).unwrap();
    assert!(exported.iter().all(|(n, _)| !n.starts_with("adamw")));
    assert_eq!(
        exported.len(),
        Forecaster::new(
            &ForecasterConfig::parse(CONFIG).unwrap(),
            3,
            &mut Rng::new(0),
            tch::Device::Cpu
        )
        .unwrap()
        .named_parameters("")
        .len()
    );
    assert!(Mamba2Plugin::capabilities().contains(&capability::PREDICT.to_string()));

    // The host may hand the weights over as an open descriptor.
    let file = std::fs::File::open(&weights).unwrap();
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let mut p = predictor(CONFIG, &by_fd, &dataset);
    let all = p
        .predict(&without_targets(&dataset, 0..ROWS, &markers))
        .unwrap();
    all.check_against(&without_targets(&dataset, 0..ROWS, &markers))
        .unwrap();
    let columns: Vec<&str> = all.columns.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        columns,
        [
            "fwd_logret_1:h1:p10",
            "fwd_logret_1:h1:p50",
            "fwd_logret_1:h1:p90",
            "fwd_logret_1:h2:p10",
            "fwd_logret_1:h2:p50",
            "fwd_logret_1:h2:p90"
        ]
    );
    // Every row ending a full window without a gap or roll in it, and no other.
    let predicted: Vec<usize> = all.rows.iter().map(|&r| r as usize).collect();
    let expected: Vec<usize> = (LOOKBACK - 1..100)
        .chain(100 + LOOKBACK - 1..230)
        .chain(230 + LOOKBACK - 1..290)
        .chain(290 + LOOKBACK - 1..ROWS)
        .collect();
    assert_eq!(predicted, expected);

    // The rows the evaluation scored: test windows whose next HORIZONS bars
    // are in the same run (the README's rule), targets from the dataset.
    let runs = RowRuns::new(ROWS, &markers, BREAK_ON_DEFAULT, &dataset.splits).unwrap();
    let ends = runs.window_ends(Split::Test, LOOKBACK, HORIZONS);
    let rule: Vec<usize> = (260 + LOOKBACK - 1..=289 - HORIZONS)
        .chain(290 + LOOKBACK - 1..=319 - HORIZONS)
        .collect();
    assert_eq!(ends, rule);
    let one_bar: Vec<f32> = (0..ROWS).map(|t| dataset.targets[2 * t]).collect();
    let quantiles = [0.1, 0.5, 0.9];
    let mut set = ForecastSet::default();
    for &e in &ends {
        set.asset.push(0);
        let forecast = output_of(&all, e).unwrap();
        set.forecast.extend(forecast.iter().map(|&v| v as f32));
        let mut sum = 0.0f64;
        let mut ok = true;
        for h in 1..=HORIZONS {
            // The cumulative return over bars e+1 … e+h: one-bar targets of rows e … e+h−1.
            let y = one_bar[e + h - 1];
            ok &= y.is_finite();
            sum += if ok { f64::from(y) } else { 0.0 };
            set.target.push(if ok { sum as f32 } else { 0.0 });
            set.valid.push(ok);
        }
    }
    assert!(set.valid.iter().any(|v| !v), "a NaN target is masked");
    let layout = ForecastLayout {
        horizons: HORIZONS,
        quantiles: &quantiles,
    };
    let recomputed = set.metrics(layout, "test", "");
    let reported_value = |name: &str| {
        reported
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} not reported"))
            .1
    };
    assert_eq!(reported_value("test_windows"), ends.len() as f64);
    assert!(recomputed.len() > 10);
    for m in &recomputed {
        let (want, got) = (reported_value(m.name.as_str()), m.value);
        // Skill is 1 − MSE/MSE₀: near 0 its error is the ratio's, on a scale of 1
        // (the forecasts differ in the last bits with the batch they ran in).
        let floor = if m.name.contains("skill") { 1.0 } else { 0.0 };
        let scale = want.abs().max(got.abs()).max(floor);
        assert!(
            (want - got).abs() <= 1e-6 * scale + 1e-12,
            "{}: reported {want}, recomputed {got}",
            m.name
        );
    }
    assert!(reported_value("test_qrisk_p50") > 0.0);

    // Memory: the weights, measured and estimated alike.
    let params = Forecaster::parameter_count_for(&ForecasterConfig::parse(CONFIG).unwrap(), 3) * 4;
    assert_eq!(p.memory().unwrap().parameters, params);
    let estimate = Mamba2Plugin::estimate_predictor_memory(
        CONFIG,
        DatasetShape {
            rows: ROWS as u64,
            features: 3,
            targets: 0,
        },
        "cpu",
    )
    .unwrap();
    assert_eq!(estimate.parameters, params);
    assert_eq!(estimate.gradients + estimate.optimizer_state, 0);
    assert!(estimate.activations > 0);
}

#[test]
fn streaming_bar_by_bar_gives_the_predicted_forecasts() {
    let dir = TempDir::new("stream");
    let (_, weights) = train_and_export(dir.path());
    let (dataset, markers) = dataset();
    let mut p = predictor(CONFIG, &weights, &dataset);
    let all = p
        .predict(&without_targets(&dataset, 0..ROWS, &markers))
        .unwrap();
    let compare = |streamed: &[(usize, Vec<f64>)]| {
        let rows: Vec<usize> = streamed.iter().map(|(r, _)| *r).collect();
        let want: Vec<usize> = all.rows.iter().map(|&r| r as usize).collect();
        assert_eq!(rows, want);
        let mut worst: f64 = 0.0;
        for (row, values) in streamed {
            let expected = output_of(&all, *row).unwrap();
            for (a, b) in values.iter().zip(expected) {
                worst = worst.max((a - b).abs() / b.abs().max(1.0));
            }
        }
        assert!(worst < 1e-5, "streamed vs predicted: {worst:e}");
    };
    let bar_by_bar: Vec<usize> = (0..=ROWS).collect();
    compare(&stream(p.as_mut(), &all, &bar_by_bar));
    assert!(p.memory().unwrap().activations > 0, "windows in flight");
    // Uneven slices, across the gap and the roll.
    compare(&stream(
        p.as_mut(),
        &all,
        &[0, 1, 8, 99, 101, 231, 250, ROWS],
    ));
    p.reset().unwrap();
    assert_eq!(p.memory().unwrap().activations, 0);

    // Rows before predict_from are look-back only, in a batch and in a stream.
    let later = p
        .predict(&from_row(without_targets(&dataset, 0..ROWS, &markers), 270))
        .unwrap();
    let mut expected: Vec<(usize, Vec<f64>)> = Vec::new();
    for i in 0..all.len() {
        if all.rows[i] >= 270 {
            expected.push((all.rows[i] as usize, all.row(i).to_vec()));
        }
    }
    let got: Vec<(usize, Vec<f64>)> = (0..later.len())
        .map(|i| (later.rows[i] as usize, later.row(i).to_vec()))
        .collect();
    let close = |a: &[(usize, Vec<f64>)], b: &[(usize, Vec<f64>)]| {
        assert_eq!(a.len(), b.len());
        for ((ra, va), (rb, vb)) in a.iter().zip(b) {
            assert_eq!(ra, rb);
            for (x, y) in va.iter().zip(vb) {
                assert!(
                    (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                    "row {ra}: {x} vs {y}"
                );
            }
        }
    };
    close(&got, &expected);
    let mut streamed = Vec::new();
    for r in 0..ROWS {
        let bar = without_targets(&dataset, r..r + 1, &markers);
        let bar = if r == 0 { from_row(bar, 270) } else { bar };
        let out = p.stream(&bar).unwrap();
        for i in 0..out.len() {
            streamed.push((out.rows[i] as usize, out.row(i).to_vec()));
        }
    }
    close(&streamed, &expected);
}

/// Streams the dataset's rows in the slices `cuts` after a reset: `(row, outputs)`.
fn stream(p: &mut dyn Predictor, all: &Predictions, cuts: &[usize]) -> Vec<(usize, Vec<f64>)> {
    let (dataset, markers) = dataset();
    p.reset().unwrap();
    let mut out = Vec::new();
    for pair in cuts.windows(2) {
        let got = p
            .stream(&without_targets(&dataset, pair[0]..pair[1], &markers))
            .unwrap();
        assert_eq!(got.columns, all.columns);
        for i in 0..got.len() {
            assert_eq!(got.dataset[i], 0);
            out.push((got.rows[i] as usize, got.row(i).to_vec()));
        }
    }
    out
}

#[test]
fn damaged_or_foreign_weights_and_other_features_are_refused() {
    let dir = TempDir::new("refused");
    let (_, weights) = train_and_export(dir.path());
    let (dataset, markers) = dataset();
    let refused = |config: &str, path: &Path| {
        let e =
            Mamba2Plugin::create_predictor(spec(config, path.to_str().unwrap(), &dataset), host())
                .err()
                .expect("refused");
        assert_eq!(e.code, ErrorCode::IO, "{e}");
        assert!(e.message.contains(path.to_str().unwrap()), "{e}");
        e
    };
    // Truncated.
    let bytes = std::fs::read(&weights).unwrap();
    let truncated = dir.path().join("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let e = refused(CONFIG, &truncated);
    assert!(e.message.contains("not a readable weights file"), "{e}");
    // Another config of the same plugin.
    let wider = CONFIG.replace(r#""d_model": 8"#, r#""d_model": 16"#);
    let e = refused(&wider, &weights);
    assert!(e.message.contains("does not hold the weights"), "{e}");
    let deeper = CONFIG.replace(r#""layers": 2"#, r#""layers": 3"#);
    let e = refused(&deeper, &weights);
    assert!(e.message.contains("lacks backbone.layers.2"), "{e}");
    // Another model's weights (the template's MLP).
    let foreign = dir.path().join("mlp.safetensors");
    let w = tch::Tensor::zeros([4, 3], (tch::Kind::Float, tch::Device::Cpu));
    tli_plugin_kit::weights::save(&foreign, &[("layer0.weight".to_string(), &w)]).unwrap();
    let e = refused(CONFIG, &foreign);
    assert!(e.message.contains("layer0.weight"), "{e}");
    // Rows with other features.
    let mut p = predictor(CONFIG, &weights, &dataset);
    let mut other = dataset.clone();
    other.feature_names = vec!["a".into(), "b".into(), "c".into()].into();
    let e = p
        .predict(&without_targets(&other, 0..ROWS, &markers))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::INVALID_DATA);
    assert!(e.message.contains("trained on [r, r_prev, noise]"), "{e}");
}
