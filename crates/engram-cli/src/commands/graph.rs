//! `engram import-graph`: the JSONL file of the reference MCP memory server
//! (`@modelcontextprotocol/server-memory`) into one user's knowledge graph.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;
use engram_core::store::graph::{Entity, ObservationInput, Relation};
use engram_server::knowledge::KnowledgeBase;
use serde::{Deserialize, Serialize};

use super::require_user;
use super::serve::open_stores;
use crate::context::Context;
use crate::exit::Status;
use crate::output;

/// Lines stored per transaction.
const BATCH: usize = 500;

/// `engram import-graph`.
#[derive(Debug, Args)]
#[command(after_help = "\
Each line is an entity or a relation, as the reference server writes them:
  {\"type\": \"entity\", \"name\": \"Alice\", \"entityType\": \"person\", \"observations\": [\"likes tea\"]}
  {\"type\": \"relation\", \"from\": \"Alice\", \"to\": \"Bob\", \"relationType\": \"knows\"}
Entities that exist already get the new observations; everything else is created once, so
importing a file twice changes nothing. Bad lines are reported with their number and reason;
the good ones are still imported, and the exit status is 5 if any line was rejected.")]
pub struct ImportGraphArgs {
    /// The JSONL file (the reference server's memory.jsonl), or `-` for standard input.
    pub file: PathBuf,
    /// Whose graph to import into.
    #[arg(long, short = 'u', env = "ENGRAM_USER")]
    pub user: Option<String>,
}

/// One line of the file.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum Line {
    Entity {
        name: String,
        #[serde(rename = "entityType")]
        entity_type: String,
        #[serde(default)]
        observations: Vec<String>,
    },
    Relation {
        from: String,
        to: String,
        #[serde(rename = "relationType")]
        relation_type: String,
    },
}

/// What an import did.
#[derive(Debug, Default, Serialize)]
struct Summary {
    entities_created: u64,
    observations_added: u64,
    relations_created: u64,
    rejected: Vec<Rejection>,
}

#[derive(Debug, Serialize)]
struct Rejection {
    line: u64,
    error: String,
}

fn parse(line: &str) -> Result<Line, String> {
    let parsed: Line = serde_json::from_str(line).map_err(|e| {
        let text = e.to_string();
        let text = match text.rfind(" at line ") {
            Some(cut) => text[..cut].to_string(),
            None => text,
        };
        if e.is_syntax() || e.is_eof() {
            format!("not valid JSON ({text})")
        } else {
            text
        }
    })?;
    match &parsed {
        Line::Entity {
            name,
            entity_type,
            observations,
        } => Entity {
            name: name.clone(),
            entity_type: entity_type.clone(),
            observations: observations.clone(),
        }
        .check(),
        Line::Relation {
            from,
            to,
            relation_type,
        } => Relation {
            from: from.clone(),
            to: to.clone(),
            relation_type: relation_type.clone(),
        }
        .check(),
    }
    .map_err(|e| e.to_string())?;
    Ok(parsed)
}

struct Importer<'a> {
    ctx: &'a Context,
    kb: &'a KnowledgeBase,
    user: &'a str,
    entities: Vec<Entity>,
    relations: Vec<Relation>,
    summary: Summary,
}

impl Importer<'_> {
    fn flush_entities(&mut self) -> Result<()> {
        if self.entities.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.entities);
        let created = self
            .ctx
            .block_on(self.kb.create_entities(self.user, &batch))??;
        self.summary.entities_created += created.len() as u64;
        self.summary.observations_added += created
            .iter()
            .map(|e| e.observations.len() as u64)
            .sum::<u64>();
        // Entities that existed already: merge their observations.
        let new_names: std::collections::HashSet<&str> =
            created.iter().map(|e| e.name.as_str()).collect();
        let merges: Vec<ObservationInput> = batch
            .iter()
            .filter(|e| !new_names.contains(e.name.as_str()) && !e.observations.is_empty())
            .map(|e| ObservationInput {
                entity_name: e.name.clone(),
                contents: e.observations.clone(),
            })
            .collect();
        if !merges.is_empty() {
            let added = self
                .ctx
                .block_on(self.kb.add_observations(self.user, &merges))??;
            self.summary.observations_added += added
                .iter()
                .map(|a| a.added_observations.len() as u64)
                .sum::<u64>();
        }
        Ok(())
    }

    fn flush_relations(&mut self) -> Result<()> {
        if self.relations.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.relations);
        let created = self
            .ctx
            .block_on(self.kb.create_relations(self.user, &batch))??;
        self.summary.relations_created += created.len() as u64;
        Ok(())
    }
}

