//! The model clients' own cost, measured against the scripted server on 127.0.0.1:
//! request round trips (whole and streamed, with a tool call), the client's share of each
//! (round trip minus the server's time), and how long a streamed delta takes from the server
//! handing it over to the caller's sink.
//!
//! ```text
//! cargo run --release -p engram-llm --features scripted --example llm_latency -- [ITERATIONS] [DELTAS]
//! ```
//!
//! This is also a template for `engram bench agent`: the same server records, per request, when
//! it arrived and when each chunk left ([`RecordedRequest`]), so an agent loop's own overhead is
//! its step time minus the model's time.

use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engram_core::llm::{ChatModel, ChatRequest, Message, StreamEvent};
use engram_core::tool::ToolSpec;
use engram_llm::Provider;
use engram_llm::scripted::{
    LatencySummary, RecordedRequest, ScriptedServer, Turn, delta_latencies,
};
use serde_json::json;

fn summary(label: &str, samples: &[Duration]) {
    match LatencySummary::of(samples) {
        Some(s) => println!("  {label:<40} {s}"),
        None => println!("  {label:<40} no samples"),
    }
}

/// The client's share: round trip minus the server's time from arrival to last chunk.
fn client_share(round_trips: &[Duration], records: &[RecordedRequest]) -> Vec<Duration> {
    round_trips
        .iter()
        .zip(records)
        .filter_map(|(rt, r)| Some(rt.saturating_sub(r.service_time()?)))
        .collect()
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![
        Message::system("You are a benchmark."),
        Message::user("Read the file."),
    ])
    .with_tools(vec![ToolSpec {
        name: "read_file".into(),
        description: "Reads a file.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }])
}

async fn measure(
    provider: Provider,
    iterations: usize,
    deltas: usize,
) -> Result<(), Box<dyn Error>> {
    println!("{provider}:");
    let request = request();

    // Whole answers.
    let turn = Turn::text("Hello there, this is a short answer.");
    let server = ScriptedServer::start(vec![turn; iterations + 1]).await?;
    let model = engram_llm::build(server.client_config(provider))?;
    model.chat(&request).await?; // warms the connection pool
    let mut round_trips = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        model.chat(&request).await?;
        round_trips.push(started.elapsed());
    }
    let records = &server.requests()[1..];
    summary("whole answer, round trip", &round_trips);
    summary(
        "whole answer, client share",
        &client_share(&round_trips, records),
    );

    // Streamed tool calls.
    let turn =
        Turn::tool_call("read_file", json!({"path": "notes.txt"})).with_text("Let me read it.");
    let server = ScriptedServer::start(vec![turn; iterations + 1]).await?;
    let model = engram_llm::build(server.client_config(provider))?;
    model.chat_stream(&request, &mut |_| {}).await?;
    let mut round_trips = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        model.chat_stream(&request, &mut |_| {}).await?;
        round_trips.push(started.elapsed());
    }
    let records = &server.requests()[1..];
    summary("streamed tool call, round trip", &round_trips);
    summary(
        "streamed tool call, client share",
        &client_share(&round_trips, records),
    );

    // Delta latency, server hand-over to the sink: paced like a (very fast) model, and
    // unpaced, where deltas queue behind each other and the figure measures throughput.
    for (label, pace) in [
        ("paced 1 ms", Some(Duration::from_millis(1))),
        ("unpaced", None),
    ] {
        let mut turn = Turn::stream_deltas(deltas);
        if let Some(pace) = pace {
            turn = turn.chunk_delay(pace);
        }
        let server = ScriptedServer::start(vec![turn]).await?;
        let model: Arc<dyn ChatModel> = engram_llm::build(server.client_config(provider))?;
        let arrivals = Mutex::new(Vec::with_capacity(deltas));
        let mut sink = |event: &StreamEvent| {
            if matches!(event, StreamEvent::TextDelta(_)) {
                arrivals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Instant::now());
            }
        };
        let started = Instant::now();
        model.chat_stream(&request, &mut sink).await?;
        let elapsed = started.elapsed();
        let record = server.request(1).ok_or("the server saw no request")?;
        let arrivals = arrivals.into_inner().unwrap_or_else(|e| e.into_inner());
        summary(
            &format!("{deltas} deltas {label}, server->sink"),
            &delta_latencies(&record, &arrivals),
        );
        if pace.is_none() {
            println!(
                "  {:<40} {:.0} deltas/s",
                "stream throughput",
                deltas as f64 / elapsed.as_secs_f64()
            );
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let iterations: usize = args.next().map_or(Ok(300), |a| a.parse())?;
    let deltas: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        for provider in [Provider::OpenAi, Provider::Anthropic] {
            measure(provider, iterations, deltas).await?;
        }
        Ok(())
    })
}
