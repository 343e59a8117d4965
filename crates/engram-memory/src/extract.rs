//! Extraction: what a stretch of conversation taught us, as episodes (what happened) and profile
//! entries (facts and preferences about the user), in the shapes of the reference design:
//! `{"episodes": [{"summary", "category", "importance"}]}` and
//! `{"facts": [{"key", "value"}], "preferences": [{"key", "value"}]}`.
//!
//! The model's output is read leniently (code fences, prose around the JSON and small syntax
//! mistakes are repaired by [`engram_core::llm::lenient_json`]); entries that make no sense are
//! skipped one by one; output that still cannot be read is reported as [`UnusableOutput`] with
//! the raw text, never a panic. Relative dates left in extracted text are made absolute against
//! the conversation's time.

use std::fmt;
use std::str::FromStr;

use engram_core::llm::lenient_json;
use engram_core::{ChatRequest, Importance, Message};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde_json::{Map, Value};

use crate::prompts;
use crate::when::time_window;

/// Longest a message may be in the transcript shown to the extractor, in characters.
pub const MESSAGE_CHARS: usize = 500;
/// How many of the last messages the extractor sees.
pub const TRANSCRIPT_MESSAGES: usize = 20;
/// Longest summary or value kept, in characters (a model that rambles is cut).
const MAX_ENTRY_CHARS: usize = 1000;

/// What kind of thing an episode was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EpisodeCategory {
    /// A task carried out, and how it ended.
    TaskResult,
    /// The user praised, corrected or criticised the work.
    UserFeedback,
    /// Something failed.
    Error,
    /// Something learned that will matter later.
    Discovery,
}

impl EpisodeCategory {
    /// The name stored as the memory's category.
    pub fn as_str(self) -> &'static str {
        match self {
            EpisodeCategory::TaskResult => "task_result",
            EpisodeCategory::UserFeedback => "user_feedback",
            EpisodeCategory::Error => "error",
            EpisodeCategory::Discovery => "discovery",
        }
    }
}

impl fmt::Display for EpisodeCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EpisodeCategory {
    type Err = String;

    /// Accepts the names in any case, with spaces or hyphens for the underscore.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name: String = s
            .trim()
            .to_lowercase()
            .chars()
            .map(|c| if c == ' ' || c == '-' { '_' } else { c })
            .collect();
        match name.as_str() {
            "task_result" | "task" | "result" => Ok(EpisodeCategory::TaskResult),
            "user_feedback" | "feedback" => Ok(EpisodeCategory::UserFeedback),
            "error" | "failure" => Ok(EpisodeCategory::Error),
            "discovery" | "insight" => Ok(EpisodeCategory::Discovery),
            _ => Err(format!("unknown episode category '{s}'")),
        }
    }
}

/// One episode the model found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractedEpisode {
    /// One self-contained sentence.
    pub summary: String,
    /// What kind of episode.
    pub category: EpisodeCategory,
    /// 1..=5.
    pub importance: Importance,
}

/// One fact or preference: a key (normalised by [`normalize_key`]) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileEntry {
    /// What the entry is about, lower-case snake_case.
    pub key: String,
    /// The stated value.
    pub value: String,
}

impl ProfileEntry {
    /// The memory text for this entry: `"<key>: <value>"`.
    pub fn text(&self) -> String {
        format!("{}: {}", self.key, self.value)
    }
}

/// Facts and preferences the model found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileUpdate {
    /// Who the user is, what they use.
    pub facts: Vec<ProfileEntry>,
    /// How they want things done.
    pub preferences: Vec<ProfileEntry>,
    /// Known entries the conversation says are no longer true (the value may be empty when
    /// the model named only the key).
    pub ended: Vec<ProfileEntry>,
}

impl ProfileUpdate {
    /// True when nothing was found.
    pub fn is_empty(&self) -> bool {
        self.facts.is_empty() && self.preferences.is_empty() && self.ended.is_empty()
    }
}

/// Model output that could not be used at all; the raw text is kept for the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the model's {what} output is not usable ({reason})")]
pub struct UnusableOutput {
    /// Which call it answered (`episodes`, `profile`, `merge`, `compact`).
    pub what: &'static str,
    /// Why it could not be used.
    pub reason: String,
    /// The text as the model wrote it.
    pub raw: String,
}

