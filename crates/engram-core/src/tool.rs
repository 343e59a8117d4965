//! The tool abstraction: something the agent can do, described to the model by a JSON Schema.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a model is told about a tool: its name, what it does, and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name, `[a-zA-Z0-9_-]{1,64}` (both providers accept this).
    pub name: String,
    /// When and how to use it, written for the model.
    pub description: String,
    /// JSON Schema (an object schema) of the arguments.
    pub parameters: Value,
}

/// The result of running a tool, returned to the model as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// Whether the tool did what was asked.
    pub success: bool,
    /// What the tool produced (may be empty on failure).
    pub content: String,
    /// Why it failed, in words the model can act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            success: true,
            content: content.into(),
            error: None,
        }
    }

    /// A failed result.
    pub fn error(error: impl Into<String>) -> Self {
        Self {
            success: false,
            content: String::new(),
            error: Some(error.into()),
        }
    }

    /// The text handed back to the model: the content, or the error prefixed with "Error: ".
    pub fn to_model_text(&self) -> String {
        match (&self.error, self.success) {
            (Some(err), false) if self.content.is_empty() => format!("Error: {err}"),
            (Some(err), false) => format!("Error: {err}\n{}", self.content),
            _ => self.content.clone(),
        }
    }
}

/// Something the agent can do.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Unique name the model calls it by.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of its arguments.
    fn parameters(&self) -> Value;
    /// Runs the tool. Failures are reported in the output, never by panicking.
    async fn execute(&self, args: Value) -> ToolOutput;

    /// The tool's description for a model.
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_string(),
            description: self.description().to_string(),
            parameters: self.parameters(),
        }
    }
}
