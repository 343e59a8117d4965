//! `engram bench extraction`: how true the memory stays when a model extracts it. A labelled set
//! of conversations goes, one by one, through a real `engram serve` as `POST /v1/memories` with
//! `infer: true` (each conversation is its own user, with the profile it had before seeded
//! through the same API), against the configured model; the profile read back is scored against
//! the labels:
//!
//! - recall: expected entries present in the profile afterwards;
//! - precision: new profile entries that match a label of something the user said;
//! - stale: old values still current when the conversation replaced or revoked them;
//! - invented: new entries of things the user never stated (labelled as such, or with words the
//!   user never wrote); assistant-only: new entries of what only the assistant said;
//! - skipped: conversations the server did not extract at all.
//!
//! Labels are words, matched after the search's analysis: an entry matches a label when the
//! entry's words include all of the label's. `--scripted` puts a scripted model behind the
//! server that plays a careless extractor: it reports every labelled value, including what only
//! the assistant said and what the user only supposed, plus a value copied from the prompt and
//! an invented episode, so the figures show what grounding keeps out.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use engram_llm::scripted::{RecordedRequest, ScriptedServer, Turn};
use engram_memory::grounding::content_terms;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::server::ServerProcess;
use crate::context::Context;
use crate::exit::Status;
use crate::output;

/// The labelled set shipped with engram.
pub const DEFAULT_DATA: &str = "data/extraction/conversations.jsonl";

/// `engram bench extraction`.
#[derive(Debug, Args)]
#[command(after_help = "\
The model is the one `engram serve` would use: [llm] in ENGRAM_HOME/config.toml, or
ENGRAM_PROVIDER / ENGRAM_MODEL / OPENAI_BASE_URL / OPENAI_API_KEY (or the ANTHROPIC_ ones).
Each line of the data file is one conversation:
  {\"id\", \"category\", \"language\", \"known\": [{\"key\", \"value\"}],
   \"messages\": [{\"role\", \"content\"}], \"expect\": [words], \"stale\": [words],
   \"allow\": [words], \"assistant_said\": [words], \"not_true\": [words]}")]
pub struct BenchExtractionArgs {
    /// The labelled conversations (JSON lines).
    #[arg(long, default_value = DEFAULT_DATA)]
    pub data: PathBuf,
    /// Only the conversations whose id contains this text.
    #[arg(long)]
    pub only: Option<String>,
    /// Put a scripted careless model behind the server instead of the configured one.
    #[arg(long)]
    pub scripted: bool,
    /// Seconds one extraction may take before it counts as failed.
    #[arg(long, default_value = "600")]
    pub timeout: u64,
}

/// One labelled conversation.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Labelled {
    /// A short name.
    pub id: String,
    /// What it tests (role, diet, hypothetical, ...).
    pub category: String,
    /// The language the user writes in.
    pub language: String,
    /// The profile before the conversation.
    #[serde(default)]
    pub known: Vec<KnownEntry>,
    /// The conversation.
    pub messages: Vec<LabelledMessage>,
    /// Words that must be in the profile afterwards.
    #[serde(default)]
    pub expect: Vec<String>,
    /// Words of old values that must no longer be in the profile.
    #[serde(default)]
    pub stale: Vec<String>,
    /// Words of other things the user said, which may be recorded.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Words only the assistant said.
    #[serde(default)]
    pub assistant_said: Vec<String>,
    /// Words of things the user did not state as true (asked, supposed, about someone else).
    #[serde(default)]
    pub not_true: Vec<String>,
}

/// A profile entry known before the conversation.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KnownEntry {
    /// Its key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// `fact` (default) or `preference`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// One message.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LabelledMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// What was said.
    pub content: String,
}

