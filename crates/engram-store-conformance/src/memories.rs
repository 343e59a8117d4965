//! [`MemoryStore`]: memories, their history, listing, lexical search, export and counts.

use std::sync::Arc;

use engram_core::store::MemoryPatch;
use engram_core::{
    AddOutcome, Clock, ExportCursor, Filter, HistoryKind, Importance, Kind, MemoryId, MemoryStore,
    MetaCondition, NewMemory, Scope, StoreError,
};
use jiff::SignedDuration;
use serde_json::json;

use crate::{Engine, open, t};

/// Stores `text` as a new memory of `user` and returns its id.
pub(crate) async fn add(store: &dyn MemoryStore, user: &str, text: &str) -> MemoryId {
    added(
        store
            .add(NewMemory::new(Scope::user(user), text), "test")
            .await,
    )
}

/// The id of a memory that was stored as new.
pub(crate) fn added(outcome: Result<AddOutcome, StoreError>) -> MemoryId {
    match outcome.unwrap() {
        AddOutcome::Added(m) => m.id,
        AddOutcome::Duplicate(id) => panic!("unexpected duplicate of {id}"),
    }
}

/// The texts lexical search finds, best first.
async fn search(store: &dyn MemoryStore, filter: &Filter, query: &str) -> Vec<String> {
    store
        .search_lexical(filter, query, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.memory.text)
        .collect()
}

/// A fresh store's memories.
async fn memories(engine: &dyn Engine) -> (Arc<dyn MemoryStore>, Arc<engram_core::FixedClock>) {
    let (backend, clock) = open(engine).await;
    (backend.memories, clock)
}

/// Every field of a memory comes back as stored, times to the microsecond, metadata in its
/// key order.
pub async fn a_memory_round_trips_with_every_field(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
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
    let AddOutcome::Added(stored) = store.add(new, "test").await.unwrap() else {
        panic!("not added")
    };
    let got = store.get(stored.id).await.unwrap();
    assert_eq!(got, stored);
    assert_eq!(got.created_at.to_string(), "2023-05-08T13:56:00.123456Z");
    assert_eq!(got.updated_at, t("2024-06-01T12:00:00Z"));
    assert_eq!(got.valid_from, got.created_at);
    assert_eq!(got.valid_to, None);
    let keys: Vec<_> = got.metadata.keys().cloned().collect();
    assert_eq!(keys, ["dia_id", "z", "a"]);
    assert!(matches!(
        store.get(MemoryId::new()).await,
        Err(StoreError::NotFound(_))
    ));
}

/// The same text (up to spacing) is stored once per scope; another user or session is another
/// scope; once closed, the text may be stored again.
pub async fn the_same_text_in_the_same_scope_is_stored_once(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let first = add(&*store, "alice", "likes green tea").await;
    let again = store
        .add(
            NewMemory::new(Scope::user("alice"), "  likes   green tea "),
            "test",
        )
        .await
        .unwrap();
    assert_eq!(again, AddOutcome::Duplicate(first));
    add(&*store, "bob", "likes green tea").await;
    let in_session = store
        .add(
            NewMemory::new(Scope::user("alice").with_session("s2"), "likes green tea"),
            "test",
        )
        .await
        .unwrap();
    assert!(matches!(in_session, AddOutcome::Added(_)));
    store.invalidate(first, "test").await.unwrap();
    let back = store
        .add(
            NewMemory::new(Scope::user("alice"), "likes green tea"),
            "test",
        )
        .await
        .unwrap();
    assert!(matches!(back, AddOutcome::Added(_)));
}

/// A batch gives each memory its own outcome: added, invalid, or a duplicate (of a stored
/// memory or of one earlier in the batch).
pub async fn add_many_reports_each_item_and_keeps_the_good_ones(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let stored = add(&*store, "u", "zero").await;
    let outcomes = store
        .add_many(
            vec![
                NewMemory::new(Scope::user("u"), "one"),
                NewMemory::new(Scope::user("u"), "  "),
                NewMemory::new(Scope::user("u"), "one"),
                NewMemory::new(Scope::user("u"), "two"),
                NewMemory::new(Scope::user("u"), "zero"),
            ],
            "import",
        )
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 5);
    let Ok(AddOutcome::Added(one)) = &outcomes[0] else {
        panic!("{:?}", outcomes[0])
    };
    assert!(matches!(outcomes[1], Err(StoreError::Invalid(_))));
    assert!(matches!(&outcomes[2], Ok(AddOutcome::Duplicate(id)) if *id == one.id));
    assert!(matches!(outcomes[3], Ok(AddOutcome::Added(_))));
    assert!(matches!(&outcomes[4], Ok(AddOutcome::Duplicate(id)) if *id == stored));
    assert_eq!(store.count(&Filter::user("u")).await.unwrap(), 3);
    let history = store.history(one.id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].actor, "import");
    assert!(
        store
            .add_many(Vec::new(), "import")
            .await
            .unwrap()
            .is_empty()
    );
}

