//! The agent's system prompt, as `engram chat`, `engram run`, the gateway and
//! `engram bench agent` build it.

use engram_agent::skills::{ALWAYS_SKILLS_SECTION_TITLE, SKILLS_SECTION_TITLE, SkillSet};
use engram_agent::tools::Workspace;
use engram_agent::workspace::{BOOTSTRAP_SECTION_TITLE, read_bootstrap};
use engram_agent::{PromptVars, SystemPrompt};

/// The system prompt: engram's base text, then the workspace's bootstrap files that exist
/// (AGENTS.md, SOUL.md, USER.md, ...); those that cannot be used are named in a warning. Skills
/// are added by [`add_skills`].
pub fn build_prompt(workspace: &Workspace, user: &str) -> SystemPrompt {
    let today = jiff::Zoned::now().strftime("%Y-%m-%d (%A)").to_string();
    let mut prompt = SystemPrompt::engram(&PromptVars {
        workspace: workspace.root().display().to_string(),
        today,
        user: user.to_string(),
    });
    let bootstrap = read_bootstrap(workspace);
    for problem in &bootstrap.problems {
        eprintln!("warning: {problem}");
    }
    if let Some(body) = bootstrap.render() {
        prompt.push_section(BOOTSTRAP_SECTION_TITLE, body);
    }
    prompt
}

/// Adds the skills to a system prompt: the summary of every skill, and the full text of the
/// available `always` skills.
pub fn add_skills(prompt: &mut SystemPrompt, skills: &SkillSet) {
    if let Some(summary) = skills.summary() {
        prompt.push_section(SKILLS_SECTION_TITLE, summary);
    }
    if let Some(always) = skills.always_text() {
        prompt.push_section(ALWAYS_SKILLS_SECTION_TITLE, always);
    }
}
