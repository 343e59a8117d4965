//! `engram bench mcp`: one LoCoMo conversation loaded through MCP into engram (`engram mcp`)
//! and into the reference MCP memory server (`@modelcontextprotocol/server-memory`), both as
//! child processes over stdio driven by the same client; then the same questions asked of
//! both through `search_nodes`. Reports evidence recall@k and latencies side by side.
//!
//! Each dialog turn becomes one entity (named by its dia_id, so the evidence of a question can
//! be found among the entities returned) with the turn as its one observation.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use engram_core::Tool;
use engram_server::config::{McpServerSettings, McpSettings};
use engram_server::mcp_client::McpClients;
use serde::Serialize;
use serde_json::{Value, json};

use super::server::percentile_ms;
use crate::context::Context;
use crate::exit::{Status, usage};
use crate::output;

/// Entities per `create_entities` call.
const LOAD_BATCH: usize = 50;

/// `engram bench mcp`.
#[derive(Debug, Args)]
#[command(after_help = "\
The reference server is not part of engram; scripts/setup-reference-mcp.sh installs it with npm
under .cache/ and prints its entry point:
  engram bench mcp --data locomo10-dev.json --reference \"$(scripts/setup-reference-mcp.sh)\"
engram searches lexically unless --embed-model (or ENGRAM_EMBED_MODEL) names a model folder.")]
pub struct BenchMcpArgs {
    /// The LoCoMo JSON file.
    #[arg(long)]
    pub data: PathBuf,
    /// Which conversation of the file (0-based).
    #[arg(long, default_value = "0")]
    pub conversation: usize,
    /// The reference server's entry point (dist/index.js), run with node.
    #[arg(long)]
    pub reference: PathBuf,
    /// The node binary.
    #[arg(long, default_value = "node")]
    pub node: PathBuf,
    /// The recall cut-off.
    #[arg(long, default_value = "10")]
    pub k: usize,
    /// A sentence-transformers model folder for engram (hybrid search); lexical without,
    /// unless ENGRAM_EMBED_MODEL is set.
    #[arg(long)]
    pub embed_model: Option<PathBuf>,
}

struct TurnEntity {
    dia_id: String,
    observation: String,
}

struct Question {
    category: u64,
    text: String,
    evidence: Vec<String>,
}

/// "D8:6; D9:17", "D:11:26" and "D9:1 D4:4" all occur in the data: every D<session>:<turn>.
fn evidence_of(raw: &Value) -> Vec<String> {
    let mut ids = Vec::new();
    for item in raw
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        for token in item.split([';', ' ', ',']).filter(|t| !t.is_empty()) {
            let numbers: Vec<u32> = token
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse().ok())
                .collect();
            if let [session, turn] = numbers[..] {
                ids.push(format!("D{session}:{turn}"));
            }
        }
    }
    ids
}

fn load_conversation(args: &BenchMcpArgs) -> Result<(String, Vec<TurnEntity>, Vec<Question>)> {
    let text = std::fs::read_to_string(&args.data)
        .with_context(|| format!("cannot read {}", args.data.display()))?;
    let samples: Vec<Value> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a LoCoMo JSON list", args.data.display()))?;
    let sample = samples.get(args.conversation).ok_or_else(|| {
        usage(format!(
            "--conversation {} is out of range (the file has {})",
            args.conversation,
            samples.len()
        ))
    })?;
    let id = sample["sample_id"].as_str().unwrap_or("?").to_string();
    let conversation = &sample["conversation"];
    let mut turns = Vec::new();
    let mut session = 1;
    loop {
        let key = format!("session_{session}");
        let date = conversation[format!("{key}_date_time")]
            .as_str()
            .map(str::to_string);
        match (conversation.get(&key), date) {
            (Some(list), date) => {
                for turn in list.as_array().into_iter().flatten() {
                    let (Some(dia_id), Some(speaker), Some(said)) = (
                        turn["dia_id"].as_str(),
                        turn["speaker"].as_str(),
                        turn["text"].as_str(),
                    ) else {
                        continue;
                    };
                    let mut observation = match &date {
                        Some(date) => format!("{speaker} said ({date}): {said}"),
                        None => format!("{speaker} said: {said}"),
                    };
                    if let Some(caption) = turn["blip_caption"].as_str() {
                        observation.push_str(&format!(" [shared a photo: {caption}]"));
                    }
                    turns.push(TurnEntity {
                        dia_id: dia_id.to_string(),
                        observation,
                    });
                }
            }
            (None, Some(_)) => {}
            (None, None) => break,
        }
        session += 1;
    }
    let known: HashSet<&str> = turns.iter().map(|t| t.dia_id.as_str()).collect();
    let questions = sample["qa"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|qa| {
            let category = qa["category"].as_u64()?;
            let evidence: Vec<String> = evidence_of(&qa["evidence"])
                .into_iter()
                .filter(|e| known.contains(e.as_str()))
                .collect();
            ((1..=4).contains(&category) && !evidence.is_empty()).then(|| Question {
                category,
                text: qa["question"].as_str().unwrap_or("").to_string(),
                evidence,
            })
        })
        .collect();
    Ok((id, turns, questions))
}

