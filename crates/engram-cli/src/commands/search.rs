//! `engram search`: one query, or a batch of them.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;
use engram_core::{Filter, Memory};
use engram_memory::{ScoreParts, SearchHit, SearchRequest};
use serde::{Deserialize, Serialize};

use super::{FilterArgs, ScopeArgs, at_least_one, filter_from};
use crate::context::Context;
use crate::exit::{Status, usage};
use crate::output;
use crate::retrieval::{self, RerankMode};

/// `engram search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// How many hits at most (1 or more).
    #[arg(long, short = 'k', default_value = "10", value_parser = at_least_one())]
    pub limit: usize,
    /// Show how each score came about.
    #[arg(long)]
    pub explain: bool,
    /// Ranking profile: balanced (default; chosen by cross-validation on LoCoMo: no recency,
    /// time boosts, neighbouring turns), recent (balanced plus 0.1 recency), reference (0.6
    /// similarity, 0.2 recency, 0.2 importance), relevance (no recency or importance) or rrf
    /// (rank fusion). `[search]` in config.toml can change the default and the weights.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Score the best fused hits again: none (default), llm (the configured language model)
    /// or cross-encoder (the folder in `[search] rerank_model`); `[search] rerank` in
    /// config.toml sets the default and `rerank_top` how many hits are read (default 30).
    #[arg(long, value_name = "MODE")]
    pub rerank: Option<RerankMode>,
    /// Run many searches: a JSONL file of {"user_id", "query"} lines (`-` for stdin); prints one
    /// JSON array of hits per line, in the same order.
    #[arg(long, value_name = "FILE", conflicts_with = "query")]
    pub batch: Option<PathBuf>,
    /// What to look for.
    #[arg(required_unless_present = "batch", num_args = 1..)]
    pub query: Vec<String>,
}

/// A hit as scripts see it: the memory's fields, its score and, if asked, the score's parts.
#[derive(Debug, Serialize)]
struct HitJson<'a> {
    #[serde(flatten)]
    memory: &'a Memory,
    score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    explain: Option<&'a ScoreParts>,
}

fn hits_json(hits: &[SearchHit], explain: bool) -> Vec<HitJson<'_>> {
    hits.iter()
        .map(|hit| HitJson {
            memory: &hit.memory,
            score: hit.score,
            explain: explain.then_some(&hit.parts),
        })
        .collect()
}

fn explain_line(parts: &ScoreParts) -> String {
    let mut pieces = Vec::new();
    match (parts.bm25, parts.lexical_rank) {
        (Some(bm25), Some(rank)) => pieces.push(format!("bm25 {bm25:.3} (#{rank})")),
        _ => pieces.push("no word match".to_string()),
    }
    if let (Some(sim), Some(rank)) = (parts.similarity, parts.dense_rank) {
        pieces.push(format!("similarity {sim:.3} (#{rank})"));
    }
    pieces.push(format!("relevance {:.3}", parts.relevance));
    pieces.push(format!("recency {:.3}", parts.recency));
    pieces.push(format!("importance {:.1}", parts.importance));
    if let Some(phrase) = &parts.time_match {
        pieces.push(format!("matches \"{phrase}\""));
    }
    if parts.truncated {
        pieces.push("text was cut to fit the model's window".to_string());
    }
    if let (Some(score), Some(rank)) = (parts.rerank, parts.fused_rank) {
        pieces.push(format!("reranked {score:.3} (fused #{rank})"));
    }
    pieces.push(format!("profile {}", parts.profile));
    pieces.join(", ")
}

pub fn search(ctx: &Context, args: SearchArgs) -> Result<Status> {
    if args.limit == 0 {
        return Err(usage("--limit must be at least 1"));
    }
    if let Some(batch) = &args.batch {
        return search_batch(ctx, batch, args.limit, args.profile.as_deref(), args.rerank);
    }
    let query = args.query.join(" ");
    if query.trim().is_empty() {
        return Err(usage("the search query is empty"));
    }
    let filter = filter_from(&args.scope, &args.filter)?;
    let searcher = retrieval::searcher(ctx, ctx.memories()?, args.profile.as_deref(), args.rerank)?;
    let results = ctx.block_on(searcher.search(&SearchRequest {
        filter,
        query,
        limit: args.limit,
    }))??;
    for notice in &results.notices {
        eprintln!("note: {notice}");
    }
    let hits = results.hits;
    if ctx.json {
        output::json(&hits_json(&hits, args.explain))?;
        return Ok(Status::Success);
    }
    if hits.is_empty() {
        eprintln!("no memories match");
    }
    for (i, hit) in hits.iter().enumerate() {
        println!(
            "{:>2}. {:.3}  {}  {}",
            i + 1,
            hit.score,
            output::local_time(hit.memory.created_at),
            output::one_line(&hit.memory.text)
        );
        if args.explain {
            println!("      id {}  {}", hit.memory.id, explain_line(&hit.parts));
        }
    }
    Ok(Status::Success)
}

/// One line of a batch file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchQuery {
    user_id: String,
    query: String,
    limit: Option<usize>,
    agent_id: Option<String>,
    session_id: Option<String>,
}

/// Answers every line with one JSON array, in order. A bad line gets `[]` and a message on
/// standard error, so outputs stay aligned with inputs; the exit status then says 5.
fn search_batch(
    ctx: &Context,
    path: &Path,
    default_limit: usize,
    profile: Option<&str>,
    rerank: Option<RerankMode>,
) -> Result<Status> {
    let reader: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(File::open(path).with_context(|| format!("cannot open {}", path.display()))?)
    };
    let searcher = retrieval::searcher(ctx, ctx.memories()?, profile, rerank)?;
    let runtime = ctx.runtime()?;
    let mut notices_shown = false;
    let mut out = BufWriter::new(crate::output::stdout());
    let mut failures = 0u64;
    for (index, line) in BufReader::new(reader).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        let line = match index {
            0 => line.strip_prefix('\u{feff}').unwrap_or(&line),
            _ => &line,
        };
        if line.trim().is_empty() {
            continue;
        }
        let result = serde_json::from_str::<BatchQuery>(line)
            .map_err(|e| e.to_string())
            .and_then(|q| {
                let request = SearchRequest {
                    filter: Filter {
                        agent_id: q.agent_id,
                        session_id: q.session_id,
                        ..Filter::user(q.user_id)
                    },
                    query: q.query,
                    limit: q.limit.unwrap_or(default_limit),
                };
                runtime
                    .block_on(searcher.search(&request))
                    .map_err(|e| e.to_string())
            });
        match result {
            Ok(results) => {
                if !notices_shown {
                    results.notices.iter().for_each(|n| eprintln!("note: {n}"));
                    notices_shown = !results.notices.is_empty();
                }
                serde_json::to_writer(&mut out, &hits_json(&results.hits, false))?
            }
            Err(error) => {
                failures += 1;
                eprintln!("line {}: {error}", index + 1);
                out.write_all(b"[]")?;
            }
        }
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(if failures == 0 {
        Status::Success
    } else {
        Status::Partial
    })
}
