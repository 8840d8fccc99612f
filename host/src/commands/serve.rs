//! `tli host serve`: the orchestrator behind the gRPC control API.
//!
//! The scheduling loop runs on its own thread
//! ([`Orchestrator::run_until_shutdown`]); the gRPC server runs on a small
//! tokio runtime. Listening beyond loopback requires a token (`--token-file`
//! or `TLI_SERVE_TOKEN`); with a token every RPC but health must carry
//! `authorization: Bearer <token>`. `--tls-cert`/`--tls-key` turn on TLS.
//!
//! When ready it prints one line to stderr:
//! `tli host serve: listening on 127.0.0.1:50051 (token: required|not required, tls: on|off)`
//! (the bound address, so `--listen 127.0.0.1:0` shows the real port),
//! then where the status page is (`--ui-listen`, default loopback on the next
//! port) and, with `--metrics-listen`, where Prometheus metrics are on their
//! own: `tli host serve: status page at http://127.0.0.1:50052/ (...)`. The
//! HTTP side follows the API's token rule ([`crate::web`]).
//!
//! On SIGINT or SIGTERM: health turns NOT_SERVING, every watch stream ends,
//! new work is refused, the server stops accepting connections, running tasks
//! checkpoint and become `interrupted` (waiting up to `--shutdown-timeout`
//! seconds; tasks still running then — a plugin stuck in `step` — are marked
//! `interrupted` without a new checkpoint, and runner threads a forced stop
//! gave up on are not waited for), and the process exits 0. A second signal
//! exits at once (130).

use super::host::open_host;
use crate::api::{self, ServerConfig, ShutdownSignal, TlsPem};
use crate::connections::{ConnectionGate, ConnectionLimits};
use crate::orchestrator::engine::Orchestrator;
use crate::telemetry::Telemetry;
use crate::web::{self, Serves};
use anyhow::{anyhow, bail, Context, Result};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tli_cli::args::ServeArgs;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

/// How long the server may take to finish in-flight requests once the
/// scheduling thread is done.
const SERVER_STOP_GRACE: Duration = Duration::from_secs(5);