/// Update, invalidate and delete each leave a history row with the texts, the actor and the
/// time; a deleted memory is gone but its history stays.
pub async fn every_change_leaves_a_history_row(engine: &dyn Engine) {
    let (store, clock) = memories(engine).await;
    let id = add(&*store, "alice", "uses Python 3.9").await;
    clock.advance(SignedDuration::from_secs(60));
    let updated = store
        .update(id, MemoryPatch::text("uses Python 3.12"), "cli")
        .await
        .unwrap();
    assert_eq!(updated.text, "uses Python 3.12");
    assert_eq!(updated.updated_at, t("2024-06-01T12:01:00Z"));
    assert_eq!(store.get(id).await.unwrap(), updated);
    clock.advance(SignedDuration::from_secs(60));
    let closed = store.invalidate(id, "agent").await.unwrap();
    assert_eq!(closed.valid_to, Some(t("2024-06-01T12:02:00Z")));
    assert!(closed.is_closed_at(clock.now()));
    assert!(matches!(
        store.invalidate(id, "agent").await,
        Err(StoreError::AlreadyClosed(_))
    ));
    let deleted = store.delete(id, "cli").await.unwrap();
    assert_eq!(deleted.id, id);
    assert!(matches!(store.get(id).await, Err(StoreError::NotFound(_))));
    assert!(matches!(
        store.delete(id, "cli").await,
        Err(StoreError::NotFound(_))
    ));

    let history = store.history(id).await.unwrap();
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
    assert_eq!(history[0].new_text.as_deref(), Some("uses Python 3.9"));
    assert_eq!(history[1].old_text.as_deref(), Some("uses Python 3.9"));
    assert_eq!(history[1].new_text.as_deref(), Some("uses Python 3.12"));
    assert_eq!(history[1].actor, "cli");
    assert_eq!(history[1].at, t("2024-06-01T12:01:00Z"));
    assert_eq!(history[2].actor, "agent");
    assert!(history.iter().all(|h| h.memory_id == id));
    assert!(matches!(
        store.history(MemoryId::new()).await,
        Err(StoreError::NotFound(_))
    ));
}

/// An update that would make a memory a copy of another current one is refused and changes
/// nothing; an empty patch or an unknown id is refused too.
pub async fn an_update_may_not_duplicate_another_memory(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let a = add(&*store, "alice", "first").await;
    let b = add(&*store, "alice", "second").await;
    let err = store
        .update(b, MemoryPatch::text("first"), "cli")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Duplicate(id) if id == a), "{err}");
    assert_eq!(store.get(b).await.unwrap().text, "second");
    assert_eq!(store.history(b).await.unwrap().len(), 1);
    assert!(matches!(
        store
            .update(MemoryId::new(), MemoryPatch::text("x"), "cli")
            .await,
        Err(StoreError::NotFound(_))
    ));
    // Attributes change without touching the text.
    let changed = store
        .update(
            b,
            MemoryPatch {
                category: Some(Some("work".into())),
                importance: Some(Importance::new(5).unwrap()),
                metadata: Some(json!({"k": "v"}).as_object().unwrap().clone()),
                ..MemoryPatch::default()
            },
            "cli",
        )
        .await
        .unwrap();
    assert_eq!(changed.text, "second");
    assert_eq!(changed.category.as_deref(), Some("work"));
    assert_eq!(changed.importance, Importance::new(5).unwrap());
    assert_eq!(changed.metadata["k"], "v");
    assert_eq!(store.get(b).await.unwrap(), changed);
}

/// The owner of a memory is known while it exists and after it is deleted, and not for ids the
/// store never held or that `forget_user` erased.
pub async fn the_owner_outlives_deletion(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let id = add(&*store, "alice", "a memory").await;
    assert_eq!(store.owner(id).await.unwrap().as_deref(), Some("alice"));
    store.delete(id, "test").await.unwrap();
    assert_eq!(store.owner(id).await.unwrap().as_deref(), Some("alice"));
    assert_eq!(store.owner(MemoryId::new()).await.unwrap(), None);
    store.forget_user("alice").await.unwrap();
    assert_eq!(store.owner(id).await.unwrap(), None);
}

