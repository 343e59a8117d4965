//! Both wire clients end to end against the scripted server (real HTTP on 127.0.0.1), streamed
//! and not: answers, tool calls, reasoning, usage, retries, error classes and timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use engram_core::llm::{
    AssistantMessage, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Message,
    NetworkFailure, StreamEvent, Usage,
};
use engram_core::tool::ToolSpec;
use engram_llm::scripted::{ErrorKind, Quirks, SCRIPTED_KEY, ScriptedCall, ScriptedServer, Turn};
use engram_llm::{ClientConfig, Provider, RetryPolicy};
use serde_json::json;

const PROVIDERS: [Provider; 2] = [Provider::OpenAi, Provider::Anthropic];

/// Every combination of provider and streaming.
fn modes() -> Vec<(Provider, bool)> {
    PROVIDERS
        .iter()
        .flat_map(|&p| [(p, false), (p, true)])
        .collect()
}

async fn server_and_model(
    provider: Provider,
    turns: Vec<Turn>,
    adjust: impl FnOnce(&mut ClientConfig),
) -> (ScriptedServer, Arc<dyn ChatModel>) {
    let server = ScriptedServer::start(turns).await.unwrap();
    let mut config = server.client_config(provider);
    adjust(&mut config);
    let model = engram_llm::build(config).unwrap();
    (server, model)
}

/// Sends `request`, streamed or not; returns the result and the events the sink saw.
async fn ask(
    model: &dyn ChatModel,
    request: &ChatRequest,
    stream: bool,
) -> (Result<ChatResponse, LlmError>, Vec<StreamEvent>) {
    let mut events = Vec::new();
    let result = if stream {
        let mut sink = |e: &StreamEvent| events.push(e.clone());
        model.chat_stream(request, &mut sink).await
    } else {
        model.chat(request).await
    };
    (result, events)
}

