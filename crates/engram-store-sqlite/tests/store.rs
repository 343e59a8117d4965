#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The store through its public contract, on real database files.

use std::sync::Arc;

use engram_core::store::MemoryPatch;
use engram_core::{
    AddOutcome, Clock, FixedClock, HistoryKind, Importance, Kind, MemoryId, NewMemory, Scope,
    StoreError,
};
use engram_core::{Filter, MetaCondition};
use engram_store_sqlite::{Database as SqliteStore, StoreOptions};
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use tempfile::TempDir;

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

struct Fixture {
    _dir: TempDir,
    clock: Arc<FixedClock>,
    store: SqliteStore,
}

fn fixture() -> Fixture {
    let dir = TempDir::new().unwrap();
    let clock = Arc::new(FixedClock::new(t("2024-06-01T12:00:00Z")));
    let store = SqliteStore::open_with(
        dir.path().join("engram.db"),
        StoreOptions {
            clock: clock.clone(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    Fixture {
        _dir: dir,
        clock,
        store,
    }
}

fn add(store: &SqliteStore, user: &str, text: &str) -> MemoryId {
    match store
        .add(NewMemory::new(Scope::user(user), text), "test")
        .unwrap()
    {
        AddOutcome::Added(m) => m.id,
        AddOutcome::Duplicate(id) => panic!("unexpected duplicate of {id}"),
    }
}

fn search(store: &SqliteStore, filter: &Filter, query: &str) -> Vec<String> {
    store
        .search_lexical(filter, query, 10)
        .unwrap()
        .into_iter()
        .map(|h| h.memory.text)
        .collect()
}

#[test]
fn a_memory_round_trips_with_every_field() {
    let f = fixture();
    let new = NewMemory::new(
        Scope::user("alice").with_agent("coder").with_session("s1"),
        "Alice moved to Berlin",
    )
    .with_kind(Kind::Fact)
    .with_category("user_info")
    .with_importance(Importance::new(5).unwrap())
    .at(t("2023-05-08T13:56:00.123456789Z"))
    .with_meta("dia_id", json!("D1:3"))
    .with_meta("z", json!(1.5))
    .with_meta("a", json!({"nested": [1, 2]}))
    .with_source("import");
    let AddOutcome::Added(stored) = f.store.add(new, "test").unwrap() else {
        panic!("not added")
    };
    let got = f.store.get(stored.id).unwrap();
    assert_eq!(got, stored);
    assert_eq!(got.created_at.to_string(), "2023-05-08T13:56:00.123456Z");
    assert_eq!(got.updated_at, t("2024-06-01T12:00:00Z"));
    assert_eq!(got.valid_from, got.created_at);
    // Metadata keeps its key order.
    let keys: Vec<_> = got.metadata.keys().cloned().collect();
    assert_eq!(keys, ["dia_id", "z", "a"]);
}

#[test]
fn the_same_text_in_the_same_scope_is_stored_once() {
    let f = fixture();
    let first = add(&f.store, "alice", "likes green tea");
    let again = f
        .store
        .add(
            NewMemory::new(Scope::user("alice"), "  likes   green tea "),
            "test",
        )
        .unwrap();
    assert_eq!(again, AddOutcome::Duplicate(first));
    // Another user, or another session, is another scope.
    add(&f.store, "bob", "likes green tea");
    let in_session = f
        .store
        .add(
            NewMemory::new(Scope::user("alice").with_session("s2"), "likes green tea"),
            "test",
        )
        .unwrap();
    assert!(matches!(in_session, AddOutcome::Added(_)));
    // Once closed, the same text may be remembered again.
    f.store.invalidate(first, "test").unwrap();
    let back = f
        .store
        .add(
            NewMemory::new(Scope::user("alice"), "likes green tea"),
            "test",
        )
        .unwrap();
    assert!(matches!(back, AddOutcome::Added(_)));
}

#[test]
fn every_change_leaves_a_history_row() {
    let f = fixture();
    let id = add(&f.store, "alice", "uses Python 3.9");
    f.clock.advance(SignedDuration::from_secs(60));
    let updated = f
        .store
        .update(id, MemoryPatch::text("uses Python 3.12"), "cli")
        .unwrap();
    assert_eq!(updated.text, "uses Python 3.12");
    assert_eq!(updated.updated_at, t("2024-06-01T12:01:00Z"));
    f.store.invalidate(id, "agent").unwrap();
    assert!(matches!(
        f.store.invalidate(id, "agent"),
        Err(StoreError::AlreadyClosed(_))
    ));
    f.store.delete(id, "cli").unwrap();
    assert!(matches!(f.store.get(id), Err(StoreError::NotFound(_))));

    let history = f.store.history(id).unwrap();
    let events: Vec<_> = history.iter().map(|h| h.event).collect();
    assert_eq!(
        events,
        [
            HistoryKind::Add,
            HistoryKind::Update,
            HistoryKind::Invalidate,
            HistoryKind::Delete
        ]
    );
    assert_eq!(history[1].old_text.as_deref(), Some("uses Python 3.9"));
    assert_eq!(history[1].new_text.as_deref(), Some("uses Python 3.12"));
    assert_eq!(history[1].actor, "cli");
    assert_eq!(history[2].actor, "agent");
    assert!(matches!(
        f.store.history(MemoryId::new()),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn an_update_may_not_duplicate_another_memory() {
    let f = fixture();
    let a = add(&f.store, "alice", "first");
    let b = add(&f.store, "alice", "second");
    let err = f
        .store
        .update(b, MemoryPatch::text("first"), "cli")
        .unwrap_err();
    assert!(matches!(err, StoreError::Duplicate(id) if id == a));
    assert_eq!(f.store.get(b).unwrap().text, "second");
}

#[test]
fn closed_and_expired_memories_are_hidden_unless_asked_for() {
    let f = fixture();
    let closed = add(&f.store, "alice", "lives in Paris");
    f.store.invalidate(closed, "test").unwrap();
    let mut expiring = NewMemory::new(Scope::user("alice"), "meeting in Paris tomorrow");
    expiring.expires_at = Some(t("2024-06-01T18:00:00Z"));
    f.store.add(expiring, "test").unwrap();
    add(&f.store, "alice", "lives in Berlin, loves Paris");

    let filter = Filter::user("alice");
    assert_eq!(search(&f.store, &filter, "paris").len(), 2);
    f.clock.advance(SignedDuration::from_hours(7));
    assert_eq!(
        search(&f.store, &filter, "paris"),
        ["lives in Berlin, loves Paris"]
    );
    let all = Filter {
        include_closed: true,
        ..filter.clone()
    };
    assert_eq!(search(&f.store, &all, "paris").len(), 3);
    assert_eq!(f.store.count(&filter).unwrap(), 1);
    assert_eq!(f.store.count(&all).unwrap(), 3);
}

#[test]
fn search_is_confined_to_one_user() {
    let f = fixture();
    add(&f.store, "alice", "the secret word is swordfish");
    add(&f.store, "bob", "bob has no secrets");
    assert!(search(&f.store, &Filter::user("bob"), "swordfish").is_empty());
    assert_eq!(
        search(&f.store, &Filter::user("alice"), "swordfish").len(),
        1
    );
    let err = f
        .store
        .search_lexical(&Filter::user(""), "x", 5)
        .unwrap_err();
    assert!(err.to_string().contains("user is required"));
}

#[test]
fn words_match_across_case_punctuation_and_stemming() {
    let f = fixture();
    add(&f.store, "u", "She was RUNNING marathons, every weekend!");
    add(&f.store, "u", "Café culture in São Paulo");
    add(&f.store, "u", "unrelated text about gardens");
    let filter = Filter::user("u");
    assert_eq!(search(&f.store, &filter, "runs marathon").len(), 1);
    assert_eq!(search(&f.store, &filter, "weekend?").len(), 1);
    assert_eq!(search(&f.store, &filter, "cafe sao paulo").len(), 1);
}

#[test]
fn non_latin_text_is_searchable() {
    let f = fixture();
    add(&f.store, "u", "我住在北京,喜欢喝茶");
    add(&f.store, "u", "東京で寿司を食べました");
    add(&f.store, "u", "Я люблю читать книги");
    add(&f.store, "u", "서울에서 커피를 마셨어요");
    let filter = Filter::user("u");
    assert_eq!(search(&f.store, &filter, "北京"), ["我住在北京,喜欢喝茶"]);
    assert_eq!(
        search(&f.store, &filter, "寿司"),
        ["東京で寿司を食べました"]
    );
    assert_eq!(search(&f.store, &filter, "книги"), ["Я люблю читать книги"]);
    assert_eq!(
        search(&f.store, &filter, "커피"),
        ["서울에서 커피를 마셨어요"]
    );
    assert!(search(&f.store, &filter, "京北").is_empty());
}

#[test]
fn better_matches_rank_first_and_ties_go_to_the_newest() {
    let f = fixture();
    let mut older = NewMemory::new(Scope::user("u"), "went hiking");
    older.created_at = Some(t("2023-01-01T00:00:00Z"));
    f.store.add(older, "test").unwrap();
    let mut newer = NewMemory::new(Scope::user("u"), "went hiking ");
    newer.scope.session_id = Some("s".into());
    newer.created_at = Some(t("2023-06-01T00:00:00Z"));
    f.store.add(newer, "test").unwrap();
    add(&f.store, "u", "hiking in the mountains");
    // BM25 needs a collection in which the words are not everywhere.
    for other in [
        "cooked pasta",
        "read a novel",
        "fixed the bike",
        "called mom",
    ] {
        add(&f.store, "u", other);
    }
    let hits = f
        .store
        .search_lexical(&Filter::user("u"), "hiking mountains", 10)
        .unwrap();
    assert_eq!(hits.len(), 3);
    assert!(hits[0].memory.text.contains("mountains"));
    assert!(hits[0].bm25 > hits[1].bm25);
    assert_eq!(hits[1].bm25, hits[2].bm25);
    assert_eq!(hits[1].memory.created_at, t("2023-06-01T00:00:00Z"));
}

#[test]
fn filters_narrow_search_and_list() {
    let f = fixture();
    let scope = Scope::user("u");
    let mk = |text: &str, kind, cat: &str, imp: i64, at: &str, dia: &str| {
        NewMemory::new(scope.clone(), text)
            .with_kind(kind)
            .with_category(cat)
            .with_importance(Importance::new(imp).unwrap())
            .at(t(at))
            .with_meta("dia_id", json!(dia))
            .with_meta("turn", json!(dia.len()))
    };
    for m in [
        mk(
            "coffee in May",
            Kind::Episode,
            "task_result",
            2,
            "2023-05-10T00:00:00Z",
            "D1",
        ),
        mk(
            "coffee preference: oat milk",
            Kind::Preference,
            "user_preference",
            4,
            "2023-06-10T00:00:00Z",
            "D22",
        ),
        mk(
            "coffee fact",
            Kind::Fact,
            "user_info",
            5,
            "2023-07-10T00:00:00Z",
            "D333",
        ),
    ] {
        f.store.add(m, "test").unwrap();
    }
    let base = Filter::user("u");
    let run = |filter: Filter| search(&f.store, &filter, "coffee");
    assert_eq!(
        run(Filter {
            kinds: vec![Kind::Fact, Kind::Episode],
            ..base.clone()
        })
        .len(),
        2
    );
    assert_eq!(
        run(Filter {
            categories: vec!["user_info".into()],
            ..base.clone()
        }),
        ["coffee fact"]
    );
    assert_eq!(
        run(Filter {
            since: Some(t("2023-06-01T00:00:00Z")),
            until: Some(t("2023-07-01T00:00:00Z")),
            ..base.clone()
        }),
        ["coffee preference: oat milk"]
    );
    assert_eq!(
        run(Filter {
            min_importance: Some(Importance::new(4).unwrap()),
            ..base.clone()
        })
        .len(),
        2
    );
    let meta = |k: &str, v: &str| MetaCondition {
        key: k.into(),
        value: v.into(),
    };
    assert_eq!(
        run(Filter {
            metadata: vec![meta("dia_id", "D22")],
            ..base.clone()
        }),
        ["coffee preference: oat milk"]
    );
    assert_eq!(
        run(Filter {
            metadata: vec![meta("turn", "4")],
            ..base.clone()
        }),
        ["coffee fact"]
    );
    assert!(
        run(Filter {
            metadata: vec![meta("missing", "x")],
            ..base.clone()
        })
        .is_empty()
    );
    let listed = f.store.list(&base, 2, 0).unwrap();
    assert_eq!(listed[0].text, "coffee fact");
    assert_eq!(listed.len(), 2);
    assert_eq!(f.store.list(&base, 10, 2).unwrap()[0].text, "coffee in May");
}

#[test]
fn queries_without_words_are_refused() {
    let f = fixture();
    add(&f.store, "u", "anything");
    for q in ["", "   ", "?!", "\"*\""] {
        let err = f
            .store
            .search_lexical(&Filter::user("u"), q, 5)
            .unwrap_err();
        assert!(matches!(err, StoreError::BadQuery(_)), "{q}: {err}");
    }
}

#[test]
fn forget_erases_a_user_and_nobody_else() {
    let f = fixture();
    let a = add(&f.store, "alice", "alice's memory");
    add(&f.store, "bob", "bob's memory");
    assert_eq!(f.store.forget_user("alice").unwrap(), 1);
    assert!(
        f.store
            .list(&Filter::user("alice"), 10, 0)
            .unwrap()
            .is_empty()
    );
    assert!(matches!(f.store.history(a), Err(StoreError::NotFound(_))));
    assert_eq!(search(&f.store, &Filter::user("bob"), "memory").len(), 1);
}

#[test]
fn export_hands_over_everything_oldest_first() {
    let f = fixture();
    let mut old = NewMemory::new(Scope::user("u"), "old");
    old.created_at = Some(t("2020-01-01T00:00:00Z"));
    f.store.add(old, "test").unwrap();
    let closed = add(&f.store, "u", "closed");
    f.store.invalidate(closed, "test").unwrap();
    let first = f.store.export_page("u", None, 1).unwrap();
    let rest = f
        .store
        .export_page("u", Some(engram_core::ExportCursor::after(&first[0])), 10)
        .unwrap();
    let seen: Vec<_> = first.iter().chain(&rest).map(|m| m.text.as_str()).collect();
    assert_eq!(seen, ["old", "closed"]);
}

#[test]
fn previous_turns_follow_each_conversation() {
    let f = fixture();
    let at = t("2024-05-01T10:00:00Z");
    let turn = |session: &str, text: &str, minutes: i64| {
        NewMemory::new(Scope::user("u").with_session(session), text)
            .at(at + SignedDuration::from_mins(minutes))
    };
    let ids: Vec<MemoryId> = f
        .store
        .add_many(
            vec![
                turn("s1", "first", 0),
                turn("s1", "second", 1),
                // Same time as "second", stored after it: it follows it.
                turn("s1", "third", 1),
                turn("s2", "other conversation", 2),
                // Stored later but earlier in time: it comes first in its conversation.
                turn("s1", "zeroth", -5),
                turn("s1", "a fact, not a turn", 3).with_kind(Kind::Fact),
                NewMemory::new(Scope::user("u"), "no session").at(at),
            ],
            "test",
        )
        .unwrap()
        .into_iter()
        .map(|o| match o.unwrap() {
            AddOutcome::Added(m) => m.id,
            other => panic!("{other:?}"),
        })
        .collect();
    let [first, second, third, other, zeroth, fact, loose] = ids[..] else {
        panic!("seven memories");
    };
    let someone_elses = add(&f.store, "v", "not yours");
    let previous = f
        .store
        .previous_turns(
            "u",
            &[
                first,
                second,
                third,
                other,
                zeroth,
                fact,
                loose,
                someone_elses,
            ],
        )
        .unwrap();
    assert_eq!(
        previous,
        [
            Some(zeroth),
            Some(first),
            Some(second),
            None,
            None,
            None,
            None,
            None
        ]
    );
    assert!(f.store.previous_turns("u", &[]).unwrap().is_empty());
}

#[test]
fn a_short_top_list_is_exactly_the_head_of_the_full_ranking() {
    // Thousands of candidates share common words; a few hold rare ones. The top 10 (found by
    // scoring the best bounds first) must be the first 10 of ranking every candidate, filters
    // included, with the same scores and the same tie order.
    let f = fixture();
    let words = ["river", "stone", "bridge", "lantern", "harbor", "meadow"];
    let mut batch = Vec::new();
    for i in 0..3000u32 {
        let mut text = format!("note {i} about the river");
        for (j, word) in words.iter().enumerate() {
            if i % (j as u32 + 2) == 0 {
                text.push(' ');
                text.push_str(word);
            }
        }
        for _ in 0..(i % 7) {
            text.push_str(" and more words to vary the length");
        }
        batch.push(
            NewMemory::new(Scope::user("u"), text)
                .with_importance(Importance::new(i64::from(i % 5 + 1)).unwrap()),
        );
    }
    f.store.add_many(batch, "test").unwrap();
    for query in [
        "river lantern",
        "bridge meadow harbor",
        "note river stone",
        "\"the river\"",
    ] {
        for filter in [
            Filter::user("u"),
            Filter {
                min_importance: Some(Importance::new(4).unwrap()),
                ..Filter::user("u")
            },
        ] {
            let full = f.store.search_lexical(&filter, query, 100_000).unwrap();
            let top = f.store.search_lexical(&filter, query, 10).unwrap();
            let full: Vec<_> = full
                .iter()
                .take(10)
                .map(|h| (h.memory.id, h.bm25))
                .collect();
            let top: Vec<_> = top.iter().map(|h| (h.memory.id, h.bm25)).collect();
            assert_eq!(top, full, "{query}");
        }
    }
}

/// Memories and their BM25 scores, best first.
type Ranking = Vec<(MemoryId, f64)>;

/// Searches `filter` and the same filter plus a metadata condition every memory meets: the
/// second can only be decided in SQL, so the two compare ranking from the facts a store holds
/// in memory with ranking from the table.
fn held_and_table_rankings(
    store: &SqliteStore,
    filter: &Filter,
    query: &str,
) -> (Ranking, Ranking) {
    let mut in_sql = filter.clone();
    in_sql.metadata.push(MetaCondition {
        key: "all".into(),
        value: "yes".into(),
    });
    let ranked = |f: &Filter| -> Ranking {
        store
            .search_lexical(f, query, 20)
            .unwrap()
            .into_iter()
            .map(|h| (h.memory.id, h.bm25))
            .collect()
    };
    (ranked(filter), ranked(&in_sql))
}

#[test]
fn ranking_from_held_facts_matches_the_table_and_follows_every_change() {
    let f = fixture();
    let now = f.clock.now();
    let words = ["river", "stone", "bridge", "lantern"];
    let mut batch = Vec::new();
    for i in 0..400i64 {
        let mut text = format!("entry {i} by the river");
        for (j, word) in words.iter().enumerate() {
            if i % (j as i64 + 2) == 0 {
                text.push(' ');
                text.push_str(word);
            }
        }
        let mut memory = NewMemory::new(Scope::user("u"), text)
            .with_kind(Kind::ALL[(i % 5) as usize])
            .with_importance(Importance::new(i % 5 + 1).unwrap())
            .with_meta("all", json!("yes"));
        memory.created_at = Some(now - SignedDuration::from_hours(i));
        if i % 11 == 0 {
            // Some already expired, some expiring later.
            memory.expires_at = Some(now + SignedDuration::from_hours(i % 3 - 1));
        }
        batch.push(memory);
    }
    // Another user's memories share the words but never the results.
    batch.push(
        NewMemory::new(Scope::user("v"), "river stone bridge").with_meta("all", json!("yes")),
    );
    f.store.add_many(batch, "test").unwrap();
    let listed = f.store.list(&Filter::user("u"), 1000, 0).unwrap();
    for memory in listed.iter().filter(|m| m.text.contains("entry 3")) {
        f.store.invalidate(memory.id, "test").unwrap();
    }

    let filters = [
        Filter::user("u"),
        Filter {
            kinds: vec![Kind::Episode, Kind::Fact],
            min_importance: Some(Importance::new(2).unwrap()),
            ..Filter::user("u")
        },
        Filter {
            since: Some(now - SignedDuration::from_hours(200)),
            until: Some(now - SignedDuration::from_hours(20)),
            ..Filter::user("u")
        },
        Filter {
            include_closed: true,
            ..Filter::user("u")
        },
    ];
    let queries = ["river lantern", "bridge stone", "entry river", "lantern"];
    let check = |store: &SqliteStore| {
        let mut compared = 0;
        for filter in &filters {
            for query in queries {
                // Asked a few times, so that the store decides to hold the user's facts.
                for _ in 0..4 {
                    let (held, table) = held_and_table_rankings(store, filter, query);
                    assert_eq!(held, table, "{query} {filter:?}");
                    compared += table.len();
                }
            }
        }
        assert!(compared > 500, "only {compared} hits compared");
    };
    check(&f.store);

    // Changes from another handle on the same file (as another process would make them).
    let other = SqliteStore::open_with(
        f.store.path(),
        StoreOptions {
            clock: f.clock.clone(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let top = f
        .store
        .search_lexical(&Filter::user("u"), "lantern", 5)
        .unwrap();
    other.invalidate(top[0].memory.id, "test").unwrap();
    other.delete(top[1].memory.id, "test").unwrap();
    other
        .update(
            top[2].memory.id,
            MemoryPatch {
                text: Some("lantern".into()),
                ..MemoryPatch::default()
            },
            "test",
        )
        .unwrap();
    other
        .update(
            top[3].memory.id,
            MemoryPatch {
                importance: Some(Importance::new(1).unwrap()),
                expires_at: Some(Some(now - SignedDuration::from_hours(1))),
                ..MemoryPatch::default()
            },
            "test",
        )
        .unwrap();
    let added = match other
        .add(
            NewMemory::new(Scope::user("u"), "lantern lantern").with_meta("all", json!("yes")),
            "test",
        )
        .unwrap()
    {
        AddOutcome::Added(m) => m.id,
        other => panic!("{other:?}"),
    };
    let after: Vec<MemoryId> = f
        .store
        .search_lexical(&Filter::user("u"), "lantern", 5)
        .unwrap()
        .iter()
        .map(|h| h.memory.id)
        .collect();
    assert!(after.contains(&added) && after.contains(&top[2].memory.id));
    for (which, gone) in [(0, &top[0]), (1, &top[1]), (3, &top[3])] {
        assert!(
            !after.contains(&gone.memory.id),
            "hit {which} is still found"
        );
    }
    check(&f.store);
}

#[test]
fn add_many_reports_each_item_and_keeps_the_good_ones() {
    let f = fixture();
    let outcomes = f
        .store
        .add_many(
            vec![
                NewMemory::new(Scope::user("u"), "one"),
                NewMemory::new(Scope::user("u"), "  "),
                NewMemory::new(Scope::user("u"), "one"),
                NewMemory::new(Scope::user("u"), "two"),
            ],
            "import",
        )
        .unwrap();
    assert!(matches!(outcomes[0], Ok(AddOutcome::Added(_))));
    assert!(matches!(outcomes[1], Err(StoreError::Invalid(_))));
    assert!(matches!(outcomes[2], Ok(AddOutcome::Duplicate(_))));
    assert!(matches!(outcomes[3], Ok(AddOutcome::Added(_))));
    assert_eq!(f.store.count(&Filter::user("u")).unwrap(), 2);
}

#[test]
fn stats_count_what_is_there() {
    let f = fixture();
    add(&f.store, "a", "x1");
    let id = add(&f.store, "b", "x2");
    f.store.invalidate(id, "t").unwrap();
    let stats = f.store.stats().unwrap();
    assert_eq!((stats.memories, stats.users, stats.closed), (2, 2, 1));
    assert_eq!(stats.by_kind.get(&Kind::Episode), Some(&2));
    assert_eq!(stats.history_rows, 3);
    assert!(stats.size_bytes.is_some_and(|n| n > 0));
    assert_eq!(stats.engine, "sqlite");
}

mod files {
    use super::*;

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        SqliteStore::open(&path).unwrap();
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", 99).unwrap();
        }
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::TooNew { found: 99, .. }), "{err}");
        assert!(err.to_string().contains("newer engram"));
    }

    #[test]
    fn another_programs_database_is_refused_and_left_alone() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("other.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
                .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::NotEngram { .. }), "{err}");
        let conn = rusqlite::Connection::open(&path).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
        drop(conn);
        assert!(
            std::fs::read(&path).unwrap() == before,
            "the file was changed"
        );
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused_and_left_alone() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let garbage = b"this is a text file, not a database, and it must survive\n".repeat(100);
        std::fs::write(&path, &garbage).unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(
            std::fs::read(&path).unwrap() == garbage,
            "the file was changed"
        );
    }

    #[test]
    fn a_full_disk_fails_cleanly_and_keeps_what_was_stored() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let store = SqliteStore::open_with(
            &path,
            StoreOptions {
                max_database_bytes: Some(256 * 1024),
                ..StoreOptions::default()
            },
        )
        .unwrap();
        let mut stored = 0;
        let err = loop {
            let batch: Vec<_> = (0..50)
                .map(|i| {
                    NewMemory::new(
                        Scope::user("u"),
                        format!("memory {stored} {i} {}", "words ".repeat(40)),
                    )
                })
                .collect();
            match store.add_many(batch, "test") {
                Ok(_) => stored += 50,
                Err(e) => break e,
            }
            assert!(stored < 100_000, "the quota never bit");
        };
        assert!(matches!(err, StoreError::DiskFull), "{err}");
        assert!(stored > 0);
        // The failed batch left nothing behind; everything before it is intact.
        assert_eq!(store.count(&Filter::user("u")).unwrap(), stored);
        drop(store);
        let reopened = SqliteStore::open(&path).unwrap();
        assert_eq!(reopened.count(&Filter::user("u")).unwrap(), stored);
        assert_eq!(search(&reopened, &Filter::user("u"), "memory").len(), 10);
    }

    #[test]
    fn data_survives_reopening() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let id = {
            let store = SqliteStore::open(&path).unwrap();
            add(&store, "u", "persisted")
        };
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.get(id).unwrap().text, "persisted");
        assert_eq!(search(&store, &Filter::user("u"), "persisted").len(), 1);
    }

    #[test]
    fn concurrent_writers_through_separate_connections_lose_nothing() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let threads: Vec<_> = (0..4)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let store = SqliteStore::open(&path).unwrap();
                    for i in 0..50 {
                        add(&store, "u", &format!("writer {w} item {i}"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.count(&Filter::user("u")).unwrap(), 200);
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Memories written from eight words, each in about a quarter to a half of them (long posting
    /// lists, kept as impact lists), with lengths, kinds, importances, times and closings that
    /// vary.
    fn common_word_store(seed: u64, docs: usize) -> Fixture {
        let f = fixture();
        let now = f.clock.now();
        let words = [
            "work", "today", "anna", "coffee", "river", "plan", "call", "late",
        ];
        let mut state = seed | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut batch = Vec::with_capacity(docs);
        for i in 0..docs {
            let mut text = format!("entry {i}");
            for (j, word) in words.iter().enumerate() {
                // Word j is in roughly 1 / (2 + j % 3) of the memories, sometimes twice.
                if next() % (2 + j as u64 % 3) == 0 {
                    text.push(' ');
                    text.push_str(word);
                    if next() % 5 == 0 {
                        text.push(' ');
                        text.push_str(word);
                    }
                }
            }
            for _ in 0..next() % 9 {
                text.push_str(" filler");
            }
            let r = next();
            let mut memory = NewMemory::new(Scope::user("u"), text)
                .with_kind(Kind::ALL[(r % 5) as usize])
                .with_importance(Importance::new((r / 5 % 5 + 1) as i64).unwrap())
                .with_meta("all", json!("yes"));
            // Coarse times make ties that the creation time alone cannot break.
            memory.created_at = Some(now - SignedDuration::from_hours((r / 25 % 40) as i64));
            if r % 13 == 0 {
                memory.expires_at = Some(now - SignedDuration::from_hours(1));
            }
            batch.push(memory);
        }
        batch.push(
            NewMemory::new(Scope::user("v"), "work today anna").with_meta("all", json!("yes")),
        );
        f.store.add_many(batch, "test").unwrap();
        f
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(6))]
        /// Long lists ranked by the threshold algorithm over held impact lists (after the first
        /// searches load the facts) are exactly the table's exhaustive ranking: same memories,
        /// same order, same scores to the bit, under every filter the facts decide, for any k,
        /// and again after memories change.
        #[test]
        fn common_word_rankings_are_exactly_the_exhaustive_ones(
            seed in any::<u64>(),
            queries in proptest::collection::vec(
                proptest::collection::vec(0usize..9, 1..5), 3),
            k in prop_oneof![Just(1usize), Just(10), Just(100), 1usize..300],
        ) {
            let f = common_word_store(seed, 3_000);
            let vocabulary = ["work", "today", "anna", "coffee", "river", "plan", "call", "late", "filler"];
            let now = f.clock.now();
            let filters = [
                Filter::user("u"),
                Filter {
                    kinds: vec![Kind::Episode, Kind::Fact],
                    min_importance: Some(Importance::new(2).unwrap()),
                    ..Filter::user("u")
                },
                Filter {
                    since: Some(now - SignedDuration::from_hours(30)),
                    until: Some(now - SignedDuration::from_hours(5)),
                    include_closed: true,
                    ..Filter::user("u")
                },
            ];
            let ranked = |filter: &Filter, query: &str| -> Vec<(MemoryId, u64)> {
                f.store
                    .search_lexical(filter, query, k)
                    .unwrap()
                    .into_iter()
                    .map(|h| (h.memory.id, h.bm25.to_bits()))
                    .collect()
            };
            let compare = |round: &str| -> Result<(), TestCaseError> {
                for words in &queries {
                    let query: Vec<&str> = words.iter().map(|&w| vocabulary[w]).collect();
                    let query = query.join(" ");
                    for filter in &filters {
                        let mut in_sql = filter.clone();
                        in_sql.metadata.push(MetaCondition { key: "all".into(), value: "yes".into() });
                        let table = ranked(&in_sql, &query);
                        // Asked twice: the first search may still be the one that loads the facts.
                        for _ in 0..2 {
                            prop_assert_eq!(&ranked(filter, &query), &table, "{} {} {:?}", round, query, filter);
                        }
                    }
                }
                Ok(())
            };
            compare("before changes")?;
            let counts = f.store.lexical_search_counts();
            prop_assert!(counts.by_impacts > 0 && counts.exhaustive > 0, "{:?}", counts);
            let top = f.store.search_lexical(&Filter::user("u"), "work anna", 3).unwrap();
            f.store.invalidate(top[0].memory.id, "test").unwrap();
            f.store
                .update(top[1].memory.id, MemoryPatch { text: Some("anna anna work".into()), ..MemoryPatch::default() }, "test")
                .unwrap();
            compare("after a change")?;
            f.store
                .add(NewMemory::new(Scope::user("u"), "work work anna today").with_meta("all", json!("yes")), "test")
                .unwrap();
            compare("after an insert")?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_query_either_searches_or_is_refused_as_bad(query in "\\PC{0,40}") {
            let f = fixture();
            add(&f.store, "u", "some text to find, with ünïcödé and 中文");
            match f.store.search_lexical(&Filter::user("u"), &query, 5) {
                Ok(_) | Err(StoreError::BadQuery(_)) => {}
                Err(other) => prop_assert!(false, "query {query:?} failed: {other}"),
            }
        }
    }
}

mod vectors {
    use super::*;
    use engram_core::StoredVector;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn embed_all(store: &SqliteStore, model: &str, f: impl Fn(&str) -> Vec<f32>) {
        let pending = store.texts_without_vectors(model, None, 1000).unwrap();
        let vectors = pending
            .into_iter()
            .map(|p| StoredVector {
                vector: unit(&f(&p.text)),
                content_hash: p.content_hash,
                truncated: false,
            })
            .collect();
        store.put_vectors(model, 3, vectors).unwrap();
    }

    /// A toy "embedding": how much a text is about tea, coffee and hiking.
    fn toy(text: &str) -> Vec<f32> {
        let has = |w: &str| if text.contains(w) { 1.0 } else { 0.05 };
        vec![has("tea"), has("coffee"), has("hik")]
    }

    #[test]
    fn vectors_are_found_by_similarity_within_the_filter() {
        let f = fixture();
        add(&f.store, "u", "green tea in the morning");
        add(&f.store, "u", "coffee after lunch");
        let hike = add(&f.store, "u", "hiking on sunday");
        add(&f.store, "other", "tea with bob");
        assert_eq!(f.store.count_without_vectors("toy").unwrap(), 4);
        embed_all(&f.store, "toy", toy);
        assert_eq!(f.store.count_without_vectors("toy").unwrap(), 0);

        let hits = f
            .store
            .vector_search("toy", &Filter::user("u"), &unit(&[1.0, 0.0, 0.0]), 2)
            .unwrap();
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].memory.text, "green tea in the morning");
        assert!(hits[0].similarity > hits[1].similarity);

        // Filters apply before top-k: closed memories are not candidates at all.
        f.store.invalidate(hike, "t").unwrap();
        let hits = f
            .store
            .vector_search("toy", &Filter::user("u"), &unit(&[0.0, 0.0, 1.0]), 5)
            .unwrap();
        assert!(hits.iter().all(|h| h.memory.id != hike));
        assert_eq!(hits.len(), 2);

        let stats = f.store.vector_models().unwrap();
        assert_eq!(stats[0].model, "toy");
        assert_eq!((stats[0].dimension, stats[0].vectors), (3, 4));
    }

    #[test]
    fn a_model_keeps_its_dimension_and_spaces_never_mix() {
        let f = fixture();
        add(&f.store, "u", "x");
        embed_all(&f.store, "toy", toy);
        let pending = f.store.texts_without_vectors("toy", None, 10).unwrap();
        assert!(pending.is_empty());
        let wrong = StoredVector {
            content_hash: "abc".into(),
            vector: vec![1.0; 4],
            truncated: false,
        };
        assert!(f.store.put_vectors("toy", 4, vec![wrong.clone()]).is_err());
        assert!(f.store.put_vectors("toy", 3, vec![wrong]).is_err());
        // Another model's vectors are not used for this model's search.
        let hits = f
            .store
            .vector_search("other-model", &Filter::user("u"), &[1.0, 0.0, 0.0], 5)
            .unwrap();
        assert!(hits.is_empty());
        // A query of the wrong length is refused, not silently scored.
        assert!(
            f.store
                .vector_search("toy", &Filter::user("u"), &[1.0, 0.0], 5)
                .is_err()
        );
    }

    #[test]
    fn pending_texts_page_by_hash_and_vectors_follow_their_memories() {
        let f = fixture();
        for i in 0..25 {
            add(&f.store, "u", &format!("memory {i} about tea"));
        }
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = f
                .store
                .texts_without_vectors("toy", after.as_deref(), 10)
                .unwrap();
            if page.is_empty() {
                break;
            }
            after = page.last().map(|p| p.content_hash.clone());
            seen.extend(page);
        }
        assert_eq!(seen.len(), 25);
        embed_all(&f.store, "toy", toy);
        let id = f.store.list(&Filter::user("u"), 1, 0).unwrap()[0].id;
        f.store.delete(id, "t").unwrap();
        assert_eq!(f.store.vector_models().unwrap()[0].vectors, 24);
        // A changed text needs a new vector; the old one goes.
        let id = f.store.list(&Filter::user("u"), 1, 0).unwrap()[0].id;
        f.store
            .update(id, MemoryPatch::text("now about coffee"), "t")
            .unwrap();
        assert_eq!(f.store.count_without_vectors("toy").unwrap(), 1);
        assert_eq!(f.store.vector_models().unwrap()[0].vectors, 23);
        f.store.forget_user("u").unwrap();
        assert_eq!(f.store.vector_models().unwrap()[0].vectors, 0);
    }
}