/// Runs `engram import-graph`.
pub fn import_graph(ctx: &Context, args: ImportGraphArgs) -> Result<Status> {
    let user = require_user(args.user)?;
    let reader: Box<dyn Read> = if args.file == Path::new("-") {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            File::open(&args.file)
                .with_context(|| format!("cannot open {}", args.file.display()))?,
        )
    };
    let stores = open_stores(ctx)?;
    let kb = KnowledgeBase::new(stores.graph, stores.memories, stores.searcher);
    let mut importer = Importer {
        ctx,
        kb: &kb,
        user: &user,
        entities: Vec::new(),
        relations: Vec::new(),
        summary: Summary::default(),
    };
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    loop {
        buf.clear();
        let read = reader
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("cannot read {}", args.file.display()))?;
        if read == 0 {
            break;
        }
        line_no += 1;
        let line = if line_no == 1 {
            crate::import::strip_bom(&buf)
        } else {
            &buf[..]
        };
        let Ok(text) = std::str::from_utf8(line) else {
            importer.summary.rejected.push(Rejection {
                line: line_no,
                error: "not valid UTF-8".to_string(),
            });
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        match parse(text) {
            Ok(Line::Entity {
                name,
                entity_type,
                observations,
            }) => {
                importer.entities.push(Entity {
                    name,
                    entity_type,
                    observations,
                });
                if importer.entities.len() >= BATCH {
                    importer.flush_entities()?;
                }
            }
            Ok(Line::Relation {
                from,
                to,
                relation_type,
            }) => {
                importer.relations.push(Relation {
                    from,
                    to,
                    relation_type,
                });
                if importer.relations.len() >= BATCH {
                    importer.flush_relations()?;
                }
            }
            Err(error) => importer.summary.rejected.push(Rejection {
                line: line_no,
                error,
            }),
        }
    }
    importer.flush_entities()?;
    importer.flush_relations()?;
    let summary = importer.summary;
    if ctx.json {
        output::json(&summary)?;
    } else {
        for rejection in &summary.rejected {
            eprintln!("line {}: {}", rejection.line, rejection.error);
        }
        println!(
            "imported into {user}'s graph: {} entities created, {} observations added, {} relations created, {} lines rejected",
            summary.entities_created,
            summary.observations_added,
            summary.relations_created,
            summary.rejected.len()
        );
    }
    Ok(if summary.rejected.is_empty() {
        Status::Success
    } else {
        Status::Partial
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_the_reference_format_parse() {
        assert!(matches!(
            parse(r#"{"type":"entity","name":"A","entityType":"person","observations":["x"]}"#),
            Ok(Line::Entity { .. })
        ));
        assert!(matches!(
            parse(r#"{"type":"relation","from":"A","to":"B","relationType":"knows"}"#),
            Ok(Line::Relation { .. })
        ));
        let err = parse(r#"{"type":"node","name":"A"}"#).unwrap_err();
        assert!(err.contains("unknown variant `node`"), "{err}");
        let err =
            parse(r#"{"type":"entity","name":"","entityType":"t","observations":[]}"#).unwrap_err();
        assert!(err.contains("empty"), "{err}");
        assert!(parse("{").unwrap_err().starts_with("not valid JSON"));
        let err = parse(r#"{"type":"relation","from":"A","to":"B"}"#).unwrap_err();
        assert!(err.contains("relationType"), "{err}");
    }
}
