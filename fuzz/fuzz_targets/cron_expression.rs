//! Cron expressions (`engram cron add --cron`, the cron tool).
#![no_main]

use engram_agent::scheduler::cron::CronExpr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(cron) = CronExpr::parse(text) else {
        return;
    };
    // An accepted expression can match: the next run is found (and found quickly: libFuzzer
    // reports a slow input as a timeout).
    let now = engram_fuzz::now();
    for zone in engram_fuzz::zones() {
        let next = cron.next_after(now, &zone);
        assert!(next.is_some(), "{text:?} was accepted but never runs");
        if let Some(next) = next {
            assert!(next > now, "{text:?}: {next} is not after {now}");
        }
    }
});
