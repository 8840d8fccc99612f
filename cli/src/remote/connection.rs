//! Connecting to a host: the endpoint (normalised, `http://` or `https://`
//! with `TLI_CA_FILE`), the bearer token, the async runtime a command runs
//! on, and how refused or failed calls read (`<code>: <message>`, `cannot
//! reach the tli host at …`).

use crate::args::Cli;
use anyhow::{anyhow, bail, Context, Result};
use std::future::Future;
use std::time::Duration;
use tli_core::error_chain::error_chain;
use tli_proto::v1::{
    resource_service_client::ResourceServiceClient, training_service_client::TrainingServiceClient,
};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

/// How long connecting may take before the host counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects and runs one command on a small current-thread runtime (the
/// arguments are checked before this, so mistakes show without a host).
pub(super) fn run<F, Fut>(cli: &Cli, command: F) -> Result<()>
where
    F: FnOnce(Remote) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let limit = Duration::from_secs(cli.timeout.max(1));
        let remote = Remote::connect(&cli.endpoint, cli.token.as_deref(), limit).await?;
        command(remote).await
    })
}

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone)]
pub(super) struct Auth(Option<MetadataValue<Ascii>>);

impl Interceptor for Auth {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

pub(super) type Authed = InterceptedService<Deadline, Auth>;

/// The channel with a deadline on every call's answer: a call the host does
/// not begin to answer within it ends as DEADLINE_EXCEEDED naming the call
/// (a frozen host no longer hangs the client). A stream's messages after
/// its first answer (`train watch`) are not limited.
#[derive(Clone)]
pub(super) struct Deadline {
    channel: Channel,
    limit: Duration,
}

impl Deadline {
    /// How long one call may wait for an answer (`--timeout`).
    pub(super) fn limit(&self) -> Duration {
        self.limit
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Deadline {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let call = request.uri().path().trim_start_matches('/').to_string();
        let limit = self.limit;
        let answer = self.channel.call(request);
        Box::pin(async move {
            match tokio::time::timeout(limit, answer).await {
                Ok(answer) => answer,
                Err(_) => Ok(Status::deadline_exceeded(deadline_message(&call, limit)).into_http()),
            }
        })
    }
}

/// What a call that got no answer in time says.
fn deadline_message(call: &str, limit: Duration) -> String {
    let call = call.rsplit('.').next().unwrap_or(call);
    format!(
        "the host did not answer {call} within {} s; it may be stuck or overloaded (check it \
         with `tli host status --state-dir …` or its log), or give the call longer with \
         --timeout SECONDS",
        limit.as_secs()
    )
}

/// A connected host.
pub(super) struct Remote {
    pub(super) channel: Deadline,
    pub(super) auth: Auth,
    /// The endpoint as connected to (`http://HOST:PORT`), for messages.
    pub(super) endpoint: String,
}

impl Remote {
    async fn connect(endpoint: &str, token: Option<&str>, limit: Duration) -> Result<Self> {
        let endpoint = normalize_endpoint(endpoint);
        let auth = match token.map(str::trim).filter(|t| !t.is_empty()) {
            Some(token) => {
                Auth(Some(format!("Bearer {token}").parse().map_err(|_| {
                    anyhow!("the token has characters a header cannot carry")
                })?))
            }
            None => Auth(None),
        };
        let mut builder = Endpoint::from_shared(endpoint.clone())
            .map_err(|e| anyhow!("invalid endpoint {endpoint:?}: {e}"))?
            .connect_timeout(CONNECT_TIMEOUT);
        if endpoint.starts_with("https://") {
            builder = builder
                .tls_config(tls_config()?)
                .map_err(|e| anyhow!("TLS for {endpoint}: {}", error_chain(&e)))?;
        } else if !endpoint.starts_with("http://") {
            bail!("invalid endpoint {endpoint:?}: use http://HOST:PORT or https://HOST:PORT");
        }
        // A host that accepts the connection but never speaks (stopped, stuck)
        // is as unreachable as one that refuses it.
        let channel = match tokio::time::timeout(limit, builder.connect()).await {
            Ok(channel) => channel.map_err(|e| unreachable_error(&endpoint, &error_chain(&e)))?,
            Err(_) => {
                return Err(unreachable_error(
                    &endpoint,
                    &format!("no answer to the connection within {} s", limit.as_secs()),
                ))
            }
        };
        Ok(Self {
            channel: Deadline { channel, limit },
            auth,
            endpoint,
        })
    }

    pub(super) fn training(&self) -> TrainingServiceClient<Authed> {
        TrainingServiceClient::with_interceptor(self.channel.clone(), self.auth.clone())
    }