fn hello() -> ChatRequest {
    ChatRequest::new(vec![
        Message::system("Be brief."),
        Message::user("Say hello."),
    ])
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        },
        ToolSpec {
            name: "list_dir".into(),
            description: "Lists a directory.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        },
    ]
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn text_answers_with_usage_in_every_mode() {
    for (provider, stream) in modes() {
        let (server, model) = server_and_model(
            provider,
            vec![Turn::text("Hello there, friend!").usage(12, 4)],
            |_| {},
        )
        .await;
        let (result, events) = ask(&*model, &hello(), stream).await;
        let response = result.unwrap();
        assert_eq!(
            response.message.content, "Hello there, friend!",
            "{provider} {stream}"
        );
        assert_eq!(response.finish_reason, FinishReason::Stop);
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 4
            },
            "{provider} stream={stream}"
        );
        if stream {
            let deltas = events
                .iter()
                .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
                .count();
            assert_eq!(deltas, 3, "one delta per word, as scripted");
            assert_eq!(text_of(&events), "Hello there, friend!");
            assert_eq!(events.last(), Some(&StreamEvent::Done(FinishReason::Stop)));
        }
        let request = server.request(1).unwrap();
        assert_eq!(request.is_stream(), stream);
        assert_eq!(request.body["model"], "scripted-model");
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn single_and_parallel_tool_calls_then_results_go_back_paired() {
    for (provider, stream) in modes() {
        let (server, model) = server_and_model(
            provider,
            vec![
                Turn::tool_call("read_file", json!({"path": "a.txt"})).with_text("Let me look."),
                Turn::tool_calls([
                    ScriptedCall::new("read_file", json!({"path": "b.txt"})),
                    ScriptedCall::new("list_dir", json!({"path": "."})),
                ]),
                Turn::text("Both done."),
            ],
            |_| {},
        )
        .await;
        let mut history = vec![Message::user("Read a.txt")];
        let request =
            |history: &Vec<Message>| ChatRequest::new(history.clone()).with_tools(tools());

        let (first, events) = ask(&*model, &request(&history), stream).await;
        let first = first.unwrap();
        assert_eq!(
            first.finish_reason,
            FinishReason::ToolCalls,
            "{provider} {stream}"
        );
        assert_eq!(first.message.content, "Let me look.");
        assert_eq!(first.message.tool_calls.len(), 1);
        let call = &first.message.tool_calls[0];
        assert_eq!(call.name, "read_file");
        assert_eq!(call.parse_arguments().unwrap(), json!({"path": "a.txt"}));
        if stream {
            assert!(events.iter().any(|e| matches!(e, StreamEvent::ToolCallStart { index: 0, name, .. } if name == "read_file")));
            let pieces = events
                .iter()
                .filter(|e| matches!(e, StreamEvent::ToolCallArgumentsDelta { .. }))
                .count();
            assert!(pieces >= 2, "arguments arrive in pieces");
        }
        history.push(Message::Assistant(first.message.clone()));
        history.push(Message::tool_result(&call.id, "contents of a"));

        let (second, _) = ask(&*model, &request(&history), stream).await;
        let second = second.unwrap();
        let calls = &second.message.tool_calls;
        assert_eq!(calls.len(), 2, "parallel calls, {provider} {stream}");
        assert_eq!(
            calls[0].parse_arguments().unwrap(),
            json!({"path": "b.txt"})
        );
        assert_eq!(calls[1].name, "list_dir");
        assert_ne!(calls[0].id, calls[1].id);
        history.push(Message::Assistant(second.message.clone()));
        for call in calls {
            history.push(Message::tool_result(
                &call.id,
                format!("result of {}", call.name),
            ));
        }
        let (third, _) = ask(&*model, &request(&history), stream).await;
        assert_eq!(third.unwrap().message.content, "Both done.");

        // What went over the wire keeps every result right after its call.
        server.check_tool_pairing().unwrap();
        let last = server.request(3).unwrap();
        assert_eq!(last.tool_names(), ["read_file", "list_dir"]);
        match provider {
            Provider::OpenAi => {
                let roles: Vec<_> = last
                    .messages()
                    .iter()
                    .map(|m| m["role"].as_str().unwrap())
                    .collect();
                assert_eq!(
                    roles,
                    ["user", "assistant", "tool", "assistant", "tool", "tool"]
                );
            }
            Provider::Anthropic => {
                let messages = last.messages();
                assert_eq!(
                    messages.len(),
                    5,
                    "two results merged into one user message"
                );
                assert_eq!(messages[4]["content"].as_array().unwrap().len(), 2);
            }
        }
    }
}

#[tokio::test]
async fn reasoning_is_passed_through_and_sent_back() {
    for (provider, stream) in modes() {
        let (server, model) = server_and_model(
            provider,
            vec![
                Turn::tool_call("read_file", json!({"path": "x"}))
                    .with_reasoning("I should read the file first."),
                Turn::text("ok"),
            ],
            |_| {},
        )
        .await;
        let (result, events) = ask(
            &*model,
            &ChatRequest::new(vec![Message::user("go")]).with_tools(tools()),
            stream,
        )
        .await;
        let response = result.unwrap();
        assert_eq!(
            response.message.reasoning.as_deref(),
            Some("I should read the file first."),
            "{provider} {stream}"
        );
        if stream {
            assert!(
                events
                    .iter()
                    .any(|e| matches!(e, StreamEvent::ReasoningDelta(_)))
            );
        }
        let call_id = response.message.tool_calls[0].id.clone();
        let history = vec![
            Message::user("go"),
            Message::Assistant(response.message),
            Message::tool_result(call_id, "x"),
        ];
        ask(
            &*model,
            &ChatRequest::new(history).with_tools(tools()),
            stream,
        )
        .await
        .0
        .unwrap();
        let sent = &server.request(2).unwrap().body["messages"][1];
        match provider {
            Provider::OpenAi => {
                assert_eq!(sent["reasoning_content"], "I should read the file first.");
            }
            Provider::Anthropic => {
                assert_eq!(sent["content"][0]["type"], "thinking");
                assert_eq!(
                    sent["content"][0]["signature"],
                    "scripted-thinking-signature"
                );
            }
        }
    }
}

