//! `engram bench server --faults`: misbehaving clients and a busy database, run beside the
//! well-behaved searches so that the bench reports what those saw while the server was under
//! attack or bad luck.
//!
//! - `stalled=N`: N connections that each send half a request head and then nothing. When the
//!   server closes one (its header timeout) or refuses it (its connection cap), it is opened
//!   again, so N stay pending all along.
//! - `slow=N`: N clients that send whole, valid searches a byte at a time
//!   ([`SLOW_BYTE_INTERVAL`] apart), one request per connection.
//! - `flood=N`: N clients sending searches without a token as fast as they are answered.
//! - `db-lock=HOLD[/EVERY]`: another connection to the SQLite file takes the write lock
//!   (`BEGIN IMMEDIATE`) for HOLD ms, every EVERY ms (default 1000).
//!
//! Beside them, in fault mode, one well-behaved writer adds a memory every [`WRITE_INTERVAL`],
//! since a write lock is felt by writes (searches read from WAL snapshots).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::percentile_ms;

/// The pause between two bytes of a slow client.
pub const SLOW_BYTE_INTERVAL: Duration = Duration::from_millis(20);
/// The pause between two writes of the well-behaved writer.
pub const WRITE_INTERVAL: Duration = Duration::from_millis(20);
/// The default period of `db-lock`.
const DEFAULT_LOCK_EVERY_MS: u64 = 1000;

/// The faults to inject, as `--faults` names them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Faults {
    /// Connections that send half a request and stall.
    pub stalled: usize,
    /// Clients that trickle their requests a byte at a time.
    pub slow: usize,
    /// Clients that send requests without a token as fast as they can.
    pub flood: usize,
    /// The database's write lock held by another connection, repeatedly.
    pub db_lock: Option<DbLock>,
}

/// `db-lock=HOLD/EVERY`: the write lock held for `hold_ms` every `every_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DbLock {
    /// How long each lock is held, in ms.
    pub hold_ms: u64,
    /// How often it is taken, in ms.
    pub every_ms: u64,
}

impl Faults {
    /// Whether any fault is asked for.
    pub fn any(&self) -> bool {
        self.stalled > 0 || self.slow > 0 || self.flood > 0 || self.db_lock.is_some()
    }
}

impl fmt::Display for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.stalled > 0 {
            parts.push(format!("stalled={}", self.stalled));
        }
        if self.slow > 0 {
            parts.push(format!("slow={}", self.slow));
        }
        if self.flood > 0 {
            parts.push(format!("flood={}", self.flood));
        }
        if let Some(lock) = self.db_lock {
            parts.push(format!("db-lock={}/{}", lock.hold_ms, lock.every_ms));
        }
        f.write_str(&parts.join(","))
    }
}

impl FromStr for Faults {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut faults = Faults::default();
        let mut seen = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("'{part}' is not NAME=VALUE"))?;
            let name = name.trim();
            if seen.contains(&name) {
                return Err(format!("{name} is given twice"));
            }
            seen.push(name);
            let count = |value: &str| -> Result<usize, String> {
                value
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| format!("{name}: '{value}' is not a whole number"))
            };
            match name {
                "stalled" => faults.stalled = count(value)?,
                "slow" => faults.slow = count(value)?,
                "flood" => faults.flood = count(value)?,
                "db-lock" => {
                    let (hold, every) = match value.split_once('/') {
                        Some((hold, every)) => (hold, Some(every)),
                        None => (value, None),
                    };
                    let ms = |v: &str| -> Result<u64, String> {
                        v.trim()
                            .parse::<u64>()
                            .map_err(|_| format!("db-lock: '{v}' is not a number of ms"))
                    };
                    let hold_ms = ms(hold)?;
                    let every_ms = every.map(ms).transpose()?.unwrap_or(DEFAULT_LOCK_EVERY_MS);
                    if hold_ms == 0 || hold_ms > every_ms {
                        return Err(format!(
                            "db-lock: the hold ({hold_ms} ms) must be positive and at most the period ({every_ms} ms)"
                        ));
                    }
                    faults.db_lock = Some(DbLock { hold_ms, every_ms });
                }
                other => {
                    return Err(format!(
                        "unknown fault '{other}' (expected stalled, slow, flood or db-lock)"
                    ));
                }
            }
        }
        if !faults.any() {
            return Err("no fault given (e.g. stalled=2000,slow=50,flood=200,db-lock=200)".into());
        }
        Ok(faults)
    }
}