#[test]
fn a_conversation_turn_is_found_by_the_words_of_the_turn_it_answers() {
    let f = fixture();
    let turn = |session: &str, text: &str| {
        NewMemory::new(Scope::user("u").with_session(session), text).at(t("2024-01-01T10:00:00Z"))
    };
    f.store
        .add(turn("s1", "Did you ever make it to Lisbon?"), "t")
        .unwrap();
    f.store
        .add(turn("s1", "Yes, twice last year!"), "t")
        .unwrap();
    // Another conversation, and a fact, get no context from s1.
    f.store.add(turn("s2", "Weather is nice."), "t").unwrap();
    f.store
        .add(
            NewMemory::new(Scope::user("u").with_session("s1"), "likes trains")
                .with_kind(Kind::Fact),
            "t",
        )
        .unwrap();
    for other in ["cooked pasta", "read a novel", "fixed the bike"] {
        add(&f.store, "u", other);
    }
    let found = search(&f.store, &Filter::user("u"), "Lisbon");
    assert_eq!(
        found,
        ["Did you ever make it to Lisbon?", "Yes, twice last year!"]
    );
    assert!(search(&f.store, &Filter::user("u"), "trains").len() == 1);
    assert!(search(&f.store, &Filter::user("u"), "nice").len() == 1);
    assert!(
        search(&f.store, &Filter::user("u"), "twice")
            .iter()
            .all(|t| t == "Yes, twice last year!")
    );
}

