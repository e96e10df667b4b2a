//! `tessera`: the command-line tool of the Tessera compiler toolchain.
//!
//! Each subcommand lives in its own module under `cli/`; this file only parses
//! arguments and maps outcomes to the documented exit codes.

mod cli;

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(cli::EXIT_USAGE)
        }
    }
}

/// A reader that stops early (`tessera … | head`) closes standard output;
/// printing then fails. That ends the command quietly with success, as
/// other command-line tools do, instead of reporting a crash. Every other
/// panic is reported as before.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}
