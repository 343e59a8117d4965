//! Claims on ranges of a stream, so that two processes (on one machine or on several sharing
//! one database) never do the same work twice at once, and work once done is not done again.
//!
//! A *stream* is a sequence of positions `0, 1, 2, ...` of one user, named by a string; what
//! it stands for is the caller's business (the memory manager claims the messages of a session
//! log, or one batch of messages, before extracting them). A process claims the positions
//! `start..end` it wants and gets the first stretch of them that no live claim covers, or learns
//! that every one of them is done, or that some are being worked on elsewhere right now. It
//! then [`ClaimStore::finish`]es the claim (its positions are done for good) or
//! [`ClaimStore::release`]s it (they may be claimed again). A claim neither finished nor
//! released, because its process died, lapses when its lease runs out.
//!
//! Live claims are the done ones and the unfinished ones whose lease has not run out. A claim
//! is decided in one transaction that sees every other claim of the same user and stream and
//! excludes every other claimant of them (each engine says how), so of many processes asking
//! for the same positions at once exactly one gets them. The engines share the decision itself
//! ([`plan_claim`]), so they grant the same ranges.
//!
//! Times are the store's clock (what it stamps memories with): a lease is about processes that
//! die, so it runs in real time, not in the time of the conversation being extracted.

use std::ops::Range;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

use super::StoreError;

/// A granted claim: the positions `range` of `stream` are the holder's to work on, until it
/// finishes or releases the claim, or the lease runs out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimTicket {
    /// The claim's id (unique in the store).
    pub id: String,
    /// Whose stream.
    pub user_id: String,
    /// Which stream.
    pub stream: String,
    /// The positions granted (never empty).
    pub range: Range<u64>,
}

/// What a claim got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// These positions are yours to work on.
    Granted(ClaimTicket),
    /// Every position asked for is done.
    AlreadyDone,
    /// Every position asked for is done or claimed by another live claim, and some are not
    /// done yet: another process is working on them now.
    InProgress,
}

/// A finished claim as a copy between engines carries it (claims still being worked on are
/// transient and are not copied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoneClaim {
    /// The claim's id.
    pub id: String,
    /// Whose stream.
    pub user_id: String,
    /// Which stream.
    pub stream: String,
    /// The positions that are done.
    pub range: Range<u64>,
    /// When it was claimed.
    pub claimed_at: Timestamp,
    /// When it was finished.
    pub finished_at: Timestamp,
}

/// Claims on ranges of streams.
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// Claims the positions `wanted` of (`user_id`, `stream`) for `lease` from now. Positions
    /// before `wanted.start` are taken as done (the caller knows them done from before). Gets
    /// the first stretch of `wanted` that no live claim covers ([`plan_claim`]); expired
    /// unfinished claims of the stream are dropped on the way. An empty `wanted` is
    /// [`ClaimOutcome::AlreadyDone`]. A position beyond `i64::MAX` is refused
    /// ([`StoreError::BadQuery`]).
    async fn claim(
        &self,
        user_id: &str,
        stream: &str,
        wanted: Range<u64>,
        lease: Duration,
    ) -> Result<ClaimOutcome, StoreError>;

    /// Marks the claim's positions done for good. `true` when the claim was still held;
    /// `false` when it had lapsed and been dropped (another process may have claimed the same
    /// positions since): its positions are recorded done all the same.
    async fn finish(&self, ticket: &ClaimTicket) -> Result<bool, StoreError>;

    /// Gives an unfinished claim up: its positions may be claimed again at once. Releasing a
    /// claim that is finished, lapsed or unknown changes nothing.
    async fn release(&self, ticket: &ClaimTicket) -> Result<(), StoreError>;
}

/// A live claim as [`plan_claim`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRange {
    /// Its positions.
    pub range: Range<u64>,
    /// Finished (else still being worked on).
    pub done: bool,
}

/// What a claim for some positions gets, given the live claims of its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimPlan {
    /// Grant these positions (never empty).
    Grant(Range<u64>),
    /// Every position is done.
    AlreadyDone,
    /// Every position is covered, some not done yet.
    InProgress,
}

/// The decision every engine makes for [`ClaimStore::claim`]: the first stretch of `wanted`
/// (positions before `wanted.start` count as done) that no range of `live` covers, up to the
/// next live range or the end of `wanted`; or, when `live` covers all of it, whether it is all
/// done.
pub fn plan_claim(live: &[HeldRange], wanted: Range<u64>) -> ClaimPlan {
    // Where coverage from `wanted.start` stops: the first position no range covers.
    let frontier = |only_done: bool| {
        let mut ranges: Vec<&Range<u64>> = live
            .iter()
            .filter(|h| h.done || !only_done)
            .map(|h| &h.range)
            .filter(|r| r.end > wanted.start && r.start < r.end)
            .collect();
        ranges.sort_by_key(|r| r.start);
        let mut at = wanted.start;
        let mut next_start = None;
        for r in ranges {
            if r.start <= at {
                at = at.max(r.end);
            } else {
                next_start = Some(r.start);
                break;
            }
        }
        (at, next_start)
    };
    let (gap, next) = frontier(false);
    if gap >= wanted.end {
        return if frontier(true).0 >= wanted.end {
            ClaimPlan::AlreadyDone
        } else {
            ClaimPlan::InProgress
        };
    }
    ClaimPlan::Grant(gap..next.map_or(wanted.end, |n| n.min(wanted.end)))
}

