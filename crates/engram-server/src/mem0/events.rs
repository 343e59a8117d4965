//! The events Mem0's hosted API answers adds with (`GET /v1/event/{event_id}/`).
//!
//! engram finishes an add before it answers, so every event is born finished (`SUCCEEDED`)
//! and exists so that clients which poll for it find it. The server process keeps the most
//! recent [`MAX_EVENTS`] (a restart forgets them: the memories they report are in the store).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::auth::Access;

/// How many events are kept.
pub const MAX_EVENTS: usize = 10_000;

#[derive(Debug)]
struct Stored {
    owner: String,
    body: Value,
}

#[derive(Debug, Default)]
struct Inner {
    order: VecDeque<String>,
    by_id: HashMap<String, Stored>,
}

/// Recent events, by id.
#[derive(Debug, Default)]
pub struct Events {
    inner: Mutex<Inner>,
}

impl Events {
    /// Records a finished add for `owner` and gives its id.
    pub fn finished_add(
        &self,
        owner: &str,
        payload: Value,
        results: Value,
        started: Timestamp,
    ) -> String {
        let id = uuid::Uuid::now_v7().to_string();
        let completed = Timestamp::now();
        let latency_ms = completed.duration_since(started).as_secs_f64() * 1000.0;
        let body = json!({
            "id": id,
            "event_type": "ADD",
            "status": "SUCCEEDED",
            "payload": payload,
            "metadata": {},
            "results": results,
            "created_at": started,
            "updated_at": completed,
            "started_at": started,
            "completed_at": completed,
            "latency": latency_ms,
            "graph_status": null,
            "error": null,
        });
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while inner.order.len() >= MAX_EVENTS {
            match inner.order.pop_front() {
                Some(old) => {
                    inner.by_id.remove(&old);
                }
                None => break,
            }
        }
        inner.order.push_back(id.clone());
        inner.by_id.insert(
            id.clone(),
            Stored {
                owner: owner.to_string(),
                body,
            },
        );
        id
    }

    /// The event, if it exists and belongs to a user the caller may see.
    pub fn get(&self, id: &str, access: &Access) -> Option<Value> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .by_id
            .get(id)
            .filter(|e| access.allows(&e.owner))
            .map(|e| e.body.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_kept_for_their_owner_and_the_oldest_go_first() {
        let events = Events::default();
        let id = events.finished_add("alice", json!({}), json!([]), Timestamp::now());
        let alice = Access::Token {
            id: "t".into(),
            users: vec!["alice".into()],
        };
        let bob = Access::Token {
            id: "u".into(),
            users: vec!["bob".into()],
        };
        assert_eq!(events.get(&id, &alice).unwrap()["status"], "SUCCEEDED");
        assert!(events.get(&id, &bob).is_none());
        for _ in 0..MAX_EVENTS {
            events.finished_add("alice", json!({}), json!([]), Timestamp::now());
        }
        assert!(events.get(&id, &alice).is_none());
    }
}