/// Invalidated and expired memories are left out of search, listing and counts unless the
/// filter includes closed ones.
pub async fn closed_and_expired_memories_are_hidden_unless_asked_for(engine: &dyn Engine) {
    let (store, clock) = memories(engine).await;
    let closed = add(&*store, "alice", "lives in Paris").await;
    store.invalidate(closed, "test").await.unwrap();
    let mut expiring = NewMemory::new(Scope::user("alice"), "meeting in Paris tomorrow");
    expiring.expires_at = Some(t("2024-06-01T18:00:00Z"));
    store.add(expiring, "test").await.unwrap();
    add(&*store, "alice", "lives in Berlin, loves Paris").await;

    let filter = Filter::user("alice");
    assert_eq!(search(&*store, &filter, "paris").await.len(), 2);
    assert_eq!(store.list(&filter, 10, 0).await.unwrap().len(), 2);
    clock.advance(SignedDuration::from_hours(7));
    assert_eq!(
        search(&*store, &filter, "paris").await,
        ["lives in Berlin, loves Paris"]
    );
    assert_eq!(store.list(&filter, 10, 0).await.unwrap().len(), 1);
    let all = Filter {
        include_closed: true,
        ..filter.clone()
    };
    assert_eq!(search(&*store, &all, "paris").await.len(), 3);
    assert_eq!(store.count(&filter).await.unwrap(), 1);
    assert_eq!(store.count(&all).await.unwrap(), 3);
    assert_eq!(store.list(&all, 10, 0).await.unwrap().len(), 3);
}

/// Kind, category, time range, importance and metadata narrow search and listing alike;
/// listing is newest first with offset paging.
pub async fn filters_narrow_search_and_list(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
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
        store.add(m, "test").await.unwrap();
    }
    let base = Filter::user("u");
    let both = |filter: Filter| {
        let store = store.clone();
        async move {
            let found = search(&*store, &filter, "coffee").await;
            let mut listed: Vec<String> = store
                .list(&filter, 10, 0)
                .await
                .unwrap()
                .into_iter()
                .map(|m| m.text)
                .collect();
            assert_eq!(
                store.count(&filter).await.unwrap(),
                listed.len() as u64,
                "{filter:?}"
            );
            let mut sorted = found.clone();
            sorted.sort();
            listed.sort();
            assert_eq!(sorted, listed, "search and list disagree on {filter:?}");
            found
        }
    };
    assert_eq!(
        both(Filter {
            kinds: vec![Kind::Fact, Kind::Episode],
            ..base.clone()
        })
        .await
        .len(),
        2
    );
    assert_eq!(
        both(Filter {
            categories: vec!["user_info".into()],
            ..base.clone()
        })
        .await,
        ["coffee fact"]
    );
    assert_eq!(
        both(Filter {
            since: Some(t("2023-06-01T00:00:00Z")),
            until: Some(t("2023-07-01T00:00:00Z")),
            ..base.clone()
        })
        .await,
        ["coffee preference: oat milk"]
    );
    // `since` is inclusive, `until` exclusive.
    assert_eq!(
        both(Filter {
            since: Some(t("2023-06-10T00:00:00Z")),
            until: Some(t("2023-07-10T00:00:00Z")),
            ..base.clone()
        })
        .await,
        ["coffee preference: oat milk"]
    );
    assert_eq!(
        both(Filter {
            min_importance: Some(Importance::new(4).unwrap()),
            ..base.clone()
        })
        .await
        .len(),
        2
    );
    let meta = |k: &str, v: &str| MetaCondition {
        key: k.into(),
        value: v.into(),
    };
    assert_eq!(
        both(Filter {
            metadata: vec![meta("dia_id", "D22")],
            ..base.clone()
        })
        .await,
        ["coffee preference: oat milk"]
    );
    assert_eq!(
        both(Filter {
            metadata: vec![meta("turn", "4")],
            ..base.clone()
        })
        .await,
        ["coffee fact"]
    );
    assert!(
        both(Filter {
            metadata: vec![meta("missing", "x")],
            ..base.clone()
        })
        .await
        .is_empty()
    );
    let listed = store.list(&base, 2, 0).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].text, "coffee fact");
    assert_eq!(listed[1].text, "coffee preference: oat milk");
    assert_eq!(
        store.list(&base, 10, 2).await.unwrap()[0].text,
        "coffee in May"
    );
    assert!(store.list(&base, 10, 3).await.unwrap().is_empty());
}

