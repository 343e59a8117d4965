//! `ENGRAM_HOME/config.toml`: one optional file, one section per part of engram.
//!
//! - `[llm]`: which model and how ([`engram_llm::LlmConfig`], with its environment overrides).
//! - `[agent]`: how the agent runs ([`AgentSettings`]).
//! - `[embed]`: which embedding model ([`engram_embed::EmbedConfig`]).
//! - `[memory]`: the memory manager and the working memory's budget ([`MemorySettings`]).
//! - `[scheduler]`, `[search]`: read by their commands through [`Config::section`].
//! - `[store]`: where engram's data lives ([`StoreSettings`]): this home's SQLite file unless a
//!   PostgreSQL URL is given.
//!
//! A file that does not parse is a one-line error naming the file, the line and the column; it
//! is never rewritten. Unknown sections and unknown keys in `[llm]` and `[agent]` are reported
//! as warnings and ignored, so a typo never stops engram (and never goes unnoticed).

use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::Result;
use engram_embed::EmbedConfig;
use engram_llm::LlmConfig;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use crate::exit::{Failure, Status};

/// The file's name inside ENGRAM_HOME.
pub const CONFIG_FILE: &str = "config.toml";

/// The sections engram reads. A part of engram that adds one adds its name here.
const KNOWN_SECTIONS: [&str; 9] = [
    "llm",
    "agent",
    "scheduler",
    "embed",
    "search",
    "server",
    "mcp",
    "memory",
    "store",
];

/// The `[store]` section: where engram's data lives. Without a URL, `ENGRAM_HOME/engram.db`.
/// The environment wins over the file: ENGRAM_DATABASE_URL, ENGRAM_DATABASE_POOL_SIZE,
/// ENGRAM_DATABASE_CA_FILE.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// A PostgreSQL URL (`postgres://user:password@host:5432/database`).
    pub url: Option<String>,
    /// Connections each process keeps to PostgreSQL at most (default 16).
    pub pool_size: Option<usize>,
    /// Extra trusted roots (PEM) for a PostgreSQL server's certificate, with `sslmode=require`.
    pub ca_file: Option<PathBuf>,
}

impl StoreSettings {
    /// The `[store]` section of `home`'s config.toml with the environment's overrides.
    pub fn load(home: &Path) -> Result<Self> {
        let mut settings: StoreSettings = Config::load(home)?.section("store")?;
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if let Some(url) = var("ENGRAM_DATABASE_URL") {
            settings.url = Some(url);
        }
        if let Some(size) = var("ENGRAM_DATABASE_POOL_SIZE") {
            settings.pool_size = Some(size.trim().parse().map_err(|_| {
                anyhow::anyhow!("ENGRAM_DATABASE_POOL_SIZE is not a number of connections: {size}")
            })?);
        }
        if let Some(file) = var("ENGRAM_DATABASE_CA_FILE") {
            settings.ca_file = Some(PathBuf::from(file));
        }
        Ok(settings)
    }
}

/// How tools are offered to the model, as configured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolModeSetting {
    /// Native tool calls unless `[llm] native_tools = false` says the model has none.
    #[default]
    Auto,
    /// Always native tool calls (function calling).
    Native,
    /// Always the JSON protocol `{"thought", "tool", "params"}`, for models without native tools.
    Json,
}

/// The `[agent]` section. Every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSettings {
    /// Model calls a run may make before it stops without an answer (default 20).
    pub max_steps: Option<u32>,
    /// `auto` (default), `native` or `json`.
    pub tool_mode: Option<ToolModeSetting>,
    /// Whose memory the agent uses (default: the operating-system user name).
    pub user: Option<String>,
    /// The agent's workspace directory (default: ENGRAM_HOME/workspace).
    pub workspace: Option<PathBuf>,
    /// Variables of engram's environment the bash tool passes to commands besides the safe
    /// ones (PATH, HOME, the locale, ...), e.g. `["GH_TOKEN"]`. The model's API key is never
    /// passed.
    pub shell_env: Vec<String>,
}

