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

/// One day's bar of a contract: (UTC ns, close, volume).
type Day = (i64, f64, u64);

/// Weekday midnights from 2025-01-06, leaving out the exchange holidays of those weeks
/// (20 January, 17 February) and `missing` (a gap: a trading day with no bar).
fn trading_days(n: usize, missing: &str) -> Vec<i64> {
    let day = |text: &str| super::predict_cli::day_ns(&format!("{text}T00:00:00Z"));
    let skip = [day("2025-01-20"), day("2025-02-17"), day(missing)];
    let mut out = Vec::new();
    let mut t = day("2025-01-06");
    while out.len() < n {
        let weekday = (t / 86_400_000_000_000 + 3) % 7; // 0 = Monday
        if weekday < 5 && !skip.contains(&t) {
            out.push(t);
        }
        t += 86_400_000_000_000;
    }
    out
}

fn contract(symbol: &str, days: &[Day]) -> tli_data::ContractBars {
    let mut table = tli_data::BarTable::new(symbol, tli_data::BarInterval::Day);
    for &(ts, close, volume) in days {
        table.push(ts, close, close + 1.0, close - 1.0, close, volume);
    }
    tli_data::ContractBars {
        raw_symbol: symbol.into(),
        table,
    }
}

/// A hand-built continuous ES file: ESH5 until the roll, ESM5 after it (its volume passes the
/// old contract's the day before), a trading day missing in between: the oracle's positions
/// are priced as the hand count says, the roll earning nothing and trading the position
/// twice, the gap an ordinary bar; Sharpe, drawdown and costs by hand too.
#[test]
fn a_roll_and_a_gap_are_priced_as_the_hand_count_says() {
    let plugins = PluginDir::with(&[(ORACLE, "oracle")]);
    let dir = tempfile::tempdir().unwrap();
    let days = trading_days(60, "2025-01-29");
    // ESH5 trades days 0..=44 (the front until the roll), ESM5 days 36..60; ESM5 out-trades
    // ESH5 from day 40, so the front is ESM5 from day 41 on. Closes wander by a fixed rule.
    let wander = |i: usize| ((i * 7919) % 13) as f64 - 6.0;
    let (roll_day, h_last, m_first) = (41usize, 44usize, 36usize);
    let h: Vec<Day> = (0..=h_last)
        .map(|i| {
            (
                days[i],
                5000.0 + 2.0 * i as f64 + wander(i),
                if i < 40 { 9000 } else { 100 },
            )
        })
        .collect();
    let m: Vec<Day> = (m_first..60)
        .map(|i| {
            (
                days[i],
                5030.0 + 2.0 * i as f64 - wander(i + 5),
                if i < 40 { 100 } else { 9000 },
            )
        })
        .collect();
    let file = dir.path().join("es-roll.dbn");
    tli_data::dbn_format::write_parent(
        &file,
        "ES.FUT",
        tli_data::BarInterval::Day,
        &[contract("ESH5", &h), contract("ESM5", &m)],
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let inspected = stdout(&run_tli(plugins.path(), &["data", "inspect", file]));
    assert!(
        inspected.contains("ESH5 → ESM5") && inspected.contains("1 bars missing after 2025-01-28"),
        "the roll and the missing day: {inspected}"
    );

    // By hand: the front series and its ratio back-adjustment (ESM5 / ESH5 on the last day
    // both traded before the roll), the oracle's sign of the next close change, the ledger.
    let ratio = m[roll_day - 1 - m_first].1 / h[roll_day - 1].1;
    let close: Vec<f64> = (0..60)
        .map(|i| {
            if i < roll_day {
                h[i].1 * ratio
            } else {
                m[i - m_first].1
            }
        })
        .collect();
    let close = &close[LOOKBACK..];
    let roll = roll_day - LOOKBACK;
    let n = close.len();
    let positions: Vec<f64> = (0..n)
        .map(|t| {
            if t + 1 < n {
                sign(close[t + 1] - close[t])
            } else {
                0.0
            }
        })
        .collect();
    let mut pnl = Vec::new();
    let (mut gross, mut costs) = (0.0, 0.0);
    for t in 1..n {
        let held = positions[t - 1];
        let before = if t >= 2 { positions[t - 2] } else { 0.0 };
        let earned = if t == roll {
            0.0
        } else {
            held * POINT_VALUE * (close[t] - close[t - 1])
        };
        let paid = COST * (held - before).abs()
            + if t == roll {
                2.0 * COST * held.abs()
            } else {
                0.0
            };
        gross += earned;
        costs += paid;
        pnl.push(earned - paid);
    }
    let mean = pnl.iter().sum::<f64>() / pnl.len() as f64;
    let sd = (pnl.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (pnl.len() - 1) as f64).sqrt();
    let (mut equity, mut peak, mut drawdown) = (0.0f64, 0.0f64, 0.0f64);
    for x in &pnl {
        equity += x;
        peak = peak.max(equity);
        drawdown = drawdown.max(peak - equity);
    }

    let bundle = dir.path().join("oracle");
    let out = run_tli(
        plugins.path(),
        &[
            "train",
            "local",
            "-p",
            "oracle",
            "--steps",
            "1",
            "--data",
            file,
            "--save",
            bundle.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let ledger = dir.path().join("ledger.csv");
    let report = ok_json(&run_tli(
        plugins.path(),
        &[
            "backtest",
            "--model",
            bundle.to_str().unwrap(),
            "--data",
            file,
            "--commission",
            "2",
            "--slippage-ticks",
            "1",
            "--ledger",
            ledger.to_str().unwrap(),
            "-o",
            "json",
        ],
    ));
    let s = &report["strategy"];
    let near = |got: &serde_json::Value, want: f64, what: &str| {
        let got = got.as_f64().unwrap();
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{what}: {got} vs {want} by hand"
        );
    };
    near(&s["gross_pnl"], gross, "gross");
    near(&s["costs"], costs, "costs");
    near(&s["net_pnl"], gross - costs, "net");
    near(
        &s["performance"]["sharpe"],
        mean / sd * 252f64.sqrt(),
        "sharpe",
    );
    near(&s["performance"]["max_drawdown"], drawdown, "max drawdown");
    assert_eq!(s["performance"]["periods"], (n - 1) as u64);
    // The ledger marks the roll on its bar, and the gap is an ordinary bar.
    let rows: Vec<Vec<String>> = std::fs::read_to_string(&ledger)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), n);
    let rolled: Vec<usize> = (0..n).filter(|&t| rows[t][8] == "1").collect();
    assert_eq!(rolled, [roll], "the roll's bar");
    assert!(
        positions[roll - 1] != 0.0,
        "a position is held into the roll"
    );
}
