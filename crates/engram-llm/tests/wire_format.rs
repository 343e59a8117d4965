//! The exact request bodies each provider sends for a fixed conversation with tools. These are
//! product: a change here changes what every server receives, so it must be deliberate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use engram_core::llm::{AssistantMessage, ChatRequest, Message, ToolCall, ToolResultMessage};
use engram_core::tool::ToolSpec;
use engram_llm::scripted::{ScriptedServer, Turn};
use engram_llm::{AnthropicClient, OpenAiClient, Provider};
use serde_json::json;

/// A conversation with everything in it: two system messages, a tool loop with parallel calls
/// (one result an error, one call with malformed arguments), reasoning, and a follow-up.
fn conversation() -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system("You are engram's agent. Record key facts with record_note."),
            Message::user("What is in notes.txt and the docs folder?"),
            Message::Assistant(AssistantMessage {
                content: "I'll look at both.".into(),
                reasoning: Some("Two independent lookups; do them in parallel.".into()),
                reasoning_signature: Some("sig-abc".into()),
                tool_calls: vec![
                    ToolCall::new("call_1", "read_file", r#"{"path":"notes.txt"}"#),
                    ToolCall::new("call_2", "list_dir", "{'path': 'docs',"),
                ],
            }),
            Message::tool_result("call_1", "1\tbuy milk\n2\tcall Ana"),
            Message::Tool(ToolResultMessage {
                tool_call_id: "call_2".into(),
                content: "Error: no such directory: docs".into(),
                is_error: true,
            }),
            Message::system("Summary of earlier conversation: the user keeps notes in notes.txt."),
            Message::assistant("notes.txt says: buy milk, call Ana. There is no docs folder."),
            Message::user("Thanks. Remember that I like short answers."),
        ],
        tools: vec![
            ToolSpec {
                name: "read_file".into(),
                description: "Reads a text file, numbering its lines.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File path inside the workspace"},
                        "offset": {"type": "integer", "minimum": 1},
                        "limit": {"type": "integer", "minimum": 1}
                    },
                    "required": ["path"]
                }),
            },
            ToolSpec {
                name: "list_dir".into(),
                description: "Lists a directory.".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            },
        ],
        max_tokens: Some(1024),
        temperature: Some(0.2),
        response_format: Default::default(),
    }
}

#[tokio::test]
async fn openai_request_bodies() {
    let server = ScriptedServer::start(vec![Turn::text("ok"), Turn::text("ok")])
        .await
        .unwrap();
    let client = OpenAiClient::new(server.client_config(Provider::OpenAi)).unwrap();
    let request = conversation();
    insta::assert_json_snapshot!("openai_streaming", client.request_body(&request, true));
    insta::assert_json_snapshot!("openai_whole", client.request_body(&request, false));

    // The snapshot is what actually goes over the wire.
    use engram_core::llm::ChatModel;
    client.chat(&request).await.unwrap();
    client.chat_stream(&request, &mut |_| {}).await.unwrap();
    assert_eq!(
        server.request(1).unwrap().body,
        client.request_body(&request, false)
    );
    assert_eq!(
        server.request(2).unwrap().body,
        client.request_body(&request, true)
    );
    server.check_tool_pairing().unwrap();
}

#[tokio::test]
async fn anthropic_request_bodies() {
    let server = ScriptedServer::start(vec![Turn::text("ok"), Turn::text("ok")])
        .await
        .unwrap();
    let client = AnthropicClient::new(server.client_config(Provider::Anthropic)).unwrap();
    let request = conversation();
    insta::assert_json_snapshot!("anthropic_streaming", client.request_body(&request, true));

    use engram_core::llm::ChatModel;
    client.chat(&request).await.unwrap();
    client.chat_stream(&request, &mut |_| {}).await.unwrap();
    assert_eq!(
        server.request(1).unwrap().body,
        client.request_body(&request, false)
    );
    assert_eq!(
        server.request(2).unwrap().body,
        client.request_body(&request, true)
    );
    server.check_tool_pairing().unwrap();
}

#[tokio::test]
async fn minimal_requests_carry_only_what_is_set() {
    let server = ScriptedServer::start(vec![]).await.unwrap();
    let request = ChatRequest::new(vec![Message::user("hi")]);
    let openai = OpenAiClient::new(server.client_config(Provider::OpenAi)).unwrap();
    insta::assert_json_snapshot!("openai_minimal", openai.request_body(&request, false));
    let anthropic = AnthropicClient::new(server.client_config(Provider::Anthropic)).unwrap();
    insta::assert_json_snapshot!("anthropic_minimal", anthropic.request_body(&request, false));
}
