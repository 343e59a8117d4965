//! [`SessionLogStore`] on PostgreSQL: the agent's session logs as rows, one per line, so that a
//! conversation goes on on whichever machine the next turn arrives at.
//!
//! An append is one transaction that first takes a transaction-level advisory lock on the log
//! (two writers queue, and their batches never interleave) and numbers its lines after the last
//! one. A line is never torn: a crash rolls the whole batch back.

use async_trait::async_trait;
use engram_core::store::sessions::{LogKind, SessionLogError, SessionLogStore, StoredLog};

use crate::PgStore;
use crate::rows::check_storable;

fn log_number(log: LogKind) -> i16 {
    match log {
        LogKind::Session => 0,
        LogKind::Archive => 1,
    }
}

impl PgStore {
    fn session_err(&self, e: tokio_postgres::Error) -> SessionLogError {
        SessionLogError::Store(self.err(e))
    }
}

#[async_trait]
impl SessionLogStore for PgStore {
    async fn append(
        &self,
        key: &str,
        log: LogKind,
        first: Option<String>,
        lines: Vec<String>,
    ) -> Result<(), SessionLogError> {
        check_storable("a session key", key)?;
        for line in first.iter().chain(&lines) {
            check_storable("a session record", line)?;
        }
        let number = log_number(log);
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| self.session_err(e))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))",
            &[&key, &number.to_string()],
        )
        .await
        .map_err(|e| self.session_err(e))?;
        let last: Option<i32> = tx
            .query_one(
                "SELECT max(seq) FROM session_lines WHERE key = $1 AND log = $2",
                &[&key, &number],
            )
            .await
            .map_err(|e| self.session_err(e))?
            .get(0);
        let mut all: Vec<String> = Vec::with_capacity(lines.len() + 1);
        if last.is_none()
            && let Some(first) = first
        {
            all.push(first);
        }
        all.extend(lines);
        if !all.is_empty() {
            let start = last.unwrap_or(0);
            tx.execute(
                "INSERT INTO session_lines (key, log, seq, line) \
                 SELECT $1, $2, $3 + n::integer, line \
                 FROM unnest($4::text[]) WITH ORDINALITY AS l(line, n)",
                &[&key, &number, &start, &all],
            )
            .await
            .map_err(|e| self.session_err(e))?;
        }
        tx.commit().await.map_err(|e| self.session_err(e))
    }

    async fn read(&self, key: &str, log: LogKind) -> Result<Option<StoredLog>, SessionLogError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT line FROM session_lines WHERE key = $1 AND log = $2 ORDER BY seq",
                &[&key, &log_number(log)],
            )
            .await
            .map_err(|e| self.session_err(e))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut text = String::new();
        for row in &rows {
            text.push_str(row.get::<_, &str>(0));
            text.push('\n');
        }
        let bytes = text.len() as u64;
        Ok(Some(StoredLog { text, bytes }))
    }

    async fn keys(&self) -> Result<Vec<String>, SessionLogError> {
        let client = self.client().await?;
        Ok(client
            .query("SELECT DISTINCT key FROM session_lines WHERE log = 0", &[])
            .await
            .map_err(|e| self.session_err(e))?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    async fn delete(&self, key: &str) -> Result<bool, SessionLogError> {
        let client = self.client().await?;
        let removed = client
            .execute("DELETE FROM session_lines WHERE key = $1", &[&key])
            .await
            .map_err(|e| self.session_err(e))?;
        Ok(removed > 0)
    }

    fn location(&self, key: &str, log: LogKind) -> String {
        let what = match log {
            LogKind::Session => "session",
            LogKind::Archive => "the archive of session",
        };
        format!("{what} {key} in {}", self.location)
    }
}
