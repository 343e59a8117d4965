//! Turning text into index terms, and queries into FTS5 match expressions.
//!
//! engram analyses text itself instead of leaving it to an FTS5 tokenizer, for two reasons:
//!
//! - **Scope.** Every term is prefixed with a short hash of its user (`k3x9f_coffee`), so each
//!   user has posting lists of their own. A search walks only that user's postings, and BM25's
//!   document frequencies are the user's own: latency follows the size of one user's memory, not
//!   the size of the store.
//! - **Words.** The analysis is engram-text's, shared with every engine: case folded, diacritics
//!   dropped, English stemming, unspaced scripts character by character (a query's run of such
//!   characters becomes a phrase, which is substring search).
//!
//! The FTS5 table uses the `ascii` tokenizer with `_` as a token character, so the terms written
//! here reach the index unchanged.

pub use engram_text::ANALYZER_VERSION;

/// The prefix that gives a user posting lists of their own: 64 bits of BLAKE3, base 36.
/// Two users sharing a prefix would only share statistics; rows are still filtered by user.
pub fn user_prefix(user_id: &str) -> String {
    let hash = blake3::hash(user_id.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash.as_bytes()[..8]);
    let mut n = u64::from_le_bytes(bytes);
    let mut digits = Vec::with_capacity(13);
    loop {
        let d = (n % 36) as u8;
        digits.push(if d < 10 { b'0' + d } else { b'a' + d - 10 });
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8_lossy(&digits).into_owned()
}

/// The text as the index receives it: one prefixed term per word or unspaced character.
///
/// This runs for every memory stored, so it writes straight into one string.
pub fn index_text(user_id: &str, text: &str) -> String {
    let prefix = user_prefix(user_id);
    let mut out = String::with_capacity(text.len() * 2 + 16);
    engram_text::for_each_term(text, |term| {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&prefix);
        out.push('_');
        out.push_str(term);
    });
    out
}

/// The meaningful terms of a query, as the user's index terms: each alternative a list of
/// consecutive terms (one for a word, several for a phrase); see [`engram_text::query_terms`].
pub fn query_terms(user_id: &str, query: &str) -> Vec<Vec<String>> {
    let prefix = user_prefix(user_id);
    engram_text::query_terms(query)
        .into_iter()
        .map(|alt| alt.into_iter().map(|t| format!("{prefix}_{t}")).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn terms_carry_the_user_prefix() {
        let p = user_prefix("u");
        assert_eq!(
            index_text("u", "Running cafés"),
            format!("{p}_run {p}_cafe")
        );
        assert_eq!(
            query_terms("u", "What did Caroline paint? 北京"),
            [
                vec![format!("{p}_carolin")],
                vec![format!("{p}_paint")],
                vec![format!("{p}_北"), format!("{p}_京")]
            ]
        );
    }

    #[test]
    fn prefixes_differ_per_user_and_are_plain_ascii() {
        assert_ne!(user_prefix("alice"), user_prefix("bob"));
        assert!(
            user_prefix("alice@example.com")
                .bytes()
                .all(|b| b.is_ascii_alphanumeric())
        );
    }

    proptest! {
        #[test]
        fn indexed_terms_are_plain_tokens(query in "\\PC{0,80}") {
            let indexed = index_text("u", &query);
            prop_assert!(!indexed.contains(['"', '\n', '\t']));
            for term in query_terms("u", &query).iter().flatten() {
                prop_assert!(!term.contains(' '));
            }
        }
    }
}
