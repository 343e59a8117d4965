//! Maintenance: cleanup (old unimportant episodes and expired memories are invalidated, so they
//! stay in history) and compaction (the model condenses a bloated profile into fewer entries; the
//! old ones are invalidated and stay in history).

use std::collections::HashSet;

use engram_core::{
    AddOutcome, ChatModel, ChatRequest, Filter, Kind, Memory, MemoryStore, Message, StoreError,
};
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::extract::{ProfileEntry, UnusableOutput, find_list, profile_entries};
use crate::manager::MemoryError;
use crate::merge::{MergeOrigin, current_profile, new_profile_memory};
use crate::prompts;

/// Memories read per page while scanning.
const PAGE: usize = 1000;
/// A profile with fewer entries is not worth compacting.
pub const MIN_COMPACT_ENTRIES: usize = 4;
/// Most entries sent to the model in one compaction.
const MAX_COMPACT_ENTRIES: usize = 300;

/// Which episodes cleanup ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupRule {
    /// Episodes older than this...
    pub older_than: SignedDuration,
    /// ...with importance below this are invalidated (importance at or above it is kept forever).
    pub below_importance: u8,
}

impl Default for CleanupRule {
    /// 90 days, importance below 3, as in the reference design.
    fn default() -> Self {
        Self {
            older_than: SignedDuration::from_hours(90 * 24),
            below_importance: 3,
        }
    }
}

/// Why cleanup picked a memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CleanupReason {
    /// An episode older than the rule's age with importance below its threshold.
    OldAndUnimportant,
    /// Its `expires_at` has passed.
    Expired,
}

/// One memory cleanup picked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CleanupItem {
    /// The memory (as it was before cleanup).
    pub memory: Memory,
    /// Why.
    pub reason: CleanupReason,
}

/// What cleanup did, or would do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CleanupReport {
    /// Nothing was changed; `items` is what would be.
    pub dry_run: bool,
    /// The memories picked, oldest first.
    pub items: Vec<CleanupItem>,
    /// How many were invalidated (0 in a dry run).
    pub invalidated: usize,
}

async fn scan(
    store: &dyn MemoryStore,
    filter: &Filter,
    mut keep: impl FnMut(&Memory) -> bool,
) -> Result<Vec<Memory>, StoreError> {
    let mut found = Vec::new();
    let mut offset = 0;
    loop {
        let page = store.list(filter, PAGE, offset).await?;
        let len = page.len();
        found.extend(page.into_iter().filter(|m| keep(m)));
        if len < PAGE {
            return Ok(found);
        }
        offset += len;
    }
}

