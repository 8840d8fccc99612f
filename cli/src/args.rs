//! The `tli` command line, declared with clap.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use tli_core::byte_size::ByteSize;
use tli_core::executor::ExecutorKind;
use tli_core::strategy::{parse_margin, Strategy};
use tli_data::columns::{Target, UserColumn};
use tli_data::features::FeatureConfig;
use tli_data::zones::{LocalZone, ZoneError};
use tli_data::{BarSource, SourceError};
use tli_plugin_api::Device;

/// The help heading of the options only client commands use (they show in
/// every command's help, being global).
const CLIENT_OPTIONS: &str = "Client options (commands that call a host)";

#[derive(Parser, Debug)]
#[command(
    name = "tli",
    version,
    about = "Train trading models on futures data with dynamically loaded model plugins"
)]
pub struct Cli {
    /// Directory of plugin libraries (libtli_plugin_*.so). Default: <dir of tli>/plugins, else the dir of tli.
    #[arg(long, env = "TLI_PLUGIN_DIR", global = true)]
    pub plugin_dir: Option<PathBuf>,

    /// Extra contract specifications (TOML), added to the built-in ones. See docs/data.md.
    #[arg(long, env = "TLI_CONTRACTS", global = true)]
    pub contracts: Option<PathBuf>,

    /// Address of a `tli host serve` for the client commands (train start|watch|…, resources).
    #[arg(
        long,
        env = "TLI_ENDPOINT",
        default_value = "http://127.0.0.1:50051",
        global = true,
        help_heading = CLIENT_OPTIONS
    )]
    pub endpoint: String,

    /// Seconds a host has to answer each call (or TLI_TIMEOUT); a stream's
    /// later messages (`train watch`) are not limited.
    #[arg(
        long,
        env = "TLI_TIMEOUT",
        default_value_t = 300,
        global = true,
        value_name = "SECONDS",
        help_heading = CLIENT_OPTIONS
    )]
    pub timeout: u64,

    /// Bearer token for a host that listens beyond loopback (or TLI_TOKEN).
    #[arg(
        long,
        env = "TLI_TOKEN",
        global = true,
        hide_env_values = true,
        help_heading = CLIENT_OPTIONS
    )]
    pub token: Option<String>,

    /// Whether `--token` was written on the command line (not read from
    /// TLI_TOKEN); set by [`parse`](crate::parse). `tli host serve` refuses
    /// it: a host's own token comes from a file, out of the process list.
    #[arg(skip)]
    pub token_on_command_line: bool,

    /// Output format: tables for people, JSON (on stdout) for programs; `tli predict`
    /// also writes csv and parquet.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Table, global = true)]
    pub output: OutputFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
    /// `tli predict` only.
    Csv,
    /// `tli predict` only.
    Parquet,
}

