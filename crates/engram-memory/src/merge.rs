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
//!
//! Every entry reaching the merge was grounded in the user's words ([`crate::grounding`]), and
//! a change happens only with support:
//!
//! - a new value closes the same key's old value only when the conversation supports the change:
//!   the new value is stated in one clause of the user's, and the old value is not stated again
//!   (a conversation stating both is an addition); otherwise the new value is kept as a
//!   *candidate* (`metadata.status = "candidate"`, category `candidate`): stored and searchable,
//!   but not in the profile, and the old value stays;
//! - the model's UPDATE may only replace an entry about the same subject (a key sharing a word)
//!   and its DELETE only follows an entry that itself says "no longer"; other decisions fall back
//!   to the key rule;
//! - what the user revokes ("I'm not vegetarian any more") closes the matching entries even with
//!   no new value ([`close_ended`]).
//!
//! Nothing is ever destroyed. A new entry carries `metadata.evidence` (the user's sentence that
//! supports it) and `metadata.supersedes` (the ids it closed); a closed one gets
//! `metadata.closed_because` (that sentence) and `metadata.superseded_by` before it is closed,
//! so its history says why.

use std::collections::HashSet;

use engram_core::{
    AddOutcome, ChatModel, ChatRequest, Filter, Importance, Kind, Memory, MemoryId, MemoryStore,
    Message, MetaCondition, NewMemory, Scope, StoreError,
};
use serde_json::Value;

use crate::extract::{ProfileEntry, UnusableOutput, find_list};
use crate::grounding::{Grounding, Support, content_terms};
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
    /// New values kept as candidates: they contradict a known value without the support to
    /// replace it.
    pub candidates: usize,
    /// The model's answer, when it could not be used (the key rule decided instead).
    pub unusable: Option<UnusableOutput>,
}

/// A new profile entry and the user's words that support it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroundedEntry {
    /// Fact or preference.
    pub kind: Kind,
    /// The entry.
    pub entry: ProfileEntry,
    /// Where the user said it.
    pub support: Support,
}

/// `metadata.status` of a candidate entry.
pub const CANDIDATE: &str = "candidate";

