//! Making API tokens and checking their text.
//!
//! A token is shown to its owner once, when created, and stored only as its SHA-256 hash, so a
//! copy of the database gives nobody a working token. Each token is bound to the users whose
//! memories it may touch.
//!
//! A token reads `engram_<id>_<secret>`: the id (12 hex digits) finds the row, and the hash of
//! the whole text is compared in constant time, so neither a lookup nor a comparison reveals
//! how much of a guess was right.

use engram_core::store::tokens::{ApiToken, NewToken, TokenError, TokenStore};
use jiff::Timestamp;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Every token starts with this, so a leaked one is easy to recognise (and to scan for).
pub const TOKEN_PREFIX: &str = "engram_";
/// Random bytes in a token's id.
const ID_BYTES: usize = 6;
/// Random bytes in a token's secret.
const SECRET_BYTES: usize = 32;
/// Most users one token may be bound to.
pub const MAX_TOKEN_USERS: usize = 1_000;
/// Attempts at a free random id (48 bits: a clash is rare, and simply retried).
const ID_ATTEMPTS: usize = 8;

/// The SHA-256 of a token's text, in lowercase hex: what is stored, and what `[server] tokens`
/// in config.toml lists.
pub fn hash_token(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// True when two hex hashes are equal, compared in time independent of where they differ.
pub fn hashes_match(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// The id part of a token's text, if it has the shape of an engram token.
pub fn token_id(token: &str) -> Option<&str> {
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex_only = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    (id.len() == ID_BYTES * 2
        && secret.len() == SECRET_BYTES * 2
        && hex_only(id)
        && hex_only(secret))
    .then_some(id)
}

fn random_hex(len: usize) -> Result<String, TokenError> {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes)
        .map_err(|e| TokenError::Invalid(format!("cannot generate a random token: {e}")))?;
    Ok(hex(&bytes))
}

/// Checks the users a token is bound to: at least one, each a usable user id; returns them
/// once each, in the order given.
fn validate_users(users: &[String]) -> Result<Vec<String>, TokenError> {
    if users.is_empty() {
        return Err(TokenError::Invalid(
            "a token must be bound to at least one user (--user NAME)".to_string(),
        ));
    }
    if users.len() > MAX_TOKEN_USERS {
        return Err(TokenError::Invalid(format!(
            "a token may be bound to at most {MAX_TOKEN_USERS} users, got {}",
            users.len()
        )));
    }
    let mut unique: Vec<String> = Vec::with_capacity(users.len());
    for user in users {
        engram_core::Scope::user(user.clone())
            .validate()
            .map_err(|e| TokenError::Invalid(format!("user '{user}': {e}")))?;
        if !unique.contains(user) {
            unique.push(user.clone());
        }
    }
    Ok(unique)
}

/// Creates a token bound to `users` and stores its hash. Returns it with its text, which is
/// never shown again.
pub async fn create_token(
    store: &dyn TokenStore,
    name: Option<&str>,
    users: &[String],
    now: Timestamp,
) -> Result<(ApiToken, String), TokenError> {
    let users = validate_users(users)?;
    let name = name.map(str::trim).filter(|n| !n.is_empty());
    if let Some(name) = name
        && (name.len() > 200 || name.chars().any(char::is_control))
    {
        return Err(TokenError::Invalid(
            "a token name must be at most 200 bytes, without control characters".to_string(),
        ));
    }
    let created_at = engram_core::time::truncate_to_micros(now);
    for _ in 0..ID_ATTEMPTS {
        let id = random_hex(ID_BYTES)?;
        let text = format!("{TOKEN_PREFIX}{id}_{}", random_hex(SECRET_BYTES)?);
        let new = NewToken {
            id: id.clone(),
            name: name.map(str::to_string),
            users: users.clone(),
            token_hash: hash_token(&text),
            created_at,
        };
        if store.insert(new).await? {
            let token = ApiToken {
                id,
                name: name.map(str::to_string),
                users,
                created_at,
                last_used_at: None,
                revoked_at: None,
            };
            return Ok((token, text));
        }
    }
    Err(TokenError::Invalid(format!(
        "cannot generate a random token: {ID_ATTEMPTS} random token ids in a row were taken"
    )))
}

/// The active token whose text this is, or `None` for anything else: an unknown, malformed,
/// wrong or revoked token.
pub async fn verify_token(
    store: &dyn TokenStore,
    text: &str,
) -> Result<Option<ApiToken>, TokenError> {
    let Some(id) = token_id(text) else {
        return Ok(None);
    };
    let Some(found) = store.find(id).await? else {
        return Ok(None);
    };
    if !hashes_match(&hash_token(text), &found.token_hash) {
        return Ok(None);
    }
    Ok(found.token.is_active().then_some(found.token))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use engram_store_sqlite::SqliteStore;
    use tempfile::TempDir;

    fn store() -> (TempDir, SqliteStore) {
        let dir = TempDir::new().unwrap();
        let store = SqliteStore::open(dir.path().join("engram.db")).unwrap();
        (dir, store)
    }

    fn users(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn a_created_token_verifies_until_revoked() {
        let (_dir, tokens) = store();
        let now = Timestamp::now();
        let (token, text) =
            create_token(&tokens, Some("ci"), &users(&["alice", "bob", "alice"]), now)
                .await
                .unwrap();
        assert_eq!(token.users, users(&["alice", "bob"]));
        assert_eq!(token_id(&text), Some(token.id.as_str()));
        assert_eq!(
            verify_token(&tokens, &text).await.unwrap().unwrap().id,
            token.id
        );
        assert_eq!(tokens.active_count().await.unwrap(), 1);
        tokens.revoke(&token.id, now).await.unwrap();
        assert_eq!(verify_token(&tokens, &text).await.unwrap(), None);
    }

    #[tokio::test]
    async fn only_the_hash_is_stored() {
        let (dir, tokens) = store();
        let (_, text) = create_token(&tokens, None, &users(&["alice"]), Timestamp::now())
            .await
            .unwrap();
        drop(tokens);
        let mut bytes = std::fs::read(dir.path().join("engram.db")).unwrap();
        if let Ok(wal) = std::fs::read(dir.path().join("engram.db-wal")) {
            bytes.extend(wal);
        }
        let secret = text.rsplit('_').next().unwrap();
        let found = bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
        assert!(!found, "the secret must not be stored in the database");
        assert!(
            bytes.windows(64).any(|w| w == hash_token(&text).as_bytes()),
            "the hash is stored"
        );
    }

    #[tokio::test]
    async fn wrong_and_malformed_tokens_are_refused() {
        let (_dir, tokens) = store();
        let (_, text) = create_token(&tokens, None, &users(&["alice"]), Timestamp::now())
            .await
            .unwrap();
        let mut wrong = text.clone();
        let last = wrong.pop().unwrap();
        wrong.push(if last == '0' { '1' } else { '0' });
        assert_eq!(verify_token(&tokens, &wrong).await.unwrap(), None);
        for bad in [
            "",
            "engram_",
            "Bearer x",
            &text[..text.len() - 1],
            "engram_zz_zz",
        ] {
            assert_eq!(verify_token(&tokens, bad).await.unwrap(), None, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn tokens_need_valid_users_and_names() {
        let (_dir, tokens) = store();
        let now = Timestamp::now();
        for (name, users) in [
            (None, users(&[])),
            (None, users(&[" "])),
            (Some("bad\nname"), users(&["u"])),
        ] {
            assert!(matches!(
                create_token(&tokens, name, &users, now).await,
                Err(TokenError::Invalid(_))
            ));
        }
        assert_eq!(tokens.list().await.unwrap().len(), 0);
    }

    #[test]
    fn hashes_compare_whole() {
        let h = hash_token("x");
        assert_eq!(h.len(), 64);
        assert!(hashes_match(&h, &hash_token("x")));
        assert!(!hashes_match(&h, &hash_token("y")));
        assert!(!hashes_match(&h, &h[..63]));
    }
}