impl OutputFormat {
    /// True for the formats only `tli predict` writes.
    pub fn is_data_only(self) -> bool {
        matches!(self, Self::Csv | Self::Parquet)
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Inspect plugins.
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Report libtorch, CUDA devices and what the plugin directory holds.
    Doctor,
    /// Train models.
    Train {
        #[command(subcommand)]
        command: TrainCommand,
    },
    /// Hyperparameter sweeps on a running host: trials of one plugin over a search space,
    /// packed onto the device as tasks of one job, bad ones stopped early by ASHA.
    Sweep {
        #[command(subcommand)]
        command: SweepCommand,
    },
    /// The training host: run jobs with the orchestrator, show their status.
    Host {
        #[command(subcommand)]
        command: Box<HostCommand>,
    },
    /// Devices, memory budgets, reservations and measured usage of a running host.
    Resources,
    /// PNG charts of a job read from a state directory's store (read-only, no
    /// host needed; safe while a host runs): see `tli train plot`.
    Plot(PlotArgs),
    /// Print a shell completion script.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Market data: generate, inspect and convert bar files; list contracts.
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
    /// Trained models: tasks trained on bar files with a checkpoint, and imported
    /// bundles. List, show, export and import them; load one on the host to serve
    /// predictions.
    Models {
        #[command(subcommand)]
        command: ModelsCommand,
    },
    /// Apply a trained model to a bar file: one row per bar with the model's
    /// forecasts (P10/P50/P90 or a point forecast, as log returns) or an agent's
    /// action and position, beside the realized returns where the file has them.
    /// The file is featurized with the model's own pipeline and the statistics of
    /// its training split. Write it with -o csv|json|parquet [--out FILE].
    Predict(PredictArgs),
    /// Trade a model's predictions on a bar file, bar by bar with no look-ahead: an agent's
    /// own positions, or a forecaster's by a position rule; priced with the contract's point
    /// value, commission and slippage (rolls of continuous series cost a roll, never earn
    /// the jump). Prints net and gross P&L, costs, Sharpe, Sortino, drawdown, trades and
    /// exposure beside buy-and-hold and flat; --ledger writes every bar.
    Backtest(BacktestArgs),
    /// A walk-forward job's out-of-sample record: every fold's model backtested on its own
    /// out-of-sample bars (which it never trained on), the folds concatenated into one
    /// ledger per model and asset, with forecast scores; per fold and over the whole span.
    WalkForward(WalkForwardArgs),
    /// Measure what a plugin's trainer costs (memory).
    Profile {
        #[command(subcommand)]
        command: ProfileCommand,
    },
    /// Train one task for a host with the Slurm executor (started by the
    /// host's batch script, not by people): connects back to the host, trains,
    /// records everything through it. See docs/scale-out.md.
    Worker(WorkerArgs),
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// The host's worker service, e.g. http://head-node:50051.
    #[arg(long)]
    pub host_url: String,
    /// The task to train.
    #[arg(long)]
    pub task: i64,
    /// The dispatch (lease) this worker acts under.
    #[arg(long)]
    pub dispatch: i64,
    /// File holding the host's worker token (in the shared directory).
    #[arg(long)]
    pub token_file: PathBuf,
    /// libtorch intra-op threads (default: the host's --slurm-cpus-per-task).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Seconds to keep retrying while the host cannot be reached (a host
    /// restart re-adopts its workers).
    #[arg(long, default_value_t = 600)]
    pub reconnect_seconds: u64,
}

#[derive(Subcommand, Debug)]
pub enum HostCommand {
    /// Serve the gRPC API (tli.v1) and run jobs until SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Run the orchestrator in the foreground on a state directory: resume
    /// interrupted tasks, submit the given jobs, run until every task is done.
    /// SIGINT/SIGTERM checkpoint running tasks and exit (they resume next time).
    Run(HostRunArgs),
    /// Jobs and tasks recorded in a state directory (read-only; safe while a host runs).
    Status {
        /// The host's state directory (read-only: safe while a host runs).
        #[arg(long, env = "TLI_STATE_DIR", default_value = ".tli")]
        state_dir: PathBuf,
        /// Only this job.
        #[arg(long)]
        job: Option<i64>,
    },
}

#[derive(Args, Debug)]
#[command(next_help_heading = "Server")]
pub struct ServeArgs {
    /// Address to listen on. Anything beyond loopback requires a token.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: String,
    /// File holding the bearer token clients must send (or TLI_SERVE_TOKEN). Rewrite it to
    /// rotate the token: the new one is in force within seconds, the old one stops working.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// TLS certificate and key (PEM); both or neither.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The TLS certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Seconds to wait for running tasks to checkpoint at shutdown.
    #[arg(long, default_value_t = 30)]
    pub shutdown_timeout: u64,
    /// Where the status page (and /metrics) is served: IP:PORT, or `off`.
    /// Default: loopback, on the port after --listen's (any free port when
    /// that one is taken or --listen's port is 0). Beyond loopback it needs
    /// the token, like the API.
    #[arg(long)]
    pub ui_listen: Option<String>,
    /// Serve Prometheus metrics on their own port too (IP:PORT); they are
    /// always at /metrics of the status page's port.
    #[arg(long)]
    pub metrics_listen: Option<String>,
    // Last, so that its headings follow the server's options.
    #[command(flatten)]
    pub host: HostOptions,
}

/// Options shared by `tli host run` and `tli host serve`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Host")]
pub struct HostOptions {
    /// Where the job store, checkpoints and the host lock live.
    #[arg(long, env = "TLI_STATE_DIR", default_value = ".tli")]
    pub state_dir: PathBuf,
    /// Admission strategy: sequential, parallel:N or auto (as many as fit in
    /// memory; on the cpu device at most one per core).
    #[arg(long, default_value = "auto")]
    pub strategy: Strategy,
    /// Device memory budget, e.g. 512MiB or 8GiB. Default: half of RAM on cpu,
    /// 90% of the device on cuda.
    #[arg(long)]
    pub memory_budget: Option<ByteSize>,
    /// Safety margin added to every memory estimate, a fraction from 0 to 10 (0.1 = 10 %).
    #[arg(long, default_value_t = 0.1, value_parser = parse_margin)]
    pub margin: f64,
    /// `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Leave interrupted tasks alone instead of resuming them.
    #[arg(long)]
    pub no_resume: bool,
    /// CPU cores to share among running tasks (default: all); with `auto` on
    /// the cpu device, also the most tasks running at once.
    #[arg(long)]
    pub cores: Option<usize>,
    /// Where every task's TensorBoard event files go (DIR/job-N/task-M/).
    /// Default: <state-dir>/tb.
    #[arg(long, value_name = "DIR")]
    pub tensorboard_dir: Option<PathBuf>,
    /// Write no TensorBoard event files.
    #[arg(long, conflicts_with = "tensorboard_dir")]
    pub no_tensorboard: bool,
    /// A directory bar files named by jobs may be in (repeatable; `/` allows
    /// any file the host can read). Default: the working directory and the
    /// bundled sample data. Other paths are refused (PERMISSION_DENIED).
    #[arg(long = "data-root", value_name = "DIR")]
    pub data_roots: Vec<PathBuf>,
    /// Watch the plugin directory and load plugin files added or changed
    /// while the host runs (polled every SECONDS, default 1). Without it,
    /// `tli plugins rescan` loads them on request.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "1")]
    pub watch_plugins: Option<f64>,
    #[command(flatten)]
    pub executor: ExecutorArgs,
}

impl HostOptions {
    /// The root of the TensorBoard event files; `None` with --no-tensorboard.
    pub fn tensorboard_root(&self) -> Option<PathBuf> {
        (!self.no_tensorboard).then(|| {
            self.tensorboard_dir
                .clone()
                .unwrap_or_else(|| self.state_dir.join("tb"))
        })
    }
}

/// Where tasks run: here, or as Slurm jobs (docs/scale-out.md).
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Executor (Slurm: docs/scale-out.md)")]
pub struct ExecutorArgs {
    /// Where a job's tasks run unless its spec says: `local` (runner threads
    /// in this host) or `slurm` (one Slurm job per task, running `tli worker`).
    #[arg(long, default_value = "local", value_parser = parse_executor)]
    pub executor: ExecutorKind,
    /// Slurm partition for task jobs.
    #[arg(long)]
    pub slurm_partition: Option<String>,
    /// Slurm account for task jobs.
    #[arg(long)]
    pub slurm_account: Option<String>,
    /// One more sbatch option, passed as given after tli's own (repeatable),
    /// e.g. --slurm-sbatch-arg=--qos=high.
    #[arg(long = "slurm-sbatch-arg", allow_hyphen_values = true)]
    pub slurm_sbatch_args: Vec<String>,
    /// CPUs per Slurm task (also the worker's libtorch threads).
    #[arg(long, default_value_t = 1)]
    pub slurm_cpus_per_task: u32,
    /// Slurm jobs of this host at most at once (pending or running).
    #[arg(long, default_value_t = 1000)]
    pub slurm_max_jobs: usize,
    /// Split each GPU into this many Slurm `shard`s and ask CUDA tasks for
    /// shards covering their estimate (needs --slurm-gpu-memory).
    #[arg(long, requires = "slurm_gpu_memory")]
    pub slurm_gpu_shards: Option<u32>,
    /// Memory of one GPU of the cluster, e.g. 80GiB (with --slurm-gpu-shards).
    #[arg(long)]
    pub slurm_gpu_memory: Option<String>,
    /// Seconds before a task's time limit at which Slurm tells its worker to checkpoint.
    #[arg(long, default_value_t = 120)]
    pub slurm_signal_seconds: u32,
    /// Seconds a running Slurm job's worker may take to reach this host
    /// before the job is cancelled and counted lost (three such jobs fail
    /// the task: a wrong --worker-url, a firewall, a node without tli).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub slurm_attach_timeout: u64,
    /// Where Slurm's commands (sbatch, squeue, scancel, sacct) are; default: PATH.
    #[arg(long)]
    pub slurm_bin_dir: Option<PathBuf>,
    /// A directory every node sees at the same path: checkpoints of Slurm
    /// tasks, the worker token, job output. Default: the state directory.
    #[arg(long)]
    pub shared_dir: Option<PathBuf>,
    /// How workers reach this host's worker service. Default: http://<this
    /// host's name>:<port> of --listen (serve) or --worker-listen (run).
    #[arg(long)]
    pub worker_url: Option<String>,
    /// `tli host run` only: where the worker service listens.
    #[arg(long, default_value = "0.0.0.0:0")]
    pub worker_listen: String,
    /// The `tli` binary on the nodes. Default: this one.
    #[arg(long)]
    pub worker_binary: Option<PathBuf>,
    /// The plugin directory on the nodes. Default: this host's.
    #[arg(long)]
    pub worker_plugin_dir: Option<PathBuf>,
}

/// `[SYMBOL=]FILE`: a bar file, the symbol of its bars optionally named
/// (`ES=prices.csv`).
fn parse_bar_source(text: &str) -> Result<BarSource, SourceError> {
    BarSource::parse_arg(text)
}

/// An IANA time-zone name (`America/New_York`).
fn parse_time_zone(text: &str) -> Result<String, ZoneError> {
    LocalZone::parse(text).map(|zone| zone.name().to_string())
}

fn parse_executor(text: &str) -> Result<ExecutorKind, String> {
    text.parse()
}

#[derive(Args, Debug)]
pub struct HostRunArgs {
    #[command(flatten)]
    pub host: HostOptions,
    /// Job spec files (JSON) to submit; see docs/orchestrator.md. Repeatable.
    #[arg(long)]
    pub submit: Vec<PathBuf>,
    /// Submit the jobs, print every task with its memory estimate, and exit
    /// without running anything (the tasks stay queued in the state directory).
    #[arg(long)]
    pub plan: bool,
}

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Write deterministic synthetic bars for a listed contract as DBN.
    Synth(SynthArgs),
    /// Summarize bar files (DBN, Parquet, CSV): range, gaps, rolls, contract; checks every row.
    Inspect {
        /// Bar files; `SYMBOL=FILE` names the symbol of a file's bars (`ES=prices.csv`).
        #[arg(required = true, value_name = "[SYMBOL=]FILE", value_parser = parse_bar_source)]
        files: Vec<BarSource>,
        /// IANA time zone of timestamps written without one (`America/New_York`);
        /// timestamps with Z or an offset are converted to UTC without it.
        #[arg(long, value_name = "ZONE", value_parser = parse_time_zone)]
        tz: Option<String>,
        /// Also show what plugins receive from each file: every feature with its
        /// role (observed past / known future), every target with its horizon and
        /// scale, the bar interval, and the rows marked as gaps or rolls.
        #[arg(long)]
        features: bool,
        /// Feature pipeline config (JSON) for --features, as in a job spec's "features".
        #[arg(long, value_name = "JSON", requires = "features")]
        feature_config: Option<String>,
        /// With --features: one of your own columns, as for `train start --feature-column`.
        #[arg(long = "feature-column", value_name = "NAME:ROLE[:OPTION…]",
              value_parser = parse_user_column, requires = "features")]
        feature_columns: Vec<UserColumn>,
        /// With --features: the target, as for `train start --target`.
        #[arg(long, value_name = "TARGET", value_parser = parse_target, requires = "features")]
        target: Option<Target>,
    },
    /// Convert a bar file to another format (chosen by the destination's extension).
    Convert {
        /// The bar file to read; `SYMBOL=FILE` names the symbol of its bars.
        #[arg(value_name = "[SYMBOL=]FROM", value_parser = parse_bar_source)]
        source: BarSource,
        /// IANA time zone of FROM's timestamps written without one (`America/New_York`).
        #[arg(long, value_name = "ZONE", value_parser = parse_time_zone)]
        tz: Option<String>,
        /// The file to write; its extension picks the format (.csv, .parquet, .dbn, .dbn.zst).
        #[arg(value_name = "TO")]
        destination: PathBuf,
    },
    /// List the known contract specifications.
    Contracts,
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Parent symbol (quarterly contracts with rolls), e.g. ES.FUT, or a root for one instrument.
    #[arg(long, default_value = "ES.FUT")]
    pub symbol: String,
    /// Bar interval: 1s, 1m, 1h or 1d.
    #[arg(long, default_value = "1m")]
    pub interval: String,
    /// Number of bars of the front series.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(2..=100_000_000))]
    pub bars: u64,
    /// First bar at or after this UTC date or time.
    #[arg(long, default_value = "2024-01-02")]
    pub start: String,
    /// Seed of the random walk (the same seed writes the same bars).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Correlation of consecutive standardized returns, in (-1, 1); 0 = nothing to predict.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub planted_strength: f64,
    /// Write one instrument instead of quarterly contracts.
    #[arg(long)]
    pub single_contract: bool,
    /// Daily bars of one instrument with two planted columns of your own: `ofi`
    /// (observed past; moves the next bar's return by 0.5σ per unit) and `event`
    /// (known future; `FOMC` bars move +1.5σ, `CPI` and `none` nothing), to a .csv or
    /// .parquet file (docs/data.md, "Your own columns").
    #[arg(long, conflicts_with_all = ["planted_strength", "single_contract"])]
    pub planted_covariates: bool,
    /// Output file: .dbn or .dbn.zst (or .parquet / .csv for the front series).
    #[arg(long, short = 'O')]
    pub out: PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum PluginsCommand {
    /// The plugins a running host loaded, and files it refused with the reason
    /// (or, with --local, those in the plugin directory, without a host).
    List {
        /// Scan the plugin directory here instead of asking the host.
        #[arg(long)]
        local: bool,
    },
    /// Make a running host load plugin files added to (or rebuilt in) its
    /// plugin directory since it started; running tasks keep their version.
    Rescan,
}

