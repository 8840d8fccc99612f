//! `tli backtest` against hand arithmetic, with the real binary and a fixture
//! plugin (`oracle`) whose forecasts come from the bars' own closes: told
//! the next bar's return, a model must earn exactly the perfect-foresight
//! P&L a hand count gives; told it one bar late, exactly what the same count
//! gives for those positions. Together they show the backtest's timing: a
//! position decided at a bar's close earns the next bar, never this one.

use super::predict_cli::es_bars;
use tli_e2e_tests::*;

/// ES: 50 per point; commission 2 + 1 tick of 0.25 points.
const POINT_VALUE: f64 = 50.0;
const COST: f64 = 2.0 + 0.25 * 50.0;
/// The default feature pipeline's look-back: its first row is bar 20.
const LOOKBACK: usize = 20;

fn closes(path: &str) -> Vec<f64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(4).unwrap().parse().unwrap())
        .collect()
}

fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// Net and gross P&L of `positions` over `close` by the ledger's rule, counted here.
fn by_hand(close: &[f64], positions: &[f64]) -> (f64, f64) {
    let (mut net, mut gross) = (0.0, 0.0);
    let (mut held, mut before) = (0.0f64, 0.0f64);
    for t in 1..close.len() {
        held = if t == 1 { positions[0] } else { held };
        let earned = held * POINT_VALUE * (close[t] - close[t - 1]);
        let paid = COST * (held - before).abs();
        gross += earned;
        net += earned - paid;
        before = held;
        held = positions[t];
    }
    (net, gross)
}

#[test]
fn an_oracle_earns_perfect_foresight_and_one_bar_late_what_the_hand_count_says() {
    let plugins = PluginDir::with(&[(ORACLE, "oracle")]);
    let dir = tempfile::tempdir().unwrap();
    let es = es_bars(dir.path(), "es.csv", 600, 1.0);
    let close = closes(&es)[LOOKBACK..].to_vec();
    let n = close.len();
    for shift in [0u32, 1] {
        let bundle = dir.path().join(format!("oracle-{shift}"));
        let out = run_tli(
            plugins.path(),
            &[
                "train",
                "local",
                "-p",
                "oracle",
                "--steps",
                "1",
                "--config",
                &format!(r#"{{"shift": {shift}}}"#),
                "--data",
                &es,
                "--save",
                bundle.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let report = ok_json(&run_tli(
            plugins.path(),
            &[
                "backtest",
                "--model",
                bundle.to_str().unwrap(),
                "--data",
                &es,
                "--commission",
                "2",
                "--slippage-ticks",
                "1",
                "-o",
                "json",
            ],
        ));
        // The positions the sign rule takes on each forecast (NaN where none exists: flat).
        let positions: Vec<f64> = (0..n)
            .map(|t| match shift {
                0 if t + 1 < n => sign(close[t + 1] - close[t]),
                1 if t >= 1 => sign(close[t] - close[t - 1]),
                _ => 0.0,
            })
            .collect();
        let (net, gross) = by_hand(&close, &positions);
        let strategy = &report["strategy"];
        assert_eq!(report["cost_per_contract"], COST);
        assert_eq!(strategy["performance"]["periods"], (n - 1) as u64);
        let close_to = |got: f64, want: f64, what: &str| {
            assert!(
                (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                "shift {shift}: {what} {got} vs {want} by hand"
            )
        };
        close_to(strategy["net_pnl"].as_f64().unwrap(), net, "net");
        close_to(strategy["gross_pnl"].as_f64().unwrap(), gross, "gross");
        if shift == 0 {
            // Perfect foresight: every bar's move, whichever way, earned in full.
            let every_move: f64 = close
                .windows(2)
                .map(|w| POINT_VALUE * (w[1] - w[0]).abs())
                .sum();
            close_to(gross, every_move, "perfect foresight");
            let held = strategy["performance"]["hit_rate"].as_f64().unwrap();
            assert!(held > 0.9, "it wins almost every bar it holds: {held}");
        }
    }
}

/// A job's forecasters report the trading metrics of the default rule beside their forecast
/// metrics, and `tli train status --rank METRIC` orders the tasks by any of them.
#[test]
fn a_jobs_forecasters_report_trading_metrics_and_rank_by_them() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let dir = tempfile::tempdir().unwrap();
    let es = es_bars(dir.path(), "es.csv", 1500, 1.0);
    let model = |hidden: u32, lr: f64| {
        serde_json::json!({"plugin": "template", "steps": 150,
            "config": {"hidden_sizes": [hidden], "learning_rate": lr}})
    };
    let state = super::predict_cli::host_run(
        &plugins,
        dir.path(),
        serde_json::json!({
            "name": "ranked",
            "models": [model(8, 0.01), model(32, 0.001), model(16, 0.003)],
            "assets": [{"data": es}],
        }),
    );
    let server = Server::start(plugins.path(), &state, &[]);
    let status = |metric: &str| {
        ok_json(&server.client(&["train", "status", "1", "--rank", metric, "-o", "json"]))
    };
    let values = |job: &serde_json::Value, metric: &str| -> Vec<f64> {
        job["progress"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["metrics"][metric].as_f64().unwrap())
            .collect()
    };
    let by_sharpe = status("valid_trade_sharpe");
    let sharpes = values(&by_sharpe, "valid_trade_sharpe");
    assert_eq!(sharpes.len(), 3);
    assert!(
        sharpes.windows(2).all(|w| w[0] >= w[1]),
        "best first: {sharpes:?}"
    );
    for name in [
        "valid_trade_net_pnl",
        "valid_trade_bh_sharpe",
        "test_trade_net_pnl",
        "test_trade_costs",
        "test_trade_max_drawdown",
    ] {
        assert!(
            values(&by_sharpe, name).iter().all(|v| v.is_finite()),
            "{name}"
        );
    }
    let risks = values(&status("valid_qrisk_p50"), "valid_qrisk_p50");
    assert!(
        risks.windows(2).all(|w| w[0] <= w[1]),
        "lower first: {risks:?}"
    );
    let table = stdout(&server.client(&["train", "status", "1", "--rank", "test_trade_net_pnl"]));
    assert!(table.contains("test_trade_net_pnl="), "{table}");
    let out = server.client(&["train", "status", "1", "--rank", "valid_sharpe_ratio"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("no task reports valid_sharpe_ratio; similar ones they report:")
            && text.contains("valid_trade_sharpe"),
        "{text}"
    );
}
