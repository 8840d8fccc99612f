//! Prints a PPO learning curve without the host, for tuning:
//!
//! ```text
//! cargo run --release -p tli-plugin-ppo --example curve -- '{"env":"cartpole"}' 150000 1 [report_every]
//! ```
//!
//! Arguments: config JSON, steps, seed, how often to print (env steps), and
//! the device (`cpu`, `cuda:0`). With `CURVE_CHECKPOINT=DIR` the run saves a
//! checkpoint halfway, continues in a fresh trainer loaded from it, and checks
//! that the fresh trainer reports the same step count.
//! Trading configs run on a built-in AR(1) series (φ = 0.3, 20 000 daily
//! rows, 8 lagged-return features; the same recipe as the host's synthetic dataset).

use abi_stable::{sabi_trait::TD_Opaque, std_types::RArc, std_types::RStr};
use std::time::Instant;
use tli_plugin_api::{
    ContractTerms, Dataset, HostServicesApi, HostServicesApi_TO, LogLevel, Plugin, SplitBounds,
    TaskSpec, Trainer,
};
use tli_plugin_kit::rng::Rng;
use tli_plugin_ppo::PpoPlugin;

struct QuietHost;

impl HostServicesApi for QuietHost {
    fn log(&self, level: LogLevel, message: RStr<'_>) {
        if level <= LogLevel::WARN {
            eprintln!("{message}");
        }
    }
    fn is_cancelled(&self) -> bool {
        false
    }
}

fn ar_dataset(rows: usize, lags: usize, phi: f64, seed: u64) -> Dataset {
    let mut rng = Rng::new(seed);
    let mut r = Vec::with_capacity(rows + lags + 1);
    let mut prev = 0.0;
    for _ in 0..rows + lags + 1 {
        prev = phi * prev + 0.01 * rng.normal();
        r.push(prev);
    }
    let train_end = rows * 70 / 100;
    let scale = {
        let t = &r[..train_end + lags];
        let m = t.iter().sum::<f64>() / t.len() as f64;
        (t.iter().map(|x| (x - m).powi(2)).sum::<f64>() / t.len() as f64).sqrt()
    };
    let (mut features, mut close, mut targets, mut ts) = (vec![], vec![], vec![], vec![]);
    let mut log_price = 100f64.ln();
    for row in 0..rows {
        let t = row + lags;
        log_price += r[t];
        close.push(log_price.exp());
        for lag in 0..lags {
            features.push((r[t - lag] / scale) as f32);
        }
        targets.push((r[t + 1] / scale) as f32);
        ts.push(row as i64 * 86_400_000_000_000);
    }
    let valid_end = rows * 85 / 100;
    Dataset {
        symbol: "AR1".into(),
        timestamps: ts.into(),
        features: features.into(),
        feature_names: (0..lags).map(|l| format!("lag{l}").into()).collect(),
        targets: targets.into(),
        target_names: vec!["fwd".into()].into(),
        splits: SplitBounds {
            train_end: train_end as u64,
            valid_start: (train_end + lags) as u64,
            valid_end: valid_end as u64,
            test_start: (valid_end + lags) as u64,
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

fn trainer_is_trading(args: &[String]) -> bool {
    !args.get(1).is_some_and(|c| c.contains("cartpole"))
}

/// Sharpe of the rule "hold the sign of the last return" (what the planted
/// AR(1) component rewards) on the validation and test splits, with costs.
fn oracle(d: &Dataset) {
    use tli_plugin_kit::{
        data::{split_rows, Split},
        metrics::{compare_with_baselines, CostTerms},
    };
    let lags = d.feature_names.len();
    let terms = CostTerms::from_contract(&d.contract, 2.0, 0.5).unwrap();
    for split in [Split::Validation, Split::Test] {
        let rows = split_rows(d, split);
        let pos: Vec<f64> = (rows.start..rows.end - 1)
            .map(|r| d.features[r * lags].signum() as f64)
            .collect();
        let c = compare_with_baselines(&d.close[rows], &pos, terms, 252.0, None).unwrap();
        println!(
            "oracle {split:?}: sharpe {:.3} (bh {:.3}), pnl {:.1}, costs {:.1}",
            c.strategy.sharpe,
            c.buy_and_hold.sharpe,
            c.strategy.total_pnl,
            c.strategy.costs.unwrap_or(0.0)
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let config = args.get(1).cloned().unwrap_or_else(|| "{}".into());
    let steps: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(150_000);
    let seed: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let every: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let device = args.get(5).cloned().unwrap_or_else(|| "cpu".into());
    let checkpoint = std::env::var("CURVE_CHECKPOINT").ok();
    tch::set_num_threads(1);
    let config = PpoPlugin::validate_config(&config).expect("config");
    let dataset = RArc::new(ar_dataset(20_000, 8, 0.3, 7));
    let new_trainer = || {
        let spec = TaskSpec {
            task_id: "curve".into(),
            config_json: config.as_str().into(),
            device: device.as_str().into(),
            seed,
            max_steps: steps,
            dataset: dataset.clone(),
        };
        let host = tli_plugin_api::Host::new(HostServicesApi_TO::from_ptr(
            RArc::new(QuietHost),
            TD_Opaque,
        ));
        PpoPlugin::create_trainer(spec, host).expect("trainer")
    };
    let mut trainer = new_trainer();
    let started = Instant::now();
    let mut done = 0;
    let mut resumed = false;
    while done < steps {
        if let Some(dir) = checkpoint.as_deref() {
            if !resumed && done >= steps / 2 {
                let dir = std::path::Path::new(dir);
                std::fs::create_dir_all(dir).expect("checkpoint dir");
                trainer.save_checkpoint(dir).expect("save");
                trainer = new_trainer();
                trainer.load_checkpoint(dir).expect("load");
                assert_eq!(trainer.total_steps(), done);
                println!("resumed from a checkpoint at {done} steps");
                resumed = true;
            }
        }
        let n = every.min(steps - done);
        let report = trainer.step(n).expect("step");
        done += report.steps_done;
        let get = |name: &str| {
            report
                .metrics
                .iter()
                .find(|m| m.name.as_str() == name)
                .map(|m| format!("{:.4}", m.value))
                .unwrap_or_else(|| "-".into())
        };
        println!(
            "{done:>8} {:>6.1}s ret20 {} ent {} kl {} clip {} vloss {} ev {} lr {} valid_sharpe {} bh {}",
            started.elapsed().as_secs_f64(),
            get("episodic_return_mean20"),
            get("entropy"),
            get("approx_kl"),
            get("clip_fraction"),
            get("value_loss"),
            get("explained_variance"),
            get("learning_rate"),
            get("valid_sharpe"),
            get("valid_bh_sharpe"),
        );
    }
    if trainer_is_trading(&args) {
        oracle(&dataset);
    }
    let eval = trainer.evaluate().expect("evaluate");
    for m in eval.metrics.iter() {
        if !m.name.contains("_bh_") || m.name.ends_with("sharpe") {
            println!("eval {} = {:.4}", m.name, m.value);
        }
    }
}
