//! record_note and recall_notes: the agent's notes file (reference design 1), kept safe.
//!
//! The file is a JSON array of `{"timestamp", "category", "content"}` objects, by default
//! `<workspace>/.agent_memory.json`, created with its directory on the first note. Unlike the
//! original design, a file that does not parse is reported and never overwritten, every write
//! replaces the file atomically, and writers in different processes take turns through an
//! advisory lock on a sidecar file (`<notes file>.lock`; the notes file itself cannot carry the
//! lock because each write replaces it with a new file). Readers need no lock: they always see
//! a complete file. Each recorded note is also stored as a `note` memory.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use engram_core::{
    AddOutcome, Clock, Kind, MemoryStore, NewMemory, Scope, SystemClock, Tool, ToolOutput,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::atomic::write_atomically;
use super::workspace::Workspace;
use super::{parse_args, run_blocking};

/// The notes file's name inside the workspace.
pub const DEFAULT_NOTES_FILE: &str = ".agent_memory.json";
/// The category of a note recorded without one.
pub const DEFAULT_CATEGORY: &str = "general";
/// Who the memory store records as the author of notes.
const ACTOR: &str = "agent";

/// How long a writer waits for another process to finish its write.
const LOCK_WAIT: Duration = Duration::from_secs(10);
const LOCK_POLL: Duration = Duration::from_millis(5);

/// One note as read from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// When it was recorded (ISO 8601, as written in the file).
    pub timestamp: String,
    /// Its category.
    pub category: String,
    /// What it says.
    pub content: String,
}

/// Why the notes file could not be used. Every message is a complete sentence for the model.
#[derive(Debug, thiserror::Error)]
pub enum NotesError {
    /// The file exists but is not a JSON array of note objects.
    #[error(
        "the notes file {} is not a valid list of notes ({detail}); it was left untouched. Repair it or move it aside, then try again",
        path.display()
    )]
    Corrupt {
        /// The notes file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// Reading, writing or locking failed.
    #[error("cannot {action} the notes file {}: {source}", path.display())]
    Io {
        /// What we were doing: "read", "write", "lock", "create the folder of".
        action: &'static str,
        /// The notes file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// Another process kept the lock too long.
    #[error(
        "the notes file {} stayed locked by another process for {} s; try again",
        path.display(),
        LOCK_WAIT.as_secs()
    )]
    Busy {
        /// The notes file.
        path: PathBuf,
    },
    /// The note cannot be stored (empty, too long, or an unusable scope).
    #[error("the note cannot be recorded: {0}")]
    Invalid(String),
}

/// The notes file and how to stamp new notes.
#[derive(Debug, Clone)]
pub struct NotesFile {
    path: PathBuf,
    lock_path: PathBuf,
    clock: Arc<dyn Clock>,
    /// The workspace the file and its lock must lead inside (checked before every use).
    workspace: Option<Workspace>,
}

