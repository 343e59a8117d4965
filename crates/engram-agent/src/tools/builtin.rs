//! The built-in tool set, wired up in one call.

use std::path::PathBuf;
use std::sync::Arc;

use engram_core::{MemoryStore, Scope, Tool};

use super::list::{DEFAULT_MAX_ENTRIES, ListDirTool};
use super::notes::{NotesFile, RecallNotesTool, RecordNoteTool};
use super::read::{ReadFileTool, ReadLimits};
use super::registry::{RegistryError, ToolRegistry};
use super::shell::{Shell, ShellOptions};
use super::workspace::Workspace;
use super::write::{EditFileTool, WriteFileTool};

/// Settings for the built-in tools; the defaults suit most agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinOptions {
    /// read_file limits.
    pub read: ReadLimits,
    /// bash limits.
    pub shell: ShellOptions,
    /// list_dir entries shown per call.
    pub list_max_entries: usize,
    /// The notes file; default `<workspace>/.agent_memory.json`.
    pub notes_path: Option<PathBuf>,
}

impl Default for BuiltinOptions {
    fn default() -> Self {
        Self {
            read: ReadLimits::default(),
            shell: ShellOptions::default(),
            list_max_entries: DEFAULT_MAX_ENTRIES,
            notes_path: None,
        }
    }
}

/// Where record_note also stores each note, as a `note` memory.
#[derive(Clone)]
pub struct NoteMemory {
    /// The memory store.
    pub store: Arc<dyn MemoryStore>,
    /// Whose memory the notes become.
    pub scope: Scope,
}

impl std::fmt::Debug for NoteMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoteMemory")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Every built-in tool, in the order models see them: read_file, write_file, edit_file,
/// list_dir, bash, bash_output, bash_kill, record_note, recall_notes. The three shell tools
/// share one [`Shell`]; its background commands are killed when the last of them is dropped.
pub fn builtin_tools(
    workspace: &Workspace,
    options: &BuiltinOptions,
    memory: NoteMemory,
) -> Vec<Arc<dyn Tool>> {
    let notes = match &options.notes_path {
        Some(path) => NotesFile::new(path.clone()),
        None => NotesFile::in_workspace(workspace),
    };
    let shell = Shell::new(workspace.clone(), options.shell.clone());
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(ReadFileTool::new(workspace.clone(), options.read.clone())),
        Arc::new(WriteFileTool::new(workspace.clone())),
        Arc::new(EditFileTool::new(workspace.clone())),
        Arc::new(ListDirTool::new(
            workspace.clone(),
            options.list_max_entries,
        )),
    ];
    tools.extend(shell.tools());
    tools.push(Arc::new(RecordNoteTool::new(
        notes.clone(),
        memory.store,
        memory.scope,
    )));
    tools.push(Arc::new(RecallNotesTool::new(notes)));
    tools
}

impl ToolRegistry {
    /// A registry holding every built-in tool (see [`builtin_tools`]).
    pub fn with_builtins(
        workspace: &Workspace,
        options: &BuiltinOptions,
        memory: NoteMemory,
    ) -> Result<Self, RegistryError> {
        let mut registry = ToolRegistry::new();
        registry.register_all(builtin_tools(workspace, options, memory))?;
        Ok(registry)
    }
}
