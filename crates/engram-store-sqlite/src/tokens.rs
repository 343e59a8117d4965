//! API tokens for `engram serve`, in the same SQLite file as the memories.
//!
//! A token is shown to its owner once, when created, and stored only as its SHA-256 hash, so a
//! copy of the database gives nobody a working token. Each token is bound to the users whose
//! memories it may touch. The command line creates and revokes tokens while a server runs; the
//! server reads them on every request, so a revocation takes effect at once.
//!
//! A token reads `engram_<id>_<secret>`: the id (12 hex digits) finds the row, and the hash of
//! the whole text is compared in constant time, so neither a lookup nor a comparison reveals
//! how much of a guess was right.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use engram_core::{MemoryId, StoreError};
use jiff::Timestamp;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::from_sqlite;
use crate::{SqliteStore, StoreOptions};

/// Every token starts with this, so a leaked one is easy to recognise (and to scan for).
pub const TOKEN_PREFIX: &str = "engram_";
/// Random bytes in a token's id.
const ID_BYTES: usize = 6;
/// Random bytes in a token's secret.
const SECRET_BYTES: usize = 32;
/// Most users one token may be bound to.
pub const MAX_TOKEN_USERS: usize = 1_000;

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// No token has this id.
    #[error("no token has the id '{0}' (see `engram token list`)")]
    NotFound(String),
    /// The token asked for is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// The system could not supply random bytes.
    #[error("cannot generate a random token: {0}")]
    Random(String),
    /// A stored row cannot be read back.
    #[error("token '{id}' is stored in a form this engram cannot read: {detail}")]
    Unreadable {
        /// The token's id.
        id: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A token as stored: everything but the secret.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApiToken {
    /// Public id (12 hex digits), part of the token text.
    pub id: String,
    /// A name for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The users whose memories the token may touch.
    pub users: Vec<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was last accepted (recorded at most about once a minute).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<Timestamp>,
    /// When it was revoked; a revoked token is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Timestamp>,
}

impl ApiToken {
    /// True until the token is revoked.
    pub fn is_active(&self) -> bool {
        self.revoked_at.is_none()
    }
}

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
    getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
    Ok(hex(&bytes))
}

/// Checks the users a token is bound to: at least one, each a usable user id.
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

/// The API tokens of one database file.
///
/// Checking a token reads through its own connection and recording its use writes through
/// another, so a long write elsewhere (an import holding the write lock) never delays a check.
#[derive(Debug)]
pub struct TokenStore {
    path: PathBuf,
    busy_timeout: Duration,
    reader: Mutex<Connection>,
    writer: Mutex<Connection>,
}

const TOKEN_COLUMNS: &str = "id, name, users, created_at, last_used_at, revoked_at";

