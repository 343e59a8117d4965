//! Grounding: what the model extracted enters memory only when the conversation supports it.
//!
//! A fact or preference about the user needs the user's own words: every content word of its
//! value (after the analysis the search uses, [`engram_text`]: case and accents folded, English
//! stemmed, unspaced scripts by character) must occur in a clause of the user's messages that
//! states something: not a question ("should I move to Lisbon?"), not a supposition ("if I moved
//! to Lisbon"), and not denied ("I don't use Docker", unless the value itself says so). A value
//! with no content word of its own (`true`, `yes`) is checked through its key (`vegetarian`).
//!
//! What fails is rejected with the reason: only the assistant said it, only the extraction
//! prompt's own text says it, the user only asked or supposed it, the user denied it, or nobody
//! said it. Episodes may summarise both sides, so their words are looked for in the whole
//! conversation, and most of them must be there (an episode may not invent events).
//!
//! This is a mechanism, not a list of facts: it knows nothing of any person, place or tool.

use std::collections::HashSet;

use engram_core::Message;
use engram_text::{Token, is_stopword, tokens};

use crate::extract::ProfileEntry;

/// Words a model adds around a value that say nothing the user must have said: the subject
/// ("user"), the verb of a preference ("prefers", "likes", "uses", "wants"), time words ("now",
/// "currently") and yes/no values. Stems, as [`engram_text`] makes them.
const FILLER: &[&str] = &[
    "current", "fals", "like", "none", "now", "null", "prefer", "true", "use", "user", "want",
    "yes",
];

/// Words that make a clause a supposition rather than a statement (lowercase, as written).
const SUPPOSING: &[&str] = &[
    "if",
    "suppose",
    "supposing",
    "imagine",
    "hypothetically",
    "hypothetical",
    "wonder",
    "wondering",
    "considering",
    "maybe",
    "perhaps",
    "someday",
    "wenn",
    "falls",
    "würde",
    "si",
];

/// Two-word suppositions.
const SUPPOSING_PAIRS: &[(&str, &str)] = &[
    ("thinking", "about"),
    ("thinking", "of"),
    ("what", "if"),
    ("might", "be"),
];

/// Words that deny or end what a clause says (lowercase, as written; `n't` forms are caught by
/// their ending).
const DENYING: &[&str] = &[
    "not",
    "never",
    "anymore",
    "nicht",
    "kein",
    "keine",
    "keinen",
    "nie",
    "niemals",
    "jamais",
    "nunca",
    "stopped",
    "quit",
    "former",
    "formerly",
    "ex",
    "dropped",
    "ditched",
    "abandoned",
    "false",
    "none",
    "no",
    "ne",
    "pas",
];

/// Two-word denials.
const DENYING_PAIRS: &[(&str, &str)] = &[
    ("no", "longer"),
    ("any", "more"),
    ("used", "to"),
    ("gave", "up"),
    ("ya", "no"),
];

/// Words that say something is over, not merely not so ("I'm not vegan any more", "we dropped
/// FastAPI", "I quit smoking"); "not" alone is not among them ("I don't like Python" ends no
/// fact about Python). What a clause with one of these names can be closed without the model.
const ENDING: &[&str] = &[
    "anymore",
    "stopped",
    "quit",
    "former",
    "formerly",
    "dropped",
    "ditched",
    "abandoned",
];

/// Two-word endings.
const ENDING_PAIRS: &[(&str, &str)] = &[
    ("no", "longer"),
    ("any", "more"),
    ("used", "to"),
    ("gave", "up"),
    ("ya", "no"),
    ("nicht", "mehr"),
    ("kein", "mehr"),
];

/// True for a clause that says what the one spoken to is ("you are an AI assistant", "du bist
/// ..."): it says nothing about the user.
fn describes_the_listener(words: &[String]) -> bool {
    match words {
        [first, ..] if first == "you're" => true,
        [first, second, ..] => matches!(
            (first.as_str(), second.as_str()),
            ("you", "are" | "were") | ("du", "bist") | ("tu", "es") | ("vous", "êtes")
        ),
        _ => false,
    }
}

