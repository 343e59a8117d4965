//! The memory record: what is remembered, for whom, and when it was true.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

/// Longest text a single memory may hold, in bytes. Longer input is a mistake, not a memory.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Longest user, agent or session id, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// A memory's identity: a UUID v7, so ids sort by creation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(Uuid);

impl MemoryId {
    /// A fresh id; later calls in one process sort after earlier ones.
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }

    /// The underlying UUID.
    pub fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

impl From<Uuid> for MemoryId {
    fn from(uuid: Uuid) -> Self {
        Self(uuid)
    }
}

impl Default for MemoryId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// The error for text that is not a memory id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a memory id (expected a UUID such as 0193a5b2-7c1e-7d3a-9f00-2b6c1d9e4a10)")]
pub struct ParseIdError(pub String);

impl FromStr for MemoryId {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s.trim())
            .map(Self)
            .map_err(|_| ParseIdError(s.to_string()))
    }
}

/// What sort of thing a memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Something that happened.
    Episode,
    /// Something true about the user or the world.
    Fact,
    /// How the user likes things done.
    Preference,
    /// A note the agent or a person wrote down.
    Note,
    /// A condensed account of earlier conversation.
    Summary,
}

impl Kind {
    /// Every kind, in a stable order.
    pub const ALL: [Kind; 5] = [
        Kind::Episode,
        Kind::Fact,
        Kind::Preference,
        Kind::Note,
        Kind::Summary,
    ];

    /// The lowercase name used on the command line, in JSON and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Episode => "episode",
            Kind::Fact => "fact",
            Kind::Preference => "preference",
            Kind::Note => "note",
            Kind::Summary => "summary",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for text that names no kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown kind '{0}' (expected one of: episode, fact, preference, note, summary)")]
pub struct ParseKindError(pub String);

impl FromStr for Kind {
    type Err = ParseKindError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == lower)
            .ok_or_else(|| ParseKindError(s.to_string()))
    }
}

/// How much a memory matters, from 1 (trivia) to 5 (essential). The default is 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
// Read through f64 so that a JSON integer written as 3.0 (an integer to JSON Schema) is taken.
#[serde(try_from = "f64", into = "u8")]
pub struct Importance(u8);

impl Importance {
    /// The lowest importance.
    pub const MIN: Importance = Importance(1);
    /// The highest importance.
    pub const MAX: Importance = Importance(5);

    /// An importance, if `value` is within 1..=5.
    pub fn new(value: i64) -> Result<Self, InvalidImportance> {
        u8::try_from(value)
            .ok()
            .filter(|v| (1..=5).contains(v))
            .map(Importance)
            .ok_or_else(|| InvalidImportance(value.to_string()))
    }

    /// The value, 1..=5.
    pub fn get(self) -> u8 {
        self.0
    }
}

impl Default for Importance {
    fn default() -> Self {
        Importance(3)
    }
}

impl From<Importance> for u8 {
    fn from(value: Importance) -> Self {
        value.0
    }
}

impl TryFrom<i64> for Importance {
    type Error = InvalidImportance;

    fn try_from(value: i64) -> Result<Self, Self::Error> {
        Importance::new(value)
    }
}

impl TryFrom<f64> for Importance {
    type Error = InvalidImportance;

    fn try_from(value: f64) -> Result<Self, Self::Error> {
        if value.fract() == 0.0 && (1.0..=5.0).contains(&value) {
            // Exact: a whole number from 1 to 5.
            #[allow(clippy::cast_possible_truncation)]
            return Importance::new(value as i64);
        }
        Err(InvalidImportance(value.to_string()))
    }
}

impl fmt::Display for Importance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The error for an importance outside 1..=5 (or not a number at all): what was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("importance must be an integer from 1 to 5, got {0}")]
pub struct InvalidImportance(pub String);

impl FromStr for Importance {
    type Err = InvalidImportance;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let given = s.trim();
        let value: i64 = given
            .parse()
            .map_err(|_| InvalidImportance(given.to_string()))?;
        Importance::new(value)
    }
}