impl TokenStore {
    /// Opens the tokens of the database at `path` (created and migrated if needed).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TokenError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Opens the tokens of the database at `path` with these options (only the busy timeout
    /// matters here).
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self, TokenError> {
        let path = path.as_ref().to_path_buf();
        let busy_timeout = options.busy_timeout;
        // Opening the memory store creates the file, checks it is engram's and migrates it.
        drop(SqliteStore::open_with(&path, options)?);
        let connect = || -> Result<Connection, StoreError> {
            let map = |e| from_sqlite(e, &path, busy_timeout);
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let conn = Connection::open_with_flags(&path, flags).map_err(map)?;
            conn.busy_timeout(busy_timeout).map_err(map)?;
            conn.execute_batch("PRAGMA synchronous = NORMAL;")
                .map_err(map)?;
            Ok(conn)
        };
        let reader = connect()?;
        let writer = connect()?;
        Ok(Self {
            path,
            busy_timeout,
            reader: Mutex::new(reader),
            writer: Mutex::new(writer),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> TokenError {
        TokenError::Store(from_sqlite(e, &self.path, self.busy_timeout))
    }

    /// Creates a token bound to `users`. Returns it with its text, which is never shown again.
    pub fn create(
        &self,
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
        let users_json = serde_json::to_string(&users)
            .map_err(|e| TokenError::Invalid(format!("cannot store the users: {e}")))?;
        let now = engram_core::time::truncate_to_micros(now);
        let mut conn = lock(&self.writer);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        // 48 random bits of id: a clash is rare, and simply retried.
        for _ in 0..8 {
            let id = random_hex(ID_BYTES)?;
            let text = format!("{TOKEN_PREFIX}{id}_{}", random_hex(SECRET_BYTES)?);
            let inserted = tx
                .execute(
                    "INSERT OR IGNORE INTO api_tokens (id, name, users, token_hash, created_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        id,
                        name,
                        users_json,
                        hash_token(&text),
                        now.as_microsecond()
                    ],
                )
                .map_err(|e| self.err(e))?;
            if inserted == 1 {
                tx.commit().map_err(|e| self.err(e))?;
                let token = ApiToken {
                    id,
                    name: name.map(str::to_string),
                    users,
                    created_at: now,
                    last_used_at: None,
                    revoked_at: None,
                };
                return Ok((token, text));
            }
        }
        Err(TokenError::Random(
            "eight random token ids in a row were taken".to_string(),
        ))
    }

    /// Every token, revoked ones included, oldest first.
    pub fn list(&self) -> Result<Vec<ApiToken>, TokenError> {
        let conn = lock(&self.reader);
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, id"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], read_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))?;
        rows.into_iter().map(RawToken::into_token).collect()
    }

    /// How many tokens are not revoked.
    pub fn active_count(&self) -> Result<u64, TokenError> {
        lock(&self.reader)
            .query_row(
                "SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n.max(0) as u64)
            .map_err(|e| self.err(e))
    }

    /// Revokes a token: from now on it is refused. Revoking twice is not an error.
    pub fn revoke(&self, id: &str, now: Timestamp) -> Result<ApiToken, TokenError> {
        let now = engram_core::time::truncate_to_micros(now);
        let mut conn = lock(&self.writer);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        tx.execute(
            "UPDATE api_tokens SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
            params![now.as_microsecond(), id],
        )
        .map_err(|e| self.err(e))?;
        let raw = tx
            .query_row(
                &format!("SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = ?1"),
                [id],
                read_row,
            )
            .optional()
            .map_err(|e| self.err(e))?
            .ok_or_else(|| TokenError::NotFound(id.to_string()))?;
        tx.commit().map_err(|e| self.err(e))?;
        raw.into_token()
    }

    /// The active token whose text this is, or `None` for anything else: an unknown, malformed,
    /// wrong or revoked token.
    pub fn verify(&self, text: &str) -> Result<Option<ApiToken>, TokenError> {
        let Some(id) = token_id(text) else {
            return Ok(None);
        };
        let found = {
            let conn = lock(&self.reader);
            conn.prepare_cached(&format!(
                "SELECT {TOKEN_COLUMNS}, token_hash FROM api_tokens WHERE id = ?1"
            ))
            .and_then(|mut stmt| {
                stmt.query_row([id], |row| Ok((read_row(row)?, row.get::<_, String>(6)?)))
                    .optional()
            })
            .map_err(|e| self.err(e))?
        };
        let Some((raw, stored_hash)) = found else {
            return Ok(None);
        };
        if !hashes_match(&hash_token(text), &stored_hash) {
            return Ok(None);
        }
        let token = raw.into_token()?;
        Ok(token.is_active().then_some(token))
    }

    /// Records that a token was just accepted.
    pub fn touch(&self, id: &str, now: Timestamp) -> Result<(), TokenError> {
        lock(&self.writer)
            .execute(
                "UPDATE api_tokens SET last_used_at = ?1 WHERE id = ?2",
                params![now.as_microsecond(), id],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// [`TokenStore::try_data_version`], waiting for the read connection if it is in use.
    pub fn data_version(&self) -> Result<i64, TokenError> {
        lock(&self.reader)
            .pragma_query_value(None, "data_version", |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// A number that changes whenever another connection (in any process, this store's own
    /// writer included) commits to the database: while it stands still, a token checked
    /// earlier is still what it was. `None` when the read connection is in use right now (the
    /// caller then checks the token the long way); never waits.
    pub fn try_data_version(&self) -> Option<i64> {
        let conn = self.reader.try_lock().ok()?;
        conn.pragma_query_value(None, "data_version", |r| r.get(0))
            .ok()
    }

    /// The user a memory belongs (or, once deleted, belonged) to, from its audit trail; `None`
    /// when the store never held it. Access checks need the owner of deleted memories too, so
    /// that their history is shown only to those who could see them.
    pub fn memory_owner(&self, id: MemoryId) -> Result<Option<String>, TokenError> {
        lock(&self.reader)
            .prepare_cached("SELECT user_id FROM history WHERE memory_id = ?1 LIMIT 1")
            .and_then(|mut stmt| stmt.query_row([id.to_string()], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // SQLite rolls back whatever a panicking holder left open.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A row as read, before its JSON and times are checked.
struct RawToken {
    id: String,
    name: Option<String>,
    users: String,
    created_at: i64,
    last_used_at: Option<i64>,
    revoked_at: Option<i64>,
}

fn read_row(row: &Row<'_>) -> rusqlite::Result<RawToken> {
    Ok(RawToken {
        id: row.get(0)?,
        name: row.get(1)?,
        users: row.get(2)?,
        created_at: row.get(3)?,
        last_used_at: row.get(4)?,
        revoked_at: row.get(5)?,
    })
}

impl RawToken {
    fn into_token(self) -> Result<ApiToken, TokenError> {
        let unreadable = |detail: String| TokenError::Unreadable {
            id: self.id.clone(),
            detail,
        };
        let time = |micros: i64| {
            Timestamp::from_microsecond(micros)
                .map_err(|e| unreadable(format!("bad time {micros}: {e}")))
        };
        let users: Vec<String> = serde_json::from_str(&self.users)
            .map_err(|e| unreadable(format!("users are not a JSON list of names: {e}")))?;
        Ok(ApiToken {
            created_at: time(self.created_at)?,
            last_used_at: self.last_used_at.map(time).transpose()?,
            revoked_at: self.revoked_at.map(time).transpose()?,
            users,
            name: self.name.clone(),
            id: self.id.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::{BlockingMemoryStore, NewMemory, Scope};
    use tempfile::TempDir;

    fn store() -> (TempDir, TokenStore) {
        let dir = TempDir::new().unwrap();
        let tokens = TokenStore::open(dir.path().join("engram.db")).unwrap();
        (dir, tokens)
    }

    fn users(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_created_token_verifies_until_revoked() {
        let (_dir, tokens) = store();
        let now = Timestamp::now();
        let (token, text) = tokens
            .create(Some("ci"), &users(&["alice", "bob", "alice"]), now)
            .unwrap();
        assert_eq!(token.users, users(&["alice", "bob"]));
        assert_eq!(token_id(&text), Some(token.id.as_str()));
        assert_eq!(tokens.verify(&text).unwrap().unwrap().id, token.id);
        assert_eq!(tokens.active_count().unwrap(), 1);

        let revoked = tokens.revoke(&token.id, now).unwrap();
        assert!(revoked.revoked_at.is_some());
        assert_eq!(tokens.verify(&text).unwrap(), None);
        assert_eq!(tokens.active_count().unwrap(), 0);
        // Revoking again keeps the first revocation time.
        let again = tokens.revoke(&token.id, Timestamp::now()).unwrap();
        assert_eq!(again.revoked_at, revoked.revoked_at);
    }

    #[test]
    fn only_the_hash_is_stored() {
        let (dir, tokens) = store();
        let (_, text) = tokens
            .create(None, &users(&["alice"]), Timestamp::now())
            .unwrap();
        drop(tokens);
        let bytes = std::fs::read(dir.path().join("engram.db")).unwrap();
        let secret = text.rsplit('_').next().unwrap();
        let found = bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
        assert!(!found, "the secret must not be stored in the database");
    }

    #[test]
    fn wrong_and_malformed_tokens_are_refused() {
        let (_dir, tokens) = store();
        let (_, text) = tokens
            .create(None, &users(&["alice"]), Timestamp::now())
            .unwrap();
        let mut wrong = text.clone();
        let last = wrong.pop().unwrap();
        wrong.push(if last == '0' { '1' } else { '0' });
        assert_eq!(tokens.verify(&wrong).unwrap(), None);
        for bad in [
            "",
            "engram_",
            "Bearer x",
            &text[..text.len() - 1],
            "engram_zz_zz",
        ] {
            assert_eq!(tokens.verify(bad).unwrap(), None, "{bad:?}");
        }
    }

    #[test]
    fn tokens_need_valid_users() {
        let (_dir, tokens) = store();
        let now = Timestamp::now();
        assert!(matches!(
            tokens.create(None, &[], now),
            Err(TokenError::Invalid(_))
        ));
        assert!(matches!(
            tokens.create(None, &users(&[" "]), now),
            Err(TokenError::Invalid(_))
        ));
        assert!(matches!(
            tokens.revoke("nope", now),
            Err(TokenError::NotFound(_))
        ));
    }

    #[test]
    fn listing_shows_use_and_revocation() {
        let (_dir, tokens) = store();
        let now = Timestamp::now();
        let (a, _) = tokens.create(Some("a"), &users(&["u"]), now).unwrap();
        let (b, _) = tokens.create(Some("b"), &users(&["v"]), now).unwrap();
        tokens.touch(&a.id, now).unwrap();
        tokens.revoke(&b.id, now).unwrap();
        let listed = tokens.list().unwrap();
        assert_eq!(listed.len(), 2);
        let a_row = listed.iter().find(|t| t.id == a.id).unwrap();
        assert!(a_row.last_used_at.is_some() && a_row.is_active());
        let b_row = listed.iter().find(|t| t.id == b.id).unwrap();
        assert!(!b_row.is_active());
    }

    #[test]
    fn memory_owners_outlive_deletion() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("engram.db");
        let memories = SqliteStore::open(&path).unwrap();
        let tokens = TokenStore::open(&path).unwrap();
        let added = memories
            .add(NewMemory::new(Scope::user("carol"), "likes tea"), "test")
            .unwrap();
        let engram_core::AddOutcome::Added(memory) = added else {
            panic!("expected a new memory");
        };
        memories.delete(memory.id, "test").unwrap();
        assert_eq!(
            tokens.memory_owner(memory.id).unwrap().as_deref(),
            Some("carol")
        );
        assert_eq!(tokens.memory_owner(MemoryId::new()).unwrap(), None);
    }

    #[test]
    fn the_data_version_moves_when_another_connection_commits() {
        let (dir, tokens) = store();
        let before = tokens.try_data_version().unwrap();
        assert_eq!(tokens.try_data_version(), Some(before));
        let other = TokenStore::open(dir.path().join("engram.db")).unwrap();
        let (token, _) = other
            .create(None, &users(&["u"]), Timestamp::now())
            .unwrap();
        let after_create = tokens.try_data_version().unwrap();
        assert_ne!(after_create, before);
        other.revoke(&token.id, Timestamp::now()).unwrap();
        assert_ne!(tokens.try_data_version().unwrap(), after_create);
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
