//! News from other processes: one connection per process that LISTENs for changes to jobs and
//! tokens (the tables' triggers NOTIFY), and that holds this process's *runner lock*.
//!
//! - A gateway asks [`Notices::jobs_version`] every second; the number moves as soon as any
//!   process (on any host) added, changed or removed a job, so a new job is picked up within
//!   that second without reading the jobs table each time.
//! - A server asks [`Notices::tokens_version`] on every request; it moves when a token is
//!   created, revoked or removed anywhere, so a revoked token is refused everywhere at once.
//! - The runner lock is a session-level advisory lock on a random key, held by this connection
//!   for as long as the process lives. Runs record the key; a run whose key nobody holds was
//!   left by a process that died (see jobs.rs), whichever host it ran on.
//!
//! While the connection is down (the server restarting), both versions move on every call, so
//! callers fall back to reading the tables; it reconnects by itself, once a second.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::tls::Tls;

/// The channels the triggers of migration 1 notify.
const JOBS_CHANNEL: &str = "engram_jobs";
const TOKENS_CHANNEL: &str = "engram_tokens";

#[derive(Debug, Default)]
struct State {
    jobs: AtomicI64,
    tokens: AtomicI64,
    /// Bumped on every call while disconnected.
    fallback: AtomicI64,
    connected: AtomicBool,
}

impl State {
    fn bump_all(&self) {
        self.jobs.fetch_add(1, Ordering::SeqCst);
        self.tokens.fetch_add(1, Ordering::SeqCst);
    }
}

/// The listening connection of one process (started on first use).
#[derive(Debug)]
pub(crate) struct Notices {
    config: tokio_postgres::Config,
    tls: Tls,
    state: Arc<State>,
    runner_lock: i64,
    task: std::sync::Mutex<Option<JoinHandle<()>>>,
    up: watch::Receiver<bool>,
    up_sender: Arc<watch::Sender<bool>>,
}

impl Notices {
    pub(crate) fn new(config: tokio_postgres::Config, tls: Tls) -> Self {
        let (up_sender, up) = watch::channel(false);
        // Any 64-bit key no other live process uses; v7 UUIDs end in 62 random bits.
        let random = uuid::Uuid::now_v7().as_u128() as u64;
        Self {
            config,
            tls,
            state: Arc::new(State::default()),
            runner_lock: random as i64,
            task: std::sync::Mutex::new(None),
            up,
            up_sender: Arc::new(up_sender),
        }
    }

    /// The key of this process's runner lock.
    pub(crate) fn runner_lock(&self) -> i64 {
        self.runner_lock
    }

    /// Starts listening, once, on the current async runtime.
    fn start(&self) {
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        *task = Some(runtime.spawn(listen(
            self.config.clone(),
            self.tls.clone(),
            self.state.clone(),
            self.runner_lock,
            self.up_sender.clone(),
        )));
    }

    /// Waits (up to `wait`) until the connection is up; true when it is.
    pub(crate) async fn ready(&self, wait: Duration) -> bool {
        self.start();
        let mut up = self.up.clone();
        tokio::time::timeout(wait, up.wait_for(|up| *up))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    fn version(&self, counter: &AtomicI64) -> Option<i64> {
        self.start();
        self.state
            .connected
            .load(Ordering::SeqCst)
            .then(|| counter.load(Ordering::SeqCst))
    }

    fn moving(&self) -> i64 {
        // Negative, so it never equals a version read while connected.
        -1 - self.state.fallback.fetch_add(1, Ordering::SeqCst)
    }

    /// A number that moves whenever jobs may have changed anywhere (see the module docs).
    pub(crate) async fn jobs_version(&self, wait: Duration) -> i64 {
        if let Some(v) = self.version(&self.state.jobs) {
            return v;
        }
        if self.ready(wait).await
            && let Some(v) = self.version(&self.state.jobs)
        {
            return v;
        }
        self.moving()
    }

    /// The tokens' version if it can be had at once.
    pub(crate) fn try_tokens_version(&self) -> Option<i64> {
        self.version(&self.state.tokens)
    }

    /// A number that moves whenever tokens may have changed anywhere.
    pub(crate) async fn tokens_version(&self, wait: Duration) -> i64 {
        if let Some(v) = self.try_tokens_version() {
            return v;
        }
        if self.ready(wait).await
            && let Some(v) = self.try_tokens_version()
        {
            return v;
        }
        self.moving()
    }
}

impl Drop for Notices {
    fn drop(&mut self) {
        // Closing the connection releases the runner lock at once.
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

/// Drives a listening connection, handing on the channel of each notification; ends when the
/// connection does.
async fn forward<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    sender: tokio::sync::mpsc::UnboundedSender<String>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(Ok(message)) = messages.next().await {
        if let AsyncMessage::Notification(n) = message
            && sender.send(n.channel().to_string()).is_err()
        {
            break;
        }
    }
}

/// The listening loop: connect, LISTEN, take the runner lock, count notifications; on any
/// failure, mark everything changed and try again a second later.
async fn listen(
    config: tokio_postgres::Config,
    tls: Tls,
    state: Arc<State>,
    runner_lock: i64,
    up: Arc<watch::Sender<bool>>,
) {
    loop {
        let (sender, mut channels) = tokio::sync::mpsc::unbounded_channel::<String>();
        let connected = match &tls {
            Tls::Plain => config
                .connect(NoTls)
                .await
                .map(|(client, connection)| (client, tokio::spawn(forward(connection, sender)))),
            Tls::Verified(connect) => config
                .connect(connect.clone())
                .await
                .map(|(client, connection)| (client, tokio::spawn(forward(connection, sender)))),
        };
        if let Ok((client, driver)) = connected {
            let listening = client
                .batch_execute(&format!("LISTEN {JOBS_CHANNEL}; LISTEN {TOKENS_CHANNEL};"))
                .await
                .is_ok()
                && client
                    .execute("SELECT pg_advisory_lock($1)", &[&runner_lock])
                    .await
                    .is_ok();
            if listening {
                state.connected.store(true, Ordering::SeqCst);
                // Whatever happened while nobody listened is news.
                state.bump_all();
                up.send_replace(true);
                while let Some(channel) = channels.recv().await {
                    match channel.as_str() {
                        JOBS_CHANNEL => state.jobs.fetch_add(1, Ordering::SeqCst),
                        _ => state.tokens.fetch_add(1, Ordering::SeqCst),
                    };
                }
                state.connected.store(false, Ordering::SeqCst);
                state.bump_all();
                up.send_replace(false);
                tracing::warn!(
                    "the connection that listens for changes from other processes closed; reconnecting"
                );
            }
            driver.abort();
            drop(client);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
