//! The system prompt: a readable, versioned text file (`prompts/system.md`) with a few
//! placeholders, plus sections added by whoever assembles the agent (bootstrap files, skills,
//! the JSON tool protocol, ...).

/// The system prompt file, as written.
pub const SYSTEM_PROMPT_TEMPLATE: &str = include_str!("../prompts/system.md");

/// The version of `prompts/system.md`; bump it (and the file's header) when the text changes
/// in a way that matters for comparing runs.
pub const SYSTEM_PROMPT_VERSION: u32 = 1;

/// Values filled into the prompt's placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptVars {
    /// The workspace directory, as shown to the model (`{{workspace}}`).
    pub workspace: String,
    /// Today's date, e.g. `2025-06-01 (Sunday)` (`{{today}}`).
    pub today: String,
    /// Who the agent works for (`{{user}}`); "the user" when unknown.
    pub user: String,
}

/// One titled part of the system prompt, rendered as a `## title` heading and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptSection {
    /// The heading.
    pub title: String,
    /// The text under it.
    pub body: String,
}

/// The system prompt, built from the base text and added sections, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemPrompt {
    base: String,
    sections: Vec<PromptSection>,
}

impl SystemPrompt {
    /// engram's own prompt (`prompts/system.md`) with the placeholders filled in.
    pub fn engram(vars: &PromptVars) -> Self {
        Self::from_template(SYSTEM_PROMPT_TEMPLATE, vars)
    }

    /// A prompt from any template in the same format: lines that are HTML comments are dropped,
    /// `{{workspace}}`, `{{today}}` and `{{user}}` are filled in.
    pub fn from_template(template: &str, vars: &PromptVars) -> Self {
        let kept: Vec<&str> = template
            .lines()
            .filter(|line| {
                let t = line.trim();
                !(t.starts_with("<!--") && t.ends_with("-->"))
            })
            .collect();
        let base = kept
            .join("\n")
            .replace("{{workspace}}", &vars.workspace)
            .replace("{{today}}", &vars.today)
            .replace("{{user}}", &vars.user);
        Self {
            base: base.trim().to_string(),
            sections: Vec::new(),
        }
    }

    /// A prompt with this text and no sections.
    pub fn plain(text: impl Into<String>) -> Self {
        Self {
            base: text.into(),
            sections: Vec::new(),
        }
    }

    /// Adds a section at the end.
    pub fn push_section(&mut self, title: impl Into<String>, body: impl Into<String>) {
        self.sections.push(PromptSection {
            title: title.into(),
            body: body.into(),
        });
    }

    /// Adds a section at the end (builder style).
    pub fn with_section(mut self, title: impl Into<String>, body: impl Into<String>) -> Self {
        self.push_section(title, body);
        self
    }

    /// The sections added so far.
    pub fn sections(&self) -> &[PromptSection] {
        &self.sections
    }

    /// The whole prompt as text.
    pub fn render(&self) -> String {
        let mut text = self.base.clone();
        for section in &self.sections {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str("## ");
            text.push_str(section.title.trim());
            text.push('\n');
            text.push_str(section.body.trim());
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> PromptVars {
        PromptVars {
            workspace: "/home/alice/.engram/workspace".into(),
            today: "2025-06-01 (Sunday)".into(),
            user: "alice".into(),
        }
    }

    #[test]
    fn the_system_prompt_reads_as_intended() {
        insta::assert_snapshot!(SystemPrompt::engram(&vars()).render());
    }

    #[test]
    fn the_file_header_names_the_version_in_code() {
        let header = SYSTEM_PROMPT_TEMPLATE.lines().next().unwrap();
        assert!(
            header.contains(&format!("version {SYSTEM_PROMPT_VERSION}.")),
            "{header}"
        );
    }

    #[test]
    fn placeholders_are_filled_comments_dropped_and_sections_appended() {
        let prompt = SystemPrompt::engram(&vars())
            .with_section("Skills", "- memory: how to use notes\n")
            .with_section("Tool protocol", "Answer in JSON.");
        let text = prompt.render();
        assert!(!text.contains("{{"), "{text}");
        assert!(!text.contains("<!--"), "{text}");
        assert!(text.contains("/home/alice/.engram/workspace"));
        assert!(text.contains("record_note") && text.contains("recall_notes"));
        assert!(text.ends_with(
            "## Skills\n- memory: how to use notes\n\n## Tool protocol\nAnswer in JSON."
        ));
        assert_eq!(prompt.sections().len(), 2);
        assert_eq!(
            SystemPrompt::plain("").with_section("A", "b").render(),
            "## A\nb"
        );
    }
}