/// Reads the data file; a bad line is an error naming it.
pub fn load(path: &Path) -> Result<Vec<Labelled>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the labelled conversations {}", path.display()))?;
    let mut out = Vec::new();
    let mut ids = HashSet::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let labelled: Labelled = serde_json::from_str(line)
            .with_context(|| format!("{} line {}", path.display(), number + 1))?;
        if labelled.messages.is_empty() {
            bail!("{} line {}: no messages", path.display(), number + 1);
        }
        if !ids.insert(labelled.id.clone()) {
            bail!(
                "{} line {}: the id {} is used twice",
                path.display(),
                number + 1,
                labelled.id
            );
        }
        out.push(labelled);
    }
    if out.is_empty() {
        bail!("{} holds no conversations", path.display());
    }
    Ok(out)
}

/// What one conversation gave.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Scored {
    /// The conversation.
    pub id: String,
    /// Its category.
    pub category: String,
    /// The server did not extract it (its reason).
    pub skipped: Option<String>,
    /// The request failed (its error).
    pub failed: Option<String>,
    /// Expected labels.
    pub expected: usize,
    /// Expected labels found.
    pub found: usize,
    /// Expected labels missing.
    pub missing: Vec<String>,
    /// New profile entries.
    pub produced: Vec<String>,
    /// New entries that match a label of what the user said.
    pub supported: usize,
    /// Old values still current.
    pub stale: Vec<String>,
    /// New entries the user never stated.
    pub invented: Vec<String>,
    /// New entries only the assistant said.
    pub assistant_only: Vec<String>,
    /// New entries that match no label (counted against precision).
    pub unlabelled: Vec<String>,
    /// Entries kept as candidates.
    pub candidates: Vec<String>,
    /// Entries the server rejected, as `code: text`.
    pub rejected: Vec<String>,
    /// Seconds the extraction took.
    pub seconds: f64,
}

/// The totals.
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    /// Conversations run.
    pub conversations: usize,
    /// Conversations not extracted.
    pub skipped: usize,
    /// Requests that failed.
    pub failed: usize,
    /// Expected labels.
    pub expected: usize,
    /// Expected labels found.
    pub found: usize,
    /// found / expected.
    pub recall: f64,
    /// New profile entries.
    pub produced: usize,
    /// New entries matching a label of what the user said.
    pub supported: usize,
    /// supported / produced (1 when nothing was produced).
    pub precision: f64,
    /// Old values still current.
    pub stale: usize,
    /// New entries of things the user never stated.
    pub invented: usize,
    /// New entries of what only the assistant said.
    pub assistant_only: usize,
    /// Entries kept as candidates.
    pub candidates: usize,
    /// Entries the server rejected.
    pub rejected: usize,
    /// Median seconds per conversation.
    pub seconds_median: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    data: String,
    model: String,
    totals: Totals,
    conversations: Vec<Scored>,
}

/// True when `text`'s words include all of `label`'s.
fn matches(text: &str, label: &str) -> bool {
    let words: HashSet<String> = content_terms(text).into_iter().collect();
    let wanted = content_terms(label);
    !wanted.is_empty() && wanted.iter().all(|w| words.contains(w))
}

fn value_of(text: &str) -> &str {
    text.split_once(": ").map_or(text, |(_, v)| v)
}

/// Scores the profile after a conversation. `profile` holds the current entries that are not
/// candidates, `new` the texts among them that were not there before.
pub fn score(labelled: &Labelled, profile: &[String], new: &[String]) -> Scored {
    let mut scored = Scored {
        id: labelled.id.clone(),
        category: labelled.category.clone(),
        expected: labelled.expect.len(),
        produced: new.to_vec(),
        ..Scored::default()
    };
    for label in &labelled.expect {
        if profile.iter().any(|p| matches(p, label)) {
            scored.found += 1;
        } else {
            scored.missing.push(label.clone());
        }
    }
    for label in &labelled.stale {
        if profile.iter().any(|p| matches(p, label)) {
            scored.stale.push(label.clone());
        }
    }
    let user_words: HashSet<String> = labelled
        .messages
        .iter()
        .filter(|m| m.role == "user")
        .flat_map(|m| engram_text::terms(&m.content))
        .collect();
    for entry in new {
        let labelled_as = |labels: &[String]| labels.iter().any(|l| matches(entry, l));
        if labelled_as(&labelled.expect) || labelled_as(&labelled.allow) {
            scored.supported += 1;
        } else if labelled_as(&labelled.not_true) {
            scored.invented.push(entry.clone());
        } else if labelled_as(&labelled.assistant_said) {
            scored.assistant_only.push(entry.clone());
        } else if !content_terms(value_of(entry))
            .iter()
            .all(|t| user_words.contains(t))
        {
            scored.invented.push(entry.clone());
        } else {
            scored.unlabelled.push(entry.clone());
        }
    }
    scored
}

