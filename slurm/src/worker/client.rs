//! The worker's connection to its host: the worker service over gRPC with
//! the worker token, blocking calls for the runner's thread, and retries
//! while the host is unreachable (a host that restarts re-adopts its
//! workers; their calls go through once it is back).

use super::WorkerError;
use std::future::Future;
use std::time::{Duration, Instant};
use tli_proto::v1::worker_service_client::WorkerServiceClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// How long connecting may take per attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one call may take (attach sends every dataset).
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Adds `authorization: Bearer <worker token>` to every call.
#[derive(Clone)]
pub struct WorkerAuth(MetadataValue<Ascii>);

impl Interceptor for WorkerAuth {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

pub type Client = WorkerServiceClient<InterceptedService<Channel, WorkerAuth>>;

/// A host connection usable from plain threads.
pub struct HostConnection {
    runtime: tokio::runtime::Runtime,
    client: Client,
    url: String,
    /// How long calls are retried while the host cannot be reached.
    reconnect_for: Duration,
}

/// A failure worth retrying: the host is down, restarting or unreachable.
fn is_transient(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::Unknown | Code::DeadlineExceeded | Code::Cancelled
    )
}

impl HostConnection {
    /// A lazily connecting client of `url` (`http://host:port`).
    pub fn new(url: &str, token: &str, reconnect_for: Duration) -> Result<Self, WorkerError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| WorkerError::Setup(format!("cannot start the async runtime: {e}")))?;
        let endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| WorkerError::Setup(format!("invalid --host-url {url:?}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(CALL_TIMEOUT)
            .tcp_nodelay(true);
        let channel = {
            let _guard = runtime.enter();
            endpoint.connect_lazy()
        };
        let header = format!("Bearer {}", token.trim()).parse().map_err(|_| {
            WorkerError::Setup("the worker token has characters a header cannot carry".into())
        })?;
        let client = WorkerServiceClient::with_interceptor(channel, WorkerAuth(header))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(Self {
            runtime,
            client,
            url: url.to_string(),
            reconnect_for,
        })
    }

    /// Runs `call` until it succeeds, fails for good, or the host has been
    /// unreachable for longer than the reconnect window.
    pub fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T, WorkerError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let started = Instant::now();
        let mut wait = Duration::from_millis(200);
        loop {
            match self.runtime.block_on(call(self.client.clone())) {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if status.code() == Code::FailedPrecondition => {
                    return Err(WorkerError::LeaseLost(status.message().to_string()))
                }
                Err(status) if is_transient(&status) && started.elapsed() < self.reconnect_for => {
                    tracing::warn!(
                        "{what}: the host at {} did not answer ({}: {}); retrying in {:.1}s",
                        self.url,
                        status.code(),
                        status.message(),
                        wait.as_secs_f64()
                    );
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
                Err(status) => {
                    return Err(WorkerError::Host {
                        call: what.to_string(),
                        url: self.url.clone(),
                        code: status.code(),
                        message: status.message().to_string(),
                    })
                }
            }
        }
    }

    /// One attempt, no retries (heartbeats: the next one is a second away).
    pub fn call_once<T, F, Fut>(&self, call: F) -> Result<T, Status>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.runtime
            .block_on(call(self.client.clone()))
            .map(tonic::Response::into_inner)
    }
}
