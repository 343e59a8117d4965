//! [`TokenStore`]: API tokens, their users (scopes), use and revocation.

use std::time::Duration;

use engram_core::store::tokens::{NewToken, TokenError};
use jiff::{SignedDuration, Timestamp};

use crate::{Engine, eventually, open, start_time};

fn token(id: &str, users: &[&str], created_at: Timestamp) -> NewToken {
    NewToken {
        id: id.to_string(),
        name: Some(format!("token {id}")),
        users: users.iter().map(|s| s.to_string()).collect(),
        token_hash: format!("{id:0>64}"),
        created_at,
    }
}

/// A token is stored once per id and found with its hash and its users in the order given,
/// listed oldest first with its last use, and refused once revoked (revoking twice keeps the
/// first time).
pub async fn a_token_is_found_with_its_hash_until_revoked(engine: &dyn Engine) {
    let tokens = open(engine).await.0.tokens;
    let now = start_time();
    assert!(tokens.list().await.unwrap().is_empty());
    assert_eq!(tokens.active_count().await.unwrap(), 0);
    assert!(
        tokens
            .insert(token("a1", &["bob", "alice"], now))
            .await
            .unwrap()
    );
    assert!(
        !tokens.insert(token("a1", &["carol"], now)).await.unwrap(),
        "the id is taken"
    );
    let found = tokens.find("a1").await.unwrap().unwrap();
    assert_eq!(found.token.users, ["bob", "alice"]);
    assert_eq!(found.token.name.as_deref(), Some("token a1"));
    assert_eq!(found.token.created_at, now);
    assert_eq!(found.token_hash, format!("{:0>64}", "a1"));
    assert!(found.token.is_active());
    assert_eq!(found.token.last_used_at, None);
    assert!(tokens.find("zz").await.unwrap().is_none());

    let later = now + SignedDuration::from_secs(60);
    assert!(
        tokens
            .insert(NewToken {
                name: None,
                ..token("b2", &["v"], later)
            })
            .await
            .unwrap()
    );
    tokens.touch("a1", later).await.unwrap();
    assert_eq!(tokens.active_count().await.unwrap(), 2);
    let listed = tokens.list().await.unwrap();
    assert_eq!(
        listed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["a1", "b2"]
    );
    assert_eq!(listed[0].last_used_at, Some(later));
    assert_eq!(listed[1].name, None);

    let revoked = tokens.revoke("a1", later).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(later));
    assert!(!tokens.find("a1").await.unwrap().unwrap().token.is_active());
    assert_eq!(tokens.active_count().await.unwrap(), 1);
    let again = tokens
        .revoke("a1", later + SignedDuration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(again.revoked_at, revoked.revoked_at);
    assert!(matches!(
        tokens.revoke("nope", later).await,
        Err(TokenError::NotFound(_))
    ));
    assert_eq!(tokens.list().await.unwrap().len(), 2);
}

/// A token created or revoked through one handle is seen by another, and its change version
/// moves within a second, readable at once without waiting.
pub async fn token_changes_through_another_handle_move_the_change_version(engine: &dyn Engine) {
    let (a, clock) = open(engine).await;
    let b = engine.open(clock).await;
    assert!(b.tokens.change_version().await.is_ok());
    let before = b.tokens.try_change_version().expect("a version at once");
    let now = start_time();
    assert!(
        a.tokens
            .insert(token("abc123", &["alice"], now))
            .await
            .unwrap()
    );
    assert!(
        !b.tokens.insert(token("abc123", &["x"], now)).await.unwrap(),
        "the id is taken everywhere"
    );
    assert_eq!(
        b.tokens.find("abc123").await.unwrap().unwrap().token.users,
        ["alice"]
    );
    eventually(Duration::from_secs(1), "creation seen", || async {
        b.tokens.try_change_version() != Some(before)
    })
    .await;
    // (The version may move more often than tokens change, so a use may move it too.)
    a.tokens.touch("abc123", now).await.unwrap();
    let seen = b.tokens.change_version().await.unwrap();

    a.tokens.revoke("abc123", now).await.unwrap();
    eventually(Duration::from_secs(1), "revocation seen", || async {
        b.tokens.try_change_version().is_some_and(|v| v != seen)
    })
    .await;
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
}
