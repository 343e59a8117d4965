//! The context builder's assembly: candidate lines from the profile, MEMORY.md, relevant and
//! recent episodes and today's notes are deduplicated, ranked, and cut to a token budget, then
//! rendered under the guidance heading (use memory naturally, don't recite it, the user's
//! current words win). Gathering the candidates is the manager's job; this module is pure.

use std::collections::HashSet;
use std::fmt;

use engram_core::MemoryId;
use serde::Serialize;

use crate::prompts;
use crate::token_count::count_tokens;

/// Where a line of the memory block comes from. The order of the variants is the order of
/// precedence when the budget is short, and the order in which sections are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// Current facts and preferences.
    Profile,
    /// Lines of MEMORY.md, written by a person or the agent.
    LongTerm,
    /// Episodes relevant to the user's message.
    Relevant,
    /// Today's daily note.
    Today,
    /// The latest episodes not already shown.
    Recent,
}

impl Section {
    /// The section's heading in the block.
    pub fn heading(self) -> &'static str {
        match self {
            Section::Profile => "## About the user",
            Section::LongTerm => "## Long-term notes (MEMORY.md)",
            Section::Relevant => "## Earlier episodes that may be relevant",
            Section::Today => "## Today's notes",
            Section::Recent => "## Recent episodes",
        }
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Section::Profile => "profile",
            Section::LongTerm => "long_term",
            Section::Relevant => "relevant",
            Section::Today => "today",
            Section::Recent => "recent",
        })
    }
}

/// One candidate line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextItem {
    /// Where it comes from.
    pub section: Section,
    /// The line as shown (without the list marker).
    pub text: String,
    /// The text two items are compared by for duplicates (the memory's own text, without any
    /// date shown before it).
    #[serde(skip)]
    pub dedup_key: String,
    /// The memory behind it, if it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_id: Option<MemoryId>,
    /// Higher comes first within its section.
    pub rank: f64,
    /// Tokens of its line.
    pub tokens: usize,
}

impl ContextItem {
    /// A candidate whose duplicates are found by `dedup_text`.
    pub fn new(section: Section, text: impl Into<String>, dedup_text: &str, rank: f64) -> Self {
        let text = engram_core::normalize_text(&text.into());
        Self {
            section,
            tokens: count_tokens(&line(&text)),
            dedup_key: engram_core::normalize_text(dedup_text).to_lowercase(),
            text,
            memory_id: None,
            rank,
        }
    }

    /// Names the memory behind the line.
    pub fn with_memory(mut self, id: MemoryId) -> Self {
        self.memory_id = Some(id);
        self
    }
}

/// The memory block for one turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextBlock {
    /// The system message text.
    pub text: String,
    /// Its size in tokens (o200k BPE), never more than the budget.
    pub tokens: usize,
    /// The lines shown, in the order shown.
    pub parts: Vec<ContextItem>,
    /// Candidates left out as duplicates.
    pub duplicates: usize,
    /// Candidates left out for the budget.
    pub over_budget: usize,
    /// Where the time to build it went.
    pub timings: ContextTimings,
}

/// Where the time to build a block went, in microseconds (for `--explain` and benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ContextTimings {
    /// Reading MEMORY.md and indexing it when it changed.
    pub long_term_us: u64,
    /// Listing the current facts and preferences.
    pub profile_us: u64,
    /// The hybrid search for relevant episodes.
    pub relevant_us: u64,
    /// Listing the latest episodes.
    pub recent_us: u64,
    /// Reading today's daily note.
    pub today_us: u64,
    /// Deduplicating, ranking, counting tokens and rendering.
    pub assemble_us: u64,
}

