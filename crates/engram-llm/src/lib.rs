//! engram's language-model clients.
//!
//! Two wire formats, written directly on HTTP with streaming (server-sent events):
//! [`OpenAiClient`] for OpenAI-compatible chat completions (OpenAI, DeepSeek, MiniMax, Ollama,
//! vLLM, llama.cpp, LM Studio, ...) and [`AnthropicClient`] for Anthropic Messages. Both
//! implement [`engram_core::llm::ChatModel`], retry transient failures with exponential backoff
//! (never after part of an answer has been delivered), enforce connect, idle and overall
//! timeouts, and classify errors so the user knows what to do.
//!
//! Build a client from configuration with [`from_config`], or from explicit settings with
//! [`build`]. With the `scripted` feature, [`scripted::ScriptedServer`] is a real HTTP server
//! that speaks both formats and replays scripted turns, for tests and benchmarks.

mod anthropic;
pub mod config;
mod errors;
mod openai;
pub mod retry;
pub mod sse;
mod transport;

#[cfg(feature = "scripted")]
pub mod scripted;

use std::sync::Arc;

use engram_core::llm::ChatModel;

pub use anthropic::{AnthropicClient, DEFAULT_MAX_TOKENS};
pub use config::{
    ApiKey, ClientConfig, ConfigError, LlmConfig, MaxTokensField, Provider, Timeouts, process_env,
};
pub use openai::OpenAiClient;
pub use retry::RetryPolicy;

/// A client for resolved settings, speaking the settings' provider's wire format.
pub fn build(config: ClientConfig) -> Result<Arc<dyn ChatModel>, ConfigError> {
    Ok(match config.provider {
        Provider::OpenAi => Arc::new(OpenAiClient::new(config)?),
        Provider::Anthropic => Arc::new(AnthropicClient::new(config)?),
    })
}

/// A client for the `[llm]` configuration with the environment applied (see
/// [`LlmConfig::resolve`]). Pass [`process_env`] as `env` in production. When nothing is
/// configured the error says exactly what to set; name the real configuration file in it with
/// [`ConfigError::in_file`].
pub fn from_config(
    config: &LlmConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatModel>, ConfigError> {
    build(config.resolve(env)?)
}
