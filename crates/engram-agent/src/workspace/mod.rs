//! The agent's workspace files: the bootstrap files that go into the system prompt, and the
//! templates `engram onboard` starts a home and a workspace with.
//!
//! Bootstrap files (reference design 3): `AGENTS.md`, `SOUL.md`, `USER.md`, `TOOLS.md` and
//! `IDENTITY.md` in the workspace root, in that order. Those that exist and are not empty are
//! joined, each under its file name, with `---` between them. A file longer than
//! [`MAX_BOOTSTRAP_CHARS`] is cut (and says so), so one runaway file cannot crowd out the rest
//! of the prompt.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use engram_workspace::Workspace;

/// The bootstrap files, in prompt order.
pub const BOOTSTRAP_FILES: [&str; 5] =
    ["AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "IDENTITY.md"];
/// Characters kept of one bootstrap file.
pub const MAX_BOOTSTRAP_CHARS: usize = 20_000;
/// The system prompt section title for [`bootstrap_section`].
pub const BOOTSTRAP_SECTION_TITLE: &str = "Workspace files";
/// The workspace folder's name inside ENGRAM_HOME.
pub const DEFAULT_WORKSPACE_DIR: &str = "workspace";
/// The configuration file's name inside ENGRAM_HOME.
pub const CONFIG_FILE: &str = "config.toml";

/// The commented config.toml `engram onboard` writes.
pub const CONFIG_TEMPLATE: &str = include_str!("../../templates/config.toml");

/// The workspace templates: (path inside the workspace, text).
pub const WORKSPACE_TEMPLATES: &[(&str, &str)] = &[
    (
        "AGENTS.md",
        include_str!("../../templates/workspace/AGENTS.md"),
    ),
    ("SOUL.md", include_str!("../../templates/workspace/SOUL.md")),
    ("USER.md", include_str!("../../templates/workspace/USER.md")),
    (
        "TOOLS.md",
        include_str!("../../templates/workspace/TOOLS.md"),
    ),
    (
        "HEARTBEAT.md",
        include_str!("../../templates/workspace/HEARTBEAT.md"),
    ),
    (
        "memory/MEMORY.md",
        include_str!("../../templates/workspace/memory/MEMORY.md"),
    ),
];

/// One bootstrap file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapFile {
    /// Its name (`AGENTS.md`, ...).
    pub name: &'static str,
    /// Its path.
    pub path: PathBuf,
    /// Its text (possibly cut).
    pub content: String,
    /// Whether it was cut to [`MAX_BOOTSTRAP_CHARS`].
    pub truncated: bool,
}

/// The bootstrap files of a workspace, and those that exist but could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bootstrap {
    /// Files read, in prompt order (empty files are left out).
    pub files: Vec<BootstrapFile>,
    /// Files that exist but could not be read, with the reason (one line each).
    pub problems: Vec<String>,
}

/// Reads the bootstrap files of `workspace`. A file that is a symbolic link leading outside the
/// workspace is not read (it could put any file into the system prompt): it is reported as a
/// problem.
pub fn read_bootstrap(workspace: &Workspace) -> Bootstrap {
    let mut found = Bootstrap::default();
    for name in BOOTSTRAP_FILES {
        let path = match workspace.resolve(name) {
            Ok(path) => path,
            Err(e) => {
                found.problems.push(format!("{name} is not read: {e}"));
                continue;
            }
        };
        let text = match std::fs::read(&path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                found
                    .problems
                    .push(format!("cannot read {}: {e}", path.display()));
                continue;
            }
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let (content, truncated) = match text.char_indices().nth(MAX_BOOTSTRAP_CHARS) {
            Some((cut, _)) => (text[..cut].to_string(), true),
            None => (text.to_string(), false),
        };
        found.files.push(BootstrapFile {
            name,
            path,
            content,
            truncated,
        });
    }
    found
}

impl Bootstrap {
    /// The files joined for the system prompt: each under a `### NAME` heading, `---` between
    /// them. `None` when there are none.
    pub fn render(&self) -> Option<String> {
        if self.files.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .files
            .iter()
            .map(|file| {
                let mut part = format!("### {}\n\n{}", file.name, file.content);
                if file.truncated {
                    part.push_str(&format!(
                        "\n\n[cut at {MAX_BOOTSTRAP_CHARS} characters; read {} for the rest]",
                        file.path.display()
                    ));
                }
                part
            })
            .collect();
        Some(parts.join("\n\n---\n\n"))
    }
}

/// The body of the system prompt's bootstrap section (titled [`BOOTSTRAP_SECTION_TITLE`]):
/// the workspace's bootstrap files that exist, or `None`.
pub fn bootstrap_section(workspace: &Workspace) -> Option<String> {
    read_bootstrap(workspace).render()
}

/// What `engram onboard` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnboardReport {
    /// Files and folders created.
    pub created: Vec<PathBuf>,
    /// Files that already existed and were left as they are.
    pub kept: Vec<PathBuf>,
}

