//! The OpenAPI 3.1 description served at `/openapi.json`, written by hand and checked against
//! the routes by the tests (every path and method here is served, and every error code is
//! listed).

use std::sync::OnceLock;

use serde_json::{Value, json};

use engram_core::memory::{Kind, MAX_ID_BYTES, MAX_TEXT_BYTES};

use crate::error::ErrorCode;

/// The document, serialised once.
pub fn document_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| serde_json::to_string_pretty(&document()).unwrap_or_else(|_| "{}".into()))
}

fn error_responses(codes: &[u16]) -> Value {
    let mut responses = serde_json::Map::new();
    for code in codes {
        let description = match code {
            400 => "Invalid JSON (`invalid_json`) or request (`invalid_request`).",
            401 => "No token, or a wrong or revoked one (`unauthorized`).",
            403 => "The token may not touch this user (`forbidden`).",
            404 => "No such memory or session, or one the token may not see (`not_found`).",
            409 => "Duplicate text (`duplicate`) or already invalidated (`already_invalidated`).",
            413 => "The body is too large (`payload_too_large`).",
            415 => "The body is not application/json (`unsupported_media_type`).",
            501 => {
                "Extraction (`infer: true`) needs a language model and the server has none (`not_implemented`)."
            }
            502 => "The language model behind extraction failed (`model_failed`).",
            503 => "The database stayed locked (`busy`); retry.",
            _ => "An error.",
        };
        responses.insert(
            code.to_string(),
            json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}),
        );
    }
    Value::Object(responses)
}

fn with_errors(mut ok: Value, codes: &[u16]) -> Value {
    if let (Some(map), Value::Object(errors)) = (ok.as_object_mut(), error_responses(codes)) {
        map.extend(errors);
    }
    ok
}