impl NotesFile {
    /// The notes file at `path` (nothing is created until the first note).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let mut lock_name = path.file_name().unwrap_or_default().to_os_string();
        lock_name.push(".lock");
        let lock_path = path.with_file_name(lock_name);
        Self {
            path,
            lock_path,
            clock: Arc::new(SystemClock),
            workspace: None,
        }
    }

    /// The default notes file of a workspace: `<workspace>/.agent_memory.json`, used only
    /// while it (and its lock) lead inside the workspace.
    pub fn in_workspace(workspace: &Workspace) -> Self {
        Self {
            workspace: Some(workspace.clone()),
            ..Self::new(workspace.root().join(DEFAULT_NOTES_FILE))
        }
    }

    /// Refuses the file when it is a workspace's and leads outside it (a symbolic link).
    fn confined(&self) -> Result<(), NotesError> {
        let Some(workspace) = &self.workspace else {
            return Ok(());
        };
        for path in [&self.path, &self.lock_path] {
            workspace.resolve(&path.to_string_lossy()).map_err(|e| {
                self.io(
                    "use",
                    io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()),
                )
            })?;
        }
        Ok(())
    }

    /// Uses `clock` to timestamp new notes.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Where the notes live.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every note, oldest first; none when the file does not exist yet. Blocks on file I/O.
    pub fn notes(&self) -> Result<Vec<Note>, NotesError> {
        self.confined()?;
        Ok(self.load()?.iter().map(note_from_entry).collect())
    }

    /// Appends a note (category `general` when none or an empty one is given) and returns it.
    /// Creates the file and its directory if needed. Blocks on file I/O and on other writers.
    pub fn record(&self, content: &str, category: Option<&str>) -> Result<Note, NotesError> {
        if content.trim().is_empty() {
            return Err(NotesError::Invalid("the content is empty".to_string()));
        }
        self.confined()?;
        let note = Note {
            timestamp: format!("{:.0}", self.clock.now()),
            category: normalize_category(category),
            content: content.to_string(),
        };
        if let Some(dir) = self.path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)
                .map_err(|source| self.io("create the folder of", source))?;
        }
        let _lock = self.lock()?;
        // Read under the lock, so a note another process just wrote is kept.
        let mut entries = self.load()?;
        let mut entry = Map::new();
        entry.insert("timestamp".into(), Value::String(note.timestamp.clone()));
        entry.insert("category".into(), Value::String(note.category.clone()));
        entry.insert("content".into(), Value::String(note.content.clone()));
        entries.push(Value::Object(entry));
        let mut text = serde_json::to_string_pretty(&entries)
            .map_err(|e| self.io("write", io::Error::other(e)))?;
        text.push('\n');
        write_atomically(&self.path, text.as_bytes()).map_err(|source| self.io("write", source))?;
        Ok(note)
    }

    /// The file's entries; empty when it does not exist or holds only whitespace (nothing to
    /// lose). Anything else that is not an array of objects is corrupt.
    fn load(&self) -> Result<Vec<Value>, NotesError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(self.io("read", source)),
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Vec::new());
        }
        let corrupt = |detail: String| NotesError::Corrupt {
            path: self.path.clone(),
            detail,
        };
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("invalid JSON: {e}")))?;
        let Value::Array(entries) = value else {
            return Err(corrupt(format!(
                "expected a JSON array, found {}",
                super::schema::describe_value(&value)
            )));
        };
        if let Some((index, entry)) = entries.iter().enumerate().find(|(_, e)| !e.is_object()) {
            return Err(corrupt(format!(
                "entry {} is {}, not a note object",
                index + 1,
                super::schema::describe_value(entry)
            )));
        }
        Ok(entries)
    }

    /// Takes the writers' lock, waiting up to [`LOCK_WAIT`] for another holder.
    fn lock(&self) -> Result<LockGuard, NotesError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&self.lock_path)
            .map_err(|source| self.io("lock", source))?;
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(LockGuard(file)),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(LOCK_POLL);
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(NotesError::Busy {
                        path: self.path.clone(),
                    });
                }
                Err(TryLockError::Error(source)) => return Err(self.io("lock", source)),
            }
        }
    }

    fn io(&self, action: &'static str, source: io::Error) -> NotesError {
        NotesError::Io {
            action,
            path: self.path.clone(),
            source,
        }
    }
}

/// Holds the writers' lock until dropped (closing the file releases it too).
struct LockGuard(File);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

fn normalize_category(category: Option<&str>) -> String {
    match category.map(str::trim) {
        Some(given) if !given.is_empty() => given.to_string(),
        _ => DEFAULT_CATEGORY.to_string(),
    }
}

/// Reads a note leniently: notes written by other programs may lack fields.
fn note_from_entry(entry: &Value) -> Note {
    let text = |key: &str, default: &str| match entry.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => default.to_string(),
        Some(other) => other.to_string(),
    };
    Note {
        timestamp: text("timestamp", "unknown time"),
        category: text("category", DEFAULT_CATEGORY),
        content: text("content", ""),
    }
}

/// The recall text: `N. [category] content (recorded at timestamp)` per note under a
/// `Recorded Notes:` heading, or `No notes recorded yet.` / `No notes found in category: X`.
pub fn format_notes(notes: &[Note], category: Option<&str>) -> String {
    if notes.is_empty() {
        return "No notes recorded yet.".to_string();
    }
    let wanted = category.map(str::trim).filter(|c| !c.is_empty());
    let chosen: Vec<&Note> = notes
        .iter()
        .filter(|note| wanted.is_none_or(|c| note.category == c))
        .collect();
    if let (Some(category), true) = (wanted, chosen.is_empty()) {
        return format!("No notes found in category: {category}");
    }
    let mut out = String::from("Recorded Notes:");
    for (index, note) in chosen.iter().enumerate() {
        out.push_str(&format!(
            "\n{}. [{}] {} (recorded at {})",
            index + 1,
            note.category,
            note.content,
            note.timestamp
        ));
    }
    out
}

