//! `engram bench locomo`: evidence recall@k on the LoCoMo long-term conversation benchmark.
//!
//! Each conversation goes into its own user scope, one episode per turn ("<speaker>: <text>",
//! with the image caption appended), in a session per LoCoMo session, dated by that session and
//! carrying its `dia_id` in metadata.
//! Every question of categories 1-4 is asked as a search; recall@k is the fraction of the
//! question's evidence turns found among the top k hits, averaged over questions.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use engram_backend::{DATABASE_FILE, StoreConfig};
use engram_core::{Filter, FixedClock, Kind, MemoryStore, NewMemory, Scope};
use engram_memory::indexing::embed_pending;
use engram_memory::{SearchRequest, Searcher};
use indicatif::{ProgressBar, ProgressStyle};
use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use super::store::percentile;

mod cv;
use crate::context::Context;
use crate::exit::Status;
use crate::output;
use crate::retrieval::{self, RerankMode};

/// Which retrieval a benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RetrievalMode {
    /// BM25 only.
    Lexical,
    /// Embeddings only.
    Dense,
    /// Both, fused.
    Hybrid,
}

impl RetrievalMode {
    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            RetrievalMode::Lexical => "lexical",
            RetrievalMode::Dense => "dense",
            RetrievalMode::Hybrid => "hybrid",
        }
    }
}

/// `engram bench locomo`.
#[derive(Debug, Args)]
pub struct BenchLocomoArgs {
    /// The LoCoMo JSON file (a list of samples, as in snap-research/LoCoMo data/locomo10.json).
    #[arg(long)]
    pub data: PathBuf,
    /// lexical, dense or hybrid (default: hybrid when an embedding model is configured).
    #[arg(long)]
    pub mode: Option<RetrievalMode>,
    /// Ranking profile (see `engram search --help`).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Rerank stage (see `engram search --help`); not with --cv.
    #[arg(long, value_name = "MODE", conflicts_with = "cv")]
    pub rerank: Option<RerankMode>,
    /// Recall cut-offs (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "5,10,20")]
    pub k: Vec<usize>,
    /// Keep the benchmark's store in DIR and reuse it when it already holds the data (saves
    /// re-embedding between runs that only change ranking).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Also choose ranking settings by leave-one-conversation-out cross-validation: every
    /// setting of a grid (fusion, lexical share, recency, time boosts, neighbours) is scored on
    /// all conversations but one, the best is measured on the one left out, in turn for each.
    #[arg(long)]
    pub cv: bool,
    /// With --cv: the values one parameter of the grid takes, e.g. `--grid neighbours=0,0.2,0.4`
    /// (repeatable). Parameters: fusion (weighted, minmax, rrf), share, recency, window, when,
    /// neighbours.
    #[arg(long, value_name = "NAME=V1,V2,...")]
    pub grid: Vec<String>,
}

/// The question categories the measure covers, with LoCoMo's names.
const CATEGORIES: [(u8, &str); 4] = [
    (1, "multi-hop"),
    (2, "temporal"),
    (3, "open-domain"),
    (4, "single-hop"),
];

struct Turn {
    dia_id: String,
    session: u32,
    text: String,
    at: Timestamp,
}

struct Question {
    category: u8,
    text: String,
    evidence: Vec<String>,
}

struct Conversation {
    id: String,
    turns: Vec<Turn>,
    questions: Vec<Question>,
}

/// Reads "1:56 pm on 8 May, 2023" (the dataset's session times, taken as UTC).
fn session_time(text: &str) -> Result<Timestamp> {
    let civil = jiff::civil::DateTime::strptime("%I:%M %p on %d %B, %Y", text.trim())
        .with_context(|| format!("session time '{text}'"))?;
    Ok(civil.to_zoned(jiff::tz::TimeZone::UTC)?.timestamp())
}