/// Creates `home` with a commented config.toml and `workspace` with the template files,
/// leaving every file that already exists untouched. Files are written whole (temporary
/// file, then a rename that refuses to replace anything).
pub fn onboard(home: &Path, workspace: &Path) -> io::Result<OnboardReport> {
    let mut report = OnboardReport::default();
    create_dir(home, &mut report)?;
    write_new(&home.join(CONFIG_FILE), CONFIG_TEMPLATE, &mut report)?;
    create_dir(workspace, &mut report)?;
    for (relative, text) in WORKSPACE_TEMPLATES {
        let path = workspace.join(relative);
        if let Some(parent) = path.parent() {
            create_dir(parent, &mut report)?;
        }
        write_new(&path, text, &mut report)?;
    }
    create_dir(&workspace.join(crate::skills::SKILLS_DIR), &mut report)?;
    Ok(report)
}

fn create_dir(dir: &Path, report: &mut OnboardReport) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if dir.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists but is not a folder", dir.display()),
        ));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
    report.created.push(dir.to_path_buf());
    Ok(())
}

fn write_new(path: &Path, text: &str, report: &mut OnboardReport) -> io::Result<()> {
    if path.symlink_metadata().is_ok() {
        report.kept.push(path.to_path_buf());
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let context =
        |e: io::Error| io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()));
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(context)?;
    temp.write_all(text.as_bytes()).map_err(context)?;
    temp.as_file().sync_all().map_err(context)?;
    match temp.persist_noclobber(path) {
        Ok(_) => report.created.push(path.to_path_buf()),
        // Someone created it meanwhile: theirs stays.
        Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => {
            report.kept.push(path.to_path_buf())
        }
        Err(e) => return Err(context(e.error)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    #[test]
    fn onboard_creates_what_is_missing_and_keeps_the_rest() {
        let dir = TempDir::new().unwrap();
        let home = dir.path().join("home");
        let workspace = home.join(DEFAULT_WORKSPACE_DIR);
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(workspace.join("USER.md"), "mine").unwrap();
        let report = onboard(&home, &workspace).unwrap();
        assert!(report.created.contains(&home.join(CONFIG_FILE)));
        assert!(report.created.contains(&workspace.join("memory/MEMORY.md")));
        assert!(report.created.contains(&workspace.join("skills")));
        assert_eq!(report.kept, [workspace.join("USER.md")]);
        assert_eq!(
            std::fs::read_to_string(workspace.join("USER.md")).unwrap(),
            "mine"
        );

        let again = onboard(&home, &workspace).unwrap();
        assert!(again.created.is_empty(), "{:?}", again.created);
        assert_eq!(again.kept.len(), 1 + WORKSPACE_TEMPLATES.len());
    }

    #[test]
    fn the_heartbeat_template_costs_no_model_call() {
        let (_, text) = WORKSPACE_TEMPLATES
            .iter()
            .find(|(name, _)| *name == "HEARTBEAT.md")
            .unwrap();
        assert!(crate::scheduler::heartbeat::tasks(text).is_empty());
    }

    fn confined(dir: &TempDir) -> Workspace {
        Workspace::confined(dir.path()).unwrap()
    }

    #[test]
    fn a_bootstrap_file_linked_to_an_outside_file_is_not_read() {
        let outside = TempDir::new().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "the outside secret").unwrap();
        let dir = TempDir::new().unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            dir.path().join("AGENTS.md"),
        )
        .unwrap();
        std::fs::write(dir.path().join("USER.md"), "Alice").unwrap();
        // A link that stays inside is fine.
        std::fs::write(dir.path().join("soul-text.md"), "Kind.").unwrap();
        std::os::unix::fs::symlink("soul-text.md", dir.path().join("SOUL.md")).unwrap();
        let found = read_bootstrap(&confined(&dir));
        let names: Vec<&str> = found.files.iter().map(|f| f.name).collect();
        assert_eq!(names, ["SOUL.md", "USER.md"]);
        assert_eq!(found.problems.len(), 1, "{:?}", found.problems);
        assert!(
            found.problems[0].starts_with("AGENTS.md is not read: ")
                && found.problems[0].contains("outside the workspace"),
            "{:?}",
            found.problems
        );
        assert!(!found.render().unwrap().contains("outside secret"));
    }

    #[test]
    fn bootstrap_joins_the_files_that_exist_in_order() {
        let dir = TempDir::new().unwrap();
        assert_eq!(bootstrap_section(&confined(&dir)), None);
        std::fs::write(dir.path().join("USER.md"), "Alice, Berlin\n").unwrap();
        std::fs::write(dir.path().join("AGENTS.md"), "Be brief.").unwrap();
        std::fs::write(dir.path().join("SOUL.md"), "  \n").unwrap();
        std::fs::write(
            dir.path().join("IDENTITY.md"),
            "x".repeat(MAX_BOOTSTRAP_CHARS + 5),
        )
        .unwrap();
        let text = bootstrap_section(&confined(&dir)).unwrap();
        let parts: Vec<&str> = text.split("\n\n---\n\n").collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], "### AGENTS.md\n\nBe brief.");
        assert_eq!(parts[1], "### USER.md\n\nAlice, Berlin");
        assert!(parts[2].starts_with("### IDENTITY.md\n\nxxx"));
        assert!(parts[2].contains("[cut at 20000 characters"));
    }
}