#[derive(Subcommand, Debug)]
pub enum TrainCommand {
    /// Start a job on a running host (models × assets).
    Start(StartArgs),
    /// Follow a job with live progress bars until it finishes.
    Watch {
        /// The job to follow.
        job: u64,
        /// Milliseconds between progress updates at least (0: the host's default, 500).
        #[arg(long, default_value_t = 0)]
        interval_ms: u32,
        /// Also show running tasks' routine checkpoints (running ⇄ checkpointing).
        #[arg(long, short = 'v')]
        verbose: bool,
    },
    /// A job's tasks, states, progress and latest metrics.
    Status {
        /// The job.
        job: u64,
        /// Order the tasks by this metric, best first (e.g. valid_trade_sharpe,
        /// valid_qrisk_p50): lower is better for losses, errors, risks, drawdowns and
        /// costs, higher for the rest; tasks without it come last.
        #[arg(long, value_name = "METRIC")]
        rank: Option<String>,
    },
    /// Jobs on the host, newest first, with filters.
    List(ListArgs),
    /// Stop a job (or one task): graceful with a checkpoint, or forced with a deadline.
    Stop {
        /// The job.
        job: u64,
        /// Only this task of the job.
        #[arg(long)]
        task: Option<u64>,
        /// Do not wait for a checkpoint: tell the plugin to return now (see --deadline-ms).
        #[arg(long)]
        force: bool,
        /// With --force: milliseconds before the task is marked cancelled anyway.
        #[arg(long, default_value_t = 10_000)]
        deadline_ms: u32,
    },
    /// Resume a job's cancelled, failed and interrupted tasks from their last checkpoints
    /// (with --steps, its completed tasks too: trained N steps further).
    Resume {
        /// The job.
        job: u64,
        /// Train every task of the job N more steps beyond those it has done, completed
        /// (or stopped early) ones included; each goes on from its final checkpoint.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
        steps: Option<u64>,
        /// Train on the job's data files as they are now, although they changed since the
        /// job was submitted (a task refuses a changed file otherwise); the tasks' history
        /// records which files changed and how.
        #[arg(long)]
        accept_changed_inputs: bool,
    },
    /// PNG charts of a job from a running host: each metric per task over steps,
    /// and each device's memory over time (reservations, budget, measured total).
    Plot(TrainPlotArgs),
    /// Train plugins inside this process (no host), on a bar file or the synthetic AR(1) dataset.
    Local(LocalArgs),
}

