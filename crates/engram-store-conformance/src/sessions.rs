//! [`SessionLogStore`](engram_core::store::sessions::SessionLogStore): session logs and their
//! archives, appended whole, read back, listed, deleted, set aside.

use engram_core::store::sessions::{LogKind, PREVIOUS_SUFFIX};

use crate::SessionEngine;

/// A log reads back as its lines were appended, each ended by a newline; `first` only starts a
/// new log; a session and its archive are separate logs.
pub async fn a_log_reads_back_as_appended(engine: &dyn SessionEngine) {
    let logs = engine.open().await;
    assert_eq!(logs.read("cli:x", LogKind::Session).await.unwrap(), None);
    logs.append(
        "cli:x",
        LogKind::Session,
        Some("{\"_type\":\"metadata\"}".into()),
        vec!["{\"n\":1}".into()],
    )
    .await
    .unwrap();
    let other = engine.open().await;
    other
        .append(
            "cli:x",
            LogKind::Session,
            Some("ignored".into()),
            vec!["{\"n\":2}".into(), "{\"n\":3}".into()],
        )
        .await
        .unwrap();
    // An empty batch changes nothing.
    other
        .append("cli:x", LogKind::Session, None, Vec::new())
        .await
        .unwrap();
    let log = logs.read("cli:x", LogKind::Session).await.unwrap().unwrap();
    assert_eq!(
        log.text,
        "{\"_type\":\"metadata\"}\n{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n"
    );
    assert_eq!(log.bytes, log.text.len() as u64);
    assert_eq!(logs.read("cli:x", LogKind::Archive).await.unwrap(), None);
    logs.append(
        "cli:x",
        LogKind::Archive,
        Some("{\"_type\":\"metadata\"}".into()),
        vec!["ünïcödé ✓".into()],
    )
    .await
    .unwrap();
    assert_eq!(
        other
            .read("cli:x", LogKind::Archive)
            .await
            .unwrap()
            .unwrap()
            .text,
        "{\"_type\":\"metadata\"}\nünïcödé ✓\n"
    );
    assert!(!logs.location("cli:x", LogKind::Session).is_empty());
    assert_ne!(
        logs.location("cli:x", LogKind::Session),
        logs.location("cli:x", LogKind::Archive)
    );
}

/// Batches appended at once through two handles each stay whole.
pub async fn appends_from_two_handles_never_interleave(engine: &dyn SessionEngine) {
    let a = engine.open().await;
    let b = engine.open().await;
    let batch = |who: &str| -> Vec<String> { (0..50).map(|i| format!("{who}{i}")).collect() };
    let mut tasks = Vec::new();
    for (store, who) in [(a.clone(), "a"), (b.clone(), "b")] {
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
        .read("cli:y", LogKind::Archive)
        .await
        .unwrap()
        .unwrap()
        .text;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 500);
    for chunk in lines.chunks(50) {
        let prefix = chunk[0].trim_end_matches(char::is_numeric);
        assert!(
            chunk
                .iter()
                .enumerate()
                .all(|(i, l)| *l == format!("{prefix}{i}")),
            "{chunk:?}"
        );
    }
}

/// Keys list sessions (not archives; logs set aside only under keys ending in
/// [`PREVIOUS_SUFFIX`], which callers skip); delete takes a session and its archive; setting a
/// session aside makes it start afresh, and does it again after new turns.
pub async fn keys_delete_and_set_aside(engine: &dyn SessionEngine) {
    let logs = engine.open().await;
    let live = || {
        let logs = logs.clone();
        async move {
            let mut keys: Vec<String> = logs
                .keys()
                .await
                .unwrap()
                .into_iter()
                .filter(|k| !k.ends_with(PREVIOUS_SUFFIX))
                .collect();
            keys.sort();
            keys
        }
    };
    assert!(logs.keys().await.unwrap().is_empty());
    for key in ["cli:a", "telegram:1"] {
        logs.append(key, LogKind::Session, None, vec![format!("{key} 1")])
            .await
            .unwrap();
    }
    logs.append("cli:a", LogKind::Archive, None, vec!["old".into()])
        .await
        .unwrap();
    assert_eq!(live().await, ["cli:a", "telegram:1"]);

    logs.set_aside("cli:a").await.unwrap();
    assert_eq!(logs.read("cli:a", LogKind::Session).await.unwrap(), None);
    assert_eq!(live().await, ["telegram:1"]);
    logs.append(
        "cli:a",
        LogKind::Session,
        Some("meta".into()),
        vec!["cli:a 2".into()],
    )
    .await
    .unwrap();
    assert_eq!(
        logs.read("cli:a", LogKind::Session)
            .await
            .unwrap()
            .unwrap()
            .text,
        "meta\ncli:a 2\n"
    );
    logs.set_aside("cli:a").await.unwrap();
    assert_eq!(logs.read("cli:a", LogKind::Session).await.unwrap(), None);
    // Setting aside a session that does not exist is no error.
    logs.set_aside("cli:none").await.unwrap();

    assert!(logs.delete("telegram:1").await.unwrap());
    assert!(!logs.delete("telegram:1").await.unwrap());
    assert_eq!(
        logs.read("telegram:1", LogKind::Session).await.unwrap(),
        None
    );
    logs.append("cli:only-archive", LogKind::Archive, None, vec!["x".into()])
        .await
        .unwrap();
    assert!(logs.delete("cli:only-archive").await.unwrap());
    assert_eq!(
        logs.read("cli:only-archive", LogKind::Archive)
            .await
            .unwrap(),
        None
    );
    assert!(live().await.is_empty());
}
