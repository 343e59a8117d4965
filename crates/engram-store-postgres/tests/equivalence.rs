#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The PostgreSQL engine gives the SQLite engine's answers: the same memories, times, history,
//! rankings and BM25 scores, after the same writes (batches, single adds, updates,
//! invalidations, deletes, conversations stored out of order).

mod common;

use std::sync::Arc;

use common::{Server, TestDb};
use engram_core::store::MemoryPatch;
use engram_core::{
    AddOutcome, Filter, FixedClock, Importance, Kind, Memory, MemoryId, MemoryStore, NewMemory,
    Scope,
};
use engram_store_postgres::{PgOptions, PgStore};
use engram_store_sqlite::{Database as SqliteStore, StoreOptions};
use jiff::{SignedDuration, Timestamp};
use serde_json::json;

/// SplitMix64: repeatable data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "tea",
    "coffee",
    "Berlin",
    "running",
    "runs",
    "café",
    "painting",
    "paints",
    "dog",
    "dogs",
    "garden",
    "guitar",
    "concert",
    "the",
    "a",
    "and",
    "my",
    "weekend",
    "sister",
    "moved",
    "北京",
    "东京",
    "ไทย",
    "Москва",
    "naïve",
    "résumé",
    "school",
    "teacher",
    "camping",
    "lake",
];

