//! The TFT's accuracy in FP32 and INT8 against baselines, over seeds:
//! `cargo bench -p tli-e2e-tests --bench tft_accuracy` (after `make build`;
//! it loads the real `libtli_plugin_tft.so` and `libtli_plugin_template.so`).
//!
//! Two pooled datasets: `tli_data::synthetic_seasonal` (3 assets × 3000
//! bars, a weekday × session calendar effect known in advance and a flow
//! effect observed one bar before) and the bundled daily ES, NQ and CL
//! proxies (`data/samples`). For each it prints the validation P50 q-risk
//! (Σ|y − ŷ|/Σ|y| over horizons 1..H) of the zero forecast (1 by
//! definition), the seasonal-naive forecast (the same bar one week
//! earlier), the planted best forecast (synthetic only), the template MLP
//! (horizon 1: its only output) and the TFT in FP32 and INT8 with 8-bit,
//! 4-bit and factored optimizer state (mean ± sd over seeds), with the
//! TFT's P10–P90 coverage.
//!
//! `TFT_BENCH_VARIANTS` (space-separated, default `fp32 int8 int8-4bit
//! int8-factored`; fp32 always runs),
//! `TFT_BENCH_SEEDS` (default 3), `TFT_BENCH_STEPS` (1500; docs/benchmarks.md also has 600),
//! `TFT_BENCH_CONFIG` (the TFT config JSON) and `TFT_BENCH_CASES`
//! (`synthetic`, `real` or `both`, the default) change the run.

use abi_stable::std_types::RArc;
use std::collections::BTreeMap;
use tli_data::contracts::ContractBook;
use tli_data::features::{build_annotated_dataset, AnnotatedDataset, FeatureConfig};
use tli_data::synthetic_seasonal::{planted_seasonal, SeasonalSpec};
use tli_e2e_tests::trainers::*;
use tli_e2e_tests::*;
use tli_host::registry::LoadedPlugin;
use tli_host::services::TaskServices;
use tli_plugin_api::TaskInputs;

const DEFAULT_CONFIG: &str = r#"{"hidden_size": 32, "attention_heads": 4, "lookback": 40,
    "horizons": 3, "batch_size": 32, "dropout": 0.0, "learning_rate": 0.005,
    "int8_min_elements": 256}"#;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Case {
    name: String,
    assets: Vec<AnnotatedDataset>,
    /// Bars per week (the seasonal-naive lag).
    week: usize,
    /// The planted best forecast's P50 q-risk over horizons 1..H and at
    /// horizon 1, where known.
    best: Option<(f64, f64)>,
}

fn train(
    plugin: &LoadedPlugin,
    config: &str,
    seed: u64,
    steps: u64,
    assets: &[AnnotatedDataset],
) -> BTreeMap<String, f64> {
    let config = plugin.validate_config(config).expect("a valid config");
    let parts = assets
        .iter()
        .map(|a| (RArc::new(a.dataset.clone()), a.annex.clone()))
        .collect();
    let first = RArc::new(assets[0].dataset.clone());
    let mut t = plugin
        .create_trainer_with_inputs(
            task_spec(&config, seed, steps, &first),
            TaskInputs::new(parts, true, assets.len()),
            TaskServices::new(plugin.name(), "bench"),
        )
        .expect("a trainer");
    tli_e2e_tests::trainers::train(&mut t, steps, 100);
    as_map(&t.evaluate().expect("an evaluation").metrics)
}