/// Words that tell of a change ("switched from vim", "moved from Porto"): a clause with one
/// does not state its old value again.
const CHANGING: &[&str] = &[
    "switched",
    "switch",
    "switching",
    "moved",
    "move",
    "changed",
    "change",
    "replaced",
    "instead",
    "from",
    "left",
    "upgraded",
    "downgraded",
    "became",
];

/// Words that open a question clause inside a sentence ending in `?`.
const ASKING: &[&str] = &[
    "should", "would", "could", "can", "do", "does", "did", "is", "are", "was", "were", "what",
    "how", "which", "where", "who", "why", "when", "or", "will", "shall", "any",
];

/// Why an extracted entry was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The value's words are in the assistant's messages only.
    AssistantOnly(Vec<String>),
    /// The value's words are in the extraction prompt's text, and nowhere in the conversation.
    PromptExample(Vec<String>),
    /// The user only asked about it or supposed it.
    NotStated(Vec<String>),
    /// The user said it is not so (and the value does not say that).
    Denied(Vec<String>),
    /// Nobody in the conversation said it.
    NotSaid(Vec<String>),
    /// The entry has no words to check.
    Empty,
}

impl Rejection {
    /// A short stable code for logs and reports.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::AssistantOnly(_) => "assistant_only",
            Rejection::PromptExample(_) => "prompt_example",
            Rejection::NotStated(_) => "not_stated",
            Rejection::Denied(_) => "denied",
            Rejection::NotSaid(_) => "not_said",
            Rejection::Empty => "empty",
        }
    }

    /// One line saying why.
    pub fn reason(&self) -> String {
        let words = |w: &[String]| w.join(", ");
        match self {
            Rejection::AssistantOnly(w) => {
                format!("only the assistant said it ({})", words(w))
            }
            Rejection::PromptExample(w) => format!(
                "only the extraction prompt's examples say it, not the conversation ({})",
                words(w)
            ),
            Rejection::NotStated(w) => format!(
                "the user only asked about it or supposed it, never stated it ({})",
                words(w)
            ),
            Rejection::Denied(w) => format!("the user said it is not so ({})", words(w)),
            Rejection::NotSaid(w) => {
                format!("nobody in the conversation said it ({})", words(w))
            }
            Rejection::Empty => "it has no words to check against the conversation".to_string(),
        }
    }
}

/// The user's words that support an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// Which message of the conversation (0-based, counting only user and assistant messages
    /// with text, in order).
    pub message: usize,
    /// The sentence of that message that supports it best.
    pub quote: String,
    /// True when one stating clause holds every word (not pieced together from several).
    pub in_one_clause: bool,
}

/// One clause of a user message, with what it does.
#[derive(Debug, Clone)]
struct Clause {
    sentence: usize,
    terms: HashSet<String>,
    asked_or_supposed: bool,
    denied: bool,
    changing: bool,
    ending: bool,
    /// In a clause telling of a change, the terms of what was left: the words after "from" up
    /// to "to" ("moved from Leeds to Glasgow", "switched from vim to helix").
    left: HashSet<String>,
}

/// A conversation prepared for grounding checks.
#[derive(Debug, Clone)]
pub struct Grounding {
    clauses: Vec<Clause>,
    sentences: Vec<(usize, String)>,
    user_terms: HashSet<String>,
    assistant_terms: HashSet<String>,
    prompt_terms: HashSet<String>,
}

/// The content terms of `text`: index terms of its words that are not stopwords or filler, and
/// each character of unspaced scripts.
pub fn content_terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for token in tokens(text) {
        match token {
            Token::Word { surface, term } => {
                if is_stopword(&surface) || FILLER.contains(&term.as_str()) {
                    continue;
                }
                if !out.contains(&term) {
                    out.push(term);
                }
            }
            Token::Run(chars) => {
                for c in chars {
                    let term = c.to_string();
                    if !out.contains(&term) {
                        out.push(term);
                    }
                }
            }
        }
    }
    out
}

fn all_terms(text: &str) -> HashSet<String> {
    let mut set = HashSet::new();
    engram_text::for_each_term(text, |t| {
        set.insert(t.to_string());
    });
    set
}

/// Lowercase words as written (letters, digits and apostrophes).
fn plain_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase().replace('’', "'"))
        .collect()
}