/// Evidence ids as the dataset writes them, including its few malformed ones
/// ("D8:6; D9:17", "D:11:26", "D9:1 D4:4"), normalised to "D<session>:<turn>".
fn evidence_ids(raw: &[Value]) -> Vec<String> {
    let mut ids = Vec::new();
    for item in raw.iter().filter_map(Value::as_str) {
        for piece in item.split(|c: char| c == ';' || c.is_whitespace()) {
            let digits: Vec<&str> = piece
                .trim_start_matches('D')
                .trim_start_matches(':')
                .split(':')
                .collect();
            if let [session, turn] = digits[..]
                && let (Ok(s), Ok(t)) = (session.parse::<u32>(), turn.parse::<u32>())
            {
                ids.push(format!("D{s}:{t}"));
            }
        }
    }
    ids
}

fn load(path: &Path) -> Result<Vec<Conversation>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let samples: Vec<Value> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a LoCoMo JSON list", path.display()))?;
    let mut conversations = Vec::new();
    for sample in samples {
        let id = sample["sample_id"]
            .as_str()
            .ok_or_else(|| anyhow!("a sample has no sample_id"))?
            .to_string();
        let conv = &sample["conversation"];
        let mut turns = Vec::new();
        for session in 1u32.. {
            let key = format!("session_{session}");
            let Some(list) = conv.get(&key) else {
                if conv.get(format!("{key}_date_time")).is_some() {
                    continue; // dated sessions without turns exist
                }
                break;
            };
            let at = session_time(conv[format!("{key}_date_time")].as_str().unwrap_or(""))
                .with_context(|| format!("{id} {key}"))?;
            for turn in list.as_array().into_iter().flatten() {
                let (Some(speaker), Some(dia_id)) =
                    (turn["speaker"].as_str(), turn["dia_id"].as_str())
                else {
                    continue;
                };
                let mut text = format!("{speaker}: {}", turn["text"].as_str().unwrap_or(""));
                if let Some(caption) = turn["blip_caption"].as_str() {
                    text.push_str(&format!(" [shares an image: {caption}]"));
                }
                turns.push(Turn {
                    dia_id: dia_id.to_string(),
                    session,
                    text,
                    at,
                });
            }
        }
        let questions = sample["qa"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|qa| {
                let category = u8::try_from(qa["category"].as_u64()?).ok()?;
                Some(Question {
                    category,
                    text: qa["question"].as_str()?.to_string(),
                    evidence: evidence_ids(qa["evidence"].as_array()?),
                })
            })
            .collect();
        conversations.push(Conversation {
            id,
            turns,
            questions,
        });
    }
    Ok(conversations)
}

#[derive(Debug, Default, Clone, Serialize)]
struct CategoryResult {
    name: String,
    questions: usize,
    recall: BTreeMap<usize, f64>,
}

#[derive(Debug, Serialize)]
struct LocomoReport {
    mode: String,
    profile: String,
    model: Option<String>,
    /// The rerank stage's reranker and how many hits it read, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    rerank: Option<String>,
    /// Questions whose reranking failed or was partial (they kept fusion's order there).
    #[serde(skip_serializing_if = "Option::is_none")]
    rerank_fallbacks: Option<usize>,
    reused_store: bool,
    conversations: usize,
    turns: usize,
    questions: usize,
    skipped_questions: usize,
    ingest_seconds: f64,
    ingest_per_second: f64,
    embed_seconds: f64,
    query_p50_ms: f64,
    query_p95_ms: f64,
    categories: Vec<CategoryResult>,
    overall: CategoryResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    cross_validation: Option<cv::CrossValidation>,
}

/// One question asked: where it comes from, and the recall of every ranking tried.
struct Asked {
    /// Index of its conversation.
    conversation: usize,
    category: u8,
    /// Recall at each cut-off, per ranking profile: `recall[profile][k]`.
    recall: Vec<Vec<f64>>,
}

