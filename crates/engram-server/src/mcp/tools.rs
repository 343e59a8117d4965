//! The MCP tools: their names, descriptions and argument schemas, as clients and models see them.
//!
//! Two families:
//! - `memory_*`: engram's own memory operations, described for a model deciding what to call.
//! - the knowledge-graph tools of the reference MCP memory server
//!   (`@modelcontextprotocol/server-memory`), with its names, argument shapes and result shapes,
//!   so engram drops in where that server is used. Every tool also takes an optional `user_id`.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// Every tool engram's MCP server offers, in the order it lists them.
pub fn all() -> Vec<Tool> {
    let mut tools = memory_tools();
    tools.extend(graph_tools());
    tools
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tool(name: &'static str, title: &str, description: &'static str, input: Value) -> Tool {
    Tool::new(name, description, object(input)).with_title(title)
}

fn hints(read_only: bool, destructive: bool, idempotent: bool) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent)
        .open_world(false)
}

fn user_id_property() -> Value {
    json!({
        "type": "string",
        "description": "Whose memory to use. Leave it out to use the user this connection is for."
    })
}

fn kinds_property() -> Value {
    json!({
        "type": "array",
        "items": {"type": "string", "enum": ["episode", "fact", "preference", "note", "summary"]},
        "description": "Only memories of these kinds."
    })
}

fn memory_tools() -> Vec<Tool> {
    vec![
        tool(
            "memory_add",
            "Remember",
            "Store one thing worth remembering about the user or their work, for later \
             conversations: a fact (\"Alice is a backend developer\"), a preference (\"prefers \
             tabs over spaces in Python\"), an event (\"deployed v2 on 2024-05-08\") or a note. \
             Write one self-contained sentence that makes sense without this conversation; name \
             people and things instead of saying \"he\" or \"it\". Storing the same text twice is \
             harmless: the answer then gives the id already stored.",
            json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "What to remember, as one self-contained sentence."},
                    "kind": {"type": "string", "enum": ["episode", "fact", "preference", "note", "summary"], "description": "fact: true about the user or world; preference: how the user likes things; episode (default): something that happened; note: a note to self; summary: a condensed account."},
                    "category": {"type": "string", "description": "Optional label such as user_info, decision, task_result."},
                    "importance": {"type": "integer", "minimum": 1, "maximum": 5, "description": "1 trivia … 5 essential (default 3)."},
                    "metadata": {"type": "object", "description": "Optional extra fields, stored as given."},
                    "agent_id": {"type": "string", "description": "Keep it for this agent only."},
                    "session_id": {"type": "string", "description": "The conversation it came from."},
                    "user_id": user_id_property()
                },
                "required": ["text"],
                "additionalProperties": false
            }),
        )
        .annotate(hints(false, false, true)),
        tool(
            "memory_search",
            "Search memories",
            "Find what is remembered about the user, best match first. Call it before answering \
             anything that may depend on the user's facts, preferences or past events. Query \
             with the key words of what you need (\"python indentation preference\"), not a whole \
             message. Each hit has the memory's id, text, kind, time and score.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Key words of what to find."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Most hits to return (default 10)."},
                    "kinds": kinds_property(),
                    "categories": {"type": "array", "items": {"type": "string"}, "description": "Only memories with these categories."},
                    "since": {"type": "string", "description": "Only memories from this time on: RFC 3339, a date (2024-05-08) or an age (7d)."},
                    "until": {"type": "string", "description": "Only memories from before this time."},
                    "agent_id": {"type": "string"},
                    "session_id": {"type": "string"},
                    "include_closed": {"type": "boolean", "description": "Also return invalidated and expired memories (default false)."},
                    "user_id": user_id_property()
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        )
        .annotate(hints(true, false, true)),
        tool(
            "memory_get",
            "Read a memory",
            "Read one memory in full (every field) by its id. Ids come from memory_search and \
             memory_list.",
            json!({
                "type": "object",
                "properties": {"id": {"type": "string", "description": "The memory's id (a UUID)."}},
                "required": ["id"],
                "additionalProperties": false
            }),
        )
        .annotate(hints(true, false, true)),
        tool(
            "memory_list",
            "List memories",
            "List the user's memories, newest first, one page at a time. Use it to review what \
             is stored; to find something specific, memory_search is better. The answer gives \
             next_offset while more pages remain.",
            json!({
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Memories per page (default 20)."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Memories to skip (next_offset of the previous page)."},
                    "kinds": kinds_property(),
                    "categories": {"type": "array", "items": {"type": "string"}},
                    "agent_id": {"type": "string"},
                    "session_id": {"type": "string"},
                    "include_closed": {"type": "boolean", "description": "Also list invalidated and expired memories."},
                    "user_id": user_id_property()
                },
                "additionalProperties": false
            }),
        )
        .annotate(hints(true, false, true)),
        tool(
            "memory_update",
            "Correct a memory",
            "Correct or refine a stored memory when it changed or was wrong (\"Alice moved from \
             Paris to Berlin\"): give its id and the new text, importance or category. The old \
             text stays in the memory's history. To forget a memory instead, use memory_delete.",
            json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The memory's id."},
                    "text": {"type": "string", "description": "The new text, one self-contained sentence."},
                    "importance": {"type": "integer", "minimum": 1, "maximum": 5},
                    "category": {"type": "string"}
                },
                "required": ["id"],
                "additionalProperties": false
            }),
        )
        .annotate(hints(false, true, true)),
        tool(
            "memory_delete",
            "Forget a memory",
            "Delete a memory that is wrong or that the user asked you to forget. This cannot be \
             undone, though the memory's history records that it was deleted.",
            json!({
                "type": "object",
                "properties": {"id": {"type": "string", "description": "The memory's id."}},
                "required": ["id"],
                "additionalProperties": false
            }),
        )
        .annotate(hints(false, true, true)),
        tool(
            "memory_history",
            "Memory history",
            "Show how one memory changed over time: when it was added, updated, invalidated or \
             deleted, by whom, with the text before and after each change. Works for deleted \
             memories too.",
            json!({
                "type": "object",
                "properties": {"id": {"type": "string", "description": "The memory's id."}},
                "required": ["id"],
                "additionalProperties": false
            }),
        )
        .annotate(hints(true, false, true)),
    ]
}

