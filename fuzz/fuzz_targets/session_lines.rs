//! Session files (JSONL): any text, torn lines included, is read without a panic, and every
//! line is either a record or reported as skipped.
#![no_main]

use engram_memory::session::parse_records;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let parsed = parse_records(text);
    let lines = text.split('\n').filter(|l| !l.trim().is_empty()).count();
    assert!(parsed.records.len() + parsed.skipped.len() <= lines);
});
