//! Reading a sentence-transformers model folder: which files it has, how the encoder is shaped,
//! how token vectors are pooled, and whether the result is normalised.
//!
//! The layout follows what `SentenceTransformer.save()` writes: `modules.json` lists the modules
//! (Transformer, Pooling, Normalize), each in its own sub-folder (`path`), the transformer's
//! `sentence_bert_config.json` gives the window (`max_seq_length`), and the pooling module's
//! `config.json` the pooling modes. A plain Hugging Face BERT folder without `modules.json` is
//! read the way sentence-transformers reads it: mean pooling, no normalisation.

use std::path::{Path, PathBuf};

use engram_core::EmbedError;
use serde::Deserialize;
use serde_json::Value;

/// The files a model folder must have (in the transformer module's folder).
pub const REQUIRED_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Everything read from the folder except the weights and the tokenizer.
#[derive(Debug, Clone)]
pub struct ModelFolder {
    /// The folder given.
    pub dir: PathBuf,
    /// The transformer module's folder (usually `dir` itself).
    pub transformer_dir: PathBuf,
    /// The encoder's shape.
    pub bert: BertConfig,
    /// How token vectors become one vector.
    pub pooling: Vec<PoolingMode>,
    /// Whether a Normalize module follows pooling.
    pub normalize: bool,
    /// Most tokens per text, special tokens included.
    pub max_seq_length: usize,
    /// Lower-case texts before tokenizing (sentence_bert_config.json `do_lower_case`).
    pub lowercase: bool,
}

impl ModelFolder {
    /// Path of a file in the transformer module's folder.
    pub fn transformer_file(&self, name: &str) -> PathBuf {
        self.transformer_dir.join(name)
    }

    /// Length of the vectors the model produces.
    pub fn dimension(&self) -> usize {
        self.bert.hidden_size * self.pooling.len()
    }

    /// Reads and checks everything but the weights and the tokenizer.
    pub fn read(dir: &Path) -> Result<Self, EmbedError> {
        if !dir.is_dir() {
            return Err(EmbedError::NoModelFolder {
                dir: dir.to_path_buf(),
            });
        }
        let modules = read_modules(dir)?;
        let transformer_dir = dir.join(&modules.transformer_path);
        for file in REQUIRED_FILES {
            if !transformer_dir.join(file).is_file() {
                return Err(EmbedError::MissingFile {
                    dir: dir.to_path_buf(),
                    file: relative(&modules.transformer_path, file),
                });
            }
        }

        let config_path = transformer_dir.join("config.json");
        let bert: BertConfig = read_json(&config_path)?;
        bert.check(&config_path)?;

        let pooling = match &modules.pooling_path {
            Some(path) => {
                let pooling_config = dir.join(path).join("config.json");
                if !pooling_config.is_file() {
                    return Err(EmbedError::MissingFile {
                        dir: dir.to_path_buf(),
                        file: relative(path, "config.json"),
                    });
                }
                read_pooling(&pooling_config, bert.hidden_size)?
            }
            None => vec![PoolingMode::Mean],
        };

        let st_config_path = transformer_dir.join("sentence_bert_config.json");
        let st_config: SentenceBertConfig = if st_config_path.is_file() {
            read_json(&st_config_path)?
        } else {
            SentenceBertConfig::default()
        };
        let max_seq_length = match st_config.max_seq_length {
            Some(0) => {
                return Err(EmbedError::BadFile {
                    path: st_config_path,
                    detail: "max_seq_length is 0".into(),
                });
            }
            Some(n) => n,
            None => tokenizer_max_length(&transformer_dir.join("tokenizer_config.json"))
                .unwrap_or(usize::MAX),
        }
        .min(bert.usable_positions());

        Ok(Self {
            dir: dir.to_path_buf(),
            transformer_dir,
            bert,
            pooling,
            normalize: modules.normalize,
            max_seq_length,
            lowercase: st_config.do_lower_case,
        })
    }
}