/// The `record_note` tool: appends to the notes file and stores a `note` memory.
#[derive(Clone)]
pub struct RecordNoteTool {
    notes: NotesFile,
    store: Arc<dyn MemoryStore>,
    scope: Scope,
}

impl std::fmt::Debug for RecordNoteTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordNoteTool")
            .field("notes", &self.notes)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl RecordNoteTool {
    /// record_note writing to `notes` and to `store` under `scope`.
    pub fn new(notes: NotesFile, store: Arc<dyn MemoryStore>, scope: Scope) -> Self {
        Self {
            notes,
            store,
            scope,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordArgs {
    content: String,
    category: Option<String>,
}

#[async_trait]
impl Tool for RecordNoteTool {
    fn name(&self) -> &str {
        "record_note"
    }

    fn description(&self) -> &str {
        "Record an important fact as a note for later: something about the user, their \
         preferences, the project, or a decision made. Notes are timestamped, kept across \
         sessions, and also saved to long-term memory. Record key facts as soon as you learn \
         them; keep each note short and specific."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "content": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The information to remember. Be concise but specific."
                },
                "category": {
                    "type": "string",
                    "description": "Optional category, e.g. user_info, user_preference, project_info, decision. Default: general."
                }
            },
            "required": ["content"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let args: RecordArgs = match parse_args(self.name(), args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        self.record(&args.content, args.category.as_deref()).await
    }
}

impl RecordNoteTool {
    async fn record(&self, content: &str, category: Option<&str>) -> ToolOutput {
        let category = normalize_category(category);
        // Check the memory before touching the file, so a note is in both places or in neither.
        let memory = NewMemory::new(self.scope.clone(), content)
            .with_kind(Kind::Note)
            .with_category(category.clone())
            .with_source(ACTOR);
        if let Err(e) = memory.validate() {
            return ToolOutput::error(NotesError::Invalid(e.to_string()).to_string());
        }
        let (notes, text, file_category) =
            (self.notes.clone(), content.to_string(), category.clone());
        let written =
            tokio::task::spawn_blocking(move || notes.record(&text, Some(&file_category))).await;
        let note = match written {
            Ok(Ok(note)) => note,
            Ok(Err(e)) => return ToolOutput::error(e.to_string()),
            Err(e) => return ToolOutput::error(format!("the tool stopped unexpectedly: {e}")),
        };
        let memory = match note.timestamp.parse() {
            Ok(at) => memory.at(at),
            Err(_) => memory,
        };
        let recorded = format!(
            "Recorded note: {} (category: {})",
            note.content, note.category
        );
        match self.store.add(memory, ACTOR).await {
            Ok(AddOutcome::Added(_) | AddOutcome::Duplicate(_)) => ToolOutput::ok(recorded),
            // The note is safely in the file; say what is missing rather than invite a retry
            // that would write it there twice.
            Err(e) => ToolOutput::ok(format!(
                "{recorded}\nWarning: the note is in the notes file but could not be added to \
                 long-term memory: {e}"
            )),
        }
    }
}

/// The `recall_notes` tool.
#[derive(Debug, Clone)]
pub struct RecallNotesTool {
    notes: NotesFile,
}

impl RecallNotesTool {
    /// recall_notes reading `notes`.
    pub fn new(notes: NotesFile) -> Self {
        Self { notes }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecallArgs {
    category: Option<String>,
}

#[async_trait]
impl Tool for RecallNotesTool {
    fn name(&self) -> &str {
        "recall_notes"
    }

    fn description(&self) -> &str {
        "Recall the notes recorded with record_note, in this session or earlier ones: all of \
         them, or only one category. Use it at the start of a task to pick up what is already \
         known about the user and the project."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "category": {
                    "type": "string",
                    "description": "Only notes of this category, e.g. user_preference. Default: all notes."
                }
            },
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let args: RecallArgs = match parse_args(self.name(), args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        let notes = self.notes.clone();
        run_blocking(move || match notes.notes() {
            Ok(all) => ToolOutput::ok(format_notes(&all, args.category.as_deref())),
            Err(e) => ToolOutput::error(e.to_string()),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::FixedClock;

    fn notes_in(dir: &Path) -> NotesFile {
        let clock = FixedClock::new("2026-04-03T10:30:00.123Z".parse().unwrap());
        NotesFile::new(dir.join("sub/.agent_memory.json")).with_clock(Arc::new(clock))
    }

    #[test]
    fn a_workspace_notes_file_linked_outside_is_neither_read_nor_written() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.json");
        std::fs::write(&secret, r#"[{"content": "the outside secret"}]"#).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join(DEFAULT_NOTES_FILE)).unwrap();
        let notes = NotesFile::in_workspace(&Workspace::confined(dir.path()).unwrap());
        let err = notes.notes().unwrap_err().to_string();
        assert!(err.contains("outside the workspace"), "{err}");
        assert!(notes.record("planted", None).is_err());
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            r#"[{"content": "the outside secret"}]"#
        );
    }

    #[test]
    fn the_file_is_created_lazily_in_the_reference_format() {
        let dir = tempfile::tempdir().unwrap();
        let notes = notes_in(dir.path());
        assert_eq!(notes.notes().unwrap(), []);
        assert!(!dir.path().join("sub").exists());
        notes.record("Likes tea", Some("user_preference")).unwrap();
        notes.record("Works on engram", None).unwrap();
        let text = std::fs::read_to_string(notes.path()).unwrap();
        assert_eq!(
            text,
            r#"[
  {
    "timestamp": "2026-04-03T10:30:00Z",
    "category": "user_preference",
    "content": "Likes tea"
  },
  {
    "timestamp": "2026-04-03T10:30:00Z",
    "category": "general",
    "content": "Works on engram"
  }
]
"#
        );
    }

    #[test]
    fn recall_formats_match_the_reference() {
        let note = |c: &str, t: &str| Note {
            timestamp: "2026-04-03T10:30:00Z".into(),
            category: c.into(),
            content: t.into(),
        };
        let all = [
            note("user_info", "Is a developer"),
            note("decision", "Use SQLite"),
        ];
        assert_eq!(format_notes(&[], None), "No notes recorded yet.");
        assert_eq!(format_notes(&[], Some("x")), "No notes recorded yet.");
        assert_eq!(
            format_notes(&all, None),
            "Recorded Notes:\n1. [user_info] Is a developer (recorded at 2026-04-03T10:30:00Z)\n2. [decision] Use SQLite (recorded at 2026-04-03T10:30:00Z)"
        );
        assert_eq!(
            format_notes(&all, Some("decision")),
            "Recorded Notes:\n1. [decision] Use SQLite (recorded at 2026-04-03T10:30:00Z)"
        );
        assert_eq!(
            format_notes(&all, Some("nope")),
            "No notes found in category: nope"
        );
        assert_eq!(format_notes(&all, Some("")), format_notes(&all, None));
    }

    #[test]
    fn foreign_entries_are_read_leniently_and_kept_on_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let notes = notes_in(dir.path());
        std::fs::create_dir_all(notes.path().parent().unwrap()).unwrap();
        std::fs::write(notes.path(), r#"[{"content": "old", "extra": [1, 2]}]"#).unwrap();
        assert_eq!(
            notes.notes().unwrap(),
            [Note {
                timestamp: "unknown time".into(),
                category: "general".into(),
                content: "old".into()
            }]
        );
        notes.record("new", None).unwrap();
        let value: Value =
            serde_json::from_str(&std::fs::read_to_string(notes.path()).unwrap()).unwrap();
        assert_eq!(value[0], json!({"content": "old", "extra": [1, 2]}));
        assert_eq!(value[1]["content"], "new");
    }

    #[test]
    fn corrupt_files_are_errors_and_stay_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let notes = notes_in(dir.path());
        std::fs::create_dir_all(notes.path().parent().unwrap()).unwrap();
        for bad in [
            &b"[{\"content\": \"half"[..],
            b"{\"a\": 1}",
            b"[1, 2]",
            b"\xff\xfe",
        ] {
            std::fs::write(notes.path(), bad).unwrap();
            let err = notes.record("x", None).unwrap_err();
            assert!(matches!(err, NotesError::Corrupt { .. }), "{err}");
            assert!(err.to_string().contains("left untouched"));
            assert!(notes.notes().is_err());
            assert_eq!(std::fs::read(notes.path()).unwrap(), bad);
        }
    }

    #[test]
    fn empty_content_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let notes = notes_in(dir.path());
        assert!(matches!(
            notes.record("  ", None),
            Err(NotesError::Invalid(_))
        ));
        assert!(!notes.path().exists());
    }
}
