//! [`ClaimStore`] on PostgreSQL: claims on ranges of a stream shared by every process on every
//! host, so two machines never extract the same messages.
//!
//! A claim is one transaction that first takes a transaction-level advisory lock on the
//! (user, stream) pair: every claimant of the pair queues behind it, and the statements after
//! the lock (in READ COMMITTED, each sees what committed before it began) see every claim the
//! previous holder wrote. A lock rather than SERIALIZABLE because the claimant would otherwise
//! have to retry on serialization failures; a lock rather than a row lock because the first
//! claim of a stream has no row to lock. Two pairs whose hashes collide merely queue.

use std::ops::Range;
use std::time::Duration;

use async_trait::async_trait;
use engram_core::StoreError;
use engram_core::store::claims::{
    ClaimOutcome, ClaimPlan, ClaimStore, ClaimTicket, HeldRange, lease_end_micros, loaded_range,
    new_claim_id, plan_claim, stored_range,
};

use crate::PgStore;
use crate::rows::check_storable;

#[async_trait]
impl ClaimStore for PgStore {
    async fn claim(
        &self,
        user_id: &str,
        stream: &str,
        wanted: Range<u64>,
        lease: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        check_storable("a claim's user", user_id)?;
        check_storable("a claim's stream", stream)?;
        let stored = stored_range(&wanted)?;
        if wanted.is_empty() {
            return Ok(ClaimOutcome::AlreadyDone);
        }
        let started = self.now();
        let now = started.as_microsecond();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.err(e))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('claim/' || $1 || '/' || $2, 0))",
            &[&user_id, &stream],
        )
        .await
        .map_err(|e| self.err(e))?;
        tx.execute(
            "DELETE FROM claims WHERE user_id = $1 AND stream = $2 \
             AND finished_at IS NULL AND expires_at <= $3",
            &[&user_id, &stream, &now],
        )
        .await
        .map_err(|e| self.err(e))?;
        let live: Vec<HeldRange> = tx
            .query(
                "SELECT range_start, range_end, finished_at IS NOT NULL FROM claims \
                 WHERE user_id = $1 AND stream = $2 AND range_end > $3",
                &[&user_id, &stream, &stored.start],
            )
            .await
            .map_err(|e| self.err(e))?
            .iter()
            .map(|row| HeldRange {
                range: loaded_range(row.get(0), row.get(1)),
                done: row.get(2),
            })
            .collect();
        let range = match plan_claim(&live, wanted) {
            ClaimPlan::Grant(range) => range,
            // Nothing written: dropping the transaction rolls it back (and frees the lock).
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
        tx.execute(
            "INSERT INTO claims (id, user_id, stream, range_start, range_end, claimed_at, \
             expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &ticket.id,
                &user_id,
                &stream,
                &positions.start,
                &positions.end,
                &now,
                &lease_end_micros(started, lease),
            ],
        )
        .await
        .map_err(|e| self.err(e))?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(ClaimOutcome::Granted(ticket))
    }

    async fn finish(&self, ticket: &ClaimTicket) -> Result<bool, StoreError> {
        check_storable("a claim's user", &ticket.user_id)?;
        check_storable("a claim's stream", &ticket.stream)?;
        let positions = stored_range(&ticket.range)?;
        let now = self.now().as_microsecond();
        let client = self.client().await?;
        // Held: mark it done (again, if it was: nothing changes). Lapsed and dropped: record
        // it done all the same. One statement either way.
        let row = client
            .query_one(
                "WITH held AS ( \
                     UPDATE claims SET finished_at = coalesce(finished_at, $6), \
                     expires_at = NULL WHERE id = $1 RETURNING 1), \
                 lapsed AS ( \
                     INSERT INTO claims (id, user_id, stream, range_start, range_end, \
                     claimed_at, finished_at) SELECT $1, $2, $3, $4, $5, $6, $6 \
                     WHERE NOT EXISTS (SELECT 1 FROM held) \
                     ON CONFLICT (id) DO NOTHING RETURNING 1) \
                 SELECT EXISTS (SELECT 1 FROM held)",
                &[
                    &ticket.id,
                    &ticket.user_id,
                    &ticket.stream,
                    &positions.start,
                    &positions.end,
                    &now,
                ],
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(row.get(0))
    }

    async fn release(&self, ticket: &ClaimTicket) -> Result<(), StoreError> {
        check_storable("a claim's id", &ticket.id)?;
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM claims WHERE id = $1 AND finished_at IS NULL",
                &[&ticket.id],
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}
