//! The predictor against the trainer's own test-split evaluation: a tiny
//! seeded agent is trained, evaluated, checkpointed, exported and applied
//! to the dataset's rows without targets.

use crate::{DqnConfig, DqnPlugin, DqnTrainer};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use tch::Device;
use tli_plugin_api::{
    abi_stable::{sabi_trait::TD_Opaque, std_types::RArc},
    capability, Column, ContractTerms, Dataset, DatasetAnnex, DatasetShape, ErrorCode, Host,
    HostServicesApi, HostServicesApi_TO, LogLevel, Plugin, Predictions, PredictorSpec, SplitBounds,
    TaskInputs, TaskSpec, Trainer,
};
use tli_plugin_kit::{
    data::{split_rows, Split},
    metrics::{evaluate_strategy, sharpe_ratio, CostTerms},
    rng::Rng,
    weights,
};

const CONFIG: &str = r#"{
    "num_envs": 2, "hidden_sizes": [16], "learning_starts": 64, "batch_size": 16,
    "buffer_size": 2000, "train_frequency": 2, "target_update_interval": 50,
    "valid_metrics_interval": 0,
    "trading": {"window": 3, "max_contracts": 2, "episode_len": 40}
}"#;
const WINDOW: usize = 3;
const STEPS: u64 = 400;

struct QuietHost;

