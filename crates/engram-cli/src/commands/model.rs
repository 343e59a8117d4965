//! `engram model fetch|list|known`: sentence-transformers models in ENGRAM_HOME/models, and
//! what the models engram has measured cost and gain.

use std::io::IsTerminal;

use anyhow::Result;
use clap::{Args, Subcommand};
use engram_embed::hub::{self, FetchRequest, HubSource};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::context::Context;
use crate::exit::Status;
use crate::output;

/// The model `engram model fetch` installs when given no name.
pub const DEFAULT_MODEL: &str = "all-MiniLM-L6-v2";

/// `engram model ...`.
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Download a sentence-transformers model from the Hugging Face hub into ENGRAM_HOME/models
    /// (the hub's address comes from HF_ENDPOINT, a token from HF_TOKEN).
    Fetch(FetchArgs),
    /// List installed models.
    List,
    /// The models engram has measured: download size, embedding cost and what each gains in
    /// retrieval (LoCoMo recall@10, cross-validated), against lexical search alone.
    Known,
}

/// A model engram has measured (BENCHMARKS.md, LoCoMo cross-validation and embedding speed).
struct Measured {
    name: &'static str,
    dimension: usize,
    /// Size of the weights.
    download_mib: f64,
    /// Embedding time per text, relative to all-MiniLM-L6-v2 (the same texts, measured in turn).
    relative_cost: &'static str,
    /// LoCoMo dev, leave-one-conversation-out recall@10 of hybrid search.
    locomo_recall_at_10: f64,
    note: &'static str,
}

/// Lexical search alone on LoCoMo dev, cross-validated recall@10 (what a model adds to).
const LEXICAL_RECALL_AT_10: f64 = 0.722;

const MEASURED: [Measured; 2] = [
    Measured {
        name: "all-MiniLM-L6-v2",
        dimension: 384,
        download_mib: 86.7,
        relative_cost: "1x",
        locomo_recall_at_10: 0.746,
        note: "the default: 411 texts/s and 3.4 ms a query on an idle 2-core machine",
    },
    Measured {
        name: "all-mpnet-base-v2",
        dimension: 768,
        download_mib: 417.7,
        relative_cost: "5-9x",
        locomo_recall_at_10: 0.780,
        note: "better recall (+0.034 over MiniLM) for 5-9x the embedding time (~17 ms a query: hybrid search p50 22-28 ms at 100k memories) and 2x the vector size",
    },
];

/// What is known of the rerank stage's models (BENCHMARKS.md).
const RERANKERS: &str = "Rerankers (`engram search --rerank llm|cross-encoder`): unmeasured on LoCoMo. \
    No cross-encoder could be obtained offline to measure; the only language model at hand (a local \
    1.5B) lowered R@10 on a 20-question subset at ~17 s a query (BENCHMARKS.md). Both are off by default.";

/// `engram model fetch`.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// A model name (`all-MiniLM-L6-v2` means `sentence-transformers/all-MiniLM-L6-v2`) or a
    /// hub repository `owner/name`.
    #[arg(default_value = DEFAULT_MODEL)]
    pub name: String,
    /// Branch, tag or commit to fetch.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// Replace an installed model of the same name.
    #[arg(long)]
    pub replace: bool,
}

/// Runs `engram model ...`.
pub fn run(ctx: &Context, command: ModelCommand) -> Result<Status> {
    match command {
        ModelCommand::Fetch(args) => fetch(ctx, args),
        ModelCommand::List => list(ctx),
        ModelCommand::Known => known(ctx),
    }
}

