//! `tessera`: the command-line tool of the Tessera compiler toolchain.
//!
//! Each subcommand lives in its own module under `cli/`; this file only parses
//! arguments and maps outcomes to the documented exit codes.

mod cli;

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(cli::EXIT_USAGE)
        }
    }
}