fn json_body(schema: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn json_ok(description: &str, schema: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn query(name: &str, description: &str, required: bool, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": required, "description": description, "schema": schema})
}

/// Characters an id may not hold: Unicode's control characters (what `char::is_control` sees).
const CONTROL: &str = "\\u0000-\\u001f\\u007f-\\u009f";

/// A user, agent or session id as the server takes it: not blank, no control characters, at
/// most [`MAX_ID_BYTES`] bytes of UTF-8 (JSON Schema counts characters, so the bound is exact for
/// ASCII and the description says bytes).
pub(crate) fn id_schema(description: &str) -> Value {
    json!({
        "type": "string",
        "description": format!("{description} At most {MAX_ID_BYTES} bytes of UTF-8, not blank, no control characters."),
        "minLength": 1,
        "maxLength": MAX_ID_BYTES,
        "pattern": format!("^[^{CONTROL}]*[^\\s{CONTROL}][^{CONTROL}]*$"),
    })
}

/// A time as the server reads it (engram_core::time::parse_time, in UTC): RFC 3339, a date,
/// now/today/yesterday, or an age such as 7d.
fn time_schema(description: &str) -> Value {
    json!({"description": description, "anyOf": [
        {"type": "string", "format": "date-time"},
        {"type": "string", "format": "date"},
        {"type": "string", "enum": ["now", "today", "yesterday"]},
        {"type": "string", "pattern": "^[0-9]{1,5}[smhdw]$", "description": "An age before now."}
    ]})
}

/// Text that holds something besides white space and no NUL character (a memory's text, a
/// message), of at most `max_bytes` bytes of UTF-8 (the schema's maxLength counts characters:
/// exact for ASCII).
fn words_schema(description: &str, max_bytes: usize) -> Value {
    json!({"type": "string", "description": description, "pattern": "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$", "maxLength": max_bytes})
}

/// Free text without a NUL character (a category).
fn free_text_schema(description: &str) -> Value {
    json!({"type": "string", "description": description, "pattern": "^[^\\u0000]*$"})
}

/// Kinds separated by commas, in any case, empty pieces ignored (as `QueryPairs::list` reads them).
fn kind_list_pattern() -> String {
    let kinds: Vec<String> = Kind::ALL
        .iter()
        .map(|kind| {
            kind.as_str()
                .chars()
                .map(|c| format!("[{}{}]", c, c.to_ascii_uppercase()))
                .collect()
        })
        .collect();
    let kind = format!("(?:{})", kinds.join("|"));
    format!("^\\s*(?:{kind}\\s*)?(?:,\\s*(?:{kind}\\s*)?)*$")
}

fn filter_parameters() -> Vec<Value> {
    vec![
        query(
            "user_id",
            "Whose memories (required).",
            true,
            id_schema("A user id."),
        ),
        query(
            "agent_id",
            "Only this agent's memories.",
            false,
            json!({"type": "string"}),
        ),
        query(
            "session_id",
            "Only this session's memories.",
            false,
            json!({"type": "string"}),
        ),
        query(
            "kind",
            "Only these kinds (repeat or comma-separate).",
            false,
            json!({"type": "string", "pattern": kind_list_pattern()}),
        ),
        query(
            "category",
            "Only these categories (repeat or comma-separate).",
            false,
            json!({"type": "string"}),
        ),
        query(
            "since",
            "Created at or after (RFC 3339, a date, or an age such as 7d).",
            false,
            time_schema("A time."),
        ),
        query("until", "Created before.", false, time_schema("A time.")),
        query(
            "min_importance",
            "At least this important (1-5).",
            false,
            json!({"type": "integer", "minimum": 1, "maximum": 5}),
        ),
        query(
            "where",
            "Metadata condition key=value (repeatable; all must hold).",
            false,
            json!({"type": "string", "pattern": "^[^=\"\\\\]*[^\\s=\"\\\\][^=\"\\\\]*="}),
        ),
        query(
            "include_closed",
            "Include invalidated and expired memories.",
            false,
            json!({"type": "boolean"}),
        ),
    ]
}

fn page_parameters() -> Vec<Value> {
    vec![
        query(
            "limit",
            "Memories per page (1-1000, default 20).",
            false,
            json!({"type": "integer", "minimum": 1, "maximum": 1000}),
        ),
        query(
            "offset",
            "Memories to skip.",
            false,
            json!({"type": "integer", "minimum": 0, "maximum": usize::MAX}),
        ),
        query(
            "cursor",
            "Where the previous page ended (`next_cursor`); instead of offset.",
            false,
            json!({"type": "string", "pattern": "^o[0-9a-f]{1,15}$"}),
        ),
    ]
}

fn id_parameter() -> Value {
    json!({"name": "id", "in": "path", "required": true, "description": "The memory's id (a UUID).", "schema": {"type": "string", "format": "uuid"}})
}

fn error_code_description() -> String {
    let mut text = String::from("Stable error codes:\n");
    for code in ErrorCode::ALL {
        text.push_str(&format!(
            "\n- `{}` ({}): {}",
            code.as_str(),
            code.status().as_u16(),
            code.meaning()
        ));
    }
    text
}

/// The document.
pub fn document() -> Value {
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    let mut list_params = filter_parameters();
    list_params.extend(page_parameters());
    let mut session_params = vec![
        json!({"name": "session_id", "in": "path", "required": true, "schema": {"type": "string"}}),
        query(
            "user_id",
            "Whose session (required).",
            true,
            id_schema("A user id."),
        ),
        query(
            "include_closed",
            "Include invalidated and expired memories.",
            false,
            json!({"type": "boolean"}),
        ),
    ];
    session_params.extend(page_parameters());
    let memory_fields = json!({
        "user_id": id_schema("Whose memory (required)."),
        "agent_id": id_schema("The agent it belongs to."),
        "session_id": id_schema("The session it came from."),
        "kind": {"$ref": "#/components/schemas/Kind"},
        "category": free_text_schema("Free text such as user_info, decision; no NUL character."),
        "importance": {"type": "integer", "minimum": 1, "maximum": 5, "default": 3},
        "metadata": {"type": "object", "description": "Stored exactly as given."},
        "created_at": time_schema("When it happened (RFC 3339, a date, or an age); default now."),
        "expires_at": time_schema("Forget it on its own at this time.")
    });
    let mut new_memory = memory_fields.clone();
    if let Some(map) = new_memory.as_object_mut() {
        map.insert(
            "text".into(),
            words_schema("What to remember (at most 64 KiB).", MAX_TEXT_BYTES),
        );
    }
    let mut add_request = memory_fields;
    if let Some(map) = add_request.as_object_mut() {
        map.insert(
            "text".into(),
            words_schema("One memory. Give text or messages.", MAX_TEXT_BYTES),
        );
        map.insert("messages".into(), json!({
            "type": "array",
            "minItems": 1,
            "maxItems": 10000,
            "description": "A conversation. With infer: false each message is stored verbatim as a memory (kind episode unless given, metadata.role set).",
            "items": {"type": "object", "additionalProperties": false, "required": ["role", "content"], "properties": {
                "role": {"type": "string", "enum": ["user", "assistant", "system", "tool"]},
                "content": words_schema("What was said.", MAX_TEXT_BYTES)
            }}
        }));
        map.insert("infer".into(), json!({"type": "boolean", "default": true, "description": "Extract episodes, facts and preferences from the messages with the configured language model and merge them with what is known (the answer is {\"extraction\": report}); false stores each message verbatim. Without a model, true answers 501 not_implemented."}));
    }

    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "engram",
            "version": env!("CARGO_PKG_VERSION"),
            "description": format!(
                "Long-term memory for LLM agents. Every memory belongs to one user; a token may touch only the users it is bound to, and a memory of another user is answered exactly as a missing one (404 not_found). Errors read {{\"error\": {{\"code\", \"message\"}}}}.\n\n{}\n\nThe MCP server is served at /mcp (streamable HTTP) behind the same tokens.",
                error_code_description()
            )
        },
        "servers": [{"url": "http://127.0.0.1:8420"}],
        "security": [{"bearer": []}],
        "paths": paths(list_params, session_params),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "A token from `engram token create` or `[server] tokens` in config.toml. Not needed while no token exists and the server listens on loopback."}},
            "schemas": schemas(codes, new_memory, add_request)
        }
    })
}