impl HostServicesApi for QuietHost {
    fn log(&self, _: LogLevel, _: tli_plugin_api::abi_stable::std_types::RStr<'_>) {}
    fn is_cancelled(&self) -> bool {
        false
    }
}

fn host() -> Host {
    Host::new(HostServicesApi_TO::from_ptr(
        RArc::new(QuietHost),
        TD_Opaque,
    ))
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "tli-dqn-{tag}-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
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

/// An AR(1) market: three lagged-return features, 500 daily rows.
pub(crate) fn market() -> Dataset {
    let (rows, lags) = (500usize, 3usize);
    let mut rng = Rng::new(7);
    let mut r = Vec::new();
    let mut prev = 0.0;
    for _ in 0..rows + lags {
        prev = 0.3 * prev + 0.01 * rng.normal();
        r.push(prev);
    }
    let (mut features, mut close) = (Vec::new(), Vec::new());
    let mut log_price = 100f64.ln();
    for row in 0..rows {
        let t = row + lags;
        log_price += r[t];
        close.push(log_price.exp());
        for lag in 0..lags {
            features.push((r[t - lag] / 0.01) as f32);
        }
    }
    Dataset {
        symbol: "AR1".into(),
        timestamps: (0..rows as i64).map(|i| i * 86_400_000_000_000).collect(),
        features: features.into(),
        feature_names: (0..lags).map(|l| format!("lag{l}").into()).collect(),
        targets: vec![0.0; rows].into(),
        target_names: vec!["fwd".into()].into(),
        splits: SplitBounds {
            train_end: 300,
            valid_start: 303,
            valid_end: 400,
            test_start: 403,
        },
        close: close.into(),
        contract: ContractTerms {
            root: "SYNTH".into(),
            tick_size: 0.01,
            point_value: 100.0,
            currency: "USD".into(),
        },
        periods_per_year: 252.0,
    }
}

fn train(data: &Dataset, config: &str) -> DqnTrainer {
    let spec = TaskSpec {
        task_id: "predictor".into(),
        config_json: config.into(),
        device: "cpu".into(),
        seed: 3,
        max_steps: STEPS,
        dataset: RArc::new(data.clone()),
    };
    let mut trainer = DqnPlugin::create_trainer(spec, host()).unwrap();
    trainer.step(STEPS).unwrap();
    trainer
}

/// The training task's inputs without rows.
fn schema(data: &Dataset) -> TaskInputs {
    let empty = Dataset {
        symbol: data.symbol.clone(),
        feature_names: data.feature_names.clone(),
        target_names: data.target_names.clone(),
        contract: data.contract.clone(),
        periods_per_year: data.periods_per_year,
        ..Dataset::default()
    };
    let annex = DatasetAnnex::plain(&empty);
    TaskInputs::new(vec![(RArc::new(empty), annex)], false, 1)
}

/// Rows `rows` of `data` as a prediction batch: features, close, contract,
/// no targets, default splits, and `predict_from` when given.
fn batch(data: &Dataset, rows: std::ops::Range<usize>, from: Option<usize>) -> TaskInputs {
    let w = data.feature_names.len();
    let d = Dataset {
        symbol: data.symbol.clone(),
        timestamps: data.timestamps[rows.clone()].to_vec().into(),
        features: data.features[rows.start * w..rows.end * w].to_vec().into(),
        feature_names: data.feature_names.clone(),
        close: data.close[rows].to_vec().into(),
        contract: data.contract.clone(),
        periods_per_year: data.periods_per_year,
        ..Dataset::default()
    };
    let annex = DatasetAnnex::plain(&d);
    let mut b = TaskInputs::new(vec![(RArc::new(d), annex)], false, 1);
    if let Some(from) = from {
        b.columns.push(Column {
            dataset: 0,
            name: tli_plugin_api::task_inputs::column::PREDICT_FROM.into(),
            integers: vec![from as i64].into(),
            ..Column::default()
        });
    }
    b
}

fn spec(config: &str, weights: &Path, data: &Dataset) -> PredictorSpec {
    PredictorSpec {
        model_id: "m".into(),
        config_json: config.into(),
        device: "cpu".into(),
        weights_path: weights.to_string_lossy().as_ref().into(),
        schema: schema(data),
    }
}

/// A trained agent's evaluation metrics, and its weights file in `dir`.
fn trained_and_exported(
    data: &Dataset,
    config: &str,
    dir: &TempDir,
) -> (Vec<(String, f64)>, PathBuf) {
    let mut trainer = train(data, config);
    let metrics = trainer
        .evaluate()
        .unwrap()
        .metrics
        .iter()
        .map(|m| (m.name.to_string(), m.value))
        .collect();
    let checkpoint = dir.path().join("checkpoint");
    std::fs::create_dir_all(&checkpoint).unwrap();
    trainer.save_checkpoint(&checkpoint).unwrap();
    let path = dir.path().join("weights.safetensors");
    DqnPlugin::export_weights(config, &checkpoint, &path).unwrap();
    (metrics, path)
}

fn metric(metrics: &[(String, f64)], name: &str) -> f64 {
    metrics
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no metric {name} in {metrics:?}"))
}

fn column(p: &Predictions, name: &str) -> Vec<f64> {
    let c = p.column(name).unwrap();
    (0..p.len()).map(|i| p.row(i)[c]).collect()
}

/// The key requirement: positions predicted from the exported weights give
/// exactly the test P&L and Sharpe that `evaluate` reported.
#[test]
fn predicted_positions_reproduce_the_test_evaluation_exactly() {
    let data = market();
    let config = DqnPlugin::validate_config(CONFIG).unwrap();
    let dir = TempDir::new("consistency");
    let (metrics, path) = trained_and_exported(&data, &config, &dir);
    // Only the online network was exported.
    let names: Vec<String> = weights::load(&path, Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(
        !names.is_empty() && names.iter().all(|n| n.starts_with("online.")),
        "{names:?}"
    );

    // The host may hand the file over as a descriptor.
    let file = std::fs::File::open(&path).unwrap();
    let fd_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let mut predictor =
        DqnPlugin::create_predictor(spec(&config, &fd_path, &data), host()).unwrap();

    let test = split_rows(&data, Split::Test);
    let first = test.start + WINDOW - 1;
    let rows = batch(&data, 0..data.rows(), Some(first));
    let out = predictor.predict(&rows).unwrap();
    out.check_against(&rows).unwrap();
    let expected_rows: Vec<u64> = (first as u64..data.rows() as u64).collect();
    assert_eq!(out.rows.as_slice(), expected_rows.as_slice());
    assert_eq!(
        out.columns.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        ["action", "position", "value:0", "value:1", "value:2", "value:3", "value:4", "pnl"]
    );

    // The evaluation's periods: positions of rows first ..= test.end − 2.
    let position = column(&out, "position");
    let positions = &position[..position.len() - 1];
    let trading = DqnConfig::parse(&config).unwrap().trading;
    let terms = CostTerms::from_contract(
        &data.contract,
        trading.commission_per_contract,
        trading.slippage_ticks,
    )
    .unwrap();
    let report = evaluate_strategy(
        &data.close[first..test.end],
        positions,
        terms,
        data.periods_per_year,
        None,
    )
    .unwrap();
    assert_eq!(report.total_pnl, metric(&metrics, "test_total_pnl"));
    assert_eq!(report.sharpe, metric(&metrics, "test_sharpe"));
    assert_eq!(report.periods as f64, metric(&metrics, "test_periods"));
    assert_eq!(report.turnover, metric(&metrics, "test_turnover"));
    let distinct: std::collections::BTreeSet<i64> = positions.iter().map(|p| *p as i64).collect();
    assert!(
        distinct.len() > 1,
        "the agent never changed position: {distinct:?}"
    );

    // The README's rule: the pnl column of the rows after the first is the
    // evaluation's per-period P&L.
    let pnl = column(&out, "pnl");
    assert_eq!(pnl[0], 0.0);
    assert_eq!(pnl.iter().sum::<f64>(), metric(&metrics, "test_total_pnl"));
    assert_eq!(
        sharpe_ratio(&pnl[1..], data.periods_per_year),
        metric(&metrics, "test_sharpe")
    );

    // Actions are the argmax of the values and give the positions.
    let values: Vec<Vec<f64>> = (0..5)
        .map(|i| column(&out, &format!("value:{i}")))
        .collect();
    for (i, action) in column(&out, "action").into_iter().enumerate() {
        let q: Vec<f32> = values.iter().map(|v| v[i] as f32).collect();
        assert_eq!(action as usize, tli_plugin_kit::rl::eval::argmax(&q));
        assert_eq!(position[i], action - 2.0);
    }
}

#[test]
fn streaming_bar_by_bar_gives_the_predictions() {
    let data = market();
    let config = DqnPlugin::validate_config(CONFIG).unwrap();
    let dir = TempDir::new("stream");
    let (_, path) = trained_and_exported(&data, &config, &dir);
    let mut predictor = DqnPlugin::create_predictor(spec(&config, &path, &data), host()).unwrap();
    let from = 350;
    let whole = predictor
        .predict(&batch(&data, 0..data.rows(), Some(from)))
        .unwrap();
    for pieces in [vec![1usize; data.rows()], vec![7, 1, 340, 3, 1, 60, 88]] {
        predictor.reset().unwrap();
        let mut streamed = Predictions::with_columns(&whole.columns);
        let mut at = 0;
        for len in pieces {
            let end = (at + len).min(data.rows());
            let out = predictor
                .stream(&batch(&data, at..end, Some(from)))
                .unwrap();
            for i in 0..out.len() {
                streamed
                    .push(out.dataset[i], out.rows[i], out.row(i))
                    .unwrap();
            }
            at = end;
        }
        assert_eq!(streamed.rows, whole.rows);
        for name in ["action", "position", "pnl"] {
            assert_eq!(column(&streamed, name), column(&whole, name), "{name}");
        }
        // Q-values: the same network on the same observations, in batches
        // of another shape (the last bits may differ).
        for i in 0..5 {
            let name = format!("value:{i}");
            for (a, b) in column(&streamed, &name).iter().zip(column(&whole, &name)) {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "{name}: {a} vs {b}"
                );
            }
        }
        assert!(predictor.memory().unwrap().activations > 0);
    }
    predictor.reset().unwrap();
    assert_eq!(predictor.memory().unwrap().activations, 0);
}

#[test]
fn memory_is_measured_and_estimated_alike() {
    let data = market();
    let config = DqnPlugin::validate_config(CONFIG).unwrap();
    let dir = TempDir::new("memory");
    let (_, path) = trained_and_exported(&data, &config, &dir);
    let predictor = DqnPlugin::create_predictor(spec(&config, &path, &data), host()).unwrap();
    let shape = DatasetShape {
        rows: data.rows() as u64,
        features: 3,
        targets: 0,
    };
    let estimate = DqnPlugin::estimate_predictor_memory(&config, shape, "cpu").unwrap();
    let measured = predictor.memory().unwrap();
    // obs 3·3+1 = 10 → 16 → 5 actions.
    assert_eq!(measured.parameters, (10 * 16 + 16 + 16 * 5 + 5) * 4);
    assert_eq!(estimate.parameters, measured.parameters);
    assert_eq!((estimate.gradients, estimate.optimizer_state), (0, 0));
    assert!(estimate.activations > 0);
    assert!(DqnPlugin::capabilities().contains(&capability::PREDICT.to_string()));
}

#[test]
fn wrong_or_broken_weights_files_are_refused() {
    let data = market();
    let config = DqnPlugin::validate_config(CONFIG).unwrap();
    let dir = TempDir::new("refused");
    let (_, path) = trained_and_exported(&data, &config, &dir);
    let create = |path: &Path, config: &str| {
        DqnPlugin::create_predictor(spec(config, path, &data), host())
            .err()
            .expect("refused")
    };

    // Another architecture: the same names, other shapes.
    let wider = DqnPlugin::validate_config(&CONFIG.replace("[16]", "[8]")).unwrap();
    let e = create(&path, &wider);
    assert!(
        e.message.contains("does not hold this DQN model's weights") && e.message.contains("shape"),
        "{e}"
    );
    // Another model's tensor names (a PPO policy).
    let actor = tch::Tensor::zeros([16, 10], (tch::Kind::Float, Device::Cpu));
    let ppo = dir.path().join("ppo.safetensors");
    weights::save(&ppo, &[("actor.layer0.weight".into(), &actor)]).unwrap();
    let e = create(&ppo, &config);
    assert!(e.message.contains("actor.layer0.weight"), "{e}");
    // A truncated file.
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.path().join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = create(&cut, &config);
    assert!(e.message.contains("not a readable weights file"), "{e}");
    let e = create(&dir.path().join("missing.safetensors"), &config);
    assert!(e.message.contains("not a readable weights file"), "{e}");

    // CartPole models do not predict.
    let cartpole = DqnPlugin::validate_config(r#"{"env": "cartpole"}"#).unwrap();
    let e = create(&path, &cartpole);
    assert_eq!(e.code, ErrorCode::UNSUPPORTED, "{e}");
    assert!(e.message.contains("CartPole"), "{e}");

    // Rows with other features are refused, not mis-read.
    let mut predictor = DqnPlugin::create_predictor(spec(&config, &path, &data), host()).unwrap();
    let mut other = data.clone();
    other.feature_names = vec!["a".into(), "b".into(), "c".into()].into();
    let e = predictor
        .predict(&batch(&other, 0..data.rows(), None))
        .unwrap_err();
    assert!(e.message.contains("trained on [lag0, lag1, lag2]"), "{e}");
}
