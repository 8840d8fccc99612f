//! The gRPC control API (`tli.v1`, see proto/tli/v1) over an
//! [`Orchestrator`]: what `tli host serve` runs.
//!
//! * [`training`]: `TrainingService` (start, watch, status, list, stop, resume,
//!   history); [`history`]: `GetTrainingHistory`'s messages ↔ the store's history.
//! * [`plugins`]: `PluginService` (the loaded and refused plugins).
//! * [`resources`]: `ResourceService` (the device budget and reservations).
//! * [`models`]: `ModelService` (models, bundles in chunks, resident models,
//!   `Predict` and `PredictStream`).
//! * [`worker_service`]: `WorkerService`, what `tli worker` processes call
//!   (with the worker token; served when the host has a Slurm executor).
//! * [`auth`]: the bearer-token interceptor.
//! * [`convert`]: requests → job specs, progress → messages, errors → `Status`.
//! * [`request_errors`]: tonic's own statuses for malformed, oversized or
//!   empty requests, given the contract's codes.
//!
//! [`router`] assembles everything (with gRPC health and reflection v1 and
//! v1alpha) into a tonic router; the caller binds the listener and decides
//! when to stop. A [`ShutdownSignal`] ends every `WatchTraining` stream and
//! makes the services refuse new work, so that the server can stop without
//! waiting for clients that watch forever.

pub mod auth;
pub mod cert_dates;
pub mod convert;
pub mod models;
pub mod plugins;
pub mod request_errors;
pub mod resources;
pub mod training;
pub mod watch_hub;
pub mod worker_service;

// Moved to tli-wire (shared with the clients); re-exported here while the host still names them this way.
pub use tli_wire::{history, job_request, typed_configs};

use crate::telemetry::{RpcMetricsLayer, Telemetry};
use auth::Auth;
use request_errors::RequestErrorsLayer;
use std::sync::Arc;
use tli_proto::v1::model_service_server::ModelServiceServer;
use tli_proto::v1::plugin_service_server::PluginServiceServer;
use tli_proto::v1::resource_service_server::ResourceServiceServer;
use tli_proto::v1::training_service_server::TrainingServiceServer;
use tli_proto::v1::worker_service_server::WorkerServiceServer;
use tli_runtime::orchestrator::engine::Orchestrator;
use tokio::sync::watch;
use tonic::server::NamedService;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::Router;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::Status;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;
use tower::layer::util::{Identity as NoLayer, Stack};

/// Raised once when the host begins to shut down; services watch it.
#[derive(Clone, Debug)]
pub struct ShutdownSignal {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for ShutdownSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl ShutdownSignal {
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::channel(false).0),
        }
    }

    /// Ends every watch stream and makes the services refuse new work.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.tx.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

/// The status of a request that arrives while the host shuts down.
pub fn shutting_down() -> Status {
    Status::unavailable("the host is shutting down; running tasks are being checkpointed")
}

/// Runs blocking orchestrator or store work off the async workers.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, Status>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, Status> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Status::internal(format!("request handler failed: {e}"))))
}

/// Runs a store read of unbounded size (a listing) on the calling worker
/// thread with `block_in_place`, instead of handing it to a blocking thread
/// as [`blocking`] does. Reads never wait for a write (the store's read
/// connections), so they are short, and every hand-off between threads
/// costs: with every core busy training, a woken thread can wait for the
/// scheduler's next tick (4 ms here) before it runs (docs/reliability.md,
/// "Load"). `block_in_place` still hands the worker's queue to another
/// thread, which the response then crosses, so a read that is always
/// small (one job's status) runs inline in its handler instead. Outside a
/// multi-threaded runtime (tests on a current-thread one) it falls back to
/// [`blocking`].
pub(crate) async fn quick_read<T, F>(f: F) -> Result<T, Status>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, Status> + Send + 'static,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(f)
    } else {
        blocking(f).await
    }
}

/// TLS material for the server, as PEM.
#[derive(Clone)]
pub struct TlsPem {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

/// How the server authenticates clients and encrypts connections.
#[derive(Clone, Default)]
pub struct ServerConfig {
    /// When set, every RPC except health needs `authorization: Bearer <token>`.
    pub token: Option<String>,
    pub tls: Option<TlsPem>,
    /// When set, the worker service is served and needs this token (never
    /// the control API's token; a client's token is never a worker's).
    pub worker_token: Option<String>,
    /// Where every RPC is counted and timed (the same one `/metrics` encodes).
    pub telemetry: Arc<Telemetry>,
}

/// The names the health service reports, besides "" (the whole server).
pub fn service_names() -> [&'static str; 4] {
    [
        <TrainingServiceServer<training::TrainingApi> as NamedService>::NAME,
        <PluginServiceServer<plugins::PluginApi> as NamedService>::NAME,
        <ResourceServiceServer<resources::ResourceApi> as NamedService>::NAME,
        <ModelServiceServer<models::ModelApi> as NamedService>::NAME,
    ]
}

/// Reports the server and every service as serving or not.
pub async fn set_health(reporter: &HealthReporter, serving: bool) {
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    reporter.set_service_status("", status).await;
    for name in service_names() {
        reporter.set_service_status(name, status).await;
    }
}

/// Why a router could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("TLS: {0} (the certificate file must hold PEM certificates, the key file a PEM private key)")]
    Tls(String),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

fn with_tls(builder: Server, tls: &TlsPem) -> Result<Server, BuildError> {
    builder
        .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert, &tls.key)))
        // tonic's Display is only "transport error"; the reason is in the sources.
        .map_err(|e| BuildError::Tls(tli_core::error_chain::error_chain(&e)))
}