/// The search_nodes answer's entity names, in order (the tool answers JSON text).
fn entity_names(text: &str) -> Result<Vec<String>> {
    let graph: Value = serde_json::from_str(text)
        .with_context(|| format!("search_nodes did not answer JSON: {text:.200}"))?;
    Ok(graph["entities"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .collect())
}

#[derive(Debug, Serialize)]
struct Side {
    server: String,
    load_seconds: f64,
    recall_at_k: f64,
    recall_by_category: BTreeMap<String, f64>,
    answered_with_any_entity: f64,
    search_p50_ms: f64,
    search_p95_ms: f64,
    search_max_ms: f64,
    mean_entities_returned: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    conversation: String,
    turns: usize,
    questions: usize,
    k: usize,
    engram_search: &'static str,
    sides: Vec<Side>,
}

async fn measure(
    name: &str,
    tools: &BTreeMap<String, Arc<dyn Tool>>,
    turns: &[TurnEntity],
    questions: &[Question],
    k: usize,
) -> Result<Side> {
    let tool = |suffix: &str| {
        tools
            .get(&format!("mcp_{name}_{suffix}"))
            .cloned()
            .ok_or_else(|| anyhow!("the server '{name}' has no tool {suffix}"))
    };
    let create = tool("create_entities")?;
    let search = tool("search_nodes")?;
    let started = Instant::now();
    for chunk in turns.chunks(LOAD_BATCH) {
        let entities: Vec<Value> = chunk
            .iter()
            .map(|t| json!({"name": t.dia_id, "entityType": "dialog turn", "observations": [t.observation]}))
            .collect();
        let out = create.execute(json!({"entities": entities})).await;
        if !out.success {
            bail!("{name}: create_entities failed: {}", out.to_model_text());
        }
    }
    let load_seconds = started.elapsed().as_secs_f64();

    let mut latencies = Vec::with_capacity(questions.len());
    let mut recall_sum = 0.0;
    let mut any = 0usize;
    let mut returned = 0usize;
    let mut by_category: BTreeMap<u64, (f64, usize)> = BTreeMap::new();
    for question in questions {
        let started = Instant::now();
        let out = search.execute(json!({"query": question.text})).await;
        latencies.push(started.elapsed());
        if !out.success {
            bail!("{name}: search_nodes failed: {}", out.to_model_text());
        }
        let names = entity_names(&out.content)?;
        returned += names.len();
        if !names.is_empty() {
            any += 1;
        }
        let top: HashSet<&str> = names.iter().take(k).map(String::as_str).collect();
        let found = question
            .evidence
            .iter()
            .filter(|e| top.contains(e.as_str()))
            .count();
        let recall = found as f64 / question.evidence.len() as f64;
        recall_sum += recall;
        let entry = by_category.entry(question.category).or_default();
        entry.0 += recall;
        entry.1 += 1;
    }
    latencies.sort();
    let n = questions.len().max(1) as f64;
    let names = ["", "multi-hop", "temporal", "open-domain", "single-hop"];
    Ok(Side {
        server: name.to_string(),
        load_seconds,
        recall_at_k: recall_sum / n,
        recall_by_category: by_category
            .into_iter()
            .map(|(c, (sum, count))| {
                let label = names.get(c as usize).copied().unwrap_or("other");
                (label.to_string(), sum / count as f64)
            })
            .collect(),
        answered_with_any_entity: any as f64 / n,
        search_p50_ms: percentile_ms(&latencies, 0.50),
        search_p95_ms: percentile_ms(&latencies, 0.95),
        search_max_ms: latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        mean_entities_returned: returned as f64 / n,
    })
}

/// Runs `engram bench mcp`.
pub fn run(ctx: &Context, args: BenchMcpArgs) -> Result<Status> {
    if args.k == 0 {
        return Err(usage("--k must be at least 1"));
    }
    if !args.reference.exists() {
        return Err(usage(format!(
            "{} does not exist (see `engram bench mcp --help` for installing the reference server)",
            args.reference.display()
        )));
    }
    let (id, turns, questions) = load_conversation(&args)?;
    let dir = tempfile::tempdir()?;
    let exe = std::env::current_exe().context("cannot find the engram binary")?;
    let mut engram_env: BTreeMap<String, String> =
        [("ENGRAM_LOG".to_string(), "warn".to_string())].into();
    if let Some(model) = &args.embed_model {
        engram_env.insert("ENGRAM_EMBED_MODEL".into(), model.display().to_string());
    }
    let engram_search =
        if args.embed_model.is_some() || std::env::var_os("ENGRAM_EMBED_MODEL").is_some() {
            "hybrid"
        } else {
            "lexical"
        };
    let mut settings = McpSettings::default();
    let timeouts = |mut s: McpServerSettings| {
        s.connect_timeout_secs = Some(60);
        s.call_timeout_secs = Some(600);
        s
    };
    settings.servers.insert(
        "engram".to_string(),
        timeouts(McpServerSettings {
            command: Some(exe.display().to_string()),
            args: vec![
                "--home".into(),
                dir.path().join("engram").display().to_string(),
                "mcp".into(),
                "--user".into(),
                "locomo".into(),
            ],
            env: engram_env,
            ..McpServerSettings::default()
        }),
    );
    settings.servers.insert(
        "reference".to_string(),
        timeouts(McpServerSettings {
            command: Some(args.node.display().to_string()),
            args: vec![args.reference.display().to_string()],
            env: [(
                "MEMORY_FILE_PATH".to_string(),
                dir.path().join("memory.jsonl").display().to_string(),
            )]
            .into(),
            ..McpServerSettings::default()
        }),
    );
    let clients = McpClients::connect(&settings);
    if !clients.warnings.is_empty() {
        bail!("{}", clients.warnings.join("; "));
    }
    let tools: BTreeMap<String, Arc<dyn Tool>> = clients
        .tools
        .into_iter()
        .map(|t| (t.name().to_string(), t))
        .collect();
    eprintln!(
        "{id}: {} turns, {} questions (categories 1-4 with evidence)",
        turns.len(),
        questions.len()
    );
    let runtime = ctx.runtime()?;
    let mut sides = Vec::new();
    for name in ["engram", "reference"] {
        let side = runtime.block_on(measure(name, &tools, &turns, &questions, args.k))?;
        sides.push(side);
    }
    let report = Report {
        conversation: id,
        turns: turns.len(),
        questions: questions.len(),
        k: args.k,
        engram_search,
        sides,
    };
    if ctx.json {
        output::json(&report)?;
    } else {
        println!(
            "{}: {} turns loaded as entities through create_entities ({} per call), {} questions through search_nodes",
            report.conversation, report.turns, LOAD_BATCH, report.questions
        );
        println!(
            "{:<10} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  by category",
            "server", "load s", "R@k", "any hit", "p50 ms", "p95 ms", "max ms", "entities"
        );
        for side in &report.sides {
            let categories: Vec<String> = side
                .recall_by_category
                .iter()
                .map(|(c, r)| format!("{c} {r:.3}"))
                .collect();
            println!(
                "{:<10} {:>9.2} {:>8.3} {:>9.3} {:>9.2} {:>9.2} {:>9.2} {:>9.1}  {}",
                side.server,
                side.load_seconds,
                side.recall_at_k,
                side.answered_with_any_entity,
                side.search_p50_ms,
                side.search_p95_ms,
                side.search_max_ms,
                side.mean_entities_returned,
                categories.join(", ")
            );
        }
        println!(
            "(k = {}; engram searched {})",
            report.k, report.engram_search
        );
    }
    Ok(Status::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_ids_are_normalised() {
        let raw = json!(["D1:3", "D8:6; D9:17", "D:11:26", "D9:1 D4:4", "nonsense"]);
        assert_eq!(
            evidence_of(&raw),
            vec!["D1:3", "D8:6", "D9:17", "D11:26", "D9:1", "D4:4"]
        );
    }
}
