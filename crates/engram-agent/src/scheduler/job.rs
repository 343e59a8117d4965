//! What a job means to the scheduler: its payload (an agent turn, and where its answer goes)
//! and its missed-run policy. The store keeps both as data, the payload as a JSON object and
//! the policy as a word; these types read and write them.

use engram_core::store::jobs::{Job, JobError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What to do about runs that fell due while no gateway was running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedPolicy {
    /// Run once when the gateway starts, however many runs were missed (the default).
    #[default]
    RunOnce,
    /// Skip them; run next at the next scheduled time.
    Skip,
}

impl MissedPolicy {
    /// The stored spelling: `run_once` or `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunOnce => "run_once",
            Self::Skip => "skip",
        }
    }

    /// Reads the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "run_once" => Some(Self::RunOnce),
            "skip" => Some(Self::Skip),
            _ => None,
        }
    }

    /// A stored job's policy.
    pub fn of(job: &Job) -> Result<Self, JobError> {
        Self::parse(&job.missed).ok_or_else(|| JobError::Unreadable {
            id: job.id.clone(),
            detail: format!("unknown missed-run policy '{}'", job.missed),
        })
    }
}

/// What a job does when it runs: an agent turn with this message.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobPayload {
    /// The message the agent receives.
    pub message: String,
    /// Whether the answer is delivered to a channel.
    #[serde(default)]
    pub deliver: bool,
    /// The channel to deliver to.
    #[serde(default)]
    pub channel: Option<String>,
    /// The recipient on that channel.
    #[serde(default)]
    pub to: Option<String>,
}

impl JobPayload {
    /// A stored job's payload.
    pub fn of(job: &Job) -> Result<Self, JobError> {
        serde_json::from_value(Value::Object(job.payload.clone())).map_err(|e| {
            JobError::Unreadable {
                id: job.id.clone(),
                detail: format!("its payload is not an agent turn: {e}"),
            }
        })
    }

    /// The payload as the store keeps it.
    pub fn to_record(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            // A struct of strings and a bool always serialises to an object.
            _ => Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_round_trips_through_its_record() {
        let payload = JobPayload {
            message: "water the plants".into(),
            deliver: true,
            channel: Some("telegram".into()),
            to: Some("42".into()),
        };
        let record = payload.to_record();
        assert_eq!(
            Value::Object(record.clone()),
            serde_json::json!({"message": "water the plants", "deliver": true,
                               "channel": "telegram", "to": "42"})
        );
        let job = Job {
            id: "0badc0de".into(),
            name: "water".into(),
            enabled: true,
            schedule: engram_core::store::jobs::ScheduleRecord::At { at_ms: 0 },
            tz: "UTC".into(),
            payload: record,
            session_key: "cron:0badc0de".into(),
            missed: "skip".into(),
            delete_after_run: false,
            state: Default::default(),
            created_at_ms: 0,
            updated_at_ms: 0,
        };
        assert_eq!(JobPayload::of(&job).unwrap(), payload);
        assert_eq!(MissedPolicy::of(&job).unwrap(), MissedPolicy::Skip);
        let odd = Job {
            missed: "sometimes".into(),
            payload: Map::new(),
            ..job
        };
        assert!(matches!(
            MissedPolicy::of(&odd),
            Err(JobError::Unreadable { .. })
        ));
        assert!(matches!(
            JobPayload::of(&odd),
            Err(JobError::Unreadable { .. })
        ));
    }
}
