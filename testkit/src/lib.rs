//! Fixtures shared by the integration tests (`host/tests`, the end-to-end
//! crate in `tests/`) and the benchmarks (`host/benches`), so that each is
//! defined once: where cargo put the built `tli` binary and plugin libraries,
//! throw-away plugin directories made from them, a CPU host configuration, an
//! in-process API server, job and task specs on synthetic data, a tiny
//! seeded PRNG, a minimal HTTP client ([`http`]) for the host's HTTP side,
//! the benchmarks' measuring helpers ([`measure`]),
//! and a `tli host serve` child process ([`ServeProcess`]).
//! A dev-only crate: no production crate depends on it (checked by
//! `scripts/check-layers.sh`), and the `tli` binary does not contain it.
//!
//! Test and bench executables live in `target/<profile>/deps`, next to the
//! artifacts `cargo build --release --workspace` leaves in `target/<profile>`:
//! build the workspace first (`make test` does).

pub mod http;
pub mod measure;
mod serve_process;

pub use serve_process::ServeProcess;

use abi_stable::std_types::RArc;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tli_data::synthetic_ar::{synthetic_ar_dataset, SyntheticArSpec};
use tli_host::api::{self, ServerConfig, ShutdownSignal};
use tli_host::orchestrator::arbiter::Strategy;
use tli_host::orchestrator::engine::{Orchestrator, OrchestratorConfig};
use tli_plugin_api::{Dataset, Device, TaskSpec};
use tli_proto::v1 as pb;

/// `target/<profile>`, derived from the running test or bench executable's
/// own path (`target/<profile>/deps/<name>-<hash>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("test executable lives in target/<profile>/deps")
}

/// A built artifact in `target/<profile>`, or a panic that says how to build it.
pub fn artifact(file_name: &str) -> PathBuf {
    let path = profile_dir().join(file_name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (cargo build --release --workspace, or make test)",
        path.display()
    );
    path
}

/// Library file of a workspace cdylib by its crate lib name.
pub fn library(lib_name: &str) -> PathBuf {
    artifact(&format!("lib{lib_name}.so"))
}

/// Lib names of the workspace's plugin and fixture cdylibs.
pub const TEMPLATE: &str = "tli_plugin_template";
pub const DQN: &str = "tli_plugin_dqn";
pub const PPO: &str = "tli_plugin_ppo";
pub const MAMBA2: &str = "tli_plugin_mamba2";
pub const TFT: &str = "tli_plugin_tft";
pub const BEHAVIOUR: &str = "tli_fixture_behaviour";
/// Forecasts from the closes it is given (perfect foresight, or one bar late).
pub const ORACLE: &str = "tli_fixture_oracle";
pub const FUTURE_API: &str = "tli_fixture_future_api";
pub const NOT_A_PLUGIN: &str = "tli_fixture_not_a_plugin";
/// The template plugin's source built as version 0.2.0.
pub const TEMPLATE_NEXT: &str = "tli_fixture_template_next";

/// The bytes of the `behaviour` fixture library with `version` stamped in.
pub fn behaviour_with_version(version: &str) -> Vec<u8> {
    const PREFIX: &[u8] = b"tli-fixture-version=";
    const ROOM: usize = 48 - PREFIX.len();
    assert!(version.len() < ROOM, "version {version:?} too long");
    let mut bytes = std::fs::read(library(BEHAVIOUR)).expect("read the behaviour fixture");
    let at = bytes
        .windows(PREFIX.len())
        .position(|w| w == PREFIX)
        .expect("the behaviour fixture has a version stamp")
        + PREFIX.len();
    let field = &mut bytes[at..at + ROOM];
    field.fill(0);
    field[..version.len()].copy_from_slice(version.as_bytes());
    bytes
}

/// A temporary plugin directory filled with copies of built libraries.
pub struct PluginDir {
    dir: tempfile::TempDir,
}