/// What the faults did, and what the well-behaved writer saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FaultReport {
    /// The faults asked for.
    pub faults: String,
    /// Stalled connections pending once the faults were set up (before the warm-up).
    pub stalled_open_at_start: u64,
    /// Stalled connections pending when the searches ended.
    pub stalled_open_at_end: u64,
    /// Stalled connections opened in all (the first N and every reopening).
    pub stalled_opened: u64,
    /// Stalled connections the server closed (its header timeout).
    pub stalled_closed_by_server: u64,
    /// Stalled connections the server refused with 503 busy (its connection cap).
    pub stalled_refused_busy: u64,
    /// Connects that failed, over all the misbehaving clients.
    pub connect_errors: u64,
    /// Slow clients' requests answered (any status).
    pub slow_answered: u64,
    /// Slow clients' requests answered 200.
    pub slow_ok: u64,
    /// Slow clients' requests cut off by the server before an answer.
    pub slow_cut_off: u64,
    /// Requests of the flood answered.
    pub flood_requests: u64,
    /// Of them, answered 401 (as they should be).
    pub flood_unauthorized: u64,
    /// Of them, answered 503 busy.
    pub flood_busy: u64,
    /// Flood requests that failed without an answer.
    pub flood_errors: u64,
    /// Write locks taken.
    pub db_locks: u64,
    /// Time the write lock was held in all, in seconds.
    pub db_locked_seconds: f64,
    /// Well-behaved writes (`POST /v1/memories`) made.
    pub writes: u64,
    /// Of them, not answered 2xx (or not answered at all).
    pub write_errors: u64,
    /// Their latency.
    pub write_p50_ms: f64,
    /// Their latency.
    pub write_p99_ms: f64,
    /// CPU seconds the misbehaving clients and the writer used while the searches ran.
    pub clients_cpu_seconds: f64,
}

#[derive(Default)]
struct Counters {
    stalled_open: AtomicU64,
    stalled_opened: AtomicU64,
    stalled_closed: AtomicU64,
    stalled_busy: AtomicU64,
    connect_errors: AtomicU64,
    slow_answered: AtomicU64,
    slow_ok: AtomicU64,
    slow_cut_off: AtomicU64,
    flood_requests: AtomicU64,
    flood_unauthorized: AtomicU64,
    flood_busy: AtomicU64,
    flood_errors: AtomicU64,
    db_locks: AtomicU64,
    db_locked_micros: AtomicU64,
    writes: AtomicU64,
    write_errors: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Faults running in the background; [`FaultRun::stop`] ends them and reports.
pub struct FaultRun {
    faults: Faults,
    runtime: tokio::runtime::Runtime,
    stop: watch::Sender<bool>,
    counters: Arc<Counters>,
    write_latencies: Arc<Mutex<Vec<Duration>>>,
    lock_thread: Option<std::thread::JoinHandle<Result<()>>>,
    stalled_open_at_start: u64,
}

/// Where the faults aim: the server, a token for the writer and the slow clients, a search
/// body, and the database file for `db-lock`.
pub struct Target {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// A bearer token.
    pub token: String,
    /// A user the token may touch.
    pub user: String,
    /// A search body (JSON) the slow clients and the flood send.
    pub search_body: String,
    /// The SQLite file the server uses.
    pub database: PathBuf,
}

impl FaultRun {
    /// Starts the faults and waits (up to 30 s) until the stalled connections are pending.
    pub fn start(faults: &Faults, target: Target) -> Result<Self> {
        // Thousands of sockets: as many files as this process may have.
        engram_server::connections::raise_open_file_limit();
        let address = target
            .url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("not an http URL: {}", target.url))?
            .to_string();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let (stop, stopped) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let write_latencies = Arc::new(Mutex::new(Vec::new()));
        let target = Arc::new(target);
        for _ in 0..faults.stalled {
            runtime.spawn(stalled_client(
                address.clone(),
                counters.clone(),
                stopped.clone(),
            ));
        }
        for _ in 0..faults.slow {
            runtime.spawn(slow_client(
                address.clone(),
                target.clone(),
                counters.clone(),
                stopped.clone(),
            ));
        }
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(faults.flood.max(1) + 1)
            .build()?;
        for _ in 0..faults.flood {
            runtime.spawn(flood_client(
                client.clone(),
                target.clone(),
                counters.clone(),
                stopped.clone(),
            ));
        }
        runtime.spawn(writer(
            client,
            target.clone(),
            counters.clone(),
            write_latencies.clone(),
            stopped.clone(),
        ));
        let lock_thread = match faults.db_lock {
            Some(lock) => {
                let (database, counters, stopped) =
                    (target.database.clone(), counters.clone(), stopped.clone());
                Some(
                    std::thread::Builder::new()
                        .name("db-lock".into())
                        .spawn(move || hold_locks(&database, lock, &counters, &stopped))?,
                )
            }
            None => None,
        };
        let wanted = faults.stalled as u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        while counters.stalled_open.load(Ordering::Relaxed) < wanted && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let stalled_open_at_start = counters.stalled_open.load(Ordering::Relaxed);
        Ok(Self {
            faults: faults.clone(),
            runtime,
            stop,
            counters,
            write_latencies,
            lock_thread,
            stalled_open_at_start,
        })
    }

