//! The `[server]` and `[mcp]` sections of `ENGRAM_HOME/config.toml`.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8420"          # address and port of `engram serve`
//! user = "me"                        # default user for MCP clients that name none
//! max_body_bytes = 1048576           # request body limit (batches: max_batch_body_bytes)
//! max_batch_body_bytes = 16777216
//! header_timeout_secs = 10           # to send a request head; also how long an idle
//!                                    # keep-alive connection stays open
//! idle_timeout_secs = 30             # a request body or a response standing still
//! max_connections = 10000            # more get 503 busy (default: below the open file limit)
//! tokens = [                         # tokens kept in the config, by hash (besides `engram token`)
//!   { name = "laptop", sha256 = "9f86d08...", users = ["me"] },
//! ]
//!
//! [mcp.servers.files]                # MCP servers whose tools the agent may use
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]
//! env = { DEBUG = "0" }
//!
//! [mcp.servers.remote]
//! url = "http://127.0.0.1:9000/mcp"
//! bearer_token_env = "REMOTE_MCP_TOKEN"
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::connections::{
    ConnectionLimits, DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT, default_max_connections,
};

/// The default address of `engram serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8420";
/// The default request body limit (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// The default body limit of `POST /v1/memories/batch` (16 MiB).
pub const DEFAULT_MAX_BATCH_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Why the configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file is not TOML, or a section has the wrong shape.
    #[error("{0}")]
    Parse(String),
    /// A value is not acceptable.
    #[error("{0}")]
    Invalid(String),
}

/// `[server]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Where `engram serve` listens (`ADDR:PORT`); `--listen` overrides it.
    pub listen: Option<String>,
    /// The user MCP tools act for when a client names none and its token has no single user.
    pub user: Option<String>,
    /// Largest request body, in bytes.
    pub max_body_bytes: Option<usize>,
    /// Largest body of a batch add, in bytes.
    pub max_batch_body_bytes: Option<usize>,
    /// Seconds a client has to send a whole request head (also how long an idle keep-alive
    /// connection is kept).
    pub header_timeout_secs: Option<u64>,
    /// Seconds a request body or a response may stand still on the client's side.
    pub idle_timeout_secs: Option<u64>,
    /// Connections served at once; more are answered `503 busy`.
    pub max_connections: Option<usize>,
    /// Tokens listed by hash (in addition to those made with `engram token create`).
    pub tokens: Vec<ConfigToken>,
}

/// A token kept in the config file, by the SHA-256 of its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigToken {
    /// A name for logs and history (`api:config:<name>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Lowercase hex SHA-256 of the token's text (`printf %s "$TOKEN" | sha256sum`).
    pub sha256: String,
    /// The users whose memories the token may touch.
    pub users: Vec<String>,
}

impl ServerSettings {
    /// The `[server]` section of a config file's text (defaults when absent).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let settings: Self = section(text, "server")?.unwrap_or_default();
        settings.validate()?;
        Ok(settings)
    }

    /// Checks values the types cannot: addresses, limits, token hashes and users.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(listen) = &self.listen {
            parse_listen(listen)?;
        }
        for (key, value) in [
            ("max_body_bytes", self.max_body_bytes),
            ("max_batch_body_bytes", self.max_batch_body_bytes),
        ] {
            if value.is_some_and(|v| v < 1024) {
                return Err(ConfigError::Invalid(format!(
                    "[server] {key} must be at least 1024 bytes"
                )));
            }
        }
        for (key, value) in [
            ("header_timeout_secs", self.header_timeout_secs),
            ("idle_timeout_secs", self.idle_timeout_secs),
        ] {
            if value.is_some_and(|v| !(1..=86_400).contains(&v)) {
                return Err(ConfigError::Invalid(format!(
                    "[server] {key} must be between 1 and 86400 seconds"
                )));
            }
        }
        if self.max_connections == Some(0) {
            return Err(ConfigError::Invalid(
                "[server] max_connections must be at least 1".to_string(),
            ));
        }
        for (i, token) in self.tokens.iter().enumerate() {
            let label = token
                .name
                .clone()
                .unwrap_or_else(|| format!("number {}", i + 1));
            if token.sha256.len() != 64 || !token.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ConfigError::Invalid(format!(
                    "[server] token {label}: sha256 must be 64 hex digits (printf %s \"$TOKEN\" | sha256sum)"
                )));
            }
            if token.users.is_empty() || token.users.iter().any(|u| u.trim().is_empty()) {
                return Err(ConfigError::Invalid(format!(
                    "[server] token {label}: users must list at least one non-empty user"
                )));
            }
        }
        Ok(())
    }

    /// The body limit for ordinary routes.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES)
    }

    /// The body limit for batch adds.
    pub fn max_batch_body_bytes(&self) -> usize {
        self.max_batch_body_bytes
            .unwrap_or(DEFAULT_MAX_BATCH_BODY_BYTES)
            .max(self.max_body_bytes())
    }
}

