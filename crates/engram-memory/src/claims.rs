//! Claims on stretches of conversation, so that two processes never extract the same messages
//! and a re-run adds nothing twice.
//!
//! A *stream* is what extraction walks along: a session's message log (claims cover message
//! ranges `[from, to)`, each starting where the last one ended), or one batch of messages sent
//! to `POST /v1/memories` (the stream is the session plus a digest of the messages, covered by
//! one claim). Before extracting, a process claims the range it wants; it gets the part no other
//! claim covers, or learns that the messages are already extracted, or that another process is
//! extracting them right now. When it is done it marks the claim done; on failure it releases
//! it, so the range can be claimed again. A claim whose process died is taken over after
//! [`CLAIM_LEASE`].
//!
//! The ledger is a JSON-lines file in the workspace, read and appended under an exclusive lock:
//! every process of one machine (`engram chat`, `engram run`, `engram serve`) sees the same
//! claims. Processes on other machines sharing one database keep their own workspace and so
//! their own ledger; the stores' storage interface is where a shared ledger belongs.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// How long a claim holds without being finished before another process may take its range.
pub const CLAIM_LEASE: Duration = Duration::from_secs(30 * 60);

/// The ledger's file name, under the workspace's `logs` folder.
pub const LEDGER_FILE: &str = "extraction-claims.jsonl";

/// Why the ledger could not be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} the extraction ledger {}: {source}", path.display())]
pub struct LedgerError {
    /// What was being done.
    pub action: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What the system said.
    #[source]
    pub source: io::Error,
}

/// A granted claim: extract messages `from..to` of the stream, then [`ClaimLedger::finish`] or
/// [`ClaimLedger::release`] it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// Whose.
    pub user: String,
    /// Which stream.
    pub stream: String,
    /// First message.
    pub from: usize,
    /// One past the last message.
    pub to: usize,
    /// Its id.
    pub id: String,
}

/// What a claim got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// These messages are yours to extract.
    Granted(Ticket),
    /// Every message asked for is already extracted.
    AlreadyDone,
    /// Another process is extracting them now.
    InProgress,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum State {
    Claimed,
    Done,
    Released,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    id: String,
    user: String,
    stream: String,
    from: usize,
    to: usize,
    state: State,
    at: Timestamp,
    pid: u32,
}

/// The ledger of one workspace.
#[derive(Debug, Clone)]
pub struct ClaimLedger {
    path: PathBuf,
    lease: Duration,
}

impl ClaimLedger {
    /// The ledger under `workspace/logs`.
    pub fn new(workspace: &Path) -> Self {
        Self {
            path: workspace.join("logs").join(LEDGER_FILE),
            lease: CLAIM_LEASE,
        }
    }

    /// The ledger in the file `path`.
    pub fn at(path: PathBuf) -> Self {
        Self {
            path,
            lease: CLAIM_LEASE,
        }
    }