/// P50 q-risk of `forecast(asset, row, h)` for the targets of rows
/// `[valid_start + lookback, valid_end − horizons)`, horizons 1..=`horizons`.
fn qrisk(
    assets: &[AnnotatedDataset],
    lookback: usize,
    horizons: usize,
    forecast: impl Fn(usize, usize, usize) -> Option<f64>,
) -> f64 {
    let (mut err, mut scale) = (0.0, 0.0);
    for (a, data) in assets.iter().enumerate() {
        let d = &data.dataset;
        let (start, end) = (d.splits.valid_start as usize, d.splits.valid_end as usize);
        for t in start + lookback..end.saturating_sub(horizons) {
            for h in 1..=horizons {
                let y = d.targets[t + h - 1] as f64;
                if let Some(p) = forecast(a, t, h) {
                    err += (y - p).abs();
                    scale += y.abs();
                }
            }
        }
    }
    err / scale
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

fn real_case() -> Case {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/samples");
    let book = ContractBook::load(None).expect("the built-in contracts");
    let assets = [
        "es_proxy_sp500_1d.dbn.zst",
        "nq_proxy_nasdaq_1d.dbn.zst",
        "cl_proxy_wti_1d.dbn.zst",
    ]
    .iter()
    .map(|f| {
        let table = tli_data::read_bars(&dir.join(f)).expect("a sample file");
        let contract = book.lookup(&table.symbol).expect("a known contract");
        build_annotated_dataset(&table, contract, &FeatureConfig::default())
            .expect("the feature pipeline")
    })
    .collect();
    Case {
        name: "daily ES, NQ, CL proxies (pooled)".into(),
        assets,
        week: 5,
        best: None,
    }
}

fn main() {
    let seeds: u64 = env_or("TFT_BENCH_SEEDS", 3);
    let steps: u64 = env_or("TFT_BENCH_STEPS", 1500);
    let base: String = env_or("TFT_BENCH_CONFIG", DEFAULT_CONFIG.to_string());
    let (_tft_dir, tft_registry) = registry_of(TFT, "tft");
    let (_tpl_dir, tpl_registry) = registry_of(TEMPLATE, "template");
    let (tft, template) = (
        tft_registry.get("tft").unwrap(),
        tpl_registry.get("template").unwrap(),
    );
    let shape: serde_json::Value =
        serde_json::from_str(&tft.validate_config(&base).unwrap()).unwrap();
    let lookback = shape["lookback"].as_u64().unwrap() as usize;
    let horizons = shape["horizons"].as_u64().unwrap() as usize;

    let seasonal = planted_seasonal(SeasonalSpec {
        rows: 3000,
        ..SeasonalSpec::default()
    });
    let seasonal_data: Vec<AnnotatedDataset> = seasonal.iter().map(|a| a.data.clone()).collect();
    let best_over = |horizons: usize| {
        qrisk(&seasonal_data, lookback, horizons, |a, t, h| {
            Some(seasonal[a].expected(t, h))
        })
    };
    let best = (best_over(horizons), best_over(1));
    let which: String = env_or("TFT_BENCH_CASES", "both".to_string());
    const ALL: [(&str, &str); 4] = [
        ("fp32", r#"{"precision": "fp32"}"#),
        ("int8", r#"{"precision": "int8"}"#),
        (
            "int8-4bit",
            r#"{"precision": "int8", "optimizer_state": "4bit"}"#,
        ),
        (
            "int8-factored",
            r#"{"precision": "int8", "optimizer_state": "factored"}"#,
        ),
    ];
    let wanted: String = env_or(
        "TFT_BENCH_VARIANTS",
        "fp32 int8 int8-4bit int8-factored".to_string(),
    );
    let variants: Vec<(&str, &str)> = ALL
        .iter()
        .copied()
        .filter(|(name, _)| *name == "fp32" || wanted.split_whitespace().any(|w| w == *name))
        .collect();
    let mut cases = vec![];
    if which != "real" {
        cases.push(Case {
            name: "synthetic seasonal (3 assets × 3000 bars, pooled)".into(),
            week: 5 * SeasonalSpec::default().slots,
            assets: seasonal_data,
            best: Some(best),
        });
    }
    if which != "synthetic" {
        cases.push(real_case());
    }
    println!(
        "TFT config {}, {steps} steps, seeds 1..={seeds}; validation split",
        base.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    for case in &cases {
        let week = case.week;
        let naive = qrisk(&case.assets, lookback, horizons, |a, t, h| {
            let row = (t + h - 1).checked_sub(week)?;
            Some(case.assets[a].dataset.targets[row] as f64)
        });
        let mut runs: BTreeMap<&str, Vec<BTreeMap<String, f64>>> = BTreeMap::new();
        for seed in 1..=seeds {
            for &(variant, overlay) in &variants {
                let config = with(&base, overlay);
                let m = train(tft, &config, seed, steps, &case.assets);
                eprintln!(
                    "{}: {variant} seed {seed}: P50 q-risk {:.4}, coverage {:.3}",
                    case.name, m["valid_qrisk_p50"], m["valid_coverage_p10_p90"]
                );
                runs.entry(variant).or_default().push(m);
            }
            let m = train(template, "{}", seed, steps, &case.assets);
            runs.entry("template").or_default().push(m);
        }
        let column =
            |who: &str, key: &str| -> Vec<f64> { runs[who].iter().map(|m| m[key]).collect() };
        println!("\n{}", case.name);
        println!("| forecast | P50 q-risk (h 1..{horizons}) | P50 q-risk h1 | P10–P90 coverage |");
        println!("|---|---:|---:|---:|");
        println!("| zero | 1.000 | 1.000 | – |");
        println!("| seasonal naive (same bar a week before) | {naive:.4} | – | – |");
        if let Some((best, best_h1)) = case.best {
            println!("| planted best forecast | {best:.4} | {best_h1:.4} | – |");
        }
        let (t, t_sd) = mean_sd(&column("template", "valid_qrisk_p50"));
        println!("| template MLP (1 step only) | – | {t:.4} ± {t_sd:.4} | – |");
        let mut means = BTreeMap::new();
        for &(p, _) in &variants {
            let (q, q_sd) = mean_sd(&column(p, "valid_qrisk_p50"));
            let (h1, h1_sd) = mean_sd(&column(p, "valid_qrisk_p50_h1"));
            let (c, c_sd) = mean_sd(&column(p, "valid_coverage_p10_p90"));
            means.insert(p, (q, c));
            println!(
                "| TFT {} | {q:.4} ± {q_sd:.4} | {h1:.4} ± {h1_sd:.4} | {c:.3} ± {c_sd:.3} |",
                p.to_uppercase()
            );
        }
        let (q32, c32) = means["fp32"];
        for &(p, _) in variants.iter().skip(1) {
            let (q8, c8) = means[p];
            println!(
                "{} / FP32 P50 q-risk {:.4} ({:+.2}%), coverage {:+.1} points",
                p.to_uppercase(),
                q8 / q32,
                (q8 / q32 - 1.0) * 100.0,
                (c8 - c32) * 100.0,
            );
        }
        println!(
            "FP32 vs seasonal naive {:+.2}%",
            (q32 / naive - 1.0) * 100.0
        );
    }
}
