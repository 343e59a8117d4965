//! `engram import` and `engram export`: JSONL in, JSONL out, and the two agree exactly.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;
use engram_core::store::EXPORT_PAGE;
use engram_core::{ExportCursor, MemoryStore};
use indicatif::{ProgressBar, ProgressStyle};

use super::require_user;
use crate::context::Context;
use crate::exit::Status;
use crate::import::{DEFAULT_BATCH_SIZE, import_reader};
use crate::output;

/// `engram import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The JSONL file, or `-` for standard input.
    pub file: PathBuf,
    /// Lines per transaction.
    #[arg(
        long,
        default_value_t = DEFAULT_BATCH_SIZE,
        value_parser = clap::value_parser!(u64).range(1..=100_000)
    )]
    pub batch_size: u64,
}

/// `engram export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The user to export.
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
    /// Write to this file (atomically) instead of standard output.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
}

fn progress_bar(total_bytes: Option<u64>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match total_bytes {
        Some(total) => ProgressBar::new(total).with_style(
            ProgressStyle::with_template(
                "{spinner} importing [{bar:30}] {bytes}/{total_bytes} {msg} ({eta} left)",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} importing {bytes} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    }
}

pub fn import(ctx: &Context, args: ImportArgs) -> Result<Status> {
    let (reader, total): (Box<dyn Read + Send>, Option<u64>) = if args.file == Path::new("-") {
        (Box::new(std::io::stdin()), None)
    } else {
        let file = File::open(&args.file)
            .with_context(|| format!("cannot open {}", args.file.display()))?;
        let size = file.metadata().ok().map(|m| m.len());
        (Box::new(file), size)
    };
    let store = ctx.memories()?;
    let progress = progress_bar(total);
    let batch_size = usize::try_from(args.batch_size).unwrap_or(20_000);
    let mut summary = ctx
        .block_on(import_reader(
            &*store,
            progress.wrap_read(reader),
            batch_size,
            &progress,
        ))?
        .with_context(|| format!("while importing {}", args.file.display()))?;
    progress.finish_and_clear();
    // With a model configured, the new memories get their vectors now (`engram reindex` would
    // do the same later).
    if summary.added > 0 {
        crate::retrieval::embed_all_pending(ctx, store.clone())?;
    }

    summary.rejected.sort_by_key(|r| r.line);
    if ctx.json {
        output::json(&summary)?;
    } else {
        for rejection in &summary.rejected {
            eprintln!("line {}: {}", rejection.line, rejection.error);
        }
        println!(
            "imported {} memories: {} added, {} duplicates, {} rejected",
            summary.added + summary.duplicates,
            summary.added,
            summary.duplicates,
            summary.rejected.len()
        );
    }
    Ok(if summary.rejected.is_empty() {
        Status::Success
    } else {
        Status::Partial
    })
}

pub fn export(ctx: &Context, args: ExportArgs) -> Result<Status> {
    let user = require_user(args.user)?;
    let store = ctx.memories()?;
    let count = match &args.output {
        None => {
            let mut out = BufWriter::new(crate::output::stdout());
            let n = ctx.block_on(write_jsonl(store.as_ref(), &user, &mut out))??;
            out.flush()?;
            n
        }
        Some(path) => {
            // Write beside the target and rename, so a reader never sees half a file.
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let mut tmp = tempfile_in(dir)?;
            let n = {
                let mut out = BufWriter::new(tmp.as_file_mut());
                let n = ctx.block_on(write_jsonl(store.as_ref(), &user, &mut out))??;
                out.flush()?;
                n
            };
            tmp.as_file().sync_all()?;
            tmp.persist(path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            n
        }
    };
    if args.output.is_some() || ctx.json {
        eprintln!("exported {count} memories of {user}");
    }
    Ok(Status::Success)
}

fn tempfile_in(dir: &Path) -> Result<tempfile::NamedTempFile> {
    tempfile::Builder::new()
        .prefix(".engram-export")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))
}

/// Writes a user's memories as JSONL, oldest first, a page at a time.
async fn write_jsonl(store: &dyn MemoryStore, user: &str, out: &mut dyn Write) -> Result<u64> {
    let mut after = None;
    let mut count = 0;
    loop {
        let page = store.export_page(user, after, EXPORT_PAGE).await?;
        let full = page.len() == EXPORT_PAGE;
        for memory in page {
            after = Some(ExportCursor::after(&memory));
            let line = serde_json::to_string(&memory).context("cannot write a memory")?;
            writeln!(out, "{line}").context("cannot write the export")?;
            count += 1;
        }
        if !full {
            return Ok(count);
        }
    }
}
