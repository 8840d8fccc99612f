//! A greedy evaluation of a CartPole checkpoint a host wrote, afresh:
//! `TLI_CHECKPOINT=DIR [TLI_EPISODES=100] [TLI_EVAL_SEED=N] cargo bench -p tli-plugin-dqn --bench checkpoint_eval`.
//! Prints the mean, minimum and maximum return; scripts/bench-selection.sh
//! uses it on the best checkpoint `keep_best` kept and on the final one.

use std::path::PathBuf;
use tli_plugin_dqn::bench_api::checkpoint_cartpole_returns;

fn main() {
    let Some(dir) = std::env::var_os("TLI_CHECKPOINT").map(PathBuf::from) else {
        eprintln!("set TLI_CHECKPOINT to a DQN CartPole checkpoint directory");
        std::process::exit(2);
    };
    let number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let episodes = number("TLI_EPISODES", 100) as usize;
    let seed = number("TLI_EVAL_SEED", 2024);
    match checkpoint_cartpole_returns(&dir, episodes, seed) {
        Ok(returns) => {
            let n = returns.len().max(1) as f64;
            let mean = returns.iter().sum::<f64>() / n;
            let min = returns.iter().copied().fold(f64::INFINITY, f64::min);
            let max = returns.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            println!(
                "greedy over {} episodes (seed {seed}): mean {mean:.1}, min {min}, max {max}",
                returns.len()
            );
        }
        Err(e) => {
            eprintln!("{}: {e}", dir.display());
            std::process::exit(1);
        }
    }
}
