//! `engram copy`: a whole store from one engine to another (SQLite <-> PostgreSQL), losslessly.

use anyhow::{Result, bail};
use clap::Args;
use engram_backend::StoreConfig;
use engram_core::store::transfer::{Table, copy};
use serde::Serialize;

use crate::context::Context;
use crate::exit::Status;
use crate::output;

/// Arguments of `engram copy`.
#[derive(Debug, Args)]
#[command(after_help = "\
A store is a PostgreSQL URL (postgres://user:password@host:5432/database) or a SQLite file (a
folder means the engram.db in it). The target must be empty: a new file, or a database without
engram's data. Everything is copied in one transaction on the target (memories with their ids,
times and validity, history, vectors, tokens, jobs with their runs, the knowledge graph); a copy
that fails leaves the target as it was. The lexical index is rebuilt on the target.

Examples:
  engram copy --to postgres://engram@db.example.com/engram          # this home -> PostgreSQL
  engram copy --from postgres://engram@db.example.com/engram --to ./engram.db")]
pub struct CopyArgs {
    /// The store to copy (default: this home's store, as ENGRAM_DATABASE_URL or config.toml
    /// name it).
    #[arg(long, value_name = "URL|FILE")]
    pub from: Option<String>,
    /// The store to copy into (empty).
    #[arg(long, value_name = "URL|FILE")]
    pub to: String,
}

#[derive(Debug, Serialize)]
struct CopyReport {
    from: String,
    to: String,
    copied: Vec<(String, u64)>,
}

/// Runs `engram copy`.
pub fn run(ctx: &Context, args: CopyArgs) -> Result<Status> {
    let from = match &args.from {
        Some(text) => StoreConfig::parse(text),
        None => ctx.store_config()?,
    };
    let to = StoreConfig::parse(&args.to);
    if from.location() == to.location() {
        bail!("--from and --to are the same store ({})", to.location());
    }
    if let StoreConfig::Sqlite { path, .. } = &from
        && !path.is_file()
    {
        bail!("{} does not exist: nothing to copy", path.display());
    }
    let json = ctx.json;
    let counts = ctx.block_on(async {
        let source = engram_backend::open(&from).await?;
        let target = engram_backend::open(&to).await?;
        let mut last: Option<Table> = None;
        let counts = copy(&*source.transfer, &*target.transfer, &mut |table, n| {
            if !json {
                if last.is_some_and(|t| t != table) {
                    eprintln!();
                }
                eprint!("\r{:<20}{n}", table.name());
                last = Some(table);
            }
        })
        .await;
        if !json && last.is_some() {
            eprintln!();
        }
        counts
    })??;
    let report = CopyReport {
        from: from.location(),
        to: to.location(),
        copied: counts
            .iter()
            .map(|(table, n)| (table.name().to_string(), *n))
            .collect(),
    };
    if json {
        output::json(&report)?;
    } else {
        println!("copied {} to {}", report.from, report.to);
        for (table, n) in &report.copied {
            println!("  {table:<20}{n}");
        }
    }
    Ok(Status::Success)
}
