//! Retrieval as configured, for every command and benchmark that searches: the embedder,
//! the ranking profile, a searcher built from them, and embedding what has no vector yet.

use std::io::IsTerminal;
use std::sync::Arc;

use anyhow::Result;
use engram_core::{Embedder, MemoryStore};
use engram_embed::EmbedConfig;
use engram_embed::config::LEXICAL_ONLY_NOTICE;
use engram_memory::indexing::embed_pending;
use engram_memory::{RankingProfile, Searcher};
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
) -> Result<Searcher> {
    Ok(Searcher::new(store)
        .with_embedder(embedder(ctx)?)
        .with_profile(profile(ctx, profile_flag)?))
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