fn has_word_or_pair(words: &[String], singles: &[&str], pairs: &[(&str, &str)]) -> bool {
    words.iter().any(|w| singles.contains(&w.as_str()))
        || words
            .windows(2)
            .any(|p| pairs.iter().any(|(a, b)| p[0] == *a && p[1] == *b))
}

/// In a clause telling of a change, the terms of the words after "from" up to "to" or "into";
/// empty in any other clause.
fn left_behind(words: &[String]) -> HashSet<String> {
    // "from" alone is no change ("I'm from Porto").
    if !words
        .iter()
        .any(|w| w != "from" && CHANGING.contains(&w.as_str()))
    {
        return HashSet::new();
    }
    let Some(start) = words.iter().position(|w| w == "from") else {
        return HashSet::new();
    };
    let old: Vec<&str> = words[start + 1..]
        .iter()
        .take_while(|w| !matches!(w.as_str(), "to" | "into"))
        .map(String::as_str)
        .collect();
    all_terms(&old.join(" "))
}

/// True when the words deny or end something ("not", "don't", "no longer", ...).
fn denies(words: &[String]) -> bool {
    words
        .iter()
        .any(|w| w.ends_with("n't") || (w.starts_with("n'") && w.len() > 2))
        || has_word_or_pair(words, DENYING, DENYING_PAIRS)
}

/// True when `text` says something is over or not so ("no longer uses Docker", "false").
pub fn says_no_longer(text: &str) -> bool {
    denies(&plain_words(text))
}

/// Splits text into sentences: after `.`, `!`, `?` or `;` followed by a space or the end, at
/// line breaks, and after the full-width `。！？`.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        current.push(c);
        let ends = match c {
            '\n' | '。' | '！' | '？' => true,
            '.' | '!' | '?' | ';' => chars.peek().is_none_or(|n| n.is_whitespace()),
            _ => false,
        };
        if ends {
            let sentence = current.trim().to_string();
            if !sentence.is_empty() {
                out.push(sentence);
            }
            current.clear();
        }
    }
    let rest = current.trim();
    if !rest.is_empty() {
        out.push(rest.to_string());
    }
    out
}