/// Adds up the conversations.
pub fn totals(scored: &[Scored]) -> Totals {
    let mut t = Totals {
        conversations: scored.len(),
        ..Totals::default()
    };
    let mut seconds: Vec<f64> = Vec::new();
    for s in scored {
        t.skipped += usize::from(s.skipped.is_some());
        t.failed += usize::from(s.failed.is_some());
        t.expected += s.expected;
        t.found += s.found;
        t.produced += s.produced.len();
        t.supported += s.supported;
        t.stale += s.stale.len();
        t.invented += s.invented.len();
        t.assistant_only += s.assistant_only.len();
        t.candidates += s.candidates.len();
        t.rejected += s.rejected.len();
        seconds.push(s.seconds);
    }
    t.recall = if t.expected == 0 {
        1.0
    } else {
        t.found as f64 / t.expected as f64
    };
    t.precision = if t.produced == 0 {
        1.0
    } else {
        t.supported as f64 / t.produced as f64
    };
    seconds.sort_by(f64::total_cmp);
    t.seconds_median = seconds.get(seconds.len() / 2).copied().unwrap_or(0.0);
    t
}

/// The careless extractor `--scripted` plays, for the conversation under way.
fn scripted_answer(request: &RecordedRequest, labelled: &Labelled) -> Turn {
    let system = request
        .messages()
        .first()
        .and_then(|m| m.get("content"))
        .map(|c| c.to_string())
        .unwrap_or_default();
    if system.contains("\\\"decisions\\\"") || system.contains("\"decisions\"") {
        // No decision: the key rule decides.
        return Turn::text(json!({"decisions": []}).to_string());
    }
    if system.contains("\\\"episodes\\\"") || system.contains("\"episodes\"") {
        let first_user = labelled
            .messages
            .iter()
            .find(|m| m.role == "user")
            .map(|m| m.content.clone())
            .unwrap_or_default();
        return Turn::text(
            json!({"episodes": [
                {"summary": first_user, "category": "task_result", "importance": 3},
                {"summary": "Deployed the billing service to production and fixed the payment bug", "category": "task_result", "importance": 4}
            ]})
            .to_string(),
        );
    }
    // The first expected value takes the key of the known entry it replaces, if any.
    let replaced_key = labelled
        .known
        .iter()
        .find(|k| labelled.stale.iter().any(|s| matches(&k.value, s)))
        .map(|k| k.key.clone());
    let mut facts = Vec::new();
    for (i, label) in labelled.expect.iter().enumerate() {
        let key = match (&replaced_key, i) {
            (Some(key), 0) => key.clone(),
            _ => format!("fact_{i}"),
        };
        facts.push(json!({"key": key, "value": label}));
    }
    for (i, label) in labelled
        .assistant_said
        .iter()
        .chain(&labelled.not_true)
        .enumerate()
    {
        facts.push(json!({"key": format!("other_{i}"), "value": label}));
    }
    facts.push(json!({"key": "web_framework", "value": "<user's words>"}));
    let ended: Vec<Value> = labelled
        .known
        .iter()
        .filter(|k| labelled.stale.iter().any(|s| matches(&k.value, s)))
        .map(|k| json!({"key": k.key, "value": k.value}))
        .collect();
    Turn::text(json!({"facts": facts, "preferences": [], "ended": ended}).to_string())
}

