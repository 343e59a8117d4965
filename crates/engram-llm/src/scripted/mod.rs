//! A scripted language-model server for tests and benchmarks.
//!
//! A real HTTP server on 127.0.0.1 (random port) that speaks both wire formats —
//! `POST /v1/chat/completions` (OpenAI) and `POST /v1/messages` (Anthropic), streamed (SSE) or
//! not, as the request asks — and answers each request with the next scripted [`Turn`]: text,
//! reasoning, tool calls, HTTP errors with the real APIs' bodies, broken streams, delays. It
//! records every request (method, path, headers, JSON body, timings) for assertions, and, like
//! the real APIs, refuses a conversation in which a tool result does not answer a tool call.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use engram_llm::scripted::{ScriptedServer, Turn};
//! use serde_json::json;
//! let server = ScriptedServer::start(vec![
//!     Turn::tool_call("read_file", json!({"path": "notes.txt"})),
//!     Turn::rate_limited().retry_after(1),
//!     Turn::text("The file says hello."),
//! ])
//! .await?;
//! let model = engram_llm::build(server.client_config(engram_llm::Provider::OpenAi)).unwrap();
//! // ... run the agent against `model`, then:
//! assert_eq!(server.requests().len(), 3);
//! server.check_tool_pairing().unwrap();
//! # Ok(()) }
//! ```
//!
//! [`ScriptedServer::start`] runs on the caller's tokio runtime; [`ScriptedServer::spawn`] runs on
//! its own thread, for synchronous tests that run the `engram` binary and wait for it.
//! `GET /_scripted/requests` returns the recorded requests as JSON, for a server run as a child
//! process (see the `engram-scripted-llm` binary).

mod pairing;
mod render;
mod turn;

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body, Frame as BodyFrame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use pairing::check_wire_pairing;
use render::{Frame, Plan, WireKind};
pub use turn::{DEFAULT_USAGE, ErrorKind, Quirks, ScriptedCall, ScriptedError, Turn, parse_script};

use crate::config::{ApiKey, ClientConfig, Provider, Timeouts};
use crate::retry::RetryPolicy;

/// The model name [`ScriptedServer::client_config`] uses.
pub const SCRIPTED_MODEL: &str = "scripted-model";
/// The API key [`ScriptedServer::client_config`] uses.
pub const SCRIPTED_KEY: &str = "scripted-key";

/// One request as the server received it, and when its answer went out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// 1 for the first request.
    pub number: usize,
    /// The HTTP method.
    pub method: String,
    /// The path (without the query).
    pub path: String,
    /// The headers, names lowercased.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (`null` when it was not JSON; see `raw_body`).
    pub body: Value,
    /// The body as text, when it was not JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_body: Option<String>,
    /// Why the server refused the conversation (a tool result without its call, ...), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// When the request arrived, in microseconds since the Unix epoch.
    pub received_unix_us: u64,
    /// When each response chunk was handed to the connection, in microseconds since the epoch.
    #[serde(default)]
    pub sent_unix_us: Vec<u64>,
    /// When the request arrived (same process only).
    #[serde(skip)]
    pub received_at: Option<Instant>,
    /// When each response chunk was handed to the connection (same process only).
    #[serde(skip)]
    pub sent_at: Vec<Instant>,
    /// When each chunk carrying content (a text, reasoning or tool-call delta; for a whole
    /// response, its body) was handed over, in microseconds since the epoch. For a
    /// [`Turn::stream_deltas`] turn, entry `i` is delta `i`.
    #[serde(default)]
    pub content_sent_unix_us: Vec<u64>,
    /// The same, as instants (same process only).
    #[serde(skip)]
    pub content_sent_at: Vec<Instant>,
}