#[derive(Subcommand, Debug)]
pub enum SweepCommand {
    /// Start a sweep: a job whose tasks are the trials (follow it with `tli train watch`).
    Start(Box<SweepStartArgs>),
    /// A sweep's result table: each trial's searched values, its metric at every rung,
    /// its final value and status, and the best trial; --plot draws the metric by trial.
    Results(SweepResultsArgs),
}

#[derive(Args, Debug)]
pub struct SweepStartArgs {
    /// A job spec file with a "sweep" (docs/orchestrator.md, "Sweeps"); or the flags below.
    #[arg(long, conflicts_with_all = ["plugin", "space"])]
    pub spec: Option<PathBuf>,
    /// Job name.
    #[arg(long, default_value = "sweep")]
    pub name: String,
    /// The plugin whose configs are searched.
    #[arg(long, short = 'p')]
    pub plugin: Option<String>,
    /// Asset, as for `train start` (a bar file, SYMBOL=FILE or synthetic:ROWS[:SEED[:SIGMA]]).
    /// Repeatable: each asset is a sweep of its own (or one with --pooled).
    #[arg(long, short = 'a')]
    pub asset: Vec<String>,
    /// The search space, as JSON or @FILE: config key → one of {"choice": [..]},
    /// {"grid": [..]}, {"uniform": [lo, hi]}, {"log_uniform": [lo, hi]}, {"int": [lo, hi]}.
    #[arg(long, value_name = "JSON|@FILE")]
    pub space: Option<String>,
    /// Config keys every trial shares (JSON object); the plugin's defaults for the rest.
    #[arg(long, value_name = "JSON")]
    pub config: Option<String>,
    /// Random draws per grid point (without grids: the number of trials).
    #[arg(long, default_value_t = 1)]
    pub samples: u32,
    /// The validation metric that ranks trials.
    #[arg(long, default_value = "valid_loss")]
    pub metric: String,
    /// Which way the metric gets better (default: by its name).
    #[arg(long, value_name = "min|max")]
    pub mode: Option<String>,
    /// Steps of a trial that is never stopped.
    #[arg(long, value_name = "N")]
    pub max_steps: Option<u64>,
    /// ASHA: steps before the first rung (a multiple of the plugin's validation cadence).
    #[arg(long, value_name = "N", conflicts_with = "run_all")]
    pub grace_period: Option<u64>,
    /// ASHA: each rung keeps the top 1/η of the trials.
    #[arg(
        long,
        value_name = "η",
        default_value_t = 3,
        conflicts_with = "run_all"
    )]
    pub reduction_factor: u32,
    /// Train every trial to --max-steps (no early stopping; a baseline for ASHA).
    #[arg(long)]
    pub run_all: bool,
    /// Each trial one task across every asset.
    #[arg(long)]
    pub pooled: bool,
    /// Inputs and targets of every trial (a job spec's "features").
    #[command(flatten)]
    pub features: FeatureArgs,
    /// Trials keep only their newest checkpoints (default: each its best by --metric).
    #[arg(long)]
    pub keep_last: bool,
    /// The job seed (task seeds are seed + task ordinal).
    #[arg(long, default_value_t = tli_core::job::DEFAULT_SEED)]
    pub seed: u64,
    /// The seed of the trials' random draws (default: --seed).
    #[arg(long)]
    pub sample_seed: Option<u64>,
    /// `cpu` or `cuda:N`: where the trials train.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Follow the sweep, then print its result table.
    #[arg(long)]
    pub watch: bool,
}

#[derive(Args, Debug)]
pub struct SweepResultsArgs {
    /// The sweep's job.
    pub job: u64,
    /// Also draw the metric of every trial against steps into this PNG file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct TrainPlotArgs {
    /// The job to chart.
    pub job: u64,
    #[command(flatten)]
    pub chart: ChartArgs,
}

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// The host's state directory (its store is read, never written).
    #[arg(long, env = "TLI_STATE_DIR", default_value = ".tli")]
    pub state_dir: PathBuf,
    /// The job to chart (as for `tli train plot JOB`).
    #[arg(value_name = "JOB", required_unless_present = "job_flag")]
    pub job: Option<u64>,
    /// The same as JOB (the older spelling, kept for scripts).
    #[arg(long = "job", value_name = "JOB", hide = true, conflicts_with = "job")]
    pub job_flag: Option<u64>,
    #[command(flatten)]
    pub chart: ChartArgs,
}

impl PlotArgs {
    /// The job, given as JOB or `--job JOB`.
    pub fn job(&self) -> u64 {
        self.job.or(self.job_flag).unwrap_or_default()
    }
}

