//! The markdown mirror: `memory/MEMORY.md` (long-term notes, read whole, which a person may edit)
//! and daily notes `memory/YYYY-MM-DD.md` (a new day's file starts with `# YYYY-MM-DD`; later
//! notes are appended) under the workspace.
//!
//! Every write goes to a temporary file in the same folder, is flushed, and is renamed over the
//! target, so a reader sees the old file or the new one, never half of one. A file that cannot
//! be read as text is never overwritten.
//!
//! Every path goes through the workspace's one rule ([`Workspace::resolve`]): a `memory/` folder
//! or a note that is a symbolic link to somewhere outside the workspace is neither read (so an
//! outside file never reaches the model or the index), written, nor removed.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use engram_workspace::Workspace;
use jiff::ToSpan;
use jiff::civil::Date;

/// The long-term file's name.
pub const LONG_TERM_FILE: &str = "MEMORY.md";

/// The lock file daily-note appends take (in the memory folder).
const DAILY_LOCK_FILE: &str = ".daily.lock";

/// The lock file rewrites of MEMORY.md's managed section take (in the memory folder).
const LONG_TERM_LOCK_FILE: &str = ".memory.lock";

/// The line that opens MEMORY.md's managed section.
pub const MANAGED_START: &str = "<!-- engram:profile:start (managed by engram: what the agent believes about you; rewritten after each extraction. Correct it by telling the agent, or with `engram invalidate` / `engram update`. Edit freely outside this section.) -->";
/// The line that closes it.
pub const MANAGED_END: &str = "<!-- engram:profile:end -->";
/// The heading inside it.
pub const MANAGED_HEADING: &str = "## What engram believes about you";