/// The conversation as the extractor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    /// `user: ...` / `assistant: ...` lines.
    pub text: String,
    /// How many user messages it holds.
    pub user_messages: usize,
}

/// The transcript for extraction: user and assistant messages only (system and tool messages
/// are left out, and assistant messages with no text), each cut to [`MESSAGE_CHARS`], the last
/// [`TRANSCRIPT_MESSAGES`]. One user message is enough: whether it holds anything worth keeping
/// is for the model to say. `None` only when no user message has text (nothing the user said
/// can be learned).
pub fn transcript(messages: &[Message]) -> Option<Transcript> {
    let spoken = crate::grounding::spoken(messages);
    let start = spoken.len().saturating_sub(TRANSCRIPT_MESSAGES);
    let shown = &spoken[start..];
    let user_messages = shown.iter().filter(|(is_user, _)| *is_user).count();
    if user_messages == 0 {
        return None;
    }
    let mut text = String::new();
    for (is_user, content) in shown {
        text.push_str(if *is_user { "user" } else { "assistant" });
        text.push_str(": ");
        text.push_str(&cut(content, MESSAGE_CHARS));
        text.push('\n');
    }
    Some(Transcript {
        text,
        user_messages,
    })
}

/// `text` cut to `max` characters, with an ellipsis when something was cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

fn date_values(now: Timestamp, tz: &TimeZone) -> (String, String, String) {
    let today = now.to_zoned(tz.clone()).date();
    let yesterday = today.checked_sub(1.day()).unwrap_or(today);
    (
        today.to_string(),
        format!("{:?}", today.weekday()),
        yesterday.to_string(),
    )
}

fn extraction_request(
    prompt: prompts::Prompt,
    transcript: &Transcript,
    now: Timestamp,
    tz: &TimeZone,
    known: &str,
) -> ChatRequest {
    let (date, weekday, yesterday) = date_values(now, tz);
    let system = prompt.render(&[
        ("date", &date),
        ("weekday", &weekday),
        ("yesterday", &yesterday),
        ("known", known),
    ]);
    ChatRequest::new(vec![
        Message::system(system),
        Message::user(format!("The conversation ({date}):\n\n{}", transcript.text)),
    ])
    .with_temperature(0.0)
    .json_object()
}

/// The request that asks for episodes (JSON mode).
pub fn episodes_request(transcript: &Transcript, now: Timestamp, tz: &TimeZone) -> ChatRequest {
    extraction_request(prompts::EXTRACT_EPISODES, transcript, now, tz, "")
}