/// Finds episodes older than the rule allows with importance below its threshold, and memories
/// whose expiry has passed but are not closed yet, and invalidates them (unless `dry_run`).
pub async fn cleanup(
    store: &dyn MemoryStore,
    user: &str,
    rule: &CleanupRule,
    now: Timestamp,
    dry_run: bool,
    actor: &str,
) -> Result<CleanupReport, StoreError> {
    let cutoff = now.checked_sub(rule.older_than).unwrap_or(Timestamp::MIN);
    let old = Filter {
        kinds: vec![Kind::Episode],
        until: Some(cutoff),
        ..Filter::user(user)
    };
    let mut items: Vec<CleanupItem> =
        scan(store, &old, |m| m.importance.get() < rule.below_importance)
            .await?
            .into_iter()
            .map(|memory| CleanupItem {
                memory,
                reason: CleanupReason::OldAndUnimportant,
            })
            .collect();
    let picked: HashSet<_> = items.iter().map(|i| i.memory.id).collect();
    let all = Filter {
        include_closed: true,
        ..Filter::user(user)
    };
    let expired = scan(store, &all, |m| {
        m.valid_to.is_none() && m.expires_at.is_some_and(|t| t <= now) && !picked.contains(&m.id)
    })
    .await?;
    items.extend(expired.into_iter().map(|memory| CleanupItem {
        memory,
        reason: CleanupReason::Expired,
    }));
    items.sort_by_key(|item| item.memory.created_at);
    let mut invalidated = 0;
    if !dry_run {
        for item in &items {
            match store.invalidate(item.memory.id, actor).await {
                Ok(_) => invalidated += 1,
                // Closed or removed meanwhile by someone else: nothing left to do.
                Err(StoreError::AlreadyClosed(_) | StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(CleanupReport {
        dry_run,
        items,
        invalidated,
    })
}

/// What compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompactReport {
    /// Current profile entries before.
    pub before: usize,
    /// Current profile entries after.
    pub after: usize,
    /// Old entries invalidated (kept in history).
    pub invalidated: usize,
    /// Condensed entries added.
    pub added: usize,
    /// Why nothing changed, if nothing did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The request asking the model to condense `profile`.
pub fn compact_request(profile: &[Memory]) -> ChatRequest {
    let lines: Vec<String> = profile
        .iter()
        .map(|m| format!("- ({}) {}", m.kind, m.text))
        .collect();
    let count = profile.len().to_string();
    let prompt = prompts::COMPACT.render(&[("count", &count), ("profile", &lines.join("\n"))]);
    ChatRequest::new(vec![
        Message::system(prompt),
        Message::user("Condense the profile."),
    ])
    .with_temperature(0.0)
    .json_object()
}

/// Reads the condensed profile; an answer with no entries at all is unusable (it would erase the
/// profile).
pub fn parse_compacted(raw: &str) -> Result<Vec<(Kind, ProfileEntry)>, UnusableOutput> {
    let unusable = |reason: &str| UnusableOutput {
        what: "compact",
        reason: reason.into(),
        raw: raw.to_string(),
    };
    let Some(map) = find_list(raw, "compact", &["facts", "preferences"])? else {
        return Err(unusable("the answer is empty"));
    };
    let entries: Vec<(Kind, ProfileEntry)> = profile_entries(&map, "facts")
        .into_iter()
        .map(|e| (Kind::Fact, e))
        .chain(
            profile_entries(&map, "preferences")
                .into_iter()
                .map(|e| (Kind::Preference, e)),
        )
        .collect();
    if entries.is_empty() {
        return Err(unusable("the condensed profile has no entries"));
    }
    Ok(entries)
}

/// Has the model condense the user's profile. Old entries not in the condensed profile are
/// invalidated (kept in history); entries it keeps word for word stay as they are. Nothing
/// changes when the profile is small, the answer is unusable, or it is not shorter.
pub async fn compact_profile(
    store: &dyn MemoryStore,
    model: &dyn ChatModel,
    user: &str,
    now: Timestamp,
    actor: &str,
) -> Result<CompactReport, MemoryError> {
    let profile = current_profile(store, user, MAX_COMPACT_ENTRIES).await?;
    let mut report = CompactReport {
        before: profile.len(),
        after: profile.len(),
        ..CompactReport::default()
    };
    if profile.len() < MIN_COMPACT_ENTRIES {
        report.skipped = Some(format!(
            "the profile has {} entries; compaction starts at {MIN_COMPACT_ENTRIES}",
            profile.len()
        ));
        return Ok(report);
    }
    let answer = model.chat(&compact_request(&profile)).await?;
    let condensed = match parse_compacted(&answer.message.content) {
        Ok(entries) => entries,
        Err(unusable) => {
            tracing::warn!(reason = %unusable.reason, raw = %unusable.raw, "profile compaction answer not usable; the profile is unchanged");
            report.skipped = Some(unusable.to_string());
            return Ok(report);
        }
    };
    if condensed.len() >= profile.len() {
        report.skipped = Some(format!(
            "the model returned {} entries for {}; nothing was condensed",
            condensed.len(),
            profile.len()
        ));
        return Ok(report);
    }
    let normal = |text: &str| engram_core::normalize_text(text).to_lowercase();
    let wanted: HashSet<(Kind, String)> = condensed
        .iter()
        .map(|(kind, e)| (*kind, normal(&e.text())))
        .collect();
    let mut kept = HashSet::new();
    for memory in &profile {
        let key = (memory.kind, normal(&memory.text));
        if wanted.contains(&key) {
            kept.insert(key);
            continue;
        }
        match store.invalidate(memory.id, actor).await {
            Ok(_) => report.invalidated += 1,
            Err(StoreError::AlreadyClosed(_) | StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let origin = MergeOrigin {
        user,
        session_key: "compaction",
        at: now,
        actor,
    };
    for (kind, entry) in &condensed {
        if kept.contains(&(*kind, normal(&entry.text()))) {
            continue;
        }
        if let AddOutcome::Added(_) = store
            .add(new_profile_memory(*kind, entry, &origin), actor)
            .await?
        {
            report.added += 1;
        }
    }
    report.after = current_profile(store, user, MAX_COMPACT_ENTRIES)
        .await?
        .len();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacted_profiles_must_have_entries() {
        let entries = parse_compacted(
            r#"{"facts": [{"key": "stack", "value": "Python 3.12 with FastAPI"}], "preferences": []}"#,
        )
        .unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].1.text(), "stack: Python 3.12 with FastAPI");
        assert!(parse_compacted(r#"{"facts": [], "preferences": []}"#).is_err());
        assert!(parse_compacted("").is_err());
        assert!(parse_compacted("sorry").is_err());
    }

    #[test]
    fn the_default_rule_is_ninety_days_below_three() {
        let rule = CleanupRule::default();
        assert_eq!(rule.older_than.as_hours(), 90 * 24);
        assert_eq!(rule.below_importance, 3);
    }
}
