//! Scheduling latency of the orchestrator (run with
//! `cargo bench -p tli-host --bench scheduling` after
//! `cargo build --release --workspace`): a sequential queue of short tasks
//! (the do-nothing `behaviour` fixture plugin, 1 step each); for every
//! hand-over, the time from a task's reservation being released to the next
//! task's runner recording `running` (creating its trainer included).
//! Times come from the store (millisecond resolution), so the table gives
//! means over many hand-overs as well as percentiles.

use std::time::{Duration, Instant};
use tli_host::orchestrator::arbiter::Strategy;
use tli_host::orchestrator::engine::{Orchestrator, OrchestratorConfig};
use tli_host::orchestrator::job::JobSpec;
use tli_host::orchestrator::state::TaskState;
use tli_host::orchestrator::store::Store;
use tli_testkit::measure::percentile;
use tli_testkit::{orchestrator_config, PluginDir, BEHAVIOUR};

fn main() {
    let plugins = PluginDir::with(&[(BEHAVIOUR, "behaviour")]);
    println!("| poll interval | hand-overs | mean | p50 | p99 | max | wall time per task |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for poll_ms in [1u64, 50] {
        let state = tempfile::tempdir().expect("temp dir");
        let host = Orchestrator::open(OrchestratorConfig {
            cores: 1,
            resume_interrupted: false,
            default_executor: Default::default(),
            ..orchestrator_config(state.path(), plugins.path(), Strategy::Sequential, 1 << 30)
        })
        .expect("open host");
        let tasks = 100;
        let assets: Vec<String> = (0..tasks)
            .map(|i| format!(r#"{{"synthetic":{{"rows":64,"seed":{i}}}}}"#))
            .collect();
        let spec = JobSpec::from_json(&format!(
            r#"{{"name":"latency","models":[{{"plugin":"behaviour","steps":1}}],"assets":[{}],"checkpoint":{{"keep":1}}}}"#,
            assets.join(",")
        ))
        .expect("job spec");
        let job = host.submit(&spec).expect("submit");
        let started = Instant::now();
        host.run_until_idle(Duration::from_millis(poll_ms), |_| {})
            .expect("run");
        let wall = started.elapsed();
        let store = Store::open_read_only(host.state_dir()).expect("store");
        let rows = store.tasks_of(job).expect("tasks");
        assert!(rows.iter().all(|t| t.state == TaskState::Completed));
        let mut timeline = store.reservation_timeline().expect("timeline");
        timeline.sort_by_key(|r| r.reserved_ms);
        let mut latencies: Vec<f64> = Vec::new();
        for pair in timeline.windows(2) {
            let released = pair[0].released_ms.expect("released");
            let running_at = store
                .transitions(pair[1].task_id)
                .expect("transitions")
                .iter()
                .find(|t| t.to == TaskState::Running)
                .map(|t| t.at_ms)
                .expect("ran");
            latencies.push((running_at - released) as f64);
        }
        latencies.sort_by(|a, b| a.total_cmp(b));
        let mean = latencies.iter().sum::<f64>() / latencies.len() as f64;
        println!(
            "| {poll_ms} ms | {} | {mean:.2} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.1} ms |",
            latencies.len(),
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies[latencies.len() - 1],
            wall.as_secs_f64() * 1e3 / tasks as f64
        );
    }
}
