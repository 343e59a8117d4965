//! [`ClaimStore`](engram_core::store::claims::ClaimStore): claims on ranges of a stream, seen
//! by every handle, granted once, finished, released, and lapsing after their lease.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use engram_core::StoreError;
use engram_core::store::claims::{ClaimOutcome, ClaimStore, ClaimTicket};
use jiff::SignedDuration;

use crate::{Engine, open};

const LEASE: Duration = Duration::from_secs(60);

async fn granted(
    store: &dyn ClaimStore,
    user: &str,
    stream: &str,
    wanted: Range<u64>,
) -> ClaimTicket {
    match store
        .claim(user, stream, wanted.clone(), LEASE)
        .await
        .unwrap()
    {
        ClaimOutcome::Granted(ticket) => ticket,
        other => panic!("{user}/{stream} {wanted:?}: granted expected, got {other:?}"),
    }
}

async fn outcome(
    store: &dyn ClaimStore,
    user: &str,
    stream: &str,
    wanted: Range<u64>,
) -> ClaimOutcome {
    store.claim(user, stream, wanted, LEASE).await.unwrap()
}

/// A claim gets what it asks for when nobody holds it; another handle asking for the same
/// positions meanwhile hears they are in progress, and gets the positions after them. Once
/// finished they are done for everyone; users and streams are apart; positions before the
/// start asked for count as done.
pub async fn a_claim_is_granted_once_and_done_for_every_handle(engine: &dyn Engine) {
    let (a, clock) = open(engine).await;
    let b = engine.open(clock).await;
    let (a, b) = (a.claims, b.claims);
    let first = granted(a.as_ref(), "u", "s", 0..4).await;
    assert_eq!(
        (
            first.user_id.as_str(),
            first.stream.as_str(),
            first.range.clone()
        ),
        ("u", "s", 0..4)
    );
    assert_eq!(
        outcome(b.as_ref(), "u", "s", 0..4).await,
        ClaimOutcome::InProgress
    );
    let second = granted(b.as_ref(), "u", "s", 0..6).await;
    assert_eq!(second.range, 4..6);
    assert_ne!(first.id, second.id);
    assert!(a.finish(&first).await.unwrap(), "the claim was held");
    // Some done, some in progress: in progress.
    assert_eq!(
        outcome(a.as_ref(), "u", "s", 0..6).await,
        ClaimOutcome::InProgress
    );
    assert!(b.finish(&second).await.unwrap());
    for store in [&a, &b] {
        assert_eq!(
            outcome(store.as_ref(), "u", "s", 0..6).await,
            ClaimOutcome::AlreadyDone
        );
        assert_eq!(
            outcome(store.as_ref(), "u", "s", 2..5).await,
            ClaimOutcome::AlreadyDone
        );
    }
    // Other users and other streams are apart.
    assert_eq!(granted(a.as_ref(), "v", "s", 0..6).await.range, 0..6);
    assert_eq!(granted(a.as_ref(), "u", "t", 0..6).await.range, 0..6);
    // What the caller knows done from before is not claimed; nothing asked, nothing granted.
    assert_eq!(granted(b.as_ref(), "w", "s", 5..7).await.range, 5..7);
    assert_eq!(
        outcome(b.as_ref(), "w", "s", 3..3).await,
        ClaimOutcome::AlreadyDone
    );
    // The start is the caller's word for that call only: it is not stored.
    assert_eq!(granted(b.as_ref(), "w", "s", 3..9).await.range, 3..5);
}

/// A claim reaching past what is done or held gets only the part nobody holds; a claim
/// inside what is held gets nothing.
pub async fn a_claim_overlapping_others_gets_only_the_free_part(engine: &dyn Engine) {
    let claims = open(engine).await.0.claims;
    let done = granted(claims.as_ref(), "u", "s", 0..4).await;
    claims.finish(&done).await.unwrap();
    let held = granted(claims.as_ref(), "u", "s", 6..8).await;
    assert_eq!(held.range, 6..8);
    // 4..6 is free, 6..8 held: the free stretch up to the held one.
    assert_eq!(granted(claims.as_ref(), "u", "s", 2..10).await.range, 4..6);
    // Then what lies past the held one.
    assert_eq!(granted(claims.as_ref(), "u", "s", 2..10).await.range, 8..10);
    assert_eq!(
        outcome(claims.as_ref(), "u", "s", 1..10).await,
        ClaimOutcome::InProgress
    );
    assert_eq!(
        outcome(claims.as_ref(), "u", "s", 1..3).await,
        ClaimOutcome::AlreadyDone
    );
}

