//! engram's agent.
//!
//! For now this crate holds the tools the agent acts through ([`tools`]): a registry that
//! validates a model's arguments and exports tool descriptions for OpenAI- and Anthropic-style
//! APIs, and the built-in file, shell and note tools, confined to a workspace directory.

pub mod tools;
