//! The scheduler over this home's store, as `engram cron`, `engram gateway` and the agent's
//! cron tool open it.

use std::sync::Arc;

use anyhow::Result;
use engram_agent::scheduler::{Scheduler, SchedulerConfig};
use engram_core::SystemClock;

use crate::config::Config;
use crate::context::Context;

/// The `[scheduler]` section of ENGRAM_HOME/config.toml (defaults if the file or the section
/// is missing). A file that does not parse is an error naming it; it is never rewritten.
pub fn scheduler_config(ctx: &Context) -> Result<SchedulerConfig> {
    Config::load(ctx.home.dir())?.section::<SchedulerConfig>("scheduler")
}

/// The scheduler over this home's database, with the configured default zone.
pub fn open_scheduler(ctx: &Context) -> Result<Scheduler> {
    let config = scheduler_config(ctx)?;
    Ok(Scheduler::new(
        ctx.backend()?.jobs,
        Arc::new(SystemClock),
        config.timezone,
    ))
}
