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
