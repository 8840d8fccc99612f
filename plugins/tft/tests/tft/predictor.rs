//! The predictor (plugin API 1.2), FP32 and INT8: a small seeded TFT
//! trained through the plugin, its weights exported from a checkpoint, and
//! its forecasts of the whole dataset (given without targets) scored on the
//! rows the trainer's evaluation used: the test metrics come out the same.
//! INT8 weights stay int8; streaming gives `predict`'s forecasts; damaged
//! or foreign weights are refused.

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
use tli_plugin_kit::rng::Rng;
use tli_plugin_kit::windows::{RowRuns, BREAK_ON_DEFAULT};
use tli_plugin_tft::config::TftConfig;
use tli_plugin_tft::TftPlugin;

const LOOKBACK: usize = 10;
const HORIZONS: usize = 3;
const ROWS: usize = 320;
pub(crate) const FP32: &str = r#"{"hidden_size": 16, "attention_heads": 2, "lookback": 10, "horizons": 3,
    "quantiles": [0.1, 0.5, 0.9], "batch_size": 16, "eval_batch_size": 32,
    "learning_rate": 0.01, "dropout": 0.1}"#;

pub(crate) fn int8() -> String {
    FP32.replace(
        r#""hidden_size": 16,"#,
        r#""hidden_size": 16, "precision": "int8", "int8_min_elements": 256,"#,
    )
}

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
        let path =
            std::env::temp_dir().join(format!("tli-tft-predictor-{}-{name}", std::process::id()));
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

