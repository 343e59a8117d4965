//! Skills: task instructions the agent reads when it needs them.
//!
//! A skill is a folder `skills/<name>/` holding a `SKILL.md` whose YAML front matter gives
//! `name`, `description`, optional requirements and `always`:
//!
//! ```text
//! ---
//! name: github
//! description: Work with GitHub issues and pull requests through the gh command.
//! requires:
//!   bins: [gh]
//!   env: [GH_TOKEN]
//! always: false
//! ---
//! (instructions)
//! ```
//!
//! The form other agents use is accepted too: requirements and `always` inside `metadata`,
//! either as a mapping or as a JSON string, directly or under a namespace such as `nanobot` or
//! `openclaw` (`metadata: '{"nanobot":{"requires":{"bins":["gh"]}}}'`).
//!
//! Workspace skills (`<workspace>/skills/`) shadow the built-in ones (`memory`, `cron`) of the
//! same name. A skill whose commands are not on PATH or whose environment variables are unset
//! is listed as unavailable, with the reason. A SKILL.md that cannot be read is reported (the
//! error names the file) and skipped; the other skills still load, and a broken workspace
//! skill leaves the built-in of that name in place.
//!
//! For the system prompt, [`SkillSet::summary`] lists every skill (name, description,
//! availability, where to read it) and [`SkillSet::always_text`] carries the full text of the
//! available `always` skills; [`LoadSkillTool`] gives the agent the full text on demand.

mod frontmatter;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use engram_core::{Tool, ToolOutput};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::tools::parse_args;
use engram_workspace::Workspace;

/// A skill's file name inside its folder.
pub const SKILL_FILE: &str = "SKILL.md";
/// The skills folder's name inside the workspace.
pub const SKILLS_DIR: &str = "skills";
/// Largest SKILL.md read.
pub const MAX_SKILL_BYTES: u64 = 256 * 1024;

/// The built-in skills: (name, SKILL.md text).
pub const BUILTIN_SKILLS: &[(&str, &str)] = &[
    ("cron", include_str!("../../skills/cron/SKILL.md")),
    ("memory", include_str!("../../skills/memory/SKILL.md")),
];

const SUMMARY_HEADER: &str = include_str!("../../templates/skills_summary.md");

/// The system prompt section title for [`SkillSet::summary`].
pub const SKILLS_SECTION_TITLE: &str = "Skills";
/// The system prompt section title for [`SkillSet::always_text`].
pub const ALWAYS_SKILLS_SECTION_TITLE: &str = "Skills loaded in full";

/// Where a skill comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillSource {
    /// Built into engram.
    Builtin,
    /// The workspace's `skills/` folder; the path of its SKILL.md.
    Workspace(PathBuf),
}

/// What a skill needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    /// Commands that must be on PATH.
    pub bins: Vec<String>,
    /// Environment variables that must be set (non-empty).
    pub env: Vec<String>,
}

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name (the folder's name).
    pub name: String,
    /// What it is for, one line.
    pub description: String,
    /// Where it comes from.
    pub source: SkillSource,
    /// Whether its full text goes into every system prompt.
    pub always: bool,
    /// What it needs.
    pub requires: Requirements,
    /// What is missing (`command gh`, `environment variable GH_TOKEN`); empty when available.
    pub missing: Vec<String>,
    /// The instructions (the file after its front matter).
    pub body: String,
}

impl Skill {
    /// Whether everything it needs is there.
    pub fn is_available(&self) -> bool {
        self.missing.is_empty()
    }

    /// Where its text is: the SKILL.md path, or `built-in`.
    pub fn location(&self) -> String {
        match &self.source {
            SkillSource::Builtin => "built-in".to_string(),
            SkillSource::Workspace(path) => path.display().to_string(),
        }
    }

    /// Why it is unavailable, e.g. `missing command gh`.
    pub fn unavailable_reason(&self) -> Option<String> {
        (!self.missing.is_empty()).then(|| format!("missing {}", self.missing.join(", ")))
    }
}

/// A SKILL.md that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillError {
    /// The file (or `built-in skill <name>`).
    pub file: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SkillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skill file {}: {}", self.file, self.message)
    }
}

impl std::error::Error for SkillError {}

/// How requirements are checked; tests give their own answers.
pub trait Probe {
    /// Whether a command is on PATH.
    fn has_command(&self, name: &str) -> bool;
    /// Whether an environment variable is set and not empty.
    fn has_env(&self, name: &str) -> bool;
}

/// Checks the real PATH and environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemProbe;

impl Probe for SystemProbe {
    fn has_command(&self, name: &str) -> bool {
        if name.is_empty() || name.contains('/') {
            return Path::new(name).is_file();
        }
        let Some(path) = std::env::var_os("PATH") else {
            return false;
        };
        std::env::split_paths(&path).any(|dir| is_executable(&dir.join(name)))
    }

