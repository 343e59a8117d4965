//! One line of an import file (`engram import`, `POST /v1/import`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(reason) = engram_core::import::parse_import_line(data, None) {
        // Shown as `line N: <reason>` on a terminal: one line, no escape sequences.
        assert!(
            !reason.is_empty() && !reason.chars().any(char::is_control),
            "{reason:?}"
        );
    }
    if let Ok(memory) = engram_core::import::parse_import_line(data, Some("fallback")) {
        // What a line is accepted as is a memory the store accepts.
        assert!(memory.validate().is_ok(), "accepted but invalid: {memory:?}");
    }
});
