//! Claims on ranges of a stream (see [`engram_core::store::claims`]) in the same SQLite file as
//! the memories, so every process of the machine sees them.
//!
//! A claim is decided in an immediate transaction on the database's one writer: SQLite lets one
//! writer at a time into the file, so two processes (or two handles) claiming at once queue, and
//! the second sees what the first wrote.

use std::ops::Range;
use std::time::Duration;

use engram_core::StoreError;
use engram_core::store::claims::{
    ClaimOutcome, ClaimPlan, ClaimTicket, HeldRange, lease_end_micros, loaded_range, new_claim_id,
    plan_claim, stored_range,
};
use rusqlite::{OptionalExtension, params};

use crate::store::Database;

/// The claims of one database.
#[derive(Debug, Clone, Copy)]
pub struct Claims<'a> {
    db: &'a Database,
}

impl Database {
    /// The claims on ranges of streams.
    pub fn claims(&self) -> Claims<'_> {
        Claims { db: self }
    }
}

impl Claims<'_> {
    /// See [`engram_core::store::claims::ClaimStore::claim`].
    pub fn claim(
        &self,
        user_id: &str,
        stream: &str,
        wanted: Range<u64>,
        lease: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        let stored = stored_range(&wanted)?;
        if wanted.is_empty() {
            return Ok(ClaimOutcome::AlreadyDone);
        }
        let now = self.db.now();
        let err = |e: rusqlite::Error| self.db.err(e);
        self.db.transaction(|tx| {
            tx.prepare_cached(
                "DELETE FROM claims WHERE user_id = ?1 AND stream = ?2 \
                 AND finished_at IS NULL AND expires_at <= ?3",
            )
            .and_then(|mut stmt| stmt.execute(params![user_id, stream, now.as_microsecond()]))
            .map_err(err)?;
            let live = tx
                .prepare_cached(
                    "SELECT range_start, range_end, finished_at IS NOT NULL FROM claims \
                     WHERE user_id = ?1 AND stream = ?2 AND range_end > ?3",
                )
                .and_then(|mut stmt| {
                    stmt.query_map(params![user_id, stream, stored.start], |row| {
                        Ok(HeldRange {
                            range: loaded_range(row.get(0)?, row.get(1)?),
                            done: row.get(2)?,
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(err)?;
            let range = match plan_claim(&live, wanted) {
                ClaimPlan::Grant(range) => range,
                ClaimPlan::AlreadyDone => return Ok(ClaimOutcome::AlreadyDone),
                ClaimPlan::InProgress => return Ok(ClaimOutcome::InProgress),
            };
            let ticket = ClaimTicket {
                id: new_claim_id(),
                user_id: user_id.to_string(),
                stream: stream.to_string(),
                range,
            };
            let positions = stored_range(&ticket.range)?;
            tx.prepare_cached(
                "INSERT INTO claims (id, user_id, stream, range_start, range_end, claimed_at, \
                 expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    ticket.id,
                    user_id,
                    stream,
                    positions.start,
                    positions.end,
                    now.as_microsecond(),
                    lease_end_micros(now, lease)
                ])
            })
            .map_err(err)?;
            Ok(ClaimOutcome::Granted(ticket))
        })
    }

    /// See [`engram_core::store::claims::ClaimStore::finish`].
    pub fn finish(&self, ticket: &ClaimTicket) -> Result<bool, StoreError> {
        let positions = stored_range(&ticket.range)?;
        let now = self.db.now().as_microsecond();
        let err = |e: rusqlite::Error| self.db.err(e);
        self.db.transaction(|tx| {
            let found: Option<bool> = tx
                .query_row(
                    "SELECT finished_at IS NOT NULL FROM claims WHERE id = ?1",
                    [&ticket.id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(err)?;
            match found {
                Some(true) => Ok(true),
                Some(false) => {
                    tx.execute(
                        "UPDATE claims SET finished_at = ?1, expires_at = NULL WHERE id = ?2",
                        params![now, ticket.id],
                    )
                    .map_err(err)?;
                    Ok(true)
                }
                None => {
                    tx.execute(
                        "INSERT INTO claims (id, user_id, stream, range_start, range_end, \
                         claimed_at, finished_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                        params![
                            ticket.id,
                            ticket.user_id,
                            ticket.stream,
                            positions.start,
                            positions.end,
                            now
                        ],
                    )
                    .map_err(err)?;
                    Ok(false)
                }
            }
        })
    }

    /// See [`engram_core::store::claims::ClaimStore::release`].
    pub fn release(&self, ticket: &ClaimTicket) -> Result<(), StoreError> {
        self.db.write_one(|conn| {
            conn.execute(
                "DELETE FROM claims WHERE id = ?1 AND finished_at IS NULL",
                [&ticket.id],
            )
            .map_err(|e| self.db.err(e))
        })?;
        Ok(())
    }
}
