//! Merging new profile entries into what is known.
//!
//! Facts and preferences are memories of kind `fact` / `preference` with `metadata.key` (see
//! [`crate::extract::normalize_key`]) and text `"<key>: <value>"`. Two ways to merge:
//!
//! - the key rule: an entry whose key matches current ones (case-insensitively) supersedes them —
//!   each old one is invalidated (closed with `valid_to`, a history row written) and the new one
//!   added; the same text again changes nothing;
//! - the model merge: the model sees the nearest known entries under small integer ids (never raw
//!   ids) and answers ADD / UPDATE / DELETE / NONE per new entry, which keeps an addition
//!   ("Python" and "Go") apart from a replacement ("Python 3.9" → "Python 3.12"). DELETE
//!   invalidates; nothing is ever destroyed. An entry the model gave no usable decision for, or a
//!   whole answer that cannot be read, falls back to the key rule.

use std::collections::HashSet;

use engram_core::{
    AddOutcome, ChatModel, ChatRequest, Filter, Importance, Kind, Memory, MemoryId, MemoryStore,
    Message, MetaCondition, NewMemory, Scope, StoreError,
};
use serde_json::Value;

use crate::extract::{ProfileEntry, ProfileUpdate, UnusableOutput, find_list};
use crate::manager::MemoryError;
use crate::prompts;

/// The kinds that make up the profile.
pub const PROFILE_KINDS: [Kind; 2] = [Kind::Fact, Kind::Preference];
/// Most known entries shown to the model in one merge.
const MAX_SHOWN: usize = 20;
/// Known entries looked up per new entry by similarity.
const NEIGHBOURS: usize = 3;
/// Importance given to profile entries.
const PROFILE_IMPORTANCE: i64 = 4;

/// What the model decided for one new entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeEvent {
    /// New information; keep it next to what is known.
    Add,
    /// Replaces the known entry with this small id.
    Update(usize),
    /// Ends the known entry with this small id; nothing replaces it.
    Delete(usize),
    /// Already known.
    None,
}

/// What a merge changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// New facts and preferences stored.
    pub added: usize,
    /// Known entries closed because a new one replaced them.
    pub superseded: usize,
    /// Known entries closed by a DELETE.
    pub deleted: usize,
    /// New entries that were already known.
    pub unchanged: usize,
    /// Entries decided by the model (the rest by the key rule).
    pub by_model: usize,
    /// The model's answer, when it could not be used (the key rule decided instead).
    pub unusable: Option<UnusableOutput>,
}

/// Where new entries come from, for their metadata and history.
#[derive(Debug, Clone)]
pub struct MergeOrigin<'a> {
    /// Whose profile.
    pub user: &'a str,
    /// The session the entries were learned in.
    pub session_key: &'a str,
    /// When they were said.
    pub at: jiff::Timestamp,
    /// The history actor.
    pub actor: &'a str,
}

/// The current profile entries of `user` with `key`, of either kind.
pub async fn current_with_key(
    store: &dyn MemoryStore,
    user: &str,
    key: &str,
) -> Result<Vec<Memory>, StoreError> {
    let condition = MetaCondition {
        key: "key".into(),
        value: key.into(),
    };
    profile_lists(store, user, vec![condition], 100).await
}

/// Every current fact and preference of `user`, newest first, at most `limit`.
pub async fn current_profile(
    store: &dyn MemoryStore,
    user: &str,
    limit: usize,
) -> Result<Vec<Memory>, StoreError> {
    profile_lists(store, user, Vec::new(), limit).await
}

/// One listing per kind (each follows the store's per-kind index; a listing of both kinds at
/// once would walk all of the user's memories), merged newest first.
async fn profile_lists(
    store: &dyn MemoryStore,
    user: &str,
    metadata: Vec<MetaCondition>,
    limit: usize,
) -> Result<Vec<Memory>, StoreError> {
    let mut all = Vec::new();
    for kind in PROFILE_KINDS {
        let filter = Filter {
            kinds: vec![kind],
            metadata: metadata.clone(),
            ..Filter::user(user)
        };
        all.extend(store.list(&filter, limit, 0).await?);
    }
    all.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    all.truncate(limit);
    Ok(all)
}

fn same_text(a: &str, b: &str) -> bool {
    engram_core::normalize_text(a).to_lowercase() == engram_core::normalize_text(b).to_lowercase()
}