/// Agent, session and kind filters are applied inside the query, before the limit: a few
/// matching memories under many newer (and better-scoring) ones that do not match are all
/// found.
pub async fn filters_apply_before_the_limit(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let mut batch = Vec::new();
    for i in 0..300 {
        batch.push(
            NewMemory::new(
                Scope::user("u").with_agent("noisy").with_session("loud"),
                format!("garden garden garden note {i}"),
            )
            .at(t("2024-05-01T00:00:00Z") + SignedDuration::from_mins(i)),
        );
    }
    for (i, (agent, session, kind)) in [
        ("quiet", "s1", Kind::Fact),
        ("quiet", "s2", Kind::Episode),
        ("noisy", "s3", Kind::Fact),
    ]
    .into_iter()
    .enumerate()
    {
        batch.push(
            NewMemory::new(
                Scope::user("u").with_agent(agent).with_session(session),
                format!("a long story that mentions the garden once, number {i}"),
            )
            .with_kind(kind)
            .at(t("2024-01-01T00:00:00Z") + SignedDuration::from_mins(i as i64)),
        );
    }
    // Another user's matching memories are never candidates.
    batch.push(
        NewMemory::new(Scope::user("v").with_agent("quiet"), "garden for v").with_kind(Kind::Fact),
    );
    store.add_many(batch, "test").await.unwrap();

    let by_agent = Filter {
        agent_id: Some("quiet".into()),
        ..Filter::user("u")
    };
    let by_session = Filter {
        session_id: Some("s3".into()),
        ..Filter::user("u")
    };
    let by_kind = Filter {
        kinds: vec![Kind::Fact],
        ..Filter::user("u")
    };
    for (filter, expected) in [(&by_agent, 2), (&by_session, 1), (&by_kind, 2)] {
        let hits = store.search_lexical(filter, "garden", 2).await.unwrap();
        assert_eq!(hits.len(), expected, "search {filter:?}");
        let listed = store.list(filter, 2, 0).await.unwrap();
        assert_eq!(listed.len(), expected, "list {filter:?}");
        for memory in hits.iter().map(|h| &h.memory).chain(&listed) {
            assert_eq!(memory.scope.user_id, "u");
            if let Some(agent) = &filter.agent_id {
                assert_eq!(memory.scope.agent_id.as_ref(), Some(agent));
            }
            if let Some(session) = &filter.session_id {
                assert_eq!(memory.scope.session_id.as_ref(), Some(session));
            }
            if !filter.kinds.is_empty() {
                assert!(filter.kinds.contains(&memory.kind));
            }
        }
        assert_eq!(store.count(filter).await.unwrap(), expected as u64);
    }
}

/// Search and listing see one user's memories only, and a filter without a user is refused.
pub async fn search_is_confined_to_one_user(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    add(&*store, "alice", "the secret word is swordfish").await;
    add(&*store, "bob", "bob has no secrets").await;
    assert!(
        search(&*store, &Filter::user("bob"), "swordfish")
            .await
            .is_empty()
    );
    assert_eq!(
        search(&*store, &Filter::user("alice"), "swordfish")
            .await
            .len(),
        1
    );
    assert_eq!(
        store.list(&Filter::user("bob"), 10, 0).await.unwrap().len(),
        1
    );
    // A user whose name is a prefix of another's is another user.
    assert!(
        store
            .list(&Filter::user("ali"), 10, 0)
            .await
            .unwrap()
            .is_empty()
    );
    let err = store
        .search_lexical(&Filter::user(""), "x", 5)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("user is required"), "{err}");
}

/// A query with no searchable word is a bad query, not an empty answer.
pub async fn queries_without_words_are_refused(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    add(&*store, "u", "anything").await;
    for q in ["", "   ", "?!", "\"*\""] {
        let err = store
            .search_lexical(&Filter::user("u"), q, 5)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::BadQuery(_)), "{q}: {err}");
    }
}

/// Words match across case, punctuation, stemming and diacritics.
pub async fn words_match_across_case_punctuation_and_stemming(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    add(&*store, "u", "She was RUNNING marathons, every weekend!").await;
    add(&*store, "u", "Café culture in São Paulo").await;
    add(&*store, "u", "unrelated text about gardens").await;
    let filter = Filter::user("u");
    assert_eq!(search(&*store, &filter, "runs marathon").await.len(), 1);
    assert_eq!(search(&*store, &filter, "weekend?").await.len(), 1);
    assert_eq!(search(&*store, &filter, "cafe sao paulo").await.len(), 1);
}

/// Chinese, Japanese, Russian and Korean text is found by its words.
pub async fn non_latin_text_is_searchable(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    add(&*store, "u", "我住在北京,喜欢喝茶").await;
    add(&*store, "u", "東京で寿司を食べました").await;
    add(&*store, "u", "Я люблю читать книги").await;
    add(&*store, "u", "서울에서 커피를 마셨어요").await;
    let filter = Filter::user("u");
    assert_eq!(
        search(&*store, &filter, "北京").await,
        ["我住在北京,喜欢喝茶"]
    );
    assert_eq!(
        search(&*store, &filter, "寿司").await,
        ["東京で寿司を食べました"]
    );
    assert_eq!(
        search(&*store, &filter, "книги").await,
        ["Я люблю читать книги"]
    );
    assert_eq!(
        search(&*store, &filter, "커피").await,
        ["서울에서 커피를 마셨어요"]
    );
    assert!(search(&*store, &filter, "京北").await.is_empty());
}

