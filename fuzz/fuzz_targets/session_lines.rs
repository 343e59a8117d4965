//! Session files (JSONL): any text, torn lines included, is read without a panic, and every
//! line is either a record or reported as skipped.
#![no_main]

use engram_memory::session::parse_records;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let parsed = parse_records(text);
    let lines = text.split('\n').filter(|l| !l.trim().is_empty()).count();
    assert!(parsed.records.len() + parsed.skipped.len() <= lines);
    // Every record read is written back as one line that reads the same.
    for (number, record) in &parsed.records {
        let Ok(line) = record.to_line() else {
            panic!("line {number}: a record read cannot be written: {record:?}");
        };
        assert!(!line.contains('\n'), "line {number} written over several lines");
        let back = engram_memory::session::SessionRecord::from_line(&line);
        assert_eq!(back.as_ref(), Ok(record), "line {number} written as {line}");
    }
});