fn paths(list_params: Vec<Value>, session_params: Vec<Value>) -> Value {
    let mut paths = serde_json::Map::new();
    paths.insert(
        "/health".into(),
        json!({"get": {
            "summary": "Liveness and database check.", "operationId": "health", "security": [],
            "responses": with_errors(json!({"200": json_ok("Healthy.", "Health")}), &[503])
        }}),
    );
    paths.insert("/openapi.json".into(), json!({"get": {
                "summary": "This document.", "operationId": "openapi", "security": [],
                "responses": {"200": {"description": "The OpenAPI document.", "content": {"application/json": {"schema": {"type": "object"}}}}}
            }}));
    paths.insert("/v1/memories".into(), json!({
                "post": {
                    "summary": "Add one memory (text) or a conversation (messages).",
                    "operationId": "addMemory",
                    "requestBody": json_body("AddRequest"),
                    "responses": with_errors(json!({
                        "201": json_ok("Added.", "AddResult"),
                        "200": json_ok("Already stored (duplicate), or messages of which none were new.", "AddResult")
                    }), &[400, 401, 403, 413, 415, 501, 502, 503])
                },
                "get": {
                    "summary": "List one user's memories, newest first, a page at a time.",
                    "operationId": "listMemories",
                    "parameters": list_params,
                    "responses": with_errors(json!({"200": json_ok("A page.", "MemoryPage")}), &[400, 401, 403, 503])
                }
            }));
    paths.insert("/v1/memories/batch".into(), json!({"post": {
                "summary": "Add many memories in one transaction; each item gets its own outcome.",
                "operationId": "addMemories",
                "requestBody": json_body("BatchRequest"),
                "responses": with_errors(json!({"200": json_ok("Outcomes, in order.", "BatchResult")}), &[400, 401, 403, 413, 415, 503])
            }}));
    paths.insert("/v1/memories/search".into(), json!({"post": {
                "summary": "Ranked search in one user's memories (the filters of `engram search`).",
                "operationId": "searchMemories",
                "requestBody": json_body("SearchRequest"),
                "responses": with_errors(json!({"200": json_ok("Hits, best first.", "SearchResult")}), &[400, 401, 403, 413, 415, 503])
            }}));
    paths.insert("/v1/memories/{id}".into(), json!({
                "parameters": [id_parameter()],
                "get": {
                    "summary": "One memory.", "operationId": "getMemory",
                    "responses": with_errors(json!({"200": json_ok("The memory.", "Memory")}), &[400, 401, 404, 503])
                },
                "patch": {
                    "summary": "Change a memory; the old text stays in its history.", "operationId": "updateMemory",
                    "requestBody": json_body("UpdateRequest"),
                    "responses": with_errors(json!({"200": json_ok("The changed memory.", "Memory")}), &[400, 401, 404, 409, 413, 415, 503])
                },
                "delete": {
                    "summary": "Delete a memory (its history records the deletion).", "operationId": "deleteMemory",
                    "responses": with_errors(json!({"200": json_ok("Deleted.", "Deleted")}), &[400, 401, 404, 503])
                }
            }));
    paths.insert("/v1/memories/{id}/invalidate".into(), json!({"post": {
                "parameters": [id_parameter()],
                "summary": "Close a memory: kept and audited, hidden from search.", "operationId": "invalidateMemory",
                "responses": with_errors(json!({"200": json_ok("The closed memory.", "Memory")}), &[400, 401, 404, 409, 503])
            }}));
    paths.insert("/v1/memories/{id}/history".into(), json!({"get": {
                "parameters": [id_parameter()],
                "summary": "A memory's audit trail, oldest first (deleted memories too).", "operationId": "memoryHistory",
                "responses": with_errors(json!({"200": json_ok("The events.", "History")}), &[400, 401, 404, 503])
            }}));
    paths.insert("/v1/export".into(), json!({"get": {
                "summary": "Every memory of a user as JSONL (the format `engram import` reads), streamed.",
                "operationId": "exportMemories",
                "parameters": [query("user_id", "Whose memories (required).", true, id_schema("A user id."))],
                "responses": with_errors(json!({"200": {"description": "One Memory per line.", "content": {"application/x-ndjson": {"schema": {"$ref": "#/components/schemas/Memory"}}}}}), &[400, 401, 403, 503])
            }}));
    paths.insert("/v1/sessions".into(), json!({"get": {
                "summary": "A user's sessions, most recent first: the agent's conversations kept for that user (transcript: true) and the session ids their memories carry.",
                "operationId": "listSessions",
                "parameters": [query("user_id", "Whose sessions (required).", true, id_schema("A user id."))],
                "responses": with_errors(json!({"200": json_ok("The sessions.", "SessionList")}), &[400, 401, 403, 503])
            }}));
    paths.insert("/v1/sessions/{session_id}".into(), json!({"get": {
                "summary": "One session's memories, newest first, a page at a time.",
                "operationId": "getSession",
                "parameters": session_params,
                "responses": with_errors(json!({"200": json_ok("A page of the session's memories.", "MemoryPage")}), &[400, 401, 403, 404, 503])
            }}));
    inspector_paths(&mut paths);
    Value::Object(paths)
}

