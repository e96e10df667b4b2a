//! `tessera dse`: design-space exploration over hardware variants ([`tessera::dse`]).

use super::{EXIT_ERRORS, EXIT_OK};
use clap::{Args, Subcommand, ValueEnum};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use tessera::dse::{self, Objective, Record, Results, Sweep};

/// What `--objective` minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ObjectiveArg {
    /// Seconds per inference, summed over the models.
    #[default]
    Latency,
    /// Joules per inference.
    Energy,
    /// Energy × latency.
    Edp,
    /// Inferences per second (the inverse of latency).
    Throughput,
}

impl ObjectiveArg {
    fn get(self) -> Objective {
        match self {
            ObjectiveArg::Latency => Objective::Latency,
            ObjectiveArg::Energy => Objective::Energy,
            ObjectiveArg::Edp => Objective::Edp,
            ObjectiveArg::Throughput => Objective::Throughput,
        }
    }
}

/// Arguments of `tessera dse`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DseArgs {
    #[command(subcommand)]
    merge: Option<DseCommand>,
    /// The sweep file (RON; see `targets/variants/`).
    sweep: Option<PathBuf>,
    /// A model to evaluate every variant on (repeatable).
    #[arg(long = "model", value_name = "M.onnx")]
    models: Vec<PathBuf>,
    /// What the report ranks by.
    #[arg(long, value_enum, default_value_t)]
    objective: ObjectiveArg,
    /// Pairs evaluated at once (default: the machine's cores).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Output folder: results.jsonl (one line per pair, as each finishes;
    /// rerunning resumes from it), results.csv, results.json, report.md.
    #[arg(short, long, value_name = "DIR", default_value = "dse-out")]
    output: PathBuf,
    /// Run only the pairs whose index is I modulo N (`--shard 0/4`); merge
    /// the folders afterwards with `tessera dse merge`.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    shard: Option<(usize, usize)>,
    /// Print the variants (after the constraints) and exit.
    #[arg(long)]
    list: bool,
    /// No progress line.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Subcommand)]
enum DseCommand {
    /// Combine the results of shard folders into one folder and its reports
    /// (the same report a single run gives).
    Merge {
        /// The shard folders.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        /// Where the merged results and reports go.
        #[arg(short, long, value_name = "DIR")]
        output: PathBuf,
        #[arg(long, value_enum, default_value_t)]
        objective: ObjectiveArg,
        /// The models of the sweep, to simulate the Pareto front in full as a
        /// single run does (repeatable).
        #[arg(long = "model", value_name = "M.onnx")]
        models: Vec<PathBuf>,
    },
}

fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let (i, n) = s.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
    let (i, n): (usize, usize) = (
        i.parse().map_err(|_| "I is not a number")?,
        n.parse().map_err(|_| "N is not a number")?,
    );
    if n == 0 || i >= n {
        return Err(format!("shard {i}/{n}: I must be below N"));
    }
    Ok((i, n))
}