/// The request that asks for facts and preferences (JSON mode). `known` lists the current
/// profile entries (`key: value` texts), so the model reuses their keys and can say which ones
/// the conversation ends.
pub fn profile_request(
    transcript: &Transcript,
    known: &[String],
    now: Timestamp,
    tz: &TimeZone,
) -> ChatRequest {
    let known = if known.is_empty() {
        "(nothing yet)".to_string()
    } else {
        known
            .iter()
            .map(|k| format!("- {k}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    extraction_request(prompts::EXTRACT_PROFILE, transcript, now, tz, &known)
}

/// Finds the list under `field` in the model's output: `{"field": [...]}` anywhere in the text,
/// or a bare list. `Ok(None)` when the output says nothing (empty text or a null list).
pub(crate) fn find_list(
    raw: &str,
    what: &'static str,
    fields: &[&str],
) -> Result<Option<Map<String, Value>>, UnusableOutput> {
    let unusable = |reason: &str| UnusableOutput {
        what,
        reason: reason.to_string(),
        raw: raw.to_string(),
    };
    if raw.trim().is_empty() {
        return Ok(None);
    }
    if let Some(map) = lenient_json::find_object(raw, |m| fields.iter().any(|f| m.contains_key(*f)))
    {
        return Ok(Some(map));
    }
    // A bare list is what the single field would hold.
    if let Ok(Value::Array(items)) = lenient_json::parse(raw)
        && fields.len() == 1
    {
        let mut map = Map::new();
        map.insert(fields[0].to_string(), Value::Array(items));
        return Ok(Some(map));
    }
    if lenient_json::extract_object(raw).is_some() {
        return Err(unusable(&format!(
            "a JSON object without {}",
            fields.join(" or ")
        )));
    }
    Err(unusable("no JSON object in the answer"))
}

fn items<'a>(
    map: &'a Map<String, Value>,
    field: &str,
    what: &'static str,
    raw: &str,
) -> Result<Vec<&'a Value>, UnusableOutput> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items.iter().collect()),
        // One entry where a list was expected.
        Some(one @ Value::Object(_)) => Ok(vec![one]),
        Some(other) => Err(UnusableOutput {
            what,
            reason: format!("'{field}' is {} instead of a list", json_type(other)),
            raw: raw.to_string(),
        }),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A JSON value as plain text: strings as they are, numbers and booleans spelled, lists joined
/// with ", ". `None` for null, objects and empty text.
pub(crate) fn plain_text(value: &Value) -> Option<String> {
    let text = match value {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => items
            .iter()
            .filter_map(plain_text)
            .collect::<Vec<_>>()
            .join(", "),
        Value::Null | Value::Object(_) => return None,
    };
    let text = engram_core::normalize_text(&text);
    (!text.is_empty()).then(|| cut(&text, MAX_ENTRY_CHARS))
}

fn importance_of(value: Option<&Value>) -> Importance {
    let number = match value {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match number {
        Some(n) if n.is_finite() => {
            // Rounded and clamped: a model that says 7 means "very".
            Importance::new(n.round().clamp(1.0, 5.0) as i64).unwrap_or_default()
        }
        _ => Importance::default(),
    }
}

/// Reads the episodes answer. Entries without a summary or with an unknown category are skipped;
/// a missing or odd importance becomes 3 (numbers are rounded into 1..=5).
pub fn parse_episodes(raw: &str) -> Result<Vec<ExtractedEpisode>, UnusableOutput> {
    let Some(map) = find_list(raw, "episodes", &["episodes"])? else {
        return Ok(Vec::new());
    };
    let mut episodes = Vec::new();
    for item in items(&map, "episodes", "episodes", raw)? {
        let (summary, category, importance) = match item {
            Value::Object(entry) => (
                entry
                    .get("summary")
                    .or_else(|| entry.get("text"))
                    .and_then(plain_text),
                entry
                    .get("category")
                    .and_then(Value::as_str)
                    .map(str::parse::<EpisodeCategory>),
                importance_of(entry.get("importance")),
            ),
            Value::String(_) => (plain_text(item), None, Importance::default()),
            _ => continue,
        };
        let Some(summary) = summary else { continue };
        let category = match category {
            Some(Ok(category)) => category,
            // No category given: a plain account of what happened.
            None => EpisodeCategory::TaskResult,
            Some(Err(_)) => continue,
        };
        if episodes
            .iter()
            .any(|e: &ExtractedEpisode| e.summary.eq_ignore_ascii_case(&summary))
        {
            continue;
        }
        episodes.push(ExtractedEpisode {
            summary,
            category,
            importance,
        });
    }
    Ok(episodes)
}

/// Reads profile entries from `field` of `map`: `[{"key", "value"}]`, or an object of
/// key → value. Entries without a usable key or value are skipped; a later entry with the same
/// key replaces an earlier one.
pub(crate) fn profile_entries(map: &Map<String, Value>, field: &str) -> Vec<ProfileEntry> {
    entries_of(map, field, false)
}

/// As [`profile_entries`]; with `value_optional`, an entry with a key and no value is kept with
/// an empty value.
fn entries_of(map: &Map<String, Value>, field: &str, value_optional: bool) -> Vec<ProfileEntry> {
    let mut entries: Vec<ProfileEntry> = Vec::new();
    let mut push = |key: Option<String>, value: Option<String>| {
        let value = if value_optional {
            Some(value.unwrap_or_default())
        } else {
            value
        };
        if let (Some(key), Some(value)) = (key.as_deref().and_then(normalize_key), value) {
            entries.retain(|e| e.key != key);
            entries.push(ProfileEntry { key, value });
        }
    };
    match map.get(field) {
        Some(Value::Array(list)) => {
            for item in list {
                if let Value::Object(entry) = item {
                    let key = entry.get("key").and_then(plain_text);
                    let value = entry.get("value").and_then(plain_text);
                    push(key, value);
                }
            }
        }
        Some(Value::Object(object)) => {
            for (key, value) in object {
                push(Some(key.clone()), plain_text(value));
            }
        }
        _ => {}
    }
    entries
}

/// Reads the facts-and-preferences answer.
pub fn parse_profile(raw: &str) -> Result<ProfileUpdate, UnusableOutput> {
    let Some(map) = find_list(raw, "profile", &["facts", "preferences", "ended"])? else {
        return Ok(ProfileUpdate::default());
    };
    for field in ["facts", "preferences", "ended"] {
        if let Some(value) = map.get(field)
            && !matches!(value, Value::Array(_) | Value::Object(_) | Value::Null)
        {
            return Err(UnusableOutput {
                what: "profile",
                reason: format!("'{field}' is {} instead of a list", json_type(value)),
                raw: raw.to_string(),
            });
        }
    }
    Ok(ProfileUpdate {
        facts: profile_entries(&map, "facts"),
        preferences: profile_entries(&map, "preferences"),
        ended: entries_of(&map, "ended", true),
    })
}

/// A profile key as stored: trimmed, lower-case, words joined by `_`. `None` when nothing is
/// left. "Programming Language" and "programming-language" are the same key.
pub fn normalize_key(key: &str) -> Option<String> {
    let words: Vec<String> = key
        .split(|c: char| c.is_whitespace() || c == '_' || c == '-')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let key = words.join("_");
    (!key.is_empty() && key.len() <= 100).then_some(key)
}

/// Makes relative dates in extracted text absolute: "yesterday" becomes
/// "yesterday (2024-05-15)", "last week" becomes "last week (week of 2024-05-06)", read in `tz`
/// at `now` (the conversation's time). Phrases that already name a year, and vague ones
/// ("recently"), are left as they are.
pub fn resolve_relative_dates(text: &str, now: Timestamp, tz: &TimeZone) -> String {
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text;
    // Each round annotates the first phrase in `rest`, then continues after it.
    for _ in 0..16 {
        let Some(window) = time_window(rest, now, tz) else {
            break;
        };
        let Some((start, end)) = find_phrase(rest, &window.phrase) else {
            break;
        };
        out.push_str(&rest[..end]);
        let vague = matches!(window.phrase.as_str(), "recently" | "lately");
        let names_year = window
            .phrase
            .split(' ')
            .any(|w| w.len() == 4 && w.chars().all(|c| c.is_ascii_digit()));
        let already = rest[end..].trim_start().starts_with('(');
        if !vague && !names_year && !already && start < end {
            out.push_str(" (");
            out.push_str(&describe_window(window.since, window.until, tz));
            out.push(')');
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Where the words of `phrase` (lower-case, space-separated) occur in `text`, as a byte range
/// from the first word's start to the last word's end.
fn find_phrase(text: &str, phrase: &str) -> Option<(usize, usize)> {
    let wanted: Vec<&str> = phrase.split(' ').collect();
    let mut words: Vec<(usize, usize)> = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                words.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        words.push((s, text.len()));
    }
    words.windows(wanted.len()).find_map(|run| {
        run.iter()
            .zip(&wanted)
            .all(|((s, e), w)| text[*s..*e].to_lowercase() == *w)
            .then(|| (run[0].0, run[run.len() - 1].1))
    })
}

/// A window as a reader wants it: one day as its date, a week as "week of <monday>", a month as
/// YYYY-MM, a year as YYYY, anything else as a range.
fn describe_window(since: Timestamp, until: Timestamp, tz: &TimeZone) -> String {
    let from = since.to_zoned(tz.clone()).date();
    let to = until.to_zoned(tz.clone()).date();
    let days = from.until(to).map(|s| s.get_days()).unwrap_or(0);
    if from.checked_add(1.day()).ok() == Some(to) {
        from.to_string()
    } else if days == 7 {
        format!("week of {from}")
    } else if from.day() == 1 && from.checked_add(1.month()).ok() == Some(to) {
        format!("{:04}-{:02}", from.year(), from.month())
    } else if from.day() == 1 && from.month() == 1 && from.checked_add(1.year()).ok() == Some(to) {
        format!("{:04}", from.year())
    } else {
        let last = to.checked_sub(1.day()).unwrap_or(to);
        format!("{from} to {last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn now() -> Timestamp {
        // A Thursday.
        "2024-05-16T15:00:00Z".parse().unwrap()
    }

    fn conversation(exchanges: usize) -> Vec<Message> {
        let mut messages = vec![Message::system("You are helpful.")];
        for i in 0..exchanges {
            messages.push(Message::user(format!("question {i}")));
            messages.push(Message::tool_result("call", "tool output"));
            messages.push(Message::assistant(format!("answer {i}")));
        }
        messages
    }

    #[test]
    fn one_user_message_is_a_transcript_and_only_spoken_messages_are_kept() {
        let one = transcript(&[Message::user("Please remember: I'm allergic to peanuts")]).unwrap();
        assert_eq!(one.text, "user: Please remember: I'm allergic to peanuts\n");
        assert_eq!(one.user_messages, 1);
        assert_eq!(
            transcript(&[Message::assistant("hello"), Message::user("  ")]),
            None
        );
        assert_eq!(transcript(&[]), None);
        let t = transcript(&conversation(2)).unwrap();
        assert_eq!(t.user_messages, 2);
        assert_eq!(
            t.text,
            "user: question 0\nassistant: answer 0\nuser: question 1\nassistant: answer 1\n"
        );
        assert!(!t.text.contains("tool output") && !t.text.contains("helpful"));
    }

    #[test]
    fn transcripts_keep_the_last_twenty_messages_cut_to_500_chars() {
        let mut messages = conversation(15);
        messages.push(Message::user("é".repeat(800)));
        messages.push(Message::assistant("ok"));
        let t = transcript(&messages).unwrap();
        assert_eq!(t.text.lines().count(), TRANSCRIPT_MESSAGES);
        let long = t.text.lines().find(|l| l.contains('é')).unwrap();
        assert_eq!(long.chars().count(), "user: ".len() + MESSAGE_CHARS + 1);
        assert!(!t.text.contains("question 0\n"));
    }

    #[test]
    fn requests_ask_for_json_and_carry_the_conversation_date() {
        let t = transcript(&conversation(2)).unwrap();
        let request = episodes_request(&t, now(), &TimeZone::UTC);
        let profile = profile_request(&t, &["diet: vegetarian".into()], now(), &TimeZone::UTC);
        assert!(profile.messages[0].text().contains("- diet: vegetarian"));
        let empty = profile_request(&t, &[], now(), &TimeZone::UTC);
        assert!(empty.messages[0].text().contains("(nothing yet)"));
        assert_eq!(
            request.response_format,
            engram_core::llm::ResponseFormat::JsonObject
        );
        let system = request.messages[0].text();
        assert!(system.contains("2024-05-16 (Thursday)") && system.contains("2024-05-15"));
        assert!(request.messages[1].text().contains("user: question 1"));
    }

    #[test]
    fn episodes_are_read_through_fences_prose_and_small_mistakes() {
        let answers = [
            r#"{"episodes": [{"summary": "Deployed the API", "category": "task_result", "importance": 4}]}"#,
            "```json\n{\"episodes\": [{\"summary\": \"Deployed the API\", \"category\": \"task_result\", \"importance\": 4}]}\n```",
            "Here is what I found:\n{'episodes': [{summary: 'Deployed the API', category: 'Task Result', importance: '4',},]}\nHope this helps.",
            r#"[{"summary": "Deployed the API", "category": "task-result", "importance": 4.2}]"#,
            r#"{"episodes": [{"summary": "Deployed the API", "category": "task_result", "importance": 4"#,
        ];
        for answer in answers {
            let episodes = parse_episodes(answer).unwrap_or_else(|e| panic!("{answer}: {e}"));
            assert_eq!(
                episodes,
                vec![ExtractedEpisode {
                    summary: "Deployed the API".into(),
                    category: EpisodeCategory::TaskResult,
                    importance: Importance::new(4).unwrap(),
                }],
                "{answer}"
            );
        }
    }

    #[test]
    fn bad_episode_entries_are_skipped_and_importance_clamped() {
        let raw = r#"{"episodes": [
            {"summary": "", "category": "error"},
            {"summary": "Tests failed on CI", "category": "error", "importance": 9},
            {"summary": "Guessed things", "category": "speculation", "importance": 2},
            {"summary": "Found the cause", "category": "discovery", "importance": "high"},
            42
        ]}"#;
        let episodes = parse_episodes(raw).unwrap();
        assert_eq!(episodes.len(), 2);
        assert_eq!(episodes[0].importance.get(), 5);
        assert_eq!(episodes[1].importance.get(), 3);
    }

    #[test]
    fn empty_answers_mean_nothing_and_garbage_is_reported_with_its_text() {
        assert_eq!(parse_episodes("").unwrap(), vec![]);
        assert_eq!(parse_episodes("{\"episodes\": []}").unwrap(), vec![]);
        assert_eq!(parse_episodes("{\"episodes\": null}").unwrap(), vec![]);
        let err = parse_episodes("I could not find anything worth noting.").unwrap_err();
        assert_eq!(err.raw, "I could not find anything worth noting.");
        assert!(err.to_string().contains("episodes"));
        assert!(parse_episodes("{\"answer\": 1}").is_err());
        assert!(parse_episodes("{\"episodes\": \"none\"}").is_err());
        assert!(parse_profile("\u{0}\u{1}garbage{{{").is_err());
    }

    #[test]
    fn profiles_are_read_as_lists_or_objects_with_normalised_keys() {
        let raw = r#"Sure! ```json
{"facts": [{"key": "Programming Language", "value": "Python 3.12"},
           {"key": "web framework", "value": ["FastAPI", "Starlette"]},
           {"key": "", "value": "x"}, {"key": "age"}],
 "preferences": {"Answer-Style": "short answers", "tabs": true}}
```"#;
        let profile = parse_profile(raw).unwrap();
        assert_eq!(
            profile.facts,
            vec![
                ProfileEntry {
                    key: "programming_language".into(),
                    value: "Python 3.12".into()
                },
                ProfileEntry {
                    key: "web_framework".into(),
                    value: "FastAPI, Starlette".into()
                },
            ]
        );
        assert_eq!(profile.preferences.len(), 2);
        assert_eq!(profile.preferences[0].text(), "answer_style: short answers");
        assert_eq!(profile.preferences[1].text(), "tabs: true");
        let ended = parse_profile(
            r#"{"facts": [], "ended": [{"key": "Diet", "value": "vegetarian"}, {"key": "car"}]}"#,
        )
        .unwrap();
        assert_eq!(ended.ended.len(), 2);
        assert_eq!(ended.ended[1].value, "");
        assert!(parse_profile(r#"{"ended": "all"}"#).is_err());
        assert!(
            parse_profile("{\"facts\": [], \"preferences\": []}")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn relative_dates_become_absolute() {
        let tz = TimeZone::UTC;
        assert_eq!(
            resolve_relative_dates("Deployed yesterday, planned last week.", now(), &tz),
            "Deployed yesterday (2024-05-15), planned last week (week of 2024-05-06)."
        );
        assert_eq!(
            resolve_relative_dates(
                "Moved to Berlin last month; 3 days ago it rained",
                now(),
                &tz
            ),
            "Moved to Berlin last month (2024-04); 3 days ago (2024-05-13) it rained"
        );
        assert_eq!(
            resolve_relative_dates("Shipped in May 2023, recently retired", now(), &tz),
            "Shipped in May 2023, recently retired"
        );
        assert_eq!(
            resolve_relative_dates("Uses Python 3.12", now(), &tz),
            "Uses Python 3.12"
        );
        assert_eq!(
            resolve_relative_dates("Yesterday (2024-05-15) it broke", now(), &tz),
            "Yesterday (2024-05-15) it broke"
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(raw in "\\PC{0,200}") {
            let _ = parse_episodes(&raw);
            let _ = parse_profile(&raw);
        }

        #[test]
        fn date_resolution_only_adds_text(text in "[a-zA-Z0-9 ,.]{0,80}") {
            let out = resolve_relative_dates(&text, now(), &TimeZone::UTC);
            // Every original character survives in order.
            let mut chars = out.chars();
            for c in text.chars() {
                prop_assert!(chars.any(|o| o == c));
            }
        }

        #[test]
        fn keys_are_idempotent(key in "\\PC{0,40}") {
            if let Some(k) = normalize_key(&key) {
                prop_assert_eq!(normalize_key(&k), Some(k.clone()));
                prop_assert_eq!(k.to_lowercase(), k);
            }
        }
    }
}
