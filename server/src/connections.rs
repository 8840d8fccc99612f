//! How many connections a host's listeners hold, and for how long. Each
//! connection costs a file descriptor, and the descriptors a process may
//! open are few (1,024 by default on many systems): idle connections must
//! not starve the store, checkpoints and data files of theirs, nor lock out
//! clients that want an answer.
//!
//! One [`ConnectionGate`] is shared by every listener of a host (gRPC, the
//! status page, metrics):
//!
//! * it holds at most [`ConnectionLimits::max_open`] connections, the
//!   process's descriptor limit less [`HEADROOM`] kept for everything else;
//!   a new connection over the cap closes the one that has been silent
//!   longest (nothing read from it), so a crowd of idle connections cannot
//!   lock out a client that talks;
//! * a connection that sends nothing within [`ConnectionLimits::first_byte`]
//!   of being accepted is closed, and one silent for
//!   [`ConnectionLimits::idle`] afterwards too (the gRPC server pings its
//!   peers more often than that, so a live stream is never silent);
//! * an evicted connection's descriptor is open until its task drops it:
//!   while more than a small slack of them are, accepting waits a few
//!   milliseconds, so a flood cannot run the process out of descriptors
//!   faster than evicted connections close;
//! * accepting goes on after a descriptor shortage (`EMFILE`, `ENFILE`),
//!   after a short pause, instead of ending the listener.
//!
//! [`raise_descriptor_limit`] lifts the process's soft limit to its hard
//! limit at start, so the cap is as high as the system allows.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// Descriptors kept for everything but connections: the store, checkpoint
/// and data files, plugins, libtorch, Slurm's commands.
pub const HEADROOM: u64 = 256;

/// Connections held at most, whatever the descriptor limit (each costs
/// buffers as well as a descriptor).
pub const MAX_OPEN_CEILING: usize = 4096;

/// What a gate allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections held at once, over every listener.
    pub max_open: usize,
    /// A connection that sends nothing this long after it is accepted is closed.
    pub first_byte: Duration,
    /// A connection from which nothing is read for this long is closed.
    pub idle: Duration,
}

impl ConnectionLimits {
    /// Limits for a process that may open `descriptors` files: all but
    /// [`HEADROOM`] for connections (at least 16, at most
    /// [`MAX_OPEN_CEILING`]), 10 s to the first byte, 5 minutes idle.
    pub fn for_descriptors(descriptors: u64) -> Self {
        let open = descriptors.saturating_sub(HEADROOM).max(16);
        Self {
            max_open: usize::try_from(open)
                .unwrap_or(usize::MAX)
                .min(MAX_OPEN_CEILING),
            first_byte: Duration::from_secs(10),
            idle: Duration::from_secs(300),
        }
    }

    /// Limits for this process's current soft descriptor limit.
    pub fn for_this_process() -> Self {
        Self::for_descriptors(descriptor_limit().0)
    }
}

/// This process's (soft, hard) limits on open descriptors.
pub fn descriptor_limit() -> (u64, u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return (1024, 1024);
    }
    (limit.rlim_cur, limit.rlim_max)
}

/// Raises the soft limit on open descriptors to the hard limit (at most
/// 2^20); returns the soft limit now in force.
pub fn raise_descriptor_limit() -> u64 {
    let (soft, hard) = descriptor_limit();
    let wanted = hard.min(1 << 20);
    if wanted > soft {
        let limit = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
            return wanted;
        }
    }
    soft
}

/// The connections of every listener of one host (see the module docs).
#[derive(Clone)]
pub struct ConnectionGate {
    inner: Arc<Gate>,
}

struct Gate {
    limits: ConnectionLimits,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Peer>>>,
    /// Connections whose descriptor is still open: those in `open`, and
    /// those evicted whose task has not yet dropped them.
    held: AtomicUsize,
}

/// What the gate knows of one connection.
struct Peer {
    /// Milliseconds since the gate's epoch when a byte was last read from it
    /// (when it was accepted, before that).
    last_read_ms: AtomicU64,
    /// Closed by the gate to make room.
    evicted: AtomicBool,
    /// The task reading it, woken when it is evicted.
    waker: Mutex<Option<Waker>>,
}

impl ConnectionGate {
    pub fn new(limits: ConnectionLimits) -> Self {
        Self {
            inner: Arc::new(Gate {
                limits,
                epoch: Instant::now(),
                next_id: AtomicU64::new(0),
                open: Mutex::new(HashMap::new()),
                held: AtomicUsize::new(0),
            }),
        }
    }

