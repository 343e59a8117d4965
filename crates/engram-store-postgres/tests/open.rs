#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Opening a database: migrations, refusals, and the conditions a user can get wrong.

mod common;

use std::time::Duration;

use common::{Server, TestDb, with_database};
use engram_core::{Filter, MemoryStore, NewMemory, Scope, StoredVector};
use engram_store_postgres::schema::latest_version;
use engram_store_postgres::{DenseSearch, PgOptions, PgStore};

async fn open(url: &str) -> Result<PgStore, String> {
    PgStore::open(url, PgOptions::default())
        .await
        .map_err(|e| e.to_string())
}

async fn tables(db: &TestDb) -> Vec<String> {
    db.connect()
        .await
        .query(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn a_new_database_gets_the_schema_once_even_when_opened_twice_at_once() {
    let db = TestDb::new(Server::Pgvector).await;
    let (a, b) = tokio::join!(open(&db.url), open(&db.url));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.stats().await.unwrap().schema_version, latest_version());
    assert!(matches!(b.dense_search(), DenseSearch::Pgvector { .. }));
    let version: i32 = db
        .connect()
        .await
        .query_one("SELECT version FROM engram_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version as u32, latest_version());
    // And again, with the schema in place.
    drop(open(&db.url).await.unwrap());
}

#[tokio::test]
async fn a_database_of_something_else_is_refused_and_left_alone() {
    let db = TestDb::new(Server::Plain).await;
    db.connect()
        .await
        .batch_execute("CREATE TABLE invoices (id int PRIMARY KEY)")
        .await
        .unwrap();
    let err = open(&db.url).await.unwrap_err();
    assert!(err.contains("is not an engram database"), "{err}");
    assert!(err.contains(&db.name), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
    assert_eq!(tables(&db).await, ["invoices"]);
}

#[tokio::test]
async fn a_schema_from_a_newer_engram_is_refused_and_left_alone() {
    let db = TestDb::new(Server::Plain).await;
    drop(open(&db.url).await.unwrap());
    let client = db.connect().await;
    let newer = latest_version() as i32 + 1;
    client
        .execute("UPDATE engram_schema SET version = $1", &[&newer])
        .await
        .unwrap();
    let before = tables(&db).await;
    let err = open(&db.url).await.unwrap_err();
    assert!(err.contains("written by a newer engram"), "{err}");
    assert!(err.contains(&format!("schema version {newer}")), "{err}");
    assert_eq!(tables(&db).await, before);
    let version: i32 = client
        .query_one("SELECT version FROM engram_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, newer);
}

#[tokio::test]
async fn wrong_addresses_get_one_line_errors_that_say_what_is_wrong() {
    let admin = Server::Plain.admin_url();
    let missing = open(&with_database(&admin, "no_such_database"))
        .await
        .unwrap_err();
    assert!(
        missing.starts_with(
            "cannot reach the database at postgresql://postgres@/no_such_database?host="
        ),
        "{missing}"
    );
    assert!(missing.contains("the database does not exist"), "{missing}");

    let refused = open("postgres://engram@127.0.0.1:1/engram")
        .await
        .unwrap_err();
    assert!(
        refused.starts_with("cannot reach the database at"),
        "{refused}"
    );
    assert!(
        refused
            .starts_with("cannot reach the database at postgresql://engram@127.0.0.1:1/engram: "),
        "{refused}"
    );

    let garbage = open("postgres://user:pw@host:notaport/db")
        .await
        .unwrap_err();
    assert!(garbage.contains("not a PostgreSQL URL"), "{garbage}");
    assert!(!garbage.contains("pw"), "{garbage}");
    for err in [missing, refused, garbage] {
        assert!(!err.contains('\n'), "one line: {err}");
    }
}

#[tokio::test]
async fn an_exhausted_pool_is_an_error_that_names_the_pool() {
    let db = TestDb::new(Server::Plain).await;
    let store = PgStore::open(
        &db.url,
        PgOptions {
            pool_size: 1,
            acquire_timeout: Duration::from_millis(300),
            ..PgOptions::default()
        },
    )
    .await
    .unwrap();
    store
        .add(NewMemory::new(Scope::user("alice"), "first"), "test")
        .await
        .unwrap();
    // Another connection holds alice's write lock, so an add waits with the only connection...
    let mut blocker = db.connect().await;
    let tx = blocker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM lexical_users WHERE user_id = 'alice' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let waiting = store.add(NewMemory::new(Scope::user("alice"), "second"), "test");
    let starved = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        store.count(&Filter::user("alice")).await
    };
    // ...until the lock goes away, after the starved call gave up.
    let (waiting, starved) = tokio::join!(waiting, async {
        let result = starved.await;
        tx.rollback().await.unwrap();
        result
    });
    let err = starved.unwrap_err().to_string();
    assert!(err.contains("all 1 connections of this process"), "{err}");
    assert!(err.contains("stayed busy"), "{err}");
    waiting.unwrap();
    assert_eq!(store.count(&Filter::user("alice")).await.unwrap(), 2);
}

#[tokio::test]
async fn each_server_says_how_dense_search_is_done() {
    let with = TestDb::new(Server::Pgvector).await;
    let store = open(&with.url).await.unwrap();
    assert!(
        store.dense_search().describe().starts_with("pgvector 0."),
        "{:?}",
        store.dense_search()
    );
    let without = TestDb::new(Server::Plain).await;
    let store = open(&without.url).await.unwrap();
    assert_eq!(
        store.dense_search(),
        &DenseSearch::Exact {
            reason: "this PostgreSQL server has no pgvector extension".into()
        }
    );
}

#[tokio::test]
async fn vectors_stored_without_pgvector_move_to_it_when_it_can_be_installed() {
    let db = TestDb::new(Server::Pgvector).await;
    // A login that may not install extensions keeps search exact...
    let role = format!("{}_owner", db.name);
    let admin = db.connect().await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; ALTER DATABASE {} OWNER TO {role}; \
             GRANT ALL ON SCHEMA public TO {role}",
            db.name
        ))
        .await
        .unwrap();
    let limited_url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    let store = open(&limited_url).await.unwrap();
    let DenseSearch::Exact { reason } = store.dense_search() else {
        panic!("{:?}", store.dense_search())
    };
    assert!(reason.contains("could not be installed"), "{reason}");
    let memory = match store
        .add(NewMemory::new(Scope::user("alice"), "likes tea"), "test")
        .await
        .unwrap()
    {
        engram_core::AddOutcome::Added(m) => m,
        other => panic!("{other:?}"),
    };
    let other = match store
        .add(NewMemory::new(Scope::user("alice"), "likes coffee"), "test")
        .await
        .unwrap()
    {
        engram_core::AddOutcome::Added(m) => m,
        other => panic!("{other:?}"),
    };
    store
        .put_vectors(
            "toy",
            2,
            vec![
                StoredVector {
                    content_hash: memory.content_hash.clone(),
                    vector: vec![0.6, 0.8],
                    truncated: false,
                },
                StoredVector {
                    content_hash: other.content_hash.clone(),
                    vector: vec![1.0, 0.0],
                    truncated: true,
                },
            ],
        )
        .await
        .unwrap();
    let exact = store
        .vector_search("toy", &Filter::user("alice"), &[0.0, 1.0], 5)
        .await
        .unwrap();
    drop(store);
    drop(admin);

    // ...and the owner's next open after pgvector is allowed converts the stored vectors.
    let store = open(&db.url).await.unwrap();
    assert!(store.dense_search().describe().starts_with("pgvector"));
    let converted = store
        .vector_search("toy", &Filter::user("alice"), &[0.0, 1.0], 5)
        .await
        .unwrap();
    assert_eq!(exact.len(), 2);
    assert_eq!(converted, exact);
    assert_eq!(converted[0].memory.id, memory.id);
    assert!((converted[0].similarity - 0.8).abs() < 1e-6);
    assert!(converted[1].truncated);
    let models = store.vector_models().await.unwrap();
    assert_eq!(models[0].vectors, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_database_holds_a_store_per_schema() {
    let db = TestDb::new(Server::Pgvector).await;
    let team_a = engram_store_postgres::fresh_schema(&db.url, "team_a")
        .await
        .unwrap();
    let team_b = engram_store_postgres::fresh_schema(&db.url, "team_b")
        .await
        .unwrap();
    let a = open(&team_a).await.unwrap();
    let b = open(&team_b).await.unwrap();
    a.add(
        NewMemory::new(Scope::user("alice"), "only in team a"),
        "test",
    )
    .await
    .unwrap();
    assert_eq!(a.count(&Filter::user("alice")).await.unwrap(), 1);
    assert_eq!(b.count(&Filter::user("alice")).await.unwrap(), 0);
    assert!(a.dense_search().describe().starts_with("pgvector"));
    assert!(b.dense_search().describe().starts_with("pgvector"));
    // Starting over empties the schema.
    drop(a);
    let again = engram_store_postgres::fresh_schema(&db.url, "team_a")
        .await
        .unwrap();
    let a = open(&again).await.unwrap();
    assert_eq!(a.count(&Filter::user("alice")).await.unwrap(), 0);
    assert!(
        engram_store_postgres::fresh_schema(&db.url, "bad; name")
            .await
            .is_err()
    );
}