/// Splits a sentence into clauses at commas, colons and dashes between words, and before "but".
fn clauses(sentence: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in sentence.chars() {
        if matches!(c, ',' | ':' | '–' | '—' | '，') {
            out.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    out.push(current);
    let mut split = Vec::new();
    for clause in out {
        let mut rest = clause.as_str();
        while let Some(at) = rest.to_lowercase().find(" but ") {
            split.push(rest[..at].to_string());
            rest = &rest[at + 1..];
        }
        split.push(rest.to_string());
    }
    split
        .into_iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

impl Grounding {
    /// Prepares `conversation` (user and assistant messages with text; others are ignored, as
    /// the extractor never sees them) and the text of the prompt the model was given (its
    /// instructions and examples, without the conversation).
    pub fn new(conversation: &[Message], prompt: &str) -> Self {
        let mut clauses_out = Vec::new();
        let mut sentences_out = Vec::new();
        let mut user_terms = HashSet::new();
        let mut assistant_terms = HashSet::new();
        let spoken = spoken(conversation);
        for (index, (is_user, text)) in spoken.iter().enumerate() {
            if !is_user {
                assistant_terms.extend(all_terms(text));
                continue;
            }
            user_terms.extend(all_terms(text));
            for sentence in sentences(text) {
                let sentence_index = sentences_out.len();
                let question = sentence.ends_with('?') || sentence.ends_with('？');
                let parts = clauses(&sentence);
                let last = parts.len().saturating_sub(1);
                for (i, clause) in parts.iter().enumerate() {
                    let words = plain_words(clause);
                    let asked = question
                        && (i == last
                            || words.first().is_some_and(|w| ASKING.contains(&w.as_str())));
                    let supposed = has_word_or_pair(&words, SUPPOSING, SUPPOSING_PAIRS)
                        || describes_the_listener(&words);
                    clauses_out.push(Clause {
                        sentence: sentence_index,
                        terms: all_terms(clause),
                        asked_or_supposed: asked || supposed,
                        denied: denies(&words),
                        changing: has_word_or_pair(&words, CHANGING, &[]),
                        ending: has_word_or_pair(&words, ENDING, ENDING_PAIRS),
                        left: left_behind(&words),
                    });
                }
                sentences_out.push((index, sentence));
            }
        }
        Self {
            clauses: clauses_out,
            sentences: sentences_out,
            user_terms,
            assistant_terms,
            prompt_terms: all_terms(prompt),
        }
    }

    /// Whether the user's words support `entry`, and which sentence does best.
    pub fn profile_entry(&self, entry: &ProfileEntry) -> Result<Support, Rejection> {
        let mut terms = content_terms(&entry.value);
        if terms.is_empty() {
            terms = content_terms(&entry.key.replace('_', " "));
        }
        self.statement(&terms, denies(&plain_words(&entry.value)))
    }

    /// Whether the user stated something with all of `terms`; `negative` when what is checked
    /// itself denies or ends something (then denying clauses support it).
    pub fn statement(&self, terms: &[String], negative: bool) -> Result<Support, Rejection> {
        if terms.is_empty() {
            return Err(Rejection::Empty);
        }
        let unsaid: Vec<String> = terms
            .iter()
            .filter(|t| !self.user_terms.contains(*t))
            .cloned()
            .collect();
        if !unsaid.is_empty() {
            return Err(if unsaid.iter().all(|t| self.assistant_terms.contains(t)) {
                Rejection::AssistantOnly(unsaid)
            } else if unsaid
                .iter()
                .all(|t| self.assistant_terms.contains(t) || self.prompt_terms.contains(t))
            {
                Rejection::PromptExample(unsaid)
            } else {
                Rejection::NotSaid(unsaid)
            });
        }
        let stating = |c: &Clause| !c.asked_or_supposed && (negative || !c.denied);
        let mut not_stated = Vec::new();
        let mut denied = Vec::new();
        for term in terms {
            let holding: Vec<&Clause> = self
                .clauses
                .iter()
                .filter(|c| c.terms.contains(term))
                .collect();
            if holding.iter().any(|c| stating(c)) {
                continue;
            }
            if holding.iter().any(|c| !c.asked_or_supposed) {
                denied.push(term.clone());
            } else {
                not_stated.push(term.clone());
            }
        }
        if !denied.is_empty() {
            return Err(Rejection::Denied(denied));
        }
        if !not_stated.is_empty() {
            return Err(Rejection::NotStated(not_stated));
        }
        // The sentence with the most of the terms in stating clauses; the latest among equals.
        let mut best: Option<(usize, usize)> = None;
        for (index, _) in self.sentences.iter().enumerate() {
            let covered = terms
                .iter()
                .filter(|t| {
                    self.clauses
                        .iter()
                        .any(|c| c.sentence == index && stating(c) && c.terms.contains(*t))
                })
                .count();
            if covered > 0 && best.is_none_or(|(_, n)| covered >= n) {
                best = Some((index, covered));
            }
        }
        let (index, _) = best.ok_or(Rejection::Empty)?;
        let (message, quote) = &self.sentences[index];
        let in_one_clause = self
            .clauses
            .iter()
            .any(|c| stating(c) && terms.iter().all(|t| c.terms.contains(t)));
        Ok(Support {
            message: *message,
            quote: crate::extract::cut(quote, 300),
            in_one_clause,
        })
    }

    /// True when one clause of the user's states all of `terms` as still so: not asked, supposed
    /// or denied, and not telling of a change ("switched from ..."). A conversation that does
    /// this for a known value has not replaced it.
    pub fn restates(&self, terms: &[String]) -> bool {
        !terms.is_empty()
            && self.clauses.iter().any(|c| {
                !c.asked_or_supposed
                    && !c.denied
                    && !c.changing
                    && terms.iter().all(|t| c.terms.contains(t))
            })
    }

    /// Whether the user said that something with `terms` is over: every term in a clause that
    /// denies or tells of a change ("I'm not vegan any more", "we dropped FastAPI", "I moved
    /// from Leeds"), not asked or supposed. A plain statement of it ("I'm a nurse") ends nothing.
    pub fn revokes(&self, terms: &[String]) -> Result<Support, Rejection> {
        if terms.is_empty() {
            return Err(Rejection::Empty);
        }
        let support = self.statement(terms, true)?;
        let revoking: Vec<String> = terms
            .iter()
            .filter(|t| {
                !self.clauses.iter().any(|c| {
                    !c.asked_or_supposed && (c.denied || c.changing) && c.terms.contains(*t)
                })
            })
            .cloned()
            .collect();
        if revoking.is_empty() {
            Ok(support)
        } else {
            Err(Rejection::NotStated(revoking))
        }
    }

    /// The user's sentence that says something with all of `terms` is over, when one clause of
    /// the user's holds every term and a word of ending ("any more", "dropped", "no longer"),
    /// or tells of a change away from them ("moved from Leeds to Glasgow"), and is not asked or
    /// supposed. Stricter than [`Grounding::revokes`], which the model's own
    /// "ended" entries pass: this one decides without the model.
    pub fn ends(&self, terms: &[String]) -> Option<Support> {
        if terms.is_empty() {
            return None;
        }
        let clause = self.clauses.iter().rev().find(|c| {
            !c.asked_or_supposed
                && ((c.ending && terms.iter().all(|t| c.terms.contains(t)))
                    || terms.iter().all(|t| c.left.contains(t)))
        })?;
        let (message, quote) = &self.sentences[clause.sentence];
        Some(Support {
            message: *message,
            quote: crate::extract::cut(quote, 300),
            in_one_clause: true,
        })
    }

    /// Whether an episode's summary is made of the conversation's words: at least
    /// `min_share` of its content words occur in some message (either side), and every word
    /// with a digit does (dates the extractor resolved, "2024-05-15", are its own and exempt).
    pub fn episode(&self, summary: &str, min_share: f64) -> Result<(), Rejection> {
        let terms: Vec<String> = content_terms(summary)
            .into_iter()
            .filter(|t| !EPISODE_FILLER.contains(&t.as_str()))
            .collect();
        if terms.is_empty() {
            return Err(Rejection::Empty);
        }
        let said = |t: &String| self.user_terms.contains(t) || self.assistant_terms.contains(t);
        let dates = resolved_date_terms(summary);
        let missing: Vec<String> = terms
            .iter()
            .filter(|t| !said(t) && !dates.contains(*t))
            .cloned()
            .collect();
        let share = 1.0 - missing.len() as f64 / terms.len() as f64;
        let numbers_missing = missing
            .iter()
            .any(|t| t.chars().any(|c| c.is_ascii_digit()));
        if share + 1e-9 < min_share || numbers_missing {
            return Err(
                if missing.iter().all(|t| self.prompt_terms.contains(t)) && !missing.is_empty() {
                    Rejection::PromptExample(missing)
                } else {
                    Rejection::NotSaid(missing)
                },
            );
        }
        Ok(())
    }
}

/// Words an episode summary uses to tell what happened, which the conversation need not hold.
const EPISODE_FILLER: &[&str] = &[
    "assist", "ask", "discuss", "explain", "help", "mention", "request", "said", "say", "suggest",
    "talk", "told", "tell",
];

/// The numbers of absolute dates (`2024-05-15`, `2024-05`) in `text`: the extractor writes them
/// for relative dates ("yesterday"), so they are its own, not invented events.
fn resolved_date_terms(text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    for word in text.split(|c: char| !(c.is_ascii_digit() || c == '-')) {
        let parts: Vec<&str> = word.split('-').collect();
        let shaped = parts.len() >= 2
            && parts.len() <= 3
            && parts[0].len() == 4
            && parts[1..].iter().all(|p| p.len() == 2)
            && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_digit()));
        if shaped {
            out.extend(parts.iter().map(|p| p.to_string()));
        }
    }
    out
}

/// User and assistant messages with text, in order: `(is_user, text)`.
pub fn spoken(conversation: &[Message]) -> Vec<(bool, &str)> {
    conversation
        .iter()
        .filter_map(|m| match m {
            Message::User { content } if !content.trim().is_empty() => Some((true, content.trim())),
            Message::Assistant(a) if !a.content.trim().is_empty() => {
                Some((false, a.content.trim()))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: &str) -> ProfileEntry {
        ProfileEntry {
            key: key.into(),
            value: value.into(),
        }
    }

    fn check(conversation: &[Message], key: &str, value: &str) -> Result<Support, Rejection> {
        Grounding::new(
            conversation,
            "Example: web_framework, editor: an editor name",
        )
        .profile_entry(&entry(key, value))
    }

    #[test]
    fn what_the_user_said_is_supported_with_its_sentence() {
        let talk = [
            Message::user("Hello there. I work as a nurse in Hamburg, mostly night shifts."),
            Message::assistant("Night shifts are hard. Have you thought about Munich?"),
        ];
        let support = check(&talk, "role", "Nurse").unwrap();
        assert_eq!(support.message, 0);
        assert_eq!(
            support.quote,
            "I work as a nurse in Hamburg, mostly night shifts."
        );
        assert!(check(&talk, "location", "hamburg").is_ok());
        assert!(check(&talk, "work_schedule", "night shifts").is_ok());
    }

    #[test]
    fn the_assistant_the_prompt_and_nobody_are_told_apart() {
        let talk = [
            Message::user("I work as a nurse in Hamburg."),
            Message::assistant("Many nurses move to Munich."),
        ];
        assert_eq!(
            check(&talk, "location", "Munich"),
            Err(Rejection::AssistantOnly(vec!["munich".into()]))
        );
        assert_eq!(
            check(&talk, "web_framework", "web framework")
                .unwrap_err()
                .code(),
            "prompt_example"
        );
        assert_eq!(
            check(&talk, "employer", "Porto General")
                .unwrap_err()
                .code(),
            "not_said"
        );
        assert_eq!(
            check(&talk, "location", "Hamburg, Germany"),
            Err(Rejection::NotSaid(vec!["germani".into()]))
        );
    }

    #[test]
    fn questions_suppositions_and_denials_are_not_statements() {
        let talk = [Message::user(
            "If I moved to Lisbon, what would rent cost? Should I learn Rust? \
             I don't use Docker. I'm not vegetarian any more",
        )];
        assert_eq!(
            check(&talk, "location", "Lisbon").unwrap_err().code(),
            "not_stated"
        );
        assert_eq!(
            check(&talk, "programming_language", "Rust")
                .unwrap_err()
                .code(),
            "not_stated"
        );
        assert_eq!(
            check(&talk, "container_tool", "Docker").unwrap_err().code(),
            "denied"
        );
        assert_eq!(
            check(&talk, "vegetarian", "true").unwrap_err().code(),
            "denied"
        );
        // A value that itself says "not" is what the user said.
        assert!(check(&talk, "container_tool", "does not use Docker").is_ok());
        assert!(check(&talk, "diet", "not vegetarian").is_ok());
    }

    #[test]
    fn a_statement_next_to_a_question_still_counts() {
        let talk = [Message::user(
            "I'm a nurse, any tips for staying awake on night shifts?",
        )];
        assert!(check(&talk, "role", "nurse").is_ok());
        assert_eq!(
            check(&talk, "schedule", "night shifts").unwrap_err().code(),
            "not_stated"
        );
        let talk = [Message::user("I don't eat meat, but I love fish")];
        assert!(check(&talk, "food", "fish").is_ok());
        assert_eq!(check(&talk, "food", "meat").unwrap_err().code(), "denied");
        assert!(check(&talk, "diet", "no meat").is_ok());
    }

    #[test]
    fn values_without_words_are_checked_through_their_key_and_filler_is_ignored() {
        let talk = [Message::user("I'm vegetarian. Keep answers short please.")];
        assert!(check(&talk, "vegetarian", "true").is_ok());
        assert!(check(&talk, "answer_style", "prefers short answers").is_ok());
        assert_eq!(check(&talk, "pets", "yes").unwrap_err().code(), "not_said");
        assert_eq!(check(&talk, "", "").unwrap_err(), Rejection::Empty);
    }

    #[test]
    fn other_languages_and_scripts_are_matched_as_the_search_matches_them() {
        let talk = [Message::user(
            "Ich arbeite als Krankenpfleger in München. 我住在北京。",
        )];
        assert!(check(&talk, "beruf", "Krankenpfleger").is_ok());
        assert!(check(&talk, "ort", "Munchen").is_ok(), "accents are folded");
        assert!(check(&talk, "location", "北京").is_ok());
        assert_eq!(
            check(&talk, "location", "上海").unwrap_err().code(),
            "not_said"
        );
        assert_eq!(
            check(&talk, "role", "nurse").unwrap_err().code(),
            "not_said"
        );
    }

    #[test]
    fn only_denials_and_changes_revoke() {
        let talk = [Message::user(
            "I'm a nurse. I'm not vegan any more. We moved from Leeds to Glasgow.",
        )];
        let g = Grounding::new(&talk, "");
        assert!(g.revokes(&content_terms("vegan")).is_ok());
        assert!(g.revokes(&content_terms("Leeds")).is_ok());
        assert_eq!(
            g.revokes(&content_terms("nurse")).unwrap_err().code(),
            "not_stated"
        );
        assert_eq!(
            g.revokes(&content_terms("Paris")).unwrap_err().code(),
            "not_said"
        );
    }

    #[test]
    fn only_words_of_ending_end_without_the_model() {
        let talk = [Message::user(
            "I'm not vegan any more. We dropped FastAPI last sprint. I don't like Python's \
             packaging. Did you ever quit Java? I moved from Leeds.",
        )];
        let g = Grounding::new(&talk, "");
        let ends = |text: &str| g.ends(&content_terms(text)).map(|s| s.quote);
        assert_eq!(ends("vegan").as_deref(), Some("I'm not vegan any more."));
        assert!(ends("FastAPI").is_some());
        assert!(ends("Python").is_none(), "a plain denial ends nothing");
        assert!(ends("Java").is_none(), "a question ends nothing");
        assert!(ends("Leeds").is_some(), "what a change left behind");
        let moved = Grounding::new(
            &[Message::user(
                "We moved from Leeds to Glasgow. I'm from Porto originally.",
            )],
            "",
        );
        assert!(
            moved.ends(&content_terms("Glasgow")).is_none(),
            "where they went"
        );
        assert!(
            moved.ends(&content_terms("Porto")).is_none(),
            "'from' without a change"
        );
        assert!(
            ends("vegan FastAPI").is_none(),
            "all the words in one clause"
        );
    }

    #[test]
    fn an_old_value_named_in_a_change_is_not_restated() {
        let talk = [Message::user(
            "I switched from vim to helix. I still write Python and Go.",
        )];
        let g = Grounding::new(&talk, "");
        assert!(!g.restates(&content_terms("vim")));
        assert!(g.restates(&content_terms("Python")));
        assert!(!g.restates(&content_terms("Rust")));
    }

    #[test]
    fn episodes_may_summarise_both_sides_but_not_invent() {
        let talk = [
            Message::user("Can you split my FastAPI app into routers?"),
            Message::assistant("Done: app/routers has one module per resource."),
        ];
        let g = Grounding::new(&talk, "");
        assert!(
            g.episode(
                "The assistant helped split the user's FastAPI app into routers, one module per resource, on 2024-05-16",
                0.6
            )
            .is_ok()
        );
        assert_eq!(
            g.episode(
                "Deployed the Django app to Kubernetes and fixed billing",
                0.6
            )
            .unwrap_err()
            .code(),
            "not_said"
        );
        assert!(g.episode("Split the app into 12 routers", 0.6).is_err());
    }

    proptest::proptest! {
        #[test]
        fn grounding_never_panics(text in "\\PC{0,120}", value in "\\PC{0,30}") {
            let talk = [Message::user(text.clone()), Message::assistant(text)];
            let g = Grounding::new(&talk, "prompt");
            let _ = g.profile_entry(&entry("k", &value));
            let _ = g.episode(&value, 0.6);
        }

        #[test]
        fn a_value_made_of_a_stated_clause_is_supported(words in proptest::collection::vec("[a-z]{3,9}", 1..6)) {
            let clause = words.join(" ");
            let talk = [Message::user(format!("{clause}."))];
            let g = Grounding::new(&talk, "");
            let value_terms = content_terms(&clause);
            let negative = denies(&plain_words(&clause));
            let result = g.profile_entry(&entry("k", &clause));
            if !value_terms.is_empty() && !has_word_or_pair(&plain_words(&clause), SUPPOSING, SUPPOSING_PAIRS) {
                proptest::prop_assert!(result.is_ok() || negative, "{clause}: {result:?}");
            }
        }
    }
}
