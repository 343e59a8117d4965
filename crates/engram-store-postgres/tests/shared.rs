#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Several engram processes on one database: each test opens two stores on the same database
//! (two pools, two listening connections, two runner locks: what two processes or two hosts
//! have) and checks that they act as one.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Server, TestDb};
use engram_core::store::Backend;
use engram_core::store::graph::{
    Entity, GraphLink, ObservationDeletion, ObservationInput, Relation,
};
use engram_core::store::jobs::{
    AfterRun, JobError, NewJob, RUN_OUTPUT_LIMIT, RunEnd, RunStatus, RunTrigger, ScheduleRecord,
};
use engram_core::store::sessions::LogKind;
use engram_core::store::tokens::NewToken;
use engram_core::{AddOutcome, Filter, MemoryId, NewMemory, Scope};
use engram_store_postgres::{PgOptions, PgStore};
use jiff::Timestamp;
use serde_json::json;

/// Two processes' views of one database.
async fn two_stores(server: Server) -> (TestDb, Backend, Backend) {
    let db = TestDb::new(server).await;
    let a = PgStore::open(&db.url, PgOptions::default()).await.unwrap();
    let b = PgStore::open(&db.url, PgOptions::default()).await.unwrap();
    (db, Arc::new(a).backend(), Arc::new(b).backend())
}

fn new_job(name: &str, next: i64) -> NewJob {
    NewJob {
        name: name.into(),
        schedule: ScheduleRecord::Every {
            every_ms: 60_000,
            anchor_ms: 0,
        },
        tz: "UTC".into(),
        payload: json!({"message": format!("do {name}"), "deliver": false})
            .as_object()
            .unwrap()
            .clone(),
        session_key: None,
        missed: "run_once".into(),
        delete_after_run: false,
        next_run_at_ms: next,
    }
}