    pub(super) fn resources(&self) -> ResourceServiceClient<Authed> {
        ResourceServiceClient::with_interceptor(self.channel.clone(), self.auth.clone())
    }
}

/// `host:port` → `http://host:port`; surrounding space and a trailing `/` go.
pub(super) fn normalize_endpoint(endpoint: &str) -> String {
    let e = endpoint.trim().trim_end_matches('/');
    if e.contains("://") {
        e.to_string()
    } else {
        format!("http://{e}")
    }
}

fn tls_config() -> Result<ClientTlsConfig> {
    let Some(path) = std::env::var_os("TLI_CA_FILE") else {
        bail!(
            "https endpoints need TLI_CA_FILE: a PEM file with the CA certificate that signed the host's certificate"
        );
    };
    let pem = std::fs::read(&path)
        .with_context(|| format!("TLI_CA_FILE: cannot read {}", path.to_string_lossy()))?;
    Ok(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
}

fn unreachable_error(endpoint: &str, reason: &str) -> anyhow::Error {
    anyhow!(
        "cannot reach the tli host at {endpoint}: {reason}; start one with `tli host serve` or set --endpoint / TLI_ENDPOINT"
    )
}

/// A gRPC code as words: `invalid argument`, `not found`, …
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid argument",
        Code::DeadlineExceeded => "deadline exceeded",
        Code::NotFound => "not found",
        Code::AlreadyExists => "already exists",
        Code::PermissionDenied => "permission denied",
        Code::ResourceExhausted => "resource exhausted",
        Code::FailedPrecondition => "failed precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out of range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// A refused call as one line: `<code name>: <message>` (main adds `error: `).
pub(super) fn api_error(remote: &Remote, status: Status) -> anyhow::Error {
    match not_grpc(&status) {
        Some(http) => anyhow!(
            "{} is not a tli host's API: it answered plain HTTP ({http}), not gRPC; is it the \
             status page's port? Point --endpoint / TLI_ENDPOINT at the address `tli host serve` \
             prints as \"listening on\" (its --listen, default 127.0.0.1:50051)",
            remote.endpoint
        ),
        None => status_error(&status, remote.auth.0.is_some()),
    }
}

/// The HTTP status of an answer that was not gRPC (a web server, the
/// status page): tonic reports it as a protocol error naming the status.
fn not_grpc(status: &Status) -> Option<String> {
    const MARK: &str = "while receiving response with status: ";
    let message = status.message();
    let at = message.find(MARK)?;
    let http = message[at + MARK.len()..].trim();
    (!http.starts_with("200")).then(|| http.to_string())
}

fn status_error(status: &Status, has_token: bool) -> anyhow::Error {
    let code = code_name(status.code());
    // A transport or protocol failure's reason is in its sources ("transport
    // error" alone says nothing; a host that speaks TLS says so in them).
    let mut chained = status.message().trim().to_string();
    let mut next = std::error::Error::source(status);
    while let Some(cause) = next {
        let reason = cause.to_string();
        if reason != "transport error" && !chained.contains(&reason) {
            chained = format!("{chained}: {reason}");
        }
        next = cause.source();
    }
    let message = chained.as_str();
    let mut text = if message.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {message}")
    };
    if status.code() == Code::Unauthenticated && !has_token {
        text.push_str(" (set --token or TLI_TOKEN)");
    }
    anyhow!(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::resources;
    use clap::Parser;
    use std::time::Instant;

    #[test]
    fn an_answer_that_is_not_grpc_is_told_apart() {
        let status = Status::internal(
            "protocol error: received message with invalid compression flag: 110 (valid flags \
             are 0 and 1) while receiving response with status: 404 Not Found",
        );
        assert_eq!(not_grpc(&status).as_deref(), Some("404 Not Found"));
        assert_eq!(not_grpc(&Status::internal("boom")), None);
    }

    #[test]
    fn an_unreachable_host_is_one_clear_line() {
        let cli =
            Cli::try_parse_from(["tli", "--endpoint", "http://127.0.0.1:1", "resources"]).unwrap();
        let started = Instant::now();
        let e = format!("{:#}", resources(&cli).unwrap_err());
        assert!(started.elapsed() < Duration::from_secs(4), "{e}");
        assert!(
            e.starts_with("cannot reach the tli host at http://127.0.0.1:1: "),
            "{e}"
        );
        assert!(
            e.ends_with("; start one with `tli host serve` or set --endpoint / TLI_ENDPOINT"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        assert!(e.to_lowercase().contains("refused"), "{e}");
    }

    #[test]
    fn endpoints_are_checked_and_normalised() {
        assert_eq!(
            normalize_endpoint("127.0.0.1:50051"),
            "http://127.0.0.1:50051"
        );
        assert_eq!(normalize_endpoint(" http://h:1/ "), "http://h:1");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt
            .block_on(Remote::connect("ftp://h:1", None, Duration::from_secs(5)))
            .err()
            .unwrap();
        assert!(e.to_string().contains("invalid endpoint"), "{e}");
        let e = rt
            .block_on(Remote::connect(
                "http://127.0.0.1:1",
                Some("bad\ntoken"),
                Duration::from_secs(5),
            ))
            .err()
            .unwrap();
        assert!(e.to_string().contains("token"), "{e}");
    }

    #[test]
    fn refusals_read_as_code_and_message() {
        assert_eq!(code_name(Code::InvalidArgument), "invalid argument");
        assert_eq!(code_name(Code::NotFound), "not found");
        let e = status_error(
            &Status::invalid_argument("models[0].steps: 0 is outside 1..=1000000000"),
            false,
        );
        assert_eq!(
            e.to_string(),
            "invalid argument: models[0].steps: 0 is outside 1..=1000000000"
        );
        let e = status_error(&Status::unauthenticated("missing token"), false);
        assert_eq!(
            e.to_string(),
            "unauthenticated: missing token (set --token or TLI_TOKEN)"
        );
        let e = status_error(&Status::unauthenticated("bad token"), true);
        assert_eq!(e.to_string(), "unauthenticated: bad token");
        assert_eq!(
            status_error(&Status::not_found(""), false).to_string(),
            "not found"
        );
    }
}
