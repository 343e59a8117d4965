//! Retrieval as configured, for every command and benchmark that searches: the embedder,
//! the ranking profile, the rerank stage, a searcher built from them, and embedding what has
//! no vector yet.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use engram_core::{Embedder, MemoryStore, Reranker};
use engram_embed::config::LEXICAL_ONLY_NOTICE;
use engram_embed::{CrossEncoder, EmbedConfig};
use engram_llm::process_env;
use engram_memory::indexing::embed_pending;
use engram_memory::{DEFAULT_RERANK_TOP, LlmReranker, RankingProfile, Searcher};
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::Config;
use crate::context::Context;
use crate::exit::usage;

/// The `[search]` section of config.toml.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchSettings {
    /// The ranking profile used when `--profile` is not given (default `balanced`).
    pub profile: Option<String>,
    /// Overrides of the chosen profile's weights.
    pub relevance: Option<f64>,
    /// Weight of recency.
    pub recency: Option<f64>,
    /// Weight of importance.
    pub importance: Option<f64>,
    /// Share of lexical evidence in relevance (0..1).
    pub lexical_share: Option<f64>,
    /// The rerank stage used when `--rerank` is not given (default none).
    pub rerank: Option<RerankMode>,
    /// The cross-encoder folder for `rerank = "cross-encoder"`.
    pub rerank_model: Option<PathBuf>,
    /// How many of the best fused hits the rerank stage reads (default 30).
    pub rerank_top: Option<usize>,
}

/// Whether and how the best fused hits of a search are scored again (`--rerank`, `[search]
/// rerank`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RerankMode {
    /// No rerank stage: fusion's order (the default).
    None,
    /// The configured language model (`[llm]`) scores the hits, 0 to 10 each.
    Llm,
    /// A BERT cross-encoder folder (`[search] rerank_model`) scores each (query, hit) pair.
    CrossEncoder,
}

/// The embedder that config.toml and ENGRAM_EMBED_MODEL ask for; `None` means lexical search.
/// When there is none, says so once per home (a marker file remembers it was said).
pub fn embedder(ctx: &Context) -> Result<Option<Arc<dyn Embedder>>> {
    let config = Config::load(ctx.home.dir())?;
    let settings: EmbedConfig = config.section("embed")?;
    let env = |key: &str| std::env::var(key).ok();
    let embedder = engram_embed::from_config(&settings, ctx.home.dir(), &env)?;
    if embedder.is_none() {
        let marker = ctx.home.dir().join(".lexical-only-noted");
        if !marker.exists() && ctx.home.ensure().is_ok() {
            eprintln!("note: {LEXICAL_ONLY_NOTICE}");
            let _ = std::fs::write(&marker, b"");
        }
    }
    Ok(embedder)
}

/// The ranking profile: `--profile` if given, else `[search]` in config.toml, else balanced;
/// then any weights `[search]` overrides.
pub fn profile(ctx: &Context, flag: Option<&str>) -> Result<RankingProfile> {
    let settings: SearchSettings = Config::load(ctx.home.dir())?.section("search")?;
    let name = flag
        .map(str::to_string)
        .or(settings.profile.clone())
        .unwrap_or_else(|| "balanced".to_string());
    let mut profile = RankingProfile::named(&name).ok_or_else(|| {
        usage(format!(
            "unknown ranking profile '{name}' (known: {})",
            RankingProfile::NAMES.join(", ")
        ))
    })?;
    if let Some(w) = settings.relevance {
        profile.relevance = w;
    }
    if let Some(w) = settings.recency {
        profile.recency = w;
    }
    if let Some(w) = settings.importance {
        profile.importance = w;
    }
    if let Some(share) = settings.lexical_share {
        if !(0.0..=1.0).contains(&share) {
            return Err(usage(format!(
                "[search] lexical_share must be between 0 and 1, got {share}"
            )));
        }
        profile.lexical_share = share;
    }
    Ok(profile)
}

/// A searcher over `store` with the configured embedder and profile.
pub fn searcher(
    ctx: &Context,
    store: Arc<dyn MemoryStore>,
    profile_flag: Option<&str>,
    rerank_flag: Option<RerankMode>,
) -> Result<Searcher> {
    let searcher = Searcher::new(store)
        .with_embedder(embedder(ctx)?)
        .with_profile(profile(ctx, profile_flag)?);
    Ok(match reranker(ctx, rerank_flag)? {
        Some((reranker, top)) => searcher.with_reranker(Some(reranker), top),
        None => searcher,
    })
}

/// The rerank stage: `--rerank` if given, else `[search] rerank`, else none; with how many
/// hits it reads. `None` when there is no stage.
pub fn reranker(
    ctx: &Context,
    flag: Option<RerankMode>,
) -> Result<Option<(Arc<dyn Reranker>, usize)>> {
    let config = Config::load(ctx.home.dir())?;
    let settings: SearchSettings = config.section("search")?;
    let top = settings.rerank_top.unwrap_or(DEFAULT_RERANK_TOP);
    if top == 0 {
        return Err(usage("[search] rerank_top must be at least 1"));
    }
    let reranker: Arc<dyn Reranker> = match flag.or(settings.rerank).unwrap_or(RerankMode::None) {
        RerankMode::None => return Ok(None),
        RerankMode::Llm => {
            let model = engram_llm::from_config(&config.llm, &process_env).map_err(|e| {
                usage(format!(
                    "reranking with the language model needs [llm] in config.toml: {}",
                    e.in_file(&config.path)
                ))
            })?;
            Arc::new(LlmReranker::new(model))
        }
        RerankMode::CrossEncoder => {
            let Some(dir) = settings.rerank_model else {
                return Err(usage(format!(
                    "reranking with a cross-encoder needs its folder: set rerank_model = \
                     \"/path/to/folder\" under [search] in {}",
                    config.path.display()
                )));
            };
            let model = CrossEncoder::load(&dir).map_err(|e| {
                usage(format!(
                    "cannot load the cross-encoder {}: {e}",
                    dir.display()
                ))
            })?;
            Arc::new(model)
        }
    };
    Ok(Some((reranker, top)))
}

/// Embeds every text of `store` that has no vector for the configured model, with a progress
/// bar; returns the model and how many texts were embedded (`None` without a model).
pub fn embed_all_pending(
    ctx: &Context,
    store: Arc<dyn MemoryStore>,
) -> Result<Option<(String, u64)>> {
    let Some(embedder) = embedder(ctx)? else {
        return Ok(None);
    };
    let progress = if std::io::stderr().is_terminal() {
        ProgressBar::new(0).with_style(
            ProgressStyle::with_template(
                "{spinner} embedding [{bar:30}] {pos}/{len} texts ({per_sec}, {eta} left)",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        )
    } else {
        ProgressBar::hidden()
    };
    let bar = progress.clone();
    let mut on_progress = move |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let model = embedder.model_id().to_string();
    let embedded = ctx.block_on(embed_pending(&store, &embedder, &mut on_progress))??;
    progress.finish_and_clear();
    Ok(Some((model, embedded)))
}
