//! The `engram` command.

// `println!` and `print!` for the whole crate (defined before the modules, so they shadow std's
// everywhere): a standard output the reader has closed (`engram list | head -1`) ends the
// process quietly instead of panicking, and any other write error is one `error:` line.
macro_rules! println {
    () => {
        $crate::output::print_fmt(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::print_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

#[allow(unused_macros)] // not used today; here so a future `print!` gets the same treatment
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::output::print_fmt(format_args!($($arg)*))
    };
}

mod agent_prompt;
mod bench;
mod cli;
mod commands;
mod config;
mod context;
mod exit;
mod home;
mod import;
mod markdown;
mod output;
mod retrieval;
mod turn_printer;

use anyhow::Result;
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::commands::{
    chat, copy, cron, gateway, graph, import_export, mcp, memory, memory_admin, model, onboard,
    reindex, run, search, serve, sessions, skills, token,
};
use crate::context::Context;
use crate::exit::Status;
use crate::home::Home;

fn main() -> std::process::ExitCode {
    settle_kernel_threads();
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code.into(),
        Err(err) => {
            let code = exit::code_for(&err);
            // One line that names the cause; the chain is joined with ": ".
            eprintln!("error: {err:#}");
            code.into()
        }
    }
}

/// Fixes, for the whole process, how many threads the embedding model's kernels use.
///
/// candle works its thread count out again on every matrix product, and on Linux that reads
/// /proc/cpuinfo each time, dozens of times per embedded query, unless `RAYON_NUM_THREADS` is set.
/// This sets it to the count candle would choose (the physical cores) unless the user has. The
/// query embedding of `engram bench hybrid` went from 8.8-9.9 ms to 5.1-5.7 ms (p50, MiniLM).
#[allow(unsafe_code)]
fn settle_kernel_threads() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let threads = num_cpus::get_physical().max(1);
        // SAFETY: called first thing in `main`, before this process starts any other thread, so
        // nothing reads the environment while it changes.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
    }
}

/// Runs the command line, returning the exit status: the commands and the benchmarks are
/// reached from here only, so neither depends on the other.
fn dispatch(cli: Cli) -> Result<Status> {
    let ctx = Context::new(Home::resolve(cli.home)?, cli.json);
    match cli.command {
        Command::Add(args) => memory::add(&ctx, args),
        Command::Import(args) => import_export::import(&ctx, args),
        Command::Export(args) => import_export::export(&ctx, args),
        Command::Search(args) => search::search(&ctx, args),
        Command::List(args) => memory::list(&ctx, args),
        Command::Get(args) => memory::get(&ctx, args),
        Command::Update(args) => memory::update(&ctx, args),
        Command::Invalidate(args) => memory::invalidate(&ctx, args),
        Command::Delete(args) => memory::delete(&ctx, args),
        Command::History(args) => memory::history(&ctx, args),
        Command::Forget(args) => memory::forget(&ctx, args),
        Command::Stats => memory::stats(&ctx),
        Command::Reindex(args) => reindex::reindex(&ctx, args),
        Command::Model(command) => model::run(&ctx, command),
        Command::Chat(args) => chat::chat(&ctx, args),
        Command::Run(args) => run::run(&ctx, args),
        Command::Sessions(command) => sessions::run(&ctx, command),
        Command::Memory(command) => memory_admin::run(&ctx, command),
        Command::Bench(command) => bench::run(&ctx, command),
        Command::Cron(command) => cron::run(&ctx, command),
        Command::Gateway(args) => gateway::run(&ctx, args),
        Command::Skills(command) => skills::run(&ctx, command),
        Command::Onboard(args) => onboard::run(&ctx, args),
        Command::Serve(args) => serve::run(&ctx, args),
        Command::Mcp(args) => mcp::run(&ctx, args),
        Command::Token(command) => token::run(&ctx, command),
        Command::Copy(args) => copy::run(&ctx, args),
        Command::ImportGraph(args) => graph::import_graph(&ctx, args),
    }
}
