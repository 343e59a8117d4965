//! The tool registry: the tools an agent may call, their descriptions in each provider's
//! format, and calls that check the model's arguments before a tool sees them.

use std::collections::HashMap;
use std::sync::Arc;

use engram_core::llm::ToolCall;
use engram_core::{Tool, ToolOutput, ToolSpec};
use serde_json::{Value, json};

use super::AbortOnDrop;
use super::schema::{self, summarize_parameters};

/// Longest tool name both providers accept.
const MAX_NAME_LEN: usize = 64;

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The name is empty, too long, or uses characters providers reject.
    #[error("tool name '{0}' is invalid: use 1 to 64 characters from a-z, A-Z, 0-9, '_' and '-'")]
    InvalidName(String),
    /// Another tool already has the name.
    #[error("a tool named '{0}' is already registered")]
    Duplicate(String),
    /// The parameters are not a JSON Schema for an object.
    #[error("tool '{name}' has unusable parameters: {reason}")]
    BadSchema {
        /// The tool.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// The tools an agent can call, in registration order.
#[derive(Default)]
pub struct ToolRegistry {
    tools: Vec<Registered>,
    by_name: HashMap<String, usize>,
}

struct Registered {
    tool: Arc<dyn Tool>,
    // Taken once at registration: the schema used for validation is the one the model saw.
    spec: ToolSpec,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool.
    pub fn register(&mut self, tool: impl Tool + 'static) -> Result<(), RegistryError> {
        self.register_arc(Arc::new(tool))
    }

    /// Adds a shared tool.
    pub fn register_arc(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let spec = tool.spec();
        if !is_valid_name(&spec.name) {
            return Err(RegistryError::InvalidName(spec.name));
        }
        if self.by_name.contains_key(&spec.name) {
            return Err(RegistryError::Duplicate(spec.name));
        }
        check_parameters(&spec)?;
        self.by_name.insert(spec.name.clone(), self.tools.len());
        self.tools.push(Registered { tool, spec });
        Ok(())
    }

    /// Adds several shared tools; stops at the first that cannot be registered.
    pub fn register_all(
        &mut self,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> Result<(), RegistryError> {
        tools
            .into_iter()
            .try_for_each(|tool| self.register_arc(tool))
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.tools[i].tool)
    }

    /// Tool names, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|r| r.spec.name.as_str()).collect()
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Every tool's description, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|r| r.spec.clone()).collect()
    }

    /// The tools in OpenAI's function-calling format (the `tools` field of a chat request).
    pub fn openai_tools(&self) -> Vec<Value> {
        self.tools.iter().map(|r| to_openai(&r.spec)).collect()
    }

    /// The tools in Anthropic's format (the `tools` field of a Messages request).
    pub fn anthropic_tools(&self) -> Vec<Value> {
        self.tools.iter().map(|r| to_anthropic(&r.spec)).collect()
    }

    /// Runs a tool call as a chat model sent it: the raw argument text is parsed leniently
    /// (see [`ToolCall::parse_arguments`]), then handled like [`ToolRegistry::call`]. Text that
    /// cannot be repaired comes back as an error output naming the problem.
    pub async fn call_tool(&self, call: &ToolCall) -> ToolOutput {
        if !self.by_name.contains_key(&call.name) {
            return self.call(&call.name, Value::Null).await;
        }
        match call.parse_arguments() {
            Ok(args) => self.call(&call.name, args).await,
            Err(e) => ToolOutput::error(format!(
                "arguments for tool '{}' are not a JSON object ({e}); send the arguments as one \
                 JSON object",
                call.name
            )),
        }
    }

    /// Runs a tool for the model. Never fails and never panics: an unknown tool, arguments
    /// that do not fit the schema, and a tool that panics all come back as an error output
    /// whose text tells the model what to do. `args` may also be a JSON string holding the
    /// object (some models send that), or null for "no arguments".
    ///
    /// The tool runs as its own Tokio task (so this must be awaited inside a Tokio runtime): a
    /// panic inside it is caught, and dropping the returned future cancels the tool (for bash,
    /// that kills its processes).
    pub async fn call(&self, name: &str, args: Value) -> ToolOutput {
        let Some(&index) = self.by_name.get(name) else {
            return ToolOutput::error(format!(
                "unknown tool '{name}'. Available tools: {}.",
                self.names().join(", ")
            ));
        };
        let registered = &self.tools[index];
        let args = match normalize_arguments(name, args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        let violations = schema::validate(&registered.spec.parameters, &args);
        if !violations.is_empty() {
            let problems: Vec<String> = violations.iter().map(ToString::to_string).collect();
            return ToolOutput::error(format!(
                "invalid arguments for tool '{name}': {}. Expected parameters: {}. Fix the \
                 arguments and call the tool again.",
                problems.join("; "),
                summarize_parameters(&registered.spec.parameters)
            ));
        }
        let tool = Arc::clone(&registered.tool);
        let mut task = AbortOnDrop(tokio::spawn(async move { tool.execute(args).await }));
        match (&mut task.0).await {
            Ok(output) => output,
            Err(e) if e.is_panic() => ToolOutput::error(format!(
                "tool '{name}' failed unexpectedly (it panicked: {}); this is a bug in the tool, \
                 not in your arguments",
                panic_message(e.into_panic())
            )),
            Err(_) => ToolOutput::error(format!("tool '{name}' was cancelled")),
        }
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string())
}

/// Turns what a model sent into an arguments object.
fn normalize_arguments(name: &str, args: Value) -> Result<Value, ToolOutput> {
    match args {
        Value::Object(_) => Ok(args),
        Value::Null => Ok(json!({})),
        Value::String(text) if text.trim().is_empty() => Ok(json!({})),
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(inner @ Value::Object(_)) => Ok(inner),
            Ok(other) => Err(ToolOutput::error(format!(
                "arguments for tool '{name}' must be a JSON object, got a string holding {}",
                schema::describe_value(&other)
            ))),
            Err(e) => Err(ToolOutput::error(format!(
                "arguments for tool '{name}' must be a JSON object; the string given is not valid \
                 JSON ({e})"
            ))),
        },
        other => Err(ToolOutput::error(format!(
            "arguments for tool '{name}' must be a JSON object, got {}",
            schema::describe_value(&other)
        ))),
    }
}

fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn check_parameters(spec: &ToolSpec) -> Result<(), RegistryError> {
    let bad = |reason: &str| RegistryError::BadSchema {
        name: spec.name.clone(),
        reason: reason.to_string(),
    };
    let Some(schema) = spec.parameters.as_object() else {
        return Err(bad("they must be a JSON object"));
    };
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        _ => return Err(bad("the schema's \"type\" must be \"object\"")),
    }
    if let Some(properties) = schema.get("properties")
        && !properties.is_object()
    {
        return Err(bad("\"properties\" must be an object"));
    }
    if let Some(required) = schema.get("required") {
        let names = required
            .as_array()
            .ok_or_else(|| bad("\"required\" must be an array"))?;
        let properties = schema.get("properties").and_then(Value::as_object);
        for name in names {
            let Some(name) = name.as_str() else {
                return Err(bad("\"required\" must list property names"));
            };
            if properties.is_none_or(|p| !p.contains_key(name)) {
                return Err(bad(&format!(
                    "required field '{name}' is not among the properties"
                )));
            }
        }
    }
    Ok(())
}

/// One tool in OpenAI's format: `{"type": "function", "function": {name, description, parameters}}`.
pub fn to_openai(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        }
    })
}

/// One tool in Anthropic's format: `{name, description, input_schema}`.
pub fn to_anthropic(spec: &ToolSpec) -> Value {
    json!({
        "name": spec.name,
        "description": spec.description,
        "input_schema": spec.parameters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;

    struct Echo(&'static str);

    #[async_trait]
    impl Tool for Echo {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "Echo the text."
        }
        fn parameters(&self) -> Value {
            json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": false
            })
        }
        async fn execute(&self, args: Value) -> ToolOutput {
            ToolOutput::ok(args["text"].as_str().unwrap_or_default())
        }
    }

    #[test]
    fn names_are_checked_and_unique() {
        let mut registry = ToolRegistry::new();
        registry.register(Echo("echo")).unwrap();
        assert_eq!(
            registry.register(Echo("echo")),
            Err(RegistryError::Duplicate("echo".into()))
        );
        for bad in ["", "has space", "dot.ted", "ünï", &"x".repeat(65)] {
            let name: &'static str = Box::leak(bad.to_string().into_boxed_str());
            assert!(matches!(
                registry.register(Echo(name)),
                Err(RegistryError::InvalidName(_))
            ));
        }
        registry
            .register(Echo(Box::leak("a-Z_9".repeat(12).into_boxed_str())))
            .unwrap();
        assert_eq!(registry.len(), 2);
    }

    #[test]
    fn arguments_may_arrive_as_a_json_string_or_null() {
        assert_eq!(
            normalize_arguments("t", json!("{\"a\": 1}")).unwrap(),
            json!({"a": 1})
        );
        assert_eq!(normalize_arguments("t", Value::Null).unwrap(), json!({}));
        assert_eq!(normalize_arguments("t", json!("  ")).unwrap(), json!({}));
        let err = normalize_arguments("t", json!("[1]")).unwrap_err();
        assert_eq!(
            err.error.as_deref(),
            Some(
                "arguments for tool 't' must be a JSON object, got a string holding an array of 1 items"
            )
        );
        assert!(normalize_arguments("t", json!("{oops")).is_err());
        assert!(normalize_arguments("t", json!(3)).is_err());
    }

    #[test]
    fn schemas_that_are_not_object_schemas_are_refused() {
        struct Odd(Value);
        #[async_trait]
        impl Tool for Odd {
            fn name(&self) -> &str {
                "odd"
            }
            fn description(&self) -> &str {
                ""
            }
            fn parameters(&self) -> Value {
                self.0.clone()
            }
            async fn execute(&self, _: Value) -> ToolOutput {
                ToolOutput::ok("")
            }
        }
        let mut registry = ToolRegistry::new();
        for schema in [
            json!("x"),
            json!({"type": "string"}),
            json!({"type": "object", "properties": []}),
            json!({"type": "object", "required": ["a"]}),
        ] {
            assert!(matches!(
                registry.register(Odd(schema)),
                Err(RegistryError::BadSchema { .. })
            ));
        }
        registry.register(Odd(json!({"type": "object"}))).unwrap();
    }
}
