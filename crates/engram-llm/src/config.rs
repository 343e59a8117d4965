//! Which model to talk to and how: the `[llm]` section of `ENGRAM_HOME/config.toml`, the
//! environment overrides, and the resolved settings a client is built from.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::retry::RetryPolicy;

/// The public OpenAI endpoint, used when no base URL is configured.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The public Anthropic endpoint, used when no base URL is configured.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The Anthropic API version sent in the `anthropic-version` header.
pub const ANTHROPIC_API_VERSION: &str = "2023-06-01";

/// The wire format a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Provider {
    /// OpenAI-compatible chat completions (OpenAI, DeepSeek, MiniMax, Ollama, vLLM, llama.cpp,
    /// LM Studio, ...).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic,
}

impl Provider {
    /// The lowercase name used in configuration and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The environment variable the API key is read from by default.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Provider::OpenAi => "OPENAI_API_KEY",
            Provider::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    /// The environment variable that overrides the base URL.
    pub fn base_url_env(self) -> &'static str {
        match self {
            Provider::OpenAi => "OPENAI_BASE_URL",
            Provider::Anthropic => "ANTHROPIC_BASE_URL",
        }
    }

    /// The provider's public endpoint.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::OpenAi => OPENAI_DEFAULT_BASE_URL,
            Provider::Anthropic => ANTHROPIC_DEFAULT_BASE_URL,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" => Ok(Provider::OpenAi),
            "anthropic" => Ok(Provider::Anthropic),
            _ => Err(ConfigError::UnknownProvider(s.to_string())),
        }
    }
}

/// Which field carries the answer-length limit on the OpenAI wire: most servers take
/// `max_tokens`; OpenAI's reasoning models (o-series, gpt-5) take only `max_completion_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_tokens` (the default).
    #[default]
    MaxTokens,
    /// `max_completion_tokens`.
    MaxCompletionTokens,
}

/// The `[llm]` section of `config.toml`. Every key is optional; the environment overrides it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// "openai" or "anthropic" (`ENGRAM_PROVIDER` overrides).
    pub provider: Option<Provider>,
    /// The model name sent to the server (`ENGRAM_MODEL` overrides).
    pub model: Option<String>,
    /// The endpoint: for OpenAI-compatible servers including `/v1`, e.g.
    /// `http://localhost:11434/v1`; for Anthropic without it (`OPENAI_BASE_URL` /
    /// `ANTHROPIC_BASE_URL` override).
    pub base_url: Option<String>,
    /// The environment variable holding the API key (default `OPENAI_API_KEY` or
    /// `ANTHROPIC_API_KEY`). The key itself never goes in the file.
    pub api_key_env: Option<String>,
    /// Longest answer, in tokens (Anthropic requires one: 4096 when unset).
    pub max_tokens: Option<u32>,
    /// Which OpenAI field carries `max_tokens`.
    pub max_tokens_field: Option<MaxTokensField>,
    /// Sampling temperature (unset: the server's default).
    pub temperature: Option<f32>,
    /// The model's context window in tokens, for budgeting history.
    pub context_window: Option<u32>,
    /// Whether the model takes tools natively (default true); false switches the agent to the
    /// JSON protocol.
    pub native_tools: Option<bool>,
    /// Whether to ask OpenAI-compatible servers for usage in streams (default true; turn off for
    /// servers that reject `stream_options`).
    pub stream_usage: Option<bool>,
    /// Seconds allowed to open a connection (default 10).
    pub connect_timeout_secs: Option<u64>,
    /// Seconds a stream may stay silent, or a server may take to start answering a streamed
    /// request (default 120).
    pub idle_timeout_secs: Option<u64>,
    /// Seconds a whole request may take, streamed or not (default 600).
    pub request_timeout_secs: Option<u64>,
    /// Attempts per request, the first included (default 3).
    pub max_attempts: Option<u32>,
    /// First wait before a retry, in milliseconds; it doubles each time (default 1000).
    pub retry_base_delay_ms: Option<u64>,
    /// Longest wait before a retry, in seconds (default 60); a server asking for longer is not
    /// retried.
    pub retry_max_delay_secs: Option<u64>,
    /// Extra fields merged into every request body, for server-specific switches
    /// (e.g. `{ reasoning_split = true }`).
    pub extra_body: Option<Map<String, Value>>,
}