/// The current profile of `user` on the server: `(id, text, candidate)`.
async fn profile(
    client: &reqwest::Client,
    url: &str,
    user: &str,
) -> Result<Vec<(String, String, bool)>> {
    // User names here are `bench-N`: nothing to escape.
    let response: Value = client
        .get(format!(
            "{url}/v1/memories?user_id={user}&kind=fact,preference&limit=500"
        ))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let items = response
        .get("memories")
        .or_else(|| response.get("results"))
        .or_else(|| response.get("items"))
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("the server's memory list has an unexpected shape: {response}"))?;
    Ok(items
        .iter()
        .map(|m| {
            let text = m["text"].as_str().unwrap_or("").to_string();
            let id = m["id"].as_str().unwrap_or("").to_string();
            let candidate = m["metadata"]["status"].as_str() == Some("candidate");
            (id, text, candidate)
        })
        .collect())
}

/// One conversation through the server.
async fn run_one(
    client: &reqwest::Client,
    url: &str,
    labelled: &Labelled,
    index: usize,
    timeout: Duration,
) -> Result<Scored> {
    let user = format!("bench-{index}");
    for known in &labelled.known {
        client
            .post(format!("{url}/v1/memories"))
            .json(&json!({
                "user_id": user,
                "text": format!("{}: {}", known.key, known.value),
                "kind": known.kind.as_deref().unwrap_or("fact"),
                "category": "user_info",
                "metadata": {"key": known.key},
            }))
            .send()
            .await?
            .error_for_status()
            .context("seeding the known profile")?;
    }
    let before: HashSet<String> = profile(client, url, &user)
        .await?
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    let started = Instant::now();
    let response = client
        .post(format!("{url}/v1/memories"))
        .timeout(timeout)
        .json(&json!({
            "user_id": user,
            "session_id": labelled.id,
            "messages": labelled.messages,
            "infer": true,
        }))
        .send()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let mut failed = None;
    let mut report = Value::Null;
    match response {
        Ok(r) if r.status().is_success() => report = r.json::<Value>().await?["extraction"].take(),
        Ok(r) => {
            let status = r.status();
            failed = Some(format!("{status}: {}", r.text().await.unwrap_or_default()));
        }
        Err(e) => failed = Some(e.to_string()),
    }
    let after = profile(client, url, &user).await?;
    let current: Vec<String> = after
        .iter()
        .filter(|(_, _, candidate)| !candidate)
        .map(|(_, t, _)| t.clone())
        .collect();
    let new: Vec<String> = after
        .iter()
        .filter(|(id, _, candidate)| !candidate && !before.contains(id))
        .map(|(_, t, _)| t.clone())
        .collect();
    let mut scored = score(labelled, &current, &new);
    scored.seconds = seconds;
    scored.failed = failed;
    scored.skipped = report["skipped"].as_str().map(str::to_string);
    scored.candidates = after
        .iter()
        .filter(|(_, _, candidate)| *candidate)
        .map(|(_, t, _)| t.clone())
        .collect();
    scored.rejected = report["rejected"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|r| {
                    format!(
                        "{}: {}",
                        r["code"].as_str().unwrap_or(""),
                        r["text"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(scored)
}

/// Runs `engram bench extraction`.
pub fn run(ctx: &Context, args: BenchExtractionArgs) -> Result<Status> {
    let mut data = load(&args.data)?;
    if let Some(only) = &args.only {
        data.retain(|c| c.id.contains(only.as_str()));
        if data.is_empty() {
            bail!("no conversation id contains '{only}'");
        }
    }
    let home = tempfile::tempdir().context("cannot create a temporary directory")?;
    if let Ok(config) = std::fs::read(ctx.home.dir().join("config.toml")) {
        std::fs::write(home.path().join("config.toml"), config)
            .context("cannot copy config.toml for the benchmark's server")?;
    }
    let current: Arc<Mutex<Option<Labelled>>> = Arc::new(Mutex::new(None));
    let scripted_server: Arc<Mutex<Option<Arc<ScriptedServer>>>> = Arc::new(Mutex::new(None));
    let mut env = vec![("ENGRAM_LOG".to_string(), "warn".to_string())];
    let mut model = std::env::var("ENGRAM_MODEL").unwrap_or_else(|_| "(from config.toml)".into());
    if args.scripted {
        let conversation = current.clone();
        let server_slot = scripted_server.clone();
        let hook: engram_llm::scripted::RecordHook = Box::new(move |request| {
            let labelled = conversation.lock().ok().and_then(|c| c.clone());
            let server = server_slot.lock().ok().and_then(|s| s.clone());
            if let (Some(labelled), Some(server)) = (labelled, server) {
                server.push(scripted_answer(request, &labelled));
            }
        });
        let server = spawn_scripted(hook)?;
        env.extend([
            ("ENGRAM_PROVIDER".to_string(), "openai".to_string()),
            ("ENGRAM_MODEL".to_string(), "scripted-careless".to_string()),
            ("OPENAI_BASE_URL".to_string(), server.openai_base_url()),
            ("OPENAI_API_KEY".to_string(), "scripted".to_string()),
        ]);
        model = "scripted careless extractor".to_string();
        if let Ok(mut slot) = scripted_server.lock() {
            *slot = Some(Arc::new(server));
        }
    }
    let server = ServerProcess::start_with(home.path(), &[], &env, &["ENGRAM_EMBED_MODEL"])?;
    let runtime = ctx.runtime()?;
    // Plain HTTP to 127.0.0.1; reqwest still wants a process-wide TLS provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let mut scored = Vec::new();
    let total = data.len();
    for (index, labelled) in data.iter().enumerate() {
        if let Ok(mut slot) = current.lock() {
            *slot = Some(labelled.clone());
        }
        let one = runtime.block_on(run_one(
            &client,
            &server.url,
            labelled,
            index,
            Duration::from_secs(args.timeout),
        ))?;
        eprintln!(
            "[{}/{total}] {}: {} of {} expected, {} new ({} invented, {} assistant-only), {} stale, {} rejected{}{} ({:.1} s)",
            index + 1,
            one.id,
            one.found,
            one.expected,
            one.produced.len(),
            one.invented.len(),
            one.assistant_only.len(),
            one.stale.len(),
            one.rejected.len(),
            one.skipped
                .as_deref()
                .map(|s| format!(", skipped: {s}"))
                .unwrap_or_default(),
            one.failed
                .as_deref()
                .map(|s| format!(", FAILED: {s}"))
                .unwrap_or_default(),
            one.seconds
        );
        scored.push(one);
    }
    drop(server);
    if let Ok(mut slot) = scripted_server.lock() {
        *slot = None;
    }
    let report = Report {
        data: args.data.display().to_string(),
        model,
        totals: totals(&scored),
        conversations: scored,
    };
    if ctx.json {
        output::json(&report)?;
    } else {
        print_text(&report);
    }
    Ok(if report.totals.failed > 0 {
        Status::Failure
    } else {
        Status::Success
    })
}

fn spawn_scripted(hook: engram_llm::scripted::RecordHook) -> Result<ScriptedServer> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("scripted-extractor".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = sender.send(Err(e));
                    return;
                }
            };
            runtime.block_on(async move {
                let server = ScriptedServer::start_on(
                    std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
                    Vec::new(),
                    Some(hook),
                )
                .await;
                let failed = server.is_err();
                let _ = sender.send(server);
                if !failed {
                    std::future::pending::<()>().await;
                }
            });
        })
        .context("cannot start the scripted model")?;
    receiver
        .recv()
        .context("the scripted model did not start")?
        .context("cannot start the scripted model")
}

