//! The prompts engram sends to the model for memory work, kept as readable files under
//! `prompts/` in this crate. Each file starts with a version line
//! (`<!-- engram prompt: NAME, version N -->`) that is not sent to the model; `{{name}}`
//! placeholders are filled in by [`Prompt::render`].

/// One prompt file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prompt {
    /// The prompt's name (its file name without `.md`).
    pub name: &'static str,
    source: &'static str,
}

/// Episodes from a conversation: `{"episodes": [{"summary", "category", "importance"}]}`.
pub const EXTRACT_EPISODES: Prompt = Prompt {
    name: "extract_episodes",
    source: include_str!("../prompts/extract_episodes.md"),
};

/// Facts and preferences from a conversation: `{"facts": [...], "preferences": [...]}`.
pub const EXTRACT_PROFILE: Prompt = Prompt {
    name: "extract_profile",
    source: include_str!("../prompts/extract_profile.md"),
};

/// ADD / UPDATE / DELETE / NONE for new profile entries against the nearest known ones.
pub const MERGE: Prompt = Prompt {
    name: "merge",
    source: include_str!("../prompts/merge.md"),
};

/// Condensing a bloated profile into fewer entries.
pub const COMPACT: Prompt = Prompt {
    name: "compact",
    source: include_str!("../prompts/compact.md"),
};

/// The heading and guidance at the top of the memory block.
pub const CONTEXT_GUIDANCE: Prompt = Prompt {
    name: "context_guidance",
    source: include_str!("../prompts/context_guidance.md"),
};

/// Scoring the best search hits against the query, 0..10 each (the rerank stage).
pub const RERANK: Prompt = Prompt {
    name: "rerank",
    source: include_str!("../prompts/rerank.md"),
};

/// Every prompt, for listing and tests.
pub const ALL: [Prompt; 6] = [
    EXTRACT_EPISODES,
    EXTRACT_PROFILE,
    MERGE,
    COMPACT,
    CONTEXT_GUIDANCE,
    RERANK,
];

impl Prompt {
    /// The version number from the file's first line (0 when the line is missing).
    pub fn version(&self) -> u32 {
        self.source
            .lines()
            .next()
            .and_then(|line| line.split("version").nth(1))
            .map(|rest| {
                rest.chars()
                    .skip_while(|c| !c.is_ascii_digit())
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|digits| digits.parse().ok())
            .unwrap_or(0)
    }

    /// The prompt text without its version line.
    pub fn text(&self) -> &'static str {
        match self.source.split_once('\n') {
            Some((first, rest)) if first.starts_with("<!--") => rest.trim_start_matches('\n'),
            _ => self.source,
        }
    }

    /// The text with each `{{name}}` replaced by its value. Values are inserted as they are
    /// (a value holding `{{...}}` is not expanded again).
    pub fn render(&self, values: &[(&str, &str)]) -> String {
        let template = self.text();
        let mut out = String::with_capacity(template.len() + 256);
        let mut rest = template;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            match after.find("}}") {
                Some(end) => {
                    let name = after[..end].trim();
                    match values.iter().find(|(n, _)| *n == name) {
                        Some((_, value)) => out.push_str(value),
                        None => out.push_str(&rest[start..start + 2 + end + 2]),
                    }
                    rest = &after[end + 2..];
                }
                None => {
                    out.push_str(&rest[start..]);
                    rest = "";
                }
            }
        }
        out.push_str(rest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prompt_is_versioned_and_named_after_its_file() {
        for prompt in ALL {
            assert!(prompt.version() >= 1, "{} has no version line", prompt.name);
            assert!(
                prompt
                    .source
                    .starts_with(&format!("<!-- engram prompt: {},", prompt.name)),
                "{}",
                prompt.name
            );
            assert!(!prompt.text().contains("engram prompt:"));
        }
    }

    #[test]
    fn extraction_prompts_say_what_not_to_extract_and_ask_for_absolute_dates() {
        for prompt in [EXTRACT_EPISODES, EXTRACT_PROFILE] {
            let text = prompt.text().to_lowercase();
            assert!(text.contains("small talk"), "{}", prompt.name);
            assert!(text.contains("explicitly"), "{}", prompt.name);
            assert!(text.contains("absolute date"), "{}", prompt.name);
            assert!(prompt.text().contains("{{date}}"), "{}", prompt.name);
        }
        assert!(
            EXTRACT_EPISODES.text().contains("without")
                || EXTRACT_EPISODES.text().contains("no result")
        );
    }

    #[test]
    fn placeholders_are_filled_and_unknown_ones_left_alone() {
        let prompt = Prompt {
            name: "t",
            source: "<!-- engram prompt: t, version 3 -->\nOn {{date}} {{ other }} {{x}} {{",
        };
        assert_eq!(prompt.version(), 3);
        assert_eq!(
            prompt.render(&[("date", "2024-05-16 {{x}}"), ("other", "B")]),
            "On 2024-05-16 {{x}} B {{x}} {{"
        );
    }

    #[test]
    fn rendered_prompts_snapshot() {
        let values = [
            ("date", "2024-05-16"),
            ("weekday", "Thursday"),
            ("yesterday", "2024-05-15"),
            ("existing", "[0] programming_language: Python 3.9"),
            ("new", "(a) programming_language: Python 3.12"),
            ("count", "1"),
            ("profile", "- fact role: backend developer"),
            ("known", "- role: backend developer"),
        ];
        for prompt in ALL {
            insta::assert_snapshot!(prompt.name, prompt.render(&values));
        }
    }
}
