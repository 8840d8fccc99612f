//! Every bundled model family through `tli train local --save` and `tli
//! predict` with the real binary: the forecasters' reported test metrics
//! (q-risk of the TFT's P50, the MSE of Mamba-2's point forecast) and the
//! agents' test P&L, Sharpe and periods are recomputed from `tli predict`'s
//! output on the training file's test rows, by the rule each plugin's
//! README gives.
//!
//! The file is the ES sample's first 4900 bars, whose test split holds no
//! gap (the sample's gaps are earlier, and after it), so the rules need no
//! row markers.

use super::predict_cli::{day_ns, es_bars, predict_json};
use tli_e2e_tests::*;

struct Trained {
    plugins: PluginDir,
    dir: tempfile::TempDir,
    data: String,
    model: std::path::PathBuf,
    evaluation: serde_json::Value,
    /// The test split's bars (UTC ns), in order.
    test_bars: Vec<i64>,
    /// The card's target scale.
    scale: f64,
}

fn train(lib: &str, plugin: &str, steps: &str, config: &str) -> Trained {
    let plugins = PluginDir::with(&[(lib, plugin)]);
    let dir = tempfile::tempdir().unwrap();
    let data = es_bars(dir.path(), "es.csv", 4900, 1.0);
    let model = dir.path().join("model");
    let report = ok_json(&run_tli(
        plugins.path(),
        &[
            "train",
            "local",
            "-p",
            plugin,
            "--steps",
            steps,
            "--config",
            config,
            "--data",
            &data,
            "--save",
            model.to_str().unwrap(),
            "-o",
            "json",
        ],
    ));
    let evaluation = report[0]["evaluation"].clone();
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model.join("model.json")).unwrap()).unwrap();
    let asset = &card["assets"][0];
    let span = [
        asset["splits"]["test"][0].as_i64().unwrap(),
        asset["splits"]["test"][1].as_i64().unwrap(),
    ];
    let test_bars = std::fs::read_to_string(&data)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| day_ns(l.split(',').next().unwrap()))
        .filter(|t| (span[0]..=span[1]).contains(t))
        .collect();
    Trained {
        plugins,
        dir,
        data,
        model,
        evaluation,
        test_bars,
        scale: asset["stats"]["target_scales"][0].as_f64().unwrap(),
    }
}

impl Trained {
    fn metric(&self, name: &str) -> f64 {
        self.evaluation[name]
            .as_f64()
            .unwrap_or_else(|| panic!("no {name} in {}", self.evaluation))
    }

    fn predict(&self, extra: &[&str]) -> Vec<serde_json::Value> {
        predict_json(self.plugins.path(), &self.model, &self.data, extra)
    }

    /// A column of `rows` in the trained units, as f32 (as evaluation computed).
    fn scaled(&self, rows: &[&serde_json::Value], column: &str) -> Vec<f32> {
        rows.iter()
            .map(|r| (r[column].as_f64().unwrap() / self.scale) as f32)
            .collect()
    }
}

/// Rows of `predictions` at the bars `bars`.
fn at<'a>(predictions: &'a [serde_json::Value], bars: &[i64]) -> Vec<&'a serde_json::Value> {
    let wanted: std::collections::HashSet<i64> = bars.iter().copied().collect();
    predictions
        .iter()
        .filter(|r| wanted.contains(&day_ns(r["timestamp"].as_str().unwrap())))
        .collect()
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        ((a - b) / b).abs() < 1e-6,
        "{what}: from predictions {a}, reported {b}"
    );
}

#[test]
fn tft_test_qrisk_is_reproduced_from_tli_predict_in_fp32_and_int8() {
    for config in [r#"{"horizons":1}"#, r#"{"horizons":1,"precision":"int8"}"#] {
        tft_reproduces(config);
    }
}

