//! `tessera check`: load and check description files.

use super::{EXIT_ERRORS, EXIT_OK, Format};
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};
use isa_specs::{Failed, Loaded};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `tessera check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Description files (`.isa`); each is checked with the files it includes.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Override a parameter: `--set sa_rows=64` (repeatable; VALUE may use KiB/MiB/GiB).
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = super::parse_set)]
    set: Vec<(String, i64)>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Also print the checked machine model (on stdout; inside the JSON with `--format json`).
    #[arg(long, value_enum, value_name = "FORMAT")]
    dump: Option<Dump>,
}

/// Serialisation of the machine model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dump {
    /// Rusty Object Notation.
    Ron,
    /// JSON.
    Json,
}

/// Checks each file and prints the results.
pub fn run(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let results: Vec<(PathBuf, Result<Loaded, Failed>)> = args
        .files
        .iter()
        .map(|f| (f.clone(), isa_specs::load_file(f, &args.set)))
        .collect();
    let failed = results.iter().any(|(_, r)| r.is_err());
    match args.format {
        Format::Human => print_human(&results, args.dump)?,
        Format::Json => print_json(&results, args.dump)?,
    }
    Ok(ExitCode::from(if failed { EXIT_ERRORS } else { EXIT_OK }))
}

fn dump_text(machine: &isa_specs::Machine, dump: Dump) -> anyhow::Result<String> {
    Ok(match dump {
        Dump::Ron => ron::ser::to_string_pretty(machine, ron::ser::PrettyConfig::default())
            .context("serialising the model")?,
        Dump::Json => serde_json::to_string_pretty(machine).context("serialising the model")?,
    })
}

fn print_human(
    results: &[(PathBuf, Result<Loaded, Failed>)],
    dump: Option<Dump>,
) -> anyhow::Result<()> {
    let color = if std::io::stderr().is_terminal() {
        ColorChoice::Auto
    } else {
        ColorChoice::Never
    };
    let mut err = StandardStream::stderr(color);
    let (mut errors, mut warnings) = (0, 0);
    for (path, result) in results {
        let (diags, sources) = match result {
            Ok(l) => (&l.warnings, &l.sources),
            Err(f) => (&f.diagnostics, &f.sources),
        };
        diags.render_to(sources, &mut err);
        errors += diags.error_count();
        warnings += diags.warning_count();
        match result {
            Ok(l) => {
                eprintln!(
                    "{}: machine `{}` checked ({} instructions)",
                    path.display(),
                    l.machine.name,
                    l.machine.instructions.len()
                );
                if let Some(d) = dump {
                    println!("{}", dump_text(&l.machine, d)?);
                }
            }
            Err(_) => eprintln!("{}: not usable", path.display()),
        }
    }
    eprintln!(
        "{} file(s): {errors} error(s), {warnings} warning(s)",
        results.len()
    );
    Ok(())
}

fn print_json(
    results: &[(PathBuf, Result<Loaded, Failed>)],
    dump: Option<Dump>,
) -> anyhow::Result<()> {
    let mut files = Vec::new();
    for (path, result) in results {
        let (diags, sources) = match result {
            Ok(l) => (&l.warnings, &l.sources),
            Err(f) => (&f.diagnostics, &f.sources),
        };
        let mut entry = serde_json::json!({
            "file": path.display().to_string(),
            "ok": result.is_ok(),
            "errors": diags.error_count(),
            "warnings": diags.warning_count(),
            "diagnostics": diags.to_json(sources),
            "files_read": sources.files().map(|(_, f)| f.name.clone()).collect::<Vec<_>>(),
        });
        if let Ok(l) = result {
            entry["machine"] = serde_json::Value::String(l.machine.name.clone());
            if let Some(d) = dump {
                entry["model"] = match d {
                    Dump::Json => serde_json::to_value(&l.machine)?,
                    Dump::Ron => serde_json::Value::String(dump_text(&l.machine, d)?),
                };
            }
        }
        files.push(entry);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({ "files": files }))?
    );
    Ok(())
}