impl ContextTimings {
    /// The time of `start` until now, in microseconds.
    pub fn since(start: std::time::Instant) -> u64 {
        u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

impl ContextBlock {
    /// How many lines came from `section`.
    pub fn count(&self, section: Section) -> usize {
        self.parts.iter().filter(|p| p.section == section).count()
    }
}

fn line(text: &str) -> String {
    format!("- {text}\n")
}

/// The guidance at the top of every block.
pub fn guidance() -> &'static str {
    prompts::CONTEXT_GUIDANCE.text().trim_end()
}

fn render(items: &[&ContextItem]) -> String {
    let mut text = String::from(guidance());
    text.push('\n');
    let mut sections: Vec<Section> = items.iter().map(|i| i.section).collect();
    sections.sort();
    sections.dedup();
    for section in sections {
        text.push('\n');
        text.push_str(section.heading());
        text.push('\n');
        for item in items.iter().filter(|i| i.section == section) {
            text.push_str(&line(&item.text));
        }
    }
    text
}

/// Deduplicates, ranks and cuts `candidates` to `budget` tokens (guidance and headings
/// included), and renders the block; `None` when no line fits or there are none.
pub fn assemble(mut candidates: Vec<ContextItem>, budget: usize) -> Option<ContextBlock> {
    candidates.sort_by(|a, b| a.section.cmp(&b.section).then(b.rank.total_cmp(&a.rank)));
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    let mut unique = Vec::with_capacity(candidates.len());
    for item in candidates {
        if item.text.is_empty() {
            continue;
        }
        if seen.insert(item.dedup_key.clone()) {
            unique.push(item);
        } else {
            duplicates += 1;
        }
    }

    // Greedy by precedence: a line that does not fit is skipped, a shorter later one may fit.
    let mut used = count_tokens(guidance()) + 1;
    let mut started: HashSet<Section> = HashSet::new();
    let mut chosen: Vec<&ContextItem> = Vec::new();
    let mut over_budget = 0;
    for item in &unique {
        let heading = if started.contains(&item.section) {
            0
        } else {
            count_tokens(item.section.heading()) + 2
        };
        if used + heading + item.tokens <= budget {
            used += heading + item.tokens;
            started.insert(item.section);
            chosen.push(item);
        } else {
            over_budget += 1;
        }
    }
    // The sum of parts is an estimate of the whole; the whole is what must fit.
    loop {
        if chosen.is_empty() {
            return None;
        }
        let text = render(&chosen);
        let tokens = count_tokens(&text);
        if tokens <= budget {
            return Some(ContextBlock {
                text,
                tokens,
                parts: chosen.into_iter().cloned().collect(),
                duplicates,
                over_budget,
                timings: ContextTimings::default(),
            });
        }
        chosen.pop();
        over_budget += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item(section: Section, text: &str, rank: f64) -> ContextItem {
        ContextItem::new(section, text, text, rank)
    }

    #[test]
    fn a_block_is_sectioned_deduplicated_and_ranked() {
        let block = assemble(
            vec![
                item(Section::Recent, "2024-05-15: fixed the login bug", 1.0),
                item(Section::Profile, "role: backend developer", 1.0),
                item(
                    Section::Relevant,
                    "2024-05-10: chose FastAPI over Flask",
                    0.5,
                ),
                item(
                    Section::Relevant,
                    "2024-05-12: moved CI to GitHub Actions",
                    0.9,
                ),
                ContextItem::new(
                    Section::Recent,
                    "2024-05-12: moved CI to GitHub Actions",
                    "2024-05-12: moved CI to GitHub Actions",
                    3.0,
                ),
                item(Section::LongTerm, "Prefers short answers", 1.0),
                item(Section::Profile, "ROLE:  backend developer", 0.5),
            ],
            1500,
        )
        .unwrap();
        assert_eq!(block.duplicates, 2);
        assert_eq!(block.over_budget, 0);
        insta::assert_snapshot!(block.text);
        assert_eq!(block.tokens, count_tokens(&block.text));
    }

    #[test]
    fn a_short_budget_keeps_the_profile_first() {
        let mut items = vec![item(Section::Profile, "role: backend developer", 0.0)];
        for i in 0..50 {
            items.push(item(
                Section::Recent,
                &format!("episode number {i} about a long story of things"),
                f64::from(i),
            ));
        }
        let block = assemble(items, 200).unwrap();
        assert!(block.tokens <= 200);
        assert_eq!(block.parts[0].section, Section::Profile);
        assert!(block.over_budget > 0);
        // Best-ranked recent episodes survive.
        assert!(block.text.contains("episode number 49"));
        assert!(!block.text.contains("episode number 0 "));
    }

    #[test]
    fn nothing_to_say_is_none() {
        assert_eq!(assemble(vec![], 1500), None);
        assert_eq!(
            assemble(vec![item(Section::Profile, "a: b", 0.0)], 10),
            None
        );
    }

    fn section() -> impl Strategy<Value = Section> {
        prop_oneof![
            Just(Section::Profile),
            Just(Section::LongTerm),
            Just(Section::Relevant),
            Just(Section::Today),
            Just(Section::Recent),
        ]
    }

    proptest! {
        #[test]
        fn the_cut_never_exceeds_the_budget_and_never_repeats_a_line(
            items in proptest::collection::vec((section(), "[a-zA-Z0-9 .:\n]{0,80}", 0.0f64..10.0), 0..40),
            budget in 0usize..600,
        ) {
            let candidates = items.iter().map(|(s, t, r)| item(*s, t, *r)).collect();
            if let Some(block) = assemble(candidates, budget) {
                prop_assert!(block.tokens <= budget);
                prop_assert_eq!(block.tokens, count_tokens(&block.text));
                let mut keys = HashSet::new();
                for part in &block.parts {
                    prop_assert!(keys.insert(part.dedup_key.clone()));
                    prop_assert!(block.text.contains(&part.text));
                }
            }
        }
    }
}