fn relative(sub: &str, file: &str) -> String {
    if sub.is_empty() {
        file.to_string()
    } else {
        format!("{}/{file}", sub.trim_end_matches('/'))
    }
}

/// Reads a JSON file into `T`, naming the file on failure.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, EmbedError> {
    let text = std::fs::read_to_string(path).map_err(|e| EmbedError::BadFile {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| EmbedError::BadFile {
        path: path.to_path_buf(),
        detail: format!("not valid JSON for this file: {e}"),
    })
}

/// The encoder's shape, from `config.json` (Hugging Face `BertConfig` field names).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    /// Rows of the word-embedding matrix.
    pub vocab_size: usize,
    /// Width of every token vector.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Feed-forward activation.
    #[serde(default = "default_activation")]
    pub hidden_act: String,
    /// Rows of the position-embedding matrix (the longest input).
    pub max_position_embeddings: usize,
    /// Rows of the token-type matrix.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// Layer-norm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Architecture family.
    #[serde(default)]
    pub model_type: Option<String>,
    /// Position encoding; only "absolute" is supported.
    #[serde(default)]
    pub position_embedding_type: Option<String>,
    /// The padding token's id (MPNet's positions start after it).
    #[serde(default)]
    pub pad_token_id: Option<usize>,
    /// Buckets of MPNet's relative position bias.
    #[serde(default)]
    pub relative_attention_num_buckets: Option<usize>,
}

fn default_activation() -> String {
    "gelu".into()
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

/// The feed-forward activations the encoder knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// Exact GELU, x * Φ(x).
    GeluErf,
    /// GELU approximated with tanh.
    GeluTanh,
    /// max(0, x).
    Relu,
}

impl BertConfig {
    /// Whether this is an MPNet encoder (BERT layers with a relative position bias).
    pub fn is_mpnet(&self) -> bool {
        self.model_type.as_deref() == Some("mpnet")
    }

    /// The longest input the position embeddings cover (MPNet's start after the padding id).
    pub fn usable_positions(&self) -> usize {
        let offset = if self.is_mpnet() {
            self.pad_token_id.unwrap_or(1) + 1
        } else {
            0
        };
        self.max_position_embeddings.saturating_sub(offset)
    }

    /// The activation named by `hidden_act`, if supported.
    pub fn activation(&self) -> Option<Activation> {
        match self.hidden_act.as_str() {
            "gelu" => Some(Activation::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Activation::GeluTanh),
            "relu" => Some(Activation::Relu),
            _ => None,
        }
    }

    fn check(&self, path: &Path) -> Result<(), EmbedError> {
        let unsupported = |detail: String| EmbedError::Unsupported {
            path: path.to_path_buf(),
            detail,
        };
        if let Some(kind) = self
            .model_type
            .as_ref()
            .filter(|kind| !matches!(kind.as_str(), "bert" | "mpnet"))
        {
            return Err(unsupported(format!(
                "model_type \"{kind}\" is not supported; only BERT (\"bert\") and MPNet (\"mpnet\") sentence-transformers models run locally"
            )));
        }
        if self.is_mpnet() {
            let offset = self.pad_token_id.unwrap_or(1) + 1;
            if offset >= self.max_position_embeddings
                || self.relative_attention_num_buckets == Some(0)
            {
                return Err(EmbedError::BadFile {
                    path: path.to_path_buf(),
                    detail: format!(
                        "pad_token_id {} leaves no positions of {}, or relative_attention_num_buckets is 0",
                        offset - 1,
                        self.max_position_embeddings
                    ),
                });
            }
        }
        if let Some(kind) = self
            .position_embedding_type
            .as_ref()
            .filter(|kind| *kind != "absolute")
        {
            return Err(unsupported(format!(
                "position_embedding_type \"{kind}\" is not supported; only \"absolute\""
            )));
        }
        if self.activation().is_none() {
            return Err(unsupported(format!(
                "hidden_act \"{}\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu are)",
                self.hidden_act
            )));
        }
        let bad = |detail: String| EmbedError::BadFile {
            path: path.to_path_buf(),
            detail,
        };
        for (name, value) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            if value == 0 {
                return Err(bad(format!("{name} is 0")));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            )));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps >= 0.0) {
            return Err(bad(format!(
                "layer_norm_eps {} is not a small positive number",
                self.layer_norm_eps
            )));
        }
        Ok(())
    }
}