fn tft_reproduces(config: &str) {
    let t = train(TFT, "tft", "3", config);
    let lookback = 64;
    // Window ends from the test split's lookback-th bar; the decoder reads the next bar's
    // known inputs, so the split's last bar is not one.
    let bars = &t.test_bars[lookback - 1..t.test_bars.len() - 1];
    let predictions = t.predict(&[]);
    let rows = at(&predictions, bars);
    assert_eq!(rows.len(), bars.len());
    assert_eq!(rows.len() as f64, t.metric("test_windows"));
    let y = t.scaled(&rows, "fwd_logret_1:actual");
    let p50 = t.scaled(&rows, "fwd_logret_1:p50");
    let scale: f64 = y.iter().map(|v| f64::from(*v).abs()).sum();
    let loss: f64 = y
        .iter()
        .zip(&p50)
        .map(|(y, f)| {
            let e = f64::from(*y) - f64::from(*f);
            (0.5 * e).max(-0.5 * e)
        })
        .sum();
    close(
        2.0 * loss / scale,
        t.metric("test_qrisk_p50"),
        "test_qrisk_p50",
    );
    // Every window without a gap gets a row: most of the file.
    assert!(predictions.len() > 4000, "{} rows", predictions.len());
    trades_as_reported(&t, bars);
}

/// A forecaster's reported test trading metrics (the sign of its one-bar-ahead forecast at
/// each evaluation row, at the default costs) from `tli backtest --start <first evaluation
/// bar> --end <last>`, exactly.
fn trades_as_reported(t: &Trained, bars: &[i64]) {
    let (start, end) = (bars[0].to_string(), bars[bars.len() - 1].to_string());
    let report = ok_json(&run_tli(
        t.plugins.path(),
        &[
            "backtest",
            "--model",
            t.model.to_str().unwrap(),
            "--data",
            &t.data,
            "--start",
            &start,
            "--end",
            &end,
            "-o",
            "json",
        ],
    ));
    assert_eq!(report["positions_from"], "sign");
    assert_eq!(report["cost_per_contract"], 2.0 + 0.5 * 0.25 * 50.0);
    let (s, bh) = (&report["strategy"], &report["buy_and_hold"]);
    let pairs = [
        (&s["net_pnl"], "test_trade_net_pnl"),
        (&s["gross_pnl"], "test_trade_gross_pnl"),
        (&s["costs"], "test_trade_costs"),
        (&s["trades"], "test_trade_trades"),
        (&s["exposure"], "test_trade_exposure"),
        (&s["performance"]["sharpe"], "test_trade_sharpe"),
        (&s["performance"]["sortino"], "test_trade_sortino"),
        (&s["performance"]["max_drawdown"], "test_trade_max_drawdown"),
        (&s["performance"]["periods"], "test_trade_periods"),
        (&bh["net_pnl"], "test_trade_bh_net_pnl"),
        (&bh["performance"]["sharpe"], "test_trade_bh_sharpe"),
    ];
    for (value, name) in pairs {
        assert_eq!(value.as_f64().unwrap(), t.metric(name), "{name}");
    }
    assert_eq!(t.metric("test_trade_periods"), (bars.len() - 1) as f64);
    assert!(
        t.metric("test_trade_trades") > 0.0,
        "the forecasts' sign changes"
    );
}