fn schemas(codes: Vec<&str>, new_memory: Value, add_request: Value) -> Value {
    let mut schemas = serde_json::Map::new();
    schemas.insert("Error".into(), json!({"type": "object", "required": ["error"], "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string", "enum": codes},
                    "message": {"type": "string"}
                }}}}));
    schemas.insert(
        "Kind".into(),
        json!({"type": "string", "enum": ["episode", "fact", "preference", "note", "summary"]}),
    );
    schemas.insert("Memory".into(), json!({"type": "object", "required": ["id", "user_id", "kind", "text", "importance", "metadata", "created_at", "updated_at", "valid_from", "source", "content_hash"], "properties": {
                    "id": {"type": "string", "format": "uuid"},
                    "user_id": {"type": "string"}, "agent_id": {"type": "string"}, "session_id": {"type": "string"},
                    "kind": {"$ref": "#/components/schemas/Kind"},
                    "text": {"type": "string"}, "category": {"type": "string"},
                    "importance": {"type": "integer", "minimum": 1, "maximum": 5},
                    "metadata": {"type": "object"},
                    "created_at": {"type": "string", "format": "date-time"},
                    "updated_at": {"type": "string", "format": "date-time"},
                    "valid_from": {"type": "string", "format": "date-time"},
                    "valid_to": {"type": "string", "format": "date-time", "description": "Set once invalidated."},
                    "expires_at": {"type": "string", "format": "date-time"},
                    "source": {"type": "string"}, "content_hash": {"type": "string"}
                }}));
    schemas.insert("NewMemory".into(), json!({"type": "object", "additionalProperties": false, "required": ["user_id", "text"], "properties": new_memory}));
    schemas.insert("AddRequest".into(), json!({"type": "object", "additionalProperties": false, "required": ["user_id"], "properties": add_request,
                    "oneOf": [
                        {"required": ["text"], "not": {"anyOf": [{"required": ["messages"]}, {"required": ["infer"]}]}, "description": "One memory, stored as given (infer applies to messages only)."},
                        {"required": ["messages"], "not": {"required": ["text"]}, "description": "A conversation."}
                    ]}));
    schemas.insert("Outcome".into(), json!({"type": "object", "required": ["status"], "properties": {
                    "status": {"type": "string", "enum": ["added", "duplicate", "rejected"]},
                    "id": {"type": "string", "format": "uuid"},
                    "memory": {"$ref": "#/components/schemas/Memory"},
                    "error": {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}
                }}));
    schemas.insert("AddResult".into(), json!({"oneOf": [
                    {"$ref": "#/components/schemas/Outcome"},
                    {"type": "object", "required": ["results"], "properties": {"results": {"type": "array", "items": {"$ref": "#/components/schemas/Outcome"}}}},
                    {"type": "object", "required": ["extraction"], "description": "messages with infer: true: what extraction did.", "properties": {"extraction": {"type": "object"}}}
                ]}));
    schemas.insert("BatchRequest".into(), json!({"type": "object", "additionalProperties": false, "required": ["memories"], "properties": {
                    "memories": {"type": "array", "maxItems": 10000, "items": {"$ref": "#/components/schemas/NewMemory"}}
                }}));
    schemas.insert("BatchResult".into(), json!({"type": "object", "required": ["added", "duplicates", "rejected", "results"], "properties": {
                    "added": {"type": "integer"}, "duplicates": {"type": "integer"}, "rejected": {"type": "integer"},
                    "results": {"type": "array", "items": {"$ref": "#/components/schemas/Outcome"}}
                }}));
    schemas.insert("SearchRequest".into(), json!({"type": "object", "additionalProperties": false, "required": ["user_id", "query"], "properties": {
                    "user_id": id_schema("Whose memories."), "query": {"type": "string", "maxLength": MAX_TEXT_BYTES, "pattern": "[^\\W_]", "description": "What to look for: at least one word (a query of stop words only, such as 'the', is refused with invalid_request)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
                    "agent_id": {"type": "string"}, "session_id": {"type": "string"},
                    "kinds": {"type": "array", "items": {"$ref": "#/components/schemas/Kind"}},
                    "categories": {"type": "array", "items": {"type": "string"}},
                    "since": time_schema("Created at or after."), "until": time_schema("Created before."),
                    "min_importance": {"type": "integer", "minimum": 1, "maximum": 5},
                    "where": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}, "propertyNames": {"pattern": "^[^\"\\\\]*$", "description": "No quotes or backslashes."}, "description": "Metadata equalities: {\"key\": \"value\"} (strings, numbers, booleans)."},
                    "include_closed": {"type": "boolean", "default": false},
                    "explain": {"type": "boolean", "default": false, "description": "Add how each score came about."}
                }}));
    schemas.insert("Hit".into(), json!({"allOf": [{"$ref": "#/components/schemas/Memory"}, {"type": "object", "required": ["score"], "properties": {
                    "score": {"type": "number"},
                    "explain": {"type": "object", "description": "With explain: true.", "properties": {
                        "profile": {"type": "string"},
                        "bm25": {"type": "number"}, "lexical_rank": {"type": "integer"},
                        "similarity": {"type": "number"}, "dense_rank": {"type": "integer"},
                        "relevance": {"type": "number"}, "recency": {"type": "number"}, "importance": {"type": "number"},
                        "time_match": {"type": "string"},
                        "time_mention": {"type": "boolean", "description": "The query asks when, and this memory says when."},
                        "from_neighbours": {"type": "number", "description": "Relevance gained from the adjacent turn of its conversation."},
                        "contributions": {"type": "object", "description": "The score taken apart: each part weighted by the ranking profile; they sum to the score.", "properties": {
                            "lexical": {"type": "number"}, "dense": {"type": "number"}, "recency": {"type": "number"},
                            "importance": {"type": "number"}, "time_match": {"type": "number"},
                            "time_mention": {"type": "number"}, "neighbours": {"type": "number"}
                        }}
                    }}
                }}]}));
    schemas.insert("SearchResult".into(), json!({"type": "object", "required": ["results"], "properties": {"results": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}}}}));
    schemas.insert("MemoryPage".into(), json!({"type": "object", "required": ["memories", "limit", "offset"], "properties": {
                    "memories": {"type": "array", "items": {"$ref": "#/components/schemas/Memory"}},
                    "limit": {"type": "integer"}, "offset": {"type": "integer"},
                    "next_cursor": {"type": ["string", "null"]},
                    "next": {"type": ["string", "null"], "description": "The URL of the next page; null on the last page."}
                }}));
    schemas.insert(
        "UpdateRequest".into(),
        json!({"type": "object", "additionalProperties": false, "minProperties": 1, "description": "At least one field to change.", "properties": {
            "text": words_schema("The new text.", MAX_TEXT_BYTES),
            "category": {"anyOf": [free_text_schema("The new category (no NUL character)."), {"type": "null"}], "description": "null clears it."},
            "importance": {"type": "integer", "minimum": 1, "maximum": 5},
            "metadata": {"type": "object", "description": "Replaces the metadata."},
            "expires_at": {"anyOf": [time_schema("A time."), {"type": "null"}], "description": "null clears it."}
        }}),
    );
    schemas.insert("Deleted".into(), json!({"type": "object", "required": ["status", "id"], "properties": {"status": {"const": "deleted"}, "id": {"type": "string", "format": "uuid"}}}));
    schemas.insert("History".into(), json!({"type": "object", "required": ["events"], "properties": {"events": {"type": "array", "items": {"type": "object", "properties": {
                    "memory_id": {"type": "string"},
                    "event": {"type": "string", "enum": ["add", "update", "invalidate", "delete"]},
                    "old_text": {"type": ["string", "null"]}, "new_text": {"type": ["string", "null"]},
                    "actor": {"type": "string"}, "at": {"type": "string", "format": "date-time"}
                }}}}}));
    schemas.insert("SessionList".into(), json!({"type": "object", "required": ["sessions"], "properties": {"sessions": {"type": "array", "items": {"type": "object", "properties": {
                    "session_id": {"type": "string"}, "user_id": {"type": "string"}, "memories": {"type": "integer"},
                    "messages": {"type": "integer", "description": "Messages in the transcript (0 without one)."},
                    "transcript": {"type": "boolean", "description": "Whether the agent kept the conversation (see /v1/sessions/{session_id}/messages)."},
                    "first_at": {"type": "string", "format": "date-time"}, "last_at": {"type": "string", "format": "date-time"}
                }}}}}));
    schemas.insert("Health".into(), json!({"type": "object", "required": ["status", "version"], "properties": {"status": {"const": "ok"}, "version": {"type": "string"}}}));
    inspector_schemas(&mut schemas);
    Value::Object(schemas)
}

