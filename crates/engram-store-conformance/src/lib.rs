//! The storage conformance suite: one set of checks of engram-core's storage traits
//! ([`MemoryStore`](engram_core::MemoryStore), [`JobStore`](engram_core::store::jobs::JobStore),
//! [`TokenStore`](engram_core::store::tokens::TokenStore),
//! [`GraphStore`](engram_core::store::graph::GraphStore),
//! [`ClaimStore`](engram_core::store::claims::ClaimStore) and
//! [`SessionLogStore`](engram_core::store::sessions::SessionLogStore)), written once and run by
//! every engine's tests against a fresh store of that engine.
//!
//! The checks state the contracts the traits document, through the traits only: what an
//! engine does inside (its SQL, its caches, its files) is its own tests' business. An engine
//! takes part by implementing [`Engine`] (open a fresh, empty store; open it again as another
//! process would) and expanding [`conformance_tests!`] in a test file, which turns every check
//! into a `#[tokio::test]`:
//!
//! ```ignore
//! // crates/engram-store-sqlite/tests/conformance.rs
//! engram_store_conformance::conformance_tests!(SqliteEngine::new());
//! ```
//!
//! Engines that hold session logs (a shared engine) also expand
//! [`session_log_conformance_tests!`] with a [`SessionEngine`].
//!
//! A failing check is a bug in the engine, or a contract the traits do not state precisely
//! enough: fix the engine, or make the trait's documentation and the check say exactly what
//! every engine must do.

// A test library: a failed assertion (a panic) is how a check reports.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use engram_core::store::sessions::SessionLogStore;
use engram_core::{Backend, Clock, FixedClock};
use jiff::Timestamp;

pub mod claims;
pub mod graph;
pub mod jobs;
pub mod memories;
pub mod sessions;
pub mod tokens;
pub mod vectors;

/// An engine under test: one fresh, empty store of its own (a new file, a new database),
/// dropped with this value.
#[async_trait]
pub trait Engine: Send + Sync {
    /// Opens the store. Every call is another handle on the same data, with connections of its
    /// own (what another process, or another host, would have); changes it makes are stamped
    /// by `clock`.
    async fn open(&self, clock: Arc<dyn Clock>) -> Backend;
}

/// An engine that holds session logs, under test: a fresh, empty place for them.
#[async_trait]
pub trait SessionEngine: Send + Sync {
    /// Opens the session logs. Every call is another handle on the same logs.
    async fn open(&self) -> Arc<dyn SessionLogStore>;
}

/// The time a check's clock starts at.
pub fn start_time() -> Timestamp {
    t("2024-06-01T12:00:00Z")
}

/// A timestamp from its RFC 3339 spelling.
pub fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// A store opened on `engine` with a clock of its own standing at [`start_time`].
pub async fn open(engine: &dyn Engine) -> (Backend, Arc<FixedClock>) {
    let clock = Arc::new(FixedClock::new(start_time()));
    (engine.open(clock.clone()).await, clock)
}

