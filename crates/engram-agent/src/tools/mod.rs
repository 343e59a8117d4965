//! The tools the agent acts through.
//!
//! A [`ToolRegistry`] holds tools (anything implementing [`engram_core::Tool`]), exports their
//! descriptions in OpenAI's and Anthropic's formats, and runs calls after checking the model's
//! arguments against each tool's JSON Schema; every failure comes back to the model as text.
//!
//! Built-in tools, all confined to a [`Workspace`] unless it is created unconfined:
//! `read_file`, `write_file`, `edit_file`, `list_dir` (files), `bash`, `bash_output`,
//! `bash_kill` (shell, see [`shell`]), and `record_note`, `recall_notes` (the notes file, see
//! [`notes`]). The quickest way to get them all:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use engram_agent::tools::{BuiltinOptions, NoteMemory, ToolRegistry, Workspace};
//! # async fn demo(store: Arc<dyn engram_core::MemoryStore>) -> Result<(), Box<dyn std::error::Error>> {
//! let workspace = Workspace::confined("/path/to/project")?;
//! let memory = NoteMemory { store, scope: engram_core::Scope::user("alice") };
//! let registry = ToolRegistry::with_builtins(&workspace, &BuiltinOptions::default(), memory)?;
//! let tools_for_openai = registry.openai_tools();
//! let output = registry.call("read_file", serde_json::json!({"path": "README.md"})).await;
//! println!("{}", output.to_model_text());
//! # Ok(()) }
//! ```

mod atomic;
mod builtin;
mod list;
pub mod notes;
mod read;
mod registry;
pub mod schema;
pub mod shell;
use engram_workspace as workspace;
mod write;

use engram_core::ToolOutput;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use builtin::{BuiltinOptions, NoteMemory, builtin_tools};
pub use list::{DEFAULT_MAX_ENTRIES, ListDirTool};
pub use notes::{NotesError, NotesFile, RecallNotesTool, RecordNoteTool};
pub use read::{ReadFileTool, ReadLimits};
pub use registry::{RegistryError, ToolRegistry, to_anthropic, to_openai};
pub use shell::{
    BashKillTool, BashOutputTool, BashTool, SAFE_ENV, Shell, ShellLimits, ShellOptions,
    check_deny_list, check_deny_list_in,
};
pub use workspace::{PathError, Workspace, WorkspaceError};
pub use write::{EditFileTool, WriteFileTool};

/// Reads a tool's arguments into its argument struct; a mismatch becomes an error for the model.
/// (The registry has normally checked the schema already; this covers direct calls.)
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolOutput> {
    let args = if args.is_null() {
        Value::Object(serde_json::Map::new())
    } else {
        args
    };
    serde_json::from_value(args)
        .map_err(|e| ToolOutput::error(format!("invalid arguments for tool '{tool}': {e}")))
}

/// Runs blocking file work off the async threads.
pub(crate) async fn run_blocking(work: impl FnOnce() -> ToolOutput + Send + 'static) -> ToolOutput {
    match tokio::task::spawn_blocking(work).await {
        Ok(output) => output,
        Err(e) => ToolOutput::error(format!("the tool stopped unexpectedly: {e}")),
    }
}

/// A task that is cancelled when its handle is dropped, so no work outlives the call that
/// started it.
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> std::fmt::Debug for AbortOnDrop<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AbortOnDrop")
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