/// A source of environment variables (`std::env::var` in production, a map in tests).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, ignoring unset and empty variables.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// An API key; its `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself, for the request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How long a request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To open a connection.
    pub connect: Duration,
    /// Silence allowed while streaming (and before a streamed answer starts).
    pub idle: Duration,
    /// The whole request.
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            idle: Duration::from_secs(120),
            request: Duration::from_secs(600),
        }
    }
}

/// Everything a client needs, resolved: no more optional settings, no environment.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// The wire format.
    pub provider: Provider,
    /// The model name.
    pub model: String,
    /// The endpoint (see [`LlmConfig::base_url`]).
    pub base_url: String,
    /// The key, if any (local servers often need none).
    pub api_key: Option<ApiKey>,
    /// Where the key comes from, for error messages.
    pub api_key_env: String,
    /// Default answer limit when a request sets none.
    pub max_tokens: Option<u32>,
    /// Which OpenAI field carries the limit.
    pub max_tokens_field: MaxTokensField,
    /// Default temperature when a request sets none.
    pub temperature: Option<f32>,
    /// The context window, if known.
    pub context_window: Option<u32>,
    /// Whether the model takes tools natively.
    pub native_tools: bool,
    /// Whether to send `stream_options.include_usage` (OpenAI wire).
    pub stream_usage: bool,
    /// Time limits.
    pub timeouts: Timeouts,
    /// Retry behaviour.
    pub retry: RetryPolicy,
    /// Extra request-body fields.
    pub extra_body: Map<String, Value>,
}

impl ClientConfig {
    /// Settings for `model` at `base_url` with every default: no key, default timeouts and
    /// retries. Adjust the public fields as needed.
    pub fn new(provider: Provider, model: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            provider,
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            api_key_env: provider.default_key_env().to_string(),
            max_tokens: None,
            max_tokens_field: MaxTokensField::default(),
            temperature: None,
            context_window: None,
            native_tools: true,
            stream_usage: true,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            extra_body: Map::new(),
        }
    }

    /// Sets the API key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(key));
        self
    }
}

/// Why no client could be built from the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Nothing says which model to use.
    #[error(
        "no language model configured: set ENGRAM_PROVIDER=openai|anthropic, ENGRAM_MODEL and OPENAI_API_KEY (or ANTHROPIC_API_KEY), or the [llm] section of {config_file}."
    )]
    NotConfigured {
        /// The configuration file the user can edit instead.
        config_file: String,
    },
    /// A provider is known but not which one: both providers' variables are set.
    #[error(
        "no language-model provider chosen ({reason}): set ENGRAM_PROVIDER=openai or ENGRAM_PROVIDER=anthropic, or provider in the [llm] section of {config_file}."
    )]
    NoProvider {
        /// Why it could not be told.
        reason: String,
        /// The configuration file.
        config_file: String,
    },
    /// A provider is chosen but no model.
    #[error(
        "no model chosen for the {provider} provider: set ENGRAM_MODEL (e.g. ENGRAM_MODEL={example}) or model in the [llm] section of {config_file}."
    )]
    NoModel {
        /// The chosen provider.
        provider: Provider,
        /// An example model name.
        example: &'static str,
        /// The configuration file.
        config_file: String,
    },
    /// The public endpoint needs a key and there is none.
    #[error(
        "no API key for {provider} at {base_url}: set {key_env}, or point {base_url_env} at a server that needs no key."
    )]
    MissingKey {
        /// The chosen provider.
        provider: Provider,
        /// The endpoint.
        base_url: String,
        /// The variable the key is read from.
        key_env: String,
        /// The variable that overrides the endpoint.
        base_url_env: &'static str,
    },
    /// `ENGRAM_PROVIDER` or `provider` names something else.
    #[error(
        "unknown language-model provider '{0}': use openai (for any OpenAI-compatible server) or anthropic."
    )]
    UnknownProvider(String),
    /// The base URL is not an http(s) URL.
    #[error(
        "the base URL '{0}' is not an http:// or https:// URL: fix OPENAI_BASE_URL, ANTHROPIC_BASE_URL or base_url in [llm]."
    )]
    BadBaseUrl(String),
    /// The `[llm]` section could not be read.
    #[error("the [llm] section of the configuration is invalid ({0}); fix it or remove it.")]
    Invalid(String),
    /// The HTTP client could not be set up.
    #[error(
        "could not set up the HTTP client ({0}); this is a bug or a broken TLS setup, please report it."
    )]
    Http(String),
}