    pub fn limits(&self) -> ConnectionLimits {
        self.inner.limits
    }

    /// Whether accepting must wait: the connections evicted to make room
    /// still hold [`EVICTED_SLACK`] descriptors or more (their tasks have
    /// not closed them yet), so another accept could run the process out of
    /// descriptors under a flood.
    fn saturated(&self) -> bool {
        self.inner.held.load(Ordering::Relaxed) >= self.inner.limits.max_open + EVICTED_SLACK
    }

    /// Connections held now.
    pub fn open(&self) -> usize {
        lock(&self.inner.open).len()
    }

    /// Takes in an accepted connection: over the cap, the connection silent
    /// longest is closed first.
    pub fn admit(&self, stream: TcpStream) -> GatedStream {
        let _ = stream.set_nodelay(true);
        let gate = &self.inner;
        gate.held.fetch_add(1, Ordering::Relaxed);
        let now = gate.now_ms();
        let peer = Arc::new(Peer {
            last_read_ms: AtomicU64::new(now),
            evicted: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let id = gate.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut open = lock(&gate.open);
            while open.len() >= gate.limits.max_open {
                let silent = open
                    .iter()
                    .min_by_key(|(_, p)| p.last_read_ms.load(Ordering::Relaxed))
                    .map(|(&id, _)| id);
                let Some(silent) = silent else { break };
                if let Some(peer) = open.remove(&silent) {
                    peer.evicted.store(true, Ordering::Relaxed);
                    if let Some(waker) = lock(&peer.waker).take() {
                        waker.wake();
                    }
                }
            }
            open.insert(id, peer.clone());
        }
        GatedStream {
            stream,
            peer,
            id,
            gate: Arc::downgrade(&self.inner),
            deadline: Box::pin(tokio::time::sleep(gate.limits.first_byte)),
            idle: gate.limits.idle,
            expects_tls: false,
            first_read: true,
            told: false,
        }
    }

    /// The accepted connections of `listener`, through this gate, for
    /// tonic's `serve_with_incoming`. With `tls`, a peer that starts in
    /// plain text is told, in its own protocol, to connect with `https://`.
    pub fn incoming(&self, listener: TcpListener, tls: bool) -> GatedIncoming {
        GatedIncoming {
            listener,
            gate: self.clone(),
            pause: None,
            tls,
        }
    }

    /// `listener` through this gate, for `axum::serve`.
    pub fn listener(&self, listener: TcpListener) -> GatedListener {
        GatedListener {
            listener,
            gate: self.clone(),
        }
    }
}

impl Gate {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An accept error after which accepting can go on (a descriptor shortage,
/// a connection reset before it was accepted).
fn passing(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    ) || matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// The idle limit of an HTTP connection (the status page polls every few seconds).
pub const HTTP_IDLE: Duration = Duration::from_secs(30);

/// How long accepting pauses after a descriptor shortage.
const SHORTAGE_PAUSE: Duration = Duration::from_millis(50);
/// Evicted connections whose descriptors may still be open before
/// accepting waits for them to close (a part of [`HEADROOM`]).
const EVICTED_SLACK: usize = 32;
/// How long accepting waits for evicted connections to close.
const DRAIN_PAUSE: Duration = Duration::from_millis(5);

/// A connection held by a [`ConnectionGate`].
pub struct GatedStream {
    stream: TcpStream,
    peer: Arc<Peer>,
    id: u64,
    gate: Weak<Gate>,
    /// When the connection is closed for silence.
    deadline: Pin<Box<Sleep>>,
    idle: Duration,
    /// The listener serves TLS: the first byte must start a handshake.
    expects_tls: bool,
    /// Nothing was read yet.
    first_read: bool,
    /// A plain-text peer of a TLS port, told so: what it sends is dropped.
    told: bool,
}

/// What a plain-text peer of a TLS port is told.
const SPEAKS_TLS: &str = "this port speaks TLS: connect with https://HOST:PORT (the tli CLI and \
     Python client also need the CA certificate: TLI_CA_FILE, or ca_file=)";

/// The TLS record type of a handshake, the first byte any TLS client sends.
const TLS_HANDSHAKE: u8 = 0x16;

/// The answer to a plain-text peer whose first bytes are `first`: an
/// HTTP/1.1 400 to an HTTP/1 request, else (HTTP/2 without TLS, as a gRPC
/// client with an `http://` endpoint speaks) an empty SETTINGS frame and a
/// GOAWAY whose debug data says what to do (clients show it).
fn plain_text_reply(first: &[u8]) -> Vec<u8> {
    let http1 = [
        &b"GET "[..],
        b"POST",
        b"HEAD",
        b"PUT ",
        b"DELE",
        b"OPTI",
        b"PATC",
    ]
    .iter()
    .any(|m| first.starts_with(m));
    if http1 {
        let body = format!("{SPEAKS_TLS}\n");
        return format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\nconnection: close\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes();
    }
    let frame = |kind: u8, payload: &[u8]| {
        let len = payload.len() as u32;
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            0,
            0,
            0,
            0,
            0,
        ];
        f.extend_from_slice(payload);
        f
    };
    // GOAWAY: last stream 0, PROTOCOL_ERROR (1), debug data.
    let mut goaway = vec![0, 0, 0, 0, 0, 0, 0, 1];
    goaway.extend_from_slice(SPEAKS_TLS.as_bytes());
    let mut reply = frame(0x4, &[]);
    reply.extend(frame(0x7, &goaway));
    reply
}

/// How long a plain-text peer told to use TLS is read from before it is dropped.
const TOLD_LINGER: Duration = Duration::from_secs(2);

impl GatedStream {
    /// Reads and drops what a peer told to use TLS still sends, until it
    /// closes (an end of file for our reader) or [`TOLD_LINGER`] passes.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut scratch = [0u8; 4096];
        loop {
            let mut sink = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.stream).poll_read(cx, &mut sink) {
                Poll::Ready(Ok(())) if sink.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    return match self.deadline.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "a plain-text peer on the TLS port (told to use https://)",
                        ))),
                        Poll::Pending => Poll::Pending,
                    }
                }
            }
        }
    }

    fn closed_by_gate(&self) -> Option<io::Error> {
        self.peer.evicted.load(Ordering::Relaxed).then(|| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to make room for another connection",
            )
        })
    }
}

