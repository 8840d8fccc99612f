//! Evaluation metrics against numbers computed by explicit arithmetic here.

// Expected values are written as the explicit hand arithmetic (`-1.0 * 50.0 * …`).
#![allow(clippy::neg_multiply, clippy::identity_op, clippy::erasing_op)]

use tli_backtest::metrics::{
    compare_with_baselines, evaluate_pnl, evaluate_strategy, max_drawdown, sharpe_ratio,
    sortino_ratio, CostTerms,
};

fn close_to(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1.0)
}

#[test]
fn five_period_series_by_hand() {
    let pnl = [100.0, -50.0, 30.0, -80.0, 60.0];
    let positions = [1.0, 1.0, -1.0, 0.0, 2.0];
    let r = evaluate_pnl(&pnl, &positions, 252.0, Some(1000.0)).unwrap();

    // mean = 60 / 5 = 12; deviations 88, −62, 18, −92, 48;
    // squares 7744 + 3844 + 324 + 8464 + 2304 = 22680; sample variance 22680 / 4.
    let std = (22680.0f64 / 4.0).sqrt();
    assert!(close_to(r.mean_pnl, 12.0));
    assert!(close_to(r.std_pnl, std));
    assert!(close_to(r.sharpe, 12.0 / std * 252.0f64.sqrt()), "{r:?}");
    // Downside: (−50)² + (−80)² = 8900 over all 5 periods.
    let dd = (8900.0f64 / 5.0).sqrt();
    assert!(close_to(r.sortino, 12.0 / dd * 252.0f64.sqrt()), "{r:?}");
    // Cumulative 100, 50, 80, 0, 60: peak 100, deepest 0 → drawdown 100.
    assert_eq!(r.max_drawdown, 100.0);
    // Equity 1100, 1050, 1080, 1000, 1060: (1100 − 1000) / 1100.
    assert!(close_to(r.max_drawdown_frac.unwrap(), 100.0 / 1100.0));
    assert_eq!(r.total_pnl, 60.0);
    assert!(close_to(r.total_return.unwrap(), 0.06));
    // |1−0| + |1−1| + |−1−1| + |0+1| + |2−0| = 6.
    assert_eq!((r.turnover, r.avg_turnover), (6.0, 1.2));
    // In the market in periods 0, 1, 2, 4; P&L > 0 in 0, 2, 4.
    assert_eq!((r.periods_in_market, r.hit_rate), (4, 0.75));
    assert_eq!(r.costs, None);
    assert_eq!(r.periods, 5);
}

#[test]
fn strategy_from_prices_and_baselines() {
    let close = [100.0, 101.0, 99.0, 102.0, 102.5];
    let positions = [1.0, 1.0, -1.0, 0.0];
    let cost = 2.0 + 1.0 * 0.25 * 50.0;
    let terms = CostTerms::new(50.0, cost).unwrap();
    let c = compare_with_baselines(&close, &positions, terms, 252.0, Some(100_000.0)).unwrap();

    let pnl = [
        1.0 * 50.0 * (101.0 - 100.0) - cost * 1.0,
        1.0 * 50.0 * (99.0 - 101.0) - cost * 0.0,
        -1.0 * 50.0 * (102.0 - 99.0) - cost * 2.0,
        0.0 * 50.0 * (102.5 - 102.0) - cost * 1.0,
    ];
    let s = &c.strategy;
    assert!(close_to(s.total_pnl, pnl.iter().sum()));
    assert_eq!(s.costs, Some(cost * 4.0));
    assert!(close_to(s.sharpe, sharpe_ratio(&pnl, 252.0)));
    // Cumulative 35.5, −64.5, −243.5, −258: the peak is 35.5.
    assert!(close_to(s.max_drawdown, 35.5 + 258.0));
    assert_eq!(s.hit_rate, 1.0 / 3.0);

    // Buy and hold: long 1 throughout, the entry cost once.
    let bh = [50.0 - cost, -100.0, 150.0, 25.0];
    let mean = bh.iter().sum::<f64>() / 4.0;
    let var = bh.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / 3.0;
    assert!(close_to(c.buy_and_hold.total_pnl, 125.0 - cost));
    assert!(close_to(
        c.buy_and_hold.sharpe,
        mean / var.sqrt() * 252.0f64.sqrt()
    ));
    assert!(close_to(
        c.buy_and_hold.sortino,
        mean / (10000.0f64 / 4.0).sqrt() * 252.0f64.sqrt()
    ));
    assert_eq!(
        (c.buy_and_hold.turnover, c.buy_and_hold.costs),
        (1.0, Some(cost))
    );
    assert!(close_to(c.buy_and_hold.max_drawdown, 100.0));

    let f = &c.flat;
    assert_eq!(
        (f.total_pnl, f.sharpe, f.sortino, f.max_drawdown),
        (0.0, 0.0, 0.0, 0.0)
    );
    assert_eq!((f.hit_rate, f.periods_in_market, f.turnover), (0.0, 0, 0.0));

    let metrics = c.metrics();
    let get = |name: &str| {
        metrics
            .iter()
            .find(|m| m.name.as_str() == name)
            .map(|m| m.value)
    };
    assert_eq!(get("sharpe"), Some(s.sharpe));
    assert_eq!(get("bh_sharpe"), Some(c.buy_and_hold.sharpe));
    assert_eq!(get("flat_sharpe"), Some(0.0));
    assert_eq!(get("total_return"), s.total_return);
    assert_eq!(
        get("bh_max_drawdown_frac"),
        c.buy_and_hold.max_drawdown_frac
    );
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["strategy"]["periods"], 4);
}

#[test]
fn degenerate_series_and_errors() {
    assert_eq!(sharpe_ratio(&[5.0, 5.0, 5.0], 252.0), 0.0);
    assert_eq!(sharpe_ratio(&[5.0], 252.0), 0.0);
    assert_eq!(sortino_ratio(&[1.0, 2.0], 252.0), 0.0, "no losing period");
    assert_eq!(
        max_drawdown(&[-10.0, 5.0]),
        10.0,
        "measured from the start at 0"
    );
    assert_eq!(max_drawdown(&[1.0, 2.0]), 0.0);

    let e = evaluate_pnl(&[], &[], 252.0, None).unwrap_err();
    assert!(e.to_string().contains("zero periods"), "{e}");
    let e = evaluate_pnl(&[1.0], &[1.0, 2.0], 252.0, None).unwrap_err();
    assert!(
        e.to_string().contains("1 P&L periods but 2 positions"),
        "{e}"
    );
    let e = evaluate_pnl(&[f64::NAN], &[1.0], 252.0, None).unwrap_err();
    assert!(e.to_string().contains("pnl[0]"), "{e}");
    let e = evaluate_pnl(&[1.0], &[1.0], 0.0, None).unwrap_err();
    assert!(e.to_string().contains("periods_per_year"), "{e}");
    let e = evaluate_pnl(&[1.0], &[1.0], 252.0, Some(-5.0)).unwrap_err();
    assert!(e.to_string().contains("capital"), "{e}");
    let terms = CostTerms::new(50.0, 0.0).unwrap();
    let e = evaluate_strategy(&[1.0, 2.0, 3.0], &[1.0, 1.0, 1.0], terms, 252.0, None).unwrap_err();
    assert!(
        e.to_string().contains("3 positions for 3 close prices"),
        "{e}"
    );
    assert!(evaluate_strategy(&[1.0], &[], terms, 252.0, None).is_err());
    assert!(CostTerms::new(0.0, 1.0).is_err());
    assert!(CostTerms::new(50.0, -1.0).is_err());
}
