//! The `[embed]` section of `ENGRAM_HOME/config.toml`, and choosing the embedder from it and the
//! environment.
//!
//! ```toml
//! [embed]
//! provider = "local"              # "local", "openai" or "none"; unset: local when a model is named
//! model_dir = "all-MiniLM-L6-v2"  # a folder, or the name of one under ENGRAM_HOME/models
//!
//! [embed.openai]                  # used when provider = "openai"
//! base_url = "http://localhost:11434/v1"   # default: $OPENAI_BASE_URL, then OpenAI's
//! model = "nomic-embed-text"               # default: text-embedding-3-small
//! api_key_env = "OPENAI_API_KEY"           # the variable holding the key (optional for local servers)
//! dimension = 768                          # expected vector length (default: learned from the first answer)
//! request_dimensions = false               # also send it as `dimensions` (text-embedding-3 models)
//! batch_size = 64
//! timeout_secs = 60
//! max_retries = 4
//! max_input_bytes = 8192
//! ```
//!
//! `ENGRAM_EMBED_MODEL=DIR` in the environment selects a local model folder and overrides the
//! file. Nothing configured means no embedder: lexical search only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engram_core::{EmbedError, Embedder};
use serde::{Deserialize, Serialize};

use crate::local::LocalEmbedder;
use crate::openai::{OpenAiEmbedder, OpenAiOptions};

/// Environment variable naming a local model folder (or installed model name).
pub const MODEL_ENV: &str = "ENGRAM_EMBED_MODEL";
/// OpenAI's own endpoint, used when neither the config nor `OPENAI_BASE_URL` names one.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The embedding model asked of an OpenAI-compatible endpoint when none is configured.
pub const OPENAI_DEFAULT_MODEL: &str = "text-embedding-3-small";
/// What to tell the user, once, when there is no embedder.
pub const LEXICAL_ONLY_NOTICE: &str = "no embedding model is configured, so search is lexical only (BM25); set ENGRAM_EMBED_MODEL to a sentence-transformers folder or run `engram model fetch` to add dense retrieval";

/// Which kind of embedder to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// A sentence-transformers folder run in-process.
    Local,
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    #[serde(rename = "openai")]
    OpenAi,
    /// No embedder: lexical search only.
    None,
}

/// The `[embed]` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbedConfig {
    /// Which embedder; unset means local when `model_dir` is set, none otherwise.
    pub provider: Option<Provider>,
    /// A local model: a folder (relative paths are relative to ENGRAM_HOME), or the name of a
    /// folder under ENGRAM_HOME/models.
    pub model_dir: Option<String>,
    /// The OpenAI-compatible endpoint.
    pub openai: OpenAiConfig,
}

/// The `[embed.openai]` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiConfig {
    /// Base URL including `/v1`; default `$OPENAI_BASE_URL`, then OpenAI's.
    pub base_url: Option<String>,
    /// Embedding model; default `text-embedding-3-small`.
    pub model: Option<String>,
    /// Environment variable holding the API key; default `OPENAI_API_KEY`.
    pub api_key_env: Option<String>,
    /// Expected vector length.
    pub dimension: Option<usize>,
    /// Send `dimension` as the request's `dimensions` field.
    pub request_dimensions: bool,
    /// Texts per request.
    pub batch_size: Option<usize>,
    /// Seconds allowed per request.
    pub timeout_secs: Option<u64>,
    /// Retries after rate limits, server errors and lost connections.
    pub max_retries: Option<u32>,
    /// Longest text sent, in bytes (longer ones are cut and flagged as truncated).
    pub max_input_bytes: Option<usize>,
}

/// The embedder chosen, before anything is loaded or contacted.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedChoice {
    /// Lexical search only.
    None,
    /// A local model folder.
    Local(PathBuf),
    /// An OpenAI-compatible endpoint.
    OpenAi(OpenAiOptions),
}

