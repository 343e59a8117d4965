//! The `engram` command.

mod bench;
mod cli;
mod commands;
mod config;
mod exit;
mod home;
mod output;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(code) => code.into(),
        Err(err) => {
            let code = exit::code_for(&err);
            // One line that names the cause; the chain is joined with ": ".
            eprintln!("error: {err:#}");
            code.into()
        }
    }
}
