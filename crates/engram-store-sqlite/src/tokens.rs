//! API tokens for `engram serve`, in the same SQLite file as the memories: the id, the users
//! a token may touch and the SHA-256 of its text (see [`engram_core::store::tokens`]). Making
//! and checking tokens is engram-server's business.

use engram_core::store::tokens::{ApiToken, NewToken, TokenError, TokenWithHash};
use jiff::Timestamp;
use rusqlite::{OptionalExtension, Row, params};

use crate::store::Database;

/// The API tokens of one database.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    db: &'a Database,
}

impl Database {
    /// The API tokens.
    pub fn tokens(&self) -> Tokens<'_> {
        Tokens { db: self }
    }
}

const TOKEN_COLUMNS: &str = "id, name, users, created_at, last_used_at, revoked_at";

impl Tokens<'_> {
    fn err(&self, e: rusqlite::Error) -> TokenError {
        TokenError::Store(self.db.err(e))
    }

    /// See [`engram_core::store::tokens::TokenStore::insert`].
    pub fn insert(&self, token: &NewToken) -> Result<bool, TokenError> {
        let users = serde_json::to_string(&token.users)
            .map_err(|e| TokenError::Invalid(format!("cannot store the users: {e}")))?;
        let created_at = engram_core::time::truncate_to_micros(token.created_at);
        let inserted = self.db.write_one(|conn| {
            conn.execute(
                "INSERT OR IGNORE INTO api_tokens (id, name, users, token_hash, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    token.id,
                    token.name,
                    users,
                    token.token_hash,
                    created_at.as_microsecond()
                ],
            )
            .map_err(|e| self.err(e))
        })?;
        Ok(inserted == 1)
    }

    /// Every token, revoked ones included, oldest first.
    pub fn list(&self) -> Result<Vec<ApiToken>, TokenError> {
        let rows = self.db.reading(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, id"
            ))
            .and_then(|mut stmt| stmt.query_map([], read_row)?.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))
        })?;
        rows.into_iter().map(RawToken::into_token).collect()
    }

    /// How many tokens are not revoked.
    pub fn active_count(&self) -> Result<u64, TokenError> {
        self.db.reading(|conn| {
            conn.query_row(
                "SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n.max(0) as u64)
            .map_err(|e| self.err(e))
        })
    }

    /// Revokes a token: from now on it is refused. Revoking twice is not an error.
    pub fn revoke(&self, id: &str, now: Timestamp) -> Result<ApiToken, TokenError> {
        let now = engram_core::time::truncate_to_micros(now);
        let raw = self.db.transaction(|tx| {
            tx.execute(
                "UPDATE api_tokens SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
                params![now.as_microsecond(), id],
            )
            .map_err(|e| self.err(e))?;
            tx.query_row(
                &format!("SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = ?1"),
                [id],
                read_row,
            )
            .optional()
            .map_err(|e| self.err(e))?
            .ok_or_else(|| TokenError::NotFound(id.to_string()))
        })?;
        raw.into_token()
    }

    /// The token with this id, revoked or not, with its hash.
    pub fn find(&self, id: &str) -> Result<Option<TokenWithHash>, TokenError> {
        let found = self.db.reading(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {TOKEN_COLUMNS}, token_hash FROM api_tokens WHERE id = ?1"
            ))
            .and_then(|mut stmt| {
                stmt.query_row([id], |row| Ok((read_row(row)?, row.get::<_, String>(6)?)))
                    .optional()
            })
            .map_err(|e| self.err(e))
        })?;
        found
            .map(|(raw, token_hash)| {
                Ok(TokenWithHash {
                    token: raw.into_token()?,
                    token_hash,
                })
            })
            .transpose()
    }

    /// Records that a token was just accepted.
    pub fn touch(&self, id: &str, now: Timestamp) -> Result<(), TokenError> {
        self.db.write_one(|conn| {
            conn.execute(
                "UPDATE api_tokens SET last_used_at = ?1 WHERE id = ?2",
                params![now.as_microsecond(), id],
            )
            .map_err(|e| self.err(e))
        })?;
        Ok(())
    }
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
    use tempfile::TempDir;

    fn store() -> (TempDir, Database) {
        let dir = TempDir::new().unwrap();
        let db = Database::open(dir.path().join("engram.db")).unwrap();
        (dir, db)
    }

    fn token(id: &str, users: &[&str]) -> NewToken {
        NewToken {
            id: id.to_string(),
            name: Some(format!("token {id}")),
            users: users.iter().map(|s| s.to_string()).collect(),
            token_hash: format!("{id:0>64}"),
            created_at: Timestamp::now(),
        }
    }

    #[test]
    fn token_changes_by_another_handle_move_the_data_version() {
        let (dir, db) = store();
        let before = db.try_data_version().unwrap();
        let other = Database::open(dir.path().join("engram.db")).unwrap();
        other.tokens().insert(&token("t", &["u"])).unwrap();
        let after_create = db.try_data_version().unwrap();
        assert_ne!(after_create, before);
        other.tokens().revoke("t", Timestamp::now()).unwrap();
        assert_ne!(db.try_data_version().unwrap(), after_create);
    }
}