fn print_text(report: &Report) {
    let t = &report.totals;
    println!("extraction on {} with {}", report.data, report.model);
    println!(
        "  conversations {}  skipped {}  failed {}",
        t.conversations, t.skipped, t.failed
    );
    println!(
        "  recall     {:.3}  ({} of {} expected entries in the profile)",
        t.recall, t.found, t.expected
    );
    println!(
        "  precision  {:.3}  ({} of {} new entries supported)",
        t.precision, t.supported, t.produced
    );
    println!(
        "  stale {}  invented {}  assistant-only {}",
        t.stale, t.invented, t.assistant_only
    );
    println!(
        "  candidates {}  rejected by grounding {}  median {:.1} s per conversation",
        t.candidates, t.rejected, t.seconds_median
    );
    for s in &report.conversations {
        let problems: Vec<String> = [
            (!s.missing.is_empty()).then(|| format!("missing {:?}", s.missing)),
            (!s.stale.is_empty()).then(|| format!("stale {:?}", s.stale)),
            (!s.invented.is_empty()).then(|| format!("invented {:?}", s.invented)),
            (!s.assistant_only.is_empty())
                .then(|| format!("assistant-only {:?}", s.assistant_only)),
            (!s.unlabelled.is_empty()).then(|| format!("unlabelled {:?}", s.unlabelled)),
            s.failed.as_ref().map(|f| format!("failed: {f}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !problems.is_empty() {
            println!("  {}: {}", s.id, problems.join("; "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled() -> Labelled {
        serde_json::from_value(json!({
            "id": "t", "category": "diet", "language": "en",
            "known": [{"key": "diet", "value": "vegetarian"}],
            "messages": [{"role": "user", "content": "I eat fish now, I'm pescatarian. If I moved to Lisbon..."},
                         {"role": "assistant", "content": "Try Munich's fish market."}],
            "expect": ["pescatarian"], "stale": ["vegetarian"], "allow": ["fish"],
            "assistant_said": ["Munich"], "not_true": ["Lisbon"]
        }))
        .unwrap()
    }

    #[test]
    fn entries_are_scored_against_the_labels() {
        let profile = [
            "diet: pescatarian",
            "diet: vegetarian",
            "food: fish",
            "city: Munich",
            "next_city: Lisbon",
            "editor: vim",
            "hobby: eat",
        ]
        .map(String::from);
        let new = [
            &profile[0],
            &profile[2],
            &profile[3],
            &profile[4],
            &profile[5],
            &profile[6],
        ]
        .map(|s| s.clone());
        let s = score(&labelled(), &profile, &new);
        assert_eq!((s.expected, s.found), (1, 1));
        assert_eq!(s.stale, vec!["vegetarian"]);
        assert_eq!(s.supported, 2);
        assert_eq!(s.assistant_only, vec!["city: Munich"]);
        assert_eq!(s.invented, vec!["next_city: Lisbon", "editor: vim"]);
        assert_eq!(s.unlabelled, vec!["hobby: eat"]);
        let t = totals(&[s]);
        assert_eq!(t.recall, 1.0);
        assert!((t.precision - 2.0 / 6.0).abs() < 1e-9);
    }

    /// The labelled set in the repository.
    fn shipped() -> Vec<Labelled> {
        load(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../")
                .join(DEFAULT_DATA),
        )
        .unwrap()
    }

    #[test]
    fn the_shipped_set_is_valid_and_covers_the_categories() {
        let data = shipped();
        assert!(data.len() >= 30);
        let categories: HashSet<&str> = data.iter().map(|c| c.category.as_str()).collect();
        for wanted in [
            "role",
            "stack",
            "diet",
            "move",
            "pets",
            "family",
            "preference",
            "assistant-heavy",
            "hypothetical",
            "one-message",
            "non-english",
        ] {
            assert!(categories.contains(wanted), "{wanted}");
        }
        assert!(data.iter().filter(|c| c.language != "en").count() >= 5);
    }

    #[test]
    fn what_the_user_said_of_someone_else_counts_when_it_is_filed_under_them() {
        let data = shipped();
        let mixed = data.iter().find(|c| c.id == "mixed-1").unwrap();
        let new = [
            "colleague: Priyanka",
            "colleague_role: frontend developer",
            "colleague_tools: Svelte",
            "tools: Svelte",
            "role: frontend developer",
        ]
        .map(String::from);
        let s = score(mixed, &new, &new);
        assert_eq!(s.supported, 3);
        assert_eq!(
            s.invented,
            vec!["tools: Svelte", "role: frontend developer"]
        );
    }

    #[test]
    fn bad_data_is_named_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        std::fs::write(&path, "{\"id\": \"a\"}\n").unwrap();
        let err = load(&path).unwrap_err();
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
        std::fs::write(&path, "").unwrap();
        assert!(load(&path).is_err());
    }
}