/// What `tli train plot` and `tli plot` draw, and where.
#[derive(Args, Debug, Clone)]
pub struct ChartArgs {
    /// Only this metric, as a chart of its own (repeat for several). Default: an overview, a
    /// figure per model (a panel per metric curve), the single values in scalars.csv.
    #[arg(long = "metric", value_name = "NAME")]
    pub metrics: Vec<String>,
    /// A chart for every metric reported, single values included (no overview or table).
    #[arg(long, conflicts_with = "metrics")]
    pub all: bool,
    /// Directory for the PNG files, created if missing. Default: ./tli-plots/job-N.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Width of each chart in pixels.
    #[arg(long, default_value_t = 1200, value_parser = clap::value_parser!(u32).range(320..=8000))]
    pub width: u32,
    /// Height of each chart in pixels.
    #[arg(long, default_value_t = 700, value_parser = clap::value_parser!(u32).range(320..=8000))]
    pub height: u32,
    /// At most this many points per line; longer series are thinned evenly (first and last kept).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(2..=100_000))]
    pub max_points: u32,
}

#[derive(Args, Debug)]
pub struct StartArgs {
    /// A job spec file (JSON, docs/orchestrator.md); or build one with the flags below.
    #[arg(long, conflicts_with_all = ["plugin", "asset"])]
    pub spec: Option<PathBuf>,
    /// Job name.
    #[arg(long, default_value = "job")]
    pub name: String,
    /// Plugin to train; repeat for several models.
    #[arg(long, short = 'p')]
    pub plugin: Vec<String>,
    /// Config per plugin as JSON or PLUGIN=JSON (as for `train local`).
    #[arg(long)]
    pub config: Vec<String>,
    /// Asset: a bar file path on the host, `SYMBOL=FILE` to name the symbol of its
    /// bars (`ES=prices.csv`), or `synthetic:ROWS[:SEED[:SIGMA]]`. Repeatable.
    #[arg(long, short = 'a')]
    pub asset: Vec<String>,
    /// IANA time zone of the bar files' timestamps written without one
    /// (`America/New_York`); applies to every file asset.
    #[arg(long, value_name = "ZONE", value_parser = parse_time_zone, conflicts_with = "spec")]
    pub tz: Option<String>,
    /// Cuts of every bar file asset and split dates (a job spec sets them per asset
    /// and in its "features").
    #[command(flatten)]
    pub dates: DateCuts,
    /// Walk-forward evaluation: train every (model, asset) once per fold, each fold a task,
    /// the out-of-sample windows consecutive at the end of the bars (2 to 50).
    #[arg(long, value_name = "N", conflicts_with = "spec")]
    pub folds: Option<u32>,
    /// With --folds: usable rows per out-of-sample window (default: the last half of the
    /// rows shared by the folds).
    #[arg(long, value_name = "ROWS", requires = "folds")]
    pub test_bars: Option<u64>,
    /// Walk-forward out-of-sample windows by date instead of --folds/--test-bars: each fold's
    /// window starts at one of these (comma-separated, increasing) and ends at the next.
    #[arg(long, value_name = "TIME,…", value_delimiter = ',', value_parser = parse_time,
          conflicts_with_all = ["spec", "test_bars"])]
    pub test_starts: Vec<i64>,
    /// With --folds or --test-starts: a sliding training window of this many rows
    /// (default: expanding).
    #[arg(long, value_name = "ROWS")]
    pub train_bars: Option<u64>,
    /// Train each plugin once across all the assets (one pooled task per plugin,
    /// the asset as a static covariate) instead of once per asset. Needs plugins
    /// with the `pooled` capability (plugin API 1.1; `tli plugins list` shows it).
    #[arg(long)]
    pub pooled: bool,
    /// Inputs and targets of every model (a job spec's "features").
    #[command(flatten)]
    pub features: FeatureArgs,
    /// Best checkpoints and early stopping of every model (a job spec sets them per model).
    #[command(flatten)]
    pub selection: SelectionArgs,
    /// Optimisation steps per task (the same default as `train local`).
    #[arg(long, default_value_t = tli_core::job::DEFAULT_STEPS)]
    pub steps: u64,
    /// The job seed (task seeds are seed + task ordinal).
    #[arg(long, default_value_t = tli_core::job::DEFAULT_SEED)]
    pub seed: u64,
    /// `cpu` or `cuda:N`: where the tasks train.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Follow the job after starting it.
    #[arg(long)]
    pub watch: bool,
    /// With --watch: also show running tasks' routine checkpoints.
    #[arg(long, short = 'v', requires = "watch")]
    pub verbose: bool,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only jobs with a task in this state (queued, running, completed, failed, cancelled, interrupted). Repeatable.
    #[arg(long)]
    pub state: Vec<String>,
    /// Only jobs with a task of this plugin.
    #[arg(long)]
    pub plugin: Option<String>,
    /// Only jobs with a task on this asset (as `train status` shows it).
    #[arg(long)]
    pub asset: Option<String>,
    /// newest (default), oldest or name.
    #[arg(long, default_value = "newest")]
    pub sort: String,
    /// Jobs per page.
    #[arg(long, default_value_t = 20)]
    pub page_size: u32,
    /// Page token from a previous listing.
    #[arg(long)]
    pub page_token: Option<String>,
    /// Follow page tokens until the end.
    #[arg(long)]
    pub all: bool,
}

