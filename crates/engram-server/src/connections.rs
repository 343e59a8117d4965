//! Accepting and serving connections so that clients which stall cannot take the server down.
//!
//! - **Header timeout.** A connection must send a whole request head within
//!   [`ConnectionLimits::header_timeout`], counted from when the server starts waiting for it:
//!   at connect, and again after each response (so an idle keep-alive connection is closed
//!   after the same time). Half a request never holds a connection for longer.
//! - **Idle timeout.** Once a request is under way, a body that stops arriving, or a response
//!   the client stops reading, may stand still for at most [`ConnectionLimits::idle_timeout`];
//!   then the connection is closed. Slow but moving clients are fine, and the server's own
//!   work (a long extraction, an MCP stream waiting for events) is not counted.
//! - **Connection cap.** At most [`ConnectionLimits::max_connections`] connections are served
//!   at once. Beyond that a connection gets an immediate `503` with the JSON error body
//!   (`busy`) and `Retry-After: 1`, then is closed; it never waits in a queue holding a file.
//! - **File limit.** At start the process raises its soft limit of open files to the hard limit
//!   ([`raise_open_file_limit`]), and the default cap stays well below it, so the database and
//!   the connections already served always have files to work with.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Sleep;

/// The default [`ConnectionLimits::header_timeout`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default [`ConnectionLimits::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The highest default [`ConnectionLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Open files kept back from connections for the database, logs and busy answers.
const RESERVED_FILES: u64 = 512;
/// Connections being sent a busy answer at once; beyond this they are closed without one.
const MAX_REFUSING: usize = 256;
/// How long a busy answer may take to write before the connection is simply closed.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);

/// How long clients may stall and how many connections are served at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time to send a whole request head (and the longest a keep-alive connection stays idle).
    pub header_timeout: Duration,
    /// The longest a request body or a response may stand still on the client's side.
    pub idle_timeout: Duration,
    /// Connections served at once; more are answered `503 busy` and closed.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: default_max_connections(open_file_limit()),
        }
    }
}

/// The default cap for a process that may open `file_limit` files: the limit less a reserve
/// for everything else, at most [`DEFAULT_MAX_CONNECTIONS`], at least 64.
pub fn default_max_connections(file_limit: Option<u64>) -> usize {
    let Some(limit) = file_limit else {
        return DEFAULT_MAX_CONNECTIONS;
    };
    let usable = limit.saturating_sub(RESERVED_FILES).max(64);
    usize::try_from(usable)
        .unwrap_or(usize::MAX)
        .min(DEFAULT_MAX_CONNECTIONS)
}

/// The process's soft limit of open files (`None`: unlimited or unknown).
pub fn open_file_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Raises the soft limit of open files to the hard limit, so a server can hold as many
/// connections as the system allows this process. Returns the limit now in force.
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!("cannot raise the open file limit: {e}");
        }
    }
    open_file_limit()
}

/// Serves `app` on `listener` within `limits` until `stop` completes; then stops accepting,
/// lets requests in flight finish (up to `grace`), and returns. `on_stop` runs as soon as the
/// server stops accepting (it ends streams that would otherwise hold the shutdown).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()> + Send,
    grace: Duration,
    on_stop: impl FnOnce(),
) {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refusing = Arc::new(AtomicUsize::new(0));
    let graceful = GracefulShutdown::new();
    let mut last_warning: Option<Instant> = None;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    tokio::pin!(stop);

    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                wait_after_accept_error(&e, &mut last_warning).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            if warn_now(&mut last_warning) {
                tracing::warn!(
                    limit = limits.max_connections,
                    "connection limit reached: answering new connections 503 busy \
                     ([server] max_connections)"
                );
            }
            refuse_busy(stream, refusing.clone(), limits.max_connections);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(StallGuard::new(stream, limits.idle_timeout));
        let service = RequestService {
            app: app.clone(),
            idle_timeout: limits.idle_timeout,
        };
        let connection = graceful.watch(builder.serve_connection(io, service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, "connection ended: {e}");
            }
            drop(permit);
        });
    }

    drop(listener);
    on_stop();
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            seconds = grace.as_secs(),
            "requests still running after the grace period; stopping anyway"
        );
    }
}

/// At most one warning a second about the same trouble.
fn warn_now(last: &mut Option<Instant>) -> bool {
    let now = Instant::now();
    if last.is_some_and(|at| now.duration_since(at) < Duration::from_secs(1)) {
        return false;
    }
    *last = Some(now);
    true
}