const DEFAULT_CONFIG_FILE: &str = "ENGRAM_HOME/config.toml";

impl ConfigError {
    /// Names the actual configuration file in the message (instead of `ENGRAM_HOME/config.toml`).
    pub fn in_file(mut self, path: &std::path::Path) -> Self {
        let shown = path.display().to_string();
        match &mut self {
            ConfigError::NotConfigured { config_file }
            | ConfigError::NoProvider { config_file, .. }
            | ConfigError::NoModel { config_file, .. } => *config_file = shown,
            _ => {}
        }
        self
    }
}

impl LlmConfig {
    /// Reads the `[llm]` section from the text of a whole `config.toml` (other sections are
    /// ignored; no section means an empty configuration).
    pub fn from_config_toml(text: &str) -> Result<LlmConfig, ConfigError> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            llm: Option<toml::Value>,
        }
        let file: File = toml::from_str(text).map_err(|e| ConfigError::Invalid(one_line(&e)))?;
        match file.llm {
            None => Ok(LlmConfig::default()),
            Some(section) => section
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Invalid(one_line(&e))),
        }
    }

    /// Applies the environment and the defaults. The provider is never guessed from the model
    /// name: it comes from `ENGRAM_PROVIDER`, `provider`, or — when those are unset — from which
    /// provider's variables (`OPENAI_*` or `ANTHROPIC_*`) are set, if only one provider's are.
    pub fn resolve(&self, env: EnvLookup<'_>) -> Result<ClientConfig, ConfigError> {
        let get = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let config_file = DEFAULT_CONFIG_FILE.to_string();

        let provider = match get("ENGRAM_PROVIDER") {
            Some(name) => Some(name.parse::<Provider>()?),
            None => self.provider,
        };
        let model = get("ENGRAM_MODEL").or_else(|| self.model.clone());
        let provider = match provider {
            Some(p) => p,
            None => {
                let openai = ["OPENAI_API_KEY", "OPENAI_BASE_URL"]
                    .iter()
                    .any(|v| get(v).is_some());
                let anthropic = ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]
                    .iter()
                    .any(|v| get(v).is_some());
                match (openai, anthropic) {
                    (true, false) => Provider::OpenAi,
                    (false, true) => Provider::Anthropic,
                    (true, true) => {
                        return Err(ConfigError::NoProvider {
                            reason: "both OPENAI_* and ANTHROPIC_* variables are set".into(),
                            config_file,
                        });
                    }
                    (false, false) if model.is_some() => {
                        return Err(ConfigError::NoProvider {
                            reason: "a model is named but no provider".into(),
                            config_file,
                        });
                    }
                    (false, false) => return Err(ConfigError::NotConfigured { config_file }),
                }
            }
        };
        let Some(model) = model.filter(|m| !m.trim().is_empty()) else {
            return Err(ConfigError::NoModel {
                provider,
                example: match provider {
                    Provider::OpenAi => "gpt-4o-mini",
                    Provider::Anthropic => "claude-sonnet-4-5",
                },
                config_file,
            });
        };

        let explicit_base = get(provider.base_url_env()).or_else(|| self.base_url.clone());
        let base_url = explicit_base
            .clone()
            .unwrap_or_else(|| provider.default_base_url().to_string());
        let base_url = normalise_base_url(&base_url)?;
        let api_key_env = self
            .api_key_env
            .clone()
            .unwrap_or_else(|| provider.default_key_env().to_string());
        let api_key = get(&api_key_env).map(|k| ApiKey::new(k.trim()));
        // The public endpoints always need a key; a custom server (Ollama, vLLM, ...) may not.
        if api_key.is_none() && explicit_base.is_none() {
            return Err(ConfigError::MissingKey {
                provider,
                base_url,
                key_env: api_key_env,
                base_url_env: provider.base_url_env(),
            });
        }

        let defaults = Timeouts::default();
        let secs = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_secs);
        let retry_defaults = RetryPolicy::default();
        Ok(ClientConfig {
            provider,
            model: model.trim().to_string(),
            base_url,
            api_key,
            api_key_env,
            max_tokens: self.max_tokens,
            max_tokens_field: self.max_tokens_field.unwrap_or_default(),
            temperature: self.temperature,
            context_window: self.context_window,
            native_tools: self.native_tools.unwrap_or(true),
            stream_usage: self.stream_usage.unwrap_or(true),
            timeouts: Timeouts {
                connect: secs(self.connect_timeout_secs, defaults.connect),
                idle: secs(self.idle_timeout_secs, defaults.idle),
                request: secs(self.request_timeout_secs, defaults.request),
            },
            retry: RetryPolicy {
                max_attempts: self
                    .max_attempts
                    .unwrap_or(retry_defaults.max_attempts)
                    .max(1),
                base_delay: self
                    .retry_base_delay_ms
                    .map_or(retry_defaults.base_delay, Duration::from_millis),
                max_delay: secs(self.retry_max_delay_secs, retry_defaults.max_delay),
            },
            extra_body: self.extra_body.clone().unwrap_or_default(),
        })
    }
}