impl PluginDir {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    /// A directory holding each `(lib_name, as_name)` as [`PluginDir::add`] does.
    pub fn with(plugins: &[(&str, &str)]) -> Self {
        let dir = Self::new();
        for (lib_name, as_name) in plugins {
            dir.add(lib_name, as_name);
        }
        dir
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Copies library `lib_name` in as `libtli_plugin_<as_name>.so`.
    pub fn add(&self, lib_name: &str, as_name: &str) -> PathBuf {
        let target = self.file(as_name);
        std::fs::copy(library(lib_name), &target).expect("copy plugin library");
        target
    }

    /// Adds the first `keep` bytes of library `lib_name`, as a truncated download would leave it.
    pub fn add_truncated(&self, lib_name: &str, as_name: &str, keep: usize) -> PathBuf {
        let bytes = std::fs::read(library(lib_name)).expect("read plugin library");
        let target = self.file(as_name);
        std::fs::write(&target, &bytes[..keep.min(bytes.len())]).expect("write truncated copy");
        target
    }

    /// Adds the `behaviour` fixture as `libtli_plugin_<as_name>.so`,
    /// reporting `version` (stamped into the copy in place of the 0.1.0 it
    /// was built with: the fixture reads its version from that static).
    pub fn add_behaviour_version(&self, as_name: &str, version: &str) -> PathBuf {
        let target = self.file(as_name);
        let staged = self.path().join(format!(".{as_name}.partial"));
        std::fs::write(&staged, behaviour_with_version(version)).expect("write stamped copy");
        // Renamed in, as an installer would: the file never appears half-written.
        std::fs::rename(&staged, &target).expect("rename stamped copy");
        target
    }

    fn file(&self, as_name: &str) -> PathBuf {
        self.path().join(format!("libtli_plugin_{as_name}.so"))
    }
}

impl Default for PluginDir {
    fn default() -> Self {
        Self::new()
    }
}

/// An orchestrator on the CPU: a budget of `budget_bytes`, a 10% margin, 2 cores,
/// interrupted tasks resumed at start-up, the built-in contracts, no TensorBoard files. Change
/// fields with `OrchestratorConfig { cores: 1, ..orchestrator_config(…) }`.
pub fn orchestrator_config(
    state_dir: &Path,
    plugin_dir: &Path,
    strategy: Strategy,
    budget_bytes: u64,
) -> OrchestratorConfig {
    OrchestratorConfig {
        state_dir: state_dir.to_path_buf(),
        plugin_dir: plugin_dir.to_path_buf(),
        contracts: None,
        strategy,
        budget_bytes: Some(budget_bytes),
        margin: 0.1,
        device: Device::Cpu,
        cores: 2,
        cpu_auto_limit: None,
        resume_interrupted: true,
        default_executor: Default::default(),
        data_roots: None,
        watch_plugins: None,
    }
}

/// What `tli host serve` runs, in this process: an orchestrator's
/// scheduling loop on a thread and the gRPC API on 127.0.0.1:0. Dropping it
/// stops both.
pub struct ApiServer {
    pub orchestrator: Arc<Orchestrator>,
    pub shutdown: ShutdownSignal,
    pub addr: SocketAddr,
    scheduler: Option<JoinHandle<()>>,
}

impl ApiServer {
    /// Starts the scheduling loop (polling every `poll`) and serves the API
    /// with `config` on a tokio task (call it inside a multi-threaded runtime).
    pub async fn start(
        orchestrator: Arc<Orchestrator>,
        poll: Duration,
        config: &ServerConfig,
    ) -> Self {
        let scheduling = orchestrator.clone();
        let scheduler = std::thread::spawn(move || {
            scheduling
                .run_until_shutdown(poll, |_| {})
                .expect("scheduling loop");
        });
        let shutdown = ShutdownSignal::new();
        let (router, _health, _auth) = api::router(orchestrator.clone(), &shutdown, config)
            .await
            .expect("router");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local address");
        let mut stop = shutdown.subscribe();
        tokio::spawn(router.serve_with_incoming_shutdown(
            api::incoming(
                listener,
                &tli_host::connections::ConnectionGate::new(
                    tli_host::connections::ConnectionLimits::for_this_process(),
                ),
                config.tls.is_some(),
            ),
            async move {
                let _ = stop.wait_for(|&s| s).await;
            },
        ));
        Self {
            orchestrator,
            shutdown,
            addr,
            scheduler: Some(scheduler),
        }
    }

    /// An orchestrator on the CPU (one core, the `auto` strategy, a 4 GiB
    /// budget) over `state` and `plugins`, served without auth, polling every 5 ms.
    pub async fn start_on_cpu(state: &Path, plugins: &Path) -> Self {
        let orchestrator = Arc::new(
            Orchestrator::open(OrchestratorConfig {
                cores: 1,
                ..orchestrator_config(state, plugins, Strategy::Auto, 1 << 32)
            })
            .expect("orchestrator opens"),
        );
        let no_auth = ServerConfig {
            token: None,
            tls: None,
            worker_token: None,
            ..Default::default()
        };
        Self::start(orchestrator, Duration::from_millis(5), &no_auth).await
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Ends the watch streams and raises the orchestrator's shutdown flag
    /// (running tasks checkpoint and become interrupted), without waiting.
    pub fn signal_shutdown(&self) {
        self.shutdown.trigger();
        self.orchestrator
            .shutdown_flag()
            .store(true, Ordering::SeqCst);
    }

    /// [`ApiServer::signal_shutdown`], then waits for the scheduling loop to end.
    pub fn stop(&mut self) {
        self.signal_shutdown();
        if let Some(t) = self.scheduler.take() {
            t.join().expect("scheduling thread");
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A job's model: `plugin` with `config_json` for `steps` steps (API form).
pub fn plugin_model(plugin: &str, steps: u64, config_json: &str) -> pb::ModelSpec {
    pb::ModelSpec {
        keep_best: None,
        early_stopping: None,
        steps,
        priority: 0,
        pooled: false,
        config: Some(pb::model_spec::Config::Plugin(pb::PluginConfig {
            plugin: plugin.into(),
            config_json: config_json.into(),
        })),
    }
}

/// A job's asset: the synthetic AR(1) series of `rows` rows (API form).
pub fn synthetic_asset(rows: u64, seed: u64) -> pb::AssetSpec {
    pb::AssetSpec {
        source: Some(pb::asset_spec::Source::Synthetic(pb::SyntheticAsset {
            rows,
            seed,
            sigma: 0.0,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The synthetic AR(1) dataset (a planted predictable component) with `rows` rows.
pub fn synthetic(rows: usize) -> RArc<Dataset> {
    RArc::new(synthetic_ar_dataset(SyntheticArSpec {
        rows,
        ..SyntheticArSpec::default()
    }))
}

/// A CPU task of `max_steps` steps on `dataset` with an already checked `config`.
pub fn cpu_task(
    task_id: &str,
    config: &str,
    seed: u64,
    max_steps: u64,
    dataset: &RArc<Dataset>,
) -> TaskSpec {
    TaskSpec {
        task_id: task_id.into(),
        config_json: config.into(),
        device: "cpu".into(),
        seed,
        max_steps,
        dataset: dataset.clone(),
    }
}

/// splitmix64: a tiny seeded PRNG whose state is the seed itself, for
/// property tests and simulations (the arbiter's).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// tli-rng's generator stepped from this raw state.
    pub fn next_u64(&mut self) -> u64 {
        let mut rng = tli_rng::Rng::from_state(self.0);
        let value = rng.next_u64();
        self.0 = rng.state();
        value
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