/// `text` without its managed section (the lines a person owns).
pub fn without_managed(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("<!-- engram:profile:start") {
            inside = true;
            continue;
        }
        if inside {
            if trimmed == MANAGED_END {
                inside = false;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `text` with its managed section holding `lines` (as list items): replaced where it is,
/// appended at the end when there is none. Everything outside it is kept byte for byte.
pub fn with_managed(text: &str, lines: &[String]) -> String {
    let mut section = String::new();
    section.push_str(MANAGED_START);
    section.push('\n');
    section.push_str(MANAGED_HEADING);
    section.push_str("\n\n");
    if lines.is_empty() {
        section.push_str("(nothing yet)\n");
    }
    for line in lines {
        section.push_str("- ");
        section.push_str(&line.replace('\n', " "));
        section.push('\n');
    }
    section.push_str(MANAGED_END);
    section.push('\n');
    let start = text.find("<!-- engram:profile:start");
    let end = start.and_then(|s| {
        text[s..]
            .find(MANAGED_END)
            .map(|e| s + e + MANAGED_END.len())
    });
    match (start, end) {
        (Some(start), Some(end)) => {
            let rest = text[end..].strip_prefix('\n').unwrap_or(&text[end..]);
            format!("{}{section}{rest}", &text[..start])
        }
        _ => {
            let mut out = text.to_string();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&section);
            out
        }
    }
}

/// Why a markdown file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {source}", path.display())]
pub struct MirrorError {
    /// What was being done (`read`, `write`, `remove`).
    pub action: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What the system said.
    #[source]
    pub source: io::Error,
}

/// The folder of the markdown files, inside the workspace.
const MEMORY_DIR: &str = "memory";

/// The markdown files of one workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkdownMirror {
    workspace: Workspace,
    dir: PathBuf,
}

impl MarkdownMirror {
    /// The mirror under `workspace/memory`. Nothing is created until the first write.
    pub fn new(workspace: &Workspace) -> Self {
        Self {
            dir: workspace.root().join(MEMORY_DIR),
            workspace: workspace.clone(),
        }
    }

    /// The `memory` folder (as named; [`MarkdownMirror::resolve`] says where it leads).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `memory/MEMORY.md` (as named).
    pub fn long_term_path(&self) -> PathBuf {
        self.dir.join(LONG_TERM_FILE)
    }

    /// `memory/YYYY-MM-DD.md` (as named).
    pub fn daily_path(&self, date: Date) -> PathBuf {
        self.dir.join(format!("{date}.md"))
    }

    /// Where `memory/<name>` really leads, refused (as a [`MirrorError`] for `action`) when that
    /// is outside the workspace.
    fn resolve(&self, name: &str, action: &'static str) -> Result<PathBuf, MirrorError> {
        let relative = if name.is_empty() {
            MEMORY_DIR.to_string()
        } else {
            format!("{MEMORY_DIR}/{name}")
        };
        self.workspace.resolve(&relative).map_err(|e| MirrorError {
            action,
            path: self.workspace.root().join(&relative),
            source: io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()),
        })
    }

    /// Checks that the `memory` folder leads inside the workspace (for `action`).
    pub fn check(&self, action: &'static str) -> Result<(), MirrorError> {
        self.resolve("", action).map(|_| ())
    }

    /// MEMORY.md's text; `None` when there is no such file.
    pub fn read_long_term(&self) -> Result<Option<String>, MirrorError> {
        read_optional(&self.resolve(LONG_TERM_FILE, "read")?)
    }

    /// Replaces MEMORY.md (atomically).
    pub fn write_long_term(&self, text: &str) -> Result<(), MirrorError> {
        let path = self.resolve(LONG_TERM_FILE, "write")?;
        write_atomic(&path, text.as_bytes()).map_err(|source| MirrorError {
            action: "write",
            path,
            source,
        })
    }

    /// Rewrites MEMORY.md's managed section to hold `lines`, under a lock so two processes do
    /// not lose each other's write; the rest of the file is kept as the person left it. Writes
    /// nothing when the section already says the same. Returns whether the file changed.
    pub fn write_managed(&self, lines: &[String]) -> Result<bool, MirrorError> {
        let dir = self.resolve("", "write")?;
        let lock_path = self.resolve(LONG_TERM_LOCK_FILE, "lock")?;
        let locked = fs::create_dir_all(&dir)
            .and_then(|()| {
                fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&lock_path)
            })
            .and_then(|file| file.lock().map(|()| file))
            .map_err(|source| MirrorError {
                action: "lock",
                path: lock_path,
                source,
            })?;
        let current = self.read_long_term()?;
        let text = current.as_deref().unwrap_or("# Long-term memory\n");
        let updated = with_managed(text, lines);
        let changed = current.as_deref() != Some(updated.as_str());
        let written = if changed {
            self.write_long_term(&updated)
        } else {
            Ok(())
        };
        drop(locked);
        written.map(|()| changed)
    }

    /// The daily note of `date`; `None` when there is none.
    pub fn read_daily(&self, date: Date) -> Result<Option<String>, MirrorError> {
        read_optional(&self.resolve(&format!("{date}.md"), "read")?)
    }

    /// Appends `text` as a list item to the daily note of `date`, creating the file with its
    /// `# YYYY-MM-DD` heading on the day's first note. Lines after the first are indented so the
    /// item stays one item.
    ///
    /// Read, append and rename happen under an exclusive lock on `memory/.daily.lock`, so two
    /// processes appending at once both keep their note.
    pub fn append_daily(&self, date: Date, text: &str) -> Result<(), MirrorError> {
        let dir = self.resolve("", "write")?;
        let path = self.resolve(&format!("{date}.md"), "write")?;
        let lock_path = self.resolve(DAILY_LOCK_FILE, "lock")?;
        let locked = fs::create_dir_all(&dir)
            .and_then(|()| {
                fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&lock_path)
            })
            .and_then(|file| file.lock().map(|()| file))
            .map_err(|source| MirrorError {
                action: "lock",
                path: lock_path,
                source,
            })?;
        let mut body = match read_optional(&path)? {
            Some(existing) => existing,
            None => format!("# {date}\n\n"),
        };
        if !body.is_empty() && !body.ends_with('\n') {
            body.push('\n');
        }
        let mut lines = text.trim().lines();
        if let Some(first) = lines.next() {
            body.push_str("- ");
            body.push_str(first.trim_end());
            body.push('\n');
        }
        for line in lines {
            body.push_str("  ");
            body.push_str(line.trim_end());
            body.push('\n');
        }
        let written = write_atomic(&path, body.as_bytes()).map_err(|source| MirrorError {
            action: "write",
            path,
            source,
        });
        drop(locked);
        written
    }

    /// The daily notes of the `days` days up to and including `today` that exist, oldest first,
    /// joined by `---`.
    pub fn recent_days(&self, today: Date, days: u32) -> Result<String, MirrorError> {
        let mut parts = Vec::new();
        for back in (0..days).rev() {
            let Ok(date) = today.checked_sub(i64::from(back).days()) else {
                continue;
            };
            if let Some(text) = self.read_daily(date)? {
                parts.push(text.trim().to_string());
            }
        }
        Ok(parts.join("\n\n---\n\n"))
    }

    /// Removes MEMORY.md and every daily note (other files in the folder are left alone).
    /// Returns how many files went.
    ///
    /// A `memory` folder that leads outside the workspace is refused (nothing is removed);
    /// a note that is itself a symbolic link is removed as a link, never what it points to.
    pub fn remove_all(&self) -> Result<usize, MirrorError> {
        let dir = self.resolve("", "remove")?;
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(source) => {
                return Err(MirrorError {
                    action: "read",
                    path: dir,
                    source,
                });
            }
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name == LONG_TERM_FILE || is_daily_name(&name) {
                let path = entry.path();
                fs::remove_file(&path).map_err(|source| MirrorError {
                    action: "remove",
                    path,
                    source,
                })?;
                removed += 1;
            }
        }
        // The lock files hold nothing; they go with the notes.
        let _ = fs::remove_file(dir.join(DAILY_LOCK_FILE));
        let _ = fs::remove_file(dir.join(LONG_TERM_LOCK_FILE));
        Ok(removed)
    }
}