/// The memory to store for an entry.
pub fn new_profile_memory(kind: Kind, entry: &ProfileEntry, origin: &MergeOrigin<'_>) -> NewMemory {
    NewMemory::new(Scope::user(origin.user), entry.text())
        .with_kind(kind)
        .with_category(if kind == Kind::Preference {
            "user_preference"
        } else {
            "user_info"
        })
        .with_importance(Importance::new(PROFILE_IMPORTANCE).unwrap_or_default())
        .with_meta("key", Value::String(entry.key.clone()))
        .with_meta("session", Value::String(origin.session_key.to_string()))
        .with_source("extraction")
        .at(origin.at)
}

/// Adds the entry; `true` when it was new.
async fn add(
    store: &dyn MemoryStore,
    kind: Kind,
    entry: &ProfileEntry,
    origin: &MergeOrigin<'_>,
) -> Result<bool, StoreError> {
    Ok(matches!(
        store
            .add(new_profile_memory(kind, entry, origin), origin.actor)
            .await?,
        AddOutcome::Added(_)
    ))
}

/// Closes a memory, treating "already closed" (another process got there first) as done.
async fn close(store: &dyn MemoryStore, id: MemoryId, actor: &str) -> Result<bool, StoreError> {
    match store.invalidate(id, actor).await {
        Ok(_) => Ok(true),
        Err(StoreError::AlreadyClosed(_) | StoreError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The key rule for one entry.
pub async fn apply_key_rule(
    store: &dyn MemoryStore,
    kind: Kind,
    entry: &ProfileEntry,
    origin: &MergeOrigin<'_>,
    report: &mut MergeReport,
) -> Result<(), StoreError> {
    let current = current_with_key(store, origin.user, &entry.key).await?;
    let text = entry.text();
    if current.iter().any(|m| same_text(&m.text, &text)) {
        report.unchanged += 1;
        return Ok(());
    }
    for old in &current {
        if close(store, old.id, origin.actor).await? {
            report.superseded += 1;
        }
    }
    if add(store, kind, entry, origin).await? {
        report.added += 1;
    } else {
        report.unchanged += 1;
    }
    Ok(())
}

/// The request asking the model to decide, with known entries numbered from 0 and new ones
/// lettered from `a`.
pub fn merge_request(known: &[Memory], new: &[(Kind, ProfileEntry)]) -> ChatRequest {
    let existing: Vec<String> = known
        .iter()
        .enumerate()
        .map(|(i, m)| format!("[{i}] ({}) {}", m.kind, m.text))
        .collect();
    let fresh: Vec<String> = new
        .iter()
        .enumerate()
        .map(|(i, (kind, e))| format!("({}) ({kind}) {}", letter(i), e.text()))
        .collect();
    let prompt = prompts::MERGE.render(&[
        ("existing", &existing.join("\n")),
        ("new", &fresh.join("\n")),
    ]);
    ChatRequest::new(vec![
        Message::system(prompt),
        Message::user("Decide for every new entry."),
    ])
    .with_temperature(0.0)
    .json_object()
}

/// `a`, `b`, ..., `z`, `aa`, `ab`, ...
fn letter(i: usize) -> String {
    let mut n = i;
    let mut out = Vec::new();
    loop {
        out.push(char::from(b'a' + (n % 26) as u8));
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    out.iter().rev().collect()
}

fn index_of_letter(text: &str) -> Option<usize> {
    let text = text
        .trim()
        .trim_matches(|c| c == '(' || c == ')')
        .to_lowercase();
    if text.is_empty() || !text.chars().all(|c| c.is_ascii_lowercase()) || text.len() > 3 {
        return None;
    }
    let mut n = 0usize;
    for c in text.bytes() {
        n = n * 26 + usize::from(c - b'a') + 1;
    }
    Some(n - 1)
}

fn small_number(value: Option<&Value>) -> Option<usize> {
    match value? {
        Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
        Value::String(s) => s.trim().trim_matches(|c| c == '[' || c == ']').parse().ok(),
        _ => None,
    }
}

/// Reads the model's decisions: one slot per new entry, `None` where the model gave no usable
/// decision (unknown event, an id that was not shown, a new entry that does not exist).
pub fn parse_decisions(
    raw: &str,
    new_count: usize,
    known_count: usize,
) -> Result<Vec<Option<MergeEvent>>, UnusableOutput> {
    let mut decisions = vec![None; new_count];
    let Some(map) = find_list(raw, "merge", &["decisions"])? else {
        return Ok(decisions);
    };
    let Some(Value::Array(list)) = map.get("decisions") else {
        return Err(UnusableOutput {
            what: "merge",
            reason: "'decisions' is not a list".into(),
            raw: raw.to_string(),
        });
    };
    for (position, item) in list.iter().enumerate() {
        let Value::Object(entry) = item else { continue };
        let new = match entry.get("new") {
            Some(Value::String(s)) => index_of_letter(s),
            Some(Value::Number(n)) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
            // Decisions given in order without naming the entry.
            None if list.len() == new_count => Some(position),
            _ => None,
        };
        let Some(new) = new.filter(|n| *n < new_count) else {
            continue;
        };
        let event = entry
            .get("event")
            .or_else(|| entry.get("action"))
            .and_then(Value::as_str)
            .map(|s| s.trim().to_uppercase());
        let target = small_number(entry.get("id").or_else(|| entry.get("target")))
            .filter(|id| *id < known_count);
        let decision = match (event.as_deref(), target) {
            (Some("ADD"), _) => Some(MergeEvent::Add),
            (Some("NONE" | "NOOP"), _) => Some(MergeEvent::None),
            (Some("UPDATE"), Some(id)) => Some(MergeEvent::Update(id)),
            (Some("DELETE"), Some(id)) => Some(MergeEvent::Delete(id)),
            _ => None,
        };
        if decisions[new].is_none() {
            decisions[new] = decision;
        }
    }
    Ok(decisions)
}

/// The known entries the model should see for `new`: same-key ones first, then the most similar
/// by words, at most [`MAX_SHOWN`].
async fn neighbours(
    store: &dyn MemoryStore,
    user: &str,
    new: &[(Kind, ProfileEntry)],
) -> Result<Vec<Memory>, StoreError> {
    let mut seen = HashSet::new();
    let mut known = Vec::new();
    let filter = Filter {
        kinds: PROFILE_KINDS.to_vec(),
        ..Filter::user(user)
    };
    for (_, entry) in new {
        for memory in current_with_key(store, user, &entry.key).await? {
            if seen.insert(memory.id) {
                known.push(memory);
            }
        }
    }
    for (_, entry) in new {
        let query = format!("{} {}", entry.key.replace('_', " "), entry.value);
        let hits = match store.search_lexical(&filter, &query, NEIGHBOURS).await {
            Ok(hits) => hits,
            // A query of no searchable words finds nothing.
            Err(StoreError::BadQuery(_)) => Vec::new(),
            Err(e) => return Err(e),
        };
        for hit in hits {
            if seen.insert(hit.memory.id) {
                known.push(hit.memory);
            }
        }
    }
    known.truncate(MAX_SHOWN);
    Ok(known)
}

/// Merges a profile update: by the model when one is given and something similar is known,
/// by the key rule otherwise.
pub async fn merge_profile(
    store: &dyn MemoryStore,
    model: Option<&dyn ChatModel>,
    update: &ProfileUpdate,
    origin: &MergeOrigin<'_>,
) -> Result<MergeReport, MemoryError> {
    let new: Vec<(Kind, ProfileEntry)> = update
        .facts
        .iter()
        .map(|e| (Kind::Fact, e.clone()))
        .chain(
            update
                .preferences
                .iter()
                .map(|e| (Kind::Preference, e.clone())),
        )
        .collect();
    let mut report = MergeReport::default();
    if new.is_empty() {
        return Ok(report);
    }
    let mut decisions = vec![None; new.len()];
    let mut known = Vec::new();
    if let Some(model) = model {
        known = neighbours(store, origin.user, &new).await?;
        // Nothing similar is known: every entry is an addition, no need to ask.
        if !known.is_empty() {
            let response = model.chat(&merge_request(&known, &new)).await?;
            match parse_decisions(&response.message.content, new.len(), known.len()) {
                Ok(parsed) => decisions = parsed,
                Err(unusable) => report.unusable = Some(unusable),
            }
        }
    }
    for ((kind, entry), decision) in new.iter().zip(decisions) {
        match decision {
            None => apply_key_rule(store, *kind, entry, origin, &mut report).await?,
            Some(event) => {
                report.by_model += 1;
                match event {
                    MergeEvent::None => report.unchanged += 1,
                    MergeEvent::Add => {
                        if add(store, *kind, entry, origin).await? {
                            report.added += 1;
                        } else {
                            report.unchanged += 1;
                        }
                    }
                    MergeEvent::Update(id) => {
                        let target = &known[id];
                        if same_text(&target.text, &entry.text()) {
                            report.unchanged += 1;
                            continue;
                        }
                        if close(store, target.id, origin.actor).await? {
                            report.superseded += 1;
                        }
                        if add(store, *kind, entry, origin).await? {
                            report.added += 1;
                        }
                    }
                    MergeEvent::Delete(id) => {
                        if close(store, known[id].id, origin.actor).await? {
                            report.deleted += 1;
                        }
                    }
                }
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn letters_round_trip() {
        for i in [0, 1, 25, 26, 27, 51, 52, 700] {
            assert_eq!(index_of_letter(&letter(i)), Some(i), "{i} -> {}", letter(i));
        }
        assert_eq!(letter(0), "a");
        assert_eq!(letter(26), "aa");
        assert_eq!(index_of_letter("(b)"), Some(1));
        assert_eq!(index_of_letter("1"), None);
    }

    #[test]
    fn decisions_are_read_and_checked_against_what_was_shown() {
        let raw = r#"```json
{"decisions": [
  {"new": "a", "event": "UPDATE", "id": 0},
  {"new": "b", "event": "add", "id": null},
  {"new": "c", "event": "UPDATE", "id": 7},
  {"new": "d", "event": "DELETE", "id": "1"},
  {"new": "z", "event": "ADD"},
  {"new": "e", "event": "MERGE"}
]}
```"#;
        let decisions = parse_decisions(raw, 5, 2).unwrap();
        assert_eq!(
            decisions,
            vec![
                Some(MergeEvent::Update(0)),
                Some(MergeEvent::Add),
                None,
                Some(MergeEvent::Delete(1)),
                None,
            ]
        );
        // Unnamed decisions in order.
        let decisions = parse_decisions(
            r#"{"decisions": [{"event": "NONE"}, {"action": "ADD"}]}"#,
            2,
            1,
        )
        .unwrap();
        assert_eq!(
            decisions,
            vec![Some(MergeEvent::None), Some(MergeEvent::Add)]
        );
        assert!(parse_decisions("no idea", 1, 1).is_err());
        assert_eq!(parse_decisions("", 2, 1).unwrap(), vec![None, None]);
    }

    #[test]
    fn the_merge_prompt_shows_small_ids_never_raw_ids() {
        let memory = Memory {
            id: MemoryId::new(),
            scope: Scope::user("u"),
            kind: Kind::Fact,
            text: "programming_language: Python 3.9".into(),
            category: None,
            importance: Importance::default(),
            metadata: Default::default(),
            created_at: jiff::Timestamp::UNIX_EPOCH,
            updated_at: jiff::Timestamp::UNIX_EPOCH,
            valid_from: jiff::Timestamp::UNIX_EPOCH,
            valid_to: None,
            expires_at: None,
            source: "test".into(),
            content_hash: String::new(),
        };
        let entry = ProfileEntry {
            key: "programming_language".into(),
            value: "Python 3.12".into(),
        };
        let request = merge_request(std::slice::from_ref(&memory), &[(Kind::Fact, entry)]);
        let prompt = request.messages[0].text();
        assert!(prompt.contains("[0] (fact) programming_language: Python 3.9"));
        assert!(prompt.contains("(a) (fact) programming_language: Python 3.12"));
        assert!(!prompt.contains(&memory.id.to_string()));
    }

    proptest! {
        #[test]
        fn decisions_never_point_outside_what_was_shown(raw in "\\PC{0,200}", new in 0usize..5, known in 0usize..5) {
            if let Ok(decisions) = parse_decisions(&raw, new, known) {
                prop_assert_eq!(decisions.len(), new);
                for d in decisions.into_iter().flatten() {
                    if let MergeEvent::Update(id) | MergeEvent::Delete(id) = d {
                        prop_assert!(id < known);
                    }
                }
            }
        }
    }
}