/// Runs `engram bench locomo`.
pub fn run(ctx: &Context, args: BenchLocomoArgs) -> Result<Status> {
    let mut ks = args.k.clone();
    ks.sort_unstable();
    ks.dedup();
    if ks.is_empty() || ks[0] == 0 {
        bail!("--k needs positive cut-offs, e.g. --k 5,10,20");
    }
    if args.cv && !ks.contains(&cv::SELECT_AT) {
        bail!(
            "--cv chooses settings by R@{} and needs it among --k",
            cv::SELECT_AT
        );
    }
    let max_k = ks[ks.len() - 1];
    let conversations = load(&args.data)?;
    if args.cv && conversations.len() < 2 {
        bail!("--cv needs at least two conversations to leave one out");
    }
    // Without --mode: hybrid when a model is configured, lexical otherwise.
    let configured = match args.mode {
        Some(RetrievalMode::Lexical) => None,
        _ => retrieval::embedder(ctx)?,
    };
    let mode = args.mode.unwrap_or(if configured.is_some() {
        RetrievalMode::Hybrid
    } else {
        RetrievalMode::Lexical
    });
    if mode != RetrievalMode::Lexical && configured.is_none() {
        bail!(
            "--mode {} needs an embedding model: set ENGRAM_EMBED_MODEL (or [embed] in config.toml), or use --mode lexical",
            mode.as_str()
        );
    }
    let embedder = configured;
    let mut profile = retrieval::profile(ctx, args.profile.as_deref())?;
    if mode == RetrievalMode::Dense {
        profile.lexical_share = 0.0;
    }
    // The profile itself first, then (with --cv) every setting of the grid.
    let mut profiles = vec![profile.clone()];
    if !args.grid.is_empty() && !args.cv {
        bail!("--grid only applies with --cv");
    }
    let grid = if args.cv {
        Some(cv::Grid::new(&profile, mode, &args.grid)?)
    } else {
        None
    };
    if let Some(grid) = &grid {
        profiles.extend(grid.profiles.iter().cloned());
    }
    let runtime = ctx.runtime()?;
    let temp = tempfile::tempdir()?;
    let dir = match &args.store {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            dir.clone()
        }
        None => temp.path().to_path_buf(),
    };
    let store: Arc<dyn MemoryStore> =
        engram_backend::open_blocking(&StoreConfig::sqlite(dir.join(DATABASE_FILE)))?.memories;
    let reuse = runtime.block_on(store.stats())?.memories > 0;

    // Ingest.
    let turns: usize = conversations.iter().map(|c| c.turns.len()).sum();
    let started = Instant::now();
    for conv in conversations.iter().filter(|_| !reuse) {
        let batch = conv
            .turns
            .iter()
            .map(|turn| {
                let scope =
                    Scope::user(conv.id.clone()).with_session(format!("session-{}", turn.session));
                let mut memory = NewMemory::new(scope, turn.text.clone())
                    .with_kind(Kind::Episode)
                    .with_source("locomo")
                    .at(turn.at)
                    .with_meta("dia_id", json!(turn.dia_id))
                    .with_meta("session", json!(turn.session));
                memory.valid_from = Some(turn.at);
                memory
            })
            .collect();
        for outcome in runtime.block_on(store.add_many(batch, "bench"))? {
            outcome?;
        }
    }
    let ingest = started.elapsed();
    let started = Instant::now();
    if let Some(embedder) = &embedder {
        let progress = bar(turns as u64, "embedding");
        let bar = progress.clone();
        runtime.block_on(embed_pending(&store, embedder, &mut move |done, _| {
            bar.set_position(done)
        }))?;
        progress.finish_and_clear();
    }
    let embed = started.elapsed();

    // Ask. The questions come after the conversation: "now" is its last session.
    let model = embedder.as_ref().map(|e| e.model_id().to_string());
    let clock = Arc::new(FixedClock::new(Timestamp::UNIX_EPOCH));
    let reranker = retrieval::reranker(ctx, args.rerank)?;
    let rerank = reranker
        .as_ref()
        .map(|(r, top)| format!("{} (top {top})", r.name()));
    let rerank_top = reranker.as_ref().map(|(_, top)| *top);
    let searcher = Searcher::new(store.clone())
        .with_embedder(embedder)
        .with_profile(profile.clone())
        .with_clock(clock.clone(), jiff::tz::TimeZone::UTC);
    let searcher = match reranker {
        Some((reranker, top)) => searcher.with_reranker(Some(reranker), top),
        None => searcher,
    };
    let mut rerank_fallbacks = 0;
    // The grid's profiles may use adjacent turns even when the benchmark's own does not.
    let searcher = if args.cv {
        searcher.with_all_neighbours()
    } else {
        searcher
    };
    let mut asked: Vec<Asked> = Vec::new();
    let mut latencies = Vec::new();
    let mut skipped = 0;
    let total: u64 = conversations
        .iter()
        .map(|c| {
            c.questions
                .iter()
                .filter(|q| (1..=4).contains(&q.category))
                .count() as u64
        })
        .sum();
    let progress = bar(total, "asking");
    for (index, conv) in conversations.iter().enumerate() {
        if let Some(last) = conv.turns.iter().map(|t| t.at).max() {
            clock.set(last);
        }
        let known: HashSet<&str> = conv.turns.iter().map(|t| t.dia_id.as_str()).collect();
        for question in conv
            .questions
            .iter()
            .filter(|q| (1..=4).contains(&q.category))
        {
            progress.inc(1);
            let evidence: HashSet<&str> = question
                .evidence
                .iter()
                .map(String::as_str)
                .filter(|id| known.contains(id))
                .collect();
            if evidence.is_empty() {
                skipped += 1;
                continue;
            }
            let request = SearchRequest {
                filter: Filter::user(conv.id.clone()),
                query: question.text.clone(),
                limit: max_k,
            };
            let started = Instant::now();
            let candidates = match runtime.block_on(searcher.candidates(&request)) {
                Ok(candidates) => Some(candidates),
                // A question with no searchable words finds nothing; it still counts.
                Err(engram_memory::SearchError::Store(engram_core::StoreError::BadQuery(_))) => {
                    None
                }
                Err(e) => return Err(e.into()),
            };
            // With a rerank stage (never with --cv, so the profile is the only one), the
            // reranked hits; the latency includes the reranking.
            let reranked: Option<Vec<String>> = match (&candidates, rerank_top) {
                (Some(c), Some(top)) => {
                    let hits = c.rank(&profile, max_k.max(top));
                    let (mut hits, notice) =
                        runtime.block_on(searcher.rerank(&question.text, hits));
                    rerank_fallbacks += usize::from(notice.is_some());
                    hits.truncate(max_k);
                    Some(
                        hits.iter()
                            .filter_map(|h| h.memory.metadata.get("dia_id").and_then(Value::as_str))
                            .map(str::to_string)
                            .collect(),
                    )
                }
                (Some(c), None) => {
                    // The search itself, for its latency: ranking under the profile included.
                    std::hint::black_box(c.order(&profile, max_k));
                    None
                }
                (None, _) => None,
            };
            latencies.push(started.elapsed());
            let recall = profiles
                .iter()
                .map(|p| {
                    let ranked: Vec<&str> = match (&reranked, &candidates) {
                        (Some(ids), _) => ids.iter().map(String::as_str).collect(),
                        (None, Some(c)) => c
                            .order(p, max_k)
                            .into_iter()
                            .filter_map(|at| {
                                c.entries[at]
                                    .memory
                                    .metadata
                                    .get("dia_id")
                                    .and_then(Value::as_str)
                            })
                            .collect(),
                        (None, None) => Vec::new(),
                    };
                    ks.iter()
                        .map(|&k| {
                            let found = ranked
                                .iter()
                                .take(k)
                                .filter(|id| evidence.contains(*id))
                                .collect::<HashSet<_>>()
                                .len();
                            found as f64 / evidence.len() as f64
                        })
                        .collect()
                })
                .collect();
            asked.push(Asked {
                conversation: index,
                category: question.category,
                recall,
            });
        }
    }
    progress.finish_and_clear();
    latencies.sort();

    let (categories, overall) = summarise(&asked, &ks, 0);
    let cross_validation = grid.map(|grid| {
        let names: Vec<String> = conversations.iter().map(|c| c.id.clone()).collect();
        cv::cross_validate(&grid, &asked, &ks, &names)
    });
    let report = LocomoReport {
        mode: mode.as_str().to_string(),
        profile: profile.name.clone(),
        model,
        rerank_fallbacks: rerank.as_ref().map(|_| rerank_fallbacks),
        rerank,
        reused_store: reuse,
        conversations: conversations.len(),
        turns,
        questions: overall.questions,
        skipped_questions: skipped,
        ingest_seconds: ingest.as_secs_f64(),
        ingest_per_second: turns as f64 / ingest.as_secs_f64().max(1e-9),
        embed_seconds: embed.as_secs_f64(),
        query_p50_ms: percentile(&latencies, 0.5),
        query_p95_ms: percentile(&latencies, 0.95),
        categories,
        overall,
        cross_validation,
    };
    if ctx.json {
        output::json(&report)?;
    } else {
        print_report(&report, &ks);
    }
    Ok(Status::Success)
}