impl RecordedRequest {
    /// The wire format, told by the path.
    pub fn provider(&self) -> Option<Provider> {
        wire_of(&self.path).map(|w| match w {
            WireKind::OpenAi => Provider::OpenAi,
            WireKind::Anthropic => Provider::Anthropic,
        })
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// Whether the request asked for a stream.
    pub fn is_stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The `messages` array of the body.
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The names of the tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        let tools = self.body.get("tools").and_then(Value::as_array);
        tools
            .into_iter()
            .flatten()
            .filter_map(|t| {
                t.pointer("/function/name")
                    .or_else(|| t.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect()
    }

    /// How long the server took from receiving the request to handing over the last chunk.
    pub fn service_time(&self) -> Option<Duration> {
        Some(self.sent_at.last()?.duration_since(self.received_at?))
    }
}

fn wire_of(path: &str) -> Option<WireKind> {
    if path.ends_with("/chat/completions") {
        Some(WireKind::OpenAi)
    } else if path.ends_with("/messages") {
        Some(WireKind::Anthropic)
    } else {
        None
    }
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A callback that sees each request as it arrives.
pub type RecordHook = Box<dyn Fn(&RecordedRequest) + Send + Sync>;

struct Shared {
    turns: Mutex<VecDeque<Turn>>,
    requests: Mutex<Vec<RecordedRequest>>,
    on_request: Option<RecordHook>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock leaves valid data behind.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The scripted model server; stops when dropped.
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
    background: Option<Background>,
}

/// The thread and runtime of a server started with [`ScriptedServer::spawn`].
struct Background {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("addr", &self.addr)
            .field("remaining_turns", &self.remaining_turns())
            .finish_non_exhaustive()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.accept.abort();
        if let Some(background) = &mut self.background {
            if let Some(stop) = background.stop.take() {
                let _ = stop.send(());
            }
            if let Some(thread) = background.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

impl ScriptedServer {
    /// Starts a server on 127.0.0.1 with a random port, answering with `turns` in order.
    pub async fn start(turns: Vec<Turn>) -> io::Result<ScriptedServer> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), turns, None).await
    }

    /// Starts a server on `addr`; `on_request` (if any) sees each request as it arrives (the
    /// binary appends them to a file).
    pub async fn start_on(
        addr: SocketAddr,
        turns: Vec<Turn>,
        on_request: Option<RecordHook>,
    ) -> io::Result<ScriptedServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            turns: Mutex::new(turns.into()),
            requests: Mutex::new(Vec::new()),
            on_request,
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(ScriptedServer {
            addr,
            shared,
            accept,
            background: None,
        })
    }

    /// Starts a server on its own thread and runtime, for synchronous tests (e.g. ones that run
    /// the `engram` binary and wait for it, which would starve a server on the test's runtime).
    pub fn spawn(turns: Vec<Turn>) -> io::Result<ScriptedServer> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("scripted-llm".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match ScriptedServer::start(turns).await {
                        Ok(server) => {
                            let _ = ready_tx.send(Ok(server));
                            // Serve until the handle is dropped.
                            let _ = stop_rx.await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
            })?;
        let mut server = ready_rx.recv().map_err(|_| {
            io::Error::other("the scripted server's thread stopped before starting")
        })??;
        server.background = Some(Background {
            stop: Some(stop_tx),
            thread: Some(thread),
        });
        Ok(server)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL for OpenAI-compatible clients (`.../v1`).
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// The base URL for Anthropic clients (without `/v1`, like `ANTHROPIC_BASE_URL`).
    pub fn anthropic_base_url(&self) -> String {
        self.url()
    }

    /// The base URL for `provider`.
    pub fn base_url(&self, provider: Provider) -> String {
        match provider {
            Provider::OpenAi => self.openai_base_url(),
            Provider::Anthropic => self.anthropic_base_url(),
        }
    }

    /// Client settings pointing at this server: model [`SCRIPTED_MODEL`], key [`SCRIPTED_KEY`],
    /// retries 10 ms apart (Retry-After still honoured up to 5 s), and short timeouts.
    pub fn client_config(&self, provider: Provider) -> ClientConfig {
        let mut config = ClientConfig::new(provider, SCRIPTED_MODEL, self.base_url(provider));
        config.api_key = Some(ApiKey::new(SCRIPTED_KEY));
        config.retry = RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(5),
        };
        config.timeouts = Timeouts {
            connect: Duration::from_secs(5),
            idle: Duration::from_secs(10),
            request: Duration::from_secs(30),
        };
        config
    }

    /// Appends a turn to the script.
    pub fn push(&self, turn: Turn) {
        lock(&self.shared.turns).push_back(turn);
    }

    /// Appends turns to the script.
    pub fn push_all(&self, turns: impl IntoIterator<Item = Turn>) {
        lock(&self.shared.turns).extend(turns);
    }

    /// How many turns have not been served yet.
    pub fn remaining_turns(&self) -> usize {
        lock(&self.shared.turns).len()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The `n`th request (from 1), if it arrived.
    pub fn request(&self, number: usize) -> Option<RecordedRequest> {
        lock(&self.shared.requests)
            .get(number.checked_sub(1)?)
            .cloned()
    }

    /// Checks every recorded conversation: each tool result answers a tool call of the message
    /// just before it and every call has its result (no orphans either way).
    pub fn check_tool_pairing(&self) -> Result<(), String> {
        for request in lock(&self.shared.requests).iter() {
            if let Some(reason) = &request.refused {
                return Err(format!("request {}: {reason}", request.number));
            }
            if let Some(wire) = wire_of(&request.path) {
                check_wire_pairing(wire == WireKind::Anthropic, &request.body)
                    .map_err(|e| format!("request {}: {e}", request.number))?;
            }
        }
        Ok(())
    }
}

/// The latency of each streamed content delta: from the server handing delta `i` to the
/// connection to `arrivals[i]` (when the client's sink saw it, or when it reached the terminal).
/// Pairs beyond the shorter list are ignored.
pub fn delta_latencies(record: &RecordedRequest, arrivals: &[Instant]) -> Vec<Duration> {
    record
        .content_sent_at
        .iter()
        .zip(arrivals)
        .map(|(sent, arrived)| arrived.saturating_duration_since(*sent))
        .collect()
}

/// Order statistics of a set of durations, for benchmark reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencySummary {
    /// How many samples.
    pub count: usize,
    /// The mean.
    pub mean: Duration,
    /// The median.
    pub median: Duration,
    /// The 95th percentile.
    pub p95: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The largest.
    pub max: Duration,
}

impl LatencySummary {
    /// The statistics of `samples`, or `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<LatencySummary> {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let count = sorted.len();
        let max = *sorted.last()?;
        let at = |q: f64| sorted[((count - 1) as f64 * q).round() as usize];
        let total: Duration = sorted.iter().sum();
        Some(LatencySummary {
            count,
            mean: total / u32::try_from(count).unwrap_or(u32::MAX),
            median: at(0.5),
            p95: at(0.95),
            p99: at(0.99),
            max,
        })
    }
}

impl std::fmt::Display for LatencySummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        write!(
            f,
            "n={} mean={:.0}us median={:.0}us p95={:.0}us p99={:.0}us max={:.0}us",
            self.count,
            us(self.mean),
            us(self.median),
            us(self.p95),
            us(self.p99),
            us(self.max)
        )
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors or similar: wait rather than spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(shared.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A response body fed by a channel, so frames can be timed, delayed and broken off.
struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, io::Error>>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, io::Error>>> {
        self.rx
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(BodyFrame::data)))
    }
}