#[derive(Args, Debug)]
pub struct LocalArgs {
    /// Plugin to train; repeat to train several one after another.
    #[arg(long = "plugin", short = 'p', required = true)]
    pub plugins: Vec<String>,
    /// Optimisation steps per plugin (the same default as `train start`).
    #[arg(long, default_value_t = tli_core::job::DEFAULT_STEPS, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub steps: u64,
    /// Steps per call into the plugin (progress is reported between calls).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub slice: u64,
    /// Config as JSON, `@file.json`, or `PLUGIN=JSON` / `PLUGIN=@file` for one plugin. Repeatable.
    #[arg(long)]
    pub config: Vec<String>,
    #[command(flatten)]
    pub run: InProcessArgs,
    #[command(flatten)]
    pub data: DataArgs,
    /// Keep the trained model as a bundle in this new directory (model.json,
    /// weights.safetensors, checksums.sha256) for `tli predict`; with several
    /// --plugin, one bundle per plugin under DIR/<plugin>. Needs --data.
    #[arg(long, value_name = "DIR", requires = "data")]
    pub save: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum ModelsCommand {
    /// Every model: tasks trained on bar files with a checkpoint (id = the task id) and
    /// imported bundles (id = their name), with plugin, assets, steps, size, metric and
    /// whether it is loaded. From the host (--endpoint), or with --state-dir from a
    /// state directory's store (read-only, no host needed).
    List {
        #[command(flatten)]
        from: ModelsFrom,
    },
    /// One model in full: its card (config, feature pipeline, training statistics,
    /// contract, data and metrics) and, when loaded, its reservation.
    Show {
        /// The model: a task id or an imported model's name (`tli models list`).
        model: String,
        #[command(flatten)]
        from: ModelsFrom,
    },
    /// Write a model as a bundle in DIR, a new directory (model.json,
    /// weights.safetensors, checksums.sha256): a task's model from its newest good
    /// checkpoint. The bundle is checked before it appears.
    Export {
        /// The model: a task id or an imported model's name.
        model: String,
        /// The bundle directory to create.
        dir: PathBuf,
        #[command(flatten)]
        from: ModelsFrom,
    },
    /// Copy a bundle into the host (--endpoint) as a model of its own; refused if
    /// damaged, or if no loaded plugin accepts it.
    Import {
        /// The bundle directory (`tli models export`, `tli train local --save`).
        dir: PathBuf,
        /// The model's name on the host (default: the directory's name).
        #[arg(long)]
        name: Option<String>,
    },
    /// Keep a model resident on the host to answer `tli predict --model ID` and the
    /// Predict API; its memory is reserved like a training task's (`tli resources`).
    Load {
        /// The model's id (`tli models list`).
        model: String,
    },
    /// Free a resident model (after the requests using it end).
    Unload {
        /// The model's id.
        model: String,
    },
    /// Trace a bundle's FP32 forecaster into a TorchScript module for other runtimes
    /// (Python's torch.jit.load, libtorch): OUT gets model.pt, the example inputs it was
    /// traced on (the last 256 forecastable bars of --data, or from --start) and
    /// signature.json (inputs, output columns, target scales, each output row's time).
    /// INT8 TFTs and RL agents are refused (docs/models.md).
    Torchscript {
        /// The bundle directory.
        bundle: PathBuf,
        /// The directory to create.
        out: PathBuf,
        /// Bars of a contract the model was trained on, featurized with its statistics.
        #[arg(long, value_name = "[SYMBOL=]FILE", value_parser = parse_bar_source)]
        data: BarSource,
        /// First bar whose forecast goes into the example (default: the last 256 bars).
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        start: Option<i64>,
        /// `cpu` or `cuda:N`: the device the traced module is made for (it runs there).
        #[arg(long, default_value = "cpu")]
        device: Device,
    },
}

/// Where `tli models` reads models from.
#[derive(Args, Debug, Clone)]
pub struct ModelsFrom {
    /// Read this state directory's store (read-only) instead of asking the host;
    /// works with no host running (the full `tli` binary only).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

impl ModelsCommand {
    /// The state directory to read offline, if this command reads one.
    pub fn state_dir(&self) -> Option<&std::path::Path> {
        match self {
            Self::List { from } | Self::Show { from, .. } | Self::Export { from, .. } => {
                from.state_dir.as_deref()
            }
            Self::Import { .. }
            | Self::Load { .. }
            | Self::Unload { .. }
            | Self::Torchscript { .. } => None,
        }
    }

    /// Whether this command runs in this process (it loads plugins).
    pub fn is_local(&self) -> bool {
        self.state_dir().is_some() || matches!(self, Self::Torchscript { .. })
    }
}

#[derive(Args, Debug)]
pub struct PredictArgs {
    /// The model: a bundle directory (`tli train local --save DIR`, `tli models
    /// export`), applied in this process; or the id of a model loaded on the host
    /// (`tli models load ID`), which the host applies (--endpoint).
    #[arg(long, value_name = "BUNDLE|ID")]
    pub model: PathBuf,
    #[command(flatten)]
    pub bars: BarWindow,
    /// Write to this file (atomically) instead of standard output; with `-o table`
    /// the format follows its extension (.csv, .json, .parquet).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// `cpu` or `cuda:N`: where a bundle is applied in this process (a host's model runs on
    /// the host's device).
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// libtorch intra-op threads (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=1024))]
    pub threads: Option<i32>,
}

/// A bar file and the bars of it a command writes or trades (`tli predict`,
/// `tli backtest`): earlier bars still serve as the model's look-back.
#[derive(Args, Clone, Debug)]
pub struct BarWindow {
    /// Bar file (DBN, Parquet or CSV) of a contract the model was trained on;
    /// `SYMBOL=FILE` names the symbol of its bars.
    #[arg(long, value_name = "[SYMBOL=]FILE", value_parser = parse_bar_source)]
    pub data: BarSource,
    /// IANA time zone of the file's timestamps written without one.
    #[arg(long, value_name = "ZONE", value_parser = parse_time_zone)]
    pub tz: Option<String>,
    /// First bar (a date, an RFC 3339 time or UTC nanoseconds); earlier bars still serve
    /// as look-back, and an agent starts flat here.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub start: Option<i64>,
    /// Last bar (inclusive).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub end: Option<i64>,
}

impl BarWindow {
    /// The file with its time zone.
    pub fn source(&self) -> BarSource {
        BarSource {
            tz: self.tz.clone(),
            ..self.data.clone()
        }
    }