/// `tessera dse`.
pub fn run(args: &DseArgs) -> anyhow::Result<ExitCode> {
    if let Some(DseCommand::Merge {
        shards,
        output,
        objective,
        models,
    }) = &args.merge
    {
        let Some(graphs) = load(models)? else {
            return Ok(ExitCode::from(EXIT_ERRORS));
        };
        return merge(shards, output, objective.get(), &graphs);
    }
    let Some(path) = &args.sweep else {
        anyhow::bail!("a sweep file is needed: `tessera dse SWEEP.ron --model M.onnx`");
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let expanded = match Sweep::parse(&text).and_then(|s| s.expand()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {}:{e}", path.display());
            return Ok(ExitCode::from(EXIT_ERRORS));
        }
    };
    if args.list {
        for v in &expanded.variants {
            println!("{}", v.id);
        }
        for (c, n) in &expanded.filtered {
            eprintln!("constraint `{c}` removed {n} variant(s)");
        }
        return Ok(ExitCode::from(EXIT_OK));
    }
    if args.models.is_empty() {
        anyhow::bail!("no model: give at least one --model M.onnx");
    }
    let Some(graphs) = load(&args.models)? else {
        return Ok(ExitCode::from(EXIT_ERRORS));
    };
    std::fs::create_dir_all(&args.output)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", args.output.display()))?;
    let mut results =
        Results::open(&args.output.join("results.jsonl")).map_err(|e| anyhow::anyhow!(e))?;
    let done = results.done();
    // Pairs in a fixed order; the shard's slice; those not done yet.
    let pairs: Vec<(usize, usize)> = (0..expanded.variants.len())
        .flat_map(|v| (0..graphs.len()).map(move |g| (v, g)))
        .enumerate()
        .filter(|(k, _)| args.shard.is_none_or(|(i, n)| k % n == i))
        .map(|(_, p)| p)
        .filter(|(v, g)| !done.contains(&(expanded.variants[*v].id.clone(), graphs[*g].0.clone())))
        .collect();
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let total = pairs.len();
    let started = std::time::Instant::now();
    let show = !args.quiet && std::io::stderr().is_terminal();
    let bar = if show {
        indicatif::ProgressBar::new(total as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} pairs, {per_sec}, {eta} left {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<Record>();
    let mut written = 0usize;
    let mut failure: Option<String> = None;
    std::thread::scope(|s| {
        for _ in 0..jobs.min(total.max(1)) {
            let tx = tx.clone();
            let (pairs, next, variants, graphs) = (&pairs, &next, &expanded.variants, &graphs);
            s.spawn(move || {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(v, g)) = pairs.get(k) else { break };
                    let r = dse::evaluate(&variants[v], &graphs[g].0, &graphs[g].1);
                    if tx.send(r).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for r in rx {
            if failure.is_none()
                && let Err(e) = results.append(r)
            {
                failure = Some(e);
            }
            written += 1;
            bar.inc(1);
        }
    });
    bar.finish_and_clear();
    if let Some(e) = failure {
        anyhow::bail!("{e}");
    }
    let secs = started.elapsed().as_secs_f64();
    let points = dse::report(
        &results.records,
        args.objective.get(),
        &args.output,
        &graphs,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    eprintln!(
        "{written} pair(s) evaluated in {secs:.1} s ({:.0}/min, {jobs} jobs); {} done in all; report in {}",
        written as f64 / secs.max(1e-9) * 60.0,
        results.records.len(),
        args.output.join("report.md").display()
    );
    if let Some(best) = points.first() {
        println!(
            "best: {} ({:.2} µs, {:.2} µJ, {:.2} mm²)",
            best.variant,
            best.seconds * 1e6,
            best.energy_j * 1e6,
            best.area_mm2
        );
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// The models, imported and folded, by their path as given (`None`: an error was printed).
fn load(models: &[PathBuf]) -> anyhow::Result<Option<Vec<(String, compiler::ir::Graph)>>> {
    let mut graphs = Vec::new();
    for m in models {
        let mut g = match compiler::onnx::import_file(m) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("error: {}: {e}", m.display());
                return Ok(None);
            }
        };
        compiler::interp::fold_constants(&mut g);
        graphs.push((m.display().to_string(), g));
    }
    Ok(Some(graphs))
}

fn merge(
    shards: &[PathBuf],
    output: &PathBuf,
    objective: Objective,
    graphs: &[(String, compiler::ir::Graph)],
) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(output)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", output.display()))?;
    let target = output.join("results.jsonl");
    let _ = std::fs::remove_file(&target);
    let mut merged = Results::open(&target).map_err(|e| anyhow::anyhow!(e))?;
    let mut records: Vec<Record> = Vec::new();
    for d in shards {
        let r = Results::open(&d.join("results.jsonl")).map_err(|e| anyhow::anyhow!(e))?;
        records.extend(r.records);
    }
    records.sort_by(|a, b| (&a.variant, &a.model).cmp(&(&b.variant, &b.model)));
    records.dedup_by(|a, b| a.variant == b.variant && a.model == b.model);
    for r in records {
        merged.append(r).map_err(|e| anyhow::anyhow!(e))?;
    }
    dse::report(&merged.records, objective, output, graphs).map_err(|e| anyhow::anyhow!(e))?;
    eprintln!(
        "{} record(s) merged into {}",
        merged.records.len(),
        output.display()
    );
    Ok(ExitCode::from(EXIT_OK))
}