/// Returns driven by their past and by a calendar input: features
/// `[r_t, r_{t−1}, dow_t, level]`, targets the next bar's return (NaN where
/// unknown) and a 5-bar one; splits with an embargo; a gap or roll in each split.
pub(crate) fn dataset() -> (Dataset, Vec<u8>) {
    let mut rng = Rng::new(23);
    let dow = |t: usize| (2.0 * std::f64::consts::PI * t as f64 / 5.0).sin();
    let mut r = vec![0.0f64; ROWS + 6];
    for t in 1..r.len() {
        r[t] = 0.5 * r[t - 1] + 0.4 * dow(t) + 0.5 * rng.normal();
    }
    let mut features = Vec::new();
    let mut targets = Vec::new();
    for t in 0..ROWS {
        let previous = if t > 0 { r[t - 1] } else { 0.0 };
        features.extend([r[t] as f32, previous as f32, dow(t) as f32, 0.5]);
        let next = if t == ROWS - 1 || t == 305 {
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
        feature_names: vec!["r".into(), "r_prev".into(), "dow".into(), "level".into()].into(),
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

/// Roles with a known-future input, or with every time-varying input observed.
pub(crate) fn roles(known_future: bool) -> Vec<FeatureRole> {
    let dow = match known_future {
        true => FeatureRole::KnownFuture,
        false => FeatureRole::ObservedPast,
    };
    vec![
        FeatureRole::ObservedPast,
        FeatureRole::ObservedPast,
        dow,
        FeatureRole::Static,
    ]
}

pub(crate) fn inputs(dataset: Dataset, markers: &[u8], roles: &[FeatureRole]) -> TaskInputs {
    let with_targets = !dataset.target_names.is_empty();
    let annex = DatasetAnnex {
        feature_roles: roles.to_vec(),
        feature_variables: Vec::new(),
        target_horizons: if with_targets { vec![1, 5] } else { vec![] },
        target_scales: if with_targets {
            vec![0.01, 0.03]
        } else {
            vec![]
        },
        bar_interval_ns: 86_400_000_000_000,
        row_markers: markers.to_vec(),
        asset_index: 0,
    };
    TaskInputs::new(vec![(RArc::new(dataset), annex)], false, 1)
}

/// The training inputs without rows.
fn schema(dataset: &Dataset, roles: &[FeatureRole]) -> TaskInputs {
    let empty = Dataset {
        symbol: dataset.symbol.clone(),
        feature_names: dataset.feature_names.clone(),
        target_names: dataset.target_names.clone(),
        periods_per_year: dataset.periods_per_year,
        ..Dataset::default()
    };
    inputs(empty, &[], roles)
}

/// Rows `rows` of the dataset as a prediction batch: no targets, no splits.
fn without_targets(
    dataset: &Dataset,
    rows: std::ops::Range<usize>,
    markers: &[u8],
    roles: &[FeatureRole],
) -> TaskInputs {
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
    inputs(batch, &markers[rows], roles)
}

/// `batch` with rows before `from` as context only.
fn from_row(mut batch: TaskInputs, from: usize) -> TaskInputs {
    batch.columns.push(Column {
        dataset: 0,
        name: column::PREDICT_FROM.into(),
        integers: vec![from as i64].into(),
        ..Column::default()
    });
    batch
}

fn spec(config: &str, weights: &Path, roles: &[FeatureRole]) -> PredictorSpec {
    PredictorSpec {
        model_id: "m".into(),
        config_json: config.into(),
        device: "cpu".into(),
        weights_path: weights.to_str().unwrap().into(),
        schema: schema(&dataset().0, roles),
    }
}

fn predictor(config: &str, weights: &Path, roles: &[FeatureRole]) -> Box<dyn Predictor> {
    TftPlugin::create_predictor(spec(config, weights, roles), host()).unwrap()
}

/// Trains the small model, evaluates it, and exports its weights into `dir`.
fn train_and_export(
    dir: &Path,
    config: &str,
    roles: &[FeatureRole],
) -> (Vec<(String, f64)>, PathBuf) {
    let (dataset, markers) = dataset();
    let config = TftPlugin::validate_config(config).unwrap();
    let task = TaskSpec {
        task_id: "t".into(),
        config_json: config.as_str().into(),
        device: "cpu".into(),
        seed: 5,
        max_steps: 30,
        dataset: RArc::new(dataset.clone()),
    };
    let mut trainer =
        TftPlugin::create_trainer_with_inputs(task, inputs(dataset, &markers, roles), host())
            .unwrap();
    assert_eq!(trainer.step(30).unwrap().steps_done, 30);
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
    TftPlugin::export_weights(&config, &checkpoint, &weights).unwrap();
    (metrics, weights)
}

/// Output row of `(dataset 0, row)`.
fn output_of(p: &Predictions, row: usize) -> Option<&[f64]> {
    (0..p.len())
        .find(|&i| p.dataset[i] == 0 && p.rows[i] == row as u64)
        .map(|i| p.row(i))
}

/// Trains `config`, predicts the whole dataset from the exported weights
/// (through `/proc/self/fd/N`, as the host may pass them) and checks the
/// reported test metrics against the forecasts of the rows the evaluation
/// used. Returns the predictor's measured memory.
fn predictions_give_the_reported_test_metrics(name: &str, config: &str) -> u64 {
    let roles = roles(true);
    let dir = TempDir::new(name);
    let (reported, weights) = train_and_export(dir.path(), config, &roles);
    let (dataset, markers) = dataset();
    let exported = tli_plugin_kit::weights::load(&weights, tch::Device::Cpu).unwrap();
    assert!(exported
        .iter()
        .all(|(n, _)| !n.starts_with("adamw") && !n.starts_with("adam8")));
    let file = std::fs::File::open(&weights).unwrap();
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let mut p = predictor(config, &by_fd, &roles);
    let batch = without_targets(&dataset, 0..ROWS, &markers, &roles);
    let all = p.predict(&batch).unwrap();
    all.check_against(&batch).unwrap();
    let columns: Vec<&str> = all.columns.iter().map(|c| c.as_str()).collect();
    let mut want = Vec::new();
    for h in 1..=HORIZONS {
        for q in ["p10", "p50", "p90"] {
            want.push(format!("fwd_logret_1:h{h}:{q}"));
        }
    }
    assert_eq!(columns, want);
    // With a known-future input a window needs its HORIZONS decoder rows too.
    let predicted: Vec<usize> = all.rows.iter().map(|&r| r as usize).collect();
    let runs = [(0, 100), (100, 230), (230, 290), (290, ROWS)];
    let expected: Vec<usize> = runs
        .iter()
        .flat_map(|&(a, b)| a + LOOKBACK - 1..b - HORIZONS)
        .collect();
    assert_eq!(predicted, expected);

    // The rows the evaluation scored (the README's rule) and their targets:
    // the one-bar return of each of the next HORIZONS bars.
    let runs = RowRuns::new(ROWS, &markers, BREAK_ON_DEFAULT, &dataset.splits).unwrap();
    let ends = runs.window_ends(Split::Test, LOOKBACK, HORIZONS);
    let rule: Vec<usize> = (260 + LOOKBACK - 1..=289 - HORIZONS)
        .chain(290 + LOOKBACK - 1..=319 - HORIZONS)
        .collect();
    assert_eq!(ends, rule);
    let quantiles = TftConfig::parse(config).unwrap().quantiles;
    let mut set = ForecastSet::default();
    for &e in &ends {
        set.asset.push(0);
        let forecast = output_of(&all, e).unwrap();
        set.forecast.extend(forecast.iter().map(|&v| v as f32));
        for h in 1..=HORIZONS {
            let y = dataset.targets[2 * (e + h - 1)];
            set.target.push(if y.is_finite() { y } else { 0.0 });
            set.valid.push(y.is_finite());
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
            "{name} {}: reported {want}, recomputed {got}",
            m.name
        );
    }
    assert!(reported_value("test_qrisk_p50") > 0.0);
    // The measured weights are what the estimate counts (for this shape).
    let measured = p.memory().unwrap();
    assert_eq!(measured.gradients + measured.optimizer_state, 0);
    let c = TftConfig::parse(config).unwrap();
    let shape = tli_plugin_tft::TftShape {
        hidden: c.hidden_size,
        heads: c.attention_heads,
        lstm_layers: c.lstm_layers,
        dropout: c.dropout,
        observed: 2,
        known: 1,
        static_reals: 1,
        assets: 1,
        horizons: c.horizons,
        outputs: c.quantiles.len(),
        groups: Default::default(),
    };
    assert_eq!(
        measured.parameters,
        tli_plugin_tft::memory::breakdown(&c, &shape).parameters
    );
    let estimate = TftPlugin::estimate_predictor_memory(
        config,
        DatasetShape {
            rows: ROWS as u64,
            features: 4,
            targets: 0,
        },
        "cpu",
    )
    .unwrap();
    assert!(estimate.parameters > 0 && estimate.activations > 0);
    assert_eq!(estimate.gradients + estimate.optimizer_state, 0);
    measured.parameters
}

#[test]
fn fp32_and_int8_predictions_give_the_reported_test_metrics() {
    assert!(TftPlugin::capabilities().contains(&capability::PREDICT.to_string()));
    let fp32 = predictions_give_the_reported_test_metrics("fp32", FP32);
    let factored = int8().replace(
        r#""precision": "int8","#,
        r#""precision": "int8", "optimizer_state": "factored","#,
    );
    let int8 = predictions_give_the_reported_test_metrics("int8", &int8());
    // A model trained with factored state predicts from its int8 weights alone.
    assert_eq!(
        predictions_give_the_reported_test_metrics("int8-factored", &factored),
        int8
    );
    eprintln!("predictor weights: fp32 {fp32} bytes, int8 {int8} bytes");
    assert!(
        int8 * 2 < fp32,
        "int8 predictor holds {int8} bytes of weights, fp32 {fp32}"
    );
}

#[test]
fn int8_weights_are_exported_and_held_as_int8_codes_and_scales() {
    let roles = roles(true);
    let dir = TempDir::new("int8-codes");
    let config = int8();
    let (_, weights) = train_and_export(dir.path(), &config, &roles);
    let exported = tli_plugin_kit::weights::load(&weights, tch::Device::Cpu).unwrap();
    let codes: Vec<&str> = exported
        .iter()
        .filter(|(_, t)| t.kind() == tch::Kind::Int8)
        .map(|(n, _)| n.as_str())
        .collect();
    assert!(codes.len() > 10, "{codes:?}");
    for name in &codes {
        let base = name.strip_suffix(".int8").expect("codes are <name>.int8");
        assert!(exported.iter().any(|(n, _)| *n == format!("{base}.scale")));
        assert!(
            !exported.iter().any(|(n, _)| n == base),
            "no f32 copy of {base}"
        );
    }
    // The FP32 config refuses them, saying why: the precisions differ.
    let e = TftPlugin::create_predictor(spec(FP32, &weights, &roles), host())
        .err()
        .expect("refused");
    assert_eq!(e.code, ErrorCode::IO);
    assert!(
        e.message
            .contains("its weights are INT8 (<name>.int8 codes with <name>.scale) but the config's precision is FP32"),
        "{e}"
    );
}

#[test]
fn streaming_gives_the_predicted_forecasts() {
    for known_future in [true, false] {
        let roles = roles(known_future);
        let dir = TempDir::new(&format!("stream-{known_future}"));
        let (_, weights) = train_and_export(dir.path(), FP32, &roles);
        let (dataset, markers) = dataset();
        let mut p = predictor(FP32, &weights, &roles);
        let all = p
            .predict(&without_targets(&dataset, 0..ROWS, &markers, &roles))
            .unwrap();
        // Without known-future inputs the newest row is forecast too.
        assert_eq!(
            all.rows.last().copied(),
            Some((ROWS - if known_future { HORIZONS + 1 } else { 1 }) as u64)
        );
        for cuts in [
            (0..=ROWS).collect::<Vec<_>>(),
            vec![0, 1, 9, 99, 101, 231, 250, ROWS],
        ] {
            p.reset().unwrap();
            let mut streamed = Vec::new();
            for pair in cuts.windows(2) {
                let got = p
                    .stream(&without_targets(
                        &dataset,
                        pair[0]..pair[1],
                        &markers,
                        &roles,
                    ))
                    .unwrap();
                assert_eq!(got.columns, all.columns);
                for i in 0..got.len() {
                    streamed.push((got.rows[i] as usize, got.row(i).to_vec()));
                }
            }
            let rows: Vec<u64> = streamed.iter().map(|(r, _)| *r as u64).collect();
            assert_eq!(rows, all.rows.to_vec());
            let mut worst: f64 = 0.0;
            for (row, values) in &streamed {
                for (a, b) in values.iter().zip(output_of(&all, *row).unwrap()) {
                    worst = worst.max((a - b).abs() / b.abs().max(1.0));
                }
            }
            assert!(worst < 1e-5, "streamed vs predicted: {worst:e}");
            assert!(p.memory().unwrap().activations > 0);
        }
        p.reset().unwrap();
        assert_eq!(p.memory().unwrap().activations, 0);

        // Rows before predict_from are context only, in a batch and in a stream.
        let expected: Vec<(u64, Vec<f64>)> = (0..all.len())
            .filter(|&i| all.rows[i] >= 270)
            .map(|i| (all.rows[i], all.row(i).to_vec()))
            .collect();
        let later = p
            .predict(&from_row(
                without_targets(&dataset, 0..ROWS, &markers, &roles),
                270,
            ))
            .unwrap();
        let mut streamed = Vec::new();
        for r in 0..ROWS {
            let bar = without_targets(&dataset, r..r + 1, &markers, &roles);
            let bar = if r == 0 { from_row(bar, 270) } else { bar };
            let out = p.stream(&bar).unwrap();
            for i in 0..out.len() {
                streamed.push((out.rows[i], out.row(i).to_vec()));
            }
        }
        let batch: Vec<(u64, Vec<f64>)> = (0..later.len())
            .map(|i| (later.rows[i], later.row(i).to_vec()))
            .collect();
        for got in [batch, streamed] {
            assert_eq!(got.len(), expected.len());
            for ((ra, va), (rb, vb)) in got.iter().zip(&expected) {
                assert_eq!(ra, rb);
                for (x, y) in va.iter().zip(vb) {
                    assert!(
                        (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                        "row {ra}: {x} vs {y}"
                    );
                }
            }
        }
    }
}

#[test]
fn damaged_or_foreign_weights_and_other_inputs_are_refused() {
    let roles = roles(true);
    let dir = TempDir::new("refused");
    let (_, weights) = train_and_export(dir.path(), FP32, &roles);
    let (dataset, markers) = dataset();
    let refused = |config: &str, path: &Path| {
        let e = TftPlugin::create_predictor(spec(config, path, &roles), host())
            .err()
            .expect("refused");
        assert_eq!(e.code, ErrorCode::IO, "{e}");
        assert!(e.message.contains(path.to_str().unwrap()), "{e}");
        e
    };
    let bytes = std::fs::read(&weights).unwrap();
    let truncated = dir.path().join("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let e = refused(FP32, &truncated);
    assert!(e.message.contains("not a readable weights file"), "{e}");
    // Another size, another precision, another model.
    let wider = FP32.replace(r#""hidden_size": 16"#, r#""hidden_size": 32"#);
    let e = refused(&wider, &weights);
    assert!(e.message.contains("does not hold the weights"), "{e}");
    let e = refused(&int8(), &weights);
    assert!(
        e.message
            .contains("its weights are FP32 but the config's precision is INT8"),
        "{e}"
    );
    let foreign = dir.path().join("mamba.safetensors");
    let w = tch::Tensor::zeros([8, 4], (tch::Kind::Float, tch::Device::Cpu));
    tli_plugin_kit::weights::save(&foreign, &[("input.weight".to_string(), &w)]).unwrap();
    let e = refused(FP32, &foreign);
    assert!(e.message.contains("input.weight"), "{e}");
    // Rows whose features have other roles than in training.
    let mut p = predictor(FP32, &weights, &roles);
    let e = p
        .predict(&without_targets(
            &dataset,
            0..ROWS,
            &markers,
            &self::roles(false),
        ))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::INVALID_DATA);
    assert!(e.message.contains("roles"), "{e}");
}
