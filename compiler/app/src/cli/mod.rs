//! Argument definitions and dispatch for `tessera`.

mod bench;
mod check;
mod compile;
mod dse;
mod program;
mod sim;
mod targets;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

/// Success (warnings allowed).
pub const EXIT_OK: u8 = 0;
/// The input has errors (diagnostics were printed).
pub const EXIT_ERRORS: u8 = 1;
/// The command line was wrong, or a file could not be written.
pub const EXIT_USAGE: u8 = 2;

const EXIT_CODES: &str = "\
Exit codes:
  0  success (warnings allowed)
  1  the input has errors; diagnostics were printed
  2  usage error: bad arguments, unknown target, output not writable";

/// Tessera: a retargetable compiler generator for ML inference accelerators.
///
/// Architects describe a machine in a `.isa` file; tessera checks it, compiles
/// ONNX models for it, and runs them on the machine's generated simulator.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check architecture description files and report every problem found.
    #[command(after_help = EXIT_CODES)]
    Check(check::CheckArgs),
    /// List the machines shipped with tessera.
    #[command(after_help = EXIT_CODES)]
    Targets(targets::TargetsArgs),
    /// Assemble a program for a target into a program file (.tsr).
    #[command(after_help = EXIT_CODES)]
    Asm(program::AsmArgs),
    /// Print a program file as assembly.
    #[command(after_help = EXIT_CODES)]
    Disasm(program::DisasmArgs),
    /// Run a program on the target's generated simulator: cycles, utilisation, traffic, energy.
    #[command(after_help = SIM_EXIT_CODES)]
    Sim(sim::SimArgs),
    /// Write a target's ISA reference manual (Markdown and HTML).
    #[command(after_help = EXIT_CODES)]
    Doc(sim::DocArgs),
    /// Compile an ONNX model into a program for a target; print any stage (--emit).
    #[command(after_help = COMPILE_EXIT_CODES)]
    Compile(compile::CompileArgs),
    /// Compile an ONNX model, run it on the target's simulator, and check the outputs
    /// against the reference interpreter (and expected outputs, when given).
    #[command(after_help = RUN_EXIT_CODES)]
    Run(compile::RunArgs),
    /// Compile and run a bundled example model on the default target (no arguments needed).
    #[command(after_help = RUN_EXIT_CODES)]
    Demo(compile::DemoArgs),
    /// Run the performance regression suite: workloads × targets, with cycles,
    /// roofline, efficiency, compile and simulator time, code size, and the
    /// check against the reference interpreter; JSON to compare runs.
    #[command(after_help = BENCH_EXIT_CODES)]
    Bench(bench::BenchArgs),
    /// Design-space exploration: every variant of a sweep file (parameters,
    /// constraints, alternative machines) on every model, compiled and
    /// simulated timing-only in parallel; results streamed to JSONL (a rerun
    /// resumes), reports (CSV, Markdown, JSON) with the Pareto front and each
    /// parameter's sensitivity; `--shard I/N` and `dse merge` to scale out.
    #[command(after_help = EXIT_CODES)]
    Dse(dse::DseArgs),
}

const COMPILE_EXIT_CODES: &str = "\
Exit codes:
  0  compiled
  1  the model is malformed or uses what the importer does not support (the op,
     node and opset are named), or the target cannot compile it (what it lacks is named)
  2  usage error: bad arguments, unknown target, output not writable";

const RUN_EXIT_CODES: &str = "\
Exit codes:
  0  every output is within tolerance of the reference interpreter
  1  an output is not, or the model does not compile, or the simulation faulted
  2  usage error: bad arguments, unknown target, unreadable test data";

const BENCH_EXIT_CODES: &str = "\
Exit codes:
  0  every pair is ok, refused (a target that cannot compile a workload is
     reported, not a failure) or skipped (--max-bound-cycles), and --compare
     found no regression
  1  a pair's outputs differ from the reference interpreter (or its simulation
     faulted), or --compare found a regression: more than 1% more cycles, or a
     pair that was ok and is mismatched or refused (compile and simulator
     times never fail)
  2  usage error: bad arguments, unknown target, no matching workload,
     unreadable model or JSON, output not writable

Examples:
  tessera bench --list                          the workloads of the small set
  tessera bench --json base.json                every workload on every target
  tessera bench --compare base.json             run again and compare
  tessera bench -t vliw-systolic -w gemm --ablate
  tessera bench --size full --model gpt2_block_full/model.onnx";

const SIM_EXIT_CODES: &str = "\
Exit codes:
  0  the program ran to completion
  1  the program file is unusable or the program faulted (out-of-bounds access,
     illegal encoding, hazard on an exposed pipeline, DMA conflict, deadlock)
  2  usage error: bad arguments, unknown target, output not writable";

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// For people (diagnostics with source excerpts on stderr, colour on terminals).
    #[default]
    Human,
    /// One JSON document on stdout, for scripts and agents.
    Json,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check(args) => check::run(&args),
        Command::Targets(args) => targets::run(&args),
        Command::Asm(args) => program::asm(&args),
        Command::Disasm(args) => program::disasm(&args),
        Command::Sim(args) => sim::sim(&args),
        Command::Doc(args) => sim::doc(&args),
        Command::Compile(args) => compile::compile(&args),
        Command::Run(args) => compile::run(&args),
        Command::Demo(args) => compile::demo(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Dse(args) => dse::run(&args),
    }
}

/// `--target T [--set NAME=VALUE]...`, shared by every command that takes a target.
#[derive(Debug, clap::Args)]
pub struct TargetArgs {
    /// Target machine (see `tessera targets`).
    #[arg(long, short = 't')]
    target: String,
    /// Override a parameter of the target: `--set SRAM_SIZE=16MiB` (repeatable; no rebuild needed).
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
    set: Vec<(String, i64)>,
}

impl TargetArgs {
    /// The target and its machine model with the overrides applied.
    pub fn resolve(&self) -> anyhow::Result<(&'static ::targets::Target, isa_specs::Machine)> {
        let Some(t) = ::targets::by_name(&self.target) else {
            anyhow::bail!(
                "unknown target `{}` (targets: {})",
                self.target,
                ::targets::names().join(", ")
            );
        };
        let machine = t
            .with_params(&self.set)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok((t, machine))
    }
}

/// A program file, its target and the machine it was built for (the program's
/// parameter values unless `set` gives others), or the reason it cannot be used
/// (already printed; the caller exits with [`EXIT_ERRORS`]).
pub fn open_program(
    path: &std::path::Path,
    set: &[(String, i64)],
) -> anyhow::Result<
    Option<(
        isa_specs::program::Program,
        &'static ::targets::Target,
        isa_specs::Machine,
    )>,
> {
    let program = match isa_specs::program::Program::load(path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            return Ok(None);
        }
    };
    let Some(t) = ::targets::by_name(&program.target) else {
        eprintln!(
            "error: {}: built for target `{}`, which this tessera does not have (targets: {})",
            path.display(),
            program.target,
            ::targets::names().join(", ")
        );
        return Ok(None);
    };
    let set = if set.is_empty() {
        program.params.clone()
    } else {
        set.to_vec()
    };
    let machine = t.with_params(&set).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Err(e) = program.check_machine(&machine) {
        eprintln!("error: {}: {e}", path.display());
        return Ok(None);
    }
    Ok(Some((program, t, machine)))
}

/// Parses `--set NAME=VALUE`.
pub fn parse_set(s: &str) -> Result<(String, i64), String> {
    isa_specs::parse_override(s)
}