/// Whose memory this is: always a user, optionally narrowed to one agent and one session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Scope {
    /// The user the memory belongs to (required).
    pub user_id: String,
    /// The agent that holds it, when memories are kept per agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The conversation it came from, when it belongs to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl Scope {
    /// A scope covering everything of one user.
    pub fn user(user_id: impl Into<String>) -> Self {
        Self {
            user_id: user_id.into(),
            agent_id: None,
            session_id: None,
        }
    }

    /// Narrows the scope to one agent.
    pub fn with_agent(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// Narrows the scope to one session.
    pub fn with_session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Checks that the ids are usable: a non-empty user, no empty or oversized parts.
    pub fn validate(&self) -> Result<(), InvalidMemory> {
        validate_id("user_id", &self.user_id)?;
        if let Some(agent) = &self.agent_id {
            validate_id("agent_id", agent)?;
        }
        if let Some(session) = &self.session_id {
            validate_id("session_id", session)?;
        }
        Ok(())
    }
}

/// Checks a memory's text can be stored: not blank, within [`MAX_TEXT_BYTES`], no NUL
/// character (which some engines cannot store, so none does).
pub fn validate_text(text: &str) -> Result<(), InvalidMemory> {
    if text.trim().is_empty() {
        return Err(InvalidMemory::EmptyText);
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(InvalidMemory::TextTooLong(text.len()));
    }
    validate_no_nul("text", text)
}

/// Refuses a NUL character in a field of free text: PostgreSQL cannot store one in text, so
/// no engine takes one, and a store copies to any engine. (Metadata is JSON, where a NUL is
/// the escape `\u0000`, which every engine keeps.)
pub fn validate_no_nul(field: &'static str, value: &str) -> Result<(), InvalidMemory> {
    if value.contains('\0') {
        return Err(InvalidMemory::NulCharacter(field));
    }
    Ok(())
}

fn validate_id(field: &'static str, value: &str) -> Result<(), InvalidMemory> {
    if value.trim().is_empty() {
        return Err(InvalidMemory::EmptyId(field));
    }
    if value.len() > MAX_ID_BYTES {
        return Err(InvalidMemory::IdTooLong(field, value.len()));
    }
    if value.chars().any(char::is_control) {
        return Err(InvalidMemory::ControlCharInId(field));
    }
    Ok(())
}