/// The `[memory]` section: the memory manager and the working memory's budget. Every key is
/// optional; unset keys take the defaults of [`engram_memory::ManagerConfig`] and
/// [`engram_memory::working::WorkingConfig`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemorySettings {
    /// The memory block injected each turn is cut to this many tokens (default 1500).
    pub context_budget_tokens: Option<usize>,
    /// Episodes below this importance (1-5) are not brought back (default 2).
    pub min_importance: Option<u8>,
    /// Relevant episodes per turn (default 5).
    pub relevant_episodes: Option<usize>,
    /// Recent episodes per turn, besides the relevant ones (default 3).
    pub recent_episodes: Option<usize>,
    /// Extract memories every this many turns (default 10; 0: only at the session's end and
    /// on /new).
    pub extract_every_turns: Option<u32>,
    /// Let the model decide ADD / UPDATE / DELETE / NONE against known entries (default true).
    pub model_merge: Option<bool>,
    /// The model's context window in tokens (default 32768).
    pub context_window: Option<usize>,
    /// Tokens kept free for the answer (default 4096).
    pub reply_reserve: Option<usize>,
    /// The longest running summary of older turns, in tokens (default 800).
    pub summary_max_tokens: Option<usize>,
}

impl MemorySettings {
    /// The memory manager's settings.
    pub fn manager(&self) -> engram_memory::ManagerConfig {
        let d = engram_memory::ManagerConfig::default();
        engram_memory::ManagerConfig {
            context_budget_tokens: self
                .context_budget_tokens
                .unwrap_or(d.context_budget_tokens),
            min_importance: self.min_importance.unwrap_or(d.min_importance),
            relevant_episodes: self.relevant_episodes.unwrap_or(d.relevant_episodes),
            recent_episodes: self.recent_episodes.unwrap_or(d.recent_episodes),
            extract_every_turns: self.extract_every_turns.unwrap_or(d.extract_every_turns),
            model_merge: self.model_merge.unwrap_or(d.model_merge),
        }
    }

    /// The working memory's budget.
    pub fn working(&self) -> engram_memory::working::WorkingConfig {
        let d = engram_memory::working::WorkingConfig::default();
        engram_memory::working::WorkingConfig {
            context_window: self.context_window.unwrap_or(d.context_window),
            reply_reserve: self.reply_reserve.unwrap_or(d.reply_reserve),
            summary_max_tokens: self.summary_max_tokens.unwrap_or(d.summary_max_tokens),
            target_percent: d.target_percent,
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Where it was read from (whether or not the file exists).
    pub path: PathBuf,
    /// `[llm]`.
    pub llm: LlmConfig,
    /// `[agent]`.
    pub agent: AgentSettings,
    /// `[memory]`.
    pub memory: MemorySettings,
    /// `[embed]`.
    #[allow(dead_code)] // the retrieval commands read it through `section("embed")` for now
    pub embed: EmbedConfig,
    /// What was ignored (unknown sections and keys), one sentence each.
    pub warnings: Vec<String>,
    /// The file's text, for sections read on demand.
    #[allow(dead_code)]
    text: Option<String>,
}

impl Config {
    /// Reads `config.toml` in `home`; a missing file is the default configuration.
    pub fn load(home: &Path) -> Result<Config> {
        let path = home.join(CONFIG_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Config::parse(&text, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config {
                path,
                ..Config::default()
            }),
            Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        }
    }

    /// Reads the text of a configuration file (`path` is only used in messages).
    pub fn parse(text: &str, path: &Path) -> Result<Config> {
        let mut root = DeTable::parse(text).map_err(|e| located(path, text, &e))?;
        let mut warnings = Vec::new();

        let unknown: Vec<(String, Range<usize>)> = root
            .get_ref()
            .iter()
            .filter(|(key, _)| !KNOWN_SECTIONS.contains(&key.get_ref().as_ref()))
            .map(|(key, _)| (key.get_ref().to_string(), key.span()))
            .collect();
        for (key, span) in &unknown {
            warnings.push(format!(
                "{}: unknown section or key '{key}' is ignored (known sections: [{}])",
                position(path, text, span.start),
                KNOWN_SECTIONS.join("], [")
            ));
        }
        for (key, _) in &unknown {
            root.get_mut().remove(key.as_str());
        }

        let llm = typed_section::<LlmConfig>(root.get_mut(), "llm", path, text, &mut warnings)?;
        let agent =
            typed_section::<AgentSettings>(root.get_mut(), "agent", path, text, &mut warnings)?;
        let embed =
            typed_section::<EmbedConfig>(root.get_mut(), "embed", path, text, &mut warnings)?;
        let memory =
            typed_section::<MemorySettings>(root.get_mut(), "memory", path, text, &mut warnings)?;
        Ok(Config {
            path: path.to_path_buf(),
            llm,
            agent,
            memory,
            embed,
            warnings,
            text: Some(text.to_string()),
        })
    }

    // Not read yet by the binary: the scheduler and embedder sections move here from their own
    // readers (see the module docs).
    #[allow(dead_code)]
    /// Reads another section (`[scheduler]`, `[embed]`, ...) into its type; a missing section
    /// is `T::default()`. Errors name the file, line and column.
    pub fn section<T: DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        let Some(text) = &self.text else {
            return Ok(T::default());
        };
        let mut root = DeTable::parse(text).map_err(|e| located(&self.path, text, &e))?;
        match take(root.get_mut(), name) {
            None => Ok(T::default()),
            Some(value) => T::deserialize(ValueDeserializer::from(value))
                .map_err(|e| located(&self.path, text, &e)),
        }
    }
}

fn take<'i>(table: &mut DeTable<'i>, name: &str) -> Option<Spanned<DeValue<'i>>> {
    table.remove(name)
}