/// `YYYY-MM-DD.md` naming a real date.
fn is_daily_name(name: &str) -> bool {
    name.strip_suffix(".md")
        .is_some_and(|stem| stem.len() == 10 && stem.parse::<Date>().is_ok())
}

fn read_optional(path: &Path) -> Result<Option<String>, MirrorError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(MirrorError {
            action: "read",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename; the folder
/// is created when missing.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        engram_core::MemoryId::new()
    ));
    let result = (|| {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace(dir: &tempfile::TempDir) -> Workspace {
        Workspace::confined(dir.path()).unwrap()
    }

    #[test]
    fn files_that_lead_outside_the_workspace_are_never_read_written_or_removed() {
        let base = tempfile::tempdir().unwrap();
        let outside = base.path().join("outside");
        let ws = base.path().join("ws");
        fs::create_dir_all(&outside).unwrap();
        fs::create_dir_all(&ws).unwrap();
        fs::write(outside.join(LONG_TERM_FILE), "the outside secret").unwrap();
        fs::write(outside.join("2024-05-16.md"), "# outside day").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("memory")).unwrap();
        let mirror = MarkdownMirror::new(&Workspace::confined(&ws).unwrap());

        for err in [
            mirror.read_long_term().unwrap_err(),
            mirror.read_daily(date("2024-05-16")).unwrap_err(),
            mirror.append_daily(date("2024-05-17"), "x").unwrap_err(),
            mirror.write_long_term("x").unwrap_err(),
            mirror.remove_all().unwrap_err(),
        ] {
            assert!(err.to_string().contains("outside the workspace"), "{err}");
        }
        let mut left: Vec<String> = fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["2024-05-16.md", LONG_TERM_FILE]);
        assert_eq!(
            fs::read_to_string(outside.join(LONG_TERM_FILE)).unwrap(),
            "the outside secret"
        );

        // One note linked out of a real memory folder: not read; forgetting removes the link only.
        fs::remove_file(ws.join("memory")).unwrap();
        fs::create_dir(ws.join("memory")).unwrap();
        std::os::unix::fs::symlink(
            outside.join(LONG_TERM_FILE),
            ws.join("memory").join(LONG_TERM_FILE),
        )
        .unwrap();
        assert!(mirror.read_long_term().is_err());
        assert_eq!(mirror.remove_all().unwrap(), 1);
        assert!(!ws.join("memory").join(LONG_TERM_FILE).exists());
        assert_eq!(
            fs::read_to_string(outside.join(LONG_TERM_FILE)).unwrap(),
            "the outside secret"
        );
    }

    fn date(s: &str) -> Date {
        s.parse().unwrap()
    }

    #[test]
    fn appends_from_many_threads_at_once_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let day = date("2024-05-16");
        std::thread::scope(|scope| {
            for t in 0..4 {
                let mirror = MarkdownMirror::new(&workspace(&dir));
                scope.spawn(move || {
                    for i in 0..25 {
                        mirror.append_daily(day, &format!("note {t}-{i}")).unwrap();
                    }
                });
            }
        });
        let text = MarkdownMirror::new(&workspace(&dir))
            .read_daily(day)
            .unwrap()
            .unwrap();
        assert_eq!(
            text.lines().filter(|l| l.starts_with("- note ")).count(),
            100
        );
        assert_eq!(text.matches("# 2024-05-16").count(), 1);
    }

    #[test]
    fn a_new_day_starts_with_its_heading_and_later_notes_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = MarkdownMirror::new(&workspace(&dir));
        assert_eq!(mirror.read_daily(date("2024-05-16")).unwrap(), None);
        mirror
            .append_daily(date("2024-05-16"), "09:00 started the API")
            .unwrap();
        mirror
            .append_daily(date("2024-05-16"), "10:30 tests pass\nall 42 of them")
            .unwrap();
        let text = mirror.read_daily(date("2024-05-16")).unwrap().unwrap();
        insta::assert_snapshot!(text, @r"
        # 2024-05-16

        - 09:00 started the API
        - 10:30 tests pass
          all 42 of them
        ");
        assert!(dir.path().join("memory/2024-05-16.md").exists());
    }

    #[test]
    fn recent_days_join_existing_files_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = MarkdownMirror::new(&workspace(&dir));
        mirror.append_daily(date("2024-05-14"), "a").unwrap();
        mirror.append_daily(date("2024-05-16"), "c").unwrap();
        mirror.append_daily(date("2024-05-01"), "old").unwrap();
        let joined = mirror.recent_days(date("2024-05-16"), 7).unwrap();
        assert_eq!(joined, "# 2024-05-14\n\n- a\n\n---\n\n# 2024-05-16\n\n- c");
    }

    #[test]
    fn long_term_round_trips_and_forget_removes_only_memory_files() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = MarkdownMirror::new(&workspace(&dir));
        assert_eq!(mirror.read_long_term().unwrap(), None);
        mirror
            .write_long_term("# Long-term\n- likes tea\n")
            .unwrap();
        assert_eq!(
            mirror.read_long_term().unwrap().unwrap(),
            "# Long-term\n- likes tea\n"
        );
        mirror.append_daily(date("2024-05-16"), "x").unwrap();
        fs::write(mirror.dir().join("other.txt"), "keep").unwrap();
        assert_eq!(mirror.remove_all().unwrap(), 2);
        assert!(mirror.dir().join("other.txt").exists());
        let leftovers: Vec<_> = fs::read_dir(mirror.dir()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary files are left behind");
    }

    #[test]
    fn the_managed_section_is_replaced_in_place_and_the_rest_kept() {
        let person = "# Long-term memory\n\n- Deploys on Fridays\n";
        let once = with_managed(person, &["role: nurse".into()]);
        assert!(once.starts_with(person));
        assert!(once.contains("## What engram believes about you\n\n- role: nurse\n"));
        assert_eq!(without_managed(&once).trim_end(), person.trim_end());
        // A person adds a line after the section; the next rewrite keeps it.
        let edited = format!("{once}- Team lead is Sam\n");
        let twice = with_managed(&edited, &["role: nurse".into(), "diet: pescatarian".into()]);
        assert!(twice.contains("- role: nurse\n- diet: pescatarian\n"));
        assert!(twice.ends_with("- Team lead is Sam\n"));
        assert_eq!(twice.matches("engram:profile:start").count(), 1);
        assert_eq!(
            with_managed(&twice, &["x".into()])
                .matches(MANAGED_END)
                .count(),
            1
        );
        let dir = tempfile::tempdir().unwrap();
        let mirror = MarkdownMirror::new(&workspace(&dir));
        assert!(mirror.write_managed(&["role: nurse".into()]).unwrap());
        assert!(!mirror.write_managed(&["role: nurse".into()]).unwrap());
        let text = mirror.read_long_term().unwrap().unwrap();
        assert!(text.starts_with("# Long-term memory\n"));
    }

    #[test]
    fn a_file_that_is_not_text_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = MarkdownMirror::new(&workspace(&dir));
        fs::create_dir_all(mirror.dir()).unwrap();
        let path = mirror.daily_path(date("2024-05-16"));
        fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
        let err = mirror.append_daily(date("2024-05-16"), "x").unwrap_err();
        assert!(err.to_string().contains("2024-05-16.md"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), vec![0xff, 0xfe, 0x00]);
    }
}