/// `sentence_bert_config.json`.
#[derive(Debug, Clone, Default, Deserialize)]
struct SentenceBertConfig {
    #[serde(default)]
    max_seq_length: Option<usize>,
    #[serde(default)]
    do_lower_case: bool,
}

/// `tokenizer_config.json`'s `model_max_length`, when present and sensible.
fn tokenizer_max_length(path: &Path) -> Option<usize> {
    let value: Value = read_json(path).ok()?;
    let n = value.get("model_max_length")?.as_u64()?;
    // Tokenizers without a limit store a huge sentinel (1e30 does not even fit in u64).
    usize::try_from(n).ok().filter(|n| *n < 1_000_000)
}

/// How token vectors are combined into one vector (several are concatenated in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolingMode {
    /// The first token's vector.
    Cls,
    /// Element-wise maximum over tokens.
    Max,
    /// Mean over tokens.
    Mean,
    /// Sum over tokens divided by the square root of their number.
    MeanSqrtLen,
    /// Mean weighted by position (1, 2, 3, ...).
    WeightedMean,
    /// The last token's vector.
    LastToken,
}

impl PoolingMode {
    /// Name as sentence-transformers writes it.
    pub fn name(self) -> &'static str {
        match self {
            PoolingMode::Cls => "cls",
            PoolingMode::Max => "max",
            PoolingMode::Mean => "mean",
            PoolingMode::MeanSqrtLen => "mean_sqrt_len_tokens",
            PoolingMode::WeightedMean => "weightedmean",
            PoolingMode::LastToken => "lasttoken",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        ALL_MODES.into_iter().find(|mode| mode.name() == name)
    }
}

/// In the order sentence-transformers concatenates them.
const ALL_MODES: [PoolingMode; 6] = [
    PoolingMode::Cls,
    PoolingMode::Max,
    PoolingMode::Mean,
    PoolingMode::MeanSqrtLen,
    PoolingMode::WeightedMean,
    PoolingMode::LastToken,
];

/// Legacy boolean keys, in concatenation order.
const LEGACY_KEYS: [(&str, PoolingMode); 6] = [
    ("pooling_mode_cls_token", PoolingMode::Cls),
    ("pooling_mode_max_tokens", PoolingMode::Max),
    ("pooling_mode_mean_tokens", PoolingMode::Mean),
    (
        "pooling_mode_mean_sqrt_len_tokens",
        PoolingMode::MeanSqrtLen,
    ),
    (
        "pooling_mode_weightedmean_tokens",
        PoolingMode::WeightedMean,
    ),
    ("pooling_mode_lasttoken", PoolingMode::LastToken),
];