#[tokio::test]
async fn retries_after_429_and_5xx_then_succeeds() {
    for (provider, stream) in modes() {
        let (server, model) = server_and_model(
            provider,
            vec![
                Turn::rate_limited(),
                Turn::status(503),
                Turn::text("third time lucky"),
            ],
            |_| {},
        )
        .await;
        let (result, events) = ask(&*model, &hello(), stream).await;
        assert_eq!(
            result.unwrap().message.content,
            "third time lucky",
            "{provider} {stream}"
        );
        assert_eq!(server.requests().len(), 3);
        if stream {
            let retries: Vec<u32> = events
                .iter()
                .filter_map(|e| match e {
                    StreamEvent::Retrying { attempt, .. } => Some(*attempt),
                    _ => None,
                })
                .collect();
            assert_eq!(retries, [2, 3]);
        }
    }
}

#[tokio::test]
async fn retry_after_header_is_honoured() {
    let (server, model) = server_and_model(
        Provider::OpenAi,
        vec![Turn::rate_limited().retry_after(1), Turn::text("ok")],
        |_| {},
    )
    .await;
    let (result, events) = ask(&*model, &hello(), true).await;
    assert_eq!(result.unwrap().message.content, "ok");
    let requests = server.requests();
    let waited = requests[1].received_at.unwrap() - requests[0].received_at.unwrap();
    assert!(
        waited >= Duration::from_millis(950),
        "waited {waited:?}, not the 10 ms backoff"
    );
    assert!(events.iter().any(
        |e| matches!(e, StreamEvent::Retrying { delay, .. } if *delay == Duration::from_secs(1))
    ));
}

#[tokio::test]
async fn gives_up_after_three_tries_with_the_last_error() {
    for (provider, stream) in modes() {
        let (server, model) = server_and_model(
            provider,
            vec![
                Turn::rate_limited(),
                Turn::rate_limited(),
                Turn::rate_limited(),
                Turn::text("never"),
            ],
            |_| {},
        )
        .await;
        let (result, _) = ask(&*model, &hello(), stream).await;
        let error = result.unwrap_err();
        assert_eq!(error.kind(), "rate_limited", "{provider} {stream}: {error}");
        assert!(error.to_string().contains("wait a minute and try again"));
        assert_eq!(server.requests().len(), 3);
        assert_eq!(server.remaining_turns(), 1);
    }
}