/// `range` as the signed 64-bit positions the engines store; a position beyond `i64::MAX`
/// is refused.
pub fn stored_range(range: &Range<u64>) -> Result<Range<i64>, StoreError> {
    let position = |p: u64| {
        i64::try_from(p).map_err(|_| {
            StoreError::BadQuery(format!("a claim position must be at most {}", i64::MAX))
        })
    };
    Ok(position(range.start)?..position(range.end)?)
}

/// A stored range back as positions (a negative one, which no engine writes, as 0).
pub fn loaded_range(start: i64, end: i64) -> Range<u64> {
    let position = |p: i64| u64::try_from(p).unwrap_or(0);
    position(start)..position(end)
}

/// When a lease of `lease` taken at `now` runs out, in microseconds since the Unix epoch (as
/// the engines store times).
pub fn lease_end_micros(now: Timestamp, lease: Duration) -> i64 {
    let lease = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX);
    now.as_microsecond().saturating_add(lease)
}

/// A fresh claim id.
pub fn new_claim_id() -> String {
    crate::MemoryId::new().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn held(start: u64, end: u64, done: bool) -> HeldRange {
        HeldRange {
            range: start..end,
            done,
        }
    }

    #[test]
    fn claims_grant_the_first_uncovered_stretch() {
        assert_eq!(plan_claim(&[], 0..4), ClaimPlan::Grant(0..4));
        assert_eq!(plan_claim(&[], 3..3), ClaimPlan::AlreadyDone);
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 5..3;
        assert_eq!(plan_claim(&[], backwards), ClaimPlan::AlreadyDone);
        // After what is done or taken.
        assert_eq!(
            plan_claim(&[held(0, 4, true)], 0..6),
            ClaimPlan::Grant(4..6)
        );
        assert_eq!(
            plan_claim(&[held(0, 4, false)], 0..4),
            ClaimPlan::InProgress
        );
        assert_eq!(
            plan_claim(&[held(0, 4, true)], 0..4),
            ClaimPlan::AlreadyDone
        );
        assert_eq!(
            plan_claim(&[held(0, 4, true), held(4, 6, false)], 0..6),
            ClaimPlan::InProgress
        );
        // A hole left by a released claim is filled first, up to the next live claim.
        assert_eq!(
            plan_claim(&[held(4, 6, false)], 0..9),
            ClaimPlan::Grant(0..4)
        );
        assert_eq!(
            plan_claim(&[held(0, 2, true), held(4, 6, true)], 0..9),
            ClaimPlan::Grant(2..4)
        );
        // The caller's own floor counts as done.
        assert_eq!(
            plan_claim(&[held(0, 2, false)], 5..7),
            ClaimPlan::Grant(5..7)
        );
        assert_eq!(
            plan_claim(&[held(3, 8, true)], 5..7),
            ClaimPlan::AlreadyDone
        );
    }

    proptest! {
        /// A grant lies inside what was asked, overlaps no live claim and starts at the first
        /// position nobody holds; otherwise every position asked for is held, and "done" means
        /// held by finished claims alone.
        #[test]
        fn a_grant_is_the_first_free_stretch(
            claims in proptest::collection::vec((0u64..30, 0u64..8, any::<bool>()), 0..8),
            start in 0u64..30,
            len in 0u64..30,
        ) {
            let live: Vec<HeldRange> =
                claims.iter().map(|&(s, l, done)| held(s, s + l, done)).collect();
            let wanted = start..start + len;
            let covered = |p: u64, only_done: bool| {
                live.iter().any(|h| (h.done || !only_done) && h.range.contains(&p))
            };
            match plan_claim(&live, wanted.clone()) {
                ClaimPlan::Grant(range) => {
                    prop_assert!(range.start < range.end);
                    prop_assert!(wanted.start <= range.start && range.end <= wanted.end);
                    for p in range.clone() {
                        prop_assert!(!covered(p, false), "{p} is held");
                    }
                    for p in wanted.start..range.start {
                        prop_assert!(covered(p, false), "{p} is free before the grant");
                    }
                    prop_assert!(range.end == wanted.end || covered(range.end, false));
                }
                ClaimPlan::AlreadyDone => {
                    prop_assert!(wanted.clone().all(|p| covered(p, true)));
                }
                ClaimPlan::InProgress => {
                    prop_assert!(wanted.clone().all(|p| covered(p, false)));
                    prop_assert!(!wanted.clone().all(|p| covered(p, true)));
                }
            }
        }
    }
}
