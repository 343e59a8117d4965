//! Token counts for budgets, with a real BPE tokenizer.
//!
//! Budgets (the memory block, the working window, the reply reserve) are stated in tokens, so
//! they are measured with `o200k_base`, the byte-pair encoding of current OpenAI models. Other
//! providers tokenise differently, but within a few percent for English text and code, which is
//! what a budget needs. The ranks are compiled into the `tiktoken-rs` crate: nothing is read from
//! disk or downloaded. The tokenizer is built once, on first use (tens of milliseconds).
//!
//! Text is encoded as ordinary text: a user who types `<|endoftext|>` gets it counted as the
//! characters it is, never as a special token.

use std::sync::OnceLock;

use engram_core::llm::Message;
use tiktoken_rs::CoreBPE;

/// Tokens a chat API adds around every message (role and separators), as OpenAI documents
/// for its chat formats.
pub const MESSAGE_OVERHEAD_TOKENS: usize = 4;

/// Tokens added around each tool call of an assistant message (id, type, name framing).
const TOOL_CALL_OVERHEAD_TOKENS: usize = 8;

/// The shared tokenizer, or `None` if the bundled ranks could not be parsed (which would be a
/// defect of the dependency; counting then falls back to an estimate instead of panicking).
fn tokenizer() -> Option<&'static CoreBPE> {
    static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::o200k_base().ok()).as_ref()
}

/// Builds the tokenizer now (about 0.2 s from its bundled ranks), so the first count on a
/// latency-sensitive path does not pay for it. Call it from a background thread at start-up.
pub fn warm_up() {
    let _ = tokenizer();
}

/// The number of tokens in `text` (o200k_base BPE).
pub fn count_tokens(text: &str) -> usize {
    if text.is_empty() {
        return 0;
    }
    match tokenizer() {
        Some(bpe) => bpe.encode_ordinary(text).len(),
        // About four bytes a token for English; only reached if the bundled ranks are broken.
        None => text.len().div_ceil(4),
    }
}

/// The tokens one message costs in a request: its text, reasoning and tool calls, plus framing.
pub fn message_tokens(message: &Message) -> usize {
    let body = match message {
        Message::Assistant(a) => {
            count_tokens(&a.content)
                + a.reasoning.as_deref().map_or(0, count_tokens)
                + a.tool_calls
                    .iter()
                    .map(|c| {
                        count_tokens(&c.name)
                            + count_tokens(&c.arguments)
                            + count_tokens(&c.id)
                            + TOOL_CALL_OVERHEAD_TOKENS
                    })
                    .sum::<usize>()
        }
        Message::Tool(t) => count_tokens(&t.content) + count_tokens(&t.tool_call_id),
        other => count_tokens(other.text()),
    };
    body + MESSAGE_OVERHEAD_TOKENS
}

/// The tokens a list of messages costs in a request.
pub fn messages_tokens(messages: &[Message]) -> usize {
    messages.iter().map(message_tokens).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::llm::{AssistantMessage, ToolCall};

    #[test]
    fn counts_match_the_o200k_encoding() {
        // Reference counts from OpenAI's tokenizer for o200k_base.
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("hello world"), 2);
        assert_eq!(
            count_tokens("The quick brown fox jumps over the lazy dog."),
            10
        );
        // Not four bytes a token: a long common word is one token, rare text is many.
        assert_eq!(count_tokens("information"), 1);
        assert!(count_tokens("zqxjvkwplm") > 2);
    }

    #[test]
    fn special_token_text_is_counted_as_ordinary_text() {
        let n = count_tokens("<|endoftext|>");
        assert!(n > 1, "counted as a special token: {n}");
    }

    #[test]
    fn messages_include_framing_and_tool_calls() {
        let user = Message::user("hello world");
        assert_eq!(message_tokens(&user), 2 + MESSAGE_OVERHEAD_TOKENS);
        let plain = Message::Assistant(AssistantMessage::text(""));
        let with_call = Message::Assistant(AssistantMessage {
            tool_calls: vec![ToolCall::new("c1", "read_file", r#"{"path":"a.txt"}"#)],
            ..AssistantMessage::default()
        });
        assert!(message_tokens(&with_call) > message_tokens(&plain) + TOOL_CALL_OVERHEAD_TOKENS);
        assert_eq!(
            messages_tokens(&[user.clone(), user.clone()]),
            2 * message_tokens(&user)
        );
    }
}