impl AsyncRead for GatedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.closed_by_gate() {
            return Poll::Ready(Err(e));
        }
        *lock(&this.peer.waker) = Some(cx.waker().clone());
        if this.told {
            return this.drain(cx);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.first_read && buf.filled().len() > before {
                    this.first_read = false;
                    let first = &buf.filled()[before..];
                    if this.expects_tls && first[0] != TLS_HANDSHAKE {
                        // Best effort: a short reply into an empty socket
                        // buffer, then our side closed; what the peer still
                        // sends is read and dropped (closing with unread data
                        // would reset the connection before it reads the reply).
                        let _ = this.stream.try_write(&plain_text_reply(first));
                        use std::os::fd::AsRawFd;
                        // SAFETY: shutdown of the write side of a socket we own.
                        unsafe { libc::shutdown(this.stream.as_raw_fd(), libc::SHUT_WR) };
                        buf.set_filled(before);
                        this.told = true;
                        let linger = tokio::time::Instant::now() + TOLD_LINGER;
                        this.deadline.as_mut().reset(linger);
                        return this.drain(cx);
                    }
                }
                if buf.filled().len() > before {
                    if let Some(gate) = this.gate.upgrade() {
                        this.peer
                            .last_read_ms
                            .store(gate.now_ms(), Ordering::Relaxed);
                    }
                    let next = tokio::time::Instant::now() + this.idle;
                    this.deadline.as_mut().reset(next);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "closed: the peer sent nothing for too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for GatedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.closed_by_gate() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.closed_by_gate() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl Drop for GatedStream {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.upgrade() {
            lock(&gate.open).remove(&self.id);
            gate.held.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl tonic::transport::server::Connected for GatedStream {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

/// A listener's connections through a gate, as a stream (tonic).
pub struct GatedIncoming {
    listener: TcpListener,
    gate: ConnectionGate,
    pause: Option<Pin<Box<Sleep>>>,
    tls: bool,
}

impl tokio_stream::Stream for GatedIncoming {
    type Item = io::Result<GatedStream>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(pause) = this.pause.as_mut() {
                if pause.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.pause = None;
            }
            if this.gate.saturated() {
                this.pause = Some(Box::pin(tokio::time::sleep(DRAIN_PAUSE)));
                continue;
            }
            match this.listener.poll_accept(cx) {
                Poll::Ready(Ok((stream, _))) => {
                    let mut stream = this.gate.admit(stream);
                    stream.expects_tls = this.tls;
                    return Poll::Ready(Some(Ok(stream)));
                }
                Poll::Ready(Err(e)) if passing(&e) => {
                    tracing::warn!("accepting a connection: {e}; trying again shortly");
                    this.pause = Some(Box::pin(tokio::time::sleep(SHORTAGE_PAUSE)));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A listener through a gate (axum).
pub struct GatedListener {
    listener: TcpListener,
    gate: ConnectionGate,
}

impl axum::serve::Listener for GatedListener {
    type Io = GatedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            while self.gate.saturated() {
                tokio::time::sleep(DRAIN_PAUSE).await;
            }
            match self.listener.accept().await {
                Ok((stream, addr)) => {
                    let mut stream = self.gate.admit(stream);
                    // Plain HTTP requests are short: a request sent a byte
                    // at a time waits at most this long for each.
                    stream.idle = stream.idle.min(HTTP_IDLE);
                    return (stream, addr);
                }
                Err(e) => {
                    if !passing(&e) {
                        tracing::warn!("accepting an HTTP connection: {e}");
                    }
                    tokio::time::sleep(SHORTAGE_PAUSE).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    /// Evicted connections count until their streams are dropped: past the
    /// slack, accepting waits, so descriptors stay bounded under a flood.
    #[tokio::test]
    async fn accepting_waits_while_evicted_connections_still_hold_descriptors() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gate = ConnectionGate::new(ConnectionLimits {
            max_open: 2,
            first_byte: Duration::from_secs(10),
            idle: Duration::from_secs(10),
        });
        let mut kept = Vec::new();
        for _ in 0..2 + EVICTED_SLACK {
            assert!(!gate.saturated());
            let (client, server) = pair(&listener).await;
            kept.push((client, gate.admit(server)));
        }
        assert_eq!(gate.open(), 2, "the cap holds");
        assert!(gate.saturated(), "the evicted streams are not closed yet");
        kept.truncate(2 + EVICTED_SLACK - 1);
        assert!(!gate.saturated(), "one closed: accepting goes on");
    }

    #[test]
    fn limits_keep_headroom_and_stay_in_bounds() {
        assert_eq!(ConnectionLimits::for_descriptors(1024).max_open, 768);
        assert_eq!(ConnectionLimits::for_descriptors(100).max_open, 16);
        assert_eq!(
            ConnectionLimits::for_descriptors(1 << 20).max_open,
            MAX_OPEN_CEILING
        );
    }

    #[tokio::test]
    async fn over_the_cap_the_longest_silent_connection_is_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gate = ConnectionGate::new(ConnectionLimits {
            max_open: 2,
            first_byte: Duration::from_secs(60),
            idle: Duration::from_secs(60),
        });
        let (mut silent_client, silent) = pair(&listener).await;
        let mut silent = gate.admit(silent);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (mut talking_client, talking) = pair(&listener).await;
        let mut talking = gate.admit(talking);
        talking_client.write_all(b"hi").await.unwrap();
        let mut two = [0u8; 2];
        talking.read_exact(&mut two).await.unwrap();
        assert_eq!(gate.open(), 2);
        // A third: the silent one goes, the one that talked stays.
        let (_third_client, third) = pair(&listener).await;
        let _third = gate.admit(third);
        assert_eq!(gate.open(), 2);
        let err = silent.read(&mut [0u8; 1]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
        drop(silent);
        silent_client.write_all(b"x").await.ok();
        talking_client.write_all(b"ok").await.unwrap();
        talking.read_exact(&mut two).await.unwrap();
        assert_eq!(&two, b"ok");
    }

    #[test]
    fn plain_text_on_a_tls_port_is_answered_in_its_own_protocol() {
        let http1 = String::from_utf8(plain_text_reply(b"GET / HTTP/1.1")).unwrap();
        assert!(http1.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{http1}");
        assert!(http1.ends_with(&format!("{SPEAKS_TLS}\n")), "{http1}");
        let h2 = plain_text_reply(b"PRI * HTTP/2.0\r\n");
        // SETTINGS (empty), then GOAWAY with its length, last stream 0, PROTOCOL_ERROR.
        assert_eq!(&h2[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        let len = 8 + SPEAKS_TLS.len();
        assert_eq!(&h2[9..12], &[0, (len >> 8) as u8, len as u8]);
        assert_eq!(h2[12], 7);
        assert_eq!(&h2[18..26], &[0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(&h2[26..], SPEAKS_TLS.as_bytes());
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_after_the_first_byte_limit() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gate = ConnectionGate::new(ConnectionLimits {
            max_open: 8,
            first_byte: Duration::from_millis(100),
            idle: Duration::from_secs(60),
        });
        let (_client, server) = pair(&listener).await;
        let mut server = gate.admit(server);
        let err = server.read(&mut [0u8; 1]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(server);
        assert_eq!(gate.open(), 0);
    }
}