#[tokio::test]
async fn a_server_asking_for_too_long_a_wait_is_not_retried() {
    let (server, model) = server_and_model(
        Provider::Anthropic,
        vec![Turn::rate_limited().retry_after(3600), Turn::text("never")],
        |_| {},
    )
    .await;
    let error = ask(&*model, &hello(), false).await.0.unwrap_err();
    assert_eq!(error.retry_after(), Some(Duration::from_secs(3600)));
    assert!(
        error.to_string().contains("the server asks to wait 3600 s"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_dropped_before_content_is_retried() {
    for (provider, stream) in modes() {
        let (server, model) = server_and_model(
            provider,
            vec![Turn::text("lost").drop_after(0), Turn::text("second try")],
            |_| {},
        )
        .await;
        let (result, events) = ask(&*model, &hello(), stream).await;
        assert_eq!(
            result.unwrap().message.content,
            "second try",
            "{provider} {stream}"
        );
        assert_eq!(server.requests().len(), 2);
        assert_eq!(text_of(&events), if stream { "second try" } else { "" });
    }
}

#[tokio::test]
async fn a_stream_dropped_after_content_is_not_retried_and_says_so() {
    for provider in PROVIDERS {
        let (server, model) = server_and_model(
            provider,
            vec![
                Turn::text("one two three four").drop_after(2),
                Turn::text("never"),
            ],
            |_| {},
        )
        .await;
        let (result, events) = ask(&*model, &hello(), true).await;
        let error = result.unwrap_err();
        assert!(
            matches!(
                error,
                LlmError::StreamInterrupted {
                    transient: true,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(!error.is_retryable());
        let text = error.to_string();
        assert!(text.contains("was lost"), "{text}");
        assert!(text.contains("not retried"), "{text}");
        assert_eq!(text_of(&events), "one two ", "what arrived was delivered");
        assert_eq!(server.requests().len(), 1, "{provider}");
    }
}

#[tokio::test]
async fn an_error_event_inside_the_stream_is_classified() {
    for provider in PROVIDERS {
        // Before any content: a transient error, retried.
        let (server, model) = server_and_model(
            provider,
            vec![
                Turn::text("x").stream_error(ErrorKind::Overloaded),
                Turn::text("fine"),
            ],
            |_| {},
        )
        .await;
        let (result, _) = ask(&*model, &hello(), true).await;
        assert_eq!(result.unwrap().message.content, "fine", "{provider}");
        assert_eq!(server.requests().len(), 2);
        // After content: reported.
        let (_server, model) = server_and_model(
            provider,
            vec![
                Turn::text("a b c")
                    .drop_after(1)
                    .stream_error(ErrorKind::Overloaded),
            ],
            |_| {},
        )
        .await;
        let error = ask(&*model, &hello(), true).await.0.unwrap_err();
        assert!(
            matches!(error, LlmError::StreamInterrupted { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("failed"), "{error}");
    }
}

#[tokio::test]
async fn bad_key_is_an_auth_error_naming_the_variable() {
    for (provider, stream) in modes() {
        let (server, model) = server_and_model(
            provider,
            vec![Turn::unauthorized(), Turn::text("never")],
            |_| {},
        )
        .await;
        let error = ask(&*model, &hello(), stream).await.0.unwrap_err();
        let LlmError::Auth {
            status, key_env, ..
        } = &error
        else {
            panic!("{provider} {stream}: {error:?}");
        };
        assert_eq!(*status, 401);
        assert_eq!(key_env, provider.default_key_env());
        assert!(
            error
                .to_string()
                .contains(&format!("check that {key_env} holds a valid key"))
        );
        assert_eq!(server.requests().len(), 1, "never retried");
    }
}

#[tokio::test]
async fn full_context_is_recognised_and_not_retried() {
    for (provider, stream) in modes() {
        let (server, model) = server_and_model(
            provider,
            vec![Turn::context_too_long(), Turn::text("never")],
            |_| {},
        )
        .await;
        let error = ask(&*model, &hello(), stream).await.0.unwrap_err();
        assert!(
            matches!(error, LlmError::ContextTooLong { .. }),
            "{provider} {stream}: {error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("the model's context window is full")
        );
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn quota_and_unknown_model_are_not_retried() {
    for provider in PROVIDERS {
        let (server, model) = server_and_model(
            provider,
            vec![
                Turn::error(ErrorKind::Quota),
                Turn::error(ErrorKind::NotFound),
            ],
            |_| {},
        )
        .await;
        assert_eq!(
            ask(&*model, &hello(), false).await.0.unwrap_err().kind(),
            "quota_exceeded"
        );
        let error = ask(&*model, &hello(), false).await.0.unwrap_err();
        assert_eq!(error.kind(), "rejected");
        assert!(
            error
                .to_string()
                .contains("check the model name (ENGRAM_MODEL)")
        );
        assert_eq!(server.requests().len(), 2);
    }
}

#[tokio::test]
async fn malformed_responses_are_reported_not_retried() {
    for (provider, stream) in modes() {
        let (server, model) = server_and_model(
            provider,
            vec![Turn::malformed(), Turn::text("never")],
            |_| {},
        )
        .await;
        let error = ask(&*model, &hello(), stream).await.0.unwrap_err();
        assert!(
            matches!(error, LlmError::MalformedResponse { .. }),
            "{provider} {stream}: {error:?}"
        );
        assert!(error.to_string().contains("could not be understood"));
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let fast_fail = |c: &mut ClientConfig| {
        c.timeouts.idle = Duration::from_millis(150);
        c.timeouts.request = Duration::from_millis(300);
        c.retry = RetryPolicy::never();
    };
    for (provider, stream) in modes() {
        let (_server, model) = server_and_model(
            provider,
            vec![Turn::text("late").delay(Duration::from_secs(2))],
            fast_fail,
        )
        .await;
        let error = ask(&*model, &hello(), stream).await.0.unwrap_err();
        assert!(
            matches!(
                error,
                LlmError::Network {
                    failure: NetworkFailure::Timeout,
                    ..
                }
            ),
            "{provider} {stream}: {error:?}"
        );
        assert!(error.is_retryable());
    }
    // A stream that goes quiet midway.
    let (_server, model) = server_and_model(
        Provider::OpenAi,
        vec![
            Turn::text("a b c")
                .chunk_delay(Duration::from_millis(100))
                .drop_after(5),
        ],
        |c| {
            c.timeouts.idle = Duration::from_millis(400);
            c.retry = RetryPolicy::never();
        },
    )
    .await;
    // Chunks 100 ms apart are within the idle limit: the answer arrives (then the drop).
    let error = ask(&*model, &hello(), true).await.0.unwrap_err();
    assert!(error.to_string().contains("was lost"), "{error}");
    let (_server, model) = server_and_model(
        Provider::Anthropic,
        vec![Turn::text("a b c").chunk_delay(Duration::from_millis(300))],
        |c| {
            c.timeouts.idle = Duration::from_millis(150);
            c.retry = RetryPolicy::never();
        },
    )
    .await;
    let error = ask(&*model, &hello(), true).await.0.unwrap_err();
    assert!(
        matches!(
            error,
            LlmError::Network {
                failure: NetworkFailure::Timeout,
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_closed_port_is_a_connection_error_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut config =
        ClientConfig::new(Provider::OpenAi, "m", format!("http://127.0.0.1:{port}/v1"));
    config.retry.base_delay = Duration::from_millis(5);
    let model = engram_llm::build(config).unwrap();
    let started = std::time::Instant::now();
    let error = ask(&*model, &hello(), true).await.0.unwrap_err();
    assert!(
        matches!(
            error,
            LlmError::Network {
                failure: NetworkFailure::Connect,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with(&format!("could not connect to http://127.0.0.1:{port}/v1")),
        "{error}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(15),
        "two backoffs: 5 + 10 ms"
    );
}

#[tokio::test]
async fn openai_quirks_of_other_servers_are_tolerated() {
    let quirky = Quirks {
        omit_tool_call_ids: true,
        whole_arguments: true,
        no_done: true,
        usage_in_finish_chunk: true,
        reasoning_field_named_reasoning: true,
        ignore_stream: false,
    };
    let (server, model) = server_and_model(
        Provider::OpenAi,
        vec![
            Turn::tool_calls([
                ScriptedCall::new("read_file", json!({"path": "a"})),
                ScriptedCall::new("list_dir", json!({})),
            ])
            .with_reasoning("thinking")
            .usage(7, 3)
            .finish_reason("stop")
            .quirks(quirky.clone()),
            Turn::text("plain json").quirks(Quirks {
                ignore_stream: true,
                ..Quirks::default()
            }),
        ],
        |c| c.stream_usage = false,
    )
    .await;
    let (result, _) = ask(&*model, &hello(), true).await;
    let response = result.unwrap();
    let calls = &response.message.tool_calls;
    assert_eq!(calls.len(), 2);
    assert!(
        calls.iter().all(|c| c.id.starts_with("call_")),
        "ids generated"
    );
    assert_ne!(calls[0].id, calls[1].id);
    assert_eq!(calls[0].arguments, r#"{"path":"a"}"#);
    assert_eq!(response.message.reasoning.as_deref(), Some("thinking"));
    assert_eq!(response.usage.total(), 10);
    assert_eq!(
        response.finish_reason,
        FinishReason::ToolCalls,
        "\"stop\" with calls"
    );
    assert!(
        server
            .request(1)
            .unwrap()
            .body
            .get("stream_options")
            .is_none()
    );

    let (result, events) = ask(&*model, &hello(), true).await;
    assert_eq!(result.unwrap().message.content, "plain json");
    assert_eq!(
        text_of(&events),
        "plain json",
        "a JSON answer still reaches the sink"
    );
}

#[tokio::test]
async fn malformed_tool_arguments_reach_the_caller_intact() {
    for (provider, stream) in modes() {
        let (_server, model) = server_and_model(
            provider,
            vec![Turn::tool_calls([
                ScriptedCall::raw("read_file", "{'path': 'a.txt',"),
                ScriptedCall::raw("list_dir", "not json at all"),
            ])],
            |_| {},
        )
        .await;
        let response = ask(&*model, &hello(), stream).await.0.unwrap();
        let calls = &response.message.tool_calls;
        assert_eq!(
            calls[0].parse_arguments().unwrap(),
            json!({"path": "a.txt"}),
            "{provider} {stream}: repaired"
        );
        let error = calls[1].parse_arguments().unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("the tool arguments are not a valid JSON object")
        );
    }
}

#[tokio::test]
async fn headers_carry_the_key_and_version() {
    let (server, model) = server_and_model(Provider::OpenAi, vec![Turn::text("a")], |_| {}).await;
    ask(&*model, &hello(), false).await.0.unwrap();
    let r = server.request(1).unwrap();
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {SCRIPTED_KEY}").as_str())
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("user-agent").unwrap().starts_with("engram/"));

    let (server, model) =
        server_and_model(Provider::Anthropic, vec![Turn::text("a")], |_| {}).await;
    ask(&*model, &hello(), false).await.0.unwrap();
    let r = server.request(1).unwrap();
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some(SCRIPTED_KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("authorization"), None);

    // A local server without a key gets no credentials at all.
    let (server, model) = server_and_model(Provider::OpenAi, vec![Turn::text("a")], |c| {
        c.api_key = None
    })
    .await;
    ask(&*model, &hello(), false).await.0.unwrap();
    assert_eq!(server.request(1).unwrap().header("authorization"), None);
}

#[tokio::test]
async fn orphan_tool_results_are_refused_like_the_real_apis() {
    for provider in PROVIDERS {
        let (server, model) = server_and_model(provider, vec![Turn::text("unused")], |_| {}).await;
        let history = vec![Message::user("hi"), Message::tool_result("ghost", "boo")];
        let error = ask(&*model, &ChatRequest::new(history), false)
            .await
            .0
            .unwrap_err();
        assert_eq!(error.kind(), "rejected", "{provider}: {error}");
        assert!(error.to_string().contains("ghost"), "{error}");
        assert!(server.check_tool_pairing().is_err());
        assert_eq!(
            server.remaining_turns(),
            1,
            "a refused request uses no turn"
        );
    }
}

#[tokio::test]
async fn an_exhausted_script_fails_loudly() {
    let (_server, model) = server_and_model(Provider::OpenAi, vec![], |_| {}).await;
    let error = ask(&*model, &hello(), false).await.0.unwrap_err();
    assert!(
        error.to_string().contains("no turn left for request 1"),
        "{error}"
    );
}

#[tokio::test]
async fn json_mode_and_request_settings_reach_the_wire() {
    let (server, model) = server_and_model(Provider::OpenAi, vec![Turn::text("{}")], |c| {
        c.max_tokens = Some(100);
        c.temperature = Some(0.5);
    })
    .await;
    let request = hello().json_object().with_max_tokens(50);
    ask(&*model, &request, false).await.0.unwrap();
    let body = server.request(1).unwrap().body;
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(
        body["max_tokens"], 50,
        "the request overrides the configured default"
    );
    assert_eq!(body["temperature"], 0.5);
}

#[tokio::test]
async fn from_config_reads_the_environment() {
    let server = ScriptedServer::start(vec![Turn::text("configured")])
        .await
        .unwrap();
    let base = server.anthropic_base_url();
    let env = move |name: &str| match name {
        "ENGRAM_PROVIDER" => Some("anthropic".to_string()),
        "ENGRAM_MODEL" => Some("claude-test".to_string()),
        "ANTHROPIC_BASE_URL" => Some(base.clone()),
        "ANTHROPIC_API_KEY" => Some("k-123".to_string()),
        _ => None,
    };
    let model = engram_llm::from_config(&engram_llm::LlmConfig::default(), &env).unwrap();
    assert_eq!(model.info().provider, "anthropic");
    assert_eq!(model.info().model, "claude-test");
    let response = model.chat(&hello()).await.unwrap();
    assert_eq!(response.message.content, "configured");
    let r = server.request(1).unwrap();
    assert_eq!(r.header("x-api-key"), Some("k-123"));
    assert_eq!(r.body["model"], "claude-test");
}

#[tokio::test]
async fn many_deltas_stream_in_order_with_server_timestamps() {
    for provider in PROVIDERS {
        let (server, model) =
            server_and_model(provider, vec![Turn::stream_deltas(500)], |_| {}).await;
        let (result, events) = ask(&*model, &hello(), true).await;
        let response = result.unwrap();
        let deltas: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas.len(), 500);
        assert_eq!(deltas[499], "t499 ");
        assert_eq!(response.message.content, deltas.concat());
        let record = server.request(1).unwrap();
        assert!(record.sent_at.len() > 500, "every frame is timed");
        assert!(record.sent_at.windows(2).all(|w| w[0] <= w[1]));
        assert!(record.service_time().is_some());
    }
}

#[tokio::test]
async fn cancelling_a_stream_by_dropping_it_leaves_the_client_usable() {
    let (server, model) = server_and_model(
        Provider::OpenAi,
        vec![
            Turn::text("a b c d e f").chunk_delay(Duration::from_millis(200)),
            Turn::text("next"),
        ],
        |_| {},
    )
    .await;
    let mut sink = |_: &StreamEvent| {};
    let request = hello();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        model.chat_stream(&request, &mut sink),
    )
    .await;
    assert!(cancelled.is_err(), "still streaming when cancelled");
    let response = model.chat(&hello()).await.unwrap();
    assert_eq!(response.message.content, "next");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_reply_without_tools_and_an_empty_assistant_turn_are_sent_sensibly() {
    // An assistant message with neither text nor calls is dropped for Anthropic (it rejects
    // empty content) and sent as "" to OpenAI.
    for provider in PROVIDERS {
        let (server, model) = server_and_model(provider, vec![Turn::text("ok")], |_| {}).await;
        let history = vec![
            Message::user("a"),
            Message::Assistant(AssistantMessage::default()),
            Message::user("b"),
        ];
        ask(&*model, &ChatRequest::new(history), false)
            .await
            .0
            .unwrap();
        let messages = server.request(1).unwrap().body["messages"].clone();
        match provider {
            Provider::OpenAi => {
                assert_eq!(messages[1], json!({"role": "assistant", "content": ""}))
            }
            Provider::Anthropic => {
                assert_eq!(messages.as_array().unwrap().len(), 1);
                assert_eq!(
                    messages[0]["content"],
                    json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
                );
            }
        }
    }
}
