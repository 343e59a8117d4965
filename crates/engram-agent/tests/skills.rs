#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Skills from real folders: shadowing, requirements, broken files, the prompt summary and the
//! load_skill tool.

use std::path::Path;
use std::sync::Arc;

use engram_agent::skills::{LoadSkillTool, SkillSet, SkillSource};
use engram_agent::tools::Workspace;
use engram_core::Tool;
use serde_json::json;
use tempfile::TempDir;

fn write_skill(workspace: &Path, name: &str, text: &str) {
    let dir = workspace.join("skills").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
}

fn workspace() -> TempDir {
    let dir = TempDir::new().unwrap();
    let w = dir.path();
    write_skill(
        w,
        "memory",
        "---\nname: memory\ndescription: Our own way of remembering.\n---\nUse the wiki.\n",
    );
    write_skill(
        w,
        "broken",
        "---\nname: broken\ndescription: [never closed\n---\nbody\n",
    );
    write_skill(
        w,
        "github",
        "---\nname: github\ndescription: Work with GitHub through gh.\nmetadata: '{\"nanobot\":{\"requires\":{\"bins\":[\"engram-test-no-such-command\"],\"env\":[\"ENGRAM_TEST_NO_SUCH_VAR\"]}}}'\n---\nRun gh.\n",
    );
    write_skill(
        w,
        "style",
        "---\nname: style\ndescription: House style for answers.\nalways: true\nrequires:\n  bins: [sh]\n---\nAnswer in British English.\n",
    );
    std::fs::create_dir_all(w.join("skills/no-skill-file")).unwrap();
    dir
}

#[test]
fn a_malformed_skill_is_reported_by_file_and_the_rest_load() {
    let dir = workspace();
    let set = SkillSet::load(&Workspace::confined(dir.path()).unwrap());
    assert_eq!(set.errors().len(), 1, "{:?}", set.errors());
    let error = set.errors()[0].to_string();
    let broken = dir.path().join("skills/broken/SKILL.md");
    assert!(error.contains(&broken.display().to_string()), "{error}");
    assert!(error.contains("not valid YAML"), "{error}");
    assert!(!error.contains('\n'), "{error}");

    let names: Vec<_> = set.skills().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["cron", "github", "memory", "style"]);

    // The workspace's memory skill shadows the built-in one.
    let memory = set.get("memory").unwrap();
    assert_eq!(memory.description, "Our own way of remembering.");
    assert!(matches!(memory.source, SkillSource::Workspace(_)));
    assert!(matches!(
        set.get("cron").unwrap().source,
        SkillSource::Builtin
    ));

    let github = set.get("github").unwrap();
    assert!(!github.is_available());
    assert_eq!(
        github.unavailable_reason().unwrap(),
        "missing command engram-test-no-such-command, environment variable ENGRAM_TEST_NO_SUCH_VAR"
    );
    assert!(set.get("style").unwrap().is_available(), "sh is on PATH");
}

#[test]
fn the_prompt_carries_a_summary_and_the_always_skills() {
    let dir = workspace();
    let set = SkillSet::load(&Workspace::confined(dir.path()).unwrap());
    let summary = set
        .summary()
        .unwrap()
        .replace(&dir.path().display().to_string(), "<workspace>");
    insta::assert_snapshot!("skills_summary", summary);
    let always = set.always_text().unwrap();
    assert_eq!(always, "### Skill: style\n\nAnswer in British English.");
}

#[tokio::test]
async fn load_skill_returns_the_full_text() {
    let dir = workspace();
    let tool = LoadSkillTool::new(Arc::new(SkillSet::load(
        &Workspace::confined(dir.path()).unwrap(),
    )));
    let out = tool.execute(json!({"name": "cron"})).await;
    assert!(out.success);
    assert!(
        out.content
            .starts_with("# Skill: cron (built-in)\n\n# Scheduling with the cron tool")
    );
    let out = tool.execute(json!({"name": "github"})).await;
    assert!(out.content.contains("Note: this skill is unavailable here"));
    assert!(out.content.ends_with("Run gh."));
    let out = tool.execute(json!({"name": "nope"})).await;
    assert!(!out.success);
    assert_eq!(
        out.error.as_deref(),
        Some("there is no skill named 'nope'; the skills are: cron, github, memory, style")
    );
}

#[test]
fn a_skill_linked_in_from_outside_the_workspace_is_not_read() {
    let dir = workspace();
    let outside = tempfile::TempDir::new().unwrap();
    std::fs::create_dir_all(outside.path().join("planted")).unwrap();
    std::fs::write(
        outside.path().join("planted/SKILL.md"),
        "---\nname: planted\ndescription: From outside.\nalways: true\n---\nDo as the outside says.\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("planted"),
        dir.path().join("skills/planted"),
    )
    .unwrap();
    let set = SkillSet::load(&Workspace::confined(dir.path()).unwrap());
    assert!(set.get("planted").is_none());
    assert!(
        set.errors()
            .iter()
            .any(|e| e.to_string().contains("planted")
                && e.to_string().contains("outside the workspace")),
        "{:?}",
        set.errors()
    );
    assert!(
        !set.always_text()
            .unwrap_or_default()
            .contains("outside says")
    );
}