/// The routes that look at a user's memory as a whole (the inspector at /ui/ uses them).
fn inspector_paths(paths: &mut serde_json::Map<String, Value>) {
    let user = || {
        query(
            "user_id",
            "Whose memory (required).",
            true,
            id_schema("A user id."),
        )
    };
    paths.insert("/v1/users".into(), json!({"get": {
                "summary": "The users this caller may see, with how many memories each has (every user with memories for a local caller without a token; a token's own users otherwise), and how the caller is signed in.",
                "operationId": "listUsers",
                "responses": with_errors(json!({"200": json_ok("The users, by id.", "UserList")}), &[400, 401, 403, 503])
            }}));
    let mut profile_params = vec![user()];
    profile_params.extend(page_parameters());
    paths.insert("/v1/profile".into(), json!({"get": {
                "summary": "A user's current facts and preferences (not the knowledge graph's own memories, categories graph_entity and graph_observation), newest first, a page at a time; each with the earlier values it replaced (closed entries with the same metadata key, compared without case; the newest 10,000 profile memories of each kind are searched for them).",
                "operationId": "getProfile",
                "parameters": profile_params,
                "responses": with_errors(json!({"200": json_ok("A page of the profile.", "ProfilePage")}), &[400, 401, 403, 503])
            }}));
    let mut timeline_params = filter_parameters();
    timeline_params.push(query(
        "tz",
        "The time zone days are cut in: an IANA name such as Europe/Lisbon, or UTC (the default).",
        false,
        json!({"type": "string", "enum": time_zone_names()}),
    ));
    paths.insert("/v1/timeline".into(), json!({"get": {
                "summary": "How many of a user's memories match the filters, per day of creation and kind, oldest day first; days without memories are left out.",
                "operationId": "getTimeline",
                "parameters": timeline_params,
                "responses": with_errors(json!({"200": json_ok("Memories per day.", "Timeline")}), &[400, 401, 403, 503])
            }}));
    paths.insert("/v1/graph".into(), json!({"get": {
                "summary": "A user's knowledge graph (what the MCP graph tools build): every entity with its observations and every relation; with query, the entities that best match it (and the relations touching them), as the search_nodes tool answers.",
                "operationId": "getGraph",
                "parameters": [
                    user(),
                    query("query", "Only the entities that best match these words.", false, json!({"type": "string"})),
                    query("limit", "With query: most entities (1-100, default 10).", false, json!({"type": "integer", "minimum": 1, "maximum": 100}))
                ],
                "responses": with_errors(json!({"200": json_ok("The graph.", "KnowledgeGraph")}), &[400, 401, 403, 503])
            }}));
    let mut transcript_params = vec![
        json!({"name": "session_id", "in": "path", "required": true, "description": "The session key, channel:chat_id.", "schema": {"type": "string"}}),
        user(),
    ];
    transcript_params.extend(page_parameters());
    paths.insert("/v1/sessions/{session_id}/messages".into(), json!({"get": {
                "summary": "One conversation's messages as the agent kept them, oldest first, a page at a time: user and assistant messages, the assistant's tool calls and the tools' results.",
                "operationId": "getSessionMessages",
                "parameters": transcript_params,
                "responses": with_errors(json!({"200": json_ok("A page of the conversation.", "MessagePage")}), &[400, 401, 403, 404, 503])
            }}));
    paths.insert("/v1/import".into(), json!({"post": {
                "summary": "Import a JSONL file of memories (the format /v1/export and engram export write; the lines engram import reads), in transactions of up to 10,000 lines. Bad lines are named and skipped, good ones kept; the same text in the same scope is stored once.",
                "operationId": "importMemories",
                "parameters": [query("user_id", "The user being imported: lines without user_id are theirs, lines naming another user are rejected. Without it, every line names its user.", false, id_schema("A user id."))],
                "requestBody": {"required": true, "content": {"application/x-ndjson": {"schema": {"$ref": "#/components/schemas/ImportLine"}}}},
                "responses": with_errors(json!({"200": json_ok("What happened, with the rejected lines.", "ImportResult")}), &[400, 401, 403, 413, 415, 503])
            }}));
}