    /// The same ledger with another lease (for tests).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, action: &'static str) -> impl Fn(io::Error) -> LedgerError + '_ {
        move |source| LedgerError {
            action,
            path: self.path.clone(),
            source,
        }
    }

    /// Runs `f` on the ledger's claims of (`user`, `stream`) under the lock; lines `f` returns
    /// are appended.
    fn locked<T>(
        &self,
        user: &str,
        stream: &str,
        f: impl FnOnce(&[Line]) -> (T, Vec<Line>),
    ) -> Result<T, LedgerError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(self.error("create"))?;
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&self.path)
            .map_err(self.error("open"))?;
        file.lock().map_err(self.error("lock"))?;
        let text = fs::read_to_string(&self.path).map_err(self.error("read"))?;
        // The last state of each claim of this stream; a torn last line is skipped.
        let mut latest: HashMap<String, Line> = HashMap::new();
        let mut order = Vec::new();
        for raw in text.lines() {
            let Ok(line) = serde_json::from_str::<Line>(raw) else {
                continue;
            };
            if line.user != user || line.stream != stream {
                continue;
            }
            if !latest.contains_key(&line.id) {
                order.push(line.id.clone());
            }
            latest.insert(line.id.clone(), line);
        }
        let lines: Vec<Line> = order.iter().filter_map(|id| latest.remove(id)).collect();
        let (value, append) = f(&lines);
        for line in append {
            let mut text = serde_json::to_string(&line)
                .map_err(|e| io::Error::other(e.to_string()))
                .map_err(self.error("write"))?;
            text.push('\n');
            file.write_all(text.as_bytes())
                .map_err(self.error("write"))?;
        }
        file.sync_data().map_err(self.error("write"))?;
        Ok(value)
    }

    /// Claims the messages of `stream` from `floor` (what was extracted before the ledger
    /// existed) up to `to` (exclusive) that no claim covers yet, as of `now`.
    pub fn claim(
        &self,
        user: &str,
        stream: &str,
        floor: usize,
        to: usize,
        now: Timestamp,
    ) -> Result<ClaimOutcome, LedgerError> {
        let lease = self.lease;
        self.locked(user, stream, |lines| {
            let live = |l: &Line| match l.state {
                State::Done => true,
                State::Claimed => now
                    .duration_since(l.at)
                    .try_into()
                    .map(|age: Duration| age < lease)
                    .unwrap_or(true),
                State::Released => false,
            };
            let covered_done = lines
                .iter()
                .filter(|l| matches!(l.state, State::Done))
                .map(|l| l.to)
                .max()
                .unwrap_or(0)
                .max(floor);
            let covered = lines
                .iter()
                .filter(|l| live(l))
                .map(|l| l.to)
                .max()
                .unwrap_or(0)
                .max(floor);
            if covered >= to {
                let outcome = if covered_done >= to {
                    ClaimOutcome::AlreadyDone
                } else {
                    ClaimOutcome::InProgress
                };
                return (outcome, Vec::new());
            }
            let id = engram_core::MemoryId::new().to_string();
            let line = Line {
                id: id.clone(),
                user: user.to_string(),
                stream: stream.to_string(),
                from: covered,
                to,
                state: State::Claimed,
                at: now,
                pid: std::process::id(),
            };
            let ticket = Ticket {
                user: user.to_string(),
                stream: stream.to_string(),
                from: covered,
                to,
                id,
            };
            (ClaimOutcome::Granted(ticket), vec![line])
        })
    }

    fn settle(&self, ticket: &Ticket, state: State, now: Timestamp) -> Result<(), LedgerError> {
        self.locked(&ticket.user, &ticket.stream, |_| {
            let line = Line {
                id: ticket.id.clone(),
                user: ticket.user.clone(),
                stream: ticket.stream.clone(),
                from: ticket.from,
                to: ticket.to,
                state,
                at: now,
                pid: std::process::id(),
            };
            ((), vec![line])
        })
    }

    /// Marks the claim's messages extracted.
    pub fn finish(&self, ticket: &Ticket, now: Timestamp) -> Result<(), LedgerError> {
        self.settle(ticket, State::Done, now)
    }

    /// Gives the claim up (extraction failed): its messages can be claimed again.
    pub fn release(&self, ticket: &Ticket, now: Timestamp) -> Result<(), LedgerError> {
        self.settle(ticket, State::Released, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + minutes * 60).unwrap()
    }

    fn granted(outcome: ClaimOutcome) -> Ticket {
        match outcome {
            ClaimOutcome::Granted(t) => t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn claims_cover_ranges_once_and_failures_and_dead_claims_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ClaimLedger::new(dir.path());
        let first = granted(ledger.claim("u", "s", 0, 4, at(0)).unwrap());
        assert_eq!((first.from, first.to), (0, 4));
        // Another process wants the same messages while the first works.
        let other = ClaimLedger::new(dir.path());
        assert_eq!(
            other.claim("u", "s", 0, 4, at(1)).unwrap(),
            ClaimOutcome::InProgress
        );
        // It may take the messages after them.
        let second = granted(other.claim("u", "s", 0, 6, at(1)).unwrap());
        assert_eq!((second.from, second.to), (4, 6));
        ledger.finish(&first, at(2)).unwrap();
        other.finish(&second, at(2)).unwrap();
        assert_eq!(
            ledger.claim("u", "s", 0, 6, at(3)).unwrap(),
            ClaimOutcome::AlreadyDone
        );
        // Other users and streams are apart.
        assert!(matches!(
            ledger.claim("v", "s", 0, 6, at(3)).unwrap(),
            ClaimOutcome::Granted(_)
        ));
        // A failed extraction gives its range back.
        let third = granted(ledger.claim("u", "s", 0, 9, at(4)).unwrap());
        ledger.release(&third, at(5)).unwrap();
        let again = granted(other.claim("u", "s", 0, 9, at(5)).unwrap());
        assert_eq!((again.from, again.to), (6, 9));
        // What the session log says was extracted before is not claimed again.
        assert_eq!(
            ledger.claim("w", "s", 5, 5, at(6)).unwrap(),
            ClaimOutcome::AlreadyDone
        );
        let rest = granted(ledger.claim("w", "s", 5, 7, at(6)).unwrap());
        assert_eq!((rest.from, rest.to), (5, 7));
        // A claim whose process died is taken over after the lease.
        assert_eq!(
            ledger.claim("u", "s", 0, 9, at(6)).unwrap(),
            ClaimOutcome::InProgress
        );
        let taken = granted(ledger.claim("u", "s", 0, 9, at(6 + 31)).unwrap());
        assert_eq!((taken.from, taken.to), (6, 9));
    }

    #[test]
    fn threads_racing_for_one_range_get_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let granted_count = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    let ledger = ClaimLedger::new(dir.path());
                    if let ClaimOutcome::Granted(_) = ledger.claim("u", "s", 0, 3, at(0)).unwrap() {
                        granted_count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(granted_count.into_inner(), 1);
    }
}