/// A released claim's positions can be claimed again at once, by any handle, even when a
/// later claim is still held; finishing twice changes nothing, and releasing a finished claim
/// does not undo it.
pub async fn a_released_claim_can_be_claimed_again(engine: &dyn Engine) {
    let (a, clock) = open(engine).await;
    let b = engine.open(clock).await;
    let (a, b) = (a.claims, b.claims);
    let failed = granted(a.as_ref(), "u", "s", 0..4).await;
    let later = granted(b.as_ref(), "u", "s", 0..6).await;
    assert_eq!(later.range, 4..6);
    a.release(&failed).await.unwrap();
    let again = granted(b.as_ref(), "u", "s", 0..9).await;
    assert_eq!(again.range, 0..4, "the hole is claimed first");
    assert_eq!(granted(b.as_ref(), "u", "s", 0..9).await.range, 6..9);

    b.finish(&again).await.unwrap();
    assert!(b.finish(&again).await.unwrap(), "finishing twice");
    a.release(&again).await.unwrap();
    a.release(&failed).await.unwrap();
    let done_first = outcome(a.as_ref(), "u", "s", 0..4).await;
    assert_eq!(done_first, ClaimOutcome::AlreadyDone);
}

/// A claim neither finished nor released lapses when its lease runs out: another handle then
/// gets its positions. Finishing the lapsed claim afterwards says it was no longer held and
/// still records its positions done.
pub async fn an_abandoned_claim_lapses_after_its_lease(engine: &dyn Engine) {
    let (a, clock) = open(engine).await;
    let b = engine.open(clock.clone()).await;
    let (a, b) = (a.claims, b.claims);
    let short = a
        .claim("u", "s", 0..4, Duration::from_secs(10))
        .await
        .unwrap();
    let ClaimOutcome::Granted(abandoned) = short else {
        panic!("{short:?}")
    };
    clock.advance(SignedDuration::from_secs(9));
    assert_eq!(
        outcome(b.as_ref(), "u", "s", 0..4).await,
        ClaimOutcome::InProgress
    );
    clock.advance(SignedDuration::from_secs(1));
    let taken = granted(b.as_ref(), "u", "s", 0..4).await;
    assert_eq!(taken.range, 0..4);
    assert_ne!(taken.id, abandoned.id);
    assert!(
        !a.finish(&abandoned).await.unwrap(),
        "a lapsed claim is no longer held"
    );
    assert!(b.finish(&taken).await.unwrap());
    assert_eq!(
        outcome(a.as_ref(), "u", "s", 0..4).await,
        ClaimOutcome::AlreadyDone
    );
    // A finished claim never lapses.
    clock.advance(SignedDuration::from_hours(24 * 365));
    assert_eq!(
        outcome(b.as_ref(), "u", "s", 0..4).await,
        ClaimOutcome::AlreadyDone
    );
    // The longest lease does not overflow.
    assert!(matches!(
        a.claim("u", "s", 0..8, Duration::MAX).await.unwrap(),
        ClaimOutcome::Granted(_)
    ));
}

/// Positions beyond what the engines store are refused, not wrapped.
pub async fn positions_past_the_stored_range_are_refused(engine: &dyn Engine) {
    let claims = open(engine).await.0.claims;
    let huge = u64::MAX - 1;
    assert!(matches!(
        claims.claim("u", "s", 0..huge, LEASE).await,
        Err(StoreError::BadQuery(_))
    ));
    let edge = i64::MAX as u64;
    assert_eq!(
        granted(claims.as_ref(), "u", "s", edge - 2..edge)
            .await
            .range,
        edge - 2..edge
    );
}

/// Many handles (processes, hosts), each with several tasks, claiming the same positions at the
/// same moment: exactly one is granted them, every other hears they are in progress.
pub async fn many_claimants_at_once_get_one_grant(engine: &dyn Engine) {
    let (first, clock) = open(engine).await;
    let mut handles: Vec<Arc<dyn ClaimStore>> = vec![first.claims];
    for _ in 0..3 {
        handles.push(engine.open(clock.clone()).await.claims);
    }
    for round in 0..5 {
        let stream = format!("s{round}");
        let barrier = Arc::new(tokio::sync::Barrier::new(handles.len() * 4));
        let mut tasks = Vec::new();
        for handle in &handles {
            for _ in 0..4 {
                let (handle, stream, barrier) = (handle.clone(), stream.clone(), barrier.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    handle.claim("u", &stream, 0..10, LEASE).await.unwrap()
                }));
            }
        }
        let mut grants = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                ClaimOutcome::Granted(ticket) => grants.push(ticket),
                ClaimOutcome::InProgress => {}
                ClaimOutcome::AlreadyDone => panic!("round {round}: nothing was finished"),
            }
        }
        assert_eq!(grants.len(), 1, "round {round}: {grants:?}");
        assert_eq!(grants[0].range, 0..10);
    }
}