/// Reads a section whose type lists its keys (all of them serialise, as `null` when unset):
/// unknown keys are warned about and dropped, then the rest is read with positions kept.
fn typed_section<T>(
    root: &mut DeTable<'_>,
    name: &str,
    path: &Path,
    text: &str,
    warnings: &mut Vec<String>,
) -> Result<T>
where
    T: DeserializeOwned + Serialize + Default,
{
    let Some(mut value) = take(root, name) else {
        return Ok(T::default());
    };
    let known = known_keys::<T>();
    if let DeValue::Table(table) = value.get_mut() {
        let unknown: Vec<(String, Range<usize>)> = table
            .iter()
            .filter(|(key, _)| !known.iter().any(|k| k == key.get_ref().as_ref()))
            .map(|(key, _)| (key.get_ref().to_string(), key.span()))
            .collect();
        for (key, span) in &unknown {
            warnings.push(format!(
                "{}: unknown key '{key}' in [{name}] is ignored (known keys: {})",
                position(path, text, span.start),
                known.join(", ")
            ));
        }
        for (key, _) in &unknown {
            table.remove(key.as_str());
        }
    }
    T::deserialize(ValueDeserializer::from(value)).map_err(|e| located(path, text, &e))
}

/// The key names of a settings type, read from its default value serialised to JSON.
fn known_keys<T: Serialize + Default>() -> Vec<String> {
    match serde_json::to_value(T::default()) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `path:line:column` for a byte offset into `text`.
fn position(path: &Path, text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("{}:{line}:{column}", path.display())
}

/// A configuration error as one line naming the place (exit status 2).
fn located(path: &Path, text: &str, error: &toml::de::Error) -> anyhow::Error {
    let place = match error.span() {
        Some(span) => position(path, text, span.start),
        None => path.display().to_string(),
    };
    let message = error
        .message()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    Failure {
        status: Status::Usage,
        message: format!(
            "the configuration file {place} is invalid: {message}; fix it (engram never rewrites it)"
        ),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_llm::Provider;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("/h/config.toml"))
    }

    #[test]
    fn a_missing_file_is_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::load(dir.path()).unwrap();
        assert_eq!(config.llm, LlmConfig::default());
        assert_eq!(config.agent, AgentSettings::default());
        assert!(config.warnings.is_empty());
        assert_eq!(config.path, dir.path().join("config.toml"));
    }

    #[test]
    fn sections_are_read_into_their_types() {
        let config = parse(
            "[llm]\nprovider = 'anthropic'\nmodel = 'claude-x'\nmax_attempts = 5\nextra_body = { thinking = true }\n\n[agent]\nmax_steps = 7\ntool_mode = 'json'\nuser = 'alice'\nworkspace = '/tmp/ws'\n",
        )
        .unwrap();
        assert_eq!(config.llm.provider, Some(Provider::Anthropic));
        assert_eq!(config.llm.model.as_deref(), Some("claude-x"));
        assert_eq!(config.llm.max_attempts, Some(5));
        assert!(config.llm.extra_body.unwrap().contains_key("thinking"));
        assert_eq!(
            config.agent,
            AgentSettings {
                max_steps: Some(7),
                tool_mode: Some(ToolModeSetting::Json),
                user: Some("alice".into()),
                workspace: Some("/tmp/ws".into()),
                shell_env: Vec::new(),
            }
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn the_memory_section_feeds_the_manager_and_the_working_memory() {
        let config = parse(
            "[memory]\nextract_every_turns = 3\ncontext_window = 8000\nreply_reserve = 1000\nmodel_merge = false\nbudget = 1\n",
        )
        .unwrap();
        let manager = config.memory.manager();
        assert_eq!(manager.extract_every_turns, 3);
        assert!(!manager.model_merge);
        assert_eq!(manager.context_budget_tokens, 1500);
        let working = config.memory.working();
        assert_eq!(working.request_budget(), 7000);
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(config.warnings[0].contains("unknown key 'budget' in [memory]"));
        assert_eq!(parse("").unwrap().memory.working(), Default::default());
    }

    #[test]
    fn the_embed_section_is_typed_too() {
        let config = parse("[embed]\nmodel_dir = 'minilm'\nmodle_dir = 'typo'\n").unwrap();
        assert_eq!(config.embed.model_dir.as_deref(), Some("minilm"));
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(config.warnings[0].contains("unknown key 'modle_dir' in [embed]"));
    }

    #[test]
    fn unknown_keys_and_sections_warn_with_their_place_and_are_ignored() {
        let config = parse(
            "[llm]\nmodel = 'm'\nmodle = 'typo'\n\n[agent]\nmax_stpes = 3\n\n[colours]\nx = 1\n",
        )
        .unwrap();
        assert_eq!(config.llm.model.as_deref(), Some("m"));
        assert_eq!(config.agent.max_steps, None);
        assert_eq!(config.warnings.len(), 3, "{:?}", config.warnings);
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.starts_with("/h/config.toml:3:1: unknown key 'modle' in [llm]")),
            "{:?}",
            config.warnings
        );
        assert!(
            config.warnings.iter().any(|w| w
                .starts_with("/h/config.toml:6:1: unknown key 'max_stpes' in [agent]")
                && w.contains("max_steps")),
            "{:?}",
            config.warnings
        );
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.starts_with("/h/config.toml:8:2: unknown section or key 'colours'")),
            "{:?}",
            config.warnings
        );
    }

    #[test]
    fn errors_are_one_line_with_file_line_and_column() {
        let err = parse("[llm]\nmodel = 'm'\nmax_tokens = 'lots'\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("the configuration file /h/config.toml:3:14 is invalid: "),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
        assert_eq!(crate::exit::code_for(&err), Status::Usage);

        let err = parse("[agent]\nmax_steps = \n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the configuration file /h/config.toml:2:"),
            "{err}"
        );
        let err = parse("[agent]\ntool_mode = 'telepathy'\n").unwrap_err();
        assert!(err.to_string().contains("telepathy"), "{err}");
    }

    #[test]
    fn other_sections_are_read_on_demand_with_positions() {
        #[derive(Debug, Default, Deserialize, PartialEq)]
        #[serde(default, deny_unknown_fields)]
        struct Scheduler {
            timezone: Option<String>,
            heartbeat_minutes: u64,
        }
        let config =
            parse("[scheduler]\ntimezone = 'Europe/Berlin'\nheartbeat_minutes = 5\n").unwrap();
        assert_eq!(
            config.section::<Scheduler>("scheduler").unwrap(),
            Scheduler {
                timezone: Some("Europe/Berlin".into()),
                heartbeat_minutes: 5
            }
        );
        assert_eq!(
            config.section::<Scheduler>("embed").unwrap(),
            Scheduler::default()
        );
        let config = parse("[scheduler]\nheartbeat_minutes = 'often'\n").unwrap();
        let err = config.section::<Scheduler>("scheduler").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the configuration file /h/config.toml:2:21"),
            "{err}"
        );
    }

    #[test]
    fn a_broken_file_is_never_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CONFIG_FILE);
        std::fs::write(&path, "[llm\nmodel = 'x'\n").unwrap();
        let err = Config::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("config.toml:1:"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "[llm\nmodel = 'x'\n"
        );
    }
}
