//! `engram reindex`.

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::context::Context;
use crate::exit::{Status, usage};
use crate::output;
use crate::retrieval::embed_all_pending;

/// `engram reindex`.
#[derive(Debug, Args)]
pub struct ReindexArgs {}

/// `engram reindex`: gives every stored text a vector from the configured model.
pub fn reindex(ctx: &Context, _args: ReindexArgs) -> Result<Status> {
    let Some((model, embedded)) = embed_all_pending(ctx, ctx.memories()?)? else {
        return Err(usage(
            "no embedding model is configured; set ENGRAM_EMBED_MODEL or [embed] in config.toml first",
        ));
    };
    if ctx.json {
        output::json(&json!({"model": model, "embedded": embedded}))?;
    } else if embedded == 0 {
        println!("every memory already has a vector for {model}");
    } else {
        println!("embedded {embedded} texts with {model}");
    }
    Ok(Status::Success)
}