    /// Stalled connections pending now.
    pub fn stalled_open(&self) -> u64 {
        self.counters.stalled_open.load(Ordering::Relaxed)
    }

    /// Ends the faults and reports what they did; `clients_cpu_seconds` is what they cost
    /// meanwhile, as the caller measured it.
    pub fn stop(self, clients_cpu_seconds: f64) -> Result<FaultReport> {
        let stalled_open_at_end = self.stalled_open();
        let _ = self.stop.send(true);
        if let Some(thread) = self.lock_thread {
            thread
                .join()
                .map_err(|_| anyhow!("the db-lock thread panicked"))??;
        }
        self.runtime.shutdown_timeout(Duration::from_secs(2));
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut latencies = self
            .write_latencies
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        latencies.sort();
        Ok(FaultReport {
            faults: self.faults.to_string(),
            stalled_open_at_start: self.stalled_open_at_start,
            stalled_open_at_end,
            stalled_opened: load(&c.stalled_opened),
            stalled_closed_by_server: load(&c.stalled_closed),
            stalled_refused_busy: load(&c.stalled_busy),
            connect_errors: load(&c.connect_errors),
            slow_answered: load(&c.slow_answered),
            slow_ok: load(&c.slow_ok),
            slow_cut_off: load(&c.slow_cut_off),
            flood_requests: load(&c.flood_requests),
            flood_unauthorized: load(&c.flood_unauthorized),
            flood_busy: load(&c.flood_busy),
            flood_errors: load(&c.flood_errors),
            db_locks: load(&c.db_locks),
            db_locked_seconds: load(&c.db_locked_micros) as f64 / 1e6,
            writes: load(&c.writes),
            write_errors: load(&c.write_errors),
            write_p50_ms: percentile_ms(&latencies, 0.5),
            write_p99_ms: percentile_ms(&latencies, 0.99),
            clients_cpu_seconds,
        })
    }
}

/// Sleeps `pause`, or less if the run is stopped; true when stopped.
async fn pause_or_stop(pause: Duration, stopped: &mut watch::Receiver<bool>) -> bool {
    if *stopped.borrow() {
        return true;
    }
    let woken = tokio::select! {
        _ = tokio::time::sleep(pause) => false,
        _ = stopped.changed() => true,
    };
    woken || *stopped.borrow()
}

/// The status code of an HTTP/1.1 answer's first bytes.
fn status_of(answer: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(answer.get(..12)?).ok()?;
    text.strip_prefix("HTTP/1.1 ")?.parse().ok()
}

/// Half a request head, then nothing, until the server gives up on it; then again.
async fn stalled_client(
    address: String,
    counters: Arc<Counters>,
    mut stopped: watch::Receiver<bool>,
) {
    const HALF_A_HEAD: &[u8] =
        b"POST /v1/memories/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Le";
    loop {
        let Ok(mut stream) = TcpStream::connect(&address).await else {
            bump(&counters.connect_errors);
            if pause_or_stop(Duration::from_millis(100), &mut stopped).await {
                return;
            }
            continue;
        };
        if stream.write_all(HALF_A_HEAD).await.is_err() {
            bump(&counters.stalled_closed);
            continue;
        }
        bump(&counters.stalled_opened);
        counters.stalled_open.fetch_add(1, Ordering::Relaxed);
        let mut answer = Vec::new();
        let ended = tokio::select! {
            _ = stream.read_to_end(&mut answer) => false,
            _ = stopped.changed() => true,
        };
        counters.stalled_open.fetch_sub(1, Ordering::Relaxed);
        if ended || *stopped.borrow() {
            return;
        }
        if status_of(&answer) == Some(503) {
            bump(&counters.stalled_busy);
        } else {
            bump(&counters.stalled_closed);
        }
        // A short breath, as an attacker's reconnect loop would take.
        if pause_or_stop(Duration::from_millis(10), &mut stopped).await {
            return;
        }
    }
}

/// Whole searches a byte at a time, one per connection.
async fn slow_client(
    address: String,
    target: Arc<Target>,
    counters: Arc<Counters>,
    mut stopped: watch::Receiver<bool>,
) {
    let request = format!(
        "POST /v1/memories/search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        target.token,
        target.search_body.len(),
        target.search_body
    );
    loop {
        let Ok(mut stream) = TcpStream::connect(&address).await else {
            bump(&counters.connect_errors);
            if pause_or_stop(Duration::from_millis(100), &mut stopped).await {
                return;
            }
            continue;
        };
        for byte in request.as_bytes() {
            if stream.write_all(&[*byte]).await.is_err() {
                break;
            }
            if pause_or_stop(SLOW_BYTE_INTERVAL, &mut stopped).await {
                return;
            }
        }
        let mut answer = Vec::new();
        tokio::select! {
            _ = stream.read_to_end(&mut answer) => {}
            _ = stopped.changed() => return,
        }
        // A server that gave up on the request may still have said why (408, 503) first.
        match status_of(&answer) {
            Some(status) => {
                bump(&counters.slow_answered);
                if status == 200 {
                    bump(&counters.slow_ok);
                }
            }
            None => bump(&counters.slow_cut_off),
        }
    }
}