    /// `--start` is not after `--end`.
    pub fn is_ordered(&self) -> bool {
        !matches!((self.start, self.end), (Some(s), Some(e)) if s > e)
    }
}

/// How a backtest trades a model's outputs and what it pays.
#[derive(Args, Debug, Clone)]
pub struct TradingArgs {
    /// A forecaster's position rule: sign (of P50), scaled (P50 over the P10–P90 width,
    /// fractional contracts) or threshold[:K] (trade only when |P50| > K × width; K 0.1).
    /// Agents trade their own actions.
    #[arg(long, default_value = "sign")]
    pub rule: String,
    /// The largest position a rule takes, in contracts.
    #[arg(long, default_value_t = 1.0)]
    pub max_contracts: f64,
    /// Commission per contract traded (currency); default: an agent's own, else 2.0.
    #[arg(long)]
    pub commission: Option<f64>,
    /// Slippage in ticks per contract traded; default: an agent's own, else 0.5.
    #[arg(long)]
    pub slippage_ticks: Option<f64>,
}

#[derive(Args, Debug)]
pub struct WalkForwardArgs {
    /// The walk-forward job (trained with "walk_forward" or --folds).
    pub job: u64,
    /// The host's state directory (read-only: run it beside a host or after it).
    #[arg(long, default_value = ".tli")]
    pub state_dir: PathBuf,
    #[command(flatten)]
    pub trading: TradingArgs,
    /// Write each series' out-of-sample ledger and charts into this directory (created if
    /// missing): `model<M>-<SYMBOL>/ledger.csv`, `equity.png`, `forecast.png`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BacktestArgs {
    /// The model: a bundle directory (`tli train local --save DIR`, `tli models
    /// export`), traded in this process; or the id of a model loaded on the host
    /// (`tli models load ID`), which the host trades (--endpoint).
    #[arg(long, value_name = "BUNDLE|ID")]
    pub model: PathBuf,
    #[command(flatten)]
    pub bars: BarWindow,
    #[command(flatten)]
    pub trading: TradingArgs,
    /// Write every bar's close, position, gross and net P&L, costs and equity to this file
    /// (.csv, .json or .parquet), atomically.
    #[arg(long, value_name = "FILE")]
    pub ledger: Option<PathBuf>,
    /// Draw into this directory (created if missing) `equity.png`: the equity curve against
    /// buy-and-hold with the drawdown beneath; and for a forecaster `forecast.png`: its P50
    /// with the P10–P90 band over the realized returns (the last 300 bars).
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Device of a bundle traded in this process (a host's model runs on the host's).
    #[arg(long, default_value = "cpu")]
    pub device: Device,
}

/// Whether `--model` names a bundle directory (applied in this process)
/// rather than a model on the host: an existing directory, or any path with
/// a `/` (a model id never has one).
fn names_a_bundle(model: &Path) -> bool {
    model.is_dir() || model.as_os_str().to_string_lossy().contains('/')
}

impl PredictArgs {
    /// `--model` names a bundle, not a model on the host.
    pub fn is_bundle(&self) -> bool {
        names_a_bundle(&self.model)
    }
}

impl BacktestArgs {
    /// `--model` names a bundle, not a model on the host.
    pub fn is_bundle(&self) -> bool {
        names_a_bundle(&self.model)
    }
}

fn parse_time(text: &str) -> Result<i64, String> {
    tli_data::timefmt::parse(text).map_err(|e| e.to_string())
}

/// Seed, device and threads of an in-process run (`train local`, `profile memory`).
#[derive(Args, Debug, Clone)]
pub struct InProcessArgs {
    /// The run's seed: the same seed gives the same run (the same default as a job's).
    #[arg(long, default_value_t = tli_core::job::DEFAULT_SEED)]
    pub seed: u64,
    /// `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// libtorch intra-op threads (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=1024))]
    pub threads: Option<i32>,
}

/// `keep_best` and `early_stopping` from the command line, for every model.
#[derive(Args, Debug, Clone, Default)]
pub struct SelectionArgs {
    /// Keep the best checkpoint by this validation metric (valid_loss, valid_qrisk_p50,
    /// valid_return_mean, valid_sharpe …), apart from the newest; the task's model
    /// (`tli predict --model ID`) is then its best checkpoint (`ID:last` the newest).
    #[arg(long, value_name = "METRIC", conflicts_with = "spec")]
    pub keep_best: Option<String>,
    /// With --keep-best: how many best checkpoints to keep.
    #[arg(long, value_name = "K", requires = "keep_best",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub keep_best_k: Option<u32>,
    /// Stop a task when this validation metric has not improved in --patience validations
    /// in a row (its best checkpoint is kept and is its model).
    #[arg(
        long,
        value_name = "METRIC",
        requires = "patience",
        conflicts_with = "spec"
    )]
    pub early_stopping: Option<String>,
    /// With --early-stopping: validations without improvement before the task stops.
    #[arg(long, value_name = "N", requires = "early_stopping")]
    pub patience: Option<u32>,
    /// With --early-stopping: an improvement must exceed this.
    #[arg(long, value_name = "DELTA", requires = "early_stopping")]
    pub min_delta: Option<f64>,
    /// Which way the metrics above get better (default: by name; losses, errors and
    /// drawdowns lower, returns and ratios higher).
    #[arg(long, value_name = "min|max")]
    pub metric_mode: Option<String>,
}

/// The dataset of an in-process run (`train local`, `profile memory`).
/// Where a bar file's bars are cut and split by time (a date, an RFC 3339
/// time or UTC nanoseconds each).
#[derive(Args, Debug, Clone, Default)]
pub struct DateCuts {
    /// Use only the bars at or after this time of every bar file.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub start: Option<i64>,
    /// Use only the bars at or before this time.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub end: Option<i64>,
    /// The validation split starts at this bar (instead of valid_fraction).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub valid_start: Option<i64>,
    /// The test split is every bar from this time on (instead of test_fraction).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub test_start: Option<i64>,
}

impl DateCuts {
    /// Whether any is given.
    pub fn any(&self) -> bool {
        self.start.is_some()
            || self.end.is_some()
            || self.valid_start.is_some()
            || self.test_start.is_some()
    }

    /// A feature config (JSON object) with the split dates set on it.
    pub fn apply_to_features(
        &self,
        features: Option<&str>,
    ) -> Result<Option<String>, serde_json::Error> {
        if self.valid_start.is_none() && self.test_start.is_none() {
            return Ok(features.map(str::to_string));
        }
        let mut value: serde_json::Value = match features {
            Some(text) => serde_json::from_str(text)?,
            None => serde_json::json!({}),
        };
        if let Some(object) = value.as_object_mut() {
            for (key, time) in [
                ("valid_start", self.valid_start),
                ("test_start", self.test_start),
            ] {
                if let Some(t) = time {
                    object.insert(key.into(), t.into());
                }
            }
        }
        Ok(Some(value.to_string()))
    }
}

