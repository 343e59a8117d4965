//! [`TokenStore`] on PostgreSQL: tokens created on one host work on every other; revoking one
//! is heard everywhere at once (the table's trigger notifies, see notify.rs).

use async_trait::async_trait;
use engram_core::store::tokens::{ApiToken, NewToken, TokenError, TokenStore, TokenWithHash};
use jiff::Timestamp;
use tokio_postgres::Row;

use crate::PgStore;
use crate::rows::{RawJson, check_storable, micros};

const TOKEN_COLUMNS: &str = "id, name, users::text, created_at, last_used_at, revoked_at";

impl PgStore {
    fn token_err(&self, e: tokio_postgres::Error) -> TokenError {
        TokenError::Store(self.err(e))
    }
}

#[async_trait]
impl TokenStore for PgStore {
    async fn insert(&self, token: NewToken) -> Result<bool, TokenError> {
        check_storable("the token's name", token.name.as_deref().unwrap_or(""))?;
        for user in &token.users {
            check_storable("a token's user", user)?;
        }
        let users = serde_json::to_string(&token.users)
            .map_err(|e| TokenError::Invalid(format!("cannot store the users: {e}")))?;
        let client = self.client().await?;
        let inserted = client
            .execute(
                "INSERT INTO api_tokens (id, name, users, token_hash, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
                &[
                    &token.id,
                    &token.name,
                    &RawJson(&users),
                    &token.token_hash,
                    &micros(engram_core::time::truncate_to_micros(token.created_at)),
                ],
            )
            .await
            .map_err(|e| self.token_err(e))?;
        Ok(inserted == 1)
    }

    async fn list(&self) -> Result<Vec<ApiToken>, TokenError> {
        let client = self.client().await?;
        client
            .query(
                &format!("SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, id"),
                &[],
            )
            .await
            .map_err(|e| self.token_err(e))?
            .iter()
            .map(token_from_row)
            .collect()
    }

    async fn active_count(&self) -> Result<u64, TokenError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL",
                &[],
            )
            .await
            .map_err(|e| self.token_err(e))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    async fn revoke(&self, id: &str, now: Timestamp) -> Result<ApiToken, TokenError> {
        let now = micros(engram_core::time::truncate_to_micros(now));
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.token_err(e))?;
        tx.execute(
            "UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
            &[&now, &id],
        )
        .await
        .map_err(|e| self.token_err(e))?;
        let row = tx
            .query_opt(
                &format!("SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(|e| self.token_err(e))?
            .ok_or_else(|| TokenError::NotFound(id.to_string()))?;
        tx.commit().await.map_err(|e| self.token_err(e))?;
        token_from_row(&row)
    }

    async fn find(&self, id: &str) -> Result<Option<TokenWithHash>, TokenError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {TOKEN_COLUMNS}, token_hash FROM api_tokens WHERE id = $1"
            ))
            .await
            .map_err(|e| self.token_err(e))?;
        match client
            .query_opt(&statement, &[&id])
            .await
            .map_err(|e| self.token_err(e))?
        {
            Some(row) => Ok(Some(TokenWithHash {
                token: token_from_row(&row)?,
                token_hash: row.get(6),
            })),
            None => Ok(None),
        }
    }

    async fn touch(&self, id: &str, now: Timestamp) -> Result<(), TokenError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE api_tokens SET last_used_at = $1 WHERE id = $2",
                &[&now.as_microsecond(), &id],
            )
            .await
            .map_err(|e| self.token_err(e))?;
        Ok(())
    }

    async fn change_version(&self) -> Result<i64, TokenError> {
        Ok(self
            .notices
            .tokens_version(self.options.connect_timeout)
            .await)
    }

    fn try_change_version(&self) -> Option<i64> {
        self.notices.try_tokens_version()
    }
}

fn token_from_row(row: &Row) -> Result<ApiToken, TokenError> {
    let id: String = row.get(0);
    let unreadable = |detail: String| TokenError::Unreadable {
        id: id.clone(),
        detail,
    };
    let time = |micros: i64| {
        Timestamp::from_microsecond(micros)
            .map_err(|e| unreadable(format!("bad time {micros}: {e}")))
    };
    let users: &str = row.get(2);
    let users: Vec<String> = serde_json::from_str(users)
        .map_err(|e| unreadable(format!("users are not a JSON list of names: {e}")))?;
    Ok(ApiToken {
        id: id.clone(),
        name: row.get(1),
        users,
        created_at: time(row.get(3))?,
        last_used_at: row.get::<_, Option<i64>>(4).map(time).transpose()?,
        revoked_at: row.get::<_, Option<i64>>(5).map(time).transpose()?,
    })
}