/// Checks that the certificate and key make a TLS server configuration
/// (so a command can refuse bad files before it opens anything).
pub fn check_tls(tls: &TlsPem) -> Result<(), BuildError> {
    with_tls(Server::builder(), tls).map(|_| ())
}

/// Accepted connections of `listener` through `gate` (its cap and
/// timeouts: crate::connections; with `tls`, plain-text peers are told to
/// use `https://`), with `TCP_NODELAY` set: without it small
/// responses waited for the peer's delayed ACK (about 40 ms per call on
/// loopback, docs/benchmarks.md).
pub fn incoming(
    listener: tokio::net::TcpListener,
    gate: &crate::connections::ConnectionGate,
    tls: bool,
) -> crate::connections::GatedIncoming {
    gate.incoming(listener, tls)
}

/// How often the server pings each connection (HTTP/2 PING): a live peer
/// answers, so a quiet stream (a watch of a queued job) is never silent
/// for the connection gate's idle limit, and a dead one is dropped.
pub const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(60);

/// A server builder with the host's connection settings.
fn server_builder() -> Server {
    Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(20)))
}

/// The API's router: every request is counted and timed for `/metrics`, and
/// tonic's statuses for malformed requests get the contract's codes.
pub type ApiRouter = Router<Stack<RequestErrorsLayer, Stack<RpcMetricsLayer, NoLayer>>>;

/// The services, the health service (always without a token) and
/// reflection, behind the token check when `config.token` is set. Health
/// starts as SERVING for the server and each service. The token check is
/// returned too: the HTTP side shares it, and a new token given to it
/// (`Auth::set_token`) takes effect on both at once.
pub async fn router(
    orchestrator: Arc<Orchestrator>,
    shutdown: &ShutdownSignal,
    config: &ServerConfig,
) -> Result<(ApiRouter, HealthReporter, Auth), BuildError> {
    let auth = match &config.token {
        Some(token) => Auth::token(token),
        None => Auth::none(),
    };
    let mut builder = server_builder();
    if let Some(tls) = &config.tls {
        builder = with_tls(builder, tls)?;
    }
    let (reporter, health) = tonic_health::server::health_reporter();
    set_health(&reporter, true).await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(tli_proto::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let training = training::TrainingApi::new(orchestrator.clone(), shutdown.clone());
    let plugins = plugins::PluginApi::new(orchestrator.clone());
    let resources = resources::ResourceApi::new(orchestrator.clone());
    let models = models::ModelApi::new(orchestrator.clone(), shutdown.clone());
    let workers = config.worker_token.as_deref().map(|token| {
        InterceptedService::new(
            WorkerServiceServer::new(worker_service::WorkerApi::new(orchestrator))
                .max_encoding_message_size(usize::MAX),
            Auth::token(token),
        )
    });
    let router = builder
        .layer(RpcMetricsLayer::new(config.telemetry.clone()))
        .layer(RequestErrorsLayer)
        .add_service(health)
        .add_service(InterceptedService::new(reflection_v1, auth.clone()))
        .add_service(InterceptedService::new(reflection_v1alpha, auth.clone()))
        .add_service(TrainingServiceServer::with_interceptor(
            training,
            auth.clone(),
        ))
        .add_service(PluginServiceServer::with_interceptor(plugins, auth.clone()))
        .add_service(ResourceServiceServer::with_interceptor(
            resources,
            auth.clone(),
        ))
        .add_service(ModelServiceServer::with_interceptor(models, auth.clone()))
        .add_optional_service(workers);
    Ok((router, reporter, auth))
}

/// Only the worker service (for `tli host run`, which serves no control API).
pub fn worker_router(orchestrator: Arc<Orchestrator>, worker_token: &str) -> Router {
    server_builder().add_service(InterceptedService::new(
        WorkerServiceServer::new(worker_service::WorkerApi::new(orchestrator))
            .max_encoding_message_size(usize::MAX),
        Auth::token(worker_token),
    ))
}
