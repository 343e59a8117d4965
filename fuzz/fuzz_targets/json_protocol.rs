//! The tool-call JSON protocol ({"thought", "tool", "params"}) for models without native tools.
#![no_main]

use engram_core::llm::json_protocol::{ProtocolAction, parse_reply, render_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let reply = parse_reply(text);
    if let ProtocolAction::Tool { name, params } = &reply.action {
        assert!(params.is_object(), "tool {name}: params must be an object: {params}");
    }
    // The model's turn goes back into its history as `render_reply`: read again, it says the
    // same thing.
    let rendered = render_reply(&reply);
    let again = parse_reply(&rendered);
    assert_eq!(again.thought, reply.thought, "{rendered}");
    match (&again.action, &reply.action) {
        (ProtocolAction::Tool { name, params }, ProtocolAction::Tool { name: n, params: p }) => {
            assert_eq!(name, n, "{rendered}");
            assert!(engram_fuzz::same_json(params, p), "{rendered}");
        }
        (again, first) => assert_eq!(again, first, "{rendered}"),
    }
});