/// Searches without a token, as fast as they are answered.
async fn flood_client(
    client: reqwest::Client,
    target: Arc<Target>,
    counters: Arc<Counters>,
    stopped: watch::Receiver<bool>,
) {
    let url = format!("{}/v1/memories/search", target.url);
    while !*stopped.borrow() {
        let sent = client
            .post(&url)
            .header("content-type", "application/json")
            .body(target.search_body.clone())
            .send()
            .await;
        match sent {
            Ok(response) => {
                bump(&counters.flood_requests);
                match response.status().as_u16() {
                    401 => bump(&counters.flood_unauthorized),
                    503 => bump(&counters.flood_busy),
                    _ => {}
                }
                let _ = response.bytes().await;
            }
            Err(_) => {
                bump(&counters.flood_errors);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// One well-behaved client adding a memory every [`WRITE_INTERVAL`].
async fn writer(
    client: reqwest::Client,
    target: Arc<Target>,
    counters: Arc<Counters>,
    latencies: Arc<Mutex<Vec<Duration>>>,
    mut stopped: watch::Receiver<bool>,
) {
    let url = format!("{}/v1/memories", target.url);
    let mut n = 0u64;
    loop {
        n += 1;
        let body = serde_json::json!({
            "user_id": target.user,
            "text": format!("a note written under faults, number {n}"),
        });
        let started = Instant::now();
        let answer = client
            .post(&url)
            .bearer_auth(&target.token)
            .json(&body)
            .send()
            .await;
        let ok = match answer {
            Ok(response) => {
                let ok = response.status().is_success();
                let _ = response.bytes().await;
                ok
            }
            Err(_) => false,
        };
        bump(&counters.writes);
        if ok {
            if let Ok(mut l) = latencies.lock() {
                l.push(started.elapsed());
            }
        } else {
            bump(&counters.write_errors);
        }
        if pause_or_stop(WRITE_INTERVAL, &mut stopped).await {
            return;
        }
    }
}

/// Takes the database's write lock for `hold_ms` every `every_ms` until stopped.
fn hold_locks(
    database: &std::path::Path,
    lock: DbLock,
    counters: &Counters,
    stopped: &watch::Receiver<bool>,
) -> Result<()> {
    let conn = rusqlite::Connection::open(database)
        .with_context(|| format!("db-lock: cannot open {}", database.display()))?;
    conn.busy_timeout(Duration::from_secs(30))?;
    let hold = Duration::from_millis(lock.hold_ms);
    let rest = Duration::from_millis(lock.every_ms - lock.hold_ms);
    while !*stopped.borrow() {
        conn.execute_batch("BEGIN IMMEDIATE")
            .context("db-lock: cannot take the write lock")?;
        let taken = Instant::now();
        std::thread::sleep(hold);
        conn.execute_batch("COMMIT")?;
        bump(&counters.db_locks);
        counters.db_locked_micros.fetch_add(
            u64::try_from(taken.elapsed().as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        std::thread::sleep(rest);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_read_from_the_command_line() {
        let f: Faults = "stalled=2000,slow=50,flood=200,db-lock=200"
            .parse()
            .unwrap();
        assert_eq!((f.stalled, f.slow, f.flood), (2000, 50, 200));
        assert_eq!(
            f.db_lock,
            Some(DbLock {
                hold_ms: 200,
                every_ms: 1000
            })
        );
        assert_eq!(
            f.to_string(),
            "stalled=2000,slow=50,flood=200,db-lock=200/1000"
        );
        let f: Faults = "db-lock=50/100".parse().unwrap();
        assert_eq!(f.db_lock.map(|l| (l.hold_ms, l.every_ms)), Some((50, 100)));
        assert_eq!(f.stalled, 0);
        for bad in [
            "",
            "stalled",
            "stalled=lots",
            "stalled=1,stalled=2",
            "slowloris=3",
            "db-lock=0",
            "db-lock=500/100",
            "flood=0",
        ] {
            assert!(bad.parse::<Faults>().is_err(), "{bad}");
        }
    }

    #[test]
    fn answers_status_lines_are_read() {
        assert_eq!(
            status_of(b"HTTP/1.1 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n\r\n"), Some(200));
        assert_eq!(status_of(b""), None);
        assert_eq!(status_of(b"garbage that is long"), None);
    }
}