/// A better match scores higher; equal scores go to the newer memory first.
pub async fn better_matches_rank_first_and_ties_go_to_the_newest(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let mut older = NewMemory::new(Scope::user("u"), "went hiking");
    older.created_at = Some(t("2023-01-01T00:00:00Z"));
    store.add(older, "test").await.unwrap();
    let mut newer = NewMemory::new(Scope::user("u"), "went hiking ");
    newer.scope.session_id = Some("s".into());
    newer.created_at = Some(t("2023-06-01T00:00:00Z"));
    store.add(newer, "test").await.unwrap();
    add(&*store, "u", "hiking in the mountains").await;
    // BM25 needs a collection in which the words are not everywhere.
    for other in [
        "cooked pasta",
        "read a novel",
        "fixed the bike",
        "called mom",
    ] {
        add(&*store, "u", other).await;
    }
    let hits = store
        .search_lexical(&Filter::user("u"), "hiking mountains", 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 3);
    assert!(hits[0].memory.text.contains("mountains"));
    assert!(hits[0].bm25 > hits[1].bm25);
    assert_eq!(hits[1].bm25, hits[2].bm25);
    assert_eq!(hits[1].memory.created_at, t("2023-06-01T00:00:00Z"));
    assert!(hits.iter().all(|h| h.bm25 > 0.0));
}

/// The top 10 are exactly the first 10 of ranking every candidate, with the same scores and
/// tie order, with and without a filter.
pub async fn a_short_top_list_is_exactly_the_head_of_the_full_ranking(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
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
    store.add_many(batch, "test").await.unwrap();
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
            let full = store.search_lexical(&filter, query, 100_000).await.unwrap();
            let top = store.search_lexical(&filter, query, 10).await.unwrap();
            let full: Vec<_> = full
                .iter()
                .take(10)
                .map(|h| (h.memory.id, h.bm25))
                .collect();
            let top: Vec<_> = top.iter().map(|h| (h.memory.id, h.bm25)).collect();
            assert_eq!(top.len(), 10, "{query}");
            assert_eq!(top, full, "{query}");
        }
    }
}

/// An episode of a conversation is also found by the words of the turn before it (its
/// question); other conversations and facts get no such context.
pub async fn a_conversation_turn_is_found_by_the_words_of_the_turn_it_answers(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let turn = |session: &str, text: &str| {
        NewMemory::new(Scope::user("u").with_session(session), text).at(t("2024-01-01T10:00:00Z"))
    };
    store
        .add(turn("s1", "Did you ever make it to Lisbon?"), "t")
        .await
        .unwrap();
    store
        .add(turn("s1", "Yes, twice last year!"), "t")
        .await
        .unwrap();
    store
        .add(turn("s2", "Weather is nice."), "t")
        .await
        .unwrap();
    store
        .add(
            NewMemory::new(Scope::user("u").with_session("s1"), "likes trains")
                .with_kind(Kind::Fact),
            "t",
        )
        .await
        .unwrap();
    for other in ["cooked pasta", "read a novel", "fixed the bike"] {
        add(&*store, "u", other).await;
    }
    let found = search(&*store, &Filter::user("u"), "Lisbon").await;
    assert_eq!(
        found,
        ["Did you ever make it to Lisbon?", "Yes, twice last year!"]
    );
    assert_eq!(search(&*store, &Filter::user("u"), "trains").await.len(), 1);
    assert_eq!(search(&*store, &Filter::user("u"), "nice").await.len(), 1);
    assert_eq!(
        search(&*store, &Filter::user("u"), "twice").await,
        ["Yes, twice last year!"]
    );
}

/// Memories stored in one batch score as the same memories stored one at a time (statistics
/// are per user: two users of one store stand in for two stores).
pub async fn a_batch_and_the_same_memories_one_at_a_time_score_alike(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
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
    let memories = |prefix: &str| -> Vec<NewMemory> {
        turns
            .iter()
            .enumerate()
            .map(|(i, (user, session, text))| {
                NewMemory::new(
                    Scope::user(format!("{prefix}{user}")).with_session(*session),
                    *text,
                )
                .at(t("2024-01-01T10:00:00Z") + SignedDuration::from_mins(i as i64))
            })
            .collect()
    };
    for memory in memories("single-") {
        store.add(memory, "t").await.unwrap();
    }
    let outcomes = store.add_many(memories("batch-"), "t").await.unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(AddOutcome::Added(_))))
    );
    for (user, query) in [("u", "Lisbon trams"), ("u", "brakes rain"), ("v", "trams")] {
        let scores = |prefix: &str| {
            let store = store.clone();
            let filter = Filter::user(format!("{prefix}{user}"));
            async move {
                store
                    .search_lexical(&filter, query, 10)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|h| (h.memory.text, h.bm25))
                    .collect::<Vec<_>>()
            }
        };
        let expected = scores("single-").await;
        assert!(!expected.is_empty(), "{query}");
        assert_eq!(scores("batch-").await, expected, "{user}: {query}");
    }
}