/// Waits until `probe` holds, for at most `limit`; returns how long it took.
async fn within<F, Fut>(limit: Duration, mut probe: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if probe().await {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "not seen within {} ms",
            limit.as_millis()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_added_through_one_is_found_through_the_other_at_once() {
    let (_db, a, b) = two_stores(Server::Pgvector).await;
    let AddOutcome::Added(memory) = a
        .memories
        .add(
            NewMemory::new(Scope::user("alice"), "Alice adopted a beagle named Rex"),
            "test",
        )
        .await
        .unwrap()
    else {
        panic!("not added")
    };
    let hits = b
        .memories
        .search_lexical(&Filter::user("alice"), "beagle", 5)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].memory, memory);
    // The same text through the other is a duplicate, not a second memory.
    assert_eq!(
        b.memories
            .add(
                NewMemory::new(Scope::user("alice"), "Alice adopted a beagle named Rex"),
                "test"
            )
            .await
            .unwrap(),
        AddOutcome::Duplicate(memory.id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_never_claim_the_same_occurrence() {
    let (_db, a, b) = two_stores(Server::Plain).await;
    let mut claimed = 0;
    for i in 0..20 {
        let job = a
            .jobs
            .add(new_job(&format!("j{i}"), 1_000), 0)
            .await
            .unwrap();
        let (x, y) = tokio::join!(
            a.jobs
                .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 1),
            b.jobs
                .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 2),
        );
        let won = usize::from(x.unwrap().is_some()) + usize::from(y.unwrap().is_some());
        assert_eq!(won, 1, "job {i} was claimed {won} times");
        claimed += won;
        // And once it is running, a manual run is refused by either.
        assert!(matches!(
            b.jobs
                .start_run(&job.id, RunTrigger::Manual, None, 1_001, 2)
                .await,
            Err(JobError::AlreadyRunning(_))
        ));
    }
    assert_eq!(claimed, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_added_anywhere_moves_every_gateway_s_version_within_a_second() {
    let (_db, a, b) = two_stores(Server::Plain).await;
    let before = b.jobs.change_version().await.unwrap();
    assert_eq!(
        b.jobs.change_version().await.unwrap(),
        before,
        "nothing changed yet"
    );
    a.jobs.add(new_job("new", 5_000), 0).await.unwrap();
    let took = within(Duration::from_secs(1), || async {
        b.jobs.change_version().await.unwrap() != before
    })
    .await;
    eprintln!("seen after {took:?}");
    assert_eq!(b.jobs.due(5_000).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_created_anywhere_works_everywhere_and_revoking_it_is_seen_within_a_second() {
    let (_db, a, b) = two_stores(Server::Plain).await;
    // The server asks for the version on every request; it must be there at once.
    assert!(b.tokens.change_version().await.is_ok());
    let before = b.tokens.try_change_version().expect("a version at once");
    let now = Timestamp::now();
    let token = NewToken {
        id: "abc123".into(),
        name: Some("ci".into()),
        users: vec!["alice".into(), "bob".into()],
        token_hash: "00ff".into(),
        created_at: now,
    };
    assert!(a.tokens.insert(token.clone()).await.unwrap());
    assert!(!b.tokens.insert(token).await.unwrap(), "the id is taken");
    let found = b.tokens.find("abc123").await.unwrap().unwrap();
    assert_eq!(found.token_hash, "00ff");
    assert_eq!(found.token.users, ["alice", "bob"]);
    assert!(found.token.is_active());
    within(Duration::from_secs(1), || async {
        b.tokens.try_change_version() != Some(before)
    })
    .await;
    let seen = b.tokens.try_change_version().unwrap();
    // Recording a use is not news.
    a.tokens.touch("abc123", now).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(b.tokens.try_change_version(), Some(seen));

    let revoked = a.tokens.revoke("abc123", now).await.unwrap();
    assert!(!revoked.is_active());
    let took = within(Duration::from_secs(1), || async {
        b.tokens.try_change_version() != Some(seen)
    })
    .await;
    eprintln!("revocation seen after {took:?}");
    assert!(
        !b.tokens
            .find("abc123")
            .await
            .unwrap()
            .unwrap()
            .token
            .is_active()
    );
    assert_eq!(b.tokens.active_count().await.unwrap(), 0);
    // Revoking twice keeps the first time.
    let later = now + jiff::SignedDuration::from_secs(60);
    assert_eq!(
        b.tokens.revoke("abc123", later).await.unwrap().revoked_at,
        revoked.revoked_at
    );
    assert_eq!(a.tokens.list().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_interrupted_only_when_its_process_is_gone() {
    let (_db, a, b) = two_stores(Server::Plain).await;
    let job = a.jobs.add(new_job("long", 1_000), 0).await.unwrap();
    let run = a
        .jobs
        .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 4242)
        .await
        .unwrap()
        .unwrap();
    // The other process, on another host (its idea of process ids means nothing here), sees
    // a live run: its runner still holds its lock.
    let stale = b
        .jobs
        .recover_interrupted(2_000, Box::new(|_| false))
        .await
        .unwrap();
    assert!(stale.is_empty(), "{stale:?}");
    assert!(
        b.jobs.due(5_000).await.unwrap().is_empty(),
        "a running job is not due"
    );

    // The runner dies (its connections close).
    drop(a);
    let stale = within(Duration::from_secs(5), || async {
        b.jobs.run(run.id).await.unwrap();
        !b.jobs
            .recover_interrupted(3_000, Box::new(|_| true))
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    eprintln!("the dead runner's run was recovered after {stale:?}");
    let run = b.jobs.run(run.id).await.unwrap();
    assert_eq!(run.status, RunStatus::Interrupted);
    let job = b.jobs.get(&job.id).await.unwrap();
    assert_eq!(job.state.running_run_id, None);
    assert_eq!(job.state.next_run_at_ms, Some(1_000), "still due");
    assert_eq!(b.jobs.due(5_000).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_keep_the_sqlite_engine_s_rules() {
    let (_db, a, _b) = two_stores(Server::Plain).await;
    let job = a.jobs.add(new_job("water", 1_000), 500).await.unwrap();
    assert_eq!(job.id.len(), 8);
    assert_eq!(job.session_key, format!("cron:{}", job.id));
    assert_eq!(job.payload["message"], "do water");
    assert_eq!(a.jobs.get(&job.id).await.unwrap(), job);
    assert!(matches!(
        a.jobs.get("nope").await,
        Err(JobError::NotFound(_))
    ));
    let run = a
        .jobs
        .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 1)
        .await
        .unwrap()
        .unwrap();
    let end = RunEnd {
        status: RunStatus::Ok,
        error: None,
        output: Some("é".repeat(RUN_OUTPUT_LIMIT + 5)),
        finished_at_ms: 1_500,
    };
    a.jobs
        .finish_run(&run, &end, AfterRun::Reschedule(Some(61_000)))
        .await
        .unwrap();
    let job = a.jobs.get(&job.id).await.unwrap();
    assert_eq!(job.state.next_run_at_ms, Some(61_000));
    assert_eq!(job.state.last_status, Some(RunStatus::Ok));
    // The old occurrence cannot be claimed again.
    assert!(
        a.jobs
            .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 2_000, 1)
            .await
            .unwrap()
            .is_none()
    );
    let runs = a.jobs.runs(&job.id, 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].duration_ms(), Some(500));
    assert_eq!(
        runs[0].output.as_ref().unwrap().chars().count(),
        RUN_OUTPUT_LIMIT + 1
    );

    // Listing: enabled only unless asked, soonest first.
    let other = a.jobs.add(new_job("b", 10), 0).await.unwrap();
    a.jobs
        .set_enabled(&job.id, false, 10, Box::new(|_| Ok(None)))
        .await
        .unwrap();
    let ids: Vec<String> = a
        .jobs
        .list(false)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(ids, std::slice::from_ref(&other.id));
    assert_eq!(a.jobs.list(true).await.unwrap().len(), 2);
    assert_eq!(a.jobs.next_wake().await.unwrap(), Some(10));
    let job = a
        .jobs
        .set_enabled(&job.id, true, 20, Box::new(|_| Ok(Some(3))))
        .await
        .unwrap();
    assert!(job.enabled);
    assert_eq!(a.jobs.next_wake().await.unwrap(), Some(3));

    // A skipped occurrence moves the job on.
    assert!(
        a.jobs
            .skip_missed(&other.id, 10, 100, AfterRun::Reschedule(Some(60_010)))
            .await
            .unwrap()
    );
    assert!(
        !a.jobs
            .skip_missed(&other.id, 10, 100, AfterRun::Keep)
            .await
            .unwrap()
    );
    assert_eq!(
        a.jobs.runs(&other.id, 5).await.unwrap()[0].status,
        RunStatus::Skipped
    );

    // A one-shot job deleted after its run keeps its runs.
    let run = a
        .jobs
        .start_run(&other.id, RunTrigger::Manual, None, 200, 1)
        .await
        .unwrap()
        .unwrap();
    a.jobs
        .finish_run(
            &run,
            &RunEnd {
                status: RunStatus::Error,
                error: Some("boom".into()),
                output: None,
                finished_at_ms: 300,
            },
            AfterRun::Delete,
        )
        .await
        .unwrap();
    assert!(matches!(
        a.jobs.get(&other.id).await,
        Err(JobError::NotFound(_))
    ));
    assert_eq!(a.jobs.runs(&other.id, 5).await.unwrap().len(), 2);
    a.jobs.remove(&job.id).await.unwrap();
    assert!(matches!(
        a.jobs.runs(&job.id, 5).await,
        Err(JobError::NotFound(_))
    ));
}

fn entity(name: &str, kind: &str, observations: &[&str]) -> Entity {
    Entity {
        name: name.to_string(),
        entity_type: kind.to_string(),
        observations: observations.iter().map(|s| s.to_string()).collect(),
    }
}

fn relation(from: &str, to: &str, kind: &str) -> Relation {
    Relation {
        from: from.to_string(),
        to: to.to_string(),
        relation_type: kind.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_graph_keeps_the_sqlite_engine_s_rules() {
    let (_db, a, b) = two_stores(Server::Plain).await;
    let now = Timestamp::now();
    let long = "x".repeat(50_000);
    let created = a
        .graph
        .create_entities(
            "u",
            &[
                entity("Alice", "person", &["likes tea", "likes tea", &long]),
                entity("Alice", "robot", &[]),
                entity("Bob", "person", &[]),
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        created,
        [
            entity("Alice", "person", &["likes tea", &long]),
            entity("Bob", "person", &[])
        ]
    );
    assert!(
        b.graph
            .create_entities("u", &[entity("Alice", "x", &[])], now)
            .await
            .unwrap()
            .is_empty()
    );
    let err = b
        .graph
        .add_observations(
            "u",
            &[
                ObservationInput {
                    entity_name: "Alice".into(),
                    contents: vec!["two".into()],
                },
                ObservationInput {
                    entity_name: "Zed".into(),
                    contents: vec!["x".into()],
                },
            ],
            now,
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Entity with name Zed not found");
    assert_eq!(
        a.graph.read_graph("u").await.unwrap().entities[0]
            .observations
            .len(),
        2
    );
    let relations = a
        .graph
        .create_relations(
            "u",
            &[
                relation("Alice", "Bob", "knows"),
                relation("Bob", "Carol", "knows"),
                relation("Alice", "Bob", "knows"),
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(relations.len(), 2);
    let opened = b
        .graph
        .open_nodes("u", &["Bob".into(), "Bob".into(), "nope".into()])
        .await
        .unwrap();
    assert_eq!(opened.entities, [entity("Bob", "person", &[])]);
    assert_eq!(
        opened.relations,
        [
            relation("Alice", "Bob", "knows"),
            relation("Bob", "Carol", "knows")
        ]
    );

    // Search memories for each row, recorded by any process.
    let pending = b.graph.pending_index("u", 100).await.unwrap();
    assert_eq!(pending.len(), 4);
    let links: Vec<_> = pending
        .iter()
        .map(|p| (p.target, MemoryId::new()))
        .collect();
    assert!(a.graph.set_index(&links).await.unwrap().is_empty());
    assert!(b.graph.pending_index("u", 100).await.unwrap().is_empty());
    let ids: Vec<MemoryId> = links.iter().map(|(_, m)| *m).collect();
    let found = b.graph.links("u", &ids).await.unwrap();
    assert_eq!(found.len(), 4);
    assert!(
        found
            .values()
            .any(|l| *l == GraphLink::Entity { name: "Bob".into() })
    );
    assert!(b.graph.links("v", &ids).await.unwrap().is_empty());
    let orphaned = a
        .graph
        .delete_observations(
            "u",
            &[ObservationDeletion {
                entity_name: "Alice".into(),
                observations: vec![long.clone(), "zz".into()],
            }],
        )
        .await
        .unwrap();
    assert_eq!(orphaned.len(), 1);
    let mut orphaned = a
        .graph
        .delete_entities("u", &["Alice".into(), "Z".into()])
        .await
        .unwrap();
    orphaned.sort();
    assert_eq!(orphaned.len(), 2);
    let read = b.graph.read_graph("u").await.unwrap();
    assert_eq!(read.entities, [entity("Bob", "person", &[])]);
    assert_eq!(read.relations, [relation("Bob", "Carol", "knows")]);
    a.graph
        .delete_relations("u", &[relation("Bob", "Carol", "knows")])
        .await
        .unwrap();
    assert!(b.graph.read_graph("u").await.unwrap().relations.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_logs_are_shared_and_appends_never_interleave() {
    let (_db, a, b) = two_stores(Server::Plain).await;
    assert_eq!(
        a.sessions
            .as_ref()
            .unwrap()
            .read("cli:x", LogKind::Session)
            .await
            .unwrap(),
        None
    );
    a.sessions
        .as_ref()
        .unwrap()
        .append(
            "cli:x",
            LogKind::Session,
            Some("{\"_type\":\"metadata\"}".into()),
            vec!["{\"n\":1}".into()],
        )
        .await
        .unwrap();
    // `first` only starts a new log.
    b.sessions
        .as_ref()
        .unwrap()
        .append(
            "cli:x",
            LogKind::Session,
            Some("ignored".into()),
            vec!["{\"n\":2}".into()],
        )
        .await
        .unwrap();
    let log = b
        .sessions
        .as_ref()
        .unwrap()
        .read("cli:x", LogKind::Session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(log.text, "{\"_type\":\"metadata\"}\n{\"n\":1}\n{\"n\":2}\n");
    assert_eq!(log.bytes, log.text.len() as u64);
    assert_eq!(
        b.sessions
            .as_ref()
            .unwrap()
            .read("cli:x", LogKind::Archive)
            .await
            .unwrap(),
        None
    );

    // Two processes appending batches at once: each batch stays whole.
    let batch = |who: &str| -> Vec<String> { (0..50).map(|i| format!("{who}{i}")).collect() };
    let mut tasks = Vec::new();
    for (store, who) in [
        (a.sessions.clone().unwrap(), "a"),
        (b.sessions.clone().unwrap(), "b"),
    ] {
        for round in 0..5 {
            let store = store.clone();
            let lines = batch(&format!("{who}{round}-"));
            tasks.push(tokio::spawn(async move {
                store.append("cli:y", LogKind::Archive, None, lines).await
            }));
        }
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let text = a
        .sessions
        .as_ref()
        .unwrap()
        .read("cli:y", LogKind::Archive)
        .await
        .unwrap()
        .unwrap()
        .text;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 500);
    for chunk in lines.chunks(50) {
        let prefix = chunk[0].trim_end_matches(char::is_numeric);
        assert!(chunk.iter().all(|l| l.starts_with(prefix)), "{chunk:?}");
    }
    assert_eq!(
        a.sessions.as_ref().unwrap().keys().await.unwrap(),
        ["cli:x"]
    );
    assert!(b.sessions.as_ref().unwrap().delete("cli:y").await.unwrap());
    assert!(!b.sessions.as_ref().unwrap().delete("cli:y").await.unwrap());
    assert!(
        a.sessions
            .as_ref()
            .unwrap()
            .location("cli:x", LogKind::Archive)
            .contains("the archive of session cli:x")
    );
}
