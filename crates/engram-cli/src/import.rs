//! Reading JSONL memories into a store, batch by batch: what `engram import` does, and how the
//! benchmarks fill their stores.

use std::io::{BufRead, BufReader, Read};

use anyhow::{Context as _, Result};
use engram_core::import::parse_import_line;
use engram_core::{AddOutcome, MemoryStore, NewMemory, StoreError};
use indicatif::ProgressBar;
use serde::Serialize;

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
