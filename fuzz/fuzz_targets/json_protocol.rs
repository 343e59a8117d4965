//! The tool-call JSON protocol ({"thought", "tool", "params"}) for models without native tools.
#![no_main]

use engram_core::llm::json_protocol::{ProtocolAction, parse_reply, render_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let reply = parse_reply(text);
    if let ProtocolAction::Tool { name, params } = &reply.action {
        assert!(params.is_object(), "tool {name}: params must be an object: {params}");
    }
    let _ = parse_reply(&render_reply(&reply));
});
