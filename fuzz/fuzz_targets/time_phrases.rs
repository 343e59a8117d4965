//! Times (`--at`, `since`, import fields), durations (`--expires`, `--every`), and the time
//! phrases search reads in queries ("last week", "in May").
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let now = engram_fuzz::now();
    for zone in engram_fuzz::zones() {
        let _ = engram_core::time::parse_time(text, now, &zone);
        if let Some(window) = engram_memory::when::time_window(text, now, &zone) {
            assert!(window.since <= window.until, "{text:?}: {window:?}");
        }
    }
    let _ = engram_core::time::parse_duration(text);
});