pub(super) fn serve(plugin_dir: &Path, contracts: Option<&Path>, args: &ServeArgs) -> Result<()> {
    let addr = resolve(&args.listen)?;
    let token = configured_token(args)?;
    if token.is_none() && !addr.ip().is_loopback() {
        bail!(
            "refusing to listen on {addr} without a token: pass --token-file FILE or set \
             TLI_SERVE_TOKEN (clients send it with --token / TLI_TOKEN)"
        );
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsPem {
            cert: std::fs::read(cert)
                .with_context(|| format!("--tls-cert {}: cannot read", cert.display()))?,
            key: std::fs::read(key)
                .with_context(|| format!("--tls-key {}: cannot read", key.display()))?,
        }),
        (None, None) => None,
        _ => bail!("--tls-cert and --tls-key go together"),
    };
    if let Some(tls) = &tls {
        api::check_tls(tls).context("--tls-cert/--tls-key")?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        if let Some(warning) = api::cert_dates::certificate_warning(&tls.cert, now) {
            let cert = args.tls_cert.as_deref().unwrap_or(Path::new("?"));
            eprintln!(
                "tli host serve: warning: --tls-cert {}: {warning}",
                cert.display()
            );
        }
    }
    let listener =
        std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    // The HTTP side is bound (and checked) before the store is opened.
    let web = web_listeners(args, local, token.is_some())?;
    if tls.is_some() {
        for (what, listener) in [
            ("--ui-listen", &web.page),
            ("--metrics-listen", &web.metrics),
        ] {
            if let Some((_, addr)) = listener {
                if !addr.ip().is_loopback() {
                    bail!(
                        "{what} {addr} with TLS: the status page and metrics are plain HTTP, \
                         and the token would cross the network in clear; keep them on \
                         loopback (reach them through an SSH tunnel) or put a TLS proxy in front"
                    );
                }
            }
        }
    }

    let opened = open_host(plugin_dir, contracts, &args.host, Some(local))?;
    let orchestrator = Arc::new(opened.host);
    let worker_token = match &opened.slurm {
        Some(_) if tls.is_some() => bail!(
            "--executor slurm with TLS: workers speak plain gRPC to the host for now; serve \
             without --tls-cert on a network the cluster trusts, with a token"
        ),
        Some(slurm) => Some(super::executor::worker_token(slurm)?),
        None => None,
    };
    // One telemetry per server: the RPC layer, `/metrics` and the engine
    // (checkpoint timings, as one of its observers) share it.
    let telemetry = Arc::new(Telemetry::new());
    orchestrator.observe(telemetry.clone());
    let config = ServerConfig {
        token,
        tls,
        worker_token,
        telemetry,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tli-grpc")
        .enable_all()
        .build()
        .context("cannot start the server runtime")?;
    let shutdown_timeout = Duration::from_secs(args.shutdown_timeout);
    let result = runtime.block_on(run(
        orchestrator,
        listener,
        local,
        config,
        web,
        shutdown_timeout,
        args.token_file.clone(),
    ));
    // Blocking handlers still running (a forced stop's deadline) are not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The address to bind: an `IP:PORT` or `HOST:PORT` (the first address it resolves to).
fn resolve(listen: &str) -> Result<SocketAddr> {
    resolve_option("--listen", listen)
}

fn resolve_option(option: &str, listen: &str) -> Result<SocketAddr> {
    listen
        .to_socket_addrs()
        .with_context(|| format!("{option} {listen}: not an address (IP:PORT or HOST:PORT)"))?
        .next()
        .ok_or_else(|| anyhow!("{option} {listen}: resolves to no address"))
}

/// The HTTP listeners: the status page (with /metrics), and metrics alone.
struct WebListeners {
    page: Option<(std::net::TcpListener, SocketAddr)>,
    metrics: Option<(std::net::TcpListener, SocketAddr)>,
}

/// Binds `--ui-listen` (default: loopback on the port after the API's, or
/// any free one) and `--metrics-listen`.
fn web_listeners(args: &ServeArgs, api: SocketAddr, token: bool) -> Result<WebListeners> {
    let bound = |listener: std::net::TcpListener| -> Result<_> {
        let addr = listener.local_addr()?;
        Ok(Some((listener, addr)))
    };
    let page = match args.ui_listen.as_deref() {
        Some("off") => None,
        Some(listen) => {
            let addr = resolve_option("--ui-listen", listen)?;
            bound(web::bind(addr, Serves::PageAndMetrics, token)?)?
        }
        None => {
            let loopback = std::net::Ipv4Addr::LOCALHOST.into();
            let next_port = match api.port() {
                0 | u16::MAX => 0,
                p => p + 1,
            };
            let preferred = SocketAddr::new(loopback, next_port);
            match web::bind(preferred, Serves::PageAndMetrics, token) {
                Ok(listener) => bound(listener)?,
                Err(_) if next_port != 0 => bound(web::bind(
                    SocketAddr::new(loopback, 0),
                    Serves::PageAndMetrics,
                    token,
                )?)?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    let metrics = match args.metrics_listen.as_deref() {
        None | Some("off") => None,
        Some(listen) => {
            let addr = resolve_option("--metrics-listen", listen)?;
            bound(web::bind(addr, Serves::MetricsOnly, token)?)?
        }
    };
    Ok(WebListeners { page, metrics })
}

/// The bearer token from `--token-file` (wins) or `TLI_SERVE_TOKEN`;
/// surrounding whitespace is ignored and an empty variable counts as unset.
/// How often `--token-file` is looked at for a new token.
const TOKEN_FILE_POLL: Duration = Duration::from_secs(2);

/// Watches `--token-file` and puts a new token in force as soon as the file
/// holds one (the previous token then stops working): rotating the token
/// needs no restart. A file that cannot be read or holds no valid token
/// leaves the current token in force, with a warning.
async fn follow_token_file(path: std::path::PathBuf, auth: crate::api::auth::Auth) {
    use std::os::unix::fs::MetadataExt;
    let version = |path: &Path| {
        std::fs::metadata(path)
            .ok()
            .map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec(), m.ctime_nsec()))
    };
    let mut seen = version(&path);
    let mut current = read_token_file(&path).ok();
    loop {
        tokio::time::sleep(TOKEN_FILE_POLL).await;
        let now = version(&path);
        if now == seen {
            continue;
        }
        seen = now;
        match read_token_file(&path) {
            Ok(token) if Some(&token) != current.as_ref() => {
                auth.set_token(&token);
                current = Some(token);
                eprintln!(
                    "tli host serve: --token-file {} changed: the new token is in force, the \
                     previous one no longer works",
                    path.display()
                );
            }
            Ok(_) => {}
            Err(e) => eprintln!(
                "tli host serve: warning: {e:#}; the current token stays in force until the file \
                 holds a valid one"
            ),
        }
    }
}

/// The token `path` holds (trimmed; printable ASCII, not empty).
fn read_token_file(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--token-file {}: cannot read", path.display()))?;
    let token = text.trim().to_string();
    if token.is_empty() {
        bail!("--token-file {}: the file is empty", path.display());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!(
            "--token-file {}: the token must be printable ASCII without spaces (it travels in a \
             header)",
            path.display()
        );
    }
    Ok(token)
}

fn configured_token(args: &ServeArgs) -> Result<Option<String>> {
    let (token, origin) = if let Some(path) = &args.token_file {
        let token = read_token_file(path)?;
        warn_if_readable_by_others(path);
        (token, format!("--token-file {}", path.display()))
    } else {
        match std::env::var("TLI_SERVE_TOKEN") {
            Ok(t) if !t.trim().is_empty() => (t.trim().to_string(), "TLI_SERVE_TOKEN".into()),
            Ok(_) | Err(std::env::VarError::NotPresent) => return Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => bail!("TLI_SERVE_TOKEN is not valid UTF-8"),
        }
    };
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!(
            "{origin}: the token must be printable ASCII without spaces (it travels in a header)"
        );
    }
    Ok(Some(token))
}

fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "warning: token file {} is readable by other users (chmod 600 it)",
                path.display()
            );
        }
    }
}