/// What another handle (another process) changes is seen by the first at once: added,
/// updated, invalidated, expired and deleted memories in search, listing and get.
pub async fn changes_through_another_handle_are_seen_at_once(engine: &dyn Engine) {
    let (first, clock) = open(engine).await;
    let first = first.memories;
    let mut batch = Vec::new();
    for i in 0..40 {
        batch.push(NewMemory::new(
            Scope::user("u"),
            format!("entry {i} by the river lantern"),
        ));
    }
    first.add_many(batch, "test").await.unwrap();
    let filter = Filter::user("u");
    // Asked a few times, so that an engine that caches may decide to.
    for _ in 0..4 {
        assert_eq!(
            first
                .search_lexical(&filter, "lantern", 50)
                .await
                .unwrap()
                .len(),
            40
        );
    }
    let top = first.search_lexical(&filter, "lantern", 5).await.unwrap();

    let other = engine.open(clock.clone()).await.memories;
    other.invalidate(top[0].memory.id, "test").await.unwrap();
    other.delete(top[1].memory.id, "test").await.unwrap();
    other
        .update(top[2].memory.id, MemoryPatch::text("lantern"), "test")
        .await
        .unwrap();
    other
        .update(
            top[3].memory.id,
            MemoryPatch {
                expires_at: Some(Some(clock.now() - SignedDuration::from_hours(1))),
                ..MemoryPatch::default()
            },
            "test",
        )
        .await
        .unwrap();
    let new = add(&*other, "u", "lantern lantern").await;

    let after: Vec<MemoryId> = first
        .search_lexical(&filter, "lantern", 50)
        .await
        .unwrap()
        .iter()
        .map(|h| h.memory.id)
        .collect();
    assert_eq!(after.len(), 40 - 3 + 1);
    assert!(after.contains(&new) && after.contains(&top[2].memory.id));
    for (which, gone) in [(0, &top[0]), (1, &top[1]), (3, &top[3])] {
        assert!(
            !after.contains(&gone.memory.id),
            "hit {which} is still found"
        );
    }
    assert_eq!(first.get(top[2].memory.id).await.unwrap().text, "lantern");
    assert!(matches!(
        first.get(top[1].memory.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(first.count(&filter).await.unwrap(), 38);
    // The same text added through the first handle is now a duplicate.
    assert_eq!(
        first
            .add(NewMemory::new(Scope::user("u"), "lantern lantern"), "test")
            .await
            .unwrap(),
        AddOutcome::Duplicate(new)
    );
}

/// Each turn's previous turn is the latest earlier episode of the same user and session (at the
/// same time, the one stored before it); facts, memories without a session, other users'
/// memories and first turns have none.
pub async fn previous_turns_follow_each_conversation(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let at = t("2024-05-01T10:00:00Z");
    let turn = |session: &str, text: &str, minutes: i64| {
        NewMemory::new(Scope::user("u").with_session(session), text)
            .at(at + SignedDuration::from_mins(minutes))
    };
    let ids: Vec<MemoryId> = store
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
        .await
        .unwrap()
        .into_iter()
        .map(added)
        .collect();
    let [first, second, third, other, zeroth, fact, loose] = ids[..] else {
        panic!("seven memories");
    };
    let someone_elses = add(&*store, "v", "not yours").await;
    let previous = store
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
                MemoryId::new(),
            ],
        )
        .await
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
            None,
            None
        ]
    );
    assert!(store.previous_turns("u", &[]).await.unwrap().is_empty());
}

/// Forgetting a user erases their memories, history and counts, and nobody else's.
pub async fn forget_erases_a_user_and_nobody_else(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let a = add(&*store, "alice", "alice's memory").await;
    let closed = add(&*store, "alice", "alice's old memory").await;
    store.invalidate(closed, "test").await.unwrap();
    add(&*store, "bob", "bob's memory").await;
    assert_eq!(store.forget_user("alice").await.unwrap(), 2);
    assert!(
        store
            .list(&Filter::user("alice"), 10, 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store.history(a).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        search(&*store, &Filter::user("bob"), "memory").await.len(),
        1
    );
    let users: Vec<String> = store
        .users()
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.user_id)
        .collect();
    assert_eq!(users, ["bob"]);
    assert_eq!(store.forget_user("alice").await.unwrap(), 0);
}