/// The model inputs and targets of a command that trains: the user's own
/// columns, the built-in features, the target (a job spec's "features").
#[derive(Args, Debug, Clone, Default)]
pub struct FeatureArgs {
    /// Feature pipeline settings as JSON or @FILE, as a job spec's "features" (docs/data.md);
    /// the flags below are applied on top.
    #[arg(long, value_name = "JSON|@FILE")]
    pub features: Option<String>,
    /// One of your own columns as an input: NAME:ROLE[:OPTION…], ROLE observed_past,
    /// known_future or static; options real|categorical, none|zscore|log1p|diff|pct_change,
    /// fill=refuse|zero|ffill|ffill:N, levels=N (the cap) and, last, file=PATH (a covariate
    /// file; default the bar file). Repeatable.
    #[arg(long = "feature-column", value_name = "NAME:ROLE[:OPTION…]",
          value_parser = parse_user_column)]
    pub columns: Vec<UserColumn>,
    /// Leave out the built-in features (returns, volatility, range, volume, calendar).
    #[arg(long)]
    pub no_builtin_features: bool,
    /// What to forecast: fwd_logret (default), fwd_realized_vol, fwd_range, fwd_sign or
    /// column:NAME (a column of the bar file, h bars ahead).
    #[arg(long, value_name = "TARGET", value_parser = parse_target)]
    pub target: Option<Target>,
    /// Target horizons in bars, comma-separated (default 1).
    #[arg(long, value_name = "H,…", value_delimiter = ',')]
    pub target_horizons: Vec<usize>,
}

impl FeatureArgs {
    /// Whether any flag is given.
    pub fn any(&self) -> bool {
        self.features.is_some()
            || !self.columns.is_empty()
            || self.no_builtin_features
            || self.target.is_some()
            || !self.target_horizons.is_empty()
    }

    /// The feature config these flags give (JSON object), on top of
    /// `--features` (`None`: nothing given). Checked here, so a bad column
    /// fails before anything is sent.
    pub fn to_json(&self) -> anyhow::Result<Option<String>> {
        if !self.any() {
            return Ok(None);
        }
        let mut value: serde_json::Value = match &self.features {
            Some(text) => {
                let text = match text.strip_prefix('@') {
                    Some(path) => std::fs::read_to_string(path)
                        .map_err(|e| anyhow::anyhow!("--features @{path}: cannot read it: {e}"))?,
                    None => text.clone(),
                };
                serde_json::from_str(&text)
                    .map_err(|e| anyhow::anyhow!("--features is not JSON: {e}"))?
            }
            None => serde_json::json!({}),
        };
        let Some(object) = value.as_object_mut() else {
            anyhow::bail!("--features must be a JSON object, as a job spec's \"features\"");
        };
        if !self.columns.is_empty() {
            let columns = object
                .entry("columns")
                .or_insert_with(|| serde_json::json!([]));
            let Some(list) = columns.as_array_mut() else {
                anyhow::bail!("--features: \"columns\" must be a list");
            };
            for c in &self.columns {
                list.push(serde_json::to_value(c)?);
            }
        }
        if self.no_builtin_features {
            object.insert("builtin".into(), false.into());
        }
        if let Some(target) = &self.target {
            object.insert("target".into(), serde_json::to_value(target)?);
        }
        if !self.target_horizons.is_empty() {
            object.insert(
                "target_horizons".into(),
                serde_json::to_value(&self.target_horizons)?,
            );
        }
        let config: FeatureConfig =
            serde_json::from_value(value.clone()).map_err(|e| anyhow::anyhow!("features: {e}"))?;
        config
            .check()
            .map_err(|e| anyhow::anyhow!("features: {e}"))?;
        Ok(Some(value.to_string()))
    }
}

fn parse_user_column(text: &str) -> Result<UserColumn, String> {
    let column = UserColumn::parse_arg(text)?;
    column.check().map_err(|e| e.to_string())?;
    Ok(column)
}

fn parse_target(text: &str) -> Result<Target, String> {
    Target::parse_arg(text)
}

#[derive(Args, Debug, Clone)]
pub struct DataArgs {
    /// Bar file to train on (DBN, Parquet or CSV), through the feature pipeline;
    /// `SYMBOL=FILE` names the symbol of its bars (`ES=prices.csv`).
    /// Without it: the synthetic AR(1) dataset.
    #[arg(long, value_name = "[SYMBOL=]FILE", value_parser = parse_bar_source)]
    pub data: Option<BarSource>,
    /// IANA time zone of the file's timestamps written without one
    /// (`America/New_York`); timestamps with Z or an offset are converted without it.
    #[arg(long, value_name = "ZONE", value_parser = parse_time_zone, requires = "data")]
    pub tz: Option<String>,
    /// Inputs and targets (with --data).
    #[command(flatten)]
    pub features: FeatureArgs,
    #[command(flatten)]
    pub dates: DateCuts,
    /// Rows of the synthetic AR(1) dataset (without --data).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(64..=10_000_000))]
    pub rows: u64,
}

#[derive(Subcommand, Debug)]
pub enum ProfileCommand {
    /// Measure a plugin trainer's memory: build it for a config and dataset, run a
    /// few steps, and report parameters, gradients, optimizer state and activations
    /// from its tensors, beside the process's peak resident memory (and the CUDA
    /// allocator's peak on a GPU). Each config runs in its own child process;
    /// two or more are shown side by side with ratios to the first.
    Memory(ProfileMemoryArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ProfileMemoryArgs {
    /// The plugin whose trainer to measure.
    #[arg(long = "plugin", short = 'p')]
    pub plugin: String,
    /// Config as JSON or `@file.json`; repeat to compare several (ratios are to the
    /// first). None: the plugin's default config.
    #[arg(long)]
    pub config: Vec<String>,
    /// Name of each config in the table and chart, in order (default: config 1, 2, …).
    #[arg(long)]
    pub label: Vec<String>,
    /// Training steps to run before reading the figures (the peak covers them all).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub steps: u64,
    #[command(flatten)]
    pub run: InProcessArgs,
    /// Skip the warm-up trainer (one step, discarded) that each child runs before
    /// its baseline, so that libtorch's code pages and thread pools touched by a
    /// first step are not counted as the trainer's memory.
    #[arg(long)]
    pub no_warmup: bool,
    /// Also write the comparison as a bar chart (PNG).
    #[arg(long, value_name = "FILE.png")]
    pub chart: Option<PathBuf>,
    #[command(flatten)]
    pub data: DataArgs,
    /// Internal: measure exactly one config in this process and print its JSON
    /// (what each child of `profile memory` runs).
    #[arg(long, hide = true)]
    pub child: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own consistency checks (argument ids, conflicts, defaults).
    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every argument a person can see in `--help` says what it is for.
    #[test]
    fn every_shown_argument_has_help_text() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "tli", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    }
}