/// Recall per category and overall, for the profile at `profile` in each question's list.
fn summarise(
    asked: &[Asked],
    ks: &[usize],
    profile: usize,
) -> (Vec<CategoryResult>, CategoryResult) {
    let mut overall = CategoryResult {
        name: "overall".into(),
        ..CategoryResult::default()
    };
    let mut categories = Vec::new();
    for (category, name) in CATEGORIES {
        let mut row = CategoryResult {
            name: format!("{category} {name}"),
            ..CategoryResult::default()
        };
        for question in asked.iter().filter(|q| q.category == category) {
            row.questions += 1;
            for (i, &k) in ks.iter().enumerate() {
                *row.recall.entry(k).or_default() += question.recall[profile][i];
            }
        }
        overall.questions += row.questions;
        for (&k, &sum) in &row.recall {
            *overall.recall.entry(k).or_default() += sum;
        }
        let n = row.questions.max(1) as f64;
        row.recall.values_mut().for_each(|v| *v /= n);
        categories.push(row);
    }
    let n = overall.questions.max(1) as f64;
    overall.recall.values_mut().for_each(|v| *v /= n);
    (categories, overall)
}

fn bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return ProgressBar::hidden();
    }
    ProgressBar::new(total).with_style(
        ProgressStyle::with_template(&format!("{{spinner}} {what} [{{bar:30}}] {{pos}}/{{len}}"))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    )
}

