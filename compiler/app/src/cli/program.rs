//! `tessera asm` and `tessera disasm`: between assembly text and program files.

use super::{EXIT_ERRORS, EXIT_OK, TargetArgs};
use anyhow::Context as _;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `tessera asm`.
#[derive(Debug, Args)]
pub struct AsmArgs {
    /// Assembly file: one bundle per line, instructions separated by `||`, directives `.input`, `.output`, `.data`.
    file: PathBuf,
    #[command(flatten)]
    target: TargetArgs,
    /// Where to write the program.
    #[arg(short, long, value_name = "PROG.tsr")]
    output: PathBuf,
}

/// Assembles a file into a program.
pub fn asm(args: &AsmArgs) -> anyhow::Result<ExitCode> {
    let (t, machine) = args.target.resolve()?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    match isa_specs::assembly::assemble(t.isa(), &machine, &args.file.display().to_string(), &text)
    {
        Ok(program) => {
            program
                .save(&args.output)
                .with_context(|| format!("cannot write {}", args.output.display()))?;
            eprintln!(
                "{}: {} words for `{}` written to {}",
                args.file.display(),
                program.code.len() / isa_specs::target::word_bytes(&machine),
                machine.name,
                args.output.display()
            );
            Ok(ExitCode::from(EXIT_OK))
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("error: {e}");
            }
            eprintln!("{}: {} error(s)", args.file.display(), errors.len());
            Ok(ExitCode::from(EXIT_ERRORS))
        }
    }
}

/// Arguments of `tessera disasm`.
#[derive(Debug, Args)]
pub struct DisasmArgs {
    /// Program file.
    program: PathBuf,
    /// Override parameters the program was built with (must match the program's).
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = super::parse_set)]
    set: Vec<(String, i64)>,
}

/// Prints a program as assembly that `tessera asm` reads back.
pub fn disasm(args: &DisasmArgs) -> anyhow::Result<ExitCode> {
    let Some((program, t, machine)) = super::open_program(&args.program, &args.set)? else {
        return Ok(ExitCode::from(EXIT_ERRORS));
    };
    match isa_specs::assembly::disassemble(t.isa(), &machine, &program) {
        Ok(text) => {
            print!("{text}");
            Ok(ExitCode::from(EXIT_OK))
        }
        Err(e) => {
            eprintln!("error: {}: {e}", args.program.display());
            Ok(ExitCode::from(EXIT_ERRORS))
        }
    }
}