impl ServerSettings {
    /// Timeouts and the connection cap, for a process that may open `file_limit` files.
    pub fn connection_limits(&self, file_limit: Option<u64>) -> ConnectionLimits {
        ConnectionLimits {
            header_timeout: self
                .header_timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_HEADER_TIMEOUT),
            idle_timeout: self
                .idle_timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_IDLE_TIMEOUT),
            max_connections: self
                .max_connections
                .unwrap_or_else(|| default_max_connections(file_limit)),
        }
    }
}

/// Reads `ADDR:PORT` (`127.0.0.1:8420`, `[::1]:8420`, `localhost:8420`).
pub fn parse_listen(text: &str) -> Result<SocketAddr, ConfigError> {
    let text = text.trim();
    if let Some(port) = text.strip_prefix("localhost:") {
        let port: u16 = port
            .parse()
            .map_err(|_| ConfigError::Invalid(format!("'{text}' has no valid port")))?;
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        ConfigError::Invalid(format!(
            "'{text}' is not an address and port such as 127.0.0.1:8420 or [::1]:8420"
        ))
    })
}

/// `[mcp]`: other MCP servers whose tools the agent may use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// The servers, by name; their tools reach the model as `mcp_<name>_<tool>`.
    pub servers: BTreeMap<String, McpServerSettings>,
}

/// `[mcp.servers.<name>]`: a command to run (stdio) or a URL (streamable HTTP).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerSettings {
    /// The program to start (stdio transport).
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables for it.
    pub env: BTreeMap<String, String>,
    /// The server's URL (streamable HTTP transport).
    pub url: Option<String>,
    /// An environment variable holding a bearer token for `url`.
    pub bearer_token_env: Option<String>,
    /// Seconds to wait for the server to start and list its tools (default 10).
    pub connect_timeout_secs: Option<u64>,
    /// Seconds one tool call may take (default 60).
    pub call_timeout_secs: Option<u64>,
    /// Set to false to keep the entry but not use it.
    pub enabled: Option<bool>,
}

impl McpSettings {
    /// The `[mcp]` section of a config file's text (defaults when absent).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let settings: Self = section(text, "mcp")?.unwrap_or_default();
        settings.validate()?;
        Ok(settings)
    }

    /// Checks names and that each server has exactly one of a command and a URL.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, server) in &self.servers {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(ConfigError::Invalid(format!(
                    "[mcp.servers.{name}]: a server name may hold only letters, digits, '_' and '-'"
                )));
            }
            match (&server.command, &server.url) {
                (Some(_), Some(_)) => {
                    return Err(ConfigError::Invalid(format!(
                        "[mcp.servers.{name}]: give either command (stdio) or url (HTTP), not both"
                    )));
                }
                (None, None) => {
                    return Err(ConfigError::Invalid(format!(
                        "[mcp.servers.{name}]: give command (stdio) or url (HTTP)"
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// One top-level table of a TOML document, read into `T`; `None` when absent.
fn section<T: serde::de::DeserializeOwned>(
    text: &str,
    name: &str,
) -> Result<Option<T>, ConfigError> {
    let mut table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Parse(format!("config.toml: {e}")))?;
    let Some(value) = table.remove(name) else {
        return Ok(None);
    };
    value
        .try_into()
        .map(Some)
        .map_err(|e: toml::de::Error| ConfigError::Parse(format!("config.toml [{name}]: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_section_is_the_default() {
        assert_eq!(
            ServerSettings::from_toml("[llm]\nmodel = \"x\"\n").unwrap(),
            ServerSettings::default()
        );
        assert_eq!(McpSettings::from_toml("").unwrap(), McpSettings::default());
    }

    #[test]
    fn server_settings_are_read_and_checked() {
        let text = format!(
            "[server]\nlisten = \"0.0.0.0:9000\"\ntokens = [{{ name = \"a\", sha256 = \"{}\", users = [\"u\"] }}]\n",
            "ab".repeat(32)
        );
        let settings = ServerSettings::from_toml(&text).unwrap();
        assert_eq!(settings.tokens.len(), 1);
        assert_eq!(settings.max_body_bytes(), DEFAULT_MAX_BODY_BYTES);

        let err = ServerSettings::from_toml("[server]\nlisten = \"nowhere\"\n").unwrap_err();
        assert!(err.to_string().contains("not an address"));
        let err = ServerSettings::from_toml(
            "[server]\ntokens = [{ sha256 = \"ab\", users = [\"u\"] }]\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("64 hex digits"));
        let err = ServerSettings::from_toml("[server]\nlisen = \"x\"\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `lisen`"), "{err}");
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen("localhost:1").unwrap().port(), 1);
        assert!(parse_listen("[::1]:8420").unwrap().ip().is_loopback());
        assert!(parse_listen("8420").is_err());
    }

    #[test]
    fn mcp_servers_need_a_command_or_a_url() {
        let ok = McpSettings::from_toml(
            "[mcp.servers.files]\ncommand = \"npx\"\nargs = [\"x\"]\n[mcp.servers.web]\nurl = \"http://h/mcp\"\n",
        )
        .unwrap();
        assert_eq!(ok.servers.len(), 2);
        assert!(McpSettings::from_toml("[mcp.servers.x]\nargs = []\n").is_err());
        assert!(McpSettings::from_toml("[mcp.servers.\"a b\"]\ncommand = \"x\"\n").is_err());
    }
}
