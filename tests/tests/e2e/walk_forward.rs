//! Walk-forward evaluation with the real binaries: `tli train start --folds 5` with 2 models ×
//! 2 assets is one job of 20 tasks, run side by side by the memory arbiter (from the store's
//! reservation timeline); every fold's model card shows its training and validation rows
//! ending, with the embargo, before its out-of-sample rows begin (no out-of-sample bar is
//! predicted by a model that trained on it); the out-of-sample windows of the folds follow
//! one another without a gap or an overlap, ending at the file's last usable bar.

use super::orchestrator::peak_reserved;
use super::predict_cli::{bar_times, day_ns, host_run, sample};
use tli_e2e_tests::*;
use tli_host::orchestrator::store::Store;

const FILES: [(&str, &str); 2] = [
    ("ES", "data/samples/es_proxy_sp500_1d.csv"),
    ("NQ", "data/samples/nq_proxy_nasdaq_1d.csv"),
];

#[test]
fn five_folds_of_two_models_on_two_assets_run_as_one_packed_job_with_no_look_ahead() {
    let plugins = PluginDir::with(&[(TEMPLATE, "template")]);
    let state = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), state.path(), &[]);
    let assets: Vec<String> = FILES
        .iter()
        .map(|(symbol, path)| format!("{symbol}={}", sample(path).display()))
        .collect();
    let spec = state.path().join("walk.json");
    std::fs::write(
        &spec,
        serde_json::json!({
            "name": "walk",
            "models": [
                {"plugin": "template", "steps": 300, "config": {"hidden_sizes": [8]}},
                {"plugin": "template", "steps": 300, "config": {"hidden_sizes": [32]}},
            ],
            "assets": [{"data": assets[0]["ES=".len()..], "symbol": "ES"},
                       {"data": assets[1]["NQ=".len()..], "symbol": "NQ"}],
            "walk_forward": {"folds": 5, "test_bars": 200},
        })
        .to_string(),
    )
    .unwrap();
    let out = server.client(&[
        "train",
        "start",
        "--spec",
        spec.to_str().unwrap(),
        "--watch",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = ok_json(&server.client(&["train", "status", "1", "-o", "json"]));
    let tasks = status["progress"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 20, "2 models × 2 assets × 5 folds");
    assert!(tasks.iter().all(|t| t["state"] == "completed"), "{status}");
    for (i, t) in tasks.iter().enumerate() {
        let fold = i % 5 + 1;
        assert!(
            t["asset"]
                .as_str()
                .unwrap()
                .ends_with(&format!(" fold {fold}/5")),
            "{}",
            t["asset"]
        );
        assert!(t["metrics"]["test_trade_net_pnl"].is_number(), "{t}");
    }

    // The flags say the same (through the API's WalkForward); bad folds are refused.
    let refused = server.client(&[
        "train", "start", "-p", "template", "-a", &assets[0], "--folds", "1",
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("walk_forward: folds 1 must be 2 to 50"),
        "{}",
        stderr(&refused)
    );
    let too_many = server.client(&[
        "train",
        "start",
        "-p",
        "template",
        "-a",
        &assets[0],
        "--folds",
        "20",
        "--test-bars",
        "400",
    ]);
    assert!(
        stderr(&too_many).contains("too few for 20 out-of-sample windows of 400 rows"),
        "{}",
        stderr(&too_many)
    );

    // Windows by date through the flags: each fold's out-of-sample bars start on its date.
    let dated = server.client(&[
        "train",
        "start",
        "-p",
        "template",
        "-a",
        &assets[0],
        "--steps",
        "20",
        "--test-starts",
        "2016-01-04,2017-01-03,2018-01-02",
        "--train-bars",
        "1500",
        "--watch",
    ]);
    assert!(dated.status.success(), "{}", stderr(&dated));
    let job2 = ok_json(&server.client(&["train", "status", "2", "-o", "json"]));
    let ids: Vec<u64> = job2["progress"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    for (id, date) in ids.iter().zip(["2016-01-04", "2017-01-03", "2018-01-02"]) {
        let card =
            &ok_json(&server.client(&["models", "show", &id.to_string(), "-o", "json"]))["card"];
        let s = &card["assets"][0]["splits"];
        assert_eq!(
            s["test"][0].as_i64().unwrap(),
            day_ns(&format!("{date}T00:00:00Z"))
        );
        // Sliding: 1500 training and validation rows before the embargo.
        assert!(
            s["train"][0].as_i64().unwrap() > day_ns("2005-01-03T00:00:00Z"),
            "{s}"
        );
    }

    // Packed: folds of the job ran side by side.
    let store = Store::open_read_only(state.path()).unwrap();
    let (_, concurrent) = peak_reserved(&store.reservation_timeline().unwrap());
    assert!(concurrent >= 2, "folds ran one at a time ({concurrent})");

    // Every fold's card: its training and validation targets end before its first
    // out-of-sample bar; the folds' out-of-sample windows are consecutive.
    for (a, (_, path)) in FILES.iter().enumerate() {
        let bars = bar_times(path);
        let index = |t: i64| bars.binary_search(&t).unwrap();
        for model in 0..2 {
            let mut previous_end: Option<usize> = None;
            for fold in 0..5 {
                let id = 1 + model * 10 + a * 5 + fold;
                let card =
                    &ok_json(&server.client(&["models", "show", &id.to_string(), "-o", "json"]))
                        ["card"];
                let s = &card["assets"][0]["splits"];
                let at = |k: &str, i: usize| index(s[k][i].as_i64().unwrap());
                let (train_last, valid_last) = (at("train", 1), at("valid", 1));
                let (test_first, test_last) = (at("test", 0), at("test", 1));
                // Targets are the next bar's return: the training row r learns bar r + 1.
                assert!(
                    train_last + 1 < test_first && valid_last + 1 < test_first,
                    "fold {} of model {model} on {path}: train ends {train_last}, valid \
                     {valid_last}, test starts {test_first}",
                    fold + 1
                );
                assert!(at("train", 0) == 20, "expanding from the first usable bar");
                assert_eq!(test_last - test_first + 1, 200);
                if let Some(end) = previous_end {
                    assert_eq!(test_first, end + 1, "consecutive out-of-sample windows");
                }
                previous_end = Some(test_last);
            }
            // The last window ends at the last usable bar (the one before the last).
            assert_eq!(previous_end, Some(bars.len() - 2));
        }
    }

    // The out-of-sample record: each fold's model on its own window reproduces what its
    // task reported on its test split; the folds concatenate into one 1000-bar ledger.
    let out_dir = state.path().join("oos");
    let record = ok_json(&run_tli(
        plugins.path(),
        &[
            "walk-forward",
            "1",
            "--state-dir",
            state.path().to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
            "-o",
            "json",
        ],
    ));
    let series = record.as_array().unwrap();
    assert_eq!(series.len(), 4, "2 models × 2 assets");
    for s in series {
        let folds = s["folds"].as_array().unwrap();
        assert_eq!(folds.len(), 5);
        for f in folds {
            let task = tasks.iter().find(|t| t["task_id"] == f["task"]).unwrap();
            assert_eq!(
                f["backtest"]["strategy"]["net_pnl"].as_f64().unwrap(),
                task["metrics"]["test_trade_net_pnl"].as_f64().unwrap(),
                "fold of task {}",
                f["task"]
            );
        }
        let whole = &s["out_of_sample"]["strategy"];
        assert_eq!(whole["performance"]["periods"], 999, "{s}");
        let dir = out_dir.join(format!(
            "model{}-{}",
            s["model"],
            s["symbol"].as_str().unwrap()
        ));
        let ledger = std::fs::read_to_string(dir.join("ledger.csv")).unwrap();
        assert_eq!(ledger.lines().count(), 1 + 1000);
        let net: f64 = ledger
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(6).unwrap().parse::<f64>().unwrap())
            .sum();
        assert!((net - whole["net_pnl"].as_f64().unwrap()).abs() < 1e-6);
        assert!(dir.join("equity.png").is_file() && dir.join("forecast.png").is_file());
    }
    let refused = run_tli(
        plugins.path(),
        &[
            "walk-forward",
            "7",
            "--state-dir",
            state.path().to_str().unwrap(),
        ],
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("no job 7"),
        "{}",
        stderr(&refused)
    );
}

/// Daily bars whose returns carry a planted calendar effect: Monday and Tuesday drift up
/// `mu`, Wednesday to Friday down, with Gaussian noise of `sigma` (seeded).
fn planted_bars(path: &std::path::Path, rows: usize, mu: f64, sigma: f64) {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut uniform = || {
        // SplitMix64.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut text = String::from("ts_event,open,high,low,close,volume,symbol\n");
    let (mut day, mut price, mut n) = (0i64, 2000.0f64, 0);
    // 2006-01-02 is a Monday: day 13150 since 1970-01-01.
    while n < rows {
        let weekday = day % 7; // 0 = Monday
        if weekday < 5 {
            let gauss = (-2.0 * uniform().max(1e-12).ln()).sqrt()
                * (2.0 * std::f64::consts::PI * uniform()).cos();
            let drift = if weekday < 2 { mu } else { -mu };
            let open = price;
            price *= (drift + sigma * gauss).exp();
            let ns = (13_150 + day) * 86_400_000_000_000;
            let stamp = tli_data::timefmt::format_date(ns);
            text.push_str(&format!(
                "{stamp}T00:00:00Z,{open:.2},{:.2},{:.2},{price:.2},{},ES.FUT\n",
                open.max(price) * 1.001,
                open.min(price) * 0.999,
                1000 + n % 4000
            ));
            n += 1;
        }
        day += 1;
    }
    std::fs::write(path, text).unwrap();
}

/// The planted-signal check: a TFT trained over walk-forward folds on bars with a planted
/// calendar effect trades its sign of P50 out of sample at a net Sharpe above 1, above
/// buy-and-hold; at ten times the costs the same positions lose (the edge is smaller than the
/// costs). docs/benchmarks.md has the figures and the real daily series beside them.
#[test]
fn a_tft_finds_a_planted_calendar_edge_out_of_sample_and_tenfold_costs_take_it() {
    let plugins = PluginDir::with(&[(TFT, "tft")]);
    let dir = tempfile::tempdir().unwrap();
    let bars = dir.path().join("planted.csv");
    planted_bars(&bars, 3000, 0.0006, 0.003);
    let state = host_run(
        &plugins,
        dir.path(),
        serde_json::json!({
            "name": "planted",
            "models": [{"plugin": "tft", "steps": 400, "config": {"hidden_size": 16,
                "attention_heads": 2, "lookback": 20, "horizons": 1, "learning_rate": 0.003}}],
            "assets": [{"data": bars, "symbol": "ES"}],
            "walk_forward": {"folds": 4, "test_bars": 250},
        }),
    );
    let record = |extra: &[&str]| {
        let mut args = vec!["walk-forward", "1", "--state-dir", state.to_str().unwrap()];
        args.extend(extra);
        args.extend(["-o", "json"]);
        let out = ok_json(&run_tli(plugins.path(), &args));
        out[0]["out_of_sample"].clone()
    };
    let at_cost = record(&[]);
    let (sharpe, held) = (
        at_cost["strategy"]["performance"]["sharpe"]
            .as_f64()
            .unwrap(),
        at_cost["buy_and_hold"]["performance"]["sharpe"]
            .as_f64()
            .unwrap(),
    );
    assert_eq!(at_cost["cost_per_contract"], 8.25);
    assert!(
        sharpe > 1.0 && sharpe > held,
        "net Sharpe {sharpe}, buy-and-hold {held}"
    );
    let tenfold = record(&["--commission", "20", "--slippage-ticks", "5"]);
    assert_eq!(tenfold["cost_per_contract"], 82.5);
    let costly = tenfold["strategy"]["performance"]["sharpe"]
        .as_f64()
        .unwrap();
    assert!(
        costly < 0.0 && tenfold["strategy"]["net_pnl"].as_f64().unwrap() < 0.0,
        "at ten times the costs: Sharpe {costly}"
    );
}
