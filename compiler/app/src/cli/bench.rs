//! `tessera bench`: the performance regression suite ([`tessera::bench`]).

use super::compile::OptArgs;
use super::{EXIT_ERRORS, EXIT_OK};
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tessera::bench::{self, BenchReport, Size, Workload};

/// Which set of workloads (`--size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum SizeArg {
    /// GEMMs 64³ and 128³, a 3×3 and a depthwise convolution at 16×16, and the bundled examples but the slowest (what CI runs; seconds).
    #[default]
    Small,
    /// GEMMs 64³ to 1024³, ResNet's and MobileNet's convolutions at their sizes, and every bundled example (minutes).
    Full,
}

/// Which suite (`--suite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum SuiteArg {
    /// The bundled examples and synthetic GEMMs (performance regressions).
    #[default]
    Examples,
    /// Real exported models (`scripts/real_models.py` writes them into
    /// `--real-dir`), checked against onnxruntime's outputs.
    Real,
}

/// Arguments of `tessera bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The suite to run.
    #[arg(long, value_enum, default_value_t)]
    suite: SuiteArg,
    /// Where the real models are (with `--suite real`).
    #[arg(long, value_name = "DIR", default_value = "target/real-models")]
    real_dir: PathBuf,
    /// The set of workloads.
    #[arg(long, value_enum, default_value_t)]
    size: SizeArg,
    /// Run on this target only (repeatable; default: every target).
    #[arg(long = "target", short = 't', value_name = "NAME")]
    targets: Vec<String>,
    /// Run only the workloads whose name contains this (repeatable: any of them).
    #[arg(long = "workload", short = 'w', value_name = "SUBSTRING")]
    workloads: Vec<String>,
    /// Add an ONNX model to the set, e.g. the full-size GPT-2 block (repeatable).
    #[arg(long = "model", value_name = "PATH")]
    models: Vec<PathBuf>,
    /// The examples folder (default: `examples/` in the current directory or
    /// the nearest ancestor that has one).
    #[arg(long, value_name = "DIR")]
    examples: Option<PathBuf>,
    /// Print the workloads of the set (after --workload filtering) and exit.
    #[arg(long)]
    list: bool,
    /// Also run each pair with each optimisation off in turn, and report
    /// cycles(off) / cycles(on) per optimisation.
    #[arg(long)]
    ablate: bool,
    /// Also tune each pair's matrix-product mappings on the timing-only
    /// simulator (as `tessera compile --tune`, this many seconds per pair at
    /// most) and report cycles(default) / cycles(tuned), checking the tuned
    /// program's outputs too.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "10")]
    tune: Option<f64>,
    /// Skip (status `skipped`) a synthetic GEMM on a target where its
    /// compute bound (MACs / peak MACs per cycle) exceeds this many cycles:
    /// on a narrow machine its code alone would take gigabytes.
    #[arg(long, value_name = "CYCLES", default_value_t = bench::DEFAULT_MAX_BOUND_CYCLES)]
    max_bound_cycles: u64,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Compare with an earlier `--json` file: per pair, the ratio new / old of
    /// cycles and of compile time; more than 1% more cycles, or a pair no
    /// longer `ok`, is a regression.
    #[arg(long, value_name = "OLD.json")]
    compare: Option<PathBuf>,
    /// With --compare: compare this stored file instead of running the suite.
    #[arg(long, value_name = "NEW.json", requires = "compare")]
    new: Option<PathBuf>,
    #[command(flatten)]
    opts: OptArgs,
}