/// Reads a Pooling module's config.json, old style (`pooling_mode_mean_tokens: true`) or new
/// (`pooling_mode: "mean"` or a list).
fn read_pooling(path: &Path, hidden_size: usize) -> Result<Vec<PoolingMode>, EmbedError> {
    let bad = |detail: String| EmbedError::BadFile {
        path: path.to_path_buf(),
        detail,
    };
    let config: Value = read_json(path)?;
    let Some(config) = config.as_object() else {
        return Err(bad("expected a JSON object".into()));
    };
    let dimension = config
        .get("embedding_dimension")
        .or_else(|| config.get("word_embedding_dimension"))
        .and_then(Value::as_u64);
    if let Some(dimension) = dimension.filter(|d| usize::try_from(*d).ok() != Some(hidden_size)) {
        return Err(EmbedError::BadShape {
            path: path.to_path_buf(),
            detail: format!(
                "the pooling module expects {dimension}-dimensional token vectors but config.json's hidden_size is {hidden_size}"
            ),
        });
    }
    if config.get("include_prompt").and_then(Value::as_bool) == Some(false) {
        return Err(EmbedError::Unsupported {
            path: path.to_path_buf(),
            detail: "include_prompt = false (prompt-excluding pooling) is not supported".into(),
        });
    }
    let modes = match config.get("pooling_mode") {
        Some(Value::String(name)) => vec![name.clone()],
        Some(Value::Array(names)) => names
            .iter()
            .map(|name| {
                name.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad("pooling_mode lists something that is not a name".into()))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("pooling_mode is neither a name nor a list".into())),
        None => {
            let legacy: Vec<String> = LEGACY_KEYS
                .iter()
                .filter(|(key, _)| config.get(*key).and_then(Value::as_bool) == Some(true))
                .map(|(_, mode)| mode.name().to_string())
                .collect();
            if legacy.is_empty() {
                vec![PoolingMode::Mean.name().to_string()]
            } else {
                legacy
            }
        }
    };
    modes
        .iter()
        .map(|name| {
            PoolingMode::from_name(name).ok_or_else(|| EmbedError::Unsupported {
                path: path.to_path_buf(),
                detail: format!("pooling mode \"{name}\" is not supported"),
            })
        })
        .collect()
}

/// What `modules.json` says.
struct Modules {
    transformer_path: String,
    pooling_path: Option<String>,
    normalize: bool,
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

fn read_modules(dir: &Path) -> Result<Modules, EmbedError> {
    let path = dir.join("modules.json");
    if !path.is_file() {
        // A plain transformers folder: sentence-transformers adds mean pooling and no Normalize.
        return Ok(Modules {
            transformer_path: String::new(),
            pooling_path: None,
            normalize: false,
        });
    }
    let entries: Vec<ModuleEntry> = read_json(&path)?;
    let mut modules = Modules {
        transformer_path: String::new(),
        pooling_path: None,
        normalize: false,
    };
    let mut seen_transformer = false;
    for (position, entry) in entries.iter().enumerate() {
        // "sentence_transformers.models.Pooling" in older versions, other module paths in newer.
        let kind = entry.kind.rsplit('.').next().unwrap_or_default();
        let expected_position = match kind {
            "Transformer" => 0,
            "Pooling" => 1,
            "Normalize" => 2,
            _ => {
                return Err(EmbedError::Unsupported {
                    path,
                    detail: format!(
                        "module {} is not supported (only Transformer, Pooling and Normalize are)",
                        entry.kind
                    ),
                });
            }
        };
        if position != expected_position {
            return Err(EmbedError::Unsupported {
                path,
                detail: format!(
                    "module {} at position {position} is not supported (expected Transformer, Pooling, Normalize in that order)",
                    entry.kind
                ),
            });
        }
        match kind {
            "Transformer" => {
                modules.transformer_path = entry.path.clone();
                seen_transformer = true;
            }
            "Pooling" => modules.pooling_path = Some(entry.path.clone()),
            _ => modules.normalize = true,
        }
    }
    if !seen_transformer {
        return Err(EmbedError::BadFile {
            path,
            detail: "no Transformer module is listed".into(),
        });
    }
    Ok(modules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }

    const CONFIG: &str = r#"{"model_type":"bert","vocab_size":10,"hidden_size":8,"num_hidden_layers":1,
        "num_attention_heads":2,"intermediate_size":16,"max_position_embeddings":32}"#;

