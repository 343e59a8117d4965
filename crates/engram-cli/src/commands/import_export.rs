//! `engram import` and `engram export`: JSONL in, JSONL out, and the two agree exactly.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Read, Write};
use std::path::Path;

use anyhow::{Context as _, Result};
use engram_core::import::parse_import_line;
use engram_core::store::EXPORT_PAGE;
use engram_core::{AddOutcome, ExportCursor, MemoryStore, NewMemory, StoreError};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::{Context, require_user};
use crate::cli::{ExportArgs, ImportArgs};
use crate::exit::Status;
use crate::output;

/// Lines stored per transaction unless `--batch-size` says otherwise. Larger batches write each
/// page of the indexes fewer times (at a million memories, 20,000 per batch imported about a
/// fifth faster per CPU second than 2,000; see BENCHMARKS.md), and a line still succeeds or fails
/// on its own: only a failure of the whole batch (a full disk) leaves its lines unstored.
pub const DEFAULT_BATCH_SIZE: u64 = 20_000;

/// The line without a leading UTF-8 byte order mark.
pub fn strip_bom(line: &[u8]) -> &[u8] {
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

/// What an import did.
#[derive(Debug, Default, Serialize)]
pub struct ImportSummary {
    /// Memories stored.
    pub added: u64,
    /// Lines whose text was already stored in that scope.
    pub duplicates: u64,
    /// Lines that could not be used, with why.
    pub rejected: Vec<Rejection>,
}

/// A line that could not be imported.
#[derive(Debug, Serialize)]
pub struct Rejection {
    /// 1-based line number.
    pub line: u64,
    /// Why.
    pub error: String,
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
        super::retrieval::embed_all_pending(ctx, store.clone())?;
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

/// A batch of parsed lines: each line number with its memory or why it was rejected.
type ParsedBatch = Vec<(u64, Result<NewMemory, String>)>;

/// Reads JSONL memories from `reader` and stores them in batches of `batch_size` lines, each in
/// one transaction. Bad lines are collected in the summary; the rest are stored.
///
/// Parsing runs on a thread of its own, one batch ahead of the writer, so reading JSON and
/// writing to the store overlap.
pub async fn import_reader(
    store: &dyn MemoryStore,
    reader: impl Read + Send + 'static,
    batch_size: usize,
    progress: &ProgressBar,
) -> Result<ImportSummary> {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<ParsedBatch>(2);
    let parser = std::thread::spawn(move || -> std::io::Result<()> {
        let mut reader = BufReader::with_capacity(1 << 16, reader);
        let mut batch: ParsedBatch = Vec::with_capacity(batch_size);
        let mut line_no = 0u64;
        let mut buf = Vec::new();
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                break;
            }
            line_no += 1;
            // Editors on some systems start a UTF-8 file with a byte order mark.
            let line = if line_no == 1 {
                strip_bom(&buf)
            } else {
                &buf[..]
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            batch.push((line_no, parse_import_line(line, None)));
            if batch.len() >= batch_size {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(batch_size));
                if sender.blocking_send(full).is_err() {
                    // The writer stopped (it failed); its error is the one to report.
                    return Ok(());
                }
            }
        }
        if !batch.is_empty() {
            let _ = sender.blocking_send(batch);
        }
        Ok(())
    });
    let mut summary = ImportSummary::default();
    let mut written = Ok(());
    while let Some(parsed) = receiver.recv().await {
        let mut good = Vec::with_capacity(parsed.len());
        for (line, result) in parsed {
            match result {
                Ok(memory) => good.push((line, memory)),
                Err(error) => summary.rejected.push(Rejection { line, error }),
            }
        }
        if let Err(e) = flush(store, &mut good, &mut summary).await {
            written = Err(e);
            break;
        }
        progress.set_message(format!("{} added", summary.added));
    }
    // Unblocks a parser waiting to send after the writer stopped.
    drop(receiver);
    let read = parser
        .join()
        .map_err(|_| anyhow::anyhow!("the import reader thread failed"))?;
    written?;
    read?;
    Ok(summary)
}

/// Stores one batch in one transaction. A failure of the whole batch (disk full, locked for too
/// long) stops the import: earlier batches are committed, this one is not.
async fn flush(
    store: &dyn MemoryStore,
    batch: &mut Vec<(u64, NewMemory)>,
    summary: &mut ImportSummary,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let (lines, memories): (Vec<u64>, Vec<NewMemory>) = std::mem::take(batch).into_iter().unzip();
    let first = lines.first().copied().unwrap_or(0);
    let outcomes = store
        .add_many(memories, "import")
        .await
        .with_context(|| format!("import stopped at line {first}; lines before it were stored"))?;
    for (line, outcome) in lines.into_iter().zip(outcomes) {
        match outcome {
            Ok(AddOutcome::Added(_)) => summary.added += 1,
            Ok(AddOutcome::Duplicate(_)) => summary.duplicates += 1,
            Err(StoreError::Invalid(e)) => summary.rejected.push(Rejection {
                line,
                error: e.to_string(),
            }),
            Err(e) => summary.rejected.push(Rejection {
                line,
                error: e.to_string(),
            }),
        }
    }
    Ok(())
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