    fn has_env(&self, name: &str) -> bool {
        std::env::var_os(name).is_some_and(|v| !v.is_empty())
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Every skill the agent has, and the SKILL.md files that could not be used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillSet {
    skills: Vec<Skill>,
    errors: Vec<SkillError>,
}

impl SkillSet {
    /// The built-in skills and those in `<workspace>/skills/`, checked against the real PATH
    /// and environment. A skills folder or SKILL.md that leads outside the workspace (a
    /// symbolic link) is not read; it is reported among the errors.
    pub fn load(workspace: &Workspace) -> Self {
        let mut set = Self::load_with(None, &SystemProbe);
        match workspace.resolve(SKILLS_DIR) {
            Ok(dir) => set.load_dir(&dir, Some(workspace), &SystemProbe),
            Err(e) => set.errors.push(SkillError {
                file: workspace.root().join(SKILLS_DIR).display().to_string(),
                message: format!("not read: {e}"),
            }),
        }
        set.skills.sort_by(|a, b| a.name.cmp(&b.name));
        set
    }

    /// The built-in skills and those in `skills_dir` (if any), checked with `probe`.
    pub fn load_with(skills_dir: Option<&Path>, probe: &dyn Probe) -> Self {
        let mut set = Self::default();
        for (name, text) in BUILTIN_SKILLS {
            match parse_skill(name, text, SkillSource::Builtin, probe) {
                Ok(skill) => set.skills.push(skill),
                Err(message) => set.errors.push(SkillError {
                    file: format!("built-in skill {name}"),
                    message,
                }),
            }
        }
        if let Some(dir) = skills_dir {
            set.load_dir(dir, None, probe);
        }
        set.skills.sort_by(|a, b| a.name.cmp(&b.name));
        set
    }

    /// Loads `dir/<name>/SKILL.md`; with a workspace, each file must lead inside it.
    fn load_dir(&mut self, dir: &Path, workspace: Option<&Workspace>, probe: &dyn Probe) {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                self.errors.push(SkillError {
                    file: dir.display().to_string(),
                    message: format!("cannot list the skills folder: {e}"),
                });
                return;
            }
        };
        let mut folders: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.is_dir())
            .collect();
        folders.sort();
        for folder in folders {
            let file = folder.join(SKILL_FILE);
            if !file.exists() {
                continue;
            }
            let Some(name) = folder.file_name().and_then(|n| n.to_str()) else {
                self.errors.push(SkillError {
                    file: file.display().to_string(),
                    message: "the folder name is not valid UTF-8".into(),
                });
                continue;
            };
            if let Some(workspace) = workspace
                && let Err(e) = workspace.resolve(&format!("{SKILLS_DIR}/{name}/{SKILL_FILE}"))
            {
                self.errors.push(SkillError {
                    file: file.display().to_string(),
                    message: format!("not read: {e}"),
                });
                continue;
            }
            let loaded = read_skill_file(&file).and_then(|text| {
                parse_skill(name, &text, SkillSource::Workspace(file.clone()), probe)
            });
            match loaded {
                Ok(skill) => {
                    // A workspace skill shadows a built-in one of the same name.
                    self.skills.retain(|s| s.name != skill.name);
                    self.skills.push(skill);
                }
                Err(message) => self.errors.push(SkillError {
                    file: file.display().to_string(),
                    message,
                }),
            }
        }
    }

    /// The skills, by name.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// The SKILL.md files that could not be used, each naming its file.
    pub fn errors(&self) -> &[SkillError] {
        &self.errors
    }

    /// A skill by name.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// The system prompt's summary of all skills (the body of a section titled
    /// [`SKILLS_SECTION_TITLE`]): name, description, availability and where to read each.
    /// `None` when there are no skills.
    pub fn summary(&self) -> Option<String> {
        if self.skills.is_empty() {
            return None;
        }
        let mut out = SUMMARY_HEADER.trim_end().to_string();
        out.push_str("\n\n");
        for skill in &self.skills {
            let mut line = format!("- {}: {}", skill.name, one_line(&skill.description));
            if skill.always && skill.is_available() {
                line.push_str(" [always loaded: its text follows below]");
            }
            if let Some(reason) = skill.unavailable_reason() {
                line.push_str(&format!(" [unavailable: {reason}]"));
            }
            match &skill.source {
                SkillSource::Builtin => {
                    line.push_str(&format!(" [built-in; load_skill name={}]", skill.name));
                }
                SkillSource::Workspace(path) => {
                    line.push_str(&format!(" [{}]", path.display()));
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
        Some(out.trim_end().to_string())
    }

    /// The full text of every available `always` skill, for the system prompt (the body of a
    /// section titled [`ALWAYS_SKILLS_SECTION_TITLE`]). `None` when there are none.
    pub fn always_text(&self) -> Option<String> {
        let parts: Vec<String> = self
            .skills
            .iter()
            .filter(|s| s.always && s.is_available())
            .map(|s| format!("### Skill: {}\n\n{}", s.name, s.body.trim()))
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn read_skill_file(file: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(file).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.len() > MAX_SKILL_BYTES {
        return Err(format!(
            "it is {} bytes; skills are limited to {MAX_SKILL_BYTES}",
            meta.len()
        ));
    }
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read it: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())
}

/// Reads one SKILL.md's text into a skill named `folder` (front matter and body), checking its
/// requirements with `probe`; the reason in one line when it cannot be used.
pub fn parse_skill(
    folder: &str,
    text: &str,
    source: SkillSource,
    probe: &dyn Probe,
) -> Result<Skill, String> {
    let doc = frontmatter::parse(text)?;
    let front = doc.front;
    if let Some(name) = front.get("name") {
        let name = name.as_str().ok_or("its 'name' is not text")?.trim();
        if name != folder {
            return Err(format!(
                "its name '{name}' differs from its folder '{folder}'; make them the same"
            ));
        }
    }
    let description = match front.get("description") {
        Some(Value::String(d)) if !d.trim().is_empty() => d.trim().to_string(),
        Some(Value::String(_)) | None => {
            return Err("it has no 'description' (one line saying when to use the skill)".into());
        }
        Some(_) => return Err("its 'description' is not text".into()),
    };
    let mut requires = Requirements::default();
    let mut always = read_bool(front.get("always"), "always")?.unwrap_or(false);
    if let Some(value) = front.get("requires") {
        merge_requirements(&mut requires, value, "requires")?;
    }
    if let Some(metadata) = front.get("metadata") {
        let metadata = match metadata {
            Value::String(text) => serde_json::from_str::<Value>(text)
                .map_err(|e| format!("its 'metadata' text is not JSON: {e}"))?,
            other => other.clone(),
        };
        let Value::Object(metadata) = metadata else {
            return Err("its 'metadata' is not a mapping or a JSON object".into());
        };
        for (section, path) in metadata_sections(&metadata) {
            if let Some(value) = section.get("requires") {
                merge_requirements(&mut requires, value, &format!("{path}requires"))?;
            }
            if let Some(flag) = read_bool(section.get("always"), &format!("{path}always"))? {
                always |= flag;
            }
        }
    }
    let mut missing = Vec::new();
    for bin in &requires.bins {
        if !probe.has_command(bin) {
            missing.push(format!("command {bin}"));
        }
    }
    for var in &requires.env {
        if !probe.has_env(var) {
            missing.push(format!("environment variable {var}"));
        }
    }
    Ok(Skill {
        name: folder.to_string(),
        description,
        source,
        always,
        requires,
        missing,
        body: doc.body,
    })
}

/// The parts of `metadata` that may hold `requires` / `always`: the mapping itself, and each
/// namespace in it (`nanobot`, `openclaw`, ...), with a path prefix for error messages.
fn metadata_sections(metadata: &Map<String, Value>) -> Vec<(&Map<String, Value>, String)> {
    let mut sections = vec![(metadata, "metadata.".to_string())];
    for (key, value) in metadata {
        if let Value::Object(inner) = value
            && (inner.contains_key("requires") || inner.contains_key("always"))
        {
            sections.push((inner, format!("metadata.{key}.")));
        }
    }
    sections
}

fn read_bool(value: Option<&Value>, what: &str) -> Result<Option<bool>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(_) => Err(format!("its '{what}' must be true or false")),
    }
}

fn merge_requirements(into: &mut Requirements, value: &Value, what: &str) -> Result<(), String> {
    let Value::Object(map) = value else {
        return Err(format!(
            "its '{what}' must be a mapping with 'bins' and/or 'env'"
        ));
    };
    for (key, list) in map {
        let target = match key.as_str() {
            "bins" => &mut into.bins,
            "env" => &mut into.env,
            // Other agents' extras (e.g. anyBins, config) are not ours to enforce.
            _ => continue,
        };
        let names: Vec<String> = match list {
            Value::Null => Vec::new(),
            Value::String(s) => s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            Value::Array(items) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(|s| s.trim().to_string())
                        .ok_or_else(|| format!("its '{what}.{key}' must be a list of names"))
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(format!("its '{what}.{key}' must be a list of names")),
        };
        for name in names {
            if !target.contains(&name) {
                target.push(name);
            }
        }
    }
    Ok(())
}

/// The `load_skill` tool: the full text of a skill.
#[derive(Debug, Clone)]
pub struct LoadSkillTool {
    skills: Arc<SkillSet>,
}

impl LoadSkillTool {
    /// A tool over these skills.
    pub fn new(skills: Arc<SkillSet>) -> Self {
        Self { skills }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadArgs {
    name: String,
}

#[async_trait]
impl Tool for LoadSkillTool {
    fn name(&self) -> &str {
        "load_skill"
    }

    fn description(&self) -> &str {
        "Read the full instructions of a skill listed in the system prompt's skills summary. \
         Do this before working on a task the skill covers."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "description": "The skill's name, as in the summary."}
            },
            "required": ["name"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let args: LoadArgs = match parse_args(self.name(), args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        let Some(skill) = self.skills.get(args.name.trim()) else {
            let names: Vec<&str> = self
                .skills
                .skills()
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            return ToolOutput::error(format!(
                "there is no skill named '{}'; the skills are: {}",
                args.name,
                names.join(", ")
            ));
        };
        let mut text = format!("# Skill: {} ({})\n", skill.name, skill.location());
        if let Some(reason) = skill.unavailable_reason() {
            text.push_str(&format!(
                "Note: this skill is unavailable here ({reason}); install or set what is missing \
                 before following it.\n"
            ));
        }
        text.push('\n');
        text.push_str(skill.body.trim());
        ToolOutput::ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    struct FakeProbe {
        commands: HashSet<&'static str>,
        env: HashSet<&'static str>,
    }

    impl Probe for FakeProbe {
        fn has_command(&self, name: &str) -> bool {
            self.commands.contains(name)
        }
        fn has_env(&self, name: &str) -> bool {
            self.env.contains(name)
        }
    }

    fn probe() -> FakeProbe {
        FakeProbe {
            commands: ["git"].into_iter().collect(),
            env: ["HOME"].into_iter().collect(),
        }
    }

    fn parse(text: &str) -> Result<Skill, String> {
        parse_skill("s", text, SkillSource::Builtin, &probe())
    }

    #[test]
    fn the_built_in_skills_load() {
        let set = SkillSet::load_with(None, &probe());
        assert!(set.errors().is_empty(), "{:?}", set.errors());
        let names: Vec<_> = set.skills().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["cron", "memory"]);
        assert!(set.skills().iter().all(Skill::is_available));
    }

    #[test]
    fn requirements_in_every_accepted_form() {
        let direct = parse("---\nname: s\ndescription: d\nrequires:\n  bins: [git, gh]\n  env: GH_TOKEN, HOME\n---\n").unwrap();
        assert_eq!(direct.requires.bins, ["git", "gh"]);
        assert_eq!(direct.requires.env, ["GH_TOKEN", "HOME"]);
        assert_eq!(
            direct.missing,
            ["command gh", "environment variable GH_TOKEN"]
        );
        assert_eq!(
            direct.unavailable_reason().unwrap(),
            "missing command gh, environment variable GH_TOKEN"
        );

        let json_string = parse("---\nname: s\ndescription: d\nmetadata: '{\"nanobot\":{\"requires\":{\"bins\":[\"gh\"]},\"always\":true}}'\n---\n").unwrap();
        assert_eq!(json_string.requires.bins, ["gh"]);
        assert!(json_string.always);

        let mapping = parse("---\nname: s\ndescription: d\nmetadata:\n  openclaw:\n    emoji: x\n    requires: {env: [HOME]}\n---\n").unwrap();
        assert_eq!(mapping.requires.env, ["HOME"]);
        assert!(mapping.is_available());

        let flat = parse("---\ndescription: d\nmetadata: {\"requires\": {\"bins\": [\"git\"]}}\nalways: \"true\"\n---\nbody").unwrap();
        assert_eq!(flat.requires.bins, ["git"]);
        assert!(flat.always);
        assert_eq!(flat.body, "body");
    }

    #[test]
    fn malformed_skills_say_what_is_wrong() {
        let cases = [
            ("---\nname: s\n---\n", "no 'description'"),
            (
                "---\nname: other\ndescription: d\n---\n",
                "differs from its folder 's'",
            ),
            (
                "---\ndescription: d\nalways: sometimes\n---\n",
                "'always' must be true or false",
            ),
            (
                "---\ndescription: d\nrequires: [gh]\n---\n",
                "'requires' must be a mapping",
            ),
            (
                "---\ndescription: d\nrequires: {bins: [1]}\n---\n",
                "'requires.bins' must be a list of names",
            ),
            (
                "---\ndescription: d\nmetadata: '{not json'\n---\n",
                "'metadata' text is not JSON",
            ),
            ("no front matter", "does not start with YAML front matter"),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