    fn minimal_folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "config.json", CONFIG);
        write(dir.path(), "tokenizer.json", "{}");
        write(dir.path(), "model.safetensors", "");
        dir
    }

    #[test]
    fn a_plain_transformers_folder_gets_mean_pooling_without_normalisation() {
        let dir = minimal_folder();
        let folder = ModelFolder::read(dir.path()).unwrap();
        assert_eq!(folder.pooling, vec![PoolingMode::Mean]);
        assert!(!folder.normalize);
        assert_eq!(folder.max_seq_length, 32);
        assert_eq!(folder.dimension(), 8);
    }

    #[test]
    fn modules_json_selects_pooling_normalisation_and_window() {
        let dir = minimal_folder();
        write(
            dir.path(),
            "modules.json",
            r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#,
        );
        write(
            dir.path(),
            "1_Pooling/config.json",
            r#"{"word_embedding_dimension":8,"pooling_mode_cls_token":true,"pooling_mode_mean_tokens":true}"#,
        );
        write(
            dir.path(),
            "sentence_bert_config.json",
            r#"{"max_seq_length":16,"do_lower_case":true}"#,
        );
        let folder = ModelFolder::read(dir.path()).unwrap();
        assert_eq!(folder.pooling, vec![PoolingMode::Cls, PoolingMode::Mean]);
        assert!(folder.normalize);
        assert!(folder.lowercase);
        assert_eq!(folder.max_seq_length, 16);
        assert_eq!(folder.dimension(), 16);

        write(
            dir.path(),
            "1_Pooling/config.json",
            r#"{"embedding_dimension":8,"pooling_mode":"max"}"#,
        );
        assert_eq!(
            ModelFolder::read(dir.path()).unwrap().pooling,
            vec![PoolingMode::Max]
        );
    }

    #[test]
    fn each_missing_required_file_is_named() {
        for missing in REQUIRED_FILES {
            let dir = minimal_folder();
            std::fs::remove_file(dir.path().join(missing)).unwrap();
            let err = ModelFolder::read(dir.path()).unwrap_err();
            assert_eq!(
                err,
                EmbedError::MissingFile {
                    dir: dir.path().to_path_buf(),
                    file: missing.to_string()
                }
            );
            assert!(err.to_string().contains(missing), "{err}");
        }
    }

    #[test]
    fn a_pooling_module_without_its_config_is_named() {
        let dir = minimal_folder();
        write(
            dir.path(),
            "modules.json",
            r#"[{"path":"","type":"sentence_transformers.models.Transformer"},
                {"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]"#,
        );
        let err = ModelFolder::read(dir.path()).unwrap_err();
        assert!(err.to_string().contains("1_Pooling/config.json"), "{err}");
    }

    #[test]
    fn unsupported_models_and_modules_are_refused_with_the_reason() {
        let dir = minimal_folder();
        write(
            dir.path(),
            "config.json",
            &CONFIG.replace("\"bert\"", "\"xlm-roberta\""),
        );
        let err = ModelFolder::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("xlm-roberta"), "{err}");

        let dir = minimal_folder();
        write(
            dir.path(),
            "modules.json",
            r#"[{"path":"","type":"sentence_transformers.models.Transformer"},
                {"path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                {"path":"2_Dense","type":"sentence_transformers.models.Dense"}]"#,
        );
        write(
            dir.path(),
            "1_Pooling/config.json",
            r#"{"pooling_mode":"mean"}"#,
        );
        let err = ModelFolder::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("Dense"), "{err}");
    }

    #[test]
    fn broken_config_values_are_explained() {
        let dir = minimal_folder();
        write(
            dir.path(),
            "config.json",
            &CONFIG.replace("\"num_attention_heads\":2", "\"num_attention_heads\":3"),
        );
        let err = ModelFolder::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a multiple"), "{err}");

        write(dir.path(), "config.json", "{not json");
        let err = ModelFolder::read(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("config.json") && err.contains("not valid JSON"),
            "{err}"
        );

        let dir = minimal_folder();
        write(
            dir.path(),
            "modules.json",
            r#"[{"path":"","type":"sentence_transformers.models.Transformer"},
                {"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]"#,
        );
        write(
            dir.path(),
            "1_Pooling/config.json",
            r#"{"word_embedding_dimension":384,"pooling_mode_mean_tokens":true}"#,
        );
        let err = ModelFolder::read(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("384") && err.contains("hidden_size is 8"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_folder_is_not_mistaken_for_a_missing_file() {
        let err = ModelFolder::read(Path::new("/nonexistent/model")).unwrap_err();
        assert!(matches!(err, EmbedError::NoModelFolder { .. }));
    }
}
