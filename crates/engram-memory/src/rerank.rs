//! Reranking with the configured language model: the model reads the query and the best fused
//! hits, numbered, and scores each from 0 to 10 (prompt `prompts/rerank.md`).
//!
//! The answer is read leniently ([`engram_core::llm::lenient_json`]: code fences, prose around
//! the JSON, small syntax mistakes), and partially: a passage the model skipped, numbered
//! wrongly or scored with something that is not a number stays unscored and keeps its fused
//! place. Only an answer with no score at all is an error, and the search then keeps fusion's
//! order (see [`crate::Searcher::rerank`]).

use std::sync::Arc;

use async_trait::async_trait;
use engram_core::llm::lenient_json;
use engram_core::{ChatModel, ChatRequest, Message, RerankError, Reranker};
use serde_json::{Map, Value};

use crate::prompts;

/// Longest passage shown to the model, in characters (a long memory is cut: its beginning is
/// enough to judge it, and the prompt stays within small models' windows).
pub const PASSAGE_CHARS: usize = 400;
/// Most tokens the model may answer with per passage (`{"id": 12, "score": 10}, ` is ~12).
const ANSWER_TOKENS_PER_PASSAGE: u32 = 16;

/// The configured chat model, asked to score the candidates.
pub struct LlmReranker {
    model: Arc<dyn ChatModel>,
    name: String,
}

impl std::fmt::Debug for LlmReranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmReranker")
            .field("name", &self.name)
            .finish()
    }
}

impl LlmReranker {
    /// Reranks with `model`.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        let name = format!("llm:{}", model.info().model);
        Self { model, name }
    }
}

#[async_trait]
impl Reranker for LlmReranker {
    fn name(&self) -> &str {
        &self.name
    }

    async fn score(&self, query: &str, texts: &[String]) -> Result<Vec<Option<f64>>, RerankError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let response = self.model.chat(&rerank_request(query, texts)).await?;
        let scores = parse_scores(&response.message.content, texts.len())?;
        let scored = scores.iter().flatten().count();
        if scored < texts.len() {
            tracing::warn!(
                "{} scored {scored} of {} passages; the others keep their fused places",
                self.name,
                texts.len()
            );
        }
        Ok(scores)
    }
}

/// The request that asks the model to score `texts` against `query` (JSON mode, temperature 0).
pub fn rerank_request(query: &str, texts: &[String]) -> ChatRequest {
    let passages: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| format!("[{i}] {}", one_line(text, PASSAGE_CHARS)))
        .collect();
    // Small models tend to score only the first passage or two unless told how many there are.
    let user = format!(
        "Query: {}\n\nPassages ({}, numbered 0 to {}; score every one):\n{}",
        one_line(query, PASSAGE_CHARS),
        texts.len(),
        texts.len().saturating_sub(1),
        passages.join("\n")
    );
    let answer_tokens = u32::try_from(texts.len())
        .unwrap_or(u32::MAX)
        .saturating_mul(ANSWER_TOKENS_PER_PASSAGE)
        .saturating_add(32);
    ChatRequest::new(vec![
        Message::system(prompts::RERANK.text()),
        Message::user(user),
    ])
    .with_temperature(0.0)
    .with_max_tokens(answer_tokens)
    .json_object()
}

/// The text on one line (newlines would break the numbering), cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// The scores in a model's answer for `count` passages: `{"scores": [{"id", "score"}]}` (also
/// a bare list of such entries, a list of numbers in passage order, or `{"scores": {"0": 7}}`).
/// Entries whose number is out of range, repeated, or whose score is not a number are skipped.
/// Fails only when the answer holds no usable score at all.
pub fn parse_scores(raw: &str, count: usize) -> Result<Vec<Option<f64>>, RerankError> {
    let bad = |why: &str| {
        let excerpt: String = raw.chars().take(200).collect();
        RerankError::BadReply(format!("{why} (the answer began: {excerpt:?})"))
    };
    let found = lenient_json::find_object(raw, |m| m.contains_key("scores"))
        .and_then(|mut m| m.remove("scores"))
        .or_else(|| {
            lenient_json::parse(raw)
                .ok()
                .filter(|v| v.is_array() || v.is_object())
        });
    let Some(found) = found else {
        return Err(bad("no JSON with scores in the answer"));
    };
    let mut scores: Vec<Option<f64>> = vec![None; count];
    let mut put = |id: Option<usize>, score: Option<f64>| {
        if let (Some(id), Some(score)) = (id, score)
            && let Some(slot) = scores.get_mut(id)
            && slot.is_none()
            && score.is_finite()
        {
            *slot = Some(score);
        }
    };
    match &found {
        Value::Array(items) => {
            for (position, item) in items.iter().enumerate() {
                match item {
                    Value::Object(entry) => put(entry_id(entry), entry_score(entry)),
                    // A plain list of numbers scores the passages in order.
                    other => put(Some(position), number(other)),
                }
            }
        }
        Value::Object(map) => {
            for (key, value) in map {
                let score = match value {
                    Value::Object(entry) => entry_score(entry),
                    other => number(other),
                };
                put(index(key), score);
            }
        }
        _ => {}
    }
    if scores.iter().all(Option::is_none) {
        return Err(bad("no passage got a score"));
    }
    Ok(scores)
}