/// Checks the scheme and drops trailing slashes.
fn normalise_base_url(url: &str) -> Result<String, ConfigError> {
    let trimmed = url.trim().trim_end_matches('/');
    let lower = trimmed.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() => Ok(trimmed.to_string()),
        _ => Err(ConfigError::BadBaseUrl(url.to_string())),
    }
}

fn one_line(error: &dyn fmt::Display) -> String {
    error
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn nothing_configured_says_what_to_set() {
        let err = LlmConfig::default().resolve(&env(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no language model configured: set ENGRAM_PROVIDER=openai|anthropic, ENGRAM_MODEL and OPENAI_API_KEY (or ANTHROPIC_API_KEY), or the [llm] section of ENGRAM_HOME/config.toml."
        );
        let err = err.in_file(std::path::Path::new("/home/me/.engram/config.toml"));
        assert!(
            err.to_string()
                .ends_with("[llm] section of /home/me/.engram/config.toml.")
        );
    }

    #[test]
    fn environment_picks_provider_model_key_and_url() {
        let c = LlmConfig::default()
            .resolve(&env(&[
                ("ENGRAM_PROVIDER", "anthropic"),
                ("ENGRAM_MODEL", "claude-x"),
                ("ANTHROPIC_API_KEY", "sk-ant"),
            ]))
            .unwrap();
        assert_eq!(c.provider, Provider::Anthropic);
        assert_eq!(c.model, "claude-x");
        assert_eq!(c.base_url, ANTHROPIC_DEFAULT_BASE_URL);
        assert_eq!(c.api_key, Some(ApiKey::new("sk-ant")));
        assert!(
            !format!("{c:?}").contains("sk-ant"),
            "keys never show in Debug"
        );
    }

    #[test]
    fn environment_overrides_the_file() {
        let file = LlmConfig::from_config_toml(
            "[store]\npath = 'x'\n[llm]\nprovider = 'openai'\nmodel = 'from-file'\nbase_url = 'http://localhost:11434/v1/'\nmax_attempts = 5\nretry_base_delay_ms = 10\nextra_body = { reasoning_split = true }\n",
        )
        .unwrap();
        let c = file.resolve(&env(&[])).unwrap();
        assert_eq!(c.model, "from-file");
        assert_eq!(
            c.base_url, "http://localhost:11434/v1",
            "a local server needs no key"
        );
        assert_eq!(c.api_key, None);
        assert_eq!(c.retry.max_attempts, 5);
        assert_eq!(c.retry.base_delay, Duration::from_millis(10));
        assert_eq!(
            c.extra_body.get("reasoning_split"),
            Some(&Value::Bool(true))
        );
        let c = file
            .resolve(&env(&[
                ("ENGRAM_MODEL", "from-env"),
                ("OPENAI_BASE_URL", "https://api.deepseek.com/v1"),
            ]))
            .unwrap();
        assert_eq!(c.model, "from-env");
        assert_eq!(c.base_url, "https://api.deepseek.com/v1");
    }

    #[test]
    fn provider_is_explicit_or_unambiguous_never_from_the_model_name() {
        let err = LlmConfig::default()
            .resolve(&env(&[("ENGRAM_MODEL", "claude-3-opus")]))
            .unwrap_err();
        assert!(matches!(err, ConfigError::NoProvider { .. }), "{err}");
        let c = LlmConfig::default()
            .resolve(&env(&[
                ("ENGRAM_MODEL", "claude-3-opus"),
                ("OPENAI_API_KEY", "k"),
            ]))
            .unwrap();
        assert_eq!(
            c.provider,
            Provider::OpenAi,
            "the key's family decides, not the name"
        );
        let err = LlmConfig::default()
            .resolve(&env(&[
                ("ENGRAM_MODEL", "m"),
                ("OPENAI_API_KEY", "k"),
                ("ANTHROPIC_API_KEY", "k"),
            ]))
            .unwrap_err();
        assert!(
            err.to_string().contains("set ENGRAM_PROVIDER=openai"),
            "{err}"
        );
        let err = LlmConfig::default()
            .resolve(&env(&[("ENGRAM_PROVIDER", "gemini")]))
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown language-model provider 'gemini'")
        );
    }

    #[test]
    fn public_endpoint_without_key_says_which_variable() {
        let err = LlmConfig::default()
            .resolve(&env(&[
                ("ENGRAM_PROVIDER", "openai"),
                ("ENGRAM_MODEL", "gpt-x"),
            ]))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no API key for openai at https://api.openai.com/v1: set OPENAI_API_KEY, or point OPENAI_BASE_URL at a server that needs no key."
        );
        let err = LlmConfig::default()
            .resolve(&env(&[("ENGRAM_PROVIDER", "openai")]))
            .unwrap_err();
        assert!(err.to_string().contains("set ENGRAM_MODEL"), "{err}");
    }

    #[test]
    fn bad_values_are_reported() {
        let err = LlmConfig::from_config_toml("[llm]\nprovder = 'openai'\n").unwrap_err();
        assert!(err.to_string().contains("provder"), "{err}");
        let err = LlmConfig::default()
            .resolve(&env(&[
                ("ENGRAM_PROVIDER", "openai"),
                ("ENGRAM_MODEL", "m"),
                ("OPENAI_BASE_URL", "localhost:8080"),
            ]))
            .unwrap_err();
        assert!(matches!(err, ConfigError::BadBaseUrl(_)));
        assert_eq!(
            LlmConfig::from_config_toml("").unwrap(),
            LlmConfig::default()
        );
    }
}