fn fetch(ctx: &Context, args: FetchArgs) -> Result<Status> {
    ctx.home.ensure()?;
    let models = ctx.home.dir().join("models");
    let mut request = FetchRequest::new(&args.name, &models);
    request.revision = args.revision;
    request.replace = args.replace;
    let source = HubSource::from_env(&|key| std::env::var(key).ok());
    let bar = if std::io::stderr().is_terminal() && !ctx.json {
        ProgressBar::new(0).with_style(
            ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {bytes}/{total_bytes}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        )
    } else {
        ProgressBar::hidden()
    };
    let shown = bar.clone();
    let mut on_progress = move |p: hub::FetchProgress<'_>| {
        shown.set_message(format!(
            "{} ({}/{})",
            p.file,
            p.file_index + 1,
            p.file_count
        ));
        shown.set_length(p.bytes_total.unwrap_or(p.bytes_done));
        shown.set_position(p.bytes_done);
    };
    let installed = ctx.block_on(hub::fetch_model(&source, &request, &mut on_progress))??;
    bar.finish_and_clear();
    if ctx.json {
        output::json(&json!({
            "name": installed.name,
            "path": installed.path,
            "dimension": installed.dimension,
            "bytes": installed.bytes,
        }))?;
    } else {
        println!(
            "installed {} in {} ({:.1} MiB)",
            installed.name,
            installed.path.display(),
            installed.bytes as f64 / 1_048_576.0
        );
        println!(
            "use it with: export ENGRAM_EMBED_MODEL={}   (or model_dir = \"{}\" under [embed] in config.toml), then `engram reindex`",
            installed.name, installed.name
        );
    }
    Ok(Status::Success)
}

fn list(ctx: &Context) -> Result<Status> {
    let models = hub::list_models(&ctx.home.dir().join("models"))?;
    if ctx.json {
        let rows: Vec<_> = models
            .iter()
            .map(|m| {
                json!({"name": m.name, "path": m.path, "dimension": m.dimension,
                       "bytes": m.bytes, "problem": m.problem})
            })
            .collect();
        output::json(&rows)?;
    } else if models.is_empty() {
        eprintln!("no models installed; `engram model fetch` installs {DEFAULT_MODEL}");
    } else {
        for m in &models {
            let dim = m.dimension.map_or("?".to_string(), |d| d.to_string());
            let state = m
                .problem
                .as_deref()
                .map_or(String::new(), |p| format!("  (unusable: {p})"));
            println!(
                "{:<28} {:>5}-d  {:>7.1} MiB  {}{}",
                m.name,
                dim,
                m.bytes as f64 / 1_048_576.0,
                m.path.display(),
                state
            );
        }
    }
    Ok(Status::Success)
}

fn known(ctx: &Context) -> Result<Status> {
    let installed: Vec<String> = hub::list_models(&ctx.home.dir().join("models"))?
        .into_iter()
        .filter(|m| m.problem.is_none())
        .map(|m| m.name)
        .collect();
    if ctx.json {
        let mut rows = vec![json!({
            "name": null, "dimension": null, "download_mib": null, "relative_cost": null,
            "locomo_recall_at_10": LEXICAL_RECALL_AT_10, "installed": true,
            "note": "lexical search alone (no model)",
        })];
        rows.extend(MEASURED.iter().map(|m| {
            json!({
                "name": m.name, "dimension": m.dimension, "download_mib": m.download_mib,
                "relative_cost": m.relative_cost, "locomo_recall_at_10": m.locomo_recall_at_10,
                "installed": installed.iter().any(|i| i == m.name), "note": m.note,
            })
        }));
        output::json(&rows)?;
        return Ok(Status::Success);
    }
    println!(
        "{:<20} {:>5}  {:>9}  {:>14}  {:>11}  {:<9}",
        "model", "dim", "download", "embedding cost", "LoCoMo R@10", "installed"
    );
    println!(
        "{:<20} {:>5}  {:>9}  {:>14}  {:>11.3}  {:<9}",
        "(none: lexical)", "-", "-", "-", LEXICAL_RECALL_AT_10, "-"
    );
    for m in &MEASURED {
        let here = if installed.iter().any(|i| i == m.name) {
            "yes"
        } else {
            "no"
        };
        println!(
            "{:<20} {:>5}  {:>5.0} MiB  {:>14}  {:>11.3}  {:<9}",
            m.name, m.dimension, m.download_mib, m.relative_cost, m.locomo_recall_at_10, here
        );
    }
    println!();
    for m in &MEASURED {
        println!("{}: {}", m.name, m.note);
    }
    println!(
        "R@10: LoCoMo dev, leave-one-conversation-out cross-validated, hybrid search with the model \
         (BENCHMARKS.md). Install one with `engram model fetch NAME`, use it with \
         ENGRAM_EMBED_MODEL=NAME, then `engram reindex`."
    );
    println!("{RERANKERS}");
    Ok(Status::Success)
}