/// Waits until `probe` holds, for at most `limit` (then fails naming `what`).
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if probe().await {
            return;
        }
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Expands every check of the suite into a `#[tokio::test]` that runs it against a fresh store
/// made by `$engine` (an expression giving a future of an [`Engine`]; it is evaluated once per
/// test). The test crate needs tokio with its `macros` and `rt-multi-thread` features.
#[macro_export]
macro_rules! conformance_tests {
    ($engine:expr) => {
        $crate::conformance_tests!(@each $engine;
            memories::a_memory_round_trips_with_every_field,
            memories::the_same_text_in_the_same_scope_is_stored_once,
            memories::add_many_reports_each_item_and_keeps_the_good_ones,
            memories::every_change_leaves_a_history_row,
            memories::an_update_may_not_duplicate_another_memory,
            memories::the_owner_outlives_deletion,
            memories::closed_and_expired_memories_are_hidden_unless_asked_for,
            memories::filters_narrow_search_and_list,
            memories::filters_apply_before_the_limit,
            memories::search_is_confined_to_one_user,
            memories::queries_without_words_are_refused,
            memories::words_match_across_case_punctuation_and_stemming,
            memories::non_latin_text_is_searchable,
            memories::better_matches_rank_first_and_ties_go_to_the_newest,
            memories::a_short_top_list_is_exactly_the_head_of_the_full_ranking,
            memories::a_conversation_turn_is_found_by_the_words_of_the_turn_it_answers,
            memories::a_batch_and_the_same_memories_one_at_a_time_score_alike,
            memories::changes_through_another_handle_are_seen_at_once,
            memories::previous_turns_follow_each_conversation,
            memories::forget_erases_a_user_and_nobody_else,
            memories::export_pages_through_everything_oldest_first,
            memories::stats_count_what_is_there,
            memories::users_are_listed_with_their_counts,
            memories::sessions_are_counted_from_the_memories_that_name_them,
            memories::memories_are_counted_per_day_in_the_time_zone_asked_for,
            memories::a_nul_character_is_refused_alike_by_every_engine,
            vectors::vectors_are_found_by_similarity_within_the_filter,
            vectors::a_model_keeps_its_dimension_and_spaces_never_mix,
            vectors::pending_texts_page_by_hash_and_vectors_follow_their_memories,
            jobs::a_job_round_trips_with_its_default_session,
            jobs::a_run_is_recorded_and_moves_the_job_on,
            jobs::jobs_are_listed_soonest_first_and_disabled_ones_only_when_asked,
            jobs::a_missed_occurrence_is_skipped_once,
            jobs::a_one_shot_job_deleted_after_its_run_keeps_its_runs,
            jobs::two_claimers_of_one_occurrence_get_one_run,
            jobs::a_run_is_interrupted_only_when_its_runner_is_gone,
            jobs::a_job_added_through_another_handle_moves_the_change_version,
            tokens::a_token_is_found_with_its_hash_until_revoked,
            tokens::token_changes_through_another_handle_move_the_change_version,
            graph::entities_are_created_once_per_user,
            graph::observations_need_an_existing_entity_and_all_or_nothing_is_added,
            graph::open_nodes_returns_relations_touching_any_requested_node,
            graph::search_memories_are_linked_back_to_their_rows,
            graph::deleting_an_entity_takes_its_relations_and_returns_its_memories,
            graph::invalid_input_is_refused_before_writing,
            claims::a_claim_is_granted_once_and_done_for_every_handle,
            claims::a_claim_overlapping_others_gets_only_the_free_part,
            claims::a_released_claim_can_be_claimed_again,
            claims::an_abandoned_claim_lapses_after_its_lease,
            claims::positions_past_the_stored_range_are_refused,
            claims::many_claimants_at_once_get_one_grant,
        );
    };
    (@each $engine:expr; $($module:ident :: $check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let engine = $engine.await;
                $crate::$module::$check(&engine).await;
            }
        )*
    };
}

/// Expands every session-log check into a `#[tokio::test]` against fresh logs made by
/// `$engine` (an expression giving a future of a [`SessionEngine`]).
#[macro_export]
macro_rules! session_log_conformance_tests {
    ($engine:expr) => {
        $crate::session_log_conformance_tests!(@each $engine;
            sessions::a_log_reads_back_as_appended,
            sessions::appends_from_two_handles_never_interleave,
            sessions::keys_delete_and_set_aside,
        );
    };
    (@each $engine:expr; $($module:ident :: $check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let engine = $engine.await;
                $crate::$module::$check(&engine).await;
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    /// Every public check is listed in the macros, so that no engine silently skips one.
    #[test]
    fn every_check_is_run_by_the_macros() {
        let lib = include_str!("lib.rs");
        for (module, source) in [
            ("memories", include_str!("memories.rs")),
            ("vectors", include_str!("vectors.rs")),
            ("jobs", include_str!("jobs.rs")),
            ("tokens", include_str!("tokens.rs")),
            ("graph", include_str!("graph.rs")),
            ("sessions", include_str!("sessions.rs")),
            ("claims", include_str!("claims.rs")),
        ] {
            let mut checks = 0;
            for line in source.lines() {
                if let Some(rest) = line.strip_prefix("pub async fn ") {
                    let name = rest.split('(').next().unwrap_or_default();
                    let listed = format!("{module}::{name},");
                    assert!(lib.contains(&listed), "{listed} is not in a macro");
                    checks += 1;
                }
            }
            assert!(checks > 0, "no checks found in {module}");
        }
    }
}