async fn run(
    orchestrator: Arc<Orchestrator>,
    listener: std::net::TcpListener,
    local: SocketAddr,
    config: ServerConfig,
    web: WebListeners,
    shutdown_timeout: Duration,
    token_file: Option<std::path::PathBuf>,
) -> Result<()> {
    // Handlers first, so a signal right after the ready line is not lost.
    let mut signals = ShutdownSignals::install()?;

    let shutdown = ShutdownSignal::new();
    let (router, health, auth) = api::router(orchestrator.clone(), &shutdown, &config).await?;
    if let Some(path) = token_file {
        tokio::spawn(follow_token_file(path, auth.clone()));
    }
    let listener = tokio::net::TcpListener::from_std(listener)?;
    // One cap over every listener, below the descriptor limit.
    let gate = ConnectionGate::new(ConnectionLimits::for_this_process());
    let (stop_server, server_stopped) = oneshot::channel::<()>();
    let mut server = tokio::spawn(router.serve_with_incoming_shutdown(
        api::incoming(listener, &gate, config.tls.is_some()),
        async {
            let _ = server_stopped.await;
        },
    ));

    // The HTTP side stops with the gRPC server (below, through `web_stop`).
    let (web_stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut web_lines = Vec::new();
    for (listener, addr, serves) in [
        web.page.map(|(l, a)| (l, a, Serves::PageAndMetrics)),
        web.metrics.map(|(l, a)| (l, a, Serves::MetricsOnly)),
    ]
    .into_iter()
    .flatten()
    {
        let routes = web::router(
            orchestrator.clone(),
            shutdown.clone(),
            auth.clone(),
            serves,
            config.telemetry.clone(),
        );
        let mut stop = web_stop.subscribe();
        let gate = gate.clone();
        tokio::spawn(async move {
            if let Err(e) = web::serve(listener, &gate, routes, async move {
                let _ = stop.recv().await;
            })
            .await
            {
                eprintln!("tli host serve: HTTP server on {addr}: {e}");
            }
        });
        web_lines.push(match serves {
            Serves::PageAndMetrics => {
                format!("status page at http://{addr}/ (Prometheus metrics at /metrics)")
            }
            Serves::MetricsOnly => format!("Prometheus metrics at http://{addr}/metrics"),
        });
    }

    let (scheduler_done, mut scheduler) = oneshot::channel::<Result<(), String>>();
    let scheduling = orchestrator.clone();
    std::thread::Builder::new()
        .name("tli-scheduler".into())
        .spawn(move || {
            let mut guard = super::host::StoreGuard::new();
            let result = scheduling
                .run_until_shutdown(Duration::from_millis(50), |o| guard.check(o))
                .map_err(|e| e.to_string())
                .and_then(|()| guard.outcome());
            let _ = scheduler_done.send(result);
        })
        .context("cannot start the scheduling thread")?;

    eprintln!(
        "tli host serve: listening on {local} (token: {}, tls: {})",
        if config.token.is_some() {
            "required"
        } else {
            "not required"
        },
        if config.tls.is_some() { "on" } else { "off" }
    );
    for line in &web_lines {
        eprintln!("tli host serve: {line}");
    }
    let limits = gate.limits();
    eprintln!(
        "tli host serve: at most {} connections at once ({} descriptors, {} kept for the \
         store and checkpoints); silent ones close after {} s ({} s before a first byte)",
        limits.max_open,
        crate::connections::descriptor_limit().0,
        crate::connections::HEADROOM,
        limits.idle.as_secs(),
        limits.first_byte.as_secs()
    );

    // Wait for a signal, or for the scheduler or the server to end on their own (a failure).
    let mut failure: Option<anyhow::Error> = None;
    let mut scheduler_result: Option<Result<(), String>> = None;
    let mut server_result = None;
    let why = tokio::select! {
        name = signals.next() => name,
        r = &mut scheduler => {
            let r = r.unwrap_or_else(|_| Err("the scheduling thread panicked".into()));
            failure = Some(anyhow!("the scheduling loop stopped: {}", match &r {
                Ok(()) => "without a shutdown request".to_string(),
                Err(e) => e.clone(),
            }));
            scheduler_result = Some(r);
            "scheduler stopped"
        }
        r = &mut server => {
            failure = Some(match &r {
                Ok(Ok(())) => anyhow!("the gRPC server stopped on its own"),
                Ok(Err(e)) => anyhow!("the gRPC server failed: {e}"),
                Err(e) => anyhow!("the gRPC server task failed: {e}"),
            });
            server_result = Some(r);
            "server stopped"
        }
    };

    // A second signal ends the process at once.
    tokio::spawn(async move {
        let name = signals.next().await;
        eprintln!(
            "tli host serve: second signal ({name}): exiting without waiting for checkpoints"
        );
        std::process::exit(130);
    });

    api::set_health(&health, false).await;
    shutdown.trigger();
    orchestrator.shutdown_flag().store(true, Ordering::SeqCst);
    eprintln!(
        "tli host serve: {why}: shutting down; checkpointing {} running task(s) (up to {}s)",
        orchestrator.waiting_count(),
        shutdown_timeout.as_secs()
    );
    // Slurm workers record their last checkpoints through the server: it
    // stays up until the scheduler is done.
    let serves_workers = config.worker_token.is_some();
    let mut stop_server = Some(stop_server);
    if !serves_workers {
        if let Some(stop) = stop_server.take() {
            let _ = stop.send(());
        }
    }

    if scheduler_result.is_none() {
        match tokio::time::timeout(shutdown_timeout, &mut scheduler).await {
            Ok(r) => {
                let r = r.unwrap_or_else(|_| Err("the scheduling thread panicked".into()));
                if let Err(e) = &r {
                    failure.get_or_insert_with(|| anyhow!("scheduling loop: {e}"));
                }
            }
            Err(_) => {
                // A plugin stuck in `step` must not keep the host from exiting.
                let stuck = orchestrator.give_up_on_running(shutdown_timeout);
                eprintln!(
                    "tli host serve: {stuck} task(s) did not checkpoint within {}s; marked \
                     interrupted, they resume from their last checkpoint at the next start",
                    shutdown_timeout.as_secs()
                )
            }
        }
    }
    if let Some(stop) = stop_server.take() {
        let _ = stop.send(());
    }
    let _ = web_stop.send(());
    if server_result.is_none() {
        match tokio::time::timeout(SERVER_STOP_GRACE, &mut server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("tli host serve: server: {e}"),
            Ok(Err(e)) => eprintln!("tli host serve: server task: {e}"),
            Err(_) => eprintln!(
                "tli host serve: open requests did not finish within {}s; closing them",
                SERVER_STOP_GRACE.as_secs()
            ),
        }
    }
    // Last: the store file alone is then the whole store (a copy of it is a backup).
    if let Err(e) = orchestrator.store().close_cleanly() {
        eprintln!("tli host serve: closing the store: {e}");
    }
    match failure {
        Some(e) => Err(e),
        None => {
            eprintln!("tli host serve: stopped");
            Ok(())
        }
    }
}

/// The signals that stop a host gracefully (its tasks checkpoint and become
/// `interrupted`, the process exits 0): those a terminal sends (SIGINT,
/// SIGHUP when it closes, SIGQUIT) and those supervisors and batch systems
/// send (SIGTERM, SIGUSR1/SIGUSR2), each fatal by default — none may end a
/// host without its checkpoints.
pub(super) const SHUTDOWN_SIGNALS: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Every [`SHUTDOWN_SIGNALS`] signal, as one stream of their names.
struct ShutdownSignals(tokio::sync::mpsc::UnboundedReceiver<&'static str>);

impl ShutdownSignals {
    /// Installs the handlers (inside the runtime) and forwards what they get.
    fn install() -> Result<Self> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for raw in SHUTDOWN_SIGNALS {
            let name = signal_name(raw);
            let mut stream = signal(SignalKind::from_raw(raw))
                .with_context(|| format!("cannot handle {name}"))?;
            let tx = tx.clone();
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    if tx.send(name).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Self(rx))
    }

    /// The name of the next signal received.
    async fn next(&mut self) -> &'static str {
        self.0.recv().await.unwrap_or("a signal")
    }
}

fn signal_name(raw: libc::c_int) -> &'static str {
    match raw {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "a signal",
    }
}