/// True for an entry kept as a candidate (not part of the profile).
pub fn is_candidate(memory: &Memory) -> bool {
    memory.metadata.get("status").and_then(Value::as_str) == Some(CANDIDATE)
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

/// Every current fact and preference of `user`, newest first, at most `limit`; candidates are
/// not part of the profile.
pub async fn current_profile(
    store: &dyn MemoryStore,
    user: &str,
    limit: usize,
) -> Result<Vec<Memory>, StoreError> {
    profile_lists(store, user, Vec::new(), limit).await
}

/// The current candidates of `user` with `key`.
async fn candidates_with_key(
    store: &dyn MemoryStore,
    user: &str,
    key: &str,
) -> Result<Vec<Memory>, StoreError> {
    let mut all = Vec::new();
    for kind in PROFILE_KINDS {
        let filter = Filter {
            kinds: vec![kind],
            metadata: vec![
                MetaCondition {
                    key: "key".into(),
                    value: key.into(),
                },
                MetaCondition {
                    key: "status".into(),
                    value: CANDIDATE.into(),
                },
            ],
            ..Filter::user(user)
        };
        all.extend(store.list(&filter, 100, 0).await?);
    }
    Ok(all)
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
        all.extend(
            store
                .list(&filter, limit, 0)
                .await?
                .into_iter()
                .filter(|m| !is_candidate(m)),
        );
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
    profile_memory(kind, entry, origin, None)
}

fn profile_memory(
    kind: Kind,
    entry: &ProfileEntry,
    origin: &MergeOrigin<'_>,
    support: Option<&Support>,
) -> NewMemory {
    let memory = NewMemory::new(Scope::user(origin.user), entry.text())
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
        .at(origin.at);
    match support {
        Some(support) => memory.with_meta("evidence", Value::String(support.quote.clone())),
        None => memory,
    }
}

/// Adds the entry (with the ids it supersedes); the new memory's id when it was new.
async fn add(
    store: &dyn MemoryStore,
    grounded: &GroundedEntry,
    origin: &MergeOrigin<'_>,
    supersedes: &[MemoryId],
) -> Result<Option<MemoryId>, StoreError> {
    let mut memory = profile_memory(
        grounded.kind,
        &grounded.entry,
        origin,
        Some(&grounded.support),
    );
    if !supersedes.is_empty() {
        memory = memory.with_meta(
            "supersedes",
            Value::Array(
                supersedes
                    .iter()
                    .map(|id| Value::String(id.to_string()))
                    .collect(),
            ),
        );
    }
    Ok(match store.add(memory, origin.actor).await? {
        AddOutcome::Added(m) => Some(m.id),
        AddOutcome::Duplicate(_) => None,
    })
}

/// Adds the entry as a candidate: stored, not in the profile, the known value left alone.
async fn add_candidate(
    store: &dyn MemoryStore,
    grounded: &GroundedEntry,
    origin: &MergeOrigin<'_>,
    contradicts: &[&Memory],
) -> Result<bool, StoreError> {
    let memory = profile_memory(
        grounded.kind,
        &grounded.entry,
        origin,
        Some(&grounded.support),
    )
    .with_category(CANDIDATE)
    .with_meta("status", Value::String(CANDIDATE.into()))
    .with_meta(
        "contradicts",
        Value::Array(
            contradicts
                .iter()
                .map(|m| Value::String(m.id.to_string()))
                .collect(),
        ),
    );
    Ok(matches!(
        store.add(memory, origin.actor).await?,
        AddOutcome::Added(_)
    ))
}

/// Closes a memory, first noting why (`closed_because`, and `superseded_by` when a new entry
/// replaces it) in its metadata; "already closed" (another process got there first) is done.
async fn close(
    store: &dyn MemoryStore,
    old: &Memory,
    because: &str,
    replaced_by: Option<MemoryId>,
    actor: &str,
) -> Result<bool, StoreError> {
    let mut metadata = old.metadata.clone();
    metadata.insert("closed_because".into(), Value::String(because.to_string()));
    if let Some(id) = replaced_by {
        metadata.insert("superseded_by".into(), Value::String(id.to_string()));
    }
    let patch = engram_core::MemoryPatch {
        metadata: Some(metadata),
        ..Default::default()
    };
    match store.update(old.id, patch, actor).await {
        Ok(_) => {}
        Err(StoreError::AlreadyClosed(_) | StoreError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    }
    match store.invalidate(old.id, actor).await {
        Ok(_) => Ok(true),
        Err(StoreError::AlreadyClosed(_) | StoreError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Replaces `old` with the new entry: the new one is added first (so its id can be named),
/// then each old one closed.
async fn replace(
    store: &dyn MemoryStore,
    grounded: &GroundedEntry,
    old: &[&Memory],
    origin: &MergeOrigin<'_>,
    report: &mut MergeReport,
) -> Result<(), StoreError> {
    let ids: Vec<MemoryId> = old.iter().map(|m| m.id).collect();
    let added = add(store, grounded, origin, &ids).await?;
    match added {
        Some(_) => report.added += 1,
        None => report.unchanged += 1,
    }
    for memory in old {
        if close(store, memory, &grounded.support.quote, added, origin.actor).await? {
            report.superseded += 1;
        }
    }
    Ok(())
}

/// Whether the conversation supports replacing `old` by the new entry: the new value is stated
/// in one clause, and the old value is not stated again (both stated is an addition, or talk of
/// someone else).
fn supports_change(grounding: &Grounding, grounded: &GroundedEntry, old: &Memory) -> bool {
    grounded.support.in_one_clause && !restated(grounding, old)
}

/// The key rule for one entry, with support: same text changes nothing; a known value of the
/// key is replaced when the conversation supports the change, kept next to the new one when the
/// conversation states both, and otherwise the new value becomes a candidate.
pub async fn apply_key_rule(
    store: &dyn MemoryStore,
    grounding: &Grounding,
    grounded: &GroundedEntry,
    origin: &MergeOrigin<'_>,
    report: &mut MergeReport,
) -> Result<(), StoreError> {
    let current = current_with_key(store, origin.user, &grounded.entry.key).await?;
    let text = grounded.entry.text();
    if current.iter().any(|m| same_text(&m.text, &text)) {
        report.unchanged += 1;
        return Ok(());
    }
    if current.is_empty() {
        match add(store, grounded, origin, &[]).await? {
            Some(_) => report.added += 1,
            None => report.unchanged += 1,
        }
        return Ok(());
    }
    let (replaceable, kept): (Vec<&Memory>, Vec<&Memory>) = current
        .iter()
        .partition(|old| supports_change(grounding, grounded, old));
    if !replaceable.is_empty() || kept.iter().all(|old| restated(grounding, old)) {
        // Replace what the conversation supports replacing; what it states again stays.
        return replace(store, grounded, &replaceable, origin, report).await;
    }
    if candidates_with_key(store, origin.user, &grounded.entry.key)
        .await?
        .iter()
        .any(|m| same_text(&m.text, &text))
    {
        report.unchanged += 1;
        return Ok(());
    }
    if add_candidate(store, grounded, origin, &kept).await? {
        report.candidates += 1;
    } else {
        report.unchanged += 1;
    }
    Ok(())
}

/// True when the conversation states `old`'s value again (of the user, or of whom `old`
/// names).
fn restated(grounding: &Grounding, old: &Memory) -> bool {
    let value = old
        .text
        .split_once(": ")
        .map(|(_, v)| v)
        .unwrap_or(&old.text);
    let about: HashSet<String> = content_terms(&old.text.replace('_', " "))
        .into_iter()
        .collect();
    grounding.restates(&content_terms(value), &about)
}

/// Closes the current entries a revocation names: an `ended` entry the user's words support
/// (its words said in a clause that denies it or tells of a change, never in a question or
/// supposition, and not merely stated again), or
/// one whose key a new grounded entry of this conversation takes over. An entry is closed when
/// the revoked words (the value's, or the key's when the value has none) are all among its key
/// and value words. Returns how many were closed.
pub async fn close_ended(
    store: &dyn MemoryStore,
    grounding: &Grounding,
    ended: &[ProfileEntry],
    replacing: &[GroundedEntry],
    origin: &MergeOrigin<'_>,
) -> Result<(usize, Vec<(ProfileEntry, String)>), StoreError> {
    let mut closed = 0;
    let mut refused = Vec::new();
    for end in ended {
        let mut terms = content_terms(&end.value);
        if terms.is_empty() {
            terms = content_terms(&end.key.replace('_', " "));
        }
        // The user's words end it outright ("Pepper died"), or revoke all its words.
        let support = match grounding.ends(&end.key, &end.value) {
            Some(support) => Ok(support),
            None => grounding.revokes(&terms),
        };
        let because = match support {
            Ok(support) => support.quote,
            Err(rejection) => match replacing.iter().find(|g| g.entry.key == end.key) {
                Some(g) => g.support.quote.clone(),
                None => {
                    refused.push((end.clone(), rejection.reason()));
                    continue;
                }
            },
        };
        if terms.is_empty() {
            continue;
        }
        for memory in current_profile(store, origin.user, 1000).await? {
            let words: HashSet<String> = content_terms(&memory.text).into_iter().collect();
            let same_subject = memory.metadata.get("key").and_then(Value::as_str)
                == Some(end.key.as_str())
                || terms.iter().all(|t| words.contains(t));
            let named = terms.iter().all(|t| words.contains(t));
            // A replacement in this conversation is not what it ends.
            let renewed = replacing
                .iter()
                .any(|g| same_text(&g.entry.text(), &memory.text));
            if same_subject
                && named
                && !renewed
                && close(store, &memory, &because, None, origin.actor).await?
            {
                closed += 1;
            }
        }
    }
    Ok((closed, refused))
}

/// The current profile entries the user's own words end ([`Grounding::ends`]: "I'm not vegan any
/// more", "we dropped FastAPI", "Pepper died", "we moved from Leeds"), whether or not the model
/// listed them as ended: a small model often leaves a revocation out, and the old value must
/// not stay current because of that.
pub async fn ended_in_words(
    store: &dyn MemoryStore,
    grounding: &Grounding,
    user: &str,
) -> Result<Vec<ProfileEntry>, StoreError> {
    let mut ended = Vec::new();
    for memory in current_profile(store, user, 1000).await? {
        let Some((key, value)) = memory.text.split_once(": ") else {
            continue;
        };
        if grounding.ends(key, value).is_some() {
            ended.push(ProfileEntry {
                key: key.to_string(),
                value: value.to_string(),
            });
        }
    }
    Ok(ended)
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
    new: &[GroundedEntry],
) -> Result<Vec<Memory>, StoreError> {
    let mut seen = HashSet::new();
    let mut known = Vec::new();
    let filter = Filter {
        kinds: PROFILE_KINDS.to_vec(),
        ..Filter::user(user)
    };
    for grounded in new {
        for memory in current_with_key(store, user, &grounded.entry.key).await? {
            if seen.insert(memory.id) {
                known.push(memory);
            }
        }
    }
    for grounded in new {
        let entry = &grounded.entry;
        let query = format!("{} {}", entry.key.replace('_', " "), entry.value);
        let hits = match store.search_lexical(&filter, &query, NEIGHBOURS).await {
            Ok(hits) => hits,
            // A query of no searchable words finds nothing.
            Err(StoreError::BadQuery(_)) => Vec::new(),
            Err(e) => return Err(e),
        };
        for hit in hits {
            if !is_candidate(&hit.memory) && seen.insert(hit.memory.id) {
                known.push(hit.memory);
            }
        }
    }
    known.truncate(MAX_SHOWN);
    Ok(known)
}

/// True when two keys are about the same subject: equal, or sharing a word.
fn same_subject(a: &str, b: &str) -> bool {
    let words =
        |k: &str| -> HashSet<String> { content_terms(&k.replace('_', " ")).into_iter().collect() };
    a == b || !words(a).is_disjoint(&words(b))
}

/// A decision of the model's that the conversation supports; others go to the key rule.
fn supported_decision(
    event: MergeEvent,
    grounded: &GroundedEntry,
    known: &[Memory],
) -> Option<MergeEvent> {
    let key_of = |m: &Memory| {
        m.metadata
            .get("key")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    match event {
        MergeEvent::Update(id) => {
            same_subject(&key_of(&known[id]), &grounded.entry.key).then_some(event)
        }
        MergeEvent::Delete(id) => (same_subject(&key_of(&known[id]), &grounded.entry.key)
            && crate::grounding::says_no_longer(&grounded.entry.value))
        .then_some(event),
        MergeEvent::Add | MergeEvent::None => Some(event),
    }
}

/// Merges grounded entries: by the model when one is given and something similar is known (its
/// decisions checked for support), by the key rule otherwise.
pub async fn merge_profile(
    store: &dyn MemoryStore,
    model: Option<&dyn ChatModel>,
    grounding: &Grounding,
    new: &[GroundedEntry],
    origin: &MergeOrigin<'_>,
) -> Result<MergeReport, MemoryError> {
    let mut report = MergeReport::default();
    if new.is_empty() {
        return Ok(report);
    }
    let mut decisions = vec![None; new.len()];
    let mut known = Vec::new();
    if let Some(model) = model {
        known = neighbours(store, origin.user, new).await?;
        // Nothing similar is known: every entry is an addition, no need to ask.
        if !known.is_empty() {
            let shown: Vec<(Kind, ProfileEntry)> =
                new.iter().map(|g| (g.kind, g.entry.clone())).collect();
            let response = model.chat(&merge_request(&known, &shown)).await?;
            match parse_decisions(&response.message.content, new.len(), known.len()) {
                Ok(parsed) => decisions = parsed,
                Err(unusable) => report.unusable = Some(unusable),
            }
        }
    }
    for (grounded, decision) in new.iter().zip(decisions) {
        let decision = decision.and_then(|d| supported_decision(d, grounded, &known));
        match decision {
            None => apply_key_rule(store, grounding, grounded, origin, &mut report).await?,
            Some(event) => {
                report.by_model += 1;
                match event {
                    MergeEvent::None => report.unchanged += 1,
                    MergeEvent::Add => match add(store, grounded, origin, &[]).await? {
                        Some(_) => report.added += 1,
                        None => report.unchanged += 1,
                    },
                    MergeEvent::Update(id) => {
                        let target = &known[id];
                        if same_text(&target.text, &grounded.entry.text()) {
                            report.unchanged += 1;
                            continue;
                        }
                        if supports_change(grounding, grounded, target) {
                            replace(store, grounded, &[target], origin, &mut report).await?;
                        } else if add_candidate(store, grounded, origin, &[target]).await? {
                            report.candidates += 1;
                        }
                    }
                    MergeEvent::Delete(id) => {
                        if close(
                            store,
                            &known[id],
                            &grounded.support.quote,
                            None,
                            origin.actor,
                        )
                        .await?
                        {
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