#[test]
fn template_test_trading_metrics_are_reproduced_by_tli_backtest() {
    let t = train(TEMPLATE, "template", "200", r#"{"hidden_sizes":[16]}"#);
    // Every row of the test split is an evaluation row (one row of features each).
    let bars = t.test_bars.clone();
    trades_as_reported(&t, &bars);
    // The validation split's rows are traded too.
    for name in [
        "valid_trade_net_pnl",
        "valid_trade_sharpe",
        "valid_trade_bh_net_pnl",
    ] {
        assert!(t.metric(name).is_finite(), "{name}");
    }
}

#[test]
fn mamba2_test_mse_is_reproduced_from_tli_predict() {
    let t = train(
        MAMBA2,
        "mamba2",
        "2",
        r#"{"lookback":128,"d_model":32,"layers":1}"#,
    );
    // Window ends from the test split's lookback-th bar to the one before its last (the
    // target's bar must lie in the split too).
    let bars = &t.test_bars[128 - 1..t.test_bars.len() - 1];
    let predictions = t.predict(&[]);
    let rows = at(&predictions, bars);
    assert_eq!(rows.len(), bars.len());
    let y = t.scaled(&rows, "fwd_logret_1:actual");
    let f = t.scaled(&rows, "fwd_logret_1:mean");
    let mse = y
        .iter()
        .zip(&f)
        .map(|(y, f)| (f64::from(*y) - f64::from(*f)).powi(2))
        .sum::<f64>()
        / y.len() as f64;
    close(mse, t.metric("test_mse"), "test_mse");
    trades_as_reported(&t, bars);
}

/// An agent's test P&L, Sharpe and periods from `tli predict --start <the
/// test split's window-th bar> --end <its last>` (the READMEs' rule).
fn agent_reproduces_its_test_pnl(t: &Trained, window: usize) {
    // --start and --end take UTC nanoseconds too.
    let start = t.test_bars[window - 1].to_string();
    let end = t.test_bars.last().unwrap().to_string();
    let rows = t.predict(&["--start", &start, "--end", &end]);
    assert_eq!(rows.len(), t.test_bars.len() - window + 1);
    let pnl: Vec<f64> = rows.iter().map(|r| r["pnl"].as_f64().unwrap()).collect();
    assert_eq!(pnl[0], 0.0, "the agent starts flat");
    assert_eq!(pnl.iter().sum::<f64>(), t.metric("test_total_pnl"));
    let periods = &pnl[1..];
    assert_eq!(periods.len() as f64, t.metric("test_periods"));
    let mean = periods.iter().sum::<f64>() / periods.len() as f64;
    let sd = (periods.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>()
        / (periods.len() - 1) as f64)
        .sqrt();
    assert_eq!(mean / sd * 252f64.sqrt(), t.metric("test_sharpe"));
    // Positions move: the agent trades.
    let moves = rows
        .windows(2)
        .filter(|w| w[0]["position"] != w[1]["position"])
        .count();
    assert!(moves > 0, "the agent never traded");

    // `tli backtest` on the same rows prices the same positions with its own ledger: the
    // task's reported P&L and Sharpe, exactly, and the agent's P&L bar by bar.
    let ledger = t.dir.path().join("ledger.csv");
    let charts = t.dir.path().join("charts");
    let report = ok_json(&run_tli(
        t.plugins.path(),
        &[
            "backtest",
            "--model",
            t.model.to_str().unwrap(),
            "--data",
            &t.data,
            "--start",
            &start,
            "--end",
            &end,
            "--ledger",
            ledger.to_str().unwrap(),
            "--plots",
            charts.to_str().unwrap(),
            "-o",
            "json",
        ],
    ));
    assert_eq!(report["positions_from"], "agent");
    let png = std::fs::read(charts.join("equity.png")).unwrap();
    assert!(
        !charts.join("forecast.png").exists(),
        "an agent has no forecasts"
    );
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "an equity chart"
    );
    let strategy = &report["strategy"];
    assert_eq!(
        strategy["net_pnl"].as_f64().unwrap(),
        t.metric("test_total_pnl")
    );
    assert_eq!(
        strategy["performance"]["sharpe"].as_f64().unwrap(),
        t.metric("test_sharpe")
    );
    assert_eq!(
        strategy["performance"]["periods"].as_f64().unwrap(),
        t.metric("test_periods")
    );
    let text = std::fs::read_to_string(&ledger).unwrap();
    let booked: Vec<f64> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(6).unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        booked, pnl,
        "the ledger's net P&L is the agent's, bar by bar"
    );
}

#[test]
fn dqn_test_pnl_and_sharpe_are_reproduced_exactly_from_tli_predict() {
    let t = train(DQN, "dqn", "300", r#"{"learning_starts":100}"#);
    agent_reproduces_its_test_pnl(&t, 4);
}

#[test]
fn ppo_test_pnl_and_sharpe_are_reproduced_exactly_from_tli_predict() {
    let t = train(PPO, "ppo", "128", r#"{"num_envs":2,"num_steps":64}"#);
    agent_reproduces_its_test_pnl(&t, 32);
}