fn entity_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The name of the entity"},
            "entityType": {"type": "string", "description": "The type of the entity"},
            "observations": {"type": "array", "items": {"type": "string"}, "description": "An array of observation contents associated with the entity"}
        },
        "required": ["name", "entityType", "observations"]
    })
}

fn relation_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "from": {"type": "string", "description": "The name of the entity where the relation starts"},
            "to": {"type": "string", "description": "The name of the entity where the relation ends"},
            "relationType": {"type": "string", "description": "The type of the relation"}
        },
        "required": ["from", "to", "relationType"]
    })
}

fn graph_output() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "properties": {
            "entities": {"type": "array", "items": entity_schema()},
            "relations": {"type": "array", "items": relation_schema()}
        },
        "required": ["entities", "relations"]
    }))
}

fn success_output() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "properties": {"success": {"type": "boolean"}, "message": {"type": "string"}},
        "required": ["success", "message"]
    }))
}

fn graph_tools() -> Vec<Tool> {
    vec![
        tool(
            "create_entities",
            "Create Entities",
            "Create multiple new entities in the knowledge graph",
            json!({
                "type": "object",
                "properties": {"entities": {"type": "array", "items": entity_schema()}, "user_id": user_id_property()},
                "required": ["entities"]
            }),
        )
        .with_raw_output_schema(object(json!({
            "type": "object",
            "properties": {"entities": {"type": "array", "items": entity_schema()}},
            "required": ["entities"]
        })))
        .annotate(hints(false, false, false)),
        tool(
            "create_relations",
            "Create Relations",
            "Create multiple new relations between entities in the knowledge graph. Relations should be in active voice",
            json!({
                "type": "object",
                "properties": {"relations": {"type": "array", "items": relation_schema()}, "user_id": user_id_property()},
                "required": ["relations"]
            }),
        )
        .with_raw_output_schema(object(json!({
            "type": "object",
            "properties": {"relations": {"type": "array", "items": relation_schema()}},
            "required": ["relations"]
        })))
        .annotate(hints(false, false, false)),
        tool(
            "add_observations",
            "Add Observations",
            "Add new observations to existing entities in the knowledge graph",
            json!({
                "type": "object",
                "properties": {
                    "observations": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "entityName": {"type": "string", "description": "The name of the entity to add the observations to"},
                            "contents": {"type": "array", "items": {"type": "string"}, "description": "An array of observation contents to add"}
                        },
                        "required": ["entityName", "contents"]
                    }},
                    "user_id": user_id_property()
                },
                "required": ["observations"]
            }),
        )
        .with_raw_output_schema(object(json!({
            "type": "object",
            "properties": {"results": {"type": "array", "items": {
                "type": "object",
                "properties": {"entityName": {"type": "string"}, "addedObservations": {"type": "array", "items": {"type": "string"}}},
                "required": ["entityName", "addedObservations"]
            }}},
            "required": ["results"]
        })))
        .annotate(hints(false, false, false)),
        tool(
            "delete_entities",
            "Delete Entities",
            "Delete multiple entities and their associated relations from the knowledge graph",
            json!({
                "type": "object",
                "properties": {
                    "entityNames": {"type": "array", "items": {"type": "string"}, "description": "An array of entity names to delete"},
                    "user_id": user_id_property()
                },
                "required": ["entityNames"]
            }),
        )
        .with_raw_output_schema(success_output())
        .annotate(hints(false, true, true)),
        tool(
            "delete_observations",
            "Delete Observations",
            "Delete specific observations from entities in the knowledge graph",
            json!({
                "type": "object",
                "properties": {
                    "deletions": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "entityName": {"type": "string", "description": "The name of the entity containing the observations"},
                            "observations": {"type": "array", "items": {"type": "string"}, "description": "An array of observations to delete"}
                        },
                        "required": ["entityName", "observations"]
                    }},
                    "user_id": user_id_property()
                },
                "required": ["deletions"]
            }),
        )
        .with_raw_output_schema(success_output())
        .annotate(hints(false, true, true)),
        tool(
            "delete_relations",
            "Delete Relations",
            "Delete multiple relations from the knowledge graph",
            json!({
                "type": "object",
                "properties": {
                    "relations": {"type": "array", "items": relation_schema(), "description": "An array of relations to delete"},
                    "user_id": user_id_property()
                },
                "required": ["relations"]
            }),
        )
        .with_raw_output_schema(success_output())
        .annotate(hints(false, true, true)),
        tool(
            "read_graph",
            "Read Graph",
            "Read the entire knowledge graph",
            json!({"type": "object", "properties": {"user_id": user_id_property()}}),
        )
        .with_raw_output_schema(graph_output())
        .annotate(hints(true, false, true)),
        tool(
            "search_nodes",
            "Search Nodes",
            "Search for nodes in the knowledge graph based on a query. Entities are ranked by how \
             well their names, types and observations match (best first), and each comes with \
             the observations that matched; use open_nodes for complete entities.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "The search query to match against entity names, types, and observation content"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Most entities to return (default 10)."},
                    "user_id": user_id_property()
                },
                "required": ["query"]
            }),
        )
        .with_raw_output_schema(graph_output())
        .annotate(hints(true, false, true)),
        tool(
            "open_nodes",
            "Open Nodes",
            "Open specific nodes in the knowledge graph by their names",
            json!({
                "type": "object",
                "properties": {
                    "names": {"type": "array", "items": {"type": "string"}, "description": "An array of entity names to retrieve"},
                    "user_id": user_id_property()
                },
                "required": ["names"]
            }),
        )
        .with_raw_output_schema(graph_output())
        .annotate(hints(true, false, true)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_descriptions_present() {
        let tools = all();
        let mut names = std::collections::HashSet::new();
        for tool in &tools {
            assert!(names.insert(tool.name.to_string()), "{}", tool.name);
            assert!(tool.description.as_ref().is_some_and(|d| d.len() > 20));
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
        }
        for name in [
            "create_entities",
            "create_relations",
            "add_observations",
            "delete_entities",
            "delete_observations",
            "delete_relations",
            "read_graph",
            "search_nodes",
            "open_nodes",
        ] {
            assert!(names.contains(name), "{name}");
        }
        assert_eq!(tools.len(), 16);
    }
}