fn read_report(path: &std::path::Path) -> anyhow::Result<BenchReport> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    BenchReport::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// `tessera bench`.
pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let old = args.compare.as_deref().map(read_report).transpose()?;
    if let (Some(old), Some(new)) = (&old, &args.new) {
        let new = read_report(new)?;
        let c = bench::compare(old, &new);
        print!("{}", bench::human_comparison(&c));
        return Ok(ExitCode::from(if c.regressed() {
            EXIT_ERRORS
        } else {
            EXIT_OK
        }));
    }
    let size = match args.size {
        SizeArg::Small => Size::Small,
        SizeArg::Full => Size::Full,
    };
    let examples = match &args.examples {
        Some(d) => {
            if bench::example_models(d).is_empty() {
                anyhow::bail!("{}: no `*/model.onnx` in this folder", d.display());
            }
            Some(d.clone())
        }
        None => {
            let here = std::env::current_dir()?;
            let found = bench::find_examples(&here)
                .map(|d| d.strip_prefix(&here).map(PathBuf::from).unwrap_or(d));
            if found.is_none() {
                eprintln!(
                    "note: no examples folder here or above (give --examples DIR); \
                     running the synthetic workloads only"
                );
            }
            found
        }
    };
    for m in &args.models {
        if !m.is_file() {
            anyhow::bail!("{}: no such model file", m.display());
        }
    }
    let all = match args.suite {
        SuiteArg::Examples => bench::workloads(size, examples.as_deref(), &args.models),
        SuiteArg::Real => {
            let v = bench::real_models(&args.real_dir);
            if v.is_empty() {
                anyhow::bail!(
                    "{}: no real models (write them with `python3 scripts/real_models.py {}`)",
                    args.real_dir.display(),
                    args.real_dir.display()
                );
            }
            v
        }
    };
    let workloads: Vec<Workload> = all
        .into_iter()
        .filter(|w| {
            args.workloads.is_empty() || args.workloads.iter().any(|s| w.name.contains(s.as_str()))
        })
        .collect();
    if workloads.is_empty() {
        anyhow::bail!(
            "no workload of the {size} set matches {} (see `tessera bench --list`)",
            args.workloads.join(", ")
        );
    }
    if args.list {
        let rows: Vec<Vec<String>> = workloads
            .iter()
            .map(|w| vec![w.name.clone(), w.describe()])
            .collect();
        print!(
            "{}",
            bench::columns(&["workload", "source"], &rows, &[false, false])
        );
        return Ok(ExitCode::from(EXIT_OK));
    }
    let targets: Vec<&'static ::targets::Target> = if args.targets.is_empty() {
        ::targets::all().iter().collect()
    } else {
        args.targets
            .iter()
            .map(|n| {
                ::targets::by_name(n).ok_or_else(|| {
                    anyhow::anyhow!(
                        "unknown target `{n}` (targets: {})",
                        ::targets::names().join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    // Fail before the run, not after it, when the results cannot be written.
    let json = args
        .json
        .as_ref()
        .map(|p| {
            std::fs::File::create(p)
                .map(|f| (p, f))
                .with_context(|| format!("cannot write {}", p.display()))
        })
        .transpose()?;
    let terminal = std::io::stderr().is_terminal();
    let start = Instant::now();
    let settings = bench::Settings {
        size,
        options: args.opts.options(),
        ablate: args.ablate,
        tune: args.tune.map(|secs| tessera::tune::Budget {
            time: std::time::Duration::from_secs_f64(secs.max(0.0)),
            ..tessera::tune::Budget::default()
        }),
        max_bound_cycles: args.max_bound_cycles,
    };
    let report = bench::run_suite(&workloads, &targets, &settings, |i, n, w, t| {
        if terminal {
            eprint!("\r\x1b[K[{}/{n}] {w} on {t}", i + 1);
            let _ = std::io::stderr().flush();
        }
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    if terminal {
        eprint!("\r\x1b[K");
    }
    print!("{}", bench::human(&report));
    println!(
        "{} pair(s) in {:.1} s",
        report.results.len(),
        start.elapsed().as_secs_f64()
    );
    if let Some((path, mut file)) = json {
        serde_json::to_writer_pretty(&mut file, &report)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(file))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut failed = report.any_mismatch();
    if let Some(old) = &old {
        println!();
        let c = bench::compare(old, &report);
        print!("{}", bench::human_comparison(&c));
        failed |= c.regressed();
    }
    Ok(ExitCode::from(if failed { EXIT_ERRORS } else { EXIT_OK }))
}
