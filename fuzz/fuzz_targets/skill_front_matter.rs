//! A SKILL.md file: YAML front matter (or the `metadata` JSON other agents use) and its body.
#![no_main]

use engram_agent::skills::{Probe, SkillSource, parse_skill};
use libfuzzer_sys::fuzz_target;

/// Nothing is installed: requirements are checked, not looked up.
struct Nothing;

impl Probe for Nothing {
    fn has_command(&self, _: &str) -> bool {
        false
    }
    fn has_env(&self, _: &str) -> bool {
        false
    }
}

fuzz_target!(|text: &str| {
    let _ = parse_skill("fuzzed", text, SkillSource::Builtin, &Nothing);
});