/// Decides which embedder the configuration and environment ask for, without loading it.
///
/// `env` looks up environment variables (pass `|k| std::env::var(k).ok()`; tests pass a map).
pub fn choose(
    config: &EmbedConfig,
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EmbedChoice, EmbedError> {
    let from_env = env(MODEL_ENV).filter(|v| !v.trim().is_empty());
    if let Some(value) = from_env {
        // Relative paths in the environment are relative to the working directory.
        return resolve_model_dir(&value, home, None).map(EmbedChoice::Local);
    }
    let provider = config.provider.unwrap_or(if config.model_dir.is_some() {
        Provider::Local
    } else {
        Provider::None
    });
    match provider {
        Provider::None => Ok(EmbedChoice::None),
        Provider::Local => {
            let value = config.model_dir.as_deref().ok_or_else(|| {
                EmbedError::Config(format!(
                    "provider = \"local\" needs model_dir (a model folder, or a name under {})",
                    home.join("models").display()
                ))
            })?;
            // Relative paths in the config file are relative to ENGRAM_HOME.
            resolve_model_dir(value, home, Some(home)).map(EmbedChoice::Local)
        }
        Provider::OpenAi => openai_options(&config.openai, env).map(EmbedChoice::OpenAi),
    }
}

/// Builds the embedder the configuration asks for; `None` means lexical search only.
pub fn from_config(
    config: &EmbedConfig,
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Arc<dyn Embedder>>, EmbedError> {
    Ok(match choose(config, home, env)? {
        EmbedChoice::None => None,
        EmbedChoice::Local(dir) => Some(Arc::new(LocalEmbedder::load(&dir)?)),
        EmbedChoice::OpenAi(options) => Some(Arc::new(OpenAiEmbedder::new(options)?)),
    })
}

/// A model folder from a path or an installed model's name: a bare name (no path separator)
/// that exists under `home/models` is that folder; anything else is a path, relative to
/// `relative_to` (or the working directory).
pub fn resolve_model_dir(
    value: &str,
    home: &Path,
    relative_to: Option<&Path>,
) -> Result<PathBuf, EmbedError> {
    let models = home.join("models");
    let is_name = !value.contains(['/', '\\']) && value != "." && value != "..";
    if is_name && models.join(value).is_dir() {
        return Ok(models.join(value));
    }
    let path = PathBuf::from(value);
    let path = match relative_to {
        Some(base) if path.is_relative() => base.join(path),
        _ => path,
    };
    if path.is_dir() {
        return Ok(path);
    }
    if is_name {
        Err(EmbedError::Config(format!(
            "the embedding model \"{value}\" is neither a folder nor installed in {} (install it with `engram model fetch {value}`)",
            models.display()
        )))
    } else {
        Err(EmbedError::NoModelFolder { dir: path })
    }
}

fn openai_options(
    config: &OpenAiConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<OpenAiOptions, EmbedError> {
    let base_url = config
        .base_url
        .clone()
        .or_else(|| env("OPENAI_BASE_URL").filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.to_string());
    let model = config
        .model
        .clone()
        .unwrap_or_else(|| OPENAI_DEFAULT_MODEL.to_string());
    let key_env = config.api_key_env.as_deref().unwrap_or("OPENAI_API_KEY");
    let api_key = env(key_env).filter(|v| !v.trim().is_empty());
    if api_key.is_none() && base_url.contains("api.openai.com") {
        return Err(EmbedError::Config(format!(
            "{key_env} is not set, and OpenAI's embeddings endpoint needs an API key"
        )));
    }
    let mut options = OpenAiOptions::new(base_url, model);
    options.api_key = api_key;
    options.dimension = config.dimension;
    options.request_dimensions = config.request_dimensions;
    if let Some(batch_size) = config.batch_size {
        options.batch_size = batch_size;
    }
    if let Some(seconds) = config.timeout_secs {
        options.timeout = Duration::from_secs(seconds.max(1));
    }
    if let Some(retries) = config.max_retries {
        options.max_retries = retries;
    }
    if let Some(bytes) = config.max_input_bytes {
        options.max_input_bytes = bytes;
    }
    Ok(options)
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
        move |key| map.get(key).cloned()
    }

    fn parse(text: &str) -> EmbedConfig {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            embed: EmbedConfig,
        }
        toml::from_str::<File>(text).unwrap().embed
    }

    #[test]
    fn nothing_configured_means_no_embedder() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(
            choose(&EmbedConfig::default(), home.path(), &env(&[])).unwrap(),
            EmbedChoice::None
        );
        assert!(
            from_config(&EmbedConfig::default(), home.path(), &env(&[]))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            choose(
                &parse(""),
                home.path(),
                &env(&[("ENGRAM_EMBED_MODEL", " ")])
            )
            .unwrap(),
            EmbedChoice::None
        );
    }

    #[test]
    fn a_model_name_resolves_under_home_models_and_the_environment_wins() {
        let home = tempfile::tempdir().unwrap();
        let installed = home.path().join("models/mini");
        std::fs::create_dir_all(&installed).unwrap();
        let other = tempfile::tempdir().unwrap();

        let config = parse("[embed]\nmodel_dir = \"mini\"\n");
        assert_eq!(config.provider, None);
        assert_eq!(
            choose(&config, home.path(), &env(&[])).unwrap(),
            EmbedChoice::Local(installed.clone())
        );
        let from_env = other.path().to_str().unwrap();
        assert_eq!(
            choose(&config, home.path(), &env(&[(MODEL_ENV, from_env)])).unwrap(),
            EmbedChoice::Local(other.path().to_path_buf())
        );
        assert_eq!(
            choose(&parse(""), home.path(), &env(&[(MODEL_ENV, "mini")])).unwrap(),
            EmbedChoice::Local(installed)
        );
        // The environment overrides even an explicit "none" in the file.
        let none = parse("[embed]\nprovider = \"none\"\n");
        assert!(matches!(
            choose(&none, home.path(), &env(&[(MODEL_ENV, from_env)])).unwrap(),
            EmbedChoice::Local(_)
        ));
    }

    #[test]
    fn relative_model_dirs_in_the_file_are_relative_to_home() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("my/model")).unwrap();
        let config = parse("[embed]\nprovider = \"local\"\nmodel_dir = \"my/model\"\n");
        assert_eq!(
            choose(&config, home.path(), &env(&[])).unwrap(),
            EmbedChoice::Local(home.path().join("my/model"))
        );
    }

    #[test]
    fn unknown_models_and_incomplete_settings_are_explained() {
        let home = tempfile::tempdir().unwrap();
        let err = choose(&parse(""), home.path(), &env(&[(MODEL_ENV, "nope")])).unwrap_err();
        assert!(err.to_string().contains("engram model fetch nope"), "{err}");
        let err = choose(
            &parse(""),
            home.path(),
            &env(&[(MODEL_ENV, "/no/such/folder")]),
        )
        .unwrap_err();
        assert_eq!(
            err,
            EmbedError::NoModelFolder {
                dir: PathBuf::from("/no/such/folder")
            }
        );
        let err = choose(
            &parse("[embed]\nprovider = \"local\"\n"),
            home.path(),
            &env(&[]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("needs model_dir"), "{err}");
        let err = toml::from_str::<toml::Table>("[embed]\nprovider = \"gpu\"\n")
            .ok()
            .and_then(|t| t["embed"].clone().try_into::<EmbedConfig>().err());
        assert!(err.is_some());
        let err = toml::from_str::<toml::Table>("[embed]\nmodel = \"x\"\n")
            .ok()
            .and_then(|t| t["embed"].clone().try_into::<EmbedConfig>().err());
        assert!(err.unwrap().to_string().contains("unknown field"));
    }

    #[test]
    fn openai_settings_come_from_the_file_then_the_environment() {
        let home = tempfile::tempdir().unwrap();
        let config = parse(
            "[embed]\nprovider = \"openai\"\n[embed.openai]\nmodel = \"nomic-embed-text\"\ndimension = 768\nbatch_size = 8\ntimeout_secs = 5\napi_key_env = \"MY_KEY\"\n",
        );
        let choice = choose(
            &config,
            home.path(),
            &env(&[
                ("OPENAI_BASE_URL", "http://localhost:11434/v1"),
                ("MY_KEY", "secret"),
            ]),
        )
        .unwrap();
        let EmbedChoice::OpenAi(options) = choice else {
            panic!("expected openai, got {choice:?}");
        };
        assert_eq!(options.base_url, "http://localhost:11434/v1");
        assert_eq!(options.model, "nomic-embed-text");
        assert_eq!(options.api_key.as_deref(), Some("secret"));
        assert_eq!(options.dimension, Some(768));
        assert_eq!(options.batch_size, 8);
        assert_eq!(options.timeout, Duration::from_secs(5));

        let embedder = from_config(
            &config,
            home.path(),
            &env(&[("OPENAI_BASE_URL", "http://localhost:11434/v1")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            embedder.model_id(),
            "openai:nomic-embed-text@localhost:11434"
        );
        assert_eq!(embedder.dimension(), 768);
    }

    #[test]
    fn openai_itself_needs_a_key() {
        let home = tempfile::tempdir().unwrap();
        let config = parse("[embed]\nprovider = \"openai\"\n");
        let err = choose(&config, home.path(), &env(&[])).unwrap_err();
        assert!(
            err.to_string().contains("OPENAI_API_KEY is not set"),
            "{err}"
        );
        let choice = choose(&config, home.path(), &env(&[("OPENAI_API_KEY", "k")])).unwrap();
        let EmbedChoice::OpenAi(options) = choice else {
            panic!("expected openai");
        };
        assert_eq!(options.base_url, OPENAI_DEFAULT_BASE_URL);
        assert_eq!(options.model, OPENAI_DEFAULT_MODEL);
    }
}