/// The time zones `tz` takes: UTC and every name in the time zone database the server reads.
fn time_zone_names() -> Vec<String> {
    let mut names: Vec<String> = jiff::tz::db()
        .available()
        .map(|name| name.as_str().to_string())
        .collect();
    names.push("UTC".into());
    names.sort();
    names.dedup();
    names
}

fn inspector_schemas(schemas: &mut serde_json::Map<String, Value>) {
    schemas.insert("MessagePage".into(), json!({"type": "object", "required": ["session_id", "user_id", "total", "messages", "limit", "offset"], "properties": {
                    "session_id": {"type": "string"}, "user_id": {"type": "string"},
                    "total": {"type": "integer", "description": "Messages in the conversation."},
                    "messages": {"type": "array", "items": {"type": "object", "required": ["index", "timestamp", "role"], "properties": {
                        "index": {"type": "integer"},
                        "timestamp": {"type": "string", "format": "date-time"},
                        "role": {"type": "string", "enum": ["system", "user", "assistant", "tool"]},
                        "content": {"type": "string"},
                        "tool_calls": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "arguments": {"type": "string", "description": "As the model wrote them (normally JSON)."}}}},
                        "tool_call_id": {"type": "string"},
                        "is_error": {"type": "boolean"}
                    }}},
                    "limit": {"type": "integer"}, "offset": {"type": "integer"},
                    "next_cursor": {"type": ["string", "null"]}, "next": {"type": ["string", "null"]}
                }}));
    schemas.insert("UserList".into(), json!({"type": "object", "required": ["access", "users"], "properties": {
                    "access": {"type": "string", "enum": ["local", "token"], "description": "local: no token (loopback, none configured), every user; token: the token's users."},
                    "token_id": {"type": ["string", "null"]},
                    "users": {"type": "array", "items": {"type": "object", "required": ["user_id", "memories"], "properties": {
                        "user_id": {"type": "string"},
                        "memories": {"type": "integer", "description": "Current and closed."}
                    }}}
                }}));
    schemas.insert("ProfileEntry".into(), json!({"allOf": [{"$ref": "#/components/schemas/Memory"}, {"type": "object", "required": ["supersedes"], "properties": {
                    "supersedes": {"type": "array", "description": "Earlier values of the same key, latest closed first.", "items": {"$ref": "#/components/schemas/Memory"}}
                }}]}));
    schemas.insert("ProfilePage".into(), json!({"type": "object", "required": ["user_id", "entries", "total", "limit", "offset"], "properties": {
                    "user_id": {"type": "string"},
                    "entries": {"type": "array", "items": {"$ref": "#/components/schemas/ProfileEntry"}},
                    "total": {"type": "integer", "description": "Current facts and preferences in all."},
                    "limit": {"type": "integer"}, "offset": {"type": "integer"},
                    "next_cursor": {"type": ["string", "null"]},
                    "next": {"type": ["string", "null"]}
                }}));
    schemas.insert("Timeline".into(), json!({"type": "object", "required": ["user_id", "time_zone", "total", "days"], "properties": {
                    "user_id": {"type": "string"}, "time_zone": {"type": "string"}, "total": {"type": "integer"},
                    "days": {"type": "array", "items": {"type": "object", "required": ["day", "total", "kinds"], "properties": {
                        "day": {"type": "string", "format": "date"},
                        "total": {"type": "integer"},
                        "kinds": {"type": "object", "description": "Memories per kind that day.", "additionalProperties": {"type": "integer"}}
                    }}}
                }}));
    schemas.insert("KnowledgeGraph".into(), json!({"type": "object", "required": ["entities", "relations"], "properties": {
                    "entities": {"type": "array", "items": {"type": "object", "required": ["name", "entityType", "observations"], "properties": {
                        "name": {"type": "string"}, "entityType": {"type": "string"},
                        "observations": {"type": "array", "items": {"type": "string"}}
                    }}},
                    "relations": {"type": "array", "items": {"type": "object", "required": ["from", "to", "relationType"], "properties": {
                        "from": {"type": "string"}, "to": {"type": "string"}, "relationType": {"type": "string"}
                    }}}
                }}));
    schemas.insert("ImportLine".into(), json!({"type": "object", "required": ["text"], "description": "One line: the fields of NewMemory plus those export writes (id, updated_at, valid_from, valid_to, source, content_hash); unknown fields are refused.", "properties": {
                    "id": {"type": "string", "format": "uuid"}, "user_id": {"type": "string"}, "text": {"type": "string"},
                    "kind": {"$ref": "#/components/schemas/Kind"}, "valid_to": {"type": "string", "format": "date-time"}
                }}));
    schemas.insert("ImportResult".into(), json!({"type": "object", "required": ["added", "duplicates", "rejected", "errors"], "properties": {
                    "added": {"type": "integer"}, "duplicates": {"type": "integer"}, "rejected": {"type": "integer"},
                    "errors": {"type": "array", "items": {"type": "object", "required": ["line", "error"], "properties": {
                        "line": {"type": "integer", "description": "1-based line number."},
                        "error": {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}
                    }}}
                }}));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reference_resolves() {
        let doc = document();
        let text = serde_json::to_string(&doc).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = piece.split('"').next().unwrap();
            assert!(schemas.contains_key(name), "missing schema {name}");
        }
        assert_eq!(doc["openapi"], "3.1.0");
    }

    #[test]
    fn every_error_code_is_documented() {
        let text = document_text();
        for code in ErrorCode::ALL {
            assert!(text.contains(code.as_str()), "{}", code.as_str());
        }
    }
}