fn respond(
    status: u16,
    headers: &[(&'static str, String)],
    body: ChannelBody,
) -> Response<ChannelBody> {
    let mut response = Response::new(body);
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in headers {
        if let Ok(value) = hyper::header::HeaderValue::from_str(value) {
            response.headers_mut().insert(*name, value);
        }
    }
    response
}

fn fixed(status: u16, body: &Value) -> (Plan, Option<usize>) {
    (
        Plan {
            status,
            headers: vec![("content-type", "application/json".into())],
            frames: vec![Frame::Data(Bytes::from(body.to_string()), false)],
            chunk_delay: Duration::ZERO,
        },
        None,
    )
}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<ChannelBody>, Infallible> {
    let received_at = Instant::now();
    let received_unix_us = unix_us();
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let headers: BTreeMap<String, String> = request
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let raw = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let (body, raw_body) = match serde_json::from_slice::<Value>(&raw) {
        Ok(value) => (value, None),
        Err(_) if raw.is_empty() => (Value::Null, None),
        Err(_) => (
            Value::Null,
            Some(String::from_utf8_lossy(&raw).into_owned()),
        ),
    };
    let wire = wire_of(&path);
    let refused = match wire {
        Some(w) if method == "POST" => check_wire_pairing(w == WireKind::Anthropic, &body).err(),
        _ => None,
    };

    let mut record = RecordedRequest {
        number: 0,
        method: method.clone(),
        path: path.clone(),
        headers,
        body,
        raw_body,
        refused: refused.clone(),
        received_unix_us,
        sent_unix_us: Vec::new(),
        received_at: Some(received_at),
        sent_at: Vec::new(),
        content_sent_unix_us: Vec::new(),
        content_sent_at: Vec::new(),
    };

    let (plan, slot, delay) = if method == "GET" && path == "/_scripted/requests" {
        let all = serde_json::to_value(&*lock(&shared.requests)).unwrap_or(Value::Null);
        let (plan, slot) = fixed(200, &all);
        (plan, slot, Duration::ZERO)
    } else {
        let number = {
            let mut requests = lock(&shared.requests);
            record.number = requests.len() + 1;
            requests.push(record.clone());
            record.number
        };
        if let Some(hook) = &shared.on_request {
            hook(&record);
        }
        let slot = Some(number - 1);
        match (wire, method.as_str()) {
            (Some(wire), "POST") => {
                if let Some(reason) = refused {
                    // As the real APIs do: a broken conversation is a 400, and uses no turn.
                    let body = render::error_body(ErrorKind::InvalidRequest, wire, Some(&reason));
                    (fixed(400, &body).0, slot, Duration::ZERO)
                } else {
                    let turn = lock(&shared.turns).pop_front();
                    match turn {
                        Some(turn) => (
                            render::plan(&turn, wire, &record.body, number),
                            slot,
                            Duration::from_millis(turn.delay_ms),
                        ),
                        None => {
                            let message = format!(
                                "scripted server: no turn left for request {number}; the script has fewer turns than the test made requests"
                            );
                            let body =
                                render::error_body(ErrorKind::InvalidRequest, wire, Some(&message));
                            (fixed(400, &body).0, slot, Duration::ZERO)
                        }
                    }
                }
            }
            _ => {
                let body = json!({"error": {"message": format!("scripted server: no route for {method} {path}"), "type": "invalid_request_error"}});
                (fixed(404, &body).0, slot, Duration::ZERO)
            }
        }
    };

    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    // One frame in flight: a frame's timestamp is taken when the connection is ready for it,
    // not while it waits behind others (benchmarks read these timestamps).
    let (tx, rx) = mpsc::channel(1);
    let response = respond(plan.status, &plan.headers, ChannelBody { rx });
    tokio::spawn(send_frames(shared, slot, plan.frames, plan.chunk_delay, tx));
    Ok(response)
}

/// Feeds the frames to the response body, timing each.
async fn send_frames(
    shared: Arc<Shared>,
    slot: Option<usize>,
    frames: Vec<Frame>,
    delay: Duration,
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
) {
    for frame in frames {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let (item, content) = match frame {
            Frame::Data(bytes, content) => (Ok(bytes), content),
            Frame::Drop => {
                // hyper drops unsent buffered data when a body fails; let it write out what came
                // before, so the client really sees the partial answer and then the break.
                while tx.capacity() < tx.max_capacity() && !tx.is_closed() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                let drop = io::Error::new(io::ErrorKind::ConnectionAborted, "scripted drop");
                (Err(drop), false)
            }
        };
        let last = item.is_err();
        if tx.send(item).await.is_err() {
            return; // the client went away
        }
        if let Some(slot) = slot
            && let Some(record) = lock(&shared.requests).get_mut(slot)
        {
            let (now, now_us) = (Instant::now(), unix_us());
            record.sent_at.push(now);
            record.sent_unix_us.push(now_us);
            if content {
                record.content_sent_at.push(now);
                record.content_sent_unix_us.push(now_us);
            }
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_server_serves_without_the_callers_runtime() {
        let server = ScriptedServer::spawn(vec![Turn::text("from its own thread")]).unwrap();
        // Talk to it with blocking std I/O: no runtime on this thread at all.
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        write!(
            stream,
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("from its own thread"));
        assert_eq!(server.requests()[0].body["model"], "m");
        drop(server); // stops the thread
    }

    #[test]
    fn latency_summary_orders_samples() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let s = LatencySummary::of(&samples).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(s.median, Duration::from_millis(51));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.max, Duration::from_millis(100));
        assert_eq!(s.mean, Duration::from_micros(50_500));
        assert_eq!(LatencySummary::of(&[]), None);
    }

    #[test]
    fn delta_latencies_pair_sends_with_arrivals() {
        let start = Instant::now();
        let record = RecordedRequest {
            content_sent_at: vec![start, start + Duration::from_millis(5)],
            ..RecordedRequest::default()
        };
        let arrivals = [
            start + Duration::from_millis(1),
            start + Duration::from_millis(7),
            start,
        ];
        assert_eq!(
            delta_latencies(&record, &arrivals),
            [Duration::from_millis(1), Duration::from_millis(2)]
        );
    }
}
