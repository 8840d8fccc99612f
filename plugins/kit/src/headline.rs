//! The headline metrics of the kit's two kinds of model: what a person
//! compares tasks by, most telling first (`Plugin::headline_metrics`, plugin
//! API 1.5). Tables show these before the rest of a task's metrics, as many
//! as fit: held-out results come first, the training loss last.

/// An agent (DQN, PPO): the validation Sharpe ratio and total P&L of its
/// greedy policy, the test Sharpe ratio, then its training loss.
pub fn agent() -> Vec<String> {
    names(&[
        "valid_sharpe",
        "valid_total_pnl",
        "test_sharpe",
        "train_loss",
    ])
}

/// A forecaster: its `validation_loss` (the metric it is selected by), its
/// skill against the zero forecast, the Sharpe ratio of trading its forecast
/// on the validation split, then its training loss.
pub fn forecaster(validation_loss: &str) -> Vec<String> {
    names(&[
        validation_loss,
        "valid_skill",
        "valid_trade_sharpe",
        "train_loss",
    ])
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| n.to_string()).collect()
}
