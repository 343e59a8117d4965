//! The lenient JSON reader for what models write.
#![no_main]

use engram_core::llm::lenient_json;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|text: &str| {
    let lenient = lenient_json::parse(text);
    if let Ok(value) = &lenient {
        // What the repair makes is JSON that reads back (it is logged and reloaded).
        let reread = serde_json::from_str::<Value>(&value.to_string());
        assert!(
            reread.as_ref().is_ok_and(|r| engram_fuzz::same_json(r, value)),
            "{value} read back as {reread:?}"
        );
    }
    if let Ok((_, used)) = lenient_json::parse_prefix(text) {
        assert!(used <= text.len() && text.is_char_boundary(used), "{used}");
    }
    let _ = lenient_json::extract_object(text);
    let _ = lenient_json::strip_code_fence(text);
    if let Ok(arguments) = lenient_json::parse_arguments(text) {
        assert!(arguments.is_object(), "arguments must be an object: {arguments}");
    }
    // Valid JSON is read exactly as JSON.
    if let Ok(strict) = serde_json::from_str::<Value>(text) {
        assert_eq!(lenient.ok(), Some(strict));
    }
});
