//! The headline metrics of the kit's two kinds of model: what a person
//! compares tasks by, most telling first (`Plugin::headline_metrics`, plugin
//! API 1.5). Tables show these before the rest of a task's metrics.

/// An agent (DQN, PPO): its training loss, then the validation Sharpe ratio
/// and total P&L of its greedy policy, then the test Sharpe ratio.
pub fn agent() -> Vec<String> {
    names(&[
        "train_loss",
        "valid_sharpe",
        "valid_total_pnl",
        "test_sharpe",
    ])
}

/// A forecaster: its training loss, its `validation_loss` (the metric it
/// is selected by), its skill against the zero forecast, and the Sharpe
/// ratio of trading its forecast on the validation split.
pub fn forecaster(validation_loss: &str) -> Vec<String> {
    names(&[
        "train_loss",
        validation_loss,
        "valid_skill",
        "valid_trade_sharpe",
    ])
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| n.to_string()).collect()
}