/// After a failed accept: a connection that went away is nothing; running out of files or
/// memory is waited out briefly (connections close, files come back) instead of spinning.
async fn wait_after_accept_error(error: &io::Error, last_warning: &mut Option<Instant>) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    ) {
        return;
    }
    if warn_now(last_warning) {
        tracing::warn!("cannot accept connections: {error}; retrying");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// The answer to a connection over the cap.
fn busy_response(limit: usize) -> Vec<u8> {
    let body = serde_json::json!({
        "error": {
            "code": "busy",
            "message": format!(
                "the server is serving {limit} connections (its limit, [server] max_connections); retry shortly"
            ),
        }
    })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answers `503 busy` and closes, in the background and briefly; when too many are being
/// answered already, the connection is closed at once.
fn refuse_busy(stream: TcpStream, refusing: Arc<AtomicUsize>, limit: usize) {
    if refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
        refusing.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    tokio::spawn(async move {
        let mut stream = stream;
        // Wait (briefly) for the request head: an HTTP client takes an answer that comes before
        // its request for a broken connection, not for a 503.
        let _ = tokio::time::timeout(REFUSAL_TIMEOUT / 2, read_head(&mut stream)).await;
        let _ = tokio::time::timeout(REFUSAL_TIMEOUT / 2, async {
            stream.write_all(&busy_response(limit)).await?;
            stream.shutdown().await?;
            // Read what else the client sent before closing, so the kernel does not answer it
            // with a reset that could destroy the 503 before the client reads it.
            let mut sink = [0u8; 4096];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<(), io::Error>(())
        })
        .await;
        refusing.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Reads until the end of a request head (a blank line), at most 16 KiB.
async fn read_head(stream: &mut TcpStream) -> io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while head.len() < 16 * 1024 {
        let read = stream.read(&mut buf).await?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buf[..read]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    Ok(())
}

/// The per-connection service: the router, with request bodies that may not stall.
#[derive(Clone)]
struct RequestService {
    app: Router,
    idle_timeout: Duration,
}

impl hyper::service::Service<hyper::Request<Incoming>> for RequestService {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let idle = self.idle_timeout;
        let request: Request = request.map(|body| Body::new(StallingBodyTimeout::new(body, idle)));
        let mut app = self.app.clone();
        Box::pin(async move { tower_service::Service::call(&mut app, request).await })
    }
}

/// A request body that fails when the client sends nothing for `limit` while the handler waits
/// for it.
struct StallingBodyTimeout<B> {
    inner: B,
    limit: Duration,
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<B> StallingBodyTimeout<B> {
    fn new(inner: B, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            waiting: None,
        }
    }
}

/// The body stood still too long.
#[derive(Debug, thiserror::Error)]
#[error("the client sent no part of the request body for {0} s")]
struct BodyStalled(u64);

impl<B> HttpBody for StallingBodyTimeout<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.waiting = None;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let limit = this.limit;
        let sleep = this
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(sleep.as_mut().poll(cx));
        this.waiting = None;
        Poll::Ready(Some(Err(Box::new(BodyStalled(limit.as_secs())))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection whose writes fail when the client reads nothing for `limit` (its receive window
/// is full and a response cannot go out).
struct StallGuard {
    stream: TcpStream,
    limit: Duration,
    write_blocked: Option<Pin<Box<Sleep>>>,
}

impl StallGuard {
    fn new(stream: TcpStream, limit: Duration) -> Self {
        Self {
            stream,
            limit,
            write_blocked: None,
        }
    }

    /// Called when a write could not proceed: fails once it has been blocked for too long.
    fn blocked(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let limit = self.limit;
        let sleep = self
            .write_blocked
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(sleep.as_mut().poll(cx));
        self.write_blocked = None;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the client read nothing for {} s", limit.as_secs()),
        )))
    }
}

impl AsyncRead for StallGuard {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallGuard {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Ready(result) => {
                this.write_blocked = None;
                Poll::Ready(result)
            }
            Poll::Pending => this.blocked(cx).map(|r| r.map(|()| 0)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                this.write_blocked = None;
                Poll::Ready(result)
            }
            Poll::Pending => this.blocked(cx).map(|r| r.map(|()| 0)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_flush(cx) {
            Poll::Ready(result) => {
                this.write_blocked = None;
                Poll::Ready(result)
            }
            Poll::Pending => this.blocked(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_leaves_files_for_everything_else() {
        assert_eq!(default_max_connections(Some(1024)), 512);
        assert_eq!(default_max_connections(Some(20_000)), 10_000);
        assert_eq!(default_max_connections(Some(100)), 64);
        assert_eq!(default_max_connections(None), DEFAULT_MAX_CONNECTIONS);
    }

    #[test]
    fn the_busy_answer_is_http_with_the_json_error() {
        let text = String::from_utf8(busy_response(7)).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "busy");
    }
}
