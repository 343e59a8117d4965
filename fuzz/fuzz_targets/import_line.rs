//! One line of an import file (`engram import`, `POST /v1/import`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = engram_core::import::parse_import_line(data, None);
    if let Ok(memory) = engram_core::import::parse_import_line(data, Some("fallback")) {
        // What a line is accepted as is a memory the store accepts.
        assert!(memory.validate().is_ok(), "accepted but invalid: {memory:?}");
    }
});