#[test]
fn a_batch_and_the_same_memories_one_at_a_time_score_alike() {
    // Per-user statistics are summed per batch and conversation context is read before the row
    // is written: neither may change what search sees.
    let turns = [
        ("u", "s1", "Did you ever make it to Lisbon?"),
        (
            "u",
            "s1",
            "Yes, twice, and the trams in Lisbon were lovely.",
        ),
        ("u", "s2", "I repaired the old bike with new brakes."),
        ("v", "s1", "Lisbon trams and Porto wine, a long trip."),
        ("u", "s2", "The brakes squeak when it rains."),
        ("v", "s1", "Trams again!"),
    ];
    let memories = || {
        turns.iter().enumerate().map(|(i, (user, session, text))| {
            NewMemory::new(Scope::user(*user).with_session(*session), *text)
                .at(t("2024-01-01T10:00:00Z") + SignedDuration::from_mins(i as i64))
        })
    };
    let single = fixture();
    for memory in memories() {
        single.store.add(memory, "t").unwrap();
    }
    let batched = fixture();
    let outcomes = batched.store.add_many(memories().collect(), "t").unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(AddOutcome::Added(_))))
    );
    for (user, query) in [("u", "Lisbon trams"), ("u", "brakes rain"), ("v", "trams")] {
        let scores = |store: &SqliteStore| {
            store
                .search_lexical(&Filter::user(user), query, 10)
                .unwrap()
                .into_iter()
                .map(|h| (h.memory.text, h.bm25))
                .collect::<Vec<_>>()
        };
        let expected = scores(&single.store);
        assert!(!expected.is_empty(), "{query}");
        assert_eq!(scores(&batched.store), expected, "{user}: {query}");
    }
    // The full-text index keeps its larger write buffer across reopening.
    let path = batched._dir.path().join("engram.db");
    drop(batched.store);
    let _reopened = SqliteStore::open(&path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let buffer: i64 = conn
        .query_row(
            "SELECT v FROM memories_fts_config WHERE k = 'hashsize'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(buffer, 8 << 20);
}

#[test]
fn users_are_listed_with_their_counts() {
    let f = fixture();
    assert!(f.store.users().unwrap().is_empty());
    add(&f.store, "bob", "one");
    add(&f.store, "alice", "one");
    let closed = add(&f.store, "alice", "two");
    f.store.invalidate(closed, "test").unwrap();
    let users = f.store.users().unwrap();
    let listed: Vec<(&str, u64)> = users
        .iter()
        .map(|u| (u.user_id.as_str(), u.memories))
        .collect();
    assert_eq!(listed, vec![("alice", 2), ("bob", 1)]);
}

#[test]
fn sessions_are_counted_from_the_memories_that_name_them() {
    let f = fixture();
    let in_session = |session: &str, text: &str, when: &str| {
        f.store
            .add(
                NewMemory::new(Scope::user("u").with_session(session), text).at(t(when)),
                "test",
            )
            .unwrap();
    };
    in_session("cli:b", "one", "2024-05-02T10:00:00Z");
    in_session("cli:a", "two", "2024-05-03T10:00:00Z");
    in_session("cli:b", "three", "2024-05-01T10:00:00Z");
    add(&f.store, "u", "no session");
    let counts = f.store.session_counts("u").unwrap();
    let listed: Vec<(&str, u64, String, String)> = counts
        .iter()
        .map(|c| {
            (
                c.session_id.as_str(),
                c.memories,
                c.first_at.to_string(),
                c.last_at.to_string(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (
                "cli:a",
                1,
                "2024-05-03T10:00:00Z".into(),
                "2024-05-03T10:00:00Z".into()
            ),
            (
                "cli:b",
                2,
                "2024-05-01T10:00:00Z".into(),
                "2024-05-02T10:00:00Z".into()
            ),
        ]
    );
    assert!(f.store.session_counts("other").unwrap().is_empty());
}

#[test]
fn memories_are_counted_per_day_in_the_time_zone_asked_for() {
    let f = fixture();
    let at = |text: &str, kind: Kind, when: &str| {
        f.store
            .add(
                NewMemory::new(Scope::user("u"), text)
                    .with_kind(kind)
                    .at(t(when)),
                "test",
            )
            .unwrap();
    };
    at(
        "late on the 1st in UTC",
        Kind::Episode,
        "2024-05-01T23:30:00Z",
    );
    at("early on the 2nd", Kind::Episode, "2024-05-02T08:00:00Z");
    at("a fact on the 2nd", Kind::Fact, "2024-05-02T09:00:00Z");
    at("another user's", Kind::Episode, "2024-05-02T09:00:00Z");
    add(&f.store, "other", "not counted");

    let days = |filter: &Filter, zone: &jiff::tz::TimeZone| -> Vec<(String, Kind, u64)> {
        f.store
            .count_by_day(filter, zone)
            .unwrap()
            .into_iter()
            .map(|d| (d.day.to_string(), d.kind, d.count))
            .collect()
    };
    let utc = jiff::tz::TimeZone::UTC;
    assert_eq!(
        days(&Filter::user("u"), &utc),
        vec![
            ("2024-05-01".to_string(), Kind::Episode, 1),
            ("2024-05-02".to_string(), Kind::Episode, 2),
            ("2024-05-02".to_string(), Kind::Fact, 1),
        ]
    );
    // Two hours east of UTC, 23:30 on the 1st is already the 2nd.
    let east = jiff::tz::TimeZone::fixed(jiff::tz::offset(2));
    assert_eq!(
        days(&Filter::user("u"), &east),
        vec![
            ("2024-05-02".to_string(), Kind::Episode, 3),
            ("2024-05-02".to_string(), Kind::Fact, 1),
        ]
    );
    // The filter applies: facts only, and closed memories only when asked.
    let facts = Filter {
        kinds: vec![Kind::Fact],
        ..Filter::user("u")
    };
    assert_eq!(
        days(&facts, &utc),
        vec![("2024-05-02".to_string(), Kind::Fact, 1)]
    );
    let fact = f.store.list(&facts, 1, 0).unwrap().remove(0);
    f.store.invalidate(fact.id, "test").unwrap();
    assert!(days(&facts, &utc).is_empty());
    let with_closed = Filter {
        include_closed: true,
        ..facts
    };
    assert_eq!(days(&with_closed, &utc).len(), 1);
}

#[test]
fn the_integrity_check_passes_a_sound_store_and_names_what_is_out_of_step() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("engram.db");
    let store = SqliteStore::open(&path).unwrap();
    let a = add(&store, "alice", "Alice moved to Berlin in May");
    add(&store, "alice", "prefers tabs over spaces");
    let b = add(&store, "bob", "Bob plays the guitar");
    add(&store, "bob", "!!!");
    store
        .update(
            a,
            MemoryPatch {
                text: Some("Alice moved to Lisbon in June".into()),
                ..MemoryPatch::default()
            },
            "test",
        )
        .unwrap();
    store.invalidate(b, "test").unwrap();
    store.delete(a, "test").unwrap();
    store
        .put_vectors(
            "toy",
            2,
            vec![engram_core::StoredVector {
                content_hash: engram_core::content_hash(
                    &Scope::user("bob"),
                    "Bob plays the guitar",
                ),
                vector: vec![0.6, 0.8],
                truncated: false,
            }],
        )
        .unwrap();
    assert_eq!(store.check_integrity().unwrap(), Vec::<String>::new());

    // Behind the store's back: a memory loses its index row, a user's statistics drift.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "DELETE FROM memories_fts WHERE rowid = (SELECT min(rowid) FROM memories)",
        [],
    )
    .unwrap();
    conn.execute(
        "UPDATE fts_user_stats SET terms = terms + 1 WHERE user_id = 'bob'",
        [],
    )
    .unwrap();
    conn.execute("UPDATE embeddings SET vector = x'00000000'", [])
        .unwrap();
    let problems = store.check_integrity().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p == "1 memories without an index row"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p == "1 users whose word statistics disagree with their memories"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p == "1 vectors whose length is not their model's"),
        "{problems:?}"
    );
}