/// Export pages run oldest first, ties broken by id, current and closed memories alike, and a
/// cursor continues exactly after the last memory handed over.
pub async fn export_pages_through_everything_oldest_first(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let mut old = NewMemory::new(Scope::user("u"), "old");
    old.created_at = Some(t("2020-01-01T00:00:00Z"));
    store.add(old, "test").await.unwrap();
    let closed = add(&*store, "u", "closed").await;
    store.invalidate(closed, "test").await.unwrap();
    // Many memories at one instant: only their ids order them.
    let same_time: Vec<NewMemory> = (0..25)
        .map(|i| {
            NewMemory::new(Scope::user("u"), format!("tied {i}")).at(t("2022-01-01T00:00:00Z"))
        })
        .collect();
    store.add_many(same_time, "test").await.unwrap();
    add(&*store, "other", "not exported").await;

    let mut paged = Vec::new();
    let mut after: Option<ExportCursor> = None;
    loop {
        let page = store.export_page("u", after, 4).await.unwrap();
        assert!(page.len() <= 4);
        let Some(last) = page.last() else { break };
        after = Some(ExportCursor::after(last));
        paged.extend(page);
    }
    assert_eq!(paged.len(), 27);
    assert_eq!(paged[0].text, "old");
    assert_eq!(paged[26].text, "closed");
    assert!(paged[26].valid_to.is_some());
    for pair in paged.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            (a.created_at, a.id) < (b.created_at, b.id),
            "{} then {}",
            a.text,
            b.text
        );
    }
    let mut all = Vec::new();
    let count = store
        .export("u", &mut |m| {
            all.push(m);
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(count, 27);
    assert_eq!(all, paged);
}

/// The totals are there and count what was stored.
pub async fn stats_count_what_is_there(engine: &dyn Engine) {
    let (backend, _) = open(engine).await;
    let store = backend.memories.clone();
    let empty = store.stats().await.unwrap();
    assert_eq!((empty.memories, empty.users, empty.closed), (0, 0, 0));
    add(&*store, "a", "x1").await;
    let id = add(&*store, "b", "x2").await;
    store
        .add(
            NewMemory::new(Scope::user("b"), "x3").with_kind(Kind::Fact),
            "t",
        )
        .await
        .unwrap();
    store.invalidate(id, "t").await.unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.memories, stats.users, stats.closed), (3, 2, 1));
    assert_eq!(stats.by_kind.get(&Kind::Episode), Some(&2));
    assert_eq!(stats.by_kind.get(&Kind::Fact), Some(&1));
    assert_eq!(stats.history_rows, 4);
    assert_eq!(stats.engine, backend.engine);
    assert!(!stats.location.is_empty());
    assert!(stats.schema_version > 0);
    assert!(!stats.dense_search.is_empty());
}

/// Users are listed by id with their memories, current and closed.
pub async fn users_are_listed_with_their_counts(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    assert!(store.users().await.unwrap().is_empty());
    add(&*store, "bob", "one").await;
    add(&*store, "alice", "one").await;
    let closed = add(&*store, "alice", "two").await;
    store.invalidate(closed, "test").await.unwrap();
    let users = store.users().await.unwrap();
    let listed: Vec<(&str, u64)> = users
        .iter()
        .map(|u| (u.user_id.as_str(), u.memories))
        .collect();
    assert_eq!(listed, vec![("alice", 2), ("bob", 1)]);
}

/// Sessions are counted from the memories that name them, in byte order, with their first and
/// last creation times.
pub async fn sessions_are_counted_from_the_memories_that_name_them(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    for (session, text, when) in [
        ("cli:b", "one", "2024-05-02T10:00:00Z"),
        ("cli:a", "two", "2024-05-03T10:00:00Z"),
        ("cli:b", "three", "2024-05-01T10:00:00Z"),
        ("Z", "four", "2024-05-04T10:00:00Z"),
    ] {
        store
            .add(
                NewMemory::new(Scope::user("u").with_session(session), text).at(t(when)),
                "test",
            )
            .await
            .unwrap();
    }
    add(&*store, "u", "no session").await;
    store
        .add(
            NewMemory::new(Scope::user("other").with_session("cli:a"), "theirs"),
            "test",
        )
        .await
        .unwrap();
    let counts = store.session_counts("u").await.unwrap();
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
                "Z",
                1,
                "2024-05-04T10:00:00Z".into(),
                "2024-05-04T10:00:00Z".into()
            ),
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
    assert!(store.session_counts("nobody").await.unwrap().is_empty());
}

