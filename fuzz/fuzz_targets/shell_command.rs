//! The bash tool's deny check, over commands a model (or an injected prompt) writes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|command: &str| {
    let _ = engram_agent::tools::check_deny_list(command);
    let _ = engram_agent::tools::check_deny_list_in(command, std::path::Path::new("/home/u/ws"));
});