fn sentence(rng: &mut Rng) -> String {
    let n = 2 + rng.below(9) as usize;
    (0..n)
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

fn t0() -> Timestamp {
    "2024-01-01T00:00:00Z".parse().unwrap()
}

/// A new memory with everything chosen by `rng`, including its id (so both engines store the
/// same one).
fn new_memory(rng: &mut Rng, serial: u64) -> NewMemory {
    let user = format!("user-{}", rng.below(3));
    let mut scope = Scope::user(user);
    if rng.below(3) > 0 {
        scope = scope.with_session(format!("s{}", rng.below(3)));
    }
    if rng.below(4) == 0 {
        scope = scope.with_agent("coder");
    }
    let kind = match rng.below(5) {
        0 => Kind::Fact,
        1 => Kind::Note,
        _ => Kind::Episode,
    };
    // Times often repeat and arrive out of order.
    let at = t0() + SignedDuration::from_secs(60 * rng.below(40) as i64);
    let mut new = NewMemory::new(scope, sentence(rng))
        .with_kind(kind)
        .with_importance(Importance::new(1 + rng.below(5) as i64).unwrap())
        .at(at)
        .with_meta("n", json!(serial))
        .with_meta("tag", json!(["x", "y"][rng.below(2) as usize]));
    new.id = Some(MemoryId::new());
    if rng.below(6) == 0 {
        new = new.with_category("user_info");
    }
    if rng.below(10) == 0 {
        new.valid_to = Some(at + SignedDuration::from_secs(30));
    }
    if rng.below(10) == 0 {
        new.expires_at = Some(t0() + SignedDuration::from_hours(24 * 400));
    }
    new
}

struct Pair {
    sqlite: SqliteStore,
    pg: PgStore,
    _dir: tempfile::TempDir,
    _db: TestDb,
}

async fn pair(server: Server) -> Pair {
    let clock = Arc::new(FixedClock::new("2024-06-01T12:00:00Z".parse().unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open_with(
        dir.path().join("engram.db"),
        StoreOptions {
            clock: clock.clone(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let db = TestDb::new(server).await;
    let pg = PgStore::open(
        &db.url,
        PgOptions {
            clock,
            ..PgOptions::default()
        },
    )
    .await
    .unwrap();
    Pair {
        sqlite,
        pg,
        _dir: dir,
        _db: db,
    }
}

fn outcome_id(outcome: &AddOutcome) -> MemoryId {
    match outcome {
        AddOutcome::Added(m) => m.id,
        AddOutcome::Duplicate(id) => *id,
    }
}

async fn export(pair: &Pair, user: &str) -> (Vec<Memory>, Vec<Memory>) {
    let a = pair.sqlite.export_page(user, None, usize::MAX).unwrap();
    let mut b = Vec::new();
    pair.pg
        .export(user, &mut |m| {
            b.push(m);
            Ok(())
        })
        .await
        .unwrap();
    (a, b)
}

/// Returns how many searches found something (so that agreement is not on empty lists).
async fn same_searches(pair: &Pair, rng: &mut Rng) -> usize {
    let mut found = 0;
    let filters = |user: &str| {
        let mut list = vec![Filter::user(user)];
        let mut closed = Filter::user(user);
        closed.include_closed = true;
        list.push(closed);
        let mut kinds = Filter::user(user);
        kinds.kinds = vec![Kind::Episode, Kind::Note];
        kinds.min_importance = Some(Importance::new(2).unwrap());
        list.push(kinds);
        let mut session = Filter::user(user);
        session.session_id = Some("s1".into());
        session.since = Some(t0() + SignedDuration::from_secs(600));
        session.until = Some(t0() + SignedDuration::from_secs(1800));
        list.push(session);
        let mut meta = Filter::user(user);
        meta.metadata = vec!["tag=x".parse().unwrap()];
        meta.agent_id = Some("coder".into());
        list.push(meta);
        list
    };
    for user in ["user-0", "user-1", "user-2", "nobody"] {
        for filter in filters(user) {
            for _ in 0..6 {
                let query = sentence(rng);
                let limit = 1 + rng.below(12) as usize;
                let a = pair.sqlite.search_lexical(&filter, &query, limit).unwrap();
                let b = pair
                    .pg
                    .search_lexical(&filter, &query, limit)
                    .await
                    .unwrap();
                let a: Vec<(MemoryId, f64)> = a.iter().map(|h| (h.memory.id, h.bm25)).collect();
                let b: Vec<(MemoryId, f64)> = b.iter().map(|h| (h.memory.id, h.bm25)).collect();
                assert_eq!(a, b, "query {query:?} limit {limit} filter {filter:?}");
                found += usize::from(!a.is_empty());
            }
            let a = pair.sqlite.list(&filter, 50, 1).unwrap();
            let b = pair.pg.list(&filter, 50, 1).await.unwrap();
            assert_eq!(a, b, "list {filter:?}");
            assert_eq!(
                pair.sqlite.count(&filter).unwrap(),
                pair.pg.count(&filter).await.unwrap()
            );
            for zone in [
                jiff::tz::TimeZone::UTC,
                jiff::tz::TimeZone::fixed(jiff::tz::offset(-7)),
            ] {
                assert_eq!(
                    pair.sqlite.count_by_day(&filter, &zone).unwrap(),
                    pair.pg.count_by_day(&filter, &zone).await.unwrap(),
                    "count_by_day {filter:?}"
                );
            }
        }
    }
    found
}

async fn same_everything(pair: &Pair, ids: &[MemoryId], rng: &mut Rng) {
    for user in ["user-0", "user-1", "user-2"] {
        let (a, b) = export(pair, user).await;
        assert_eq!(a, b, "export of {user}");
    }
    for id in ids {
        let a = pair.sqlite.history(*id).map_err(|e| e.to_string());
        let b = pair.pg.history(*id).await.map_err(|e| e.to_string());
        assert_eq!(a, b, "history of {id}");
    }
    // The turn before each memory in its conversation (ranking's neighbours), asked as each
    // user: only the user's own episodes of a session have one.
    let mut linked = 0;
    for user in ["user-0", "user-1", "user-2"] {
        let a = pair.sqlite.previous_turns(user, ids).unwrap();
        let b = pair.pg.previous_turns(user, ids).await.unwrap();
        assert_eq!(a, b, "previous turns as {user}");
        linked += a.iter().flatten().count();
    }
    let found = same_searches(pair, rng).await;
    let a = pair.sqlite.stats().unwrap();
    if a.memories >= 100 {
        assert!(
            linked >= 20,
            "only {linked} memories had a turn before them"
        );
    }
    if a.memories >= 100 {
        assert!(found >= 20, "only {found} searches found anything");
    }
    let b = pair.pg.stats().await.unwrap();
    assert_eq!(
        (a.memories, a.closed, a.users, a.history_rows, a.by_kind),
        (b.memories, b.closed, b.users, b.history_rows, b.by_kind)
    );
    let users = pair.sqlite.users().unwrap();
    assert_eq!(users.len() as u64, a.users);
    assert_eq!(users, pair.pg.users().await.unwrap());
    for user in ["user-0", "user-1", "user-2", "nobody"] {
        assert_eq!(
            pair.sqlite.session_counts(user).unwrap(),
            pair.pg.session_counts(user).await.unwrap(),
            "session_counts of {user}"
        );
    }
}

async fn both_engines_agree(server: Server) {
    let pair = pair(server).await;
    let mut rng = Rng(42);
    let mut ids: Vec<MemoryId> = Vec::new();

    // Batches of several sizes, with repeats of earlier memories (same id) and of earlier
    // texts (same scope and text, new id), and single adds.
    let mut made: Vec<NewMemory> = Vec::new();
    for round in 0..6u64 {
        let size = [1, 7, 40, 3, 120, 15][round as usize];
        let mut batch: Vec<NewMemory> = Vec::new();
        for i in 0..size {
            let choice = rng.below(10);
            let new = if choice == 0 && !made.is_empty() {
                made[rng.below(made.len() as u64) as usize].clone()
            } else if choice == 1 && !made.is_empty() {
                let mut copy = made[rng.below(made.len() as u64) as usize].clone();
                copy.id = Some(MemoryId::new());
                copy
            } else {
                new_memory(&mut rng, round * 1000 + i)
            };
            made.push(new.clone());
            batch.push(new);
        }
        // An invalid one does not stop the rest.
        batch.push(NewMemory::new(Scope::user("user-0"), "   "));
        if round % 2 == 0 {
            let a = pair.sqlite.add_many(batch.clone(), "test").unwrap();
            let b = pair.pg.add_many(batch, "test").await.unwrap();
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(&b) {
                match (x, y) {
                    (Ok(x), Ok(y)) => {
                        assert_eq!(x, y);
                        ids.push(outcome_id(x));
                    }
                    (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string()),
                    _ => panic!("the engines disagree: {x:?} / {y:?}"),
                }
            }
        } else {
            for new in batch {
                let a = pair
                    .sqlite
                    .add(new.clone(), "test")
                    .map_err(|e| e.to_string());
                let b = pair.pg.add(new, "test").await.map_err(|e| e.to_string());
                assert_eq!(a, b);
                if let Ok(outcome) = a {
                    ids.push(outcome_id(&outcome));
                }
            }
        }
        same_everything(&pair, &ids, &mut rng).await;
    }

    // Changes: text (re-indexed with its context), attributes, closing, deleting.
    ids.sort();
    ids.dedup();
    for round in 0..60 {
        let id = ids[rng.below(ids.len() as u64) as usize];
        let (a, b) = match round % 5 {
            0 | 1 => {
                let patch = MemoryPatch {
                    text: Some(sentence(&mut rng)),
                    importance: Some(Importance::new(1 + rng.below(5) as i64).unwrap()),
                    ..MemoryPatch::default()
                };
                (
                    pair.sqlite
                        .update(id, patch.clone(), "edit")
                        .map_err(|e| e.to_string()),
                    pair.pg
                        .update(id, patch, "edit")
                        .await
                        .map_err(|e| e.to_string()),
                )
            }
            2 => {
                let patch = MemoryPatch {
                    category: Some(Some("decision".into())),
                    metadata: Some(json!({"tag": "y", "n": 3}).as_object().unwrap().clone()),
                    expires_at: Some(Some(t0())),
                    ..MemoryPatch::default()
                };
                (
                    pair.sqlite
                        .update(id, patch.clone(), "edit")
                        .map_err(|e| e.to_string()),
                    pair.pg
                        .update(id, patch, "edit")
                        .await
                        .map_err(|e| e.to_string()),
                )
            }
            3 => (
                pair.sqlite
                    .invalidate(id, "edit")
                    .map_err(|e| e.to_string()),
                pair.pg
                    .invalidate(id, "edit")
                    .await
                    .map_err(|e| e.to_string()),
            ),
            _ => (
                pair.sqlite.delete(id, "edit").map_err(|e| e.to_string()),
                pair.pg.delete(id, "edit").await.map_err(|e| e.to_string()),
            ),
        };
        assert_eq!(a, b, "change {round} of {id}");
        if round % 10 == 9 {
            same_everything(&pair, &ids, &mut rng).await;
        }
    }
    same_everything(&pair, &ids, &mut rng).await;

    // Forgetting a user leaves the others' rankings alone.
    assert_eq!(
        pair.sqlite.forget_user("user-1").unwrap(),
        pair.pg.forget_user("user-1").await.unwrap()
    );
    same_everything(&pair, &ids, &mut rng).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_engines_agree_with_pgvector() {
    both_engines_agree(Server::Pgvector).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_engines_agree_on_postgresql_15() {
    both_engines_agree(Server::Plain).await;
}

/// A filter that only a few of many candidates pass: the best passing ones are found however
/// far down the unfiltered ranking they are, with ties broken as in SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restrictive_filters_look_past_the_first_candidates() {
    let pair = pair(Server::Plain).await;
    let mut batch = Vec::new();
    for i in 0..400u64 {
        // Longer texts score lower; every tenth text repeats a length (equal scores).
        let filler = (0..(i % 37))
            .map(|_| "filler")
            .collect::<Vec<_>>()
            .join(" ");
        let mut scope = Scope::user("many");
        if i % 97 == 5 {
            scope = scope.with_agent("rare");
        }
        let mut new = NewMemory::new(scope, format!("green tea {filler} number{}", i % 10))
            .at(t0() + SignedDuration::from_secs((i % 50) as i64));
        new.id = Some(MemoryId::new());
        batch.push(new);
    }
    pair.sqlite.add_many(batch.clone(), "test").unwrap();
    pair.pg.add_many(batch, "test").await.unwrap();
    let mut rare = Filter::user("many");
    rare.agent_id = Some("rare".into());
    for (filter, limit) in [
        (rare, 3),
        (Filter::user("many"), 50),
        (Filter::user("many"), 399),
    ] {
        let a = pair
            .sqlite
            .search_lexical(&filter, "green tea", limit)
            .unwrap();
        let b = pair
            .pg
            .search_lexical(&filter, "green tea", limit)
            .await
            .unwrap();
        let a: Vec<(MemoryId, f64)> = a.iter().map(|h| (h.memory.id, h.bm25)).collect();
        let b: Vec<(MemoryId, f64)> = b.iter().map(|h| (h.memory.id, h.bm25)).collect();
        assert!(!a.is_empty());
        assert_eq!(a, b, "{filter:?} limit {limit}");
    }
}

/// An add that names its id (an import of an export) and finds the id taken: by the same user's
/// memory it is that memory again; by another user's it is refused, in either engine, and that
/// memory is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_engines_refuse_an_id_of_another_users_memory() {
    let pair = pair(Server::Pgvector).await;
    let id = MemoryId::new();
    let mut alices = NewMemory::new(Scope::user("alice"), "alice keeps the spare key");
    alices.id = Some(id);
    let first = (
        pair.sqlite.add(alices.clone(), "test").unwrap(),
        pair.pg.add(alices.clone(), "test").await.unwrap(),
    );
    assert!(matches!(
        first,
        (AddOutcome::Added(_), AddOutcome::Added(_))
    ));

    let again = (
        pair.sqlite.add(alices.clone(), "test").unwrap(),
        pair.pg.add(alices, "test").await.unwrap(),
    );
    assert_eq!(
        again,
        (AddOutcome::Duplicate(id), AddOutcome::Duplicate(id))
    );

    let mut bobs = NewMemory::new(Scope::user("bob"), "bob takes over that id");
    bobs.id = Some(id);
    let sqlite = pair.sqlite.add_many(vec![bobs.clone()], "test").unwrap();
    let pg = pair.pg.add_many(vec![bobs], "test").await.unwrap();
    for outcomes in [sqlite, pg] {
        let error = outcomes[0].as_ref().unwrap_err().to_string();
        assert!(
            error.contains(&format!(
                "id {id} is already used by a memory of another user"
            )),
            "{error}"
        );
    }
    assert_eq!(pair.sqlite.get(id).unwrap().scope.user_id, "alice");
    assert_eq!(pair.pg.get(id).await.unwrap().scope.user_id, "alice");
}