fn entry_id(entry: &Map<String, Value>) -> Option<usize> {
    ["id", "index", "passage", "number"]
        .iter()
        .find_map(|k| entry.get(*k))
        .and_then(|v| match v {
            Value::String(s) => index(s),
            other => other.as_u64().and_then(|n| usize::try_from(n).ok()),
        })
}

fn entry_score(entry: &Map<String, Value>) -> Option<f64> {
    ["score", "relevance", "rating"]
        .iter()
        .find_map(|k| entry.get(*k))
        .and_then(number)
}

/// A passage number written as `3`, `"3"` or `"[3]"`.
fn index(text: &str) -> Option<usize> {
    text.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim()
        .parse()
        .ok()
}

/// A score written as a number or as a numeric string.
fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_documented_shape_is_read() {
        let raw = r#"{"scores": [{"id": 1, "score": 9}, {"id": 0, "score": 2}]}"#;
        assert_eq!(parse_scores(raw, 2).unwrap(), [Some(2.0), Some(9.0)]);
    }

    #[test]
    fn fences_prose_strings_and_other_shapes_are_read() {
        let raw = "Sure! ```json\n{\"scores\": [{\"id\": \"[2]\", \"score\": \"7\"},]}\n```";
        assert_eq!(parse_scores(raw, 3).unwrap(), [None, None, Some(7.0)]);
        assert_eq!(
            parse_scores("[4, 8.5, 1]", 3).unwrap(),
            [Some(4.0), Some(8.5), Some(1.0)]
        );
        assert_eq!(
            parse_scores(r#"{"scores": {"1": 6, "0": {"relevance": 3}}}"#, 2).unwrap(),
            [Some(3.0), Some(6.0)]
        );
        assert_eq!(
            parse_scores(r#"[{"index": 0, "rating": 5}]"#, 2).unwrap(),
            [Some(5.0), None]
        );
    }

    #[test]
    fn out_of_range_repeated_and_non_numeric_entries_are_skipped() {
        let raw = r#"{"scores": [{"id": 0, "score": 3}, {"id": 0, "score": 9},
            {"id": 7, "score": 9}, {"id": 1, "score": "high"}, {"id": 2}]}"#;
        assert_eq!(parse_scores(raw, 3).unwrap(), [Some(3.0), None, None]);
    }

    #[test]
    fn an_answer_without_scores_is_an_error_naming_it() {
        for raw in [
            "",
            "I cannot help with that.",
            r#"{"scores": []}"#,
            "{\"x\": 1}",
        ] {
            match parse_scores(raw, 2) {
                Err(RerankError::BadReply(why)) => assert!(why.contains("answer"), "{why}"),
                other => panic!("{raw:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn passages_are_numbered_on_one_line_each_and_cut() {
        let long = "word ".repeat(200);
        let request = rerank_request("what\nnow?", &["a\nb".into(), long]);
        let user = request.messages[1].text();
        assert!(user.starts_with(
            "Query: what now?\n\nPassages (2, numbered 0 to 1; score every one):\n[0] a b\n[1] word"
        ));
        assert_eq!(user.lines().count(), 5);
        assert!(user.ends_with('…'));
        assert!(user.chars().count() < 2 * PASSAGE_CHARS);
    }

    #[test]
    fn the_request_snapshot() {
        let texts = ["<passage zero>".to_string(), "<passage one>".to_string()];
        let request = rerank_request("<query>", &texts);
        let shown: Vec<String> = request
            .messages
            .iter()
            .map(|m| format!("--- {}\n{}", m.role().as_str(), m.text()))
            .collect();
        insta::assert_snapshot!(shown.join("\n"));
    }

    proptest! {
        /// Whatever the model writes, reading it never panics and never scores a passage
        /// that does not exist.
        #[test]
        fn any_answer_reads_safely(raw in ".{0,200}", count in 0usize..8) {
            if let Ok(scores) = parse_scores(&raw, count) {
                prop_assert_eq!(scores.len(), count);
                prop_assert!(scores.iter().flatten().all(|s| s.is_finite()));
            }
        }
    }
}
