//! The markdown mirror: `memory/MEMORY.md` (long-term notes, read whole, which a person may edit)
//! and daily notes `memory/YYYY-MM-DD.md` (a new day's file starts with `# YYYY-MM-DD`; later
//! notes are appended) under the workspace.
//!
//! Every write goes to a temporary file in the same folder, is flushed, and is renamed over the
//! target, so a reader sees the old file or the new one, never half of one. A file that cannot
//! be read as text is never overwritten.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use jiff::ToSpan;
use jiff::civil::Date;

/// The long-term file's name.
pub const LONG_TERM_FILE: &str = "MEMORY.md";

/// The lock file daily-note appends take (in the memory folder).
const DAILY_LOCK_FILE: &str = ".daily.lock";

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

/// The markdown files of one workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkdownMirror {
    dir: PathBuf,
}

impl MarkdownMirror {
    /// The mirror under `workspace/memory`. Nothing is created until the first write.
    pub fn new(workspace: &Path) -> Self {
        Self {
            dir: workspace.join("memory"),
        }
    }

    /// The `memory` folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `memory/MEMORY.md`.
    pub fn long_term_path(&self) -> PathBuf {
        self.dir.join(LONG_TERM_FILE)
    }

    /// `memory/YYYY-MM-DD.md`.
    pub fn daily_path(&self, date: Date) -> PathBuf {
        self.dir.join(format!("{date}.md"))
    }

    /// MEMORY.md's text; `None` when there is no such file.
    pub fn read_long_term(&self) -> Result<Option<String>, MirrorError> {
        read_optional(&self.long_term_path())
    }

    /// Replaces MEMORY.md (atomically).
    pub fn write_long_term(&self, text: &str) -> Result<(), MirrorError> {
        let path = self.long_term_path();
        write_atomic(&path, text.as_bytes()).map_err(|source| MirrorError {
            action: "write",
            path,
            source,
        })
    }

    /// The daily note of `date`; `None` when there is none.
    pub fn read_daily(&self, date: Date) -> Result<Option<String>, MirrorError> {
        read_optional(&self.daily_path(date))
    }

    /// Appends `text` as a list item to the daily note of `date`, creating the file with its
    /// `# YYYY-MM-DD` heading on the day's first note. Lines after the first are indented so the
    /// item stays one item.
    ///
    /// Read, append and rename happen under an exclusive lock on `memory/.daily.lock`, so two
    /// processes appending at once both keep their note.
    pub fn append_daily(&self, date: Date, text: &str) -> Result<(), MirrorError> {
        let path = self.daily_path(date);
        let lock_path = self.dir.join(DAILY_LOCK_FILE);
        let locked = fs::create_dir_all(&self.dir)
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
    pub fn remove_all(&self) -> Result<usize, MirrorError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(source) => {
                return Err(MirrorError {
                    action: "read",
                    path: self.dir.clone(),
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
        // The lock file holds nothing; it goes with the notes.
        let _ = fs::remove_file(self.dir.join(DAILY_LOCK_FILE));
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

    fn date(s: &str) -> Date {
        s.parse().unwrap()
    }

    #[test]
    fn appends_from_many_threads_at_once_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let day = date("2024-05-16");
        std::thread::scope(|scope| {
            for t in 0..4 {
                let mirror = MarkdownMirror::new(dir.path());
                scope.spawn(move || {
                    for i in 0..25 {
                        mirror.append_daily(day, &format!("note {t}-{i}")).unwrap();
                    }
                });
            }
        });
        let text = MarkdownMirror::new(dir.path())
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
        let mirror = MarkdownMirror::new(dir.path());
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
        let mirror = MarkdownMirror::new(dir.path());
        mirror.append_daily(date("2024-05-14"), "a").unwrap();
        mirror.append_daily(date("2024-05-16"), "c").unwrap();
        mirror.append_daily(date("2024-05-01"), "old").unwrap();
        let joined = mirror.recent_days(date("2024-05-16"), 7).unwrap();
        assert_eq!(joined, "# 2024-05-14\n\n- a\n\n---\n\n# 2024-05-16\n\n- c");
    }

    #[test]
    fn long_term_round_trips_and_forget_removes_only_memory_files() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = MarkdownMirror::new(dir.path());
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
    fn a_file_that_is_not_text_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = MarkdownMirror::new(dir.path());
        fs::create_dir_all(mirror.dir()).unwrap();
        let path = mirror.daily_path(date("2024-05-16"));
        fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
        let err = mirror.append_daily(date("2024-05-16"), "x").unwrap_err();
        assert!(err.to_string().contains("2024-05-16.md"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), vec![0xff, 0xfe, 0x00]);
    }
}