/// Memories are counted per day of the time zone asked for and per kind, within the filter.
pub async fn memories_are_counted_per_day_in_the_time_zone_asked_for(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    for (user, text, kind, when) in [
        (
            "u",
            "late on the 1st in UTC",
            Kind::Episode,
            "2024-05-01T23:30:00Z",
        ),
        (
            "u",
            "early on the 2nd",
            Kind::Episode,
            "2024-05-02T08:00:00Z",
        ),
        ("u", "a fact on the 2nd", Kind::Fact, "2024-05-02T09:00:00Z"),
        ("u", "another one's", Kind::Episode, "2024-05-02T09:00:00Z"),
        (
            "other",
            "not counted",
            Kind::Episode,
            "2024-05-02T09:00:00Z",
        ),
    ] {
        store
            .add(
                NewMemory::new(Scope::user(user), text)
                    .with_kind(kind)
                    .at(t(when)),
                "test",
            )
            .await
            .unwrap();
    }
    let days = |filter: Filter, zone: jiff::tz::TimeZone| {
        let store = store.clone();
        async move {
            store
                .count_by_day(&filter, &zone)
                .await
                .unwrap()
                .into_iter()
                .map(|d| (d.day.to_string(), d.kind, d.count))
                .collect::<Vec<_>>()
        }
    };
    let utc = jiff::tz::TimeZone::UTC;
    assert_eq!(
        days(Filter::user("u"), utc.clone()).await,
        vec![
            ("2024-05-01".to_string(), Kind::Episode, 1),
            ("2024-05-02".to_string(), Kind::Episode, 2),
            ("2024-05-02".to_string(), Kind::Fact, 1),
        ]
    );
    // Two hours east of UTC, 23:30 on the 1st is already the 2nd.
    let east = jiff::tz::TimeZone::fixed(jiff::tz::offset(2));
    assert_eq!(
        days(Filter::user("u"), east).await,
        vec![
            ("2024-05-02".to_string(), Kind::Episode, 3),
            ("2024-05-02".to_string(), Kind::Fact, 1),
        ]
    );
    let facts = Filter {
        kinds: vec![Kind::Fact],
        ..Filter::user("u")
    };
    assert_eq!(
        days(facts.clone(), utc.clone()).await,
        vec![("2024-05-02".to_string(), Kind::Fact, 1)]
    );
    let fact = store.list(&facts, 1, 0).await.unwrap().remove(0);
    store.invalidate(fact.id, "test").await.unwrap();
    assert!(days(facts.clone(), utc.clone()).await.is_empty());
    let with_closed = Filter {
        include_closed: true,
        ..facts
    };
    assert_eq!(days(with_closed, utc).await.len(), 1);
}

/// A NUL character (which PostgreSQL cannot keep in text) is refused alike by every engine,
/// as an invalid memory: in the text or category, in a single add, in a batch (that item only)
/// and in an update. In metadata (JSON, where it is the escape `\u0000`) it is kept, and
/// filters find it, alike.
pub async fn a_nul_character_is_refused_alike_by_every_engine(engine: &dyn Engine) {
    let (store, _) = memories(engine).await;
    let err = store
        .add(NewMemory::new(Scope::user("u"), "a\0b"), "test")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    let err = store
        .add(
            NewMemory::new(Scope::user("u"), "ok").with_category("c\0"),
            "test",
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    let outcomes = store
        .add_many(
            vec![
                NewMemory::new(Scope::user("u"), "fine"),
                NewMemory::new(Scope::user("u"), "not\0fine"),
            ],
            "test",
        )
        .await
        .unwrap();
    assert!(matches!(outcomes[0], Ok(AddOutcome::Added(_))));
    assert!(
        matches!(outcomes[1], Err(StoreError::Invalid(_))),
        "{:?}",
        outcomes[1]
    );
    let Ok(AddOutcome::Added(fine)) = &outcomes[0] else {
        panic!()
    };
    let err = store
        .update(fine.id, MemoryPatch::text("x\0y"), "test")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    let err = store
        .update(
            fine.id,
            MemoryPatch {
                category: Some(Some("c\0".into())),
                ..MemoryPatch::default()
            },
            "test",
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    assert_eq!(store.get(fine.id).await.unwrap(), *fine);
    assert_eq!(store.count(&Filter::user("u")).await.unwrap(), 1);

    // Metadata is JSON, where a NUL is an escape: kept and found alike.
    let odd = added(
        store
            .add(
                NewMemory::new(Scope::user("u"), "odd metadata")
                    .with_meta("k", json!("a\0b"))
                    .with_meta("n", json!(3)),
                "test",
            )
            .await,
    );
    assert_eq!(store.get(odd).await.unwrap().metadata["k"], "a\0b");
    let meta = |key: &str, value: &str| Filter {
        metadata: vec![MetaCondition {
            key: key.into(),
            value: value.into(),
        }],
        ..Filter::user("u")
    };
    assert!(store.list(&meta("k", "x"), 10, 0).await.unwrap().is_empty());
    assert!(store.list(&meta("k", "a"), 10, 0).await.unwrap().is_empty());
    assert!(
        store
            .list(&meta("n", "3\0"), 10, 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.list(&meta("n", "3"), 10, 0).await.unwrap().len(), 1);
    assert_eq!(
        store.list(&meta("k", "a\0b"), 10, 0).await.unwrap().len(),
        1
    );
    assert_eq!(store.count(&meta("k", "a\0b")).await.unwrap(), 1);
    assert_eq!(
        store
            .search_lexical(&meta("k", "a\0b"), "metadata", 10)
            .await
            .unwrap()
            .len(),
        1
    );
}