fn print_report(report: &LocomoReport, ks: &[usize]) {
    println!(
        "mode {}, profile {}, model {}, rerank {}",
        report.mode,
        report.profile,
        report.model.as_deref().unwrap_or("none"),
        report.rerank.as_deref().unwrap_or("none")
    );
    if let Some(fallbacks) = report.rerank_fallbacks.filter(|n| *n > 0) {
        println!(
            "reranking failed or was partial for {fallbacks} questions (fusion's order kept there)"
        );
    }
    println!(
        "LoCoMo: {} conversations, {} turns, {} questions (categories 1-4; {} without resolvable evidence skipped)",
        report.conversations, report.turns, report.questions, report.skipped_questions
    );
    let header: Vec<String> = ks.iter().map(|k| format!("R@{k:<4}")).collect();
    println!("{:<16} {:>5}  {}", "category", "n", header.join("  "));
    for row in report.categories.iter().chain([&report.overall]) {
        let cells: Vec<String> = ks
            .iter()
            .map(|k| format!("{:<6.3}", row.recall.get(k).copied().unwrap_or(0.0)))
            .collect();
        println!("{:<16} {:>5}  {}", row.name, row.questions, cells.join(" "));
    }
    if let Some(cv) = &report.cross_validation {
        cv::print(cv, ks);
    }
    if report.reused_store {
        println!("ingest: reused the store given with --store");
    } else {
        println!(
            "ingest {:.2} s ({:.0} turns/s), embedding {:.1} s",
            report.ingest_seconds, report.ingest_per_second, report.embed_seconds
        );
    }
    println!(
        "query p50 {:.2} ms, p95 {:.2} ms",
        report.query_p50_ms, report.query_p95_ms
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_ids_survive_the_datasets_typos() {
        let raw = json!(["D1:3", "D8:6; D9:17", "D:11:26", "D9:1 D4:4", "D"]);
        assert_eq!(
            evidence_ids(raw.as_array().unwrap()),
            ["D1:3", "D8:6", "D9:17", "D11:26", "D9:1", "D4:4"]
        );
    }

    #[test]
    fn session_times_parse() {
        let t = session_time("1:56 pm on 8 May, 2023").unwrap();
        assert_eq!(t.to_string(), "2023-05-08T13:56:00Z");
        let t = session_time("10:37 am on 27 June, 2023").unwrap();
        assert_eq!(t.to_string(), "2023-06-27T10:37:00Z");
    }
}
