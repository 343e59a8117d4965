//! How the scheduler runs an agent turn, without knowing the agent.
//!
//! The gateway and `engram cron run` hand every turn to a [`TurnRunner`]. The real one wraps
//! the agent (wired in by the command line); [`EchoRunner`] is a stand-in for tests.

use std::time::Duration;

use async_trait::async_trait;

/// Where a turn comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOrigin {
    /// A scheduled job.
    Job {
        /// The job's id.
        id: String,
        /// The job's name.
        name: String,
    },
    /// The periodic heartbeat.
    Heartbeat,
}

/// One agent turn the scheduler asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// The session the turn belongs to (`cron:<id>` for jobs, `heartbeat` for the heartbeat).
    pub session_key: String,
    /// The user message of the turn.
    pub message: String,
    /// Keep at most this many messages of the session's history (older ones are dropped), so
    /// a session that is fed forever cannot grow without bound. `None`: the agent's default.
    pub history_limit: Option<usize>,
    /// Why the turn runs.
    pub origin: TurnOrigin,
}

/// Why a turn failed, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TurnError(pub String);

/// Runs agent turns for the scheduler.
#[async_trait]
pub trait TurnRunner: Send + Sync {
    /// Runs one turn and returns the agent's answer.
    async fn run_turn(&self, turn: Turn) -> Result<String, TurnError>;
}

/// A stand-in runner for tests and for trying the gateway without a model: it answers
/// `echo: <message>`. Two prefixes steer it: `sleep:<seconds> <rest>` waits first, and
/// `fail:<reason>` fails with that reason. `engram gateway` uses it only when the
/// environment variable `ENGRAM_GATEWAY_RUNNER=echo` is set (a test hook).
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoRunner;

#[async_trait]
impl TurnRunner for EchoRunner {
    async fn run_turn(&self, turn: Turn) -> Result<String, TurnError> {
        let mut message = turn.message.trim();
        if let Some(rest) = message.strip_prefix("sleep:") {
            let (secs, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            let secs: f64 = secs
                .parse()
                .map_err(|_| TurnError(format!("echo runner: bad sleep '{secs}'")))?;
            tokio::time::sleep(Duration::from_secs_f64(secs.clamp(0.0, 3600.0))).await;
            message = rest.trim();
        }
        if let Some(reason) = message.strip_prefix("fail:") {
            return Err(TurnError(reason.trim().to_string()));
        }
        Ok(format!("echo: {message}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(message: &str) -> Turn {
        Turn {
            session_key: "cron:x".into(),
            message: message.into(),
            history_limit: None,
            origin: TurnOrigin::Heartbeat,
        }
    }

    #[tokio::test]
    async fn echo_runner_follows_its_prefixes() {
        assert_eq!(EchoRunner.run_turn(turn("hi")).await.unwrap(), "echo: hi");
        let err = EchoRunner
            .run_turn(turn("fail: disk on fire"))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "disk on fire");
        let start = std::time::Instant::now();
        let out = EchoRunner.run_turn(turn("sleep:0.05 done")).await.unwrap();
        assert_eq!(out, "echo: done");
        assert!(start.elapsed() >= Duration::from_millis(50));
    }
}