/// Why a memory could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidMemory {
    /// The text is empty or only whitespace.
    #[error("text is empty")]
    EmptyText,
    /// The text is larger than [`MAX_TEXT_BYTES`].
    #[error("text is {0} bytes, more than the limit of {MAX_TEXT_BYTES}")]
    TextTooLong(usize),
    /// A scope id is empty.
    #[error("{0} is empty")]
    EmptyId(&'static str),
    /// A scope id is larger than [`MAX_ID_BYTES`].
    #[error("{0} is {1} bytes, more than the limit of {MAX_ID_BYTES}")]
    IdTooLong(&'static str, usize),
    /// A scope id contains a control character.
    #[error("{0} contains a control character")]
    ControlCharInId(&'static str),
    /// A free-text field contains a NUL character.
    #[error("{0} contains a NUL character")]
    NulCharacter(&'static str),
    /// valid_to is before valid_from.
    #[error("valid_to is before valid_from")]
    ClosedBeforeOpened,
    /// The id asked for is already used by a memory of another user (an add that names its id,
    /// as an import of an export does, never takes or touches another user's memory).
    #[error("id {0} is already used by a memory of another user")]
    IdOfAnotherUser(MemoryId),
}

/// One remembered thing, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Sortable identity.
    pub id: MemoryId,
    /// Whose memory it is.
    #[serde(flatten)]
    pub scope: Scope,
    /// What sort of memory.
    pub kind: Kind,
    /// The remembered text.
    pub text: String,
    /// Free-text category such as `user_info`, `decision`, `task_result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// 1..=5.
    pub importance: Importance,
    /// Caller-supplied JSON object, kept as given.
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// When the remembered thing happened or was said (may predate storing it).
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
    /// From when the memory holds.
    pub valid_from: Timestamp,
    /// When it stopped holding; a closed memory is kept but hidden from search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_to: Option<Timestamp>,
    /// When it should be forgotten on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    /// Where it came from (`cli`, `import`, `extraction`, `api`, ...).
    pub source: String,
    /// Hash of scope and normalised text; the same text is not stored twice in one scope.
    pub content_hash: String,
}

impl Memory {
    /// True when the memory has been closed or has expired at `now`.
    pub fn is_closed_at(&self, now: Timestamp) -> bool {
        self.valid_to.is_some_and(|t| t <= now) || self.expires_at.is_some_and(|t| t <= now)
    }
}

/// A memory about to be stored. Fields left `None` get defaults when stored.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    /// Use this id instead of a fresh one (imports of exported data keep their ids).
    pub id: Option<MemoryId>,
    /// Whose memory it is.
    pub scope: Scope,
    /// What sort of memory.
    pub kind: Kind,
    /// The text to remember.
    pub text: String,
    /// Free-text category.
    pub category: Option<String>,
    /// 1..=5.
    pub importance: Importance,
    /// A JSON object, stored as given.
    pub metadata: Map<String, Value>,
    /// When it happened; defaults to now.
    pub created_at: Option<Timestamp>,
    /// When the record last changed; defaults to now (exports carry it so a re-import is identical).
    pub updated_at: Option<Timestamp>,
    /// From when it holds; defaults to `created_at`.
    pub valid_from: Option<Timestamp>,
    /// Already closed (imports of exported history).
    pub valid_to: Option<Timestamp>,
    /// Forget on its own at this time.
    pub expires_at: Option<Timestamp>,
    /// Where it came from.
    pub source: String,
}

impl NewMemory {
    /// An episode-kind memory with default fields; adjust with the `with_*` methods.
    pub fn new(scope: Scope, text: impl Into<String>) -> Self {
        Self {
            id: None,
            scope,
            kind: Kind::Episode,
            text: text.into(),
            category: None,
            importance: Importance::default(),
            metadata: Map::new(),
            created_at: None,
            updated_at: None,
            valid_from: None,
            valid_to: None,
            expires_at: None,
            source: "api".to_string(),
        }
    }

    /// Sets the kind.
    pub fn with_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets the category.
    pub fn with_category(mut self, category: impl Into<String>) -> Self {
        self.category = Some(category.into());
        self
    }

    /// Sets the importance.
    pub fn with_importance(mut self, importance: Importance) -> Self {
        self.importance = importance;
        self
    }

    /// Sets the time the remembered thing happened.
    pub fn at(mut self, created_at: Timestamp) -> Self {
        self.created_at = Some(created_at);
        self
    }

    /// Sets the source.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// Adds one metadata entry.
    pub fn with_meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// Checks the memory can be stored as it is.
    pub fn validate(&self) -> Result<(), InvalidMemory> {
        self.scope.validate()?;
        validate_text(&self.text)?;
        if let Some(category) = &self.category {
            validate_no_nul("category", category)?;
        }
        validate_no_nul("source", &self.source)?;
        let from = self.valid_from.or(self.created_at);
        if let (Some(from), Some(to)) = (from, self.valid_to)
            && to < from
        {
            return Err(InvalidMemory::ClosedBeforeOpened);
        }
        Ok(())
    }

    /// The content hash this memory will be stored under.
    pub fn content_hash(&self) -> String {
        content_hash(&self.scope, &self.text)
    }
}

/// Whitespace-normalised text: trimmed, with every run of whitespace turned into one space.
/// Two texts that normalise alike are the same memory.
pub fn normalize_text(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Hash of a memory's scope and normalised text (hex, 128 bits of BLAKE3).
pub fn content_hash(scope: &Scope, text: &str) -> String {
    let mut hasher = blake3::Hasher::new();
    for part in [
        scope.user_id.as_str(),
        scope.agent_id.as_deref().unwrap_or(""),
        scope.session_id.as_deref().unwrap_or(""),
        normalize_text(text).as_str(),
    ] {
        // Length-prefix every part so ("ab","c") and ("a","bc") differ.
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    let hash = hasher.finalize();
    hash.to_hex()[..32].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kinds_parse_case_insensitively_and_round_trip() {
        for kind in Kind::ALL {
            assert_eq!(kind.as_str().parse::<Kind>().unwrap(), kind);
            assert_eq!(kind.as_str().to_uppercase().parse::<Kind>().unwrap(), kind);
        }
        let err = "memo".parse::<Kind>().unwrap_err();
        assert!(err.to_string().contains("episode, fact"));
    }

    #[test]
    fn importance_is_bounded() {
        assert!(Importance::new(0).is_err());
        assert!(Importance::new(6).is_err());
        assert_eq!(Importance::new(5).unwrap().get(), 5);
        assert_eq!(Importance::default().get(), 3);
        assert!(serde_json::from_str::<Importance>("9").is_err());
        assert_eq!(serde_json::from_str::<Importance>("2").unwrap().get(), 2);
        // JSON Schema counts 4.0 as an integer; a fraction or a string is still refused.
        assert_eq!(serde_json::from_str::<Importance>("4.0").unwrap().get(), 4);
        for refused in ["2.5", "\"3\"", "1e300", "-1.0"] {
            assert!(
                serde_json::from_str::<Importance>(refused).is_err(),
                "{refused}"
            );
        }
        // The message repeats what was given, however far out of range or unreadable.
        for given in ["99999999999999999999", "-7", "high"] {
            let err = given.parse::<Importance>().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("importance must be an integer from 1 to 5, got {given}")
            );
        }
    }

    #[test]
    fn ids_are_sortable_by_creation() {
        let a = MemoryId::new();
        let b = MemoryId::new();
        assert!(a < b);
        assert!(a.to_string() < b.to_string());
        assert_eq!(a.to_string().parse::<MemoryId>().unwrap(), a);
        assert!("not-an-id".parse::<MemoryId>().is_err());
    }

    #[test]
    fn hash_depends_on_scope_and_normalised_text() {
        let alice = Scope::user("alice");
        let bob = Scope::user("bob");
        assert_eq!(
            content_hash(&alice, "likes  tea\n"),
            content_hash(&alice, " likes tea")
        );
        assert_ne!(
            content_hash(&alice, "likes tea"),
            content_hash(&bob, "likes tea")
        );
        assert_ne!(
            content_hash(&alice, "likes tea"),
            content_hash(&alice.clone().with_session("s1"), "likes tea")
        );
        assert_ne!(
            content_hash(&alice, "likes tea"),
            content_hash(&alice, "Likes tea")
        );
    }

    #[test]
    fn validation_names_the_problem() {
        let empty = NewMemory::new(Scope::user("u"), "   ");
        assert_eq!(empty.validate(), Err(InvalidMemory::EmptyText));
        let no_user = NewMemory::new(Scope::user(""), "x");
        assert_eq!(no_user.validate(), Err(InvalidMemory::EmptyId("user_id")));
        let big = NewMemory::new(Scope::user("u"), "x".repeat(MAX_TEXT_BYTES + 1));
        assert!(matches!(big.validate(), Err(InvalidMemory::TextTooLong(_))));
    }

    proptest! {
        #[test]
        fn normalising_is_idempotent(text in "\\PC{0,64}") {
            let once = normalize_text(&text);
            prop_assert_eq!(normalize_text(&once), once.clone());
            prop_assert!(!once.starts_with(' ') && !once.ends_with(' '));
        }
    }
}
